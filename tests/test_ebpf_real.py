"""bwlab doctor --ebpf on real cgroups of the running kernel, and the polling detector checked
against it.

The eBPF mode (bwlab/live/ebpf.py) traces the period timer's expiries and the group's threads'
wakeups and sleeps: each period's demand (what the threads ran plus what they were stopped
from running) is measured, not estimated. Contracts:

- it measures what the workloads are known to want: sysbench with as many threads as the
  quota's CPUs wants the quota in every period (every throttle below quota); with twice as
  many, twice the quota (every throttle real);
- it is the truth for workloads whose demand is not known per period: wakelat's Poisson
  bursts of 50 ms requests, the `burst` scenario's shape (quota 0.875 x CPUs per 100 ms,
  15 workers per CPU) and one at a 10 ms period with a 1-CPU quota, each traced for 30 s until
  20 truly below-quota periods are pooled (4 runs at most); over the pooled periods polling
  calls periods of over-use so (>= 90 %), its estimate of each period's demand is close to the
  traced one (90th percentile within 3 % of the quota at 100 ms, 15 % at 10 ms), what it calls
  below quota is (at most 15 % of the calls wrong, four however few), and it finds the truly
  below-quota ones at a recall whose binomial floor at p = 0.75 fails once in 200
  (docs/results.md, Live tools, 2026-11-24: 98 of 109 at 100 ms over sixteen runs, 157 of 163
  at 10 ms over ten).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bwlab import schedtrace
from bwlab.workloads import programs

from conftest import binomial_floor, bwlab, needs_root, running_in_group, tracefs_state

pytestmark = needs_root()

NCPU = len(os.sched_getaffinity(0))


@pytest.fixture(scope="module", autouse=True)
def bpftrace() -> None:
    """bpftrace (scripts/setup.sh --tests installs it); doctor mounts tracefs for its trace if it must."""
    if shutil.which("bpftrace") is None:
        pytest.fail("bpftrace is missing: scripts/setup.sh --tests installs it")


def test_the_ebpf_mode_mounts_tracefs_for_its_trace_only() -> None:
    """A machine whose init does not mount tracefs (this one's, and many containers' hosts):
    `doctor --ebpf` mounts it for its trace, traces, and leaves it unmounted. tracefs, if it was
    mounted, is unmounted for the test and mounted again after it."""
    was = tracefs_state()[0]
    if was:
        subprocess.run(["umount", str(schedtrace.TRACEFS)], check=True)
    try:
        with running(10_000, 5_000, sysbench(1)) as path:
            doc = traced_doctor(path, 1)
        assert throttled_periods(doc), doc["throttled"]
        assert not tracefs_state()[0]
    finally:
        if was and not tracefs_state()[0]:
            schedtrace.TracefsMount("the test")  # never released: as it was found


@contextlib.contextmanager
def running(period_us: int, quota_us: int, argv: list[str]) -> Iterator[str]:
    """`argv` in a fresh group with this limit; yields the group's path for bwlab."""
    with running_in_group("ebpf", period_us, quota_us, argv) as grp:
        yield "/" + grp.name


def traced_doctor(path: str, seconds: float) -> dict[str, object]:
    """doctor --ebpf's JSON. Run once: bpftrace that had not printed its trace 60 s after it
    was stopped (2 of about 40 runs of the 10 ms case on 2026-11-26, one in CI, and the CI of
    stop 45) was a stop bpftrace lost, and is told again now (ebpf.Tracer.stop)."""
    argv = ("doctor", path, "--seconds", str(seconds), "--ebpf", "--no-predict", "--json", "-")
    proc = bwlab(*argv, timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert isinstance(doc, dict) and doc["sampling"]["traced"] is True
    return doc


def throttled_periods(doc: dict[str, object]) -> list[dict[str, object]]:
    periods = doc["per_period"]
    assert isinstance(periods, list)
    return [p for p in periods if p["throttled"] and p["periods"] == 1]


RUNS = 4  # traced runs of a case at most, until it has 30 throttled periods
UNTRACED_MAX = 0.03  # of a case's boundaries: 0-5 of ~300 in 40 cases (docs/testing.md)


def grid_lateness(doc: dict[str, object], period_us: int) -> tuple[list[float], int]:
    """How late (us) each traced boundary came after its place on the period timer's grid,
    and how many boundaries were not traced (placed by the counters' fitted phase: an expiry
    the tracer lost; their place is not the timer's and they are left out),
    the grid laid by the kernel's own count: nr_periods advances by the timer's overrun at each
    expiry (hrtimer_forward_now), so consecutive boundaries are as many periods apart as the
    row between them counted, plus how much later the second fired than the first. A timer
    never fires early: the least late boundary is on its grid point. Every row counts a period
    at least (a boundary made up would end a row the kernel counted none in); boundaries
    taken from another timer, or counts that do not match, scatter over the period.

    (Four first versions placed the grid from the boundaries alone, and each mistook single
    expiries up to 9.8 ms late for an early or a missing boundary: docs/testing.md. The
    "all 0.25 ms late but one" seen then was this function's own error until 2026-11-28: the
    one was a boundary doctor had estimated, not traced, and anchored the grid; untraced
    boundaries are left out since, and every case's latest boundary came 0.01-0.32 ms late.)"""
    rows = doc["per_period"]
    assert isinstance(rows, list) and rows
    assert all(int(r["periods"]) >= 1 for r in rows), [r for r in rows if int(r["periods"]) < 1][:3]
    slots = [0, *itertools.accumulate(int(r["periods"]) for r in rows)]
    times = [float(rows[0]["start"]) * 1e6] + [float(r["end"]) * 1e6 for r in rows]
    offsets = [t - times[0] - n * period_us for t, n in zip(times, slots, strict=True)]
    # boundary j ends row j - 1 and starts row j: traced where a row beside it has no error
    # (a row's error is its two boundaries' together)
    exact = [any(int(rows[k]["error_us"]) == 0 for k in (j - 1, j) if 0 <= k < len(rows)) for j in range(len(times))]
    kept = [o for o, ok in zip(offsets, exact, strict=True) if ok]
    return [o - min(kept) for o in kept], exact.count(False)


def machine_cpu() -> tuple[float, float]:
    """All CPUs' busy and steal time so far, in seconds (/proc/stat's first line)."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    hz = os.sysconf("SC_CLK_TCK")
    return (user + nice + system + irq + softirq) / hz, steal / hz


def sysbench(threads: int) -> list[str]:
    return [str(programs.resolve("sysbench")), "cpu", f"--threads={threads}", "--time=60", "run"]


def test_traced_demand_is_what_sysbench_wants() -> None:
    """Demand == quota (threads = the quota's CPUs): every throttled period below quota, its
    traced demand the threads' CPUs times the period's length (95 % of them within 2 %, all
    within 5 %); twice the threads: at least 1.8 x the quota over the period's length, at quota.

    The length, not the nominal period: a boundary off the timer's phase stretches one period
    and shortens the next (this VM, 2026-11-24: in one of 25 3-s runs every tenth boundary was
    0.48 ms late, periods of 10.48 then 9.52 ms, demand 1.048 then 0.952 x the quota; in CI one
    period was more than half a period off), and the verdict weighs the quota over the
    stretched window (periods.analyze).

    The boundaries are the period timer's expiries, every one and nothing else: each lies on
    the timer's grid, as the kernel's nr_periods counts lay it, up to its interrupt's lateness
    (grid_lateness). How late this VM's timers fire is the machine's, not bwlab's (the host
    stops its vCPUs for up to 3 ms, DAMON's sampling for up to 1, single expiries came 9.8 ms
    late: docs/testing.md, the flake), so it is printed, and bounded only where boundaries
    off the grid would cross it (95 % within a tenth of a period)."""
    period = 10_000
    for threads, quota_cpus, share, verdict in ((NCPU, NCPU, 1.0, "below"), (NCPU, NCPU / 2, 2.0, "at")):
        quota = round(quota_cpus * period)
        # A sequential sample size, not a second chance: at demand == quota the group throttles
        # only in periods it overruns, and CPU time the machine takes from it (steal, other
        # work) leaves it under its quota and unthrottled: 84-145 throttled periods of ~300 in
        # 20 runs on a quiet machine, 9 in the landing CI of 2026-11-28. Runs of 3 s are traced
        # until 30 throttled periods (at most RUNS); every run's periods are pooled and asserted.
        docs, found, why = [], [], []
        while len(found) < 30 and len(docs) < RUNS:
            with running(period, quota, sysbench(threads)) as path:
                before = machine_cpu()
                doc = traced_doctor(path, 3)
                busy, steal = (b - a for a, b in zip(before, machine_cpu(), strict=True))
            rows = doc["per_period"]
            assert isinstance(rows, list) and rows
            used = sum(float(r["usage_us"]) for r in rows) / (quota * len(rows))
            why.append(f"run {len(docs) + 1}: {len(throttled_periods(doc))} throttled of {len(rows)}, "
                       f"usage {used:.3f} of the quota, machine busy {busy:.2f} s steal {steal:.2f} s")  # fmt: skip
            docs.append(doc)
            found += throttled_periods(doc)
        assert len(found) >= 30, (threads, quota_cpus, why)
        assert all(p["verdict"] == verdict for p in found), [p for p in found if p["verdict"] != verdict][:3]
        # demand over what the threads could run in the period, had nothing stopped them
        shares = [float(p["demand_us"]) / (min(threads, NCPU) * (float(p["end"]) - float(p["start"])) * 1e6)  # type: ignore[arg-type]
                  for p in found]  # fmt: skip
        lengths = [(float(p["end"]) - float(p["start"])) * 1e6 for p in found]  # type: ignore[arg-type]
        off = [round(n) for n in lengths if abs(n - period) > 0.05 * period]
        late: list[float] = []
        untraced = 0
        for doc in docs:  # each run has its own timer and grid
            run_late, run_untraced = grid_lateness(doc, period)
            # on the grid: a boundary taken from another timer or event would land anywhere in
            # the period; a late expiry lands after its place (0.25-9.8 ms on this VM,
            # docs/testing.md)
            assert sum(x <= 0.1 * period for x in run_late) >= 0.95 * len(run_late), sorted(run_late)[-10:]
            # a boundary whose expiry is not in the trace: none within 9 ms of it, the counters'
            # sampler late by 2-4 ms there, at about 1 s apart (0-5 of ~300 boundaries a case,
            # 2026-11-28; no recursion miss counted on the programs; cause not found): doctor
            # places it by the fitted phase and says so (error_us)
            assert run_untraced <= UNTRACED_MAX * (len(run_late) + run_untraced), run_untraced
            late += run_late
            untraced += run_untraced
        near = sum(abs(d - 1) <= 0.02 for d in shares) / len(shares)
        spread = sorted(shares)[:: max(1, len(shares) // 10)]
        # the quantities the bounds are on, one line per case, for their distribution (docs/testing.md)
        print(
            f"traced_demand threads={threads} share={share}: {len(docs)} run(s), throttled {len(found)} of "
            f"{sum(len(d['per_period']) for d in docs)}, "  # type: ignore[arg-type]
            f"off {len(off)}, near {near:.3f}, shares {min(shares):.3f}-{max(shares):.3f}, "
            f"boundaries {len(late)}, untraced {untraced}, late > 0.2 ms {sum(x > 200 for x in late)}, "
            f"> a tenth {sum(x > 0.1 * period for x in late)}, max late {max(late):.0f} us; {'; '.join(why)}"
        )
        assert near >= 0.95 and all(abs(d - 1) <= 0.05 for d in shares), spread
        if share == 2.0:
            # over the quota for the period's length: a period cut short by a late timer before it
            # holds less demand (CI, 2026-11-25: 1.72 x the quota, its CPUs' share within 5 % of
            # 1, so about 8.6 ms long)
            demands = [float(p["demand_us"]) / (quota * n / period)  # type: ignore[arg-type]
                       for p, n in zip(found, lengths, strict=True)]  # fmt: skip
            print(f"traced_demand twice the quota: demand / quota min {min(demands):.3f}")
            assert all(d >= 1.8 for d in demands), sorted(demands)[:5]


def wakelat(workers: int, rps: float) -> list[str]:
    return [str(programs.resolve("wakelat")), "-m", "1", "-t", str(workers), "-r", f"{rps:g}", "-p",
            "-c", "50000", "-S", "100", "-d", "600"]  # fmt: skip


# The recall of "below quota" is asserted on at least this many truly below-quota periods,
# pooled over traced runs (a run has 2 to 25): one run's few made "found >= half where >= 5" fail
# 1 in 30 on its own arithmetic (CI: 3 of 9), where the pooled recall was 0.96.
RECALL_TRUTHS = 20
# traced runs of 30 s at most, until RECALL_TRUTHS: 2-3 runs gave 25-37 here (2026-12-05); fewer
# than RECALL_TRUTHS after all of them fails (the pool is the test's precondition, not a skip)
RECALL_RUNS = 8
# The per-period recall the binomial bound is drawn from. The pooled recalls of 2026-11-24 (98 of
# 109 at 100 ms, 157 of 163 at 10 ms: docs/results.md, Live tools) came before the truth's fix
# of 2026-11-28; the first pooled run since found 30 of 37 at 10 ms (0.81). Until a 20-run
# distribution of the pooled test is recorded (owed, docs/testing.md), the floor is drawn at
# 0.75: at a true 0.81 it fails 20 periods about once in 2,800 (37: once in 5,800).
RECALL_P = 0.75


@pytest.mark.parametrize(
    ("period_us", "quota_cpus", "workers", "rps"),
    [(100_000, 0.875 * NCPU, 15 * NCPU, 12.5 * NCPU), (10_000, 1.0, 16, 8.0)],
    ids=["burst-scenario", "10ms-1cpu"],
)
def test_polling_agrees_with_the_traced_truth_on_bursts(period_us: int, quota_cpus: float, workers: int,
                                                        rps: float) -> None:  # fmt: skip
    quota = round(quota_cpus * period_us)  # no burst
    found: list[dict[str, object]] = []
    docs: list[dict[str, object]] = []
    pooled_below = 0  # truly below-quota periods so far
    for run in range(RECALL_RUNS):
        with running(period_us, quota, wakelat(workers, rps)) as path:
            before = machine_cpu()
            doc = traced_doctor(path, 30)
            busy, steal = (b - a for a, b in zip(before, machine_cpu(), strict=True))
        docs.append(doc)
        mine = throttled_periods(doc)
        found += mine
        below = sum(p["verdict"] == "below" for p in mine)
        pooled_below += below
        sampling = doc["sampling"]
        assert isinstance(sampling, dict)
        # each run's conditions, for a failure to be read by (issue 54): the machine's other work
        # and steal, how many reads the sampler made and its largest boundary error
        print(
            f"run {run}: throttled {len(mine)}, truth below {below}; "
            f"machine busy {busy:.1f} CPU-s, steal {steal:.2f} s; sampler reads {sampling.get('reads')}, "
            f"max boundary error {sampling.get('max_error_us')} us"
        )
        if pooled_below >= RECALL_TRUTHS:
            break
    assert len(found) >= 10, [d["throttled"] for d in docs]  # bursts: 5-38 % of periods throttled in 20 s runs
    pairs = [(p["verdict"] == "below", p["estimated"] == "below") for p in found]
    agree = sum(truth == said for truth, said in pairs) / len(pairs)
    tp = sum(truth and said for truth, said in pairs)
    truths, saids = sum(truth for truth, _ in pairs), sum(said for _, said in pairs)
    # what a failure needs to be read (CI once: 7 of 95 periods of over-use called below, none
    # truly below, where 32 runs here had made 12 such calls in about 2800): the disagreements
    # as (traced demand, estimate) in quotas
    disagree = [(round(float(p["demand_us"]) / quota, 3), round(float(p["estimated_us"]) / quota, 3))  # type: ignore[arg-type]
             for p, (truth, said) in zip(found, pairs, strict=True) if truth != said]  # fmt: skip
    summary = (f"{len(docs)} run(s), {len(pairs)} throttled, truth below {truths}, polling below {saids}, "
               f"both {tp}; disagreeing (demand, estimate) / quota {disagree[:10]}")  # fmt: skip
    # the estimate against the truth, period by period, as a share of the quota: what decides
    # the verdicts, and what the band of periods near the line (the quota plus 10 %, where these
    # bursts put many) does not blur. 32 runs at 100 ms (host 6.18, 2026-11-24): the 90th
    # percentile of |estimate - truth| per run 0.05-1.1 %. At 10 ms, 0.7-5.1 % in 14 runs on
    # 2026-11-24, but 2.1-11.0 % in 12 runs here and 13.5 % once in CI on 2026-11-25 (revision
    # 9bd1116; the cause is not found), with the verdicts agreeing in 98.2-100 % of periods.
    # Pooled over the runs: a pooled percentile lies within the runs' range.
    errors = sorted(abs(float(p["estimated_us"]) - float(p["demand_us"])) / quota for p in found)  # type: ignore[arg-type]
    p90 = errors[int(0.9 * (len(errors) - 1))]
    print(f"{period_us} us, {quota_cpus:g} CPUs: {summary}, agreement {agree:.3f}, p90 error {p90:.4f}")
    assert p90 <= (0.03 if period_us >= 100_000 else 0.15), (summary, p90, errors[-5:])

    # the report counts the periods whose (traced) demand lies within 3 % of the quota of the line
    # (the quota as a rate: a period stretched by a late timer holds that much more of it)
    def capacity(p: dict[str, object]) -> float:
        """The quota a period's row holds: a period stretched by a late timer holds that much more."""
        return max(1.0, (float(p["end"]) - float(p["start"])) * 1e6 / period_us) * quota  # type: ignore[arg-type]

    def near_line(p: dict[str, object]) -> bool | None:
        """The flag as recomputed from the JSON; None at the band's very edge, where the JSON's
        rounding (boundaries to the us, demand to the us) decides (a run here once differed)."""
        fits = capacity(p)
        off = abs(float(p["demand_us"]) - 1.1 * fits)  # type: ignore[arg-type]
        return None if abs(off - 0.03 * fits) <= 1e-4 * fits else off <= 0.03 * fits

    wrong = [(p["demand_us"], p["near_line"]) for p in found if near_line(p) not in (None, p["near_line"])]
    assert not wrong, (quota, wrong)
    for doc in docs:
        per_period = doc["per_period"]
        assert isinstance(per_period, list)
        assert doc["near_line"] == sum(p["throttled"] for p in per_period if p["near_line"])

    # Wrong below calls near the line at most 15 % of the below calls (four allowed however few).
    # Why four: 12 of 243 calls were wrong over 32 runs (5 %, all within 4 % of the line), and a
    # run at 10 ms makes about 24; at 5 % a run has 3 or more wrong once in nine (binomial), 5 or
    # more once in 300; pooled over runs the share only tightens.
    # A wrong below call far over the line (the trace: more than 1.25 of what fits, about two
    # quotas) was taken for polling's blind spot until 2026-11-28, when the samples of three
    # showed one thread running and nothing else wanting: the truth's error, a thread woken
    # twice and asleep counted as wanting (schedtrace.build; docs/testing.md). They had come
    # together in a run: 0-2 in a run alone, 5, 5 and 10 (of 368-515 throttled) in CI runs.
    # At most max(6, 2 %) of the throttled periods stays: re-traced, none is left in six runs.
    # Periods of over-use called so: at least 90 % (two CI runs on 2026-11-25 had 88 of 95 and
    # 77 of 83, the same error in the truth; here 0-2 wrong a run).
    far = sum(said and not truth and float(p["demand_us"]) > 1.25 * capacity(p)  # type: ignore[arg-type]
              for p, (truth, said) in zip(found, pairs, strict=True))  # fmt: skip
    print(f"{period_us} us: wrong below calls {saids - tp}, of them far over the line {far}")
    over_used = [said for truth, said in pairs if not truth]
    assert len(over_used) >= 10 and sum(not said for said in over_used) / len(over_used) >= 0.90, summary
    assert saids - tp - far <= max(4, 0.15 * saids), summary
    assert far <= max(6, 0.02 * len(pairs)), summary
    # The recall of "below quota", pooled: at least the binomial floor of the truly below periods
    # found at the recall measured (RECALL_P), false failure <= 1 in 200.
    floor = binomial_floor(truths, RECALL_P)
    print(f"{period_us} us: below quota found {tp} of {truths} (floor {floor} at p = {RECALL_P})")
    assert truths >= RECALL_TRUTHS, f"only {truths} truly below-quota periods in {len(docs)} runs: {summary}"
    assert tp >= floor, summary


def test_ebpf_without_bpftrace_is_one_line(tmp_path: Path) -> None:
    """No bpftrace on PATH: one line naming it, exit 1."""
    with running(10_000, 10_000, sysbench(1)) as path:
        env = dict(os.environ, PATH=str(tmp_path))
        proc = bwlab("doctor", path, "--seconds", "1", "--ebpf", env=env)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == ["bwlab: error: --ebpf needs bpftrace (Debian: apt install bpftrace)"]


def test_a_bpftrace_that_does_not_finish_is_an_error_not_a_trace(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """bpftrace stopped that has not printed its maps by STOP_TIMEOUT_S: an error saying where
    it was, never the part printed read as a trace (it once said the group wanted nothing);
    tracefs released, no bpftrace left. A fake bpftrace that attaches and ignores every stop."""
    from bwlab.errors import BwlabError
    from bwlab.live import ebpf

    fake = tmp_path / "bpftrace"
    fake.write_text(
        f"#!/bin/sh\ntrap '' INT TERM\necho 'Attaching 4 probes...' > \"$2\"\necho {ebpf.ATTACHED}\nexec sleep 600\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setattr(ebpf, "STOP_TIMEOUT_S", 1.0)
    mounted = tracefs_state()
    tracer = ebpf.Tracer([os.getpid()])
    tracer.wait_attached()
    pid = tracer._proc.pid
    with pytest.raises(BwlabError) as err:
        tracer.stop()
    assert str(err.value).startswith("--ebpf: bpftrace had not printed its trace 1 s after it was stopped (state S")
    assert str(err.value).endswith("bytes printed): no trace"), err.value
    assert not Path(f"/proc/{pid}").exists() and tracefs_state() == mounted


def test_a_stop_bpftrace_lost_is_told_again(tmp_path: Path) -> None:
    """A stop that bpftrace 0.17 loses (ebpf.Tracer.stop) is told again until it prints its
    maps. Real bpftrace, stopped after "Attaching N probes..." and before its probes are
    attached (25-190 ms here): its flag is set before its event loop starts, and the loop
    never reads it, so one SIGINT alone left it looping (in 10 of 10 of these stops, and in 7 of
    120 taken mid-loop beside three busy threads: benchmarks/bpftrace_stop.py, 2026-11-27).
    How often it was told again is printed; either way it ends with a trace, in seconds, and
    nothing left behind."""
    from bwlab.live import ebpf

    mounted = tracefs_state()
    with running_in_group("ebpf", 10_000, 10_000, sysbench(1)) as grp:
        time.sleep(0.2)  # sysbench started
        tracer = ebpf.Tracer(sorted(grp.pids()))
        pid, out = tracer._proc.pid, tracer._out
        deadline = time.monotonic() + ebpf.ATTACH_TIMEOUT_S
        while not (out.is_file() and "Attaching" in out.read_text(errors="replace")):
            assert time.monotonic() < deadline and tracer._proc.poll() is None, "bpftrace did not start"
            time.sleep(0.002)
        started = time.monotonic()
        trace = tracer.stop()
        took = time.monotonic() - started
    print(f"stop right after Attaching: told again {tracer.resent} times, {took:.2f} s")
    assert took < 10, took
    assert not Path(f"/proc/{pid}").exists() and tracefs_state() == mounted
    assert trace is not None
