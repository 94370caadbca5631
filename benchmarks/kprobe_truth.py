"""doctor --ebpf in a lab guest (tracepoint demand, the kernel's state by kprobes) against
ftrace's truth on wakelat's bursts: the below-quota-bursts scenario's cases, each run in a
group of its own with the lab's trace side action (schedtrace.Ftrace: its own tracefs
instance) on from before the workload's first process, and doctor watching the group beside
it. Each of doctor's throttled periods is weighed again on ftrace's demand over the same
boundaries, against the line doctor weighed (quota + burst, 10 % over): precision and recall
of *below quota*, by throttled period as the lab's truth metrics count them; and the kernel's
causes by doctor's verdict.

Run in a host-userland guest (the layout for the kprobes is passed there), on a quiet machine:
  bwlab guest exec --kernel KEY --accel tcg -- .venv/bin/python benchmarks/kprobe_truth.py CASE RUNS SECONDS
CASE: 10ms or 100ms. One JSON line a run, then the pooled counts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bwlab import cgroup, scenario, schedtrace
from bwlab.targets import host
from bwlab.workloads import programs


def one(spec: scenario.RunSpec, seconds: float, rep: int) -> dict[str, object]:
    hier = cgroup.detect()
    name = cgroup.unique_name(f"kprobe-truth-{spec.case}-r{rep}")
    program = str(spec.workload.files.get(spec.workload.argv[0]) or programs.resolve(spec.workload.argv[0]))
    with (
        hier.group(name, spec.period_us, spec.quota_us, spec.burst_us, spec.cpus, spec.depth) as grp,
        schedtrace.Ftrace(name) as trace,
        tempfile.TemporaryDirectory(prefix="bwlab-kprobe-truth-") as tmp,
    ):
        # as the host target starts a workload: into the group, then named in the trace, before exec
        proc = subprocess.Popen([program, *spec.workload.args(str(grp.leaves[0]), rep)], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                preexec_fn=host.joiner(grp.procs_files, trace), start_new_session=True)  # fmt: skip
        try:
            time.sleep(1.0)  # its workers started
            out = Path(tmp) / "doctor.json"
            res = subprocess.run([sys.executable, "-m", "bwlab.cli", "doctor", str(grp.stat_file.parent),
                                  "--seconds", str(seconds), "--ebpf", "--no-predict", "--json", str(out)],
                                 capture_output=True, text=True, timeout=seconds + 300)  # fmt: skip
        finally:
            host.kill_group(proc)
        text = trace.text()
        if res.returncode != 0:
            raise SystemExit(f"doctor failed: {res.stderr.strip()[-300:]}")
        doc = json.loads(out.read_text())
    truth = schedtrace.parse_ftrace(text)
    if truth.lost:
        raise SystemExit(f"ftrace dropped {truth.lost} events: no truth")
    truly = called = both = 0
    for p in doc["per_period"]:
        if not p["throttled"]:
            continue
        below = truth.demand_us(p["start"], p["end"], spec.ncpu) <= p["line_us"]
        truly += p["throttled"] * below
        called += p["throttled"] * (p["verdict"] == "below")
        both += p["throttled"] * (below and p["verdict"] == "below")
    state = doc.get("kernel_state") or {}
    return {"case": spec.case, "rep": rep, "periods": doc["periods"], "throttled": doc["throttled"], "truly": truly,
            "called": called, "both": both, "kprobe_throttles": state.get("throttles"),
            "causes": state.get("by_verdict")}  # fmt: skip


def main() -> None:
    if len(sys.argv) != 4:
        raise SystemExit("usage: kprobe_truth.py CASE RUNS SECONDS")
    case, runs, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    sc = scenario.load(scenario.builtin_path("below-quota-bursts"), {"duration_s": seconds + 30})
    specs = [s for s in sc.resolve(os.cpu_count() or 1) if s.case == case]
    if not specs:
        raise SystemExit(f"no case {case} in below-quota-bursts")
    total = {"truly": 0, "called": 0, "both": 0, "throttled": 0}
    for rep in range(runs):
        row = one(specs[0], seconds, rep)
        print(json.dumps(row), flush=True)
        for key in total:
            value = row[key]
            assert isinstance(value, int)
            total[key] += value
    recall = total["both"] / total["truly"] if total["truly"] else None
    precision = total["both"] / total["called"] if total["called"] else None
    print(json.dumps({"pooled": total, "recall": recall, "precision": precision}))


if __name__ == "__main__":
    main()
