"""Samples of a group's counters cut into its bandwidth periods, and every throttled period
classified: *below quota* (the group was stopped although what it ran plus what it was stopped
from running fits in its quota: unnecessary throttling) or *at quota* (it wanted more: real
over-use).

Why not "usage in the period < quota": runtime a CPU overran at the end of a period is debt
paid from the next one, so a group running at twice its quota also shows usage near the quota
in each period. The demand of a period is estimated as its usage plus its throttled time (the
time its CPUs' runqueues sat throttled with work on them): at demand == quota that is about the
quota, at twice the quota about twice it.

Where a period ends: the kernel's period timer advances nr_periods (and nr_throttled when a
runqueue was throttled, and throttled time as it unthrottles them) at the period boundary, so
a boundary lies between the last sample before nr_periods changed and the first after. The
period timer is an hrtimer forwarded by whole periods, so every boundary of a busy group has
the same phase modulo the period: the phase that lies in the most sampled intervals places each
boundary more exactly than one interval does. Usage is interpolated at the boundary; throttle
counters are taken at the first sample after it (they change at the boundary). What is left
uncertain (the width of the fitted phase window, or the interval where no phase fits) times the
CPUs the group can use bounds the usage attributed to the wrong period: `error_us`.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from dataclasses import dataclass, field

# A throttled period is below quota when its demand (best estimate; its attribution error is
# reported beside it) <= quota (+ burst) + this share of the quota. A throttle that lasts past
# the period's end (a runqueue that still owes debt) is counted whole in the period it ends in;
# at twice the quota every period is near 2 x.
SETTLE_S = 0.005  # how long after a boundary its throttles are all counted (a tick at HZ=250, and some)
SLACK = 0.10
# A period timer's expiry is traced a little before nr_periods moves (the tracer's own program
# and the handler's lock come between): a read that began up to this long after a traced expiry
# may not see it yet (one began within 0.1 us of one, 2026-11-28)
TRACED_LEAD_S = 50e-6
# A verdict whose demand lies this close to its line (as a share of the quota) could go either
# way: against the eBPF trace on wakelat's bursts at 100 ms (32 runs, docs/results.md, Live tools) every wrong
# verdict but five was a period whose true demand lay within 3.3 % of the quota of the line.
NEAR = 0.03


@dataclass(frozen=True)
class Limit:
    """A group's bandwidth: quota per period (None: unlimited) and burst, in microseconds."""

    quota_us: int | None
    period_us: int
    burst_us: int = 0

    @property
    def cpus(self) -> float | None:
        return None if self.quota_us is None else self.quota_us / self.period_us

    def describe(self) -> str:
        if self.quota_us is None:
            return "unlimited"
        burst = f", burst {self.burst_us / 1000:g} ms" if self.burst_us else ""
        return f"{self.cpus:.2f} CPUs ({self.quota_us / 1000:g} ms per {self.period_us / 1000:g} ms{burst})"


@dataclass(frozen=True)
class Sample:
    """A group's counters read at monotonic time `t` (seconds); usage and throttled time in us.
    `read_end`: when the read ended, where known. A boundary the read saw may lie after `t`,
    up to then: the period timer that fires on the reading CPU between the clock's read and
    the file's runs first (its expiries came 10-27 us after `t` in 12 of 3,600 traced
    boundaries, sysbench at demand == quota on this host, 2026-11-28)."""

    t: float
    nr_periods: int
    nr_throttled: int
    throttled_us: float
    usage_us: float
    nr_bursts: int = 0
    burst_us: float = 0.0  # time run on burst (cpu.stat burst_usec, v1 burst_time)
    read_end: float | None = None

    @property
    def seen_by(self) -> float:
        """The latest time a boundary this read saw may lie at."""
        return self.t if self.read_end is None else self.read_end


@dataclass(frozen=True)
class Period:
    """One period (or several, when sampled more coarsely than the period)."""

    start: float  # estimated boundary times, monotonic seconds
    end: float
    periods: int
    usage_us: float
    throttled: int  # nr_throttled advanced: periods in which a runqueue was throttled
    throttled_us: float
    error_us: float  # bound on usage attributed to the wrong period
    verdict: str  # "" (not throttled), "below" (unnecessary) or "at" (over-use)
    demand_us: float | None = None  # what the verdict weighed (throttled periods only)
    estimated: str = ""  # the counters' verdict (the same as verdict unless traced)
    estimated_us: float | None = None  # the counters' estimate of demand
    wanted_us: float | None = None  # what the threads' schedstat says they wanted
    line_us: float | None = None  # the demand above which the verdict is "at" (throttled periods only)

    @property
    def near_line(self) -> bool:
        """A throttled period whose demand lies within NEAR of the quota of its verdict's line."""
        if self.demand_us is None or self.line_us is None:
            return False
        return abs(self.demand_us - self.line_us) <= NEAR * self.line_us / (1 + SLACK)


@dataclass
class Analysis:
    """The periods of a sampling run and what they add up to."""

    limit: Limit
    interval_s: float
    periods: list[Period] = field(default_factory=list)
    phase_window_us: float | None = None  # width of the fitted boundary phase, None if no fit
    exact: bool = False  # boundaries and demand traced (ebpf.py), not estimated

    @property
    def total(self) -> int:
        return sum(p.periods for p in self.periods)

    @property
    def throttled(self) -> int:
        return sum(p.throttled for p in self.periods)

    @property
    def used_cpus(self) -> float | None:
        """CPUs the group used on average over its periods; None without one."""
        span = sum(p.end - p.start for p in self.periods)
        return sum(p.usage_us for p in self.periods) / (span * 1e6) if span > 0 else None

    @property
    def below(self) -> int:
        return sum(p.throttled for p in self.periods if p.verdict == "below")

    @property
    def at(self) -> int:
        return sum(p.throttled for p in self.periods if p.verdict == "at")

    @property
    def near_line(self) -> int:
        """Throttled periods whose verdict could go either way (Period.near_line)."""
        return sum(p.throttled for p in self.periods if p.near_line)


def fit_phase(intervals: list[tuple[float, float]], period_s: float) -> tuple[float, float] | None:
    """The phase (seconds modulo `period_s`) inside the most of these (open, closed] sample
    intervals that each hold a boundary, and the width of that window; None if no phase is in
    more than half of them (the timer restarted, or the sampling is too coarse to tell)."""
    events: list[tuple[float, int]] = []
    usable = 0
    for a, b in intervals:
        if b - a >= period_s:
            continue  # holds every phase
        usable += 1
        lo, hi = a % period_s, b % period_s
        if lo <= hi:
            events += [(lo, 1), (hi, -1)]
        else:  # wraps around
            events += [(lo, 1), (period_s, -1), (0.0, 1), (hi, -1)]
    if usable == 0:
        return None
    events.sort(key=lambda e: (e[0], -e[1]))
    best, best_lo, best_hi, depth = 0, 0.0, 0.0, 0
    for i, (pos, delta) in enumerate(events):
        depth += delta
        if delta > 0 and depth > best:
            nxt = next((p for p, d in events[i + 1 :] if d < 0), pos)
            best, best_lo, best_hi = depth, pos, nxt
    if best * 2 <= usable:
        return None
    return (best_lo + best_hi) / 2, best_hi - best_lo


def _interp(a: Sample, b: Sample, t: float) -> float:
    if b.t <= a.t:
        return b.usage_us
    return a.usage_us + (b.usage_us - a.usage_us) * (t - a.t) / (b.t - a.t)


def boundary_intervals(samples: list[Sample]) -> list[tuple[float, float]]:
    """The sampled intervals (open, closed] in which nr_periods moved: each holds a boundary
    (up to the end of the read that saw it: Sample)."""
    return [(samples[i - 1].t, samples[i].seen_by) for i in range(1, len(samples))
            if samples[i].nr_periods != samples[i - 1].nr_periods]  # fmt: skip


def analyze(samples: list[Sample], limit: Limit, interval_s: float, cpus: float,
            wanted: Callable[[float, float], float | None] | None = None,
            wanted_us: Callable[[float, float], float | None] | None = None,
            boundaries: list[float] | None = None,
            demand: Callable[[float, float], float] | None = None) -> Analysis:  # fmt: skip
    """Periods and their verdicts from `samples` of a group whose threads can use at most
    `cpus` CPUs at a time (their number and the machine's CPUs bound it); `wanted(start, end)`,
    if known, is how many CPUs they wanted around a period (threads.ThreadRecorder), a tighter
    bound on what they were stopped from running. Traced (ebpf.py): `boundaries`, the period
    timer's expiries, place each boundary exactly, and `demand(start, end)` (us) is weighed
    instead of the estimate."""
    out = Analysis(limit, interval_s, exact=demand is not None)
    if limit.quota_us is None or len(samples) < 2:
        return out
    period_s = limit.period_us / 1e6
    # indexes i where a boundary lies in (samples[i-1].t, samples[i].t]
    edges = [i for i in range(1, len(samples)) if samples[i].nr_periods != samples[i - 1].nr_periods]
    fit = fit_phase(boundary_intervals(samples), period_s)
    out.phase_window_us = None if fit is None else fit[1] * 1e6
    times: list[float] = []
    errors: list[float] = []
    expiries = sorted(boundaries or [])
    taken = -math.inf  # the last expiry placed: each ends one boundary
    for i in edges:
        a, b = samples[i - 1].t, samples[i].t
        # the last expiry the read that saw the boundary could have seen, and one traced a little
        # before the read that missed it began (TRACED_LEAD_S)
        last = bisect.bisect_right(expiries, samples[i].seen_by) - 1
        if last >= 0 and expiries[last] > max(a - min(TRACED_LEAD_S, period_s / 4), taken):
            taken = expiries[last]
            times.append(taken)
            errors.append(0.0)
            continue
        if fit is not None:
            k = (b - fit[0]) // period_s
            t = fit[0] + k * period_s
            if a < t <= b:
                times.append(t)
                errors.append(fit[1] / 2)
                continue
        times.append((a + b) / 2)
        errors.append((b - a) / 2)
    stamps = [s.t for s in samples]
    settled = [min(max(i, bisect.bisect_left(stamps, t + min(SETTLE_S, period_s / 2))), len(samples) - 1)
               for i, t in zip(edges, times, strict=True)]  # fmt: skip
    for n in range(1, len(edges)):
        i0, i1 = edges[n - 1], edges[n]
        u0 = _interp(samples[i0 - 1], samples[i0], times[n - 1])
        u1 = _interp(samples[i1 - 1], samples[i1], times[n])
        s0, s1 = samples[i0], samples[i1]
        periods = s1.nr_periods - s0.nr_periods
        # the throttle counters a little after each boundary: a runqueue on another CPU than the
        # timer's is unthrottled (and its throttled time counted) when that CPU gets to it, up
        # to a tick after the boundary (traced on 6.18), and the next period's own throttles
        # are counted when they end, at its end
        c0, c1 = samples[settled[n - 1]], samples[settled[n]]
        throttled = c1.nr_throttled - c0.nr_throttled
        throttled_us = c1.throttled_us - c0.throttled_us
        usage = u1 - u0
        error = (errors[n - 1] + errors[n]) * cpus * 1e6
        verdict = estimated = ""
        weighed = estimate = line = None
        if throttled:
            # the quota is a rate: a window stretched past its periods (a period timer that
            # fired late, the boundary then placed in its sampled interval, not at the fitted
            # phase) holds that much more of it: at demand == quota such a period's demand is
            # the quota times its length, not over-use.
            window_periods = (times[n] - times[n - 1]) / period_s
            capacity = max(periods, window_periods) * limit.quota_us + limit.burst_us
            # demand is usage plus throttled time, each at most what the CPUs its threads
            # wanted could have run in the window: usage is charged at ticks (a period can be
            # charged a tick per CPU of the one before), and throttled time runs from a throttle
            # to its unthrottle, past the period's end (at demand == quota, two threads on two
            # CPUs, 6.18's counters added up to 1.15 x the quota per period: docs/live.md)
            could = cpus
            if wanted is not None and (w := wanted(times[n - 1], times[n])) is not None:
                could = min(cpus, w)
            window = (times[n] - times[n - 1]) * 1e6
            most = could * window
            ran = min(usage, most)
            stopped = min(throttled_us, max(0.0, most - ran))
            estimate = ran + stopped
            # what the threads' schedstat says they wanted (run, run delay, their share of the
            # throttled time), at most the CPUs they can use: the counters' throttled time misses
            # what a group of many threads was stopped from running (wakelat's bursts at 1.75
            # CPUs of 2: usage plus throttled time came to 1.00-1.05 x the quota, the threads
            # wanted 1.14 x, as traced)
            want = wanted_us(times[n - 1], times[n]) if wanted_us is not None else None
            if want is not None:
                estimate = max(estimate, min(want, cpus * window))
            line = capacity * (1 + SLACK)
            estimated = "below" if estimate <= line else "at"
            weighed, verdict = estimate, estimated
            if demand is not None:
                weighed = demand(times[n - 1], times[n])
                verdict = "below" if weighed <= line else "at"
        else:
            want = None
        out.periods.append(Period(times[n - 1], times[n], periods, usage, throttled, throttled_us, error, verdict,
                                  weighed, estimated, estimate, want, line))  # fmt: skip
    return out
