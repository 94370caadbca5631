"""doctor's thread-count what-if against reality: a Go service whose requests fan out
(workloads/fanout) runs under a quota below its width; doctor watches it and predicts its
throttling with one thread per CPU of quota ("threads K (not N)"); then the same service runs
with GOMAXPROCS=K and its throttled periods are counted, unwatched (the kernel's counters, read
at either end). Also each run's request latency (p50, p99), as it is and with K threads.

    .venv/bin/python benchmarks/threads_whatif.py [REPS] [SECONDS]   (root; default 3 x 20 s)

Environment: FANOUT_RPS (requests/s, default 60), FANOUT_PERIOD_US (default 100000),
FANOUT_QUOTA_US (default: one CPU of that period), THREADS_WHATIF_KEEP (a directory: each rep's
doctor JSON and its saved trace kept there). Rep r runs seed r; the work per part is
calibrated once and given to every run (-rounds). One JSON line per rep, then a summary line.
On a quiet machine.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bwlab import cgroup, cpustat, threads  # noqa: E402
from bwlab.targets import host  # noqa: E402

sys.path.insert(0, str(ROOT / "tests"))
import fanout_service  # noqa: E402
import prereqs  # noqa: E402

PERIOD_US = int(os.environ.get("FANOUT_PERIOD_US", "100000"))
QUOTA_US = int(os.environ.get("FANOUT_QUOTA_US", str(PERIOD_US)))  # one CPU
LOAD = ["-rps", os.environ.get("FANOUT_RPS", "60"), "-fanout", "4", "-work_us", "3500"]  # 60/s: 0.84 CPU on average


def build(tmp: Path) -> Path:
    go = prereqs.which("go")
    if go is None:
        raise SystemExit("threads_whatif: needs go")
    out = tmp / "fanout"
    built = fanout_service.build(go, out)
    if built.returncode != 0:
        raise SystemExit(f"threads_whatif: go build failed: {built.stderr.strip()[-400:]}")
    return out


def serve(fanout: Path, grp: cgroup.Group, width: int, seconds: float, seed: int,
          rounds: int) -> subprocess.Popen[bytes]:  # fmt: skip
    env = {**os.environ, "GOMAXPROCS": str(width)}
    argv = [str(fanout), *LOAD, "-seconds", f"{seconds:g}", "-seed", str(seed), "-rounds", str(rounds)]
    return subprocess.Popen(argv, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=host.joiner(grp.procs_files), start_new_session=True)  # fmt: skip


def one(fanout: Path, seconds: float, rep: int, tmp: Path, rounds: int) -> dict[str, object]:
    hier = cgroup.detect()
    ncpu = len(os.sched_getaffinity(0))
    with hier.group(cgroup.unique_name(f"threads-whatif-r{rep}"), PERIOD_US, QUOTA_US, 0, None) as grp:
        proc = serve(fanout, grp, ncpu, seconds + 8, rep, rounds)  # doctor's unwatched read first (<= 5 s), its watch
        try:
            out = tmp / f"doctor-{rep}.json"
            keep = os.environ.get("THREADS_WHATIF_KEEP")  # a directory: doctor's trace of each rep kept there
            save = ["--save-trace", str(Path(keep) / f"wide-{rep}.jsonl")] if keep else []
            res = subprocess.run([sys.executable, "-m", "bwlab.cli", "doctor", str(grp.stat_file.parent), "--seconds",
                                  f"{seconds:g}", "--json", str(out), *save], capture_output=True, text=True,
                                 timeout=seconds + 600)  # fmt: skip
            wide, _ = proc.communicate(timeout=seconds + 60)
        finally:
            host.kill_group(proc)
        if res.returncode != 0:
            raise SystemExit(f"doctor failed: {res.stderr.strip()[-400:]}")
        doc = json.loads(out.read_text())
        if keep:
            (Path(keep) / f"doctor-{rep}.json").write_text(out.read_text())
    predicted = {p["setting"]: p for p in doc["predictions"]}
    row = next((s for s in predicted if s.startswith("threads ")), None)
    if row is None:
        threads = doc["facts"]["threads"]
        raise SystemExit(f"doctor offered no thread-count what-if: {sorted(predicted)} (threads {threads})")
    k = int(row.split()[1])
    with hier.group(cgroup.unique_name(f"threads-whatif-k-r{rep}"), PERIOD_US, QUOTA_US, 0, None) as grp:
        quiet = float(doc["unwatched"]["seconds"])
        proc = serve(fanout, grp, k, seconds + quiet + 2, rep, rounds)
        try:
            time.sleep(quiet + 0.5)  # the arrivals doctor watched (after its unwatched read)
            before, ran0 = grp.read_stat(), _ran(proc.pid)
            time.sleep(seconds)
            delta, ran1 = cpustat.delta(before, grp.read_stat()), _ran(proc.pid)
            narrow, _ = proc.communicate(timeout=60)
        finally:
            host.kill_group(proc)
    measured = 100 * delta["nr_throttled"] / max(1, delta["nr_periods"])
    spent = sorted((ran1[t] - ran0.get(t, 0)) / 1e9 for t in ran1)  # CPU-s by thread in the window
    return {"rep": rep, "threads": doc["facts"]["threads"], "k": k, "unwatched_pct": doc["unwatched"],
            "watched_pct": round(100 * doc["throttled"] / max(1, doc["periods"]), 2),
            "as_it_is_pct": round(predicted["as it is"]["throttled_pct"], 2),
            "predicted_k_pct": round(predicted[row]["throttled_pct"], 2), "measured_k_pct": round(measured, 2),
            "narrow_busiest_cpu_s": round(spent[-1], 3) if spent else 0.0,
            "narrow_others_cpu_s": round(sum(spent[:-1]), 3), "narrow_threads": len(spent),
            "wide": json.loads(wide), "narrow": json.loads(narrow)}  # fmt: skip


def _ran(pid: int) -> dict[int, int]:
    """ns on a CPU of each thread of `pid` (schedstat), by thread ID."""
    ran = {int(t.name): threads.read_schedstat(int(t.name)) for t in Path(f"/proc/{pid}/task").iterdir()}
    return {tid: read[0] for tid, read in ran.items() if read is not None}


def main() -> None:
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 20.0
    rows = []
    with tempfile.TemporaryDirectory(prefix="bwlab-threads-whatif-") as tmp:
        fanout = build(Path(tmp))
        rounds = fanout_service.calibrate(fanout, LOAD)
        for rep in range(reps):
            row = one(fanout, seconds, rep, Path(tmp), rounds)
            print(json.dumps(row), flush=True)
            rows.append(row)
    pred = [float(r["predicted_k_pct"]) for r in rows]  # type: ignore[arg-type]
    meas = [float(r["measured_k_pct"]) for r in rows]  # type: ignore[arg-type]
    print(json.dumps({"summary": {"predicted_k_pct_median": statistics.median(pred),
                                  "measured_k_pct_median": statistics.median(meas), "reps": reps}}))  # fmt: skip


if __name__ == "__main__":
    main()
