"""What every target shares: the raw record of one repetition, its metrics, and the result
document a run writes. A target is one module with a `run(scenario, out_dir) -> Path`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from bwlab import cpustat, periods, results, schedtrace, threads
from bwlab.errors import BwlabError
from bwlab.kernel import kselftest
from bwlab.scenario import RunSpec, Scenario
from bwlab.workloads import noise
from bwlab.workloads.base import json_doc

# Besides a workload kind's programs, every target that runs the plan carries the side actions'
# programs (cgwrite, cgsample) and the noise probe.
LAB_PROGRAMS = ("cgwrite", "cgsample", "noise")


class Target(Protocol):
    """Where a scenario runs: the running kernel, a guest, a simulated machine."""

    @property
    def label(self) -> str:
        """Names the run in results and reports: 'host', 'guest-patched-all', 'sim-mainline'."""
        ...

    def run(self, sc: Scenario, out_dir: Path) -> Path:
        """Every case and repetition; writes one result file and returns its path. A failed
        repetition is recorded in the file and raised as a BwlabError after it is written."""
        ...


@dataclass
class RawRep:
    """What a target observed for one repetition, before any interpretation."""

    stat_before: str
    stat_after: str
    wall_s: float
    rc: int
    stdout: str
    stderr: str = ""
    sides: list[str] = field(default_factory=list)
    lock_stat: str = ""  # /proc/lock_stat lines of the probed classes, after the run
    stopped: bool = False  # still running at WorkloadKind.stop_after_s, and stopped

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LockStat:
    """One lock class's totals from /proc/lock_stat (times in microseconds, as it prints them)."""

    contentions: int = 0
    acquisitions: int = 0
    wait_us: float = 0.0  # waittime-total: time spent waiting for the lock
    hold_us: float = 0.0  # holdtime-total: time the lock was held

    def __add__(self, other: LockStat) -> LockStat:
        return LockStat(self.contentions + other.contentions, self.acquisitions + other.acquisitions,
                        self.wait_us + other.wait_us, self.hold_us + other.hold_us)  # fmt: skip


def parse_lock_stat(text: str, classes: tuple[str, ...]) -> dict[str, LockStat]:
    """Totals per class from /proc/lock_stat class lines.

    A class line is 'NAME: con-bounces contentions waittime-min waittime-max waittime-total
    waittime-avg acq-bounces acquisitions holdtime-min holdtime-max holdtime-total
    holdtime-avg'; classes with one name are summed."""
    found: dict[str, LockStat] = {}
    for line in text.splitlines():
        name, sep, rest = line.strip().rpartition(":")
        fields = rest.split()
        if not sep or name not in classes or len(fields) < 11:
            continue
        try:
            stat = LockStat(int(fields[1]), int(fields[7]), float(fields[4]), float(fields[10]))
        except ValueError:
            continue
        found[name] = found.get(name, LockStat()) + stat
    return found


def rep_metrics(spec: RunSpec, raw: RawRep) -> tuple[dict[str, float | None], list[int]]:
    """Metrics of one repetition and its latency samples (empty when it has none)."""
    plugin = spec.workload.plugin
    stop_s = plugin.stop_after_s(spec.workload.resolved, spec.duration_s)
    if not raw.stopped and plugin.exit_is_failure(spec.workload.resolved, raw.rc):  # a stop's signal is no failure
        tail = (raw.stderr or raw.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise BwlabError(f"{spec.workload.argv[0]} exited {raw.rc} in case {spec.case}: {tail[0]}")
    out = cpustat.stat_metrics(cpustat.delta(raw.stat_before, raw.stat_after), raw.wall_s, spec.period_us,
                               spec.quota_us)  # fmt: skip
    out["exit_status"] = float(raw.rc)
    if stop_s is not None:
        out["stopped"] = float(raw.stopped)
    try:
        parsed, samples = plugin.parse(raw.stdout, spec.workload.resolved)
    except BwlabError as exc:
        if not raw.stopped:
            raise
        raise BwlabError(f"{exc} (stopped {stop_s:.0f} s after it started, at the duration: print the line "
                         "on SIGTERM, or set ends_by_itself = true if it ends by itself)") from None  # fmt: skip
    out.update(parsed)
    if spec.lock_classes and raw.lock_stat:
        total = sum(parse_lock_stat(raw.lock_stat, spec.lock_classes).values(), LockStat())
        acq, con = total.acquisitions, total.contentions
        out["lock_acquisitions"], out["lock_contentions"] = float(acq), float(con)
        out["lock_hold_us"], out["lock_wait_us"] = total.hold_us, total.wait_us
        if acq:  # what one acquisition costs: held, and waited for (lock_stat's own clock)
            out["lock_hold_ns_per_acq"] = 1000 * total.hold_us / acq
            out["lock_wait_ns_per_acq"] = 1000 * total.wait_us / acq
        if raw.wall_s > 0:
            out["lock_acq_per_s"], out["lock_con_per_s"] = acq / raw.wall_s, con / raw.wall_s
    traces = [side for side in raw.sides if side.startswith(schedtrace.FTRACE_HEADER)]
    for side in raw.sides:
        match = re.search(r'"writes":(\d+),"errors":(\d+)', side)
        if match:
            out["rewrites"] = float(match.group(1))
            out["rewrite_errors"] = float(match.group(2))
        if side.startswith(SAMPLER_HEADER):
            out.update(sampled_metrics(side, spec, traces[0] if traces else None))
    return out, samples


SAMPLER_HEADER = "cgsample "


# one of cgsample's thread steps: (monotonic s, the group's throttled us, {tid: (run ns, wait ns,
# monotonic s when read)}, monotonic s when the thread list was last read)
Step = tuple[float, float, dict[int, tuple[int, int, float]], float]


def parse_sampler(text: str) -> tuple[float, list[periods.Sample], list[Step]]:
    """cgsample's output: its interval (s), samples (monotonic s, counters, us) and, when it
    stepped the group's threads, the steps."""
    lines = text.strip().splitlines()
    head = lines[0].split() if lines else []
    if len(head) != 2 or head[0] != SAMPLER_HEADER.strip() or not head[1].isdigit():
        raise BwlabError(f"the sample side action's output does not start with its header: {text[:80]!r}")
    out = []
    steps: list[Step] = []
    for n, line in enumerate(lines[1:], 2):
        fields = line.split()
        if fields and fields[0] == "s":
            values = fields[1:]
            if len(values) < 3 or len(values) % 4 != 3 or not all(v.isdigit() for v in values):
                raise BwlabError(f"the sample side action's step on line {n} is not 's T THROTTLED LISTED"
                                 f" (TID RUN WAIT LATE)...': {line[:80]!r}")  # fmt: skip
            nums = [int(v) for v in values]
            t = nums[0] / 1e9
            readings = {nums[i]: (nums[i + 1], nums[i + 2], t + nums[i + 3] / 1e9) for i in range(3, len(nums), 4)}
            steps.append((t, nums[1] / 1000, readings, nums[2] / 1e9))
            continue
        if len(fields) != 6 or not all(f.lstrip("-").isdigit() for f in fields):
            raise BwlabError(f"the sample side action's line {n} is not 6 numbers: {line[:80]!r}")
        t, nr_periods, nr_throttled, throttled_ns, usage_ns, nr_bursts = map(int, fields)
        out.append(periods.Sample(t / 1e9, nr_periods, nr_throttled, throttled_ns / 1000, usage_ns / 1000, nr_bursts))
    return int(head[1]) / 1e6, out, steps


def recorded(steps: list[Step], samples: list[periods.Sample], cpus: int) -> threads.ThreadRecorder | None:
    """cgsample's thread steps in a recorder, as doctor's Stepper would have made them (its
    boundaries: between the reads either side of each), from the step before the first that
    read a thread (the sampler starts before the workload: the periods before it are weighed
    on the counters alone; a thread first seen at a step was born after the list's read
    before it); None without one."""
    first = next((i for i, (_, _, readings, _) in enumerate(steps) if readings), None)
    if first is None:
        return None
    recorder = threads.ThreadRecorder([], cpus)
    listed = None
    for t, throttled_us, readings, listed_at in steps[max(0, first - 1) :]:
        if listed is not None:
            recorder.follow(list(readings), listed)
        recorder.step(t, throttled_us, readings)
        listed = listed_at
    recorder.boundaries = [(a + b) / 2 for a, b in periods.boundary_intervals(samples)]
    return recorder


def sampled_metrics(text: str, spec: RunSpec, trace_text: str | None = None) -> dict[str, float]:
    """The per-period detector (bwlab/periods.py) on the sample side action's counters (and,
    when it stepped the group's threads, what they wanted: doctor's estimate): the periods it
    saw, and of them the throttled ones below quota (unnecessary), as a share of the periods
    and of the throttled ones. With the trace side action's output, each throttled period's
    verdict is also weighed on its traced demand (the truth: schedtrace.py), and the
    detector's precision and recall of *below quota* against it are metrics too: the counts
    (traced_below, below_both), to pool runs, and the ratios where they are defined."""
    interval_s, samples, steps = parse_sampler(text)
    limit = periods.Limit(spec.quota_us, spec.period_us, spec.burst_us)
    cpus = len(spec.cpu_ids)
    recorder = recorded(steps, samples, cpus)
    if recorder is None:
        analysis = periods.analyze(samples, limit, interval_s, cpus)
    else:
        analysis = periods.analyze(samples, limit, interval_s, cpus, recorder.wanted_cpus, recorder.wanted_us)
    out = {"sampled_periods": float(analysis.total)}
    if analysis.total:
        out["below_quota_pct"] = 100 * analysis.below / analysis.total
    if analysis.throttled:
        out["below_quota_share"] = analysis.below / analysis.throttled
    if trace_text is not None:
        out.update(truth_metrics(analysis, samples, schedtrace.parse_ftrace(trace_text), limit, interval_s, cpus))
    return out


def truth_metrics(polled: periods.Analysis, samples: list[periods.Sample], trace: schedtrace.Trace,
                  limit: periods.Limit, interval_s: float, cpus: int) -> dict[str, float]:  # fmt: skip
    """The detector's verdicts (`polled`: as the lab samples them, cgsample's counters and
    thread steps) against the traced truth: the same periods cut at the period timer's traced expiries and weighed
    on the traced demand. Periods are matched by their boundaries' sampled intervals (both
    analyses cut at the same edges of nr_periods, so the lists align). A buffer that dropped
    events has no truth: an error, not a metric."""
    if trace.lost:
        raise BwlabError(f"the trace side action's buffer dropped {trace.lost} events: no ground truth")
    expiries = trace.timer_of(periods.boundary_intervals(samples))
    traced = periods.analyze(samples, limit, interval_s, cpus, boundaries=expiries,
                             demand=lambda a, b: trace.demand_us(a, b, cpus))  # fmt: skip
    # weighed as Analysis.below counts them: by the throttled periods a window holds; `near`:
    # disagreements whose traced demand lies within periods.NEAR of the quota of the line,
    # where the estimate's error of a few percent decides (docs/live.md)
    truly = called = both = near = 0
    for p, t in zip(polled.periods, traced.periods, strict=True):
        truly += p.throttled * (t.verdict == "below")
        called += p.throttled * (p.verdict == "below")
        both += p.throttled * (p.verdict == t.verdict == "below")
        near += p.throttled * (p.verdict != t.verdict and t.near_line)
    out = {"traced_below": float(truly), "below_both": float(both), "traced_timer_hits": float(len(expiries)),
           "disagree_near_line": float(near)}  # fmt: skip
    if truly:
        out["below_recall"] = both / truly
    if called:
        out["below_precision"] = both / called
    return out


def _side_summary(text: str) -> str:
    """A side action's output as a result keeps it: cgsample's and the trace's headers and how
    many lines followed them (left out), the rest as it is."""
    if not text.startswith((SAMPLER_HEADER, schedtrace.FTRACE_HEADER)):
        return text
    head, _, rest = text.partition("\n")
    return f"{head} ({len(rest.splitlines())} lines, left out)"


def stdout_without_samples(stdout: str) -> str:
    """A workload's output with its document's latency samples left out (a result keeps them
    once, as the rep's samples_us); the rest (per-function tables, schedstat) stays readable."""
    try:
        doc = json_doc(stdout, "workload")
    except BwlabError:
        return "(samples_us)"
    doc.pop("samples_us", None)
    return "\n".join([*stdout.strip().splitlines()[:-1], results.compact_json(doc)])


def case_docs(specs: list[RunSpec], raws: Mapping[tuple[int, int], RawRep | str]) -> list[dict[str, Any]]:
    """The result's cases: per repetition its metrics (or why it has none) and raw record;
    a string in `raws` says why a repetition's record is unusable."""
    cases = []
    for ci, spec in enumerate(specs):
        reps = []
        for rep in range(spec.repetitions):
            raw = raws.get((ci, rep))
            if raw is None or isinstance(raw, str):
                reps.append({"rep": rep, "error": raw or "no record (run incomplete)"})
                continue
            try:
                metrics, samples = rep_metrics(spec, raw)
                entry: dict[str, Any] = {"rep": rep, "metrics": metrics}
            except BwlabError as exc:
                entry, samples = {"rep": rep, "error": str(exc)}, []
            if samples:
                entry["samples_us"] = samples
            raw_doc = raw.to_json()
            # the sampler's counters are many (a line a millisecond): its metrics stand for them
            raw_doc["sides"] = [_side_summary(s) for s in raw.sides]
            if samples:
                raw_doc["stdout"] = stdout_without_samples(raw_doc.get("stdout", ""))
            entry["raw"] = raw_doc
            reps.append(entry)
        cases.append({"case": spec.case, "params": spec.params, "settings": spec.settings(), "reps": reps})
    return cases


def machine_noise(outputs: list[str]) -> list[dict[str, Any]]:
    """The noise probes run before and after the cases (RunSpec.noise_s), for the result's
    meta: each one's output, kept whole for the simulator (bwlab validate), and its metrics,
    or why it has none."""
    probes: list[dict[str, Any]] = []
    for stdout in outputs:
        try:
            probes.append({"metrics": noise.parse_noise(stdout), "stdout": stdout})
        except BwlabError as exc:
            probes.append({"error": str(exc), "stdout": stdout[-2000:]})
    return probes


def write_result(out_dir: Path, sc: Scenario, meta: dict[str, Any], status: str,
                 cases: list[dict[str, Any]]) -> Path:  # fmt: skip
    """The one way a scenario's result file is written: SCENARIO-LABEL.json."""
    doc = {"schema": results.SCHEMA, "scenario": sc.name, "description": sc.description,
           "status": status, "meta": meta, "cases": cases}  # fmt: skip
    return results.write(out_dir / f"{sc.name}-{meta['label']}.json", doc)


def write_kselftest(out_dir: Path, meta: dict[str, Any], status: str,
                    record: RawRep | str | None) -> tuple[Path, str, list[kselftest.TestResult]]:  # fmt: skip
    """test_cpu's record (the plan of kernel/kselftest.plan()) as kselftest-LABEL.json: the
    file, test_cpu's output and its TAP results."""
    stdout = record.stdout if isinstance(record, RawRep) else ""
    tests = kselftest.parse_tap(stdout)
    doc = {"schema": results.SCHEMA, "scenario": "kselftest", "status": status, "meta": meta,
           "tests": [t.__dict__ for t in tests], "output": stdout, "cases": []}  # fmt: skip
    return results.write(out_dir / f"kselftest-{meta['label']}.json", doc), stdout, tests


def check_run(cases: list[dict[str, Any]], meta: dict[str, Any], where: Path) -> None:
    """Raise if a repetition or a noise probe failed (after the result is written, so that it
    can be read): a run whose probe failed cannot be validated against the simulator."""
    errors = [r["error"] for c in cases for r in c["reps"] if "error" in r]
    if errors:
        raise BwlabError(f"{where}: {len(errors)} repetition(s) failed, first: {errors[0]}")
    probes = [p["error"] for p in meta.get("noise", []) if "error" in p]
    if probes:
        raise BwlabError(f"{where}: the noise probe failed: {probes[0]}")
