"""`bwlab doctor` and `bwlab tune`: throttling of live cgroups on the running kernel, found,
explained, predicted and fixed (bwlab/live/)."""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import json
import math
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.live import Live
from rich.table import Table

from bwlab import periods, threads
from bwlab.errors import BwlabError
from bwlab.live import diagnose, ebpf, fixes, groups, kstate, sampler, threadpools, tune, whatif, window
from bwlab.live.groups import LiveGroup
from bwlab.periods import Limit, Sample
from bwlab.progress import console, out

# the what-if replays the whole recording, up to this long (bursty groups differ from one
# 10 s stretch to the next as much as the prediction's tolerance)
REPLAY_MAX_S = 60.0

# the what-if's longer period: the kernel's default
LONG_PERIOD_US = 100_000
TOP_AFFINITY_THREADS = 64  # top reads the affinity of this many of a group's threads at most

# top walks the hierarchy for new and removed groups every this many refreshes
REDISCOVER = 5


def bad_burst(text: str) -> str:
    """Why `--burst TEXT` is refused: a negative number is not "not a number"."""
    if text.lstrip("-").isdigit():
        return f"--burst {text}: a burst cannot be negative (auto, 0 to remove it, or microseconds)"
    return f"--burst {text!r}: expected auto or a whole number of microseconds"


def facts_of(group: LiveGroup, recorder: threads.ThreadRecorder | None = None,
             timer_late_us: list[float] | None = None, pools: bool = False,
             allowed: tuple[int, ...] | None = None) -> diagnose.Facts:  # fmt: skip
    """The machine, and the group's threads: those that were busy while watched, else all, and
    the CPUs they may run on (`allowed` if already read, as watch() does); the period timer's
    lateness if it was traced; with `pools`, its Go and JVM thread pools (their executables
    read: doctor's, not tune --watch's every round)."""
    busy = recorder.busy_threads() if recorder is not None else 0
    tids = group.threads()
    return dataclasses.replace(diagnose.machine_facts(), threads=busy or len(tids),
                               mean_cpus=recorder.mean_cpus() if recorder is not None else 0.0,
                               timer_late_us=timer_late_us,
                               allowed=tuple(group.allowed_cpus(tids)) if allowed is None else allowed,
                               pools=tuple(threadpools.in_group(group.processes())) if pools else ())  # fmt: skip


def doctor_interval_s(period_us: int) -> float:
    """doctor's sampling interval for a group of this period: a fiftieth of it, 1 to 10 ms. The
    same resolution against the period, hence against the quota, at any period: what is read
    per period decides how closely usage is attributed to it, and a 1 ms loop is most of
    doctor's cost (docs/results.md, Live tools)."""
    return min(0.010, max(0.001, period_us / 1e6 / 50))


def unwatched_seconds(period_us: int, seconds: float) -> float:
    """How long doctor reads the group's counters unwatched (twice, nothing between) before
    it watches: 50 periods, at least 2 s, at most half the watch."""
    return min(seconds / 2, max(2.0, 50 * period_us / 1e6))


def read_unwatched(group: LiveGroup, seconds: float) -> window.Window:
    """The group's counters over `seconds`, read at the start and the end only: its throttling
    as it is when nothing reads it every millisecond."""
    reader = sampler.Reader(group)
    try:
        first = reader.read()
        time.sleep(seconds)
        last = reader.read()
    finally:
        reader.close()
    return window.window(first, last, group.effective)


def watching_effect(unwatched: dict[str, Any], periods_watched: int, throttled: int) -> dict[str, float] | None:
    """Watched minus unwatched throttled share, in points, and the two-sided 95 % margin of
    chance for two binomial shares of these sizes (pooled): beyond it, watching changed it."""
    n1, n2 = unwatched["periods"], periods_watched
    if not n1 or not n2:
        return None
    p = (unwatched["throttled"] + throttled) / (n1 + n2)
    margin = 100 * 1.96 * math.sqrt(p * (1 - p) * (1 / n1 + 1 / n2))
    return {"points": round(100 * throttled / n2 - 100 * unwatched["throttled"] / n1, 2),
            "chance_points": round(margin, 2)}  # fmt: skip


def _check_seconds(seconds: float, interval_ms: float | None) -> None:
    if not 0.5 <= seconds <= 3600:
        raise BwlabError(f"--seconds {seconds:g}: expected 0.5..3600")
    if interval_ms is not None and not 0.1 <= interval_ms <= 1000:
        raise BwlabError(f"--interval-ms {interval_ms:g}: expected 0.1..1000")


@dataclass
class Watched:
    analysis: periods.Analysis
    recorder: threads.ThreadRecorder
    timer_late_us: list[float] | None = None  # traced: each period timer expiry's lateness
    short_slice: bool = False  # sampled with the shortest fair slice (sampler.prompt)
    scheduled: bool = False  # read around the boundaries (sampler.Schedule), not every interval
    reads: int = 0  # of the counters
    before: Sample | None = None  # the counters at the first read: the group's history unwatched
    allowed: tuple[int, ...] = ()  # the CPUs its threads may run on, read as the watch began
    kernel: list[kstate.Throttle] | None = None  # traced with kprobes: the group's throttles, each with its cause
    kernel_quota_us: list[int] | None = None  # the quotas the kernel held at the group's refills


def watch(group: LiveGroup, seconds: float, interval_s: float, traced: bool = False, sparse: bool = False) -> Watched:
    """Sample the group's counters (and its threads' demand) and cut them into periods;
    `traced`: with the eBPF mode's exact boundaries and demand; `sparse`: read around the
    boundaries and at the threads' steps only (sampler.Schedule), not every interval."""
    tids = group.threads()
    allowed = tuple(group.allowed_cpus(tids))  # what its threads can run on at once, at most
    recorder = threads.ThreadRecorder(tids, len(allowed))
    stepper = threads.Stepper.of(recorder, group.threads, interval_s, threads.STEP_S)
    # attached to every thread the group has by then; closed below, whatever happens
    tracer = ebpf.start_tracing(recorder.tids, group.threads) if traced else None

    def on_sample(t: float, stat: bytes, parse: Callable[[], Sample]) -> None:
        stepper.feed(t, sampler.nr_periods(stat), parse)

    # read around each boundary and at the threads' steps only: the wake-ups are most of
    # doctor's cost, but reads at a fixed phase to the period changed the throttling of
    # sysbench at demand == quota from 50 % of periods to 2-47 % (reads every interval: less,
    # and by a varying amount: 35-47 % on 2026-11-24, docs/results.md, Live tools)
    schedule = sampler.Schedule.of(interval_s, group.effective.period_us / 1e6, threads.STEP_S) if sparse else None

    try:
        with sampler.prompt() as short_slice:
            samples = sampler.sample(group, seconds, interval_s, on_sample, schedule)
        trace = tracer.stop() if tracer is not None else None
    finally:
        recorder.close()
        if tracer is not None:
            tracer.close()
    cpus = max(1, min(len(allowed), len(recorder.tids) or 1))  # what its threads could run at once
    # the group's period timer: the one whose expiries fall in the sampled boundary intervals
    key = trace.timer_key(periods.boundary_intervals(samples)) if trace is not None else None
    expiries = None if trace is None else trace.timers[key] if key is not None else []
    demand = (lambda a, b: trace.demand_us(a, b, cpus)) if trace is not None else None
    analysis = periods.analyze(samples, group.effective, interval_s, cpus, recorder.wanted_cpus, recorder.wanted_us,
                               expiries, demand)  # fmt: skip
    late = trace.lateness_us(expiries or [], group.effective.period_us / 1e6) if trace is not None else None
    kernel = quotas = None
    lim = group.effective
    if tracer is not None and tracer.kernel is not None and lim.quota_us is not None:
        refills = tracer.kernel.refills.get(key, []) if key is not None else []
        throttles = tracer.kernel.throttles.get(key, []) if key is not None else []
        kernel = kstate.classify(throttles, refills, lim.quota_us, lim.period_us)
        quotas = sorted({r.quota_ns // 1000 for r in refills})
    return Watched(analysis, recorder, late, short_slice, schedule is not None, len(samples), samples[0], allowed,
                   kernel, quotas)  # fmt: skip


def cmd_doctor(args: argparse.Namespace) -> int:
    _check_seconds(args.seconds, args.interval_ms)
    if args.save_trace and not Path(args.save_trace).parent.is_dir():
        raise BwlabError(f"--save-trace {args.save_trace}: no directory {Path(args.save_trace).parent}")
    group = groups.find(args.target)
    if group.effective.quota_us is None:
        raise BwlabError(f"{group.path} has no CPU limit (nor has any parent): nothing throttles it")
    asked = group.path
    if group.limit.quota_us is None:
        # its own cpu.stat counts no periods (it has no bandwidth of its own): the throttling is
        # the ancestor's, whose counters and threads (this group's among them) are watched
        group = groups.group_at(group.limited_by, group.hierarchy)
        console.print(f"{asked} has no limit of its own; {group.path}'s throttles it: watching {group.path}")
    elif group.limited_by != group.path and groups.tighter(group.effective, group.limit):
        # a limit of its own looser than an ancestor's: the ancestor runs out first and
        # throttles it there, which this group's own cpu.stat never counts
        own = group.limit.describe()
        group = groups.group_at(group.limited_by, group.hierarchy)
        console.print(f"{asked}'s own limit ({own}) is looser than {group.path}'s ({group.limit.describe()}), "
                      f"which throttles it: watching {group.path}")  # fmt: skip
    if not group.threads():
        raise BwlabError(f"{group.path} has no process, nor have its children: nothing runs there to throttle "
                         "(name the group of a running program: a PID, a container ID or a path)")  # fmt: skip
    period_us = group.effective.period_us
    interval_s = args.interval_ms / 1000 if args.interval_ms is not None else doctor_interval_s(period_us)
    quiet_s = unwatched_seconds(period_us, args.seconds)
    with console.status(f"reading {group.path}'s counters over {quiet_s:g} s, unwatched"):
        unwatched = read_unwatched(group, quiet_s)
    with console.status(f"watching {group.path} for {args.seconds:g} s"):
        watched = watch(group, args.seconds, interval_s, args.ebpf, args.sparse)
    analysis, recorder = watched.analysis, watched.recorder
    facts = facts_of(group, recorder, watched.timer_late_us, pools=True, allowed=watched.allowed)
    diag = diagnose.diagnose(group, analysis, facts)
    burst = diag.burst_us  # predicted with, and without, this burst
    # over-use is replayed too: a pool as wide as the quota or a longer period may still help
    predict = not args.no_predict and analysis.throttled > 0
    episodes = recorder.episodes() if args.save_trace or predict else {}
    if args.save_trace:
        try:
            recorder.write_trace(Path(args.save_trace), episodes)
        except OSError as exc:
            raise BwlabError(f"--save-trace {args.save_trace}: {exc.strerror}") from None
        console.print(f"trace: {args.save_trace}")
    predictions: list[whatif.Prediction] = []
    if predict:
        with (console.status("predicting with the simulator"),
              tempfile.TemporaryDirectory(prefix="bwlab-doctor-") as tmp):  # fmt: skip
            trace = recorder.write_trace(Path(tmp) / "trace.jsonl", episodes)
            lim = group.effective
            variants = [whatif.Variant("as it is", lim)]
            if burst is not None:
                variants.append(whatif.Variant(f"burst {burst} us", Limit(lim.quota_us, lim.period_us, burst)))
            variants.append(whatif.Variant("the series (policy all)", lim, "all"))
            pool = math.ceil(lim.cpus or 0)
            if 0 < pool < min(facts.threads, facts.cpus):  # the same work from as many threads as the quota's CPUs
                sysmons = tuple(threadpools.GO_SYSMON for p in facts.pools if p.runtime == "go" and p.size > pool)
                work = threads.pool_episodes(episodes, pool, sysmons)  # each Go program's sysmon stays beside
                pooled = recorder.write_trace(Path(tmp) / f"pool{pool}.jsonl", work)
                variants.append(whatif.Variant(f"threads {pool} (not {facts.threads})", lim, trace=pooled))
            if lim.quota_us is not None and lim.period_us < LONG_PERIOD_US:  # the same CPUs, a longer period
                quota = round(lim.quota_us * LONG_PERIOD_US / lim.period_us)
                variants.append(whatif.Variant(f"period {LONG_PERIOD_US // 1000} ms", Limit(quota, LONG_PERIOD_US)))
            predictions = whatif.predict(trace, variants, facts.cpus, facts.hz or 250, facts.slice_us,
                                         min(args.seconds, REPLAY_MAX_S))  # fmt: skip
    doc = report_doc(group, analysis, facts, diag, predictions)
    doc["fixes"] = [f.to_json() for f in fixes.rank(group, diag, facts, predictions)]
    doc["asked"] = asked  # the group named, where `group` is the ancestor whose limit was watched
    if predictions and analysis.total:  # the replay as it is, against what was measured
        measured = 100 * analysis.throttled / analysis.total
        as_is = predictions[0].throttled_pct
        doc["replay_check"] = {"measured_pct": round(measured, 2), "as_it_is_pct": round(as_is, 2),
                               "agrees": whatif.agrees(measured, as_is)}  # fmt: skip
    doc["sampling"].update(short_slice=watched.short_slice, around_boundaries=watched.scheduled, reads=watched.reads)
    # the counters as doctor found them: the group's throttling unwatched, since its limit was set
    # (reading it every millisecond lowers it, by a varying amount: docs/live.md)
    if watched.before is not None:
        doc["before"] = {"periods": watched.before.nr_periods, "throttled": watched.before.nr_throttled}
    doc["unwatched"] = {"seconds": round(unwatched.seconds, 3), "periods": unwatched.periods,
                        "throttled": unwatched.throttled}  # fmt: skip
    doc["watching_effect"] = watching_effect(doc["unwatched"], analysis.total, analysis.throttled)
    doc["watched_seconds"] = args.seconds
    if watched.kernel is not None:  # the kernel's own state at each throttle (kstate.py)
        wrong = kstate.layout_problem(watched.kernel_quota_us or [], group.effective.quota_us)
        if wrong is not None:  # offsets of another build: what they read is no state at all
            doc["kernel_state"] = {"ignored": wrong}
        else:
            spans = [(p.start, p.end, p.throttled, p.verdict) for p in analysis.periods]
            doc["kernel_state"] = {"throttles": len(watched.kernel), "quota_us": watched.kernel_quota_us,
                                   "by_verdict": kstate.by_period(watched.kernel, spans)}  # fmt: skip
    if args.png:
        from bwlab.live import plot  # matplotlib's import (~0.9 s) only where a timeline is drawn

        if not analysis.periods:
            raise BwlabError(f"{group.path} ran no full period while watched: no timeline to draw")
        plot.timeline(analysis, f"{group.path}: {diag.verdict}", Path(args.png))
        doc["png"] = args.png
    if args.json:
        text = json.dumps(doc, indent=1) + "\n"
        if args.json == "-":
            print(text, end="")
            return 0
        Path(args.json).write_text(text)
    print_report(doc)
    if args.json:
        console.print(f"json: {args.json}")
    return 0


def report_doc(group: LiveGroup, analysis: periods.Analysis, facts: diagnose.Facts, diag: diagnose.Diagnosis,
               predictions: list[whatif.Prediction]) -> dict[str, Any]:  # fmt: skip
    return {
        "group": group.path, "hierarchy": group.hierarchy.describe(), "identity": group.identity.describe(),
        "limit": group.limit.describe(), "effective_limit": group.effective.describe(),
        "limited_by": group.limited_by,
        "facts": {**facts.__dict__, "pools": [dataclasses.asdict(p) for p in facts.pools]},
        "sampling": {"interval_ms": analysis.interval_s * 1000, "traced": analysis.exact,
                     "phase_window_us": analysis.phase_window_us,
                     "max_error_us": max((p.error_us for p in analysis.periods), default=None)},
        "periods": analysis.total, "throttled": analysis.throttled, "below_quota": analysis.below,
        "at_quota": analysis.at, "near_line": analysis.near_line,
        "diagnosis": diag.to_json(),
        "predictions": [{"setting": p.variant.label, "policy": p.variant.policy, "throttled_pct": p.throttled_pct,
                         "throttled_pct_sd": p.throttled_pct_sd, "seeds": p.reps,
                         "stall_p99_us": p.stall_p99_us} for p in predictions],
        "per_period": [{"start": round(p.start, 6), "end": round(p.end, 6), "periods": p.periods,
                        "usage_us": round(p.usage_us), "throttled": p.throttled, "throttled_us": round(p.throttled_us),
                        "error_us": round(p.error_us), "verdict": p.verdict, "near_line": p.near_line,
                        "demand_us": None if p.demand_us is None else round(p.demand_us),
                        "line_us": None if p.line_us is None else round(p.line_us),
                        "wanted_us": None if p.wanted_us is None else round(p.wanted_us),
                        **({"estimated": p.estimated,
                            "estimated_us": None if p.estimated_us is None else round(p.estimated_us)}
                           if analysis.exact else {})} for p in analysis.periods],
    }  # fmt: skip


def print_report(doc: dict[str, Any]) -> None:
    out.print(f"[bold]{doc['group']}[/bold] ({doc['identity']}, {doc['hierarchy']})")
    limit = doc["limit"] + ("" if doc["limited_by"] == doc["group"] else f"; effective {doc['effective_limit']} "
                            f"from {doc['limited_by']}")  # fmt: skip
    out.print(f"limit: {limit}")
    s = doc["sampling"]
    err = f", usage per period within ±{s['max_error_us']:.0f} us" if s["max_error_us"] is not None else ""
    prio = "" if s.get("short_slice", True) else " (default slice, a kernel before 6.12: a read can lag a tick)"
    how = (f"read {s['reads']} times, within {s['interval_ms']:g} ms of each boundary" if s.get("around_boundaries")
           else f"read every {s['interval_ms']:g} ms")  # fmt: skip
    out.print(f"{how}{err}{prio}")
    # three figures, one line each: the kernel's counters unwatched, the watched periods'
    # verdicts, and what watching changed (reading every ms lowers throttling: docs/live.md)
    quiet = doc.get("unwatched")
    if quiet:
        share = f"{100 * quiet['throttled'] / quiet['periods']:.1f} %" if quiet["periods"] else "-"
        out.print(f"unwatched, the {quiet['seconds']:.1f} s before: throttled in {share} of {quiet['periods']} "
                  "periods (the kernel's counters, read twice)", soft_wrap=True)  # fmt: skip
    diag = doc["diagnosis"]
    colour = {"below-quota": "yellow", "at-quota": "cyan", "mixed": "yellow"}.get(diag["verdict"], "green")
    watched = f"watched, {doc['watched_seconds']:g} s: " if "watched_seconds" in doc else ""
    out.print(f"{watched}[{colour}]{diag['verdict']}[/{colour}]: {diag['summary']}", soft_wrap=True)
    effect = doc.get("watching_effect")
    if effect:
        beyond = abs(effect["points"]) > effect["chance_points"]
        said = ("more than chance explains (reading every ms can lower throttling: docs/live.md); the unwatched "
                "figure is the group's own" if beyond else "within chance")  # fmt: skip
        out.print(f"watching changed it by {effect['points']:+.1f} points (chance: ±{effect['chance_points']:.1f}), "
                  f"{said}", soft_wrap=True)  # fmt: skip
    if doc["near_line"]:
        out.print(f"  {doc['near_line']} of the {doc['throttled']} throttled periods wanted within "
                  f"{periods.NEAR * 100:g} % of the quota of the line between the two (the quota + "
                  f"{periods.SLACK * 100:g} %): their verdicts could go either way", soft_wrap=True)  # fmt: skip
    for cause in diag["causes"]:
        out.print(f"  cause: {cause['title']}: {cause['evidence']}", soft_wrap=True)
    kernel = doc.get("kernel_state")
    if kernel and "ignored" in kernel:
        out.print(f"  [yellow]the kernel's state (kprobes) is left out: {kernel['ignored']}[/yellow]", soft_wrap=True)
    elif kernel:
        rows = "; ".join(f"{verdict}: " + ", ".join(f"{n} {c}" for c, n in counts.items() if n)
                         for verdict, counts in kernel["by_verdict"].items())  # fmt: skip
        out.print(f"  the kernel's state at its {kernel['throttles']} throttles (kprobes): why the pool ran dry in the "
                  f"throttled periods, by verdict: {rows or 'none'}", soft_wrap=True)  # fmt: skip
    if doc["predictions"]:
        table = Table(title="what-if (simulator, the recorded threads replayed)")
        for col in ("setting", "kernel", "throttled periods", "stall p99"):
            table.add_column(col)
        for p in doc["predictions"]:
            stall = "-" if p["stall_p99_us"] is None else f"{p['stall_p99_us'] / 1000:.2f} ms"
            table.add_row(p["setting"], "patched (all)" if p["policy"] == "all" else "stock",
                          f"{p['throttled_pct']:.1f} % ±{p['throttled_pct_sd']:.1f}", stall)  # fmt: skip
        out.print(table)
        check = doc.get("replay_check")
        if check and not check["agrees"]:
            out.print(f"  [yellow]the replay as it is gives {check['as_it_is_pct']:.1f} % where "
                      f"{check['measured_pct']:.1f} % was measured: take its other rows as uncertain "
                      "(work queued inside the program, beyond its threads, is not in the recording)[/yellow]",
                      soft_wrap=True)  # fmt: skip
    ranked = doc.get("fixes") or []
    if ranked:  # the what-if's settings, best first; what barely helps is never "the fix"
        as_is = doc["predictions"][0]["throttled_pct"]
        out.print(f"fixes, by predicted effect (as it is: {as_is:.1f} % throttled):")
        for i, fix in enumerate(ranked, 1):
            stall = "" if fix["stall_p99_us"] is None else f", stall p99 {fix['stall_p99_us'] / 1000:.2f} ms"
            said = f"{fix['throttled_pct']:.1f} % throttled{stall}"
            if not fix["helps"]:
                out.print(f"  [dim]{i}. {fix['setting']}: {said}: barely helps ({as_is:.1f} % as it is)[/dim]",
                          soft_wrap=True)  # fmt: skip
                continue
            out.print(f"  {i}. {fix['setting']}: {said}", soft_wrap=True)
            if fix["trade"]:
                out.print(f"     trade: {fix['trade']}", soft_wrap=True)
            for how in fix["how"]:
                out.print(f"     fix ({how['where']}): {how['command']}", soft_wrap=True)
    else:  # not predicted (--no-predict): the diagnosis's own recommendation
        for cmd in diag["commands"]:
            out.print(f"  fix ({cmd['runtime']}): {cmd['command']}", soft_wrap=True)
    for cmd in diag["alternatives"]:
        out.print(f"  or, in place of the quota ({cmd['runtime']}): {cmd['command']}", soft_wrap=True)


def matches(group: LiveGroup, selector: str) -> bool:
    """A path glob ("/kubepods/*/pod*/*"), or a unit name glob, a container ID or pod UID prefix."""
    ident = group.identity
    if selector.startswith("/"):
        return fnmatch.fnmatchcase(group.path, selector)
    return (fnmatch.fnmatchcase(ident.unit or "", selector) or (ident.container_id or "").startswith(selector)
            or (ident.pod_uid or "").startswith(selector.replace("_", "-")))  # fmt: skip


def watch_and_tune(args: argparse.Namespace) -> int:
    """--watch: every --interval seconds, every limited group the selector matches gets the
    burst (auto: its own), verified; a group that refuses is said once and skipped."""
    if args.burst is None or args.revert:
        raise BwlabError("--watch needs --burst auto|MICROSECONDS (and no --revert)")
    if not 0.1 <= args.interval <= 3600:
        raise BwlabError(f"--interval {args.interval:g}: expected 0.1..3600 seconds")
    if args.burst != "auto" and not args.burst.isdigit():
        raise BwlabError(bad_burst(args.burst))
    hier = groups.hierarchy()
    refused: set[str] = set()
    floors: set[str] = set()
    rounds = 0
    while args.iterations is None or rounds < args.iterations:
        if rounds:
            time.sleep(args.interval)
        rounds += 1
        for group in groups.discover(hier):
            if group.path in refused or not matches(group, args.target):
                continue
            value = diagnose.recommended_burst(group, facts_of(group)) if args.burst == "auto" else int(args.burst)
            if value is None or value == group.limit.burst_us:
                continue
            try:
                old, new = tune.set_burst(group, value)
            except BwlabError as exc:
                refused.add(group.path)
                console.print(f"[yellow]skipped[/yellow] {group.path}: {exc}", soft_wrap=True)
                continue
            out.print(f"{group.path} ({group.identity.describe()}): burst {old} -> {new} us (verified)")
            if group.path not in floors and (floor := tune.quota_floor(group, new)) is not None:
                floors.add(group.path)  # said once per group: it holds while any burst is set
                console.print(f"[yellow]note[/yellow]: {floor}", soft_wrap=True)
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    if args.watch:
        return watch_and_tune(args)
    if args.iterations is not None:
        raise BwlabError("--iterations applies to --watch only")
    group = groups.find(args.target)
    if args.revert:
        if args.burst is not None:
            raise BwlabError("--revert and --burst: choose one")
        replaced, restored = tune.revert(group)
        out.print(f"{group.path}: burst {replaced} -> {restored} us (reverted)")
        return 0
    if args.burst is None:
        raise BwlabError("tune needs --burst auto|MICROSECONDS or --revert")
    if args.burst == "auto":
        value = diagnose.recommended_burst(group, facts_of(group))
        if value is None:
            raise BwlabError(f"{group.path} has no quota of its own: nothing to burst")
    elif args.burst.isdigit():
        value = int(args.burst)
    else:
        raise BwlabError(bad_burst(args.burst))
    old, new = tune.set_burst(group, value)
    out.print(f"{group.path}: burst {old} -> {new} us (verified; bwlab tune {group.path} --revert undoes it)")
    if args.burst == "auto" and (clamp := diagnose.burst_clamp(group, facts_of(group))) is not None:
        console.print(f"[yellow]clamped[/yellow]: {clamp}", soft_wrap=True)
    if (floor := tune.quota_floor(group, new)) is not None:
        console.print(f"[yellow]note[/yellow]: {floor}", soft_wrap=True)
    return 0


def cmd_top(args: argparse.Namespace) -> int:
    """Limited groups, refreshed every --interval seconds, the most likely unnecessary
    throttling first; --iterations N stops after N refreshes (and prints the last table)."""
    if not 0.2 <= args.interval <= 3600:
        raise BwlabError(f"--interval {args.interval:g}: expected 0.2..3600 seconds")
    if args.iterations is not None and args.iterations < 1:
        raise BwlabError(f"--iterations {args.iterations}: expected at least 1")
    hier = groups.hierarchy()
    readers: dict[str, tuple[LiveGroup, sampler.Reader, Sample]] = {}

    found: dict[str, LiveGroup] = {}
    cpus: dict[str, int] = {}  # the CPUs each group's threads may run on, read at discovery
    rounds = 0

    def refresh() -> list[tuple[LiveGroup, window.Window]]:
        nonlocal found, cpus, rounds
        if rounds % REDISCOVER == 0:  # walking the hierarchy costs more than reading counters
            found = {g.path: g for g in groups.discover(hier)}
            cpus = {path: len(g.allowed_cpus(g.threads()[:TOP_AFFINITY_THREADS])) for path, g in found.items()}
        rounds += 1
        for path in list(readers):
            if path not in found:
                readers.pop(path)[1].close()
        rows = []
        for path, group in found.items():
            try:
                if path not in readers:
                    reader = sampler.Reader(group)
                    readers[path] = (group, reader, reader.read())
                    continue
                _, reader, last = readers[path]
                now = reader.read()
            except BwlabError:  # removed meanwhile: gone from the view
                if path in readers:
                    readers.pop(path)[1].close()
                continue
            readers[path] = (group, reader, now)
            rows.append((group, window.window(last, now, group.effective)))
        rows.sort(key=lambda r: (-r[1].likely_below, -(r[1].throttled_pct or 0), r[0].path))
        return rows

    def table(rows: list[tuple[LiveGroup, window.Window]]) -> Table:
        t = Table(title=f"CPU-limited cgroups ({hier.describe()}), last {args.interval:g} s")
        for col in ("group", "who", "limit (CPUs)", "may run on", "used", "throttled", "likely below quota",
                    "demand/quota"):  # fmt: skip
            t.add_column(col, overflow="fold")
        for group, w in rows[: args.limit]:
            ratio = w.demand_per_capacity
            n = cpus.get(group.path, 0)
            # a quota of every CPU its threads may use caps nothing, and only throttles
            where = diagnose.n_cpus(n)
            where = f"[yellow]{where}[/yellow]" if n and (group.effective.cpus or 0) >= n else where
            t.add_row(group.path, group.identity.describe(), f"{group.effective.cpus:.2f}", where, f"{w.cpus_used:.2f}",
                      "-" if w.throttled_pct is None else f"{w.throttled_pct:.1f} %",
                      f"{100 * w.likely_below / w.periods:.1f} %" if w.periods else "-",
                      "-" if ratio is None else f"{ratio:.2f}")  # fmt: skip
        return t

    refresh()
    done = 0
    try:
        with Live(console=out, auto_refresh=False, transient=args.iterations is None) as live:
            while args.iterations is None or done < args.iterations:
                time.sleep(args.interval)
                rows = refresh()
                done += 1
                live.update(table(rows), refresh=True)
    finally:
        for _, reader, _ in readers.values():
            reader.close()
    return 0
