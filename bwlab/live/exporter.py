"""Below-quota throttling of every limited cgroup, counted continuously for Prometheus.

The per-period detector (periods.py) needs a group's counters read several times a period;
doing that for every group of a node would cost more than the 1 % of a CPU an exporter may
take. So sampling is adaptive: every group's cpu.stat is read every `interval` seconds (cheap:
one pread each), and a group whose nr_throttled moved becomes *hot*: its counters are read at
period resolution (a tenth of its period, 1-10 ms) and classified period by period for at least
HOT_S seconds, as long as it keeps throttling, at most `max_hot` groups at once. Its periods,
and only those, are counted: `bwlab_watched_periods_total` is the denominator of every rate.
The throttled periods seen before a group turns hot (one coarse interval) are not classified:
cAdvisor's container_cpu_cfs_throttled_periods_total counts every throttled period, and the
difference is what was not watched.

The counters are the detector's verdicts, per period; the collector builds fresh metric
families from them at each scrape, so a group removed is gone at the next scrape.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import os
import re
import resource
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from bwlab import periods, threads
from bwlab.errors import BwlabError
from bwlab.live import diagnose, groups, sampler
from bwlab.live.groups import Hierarchy, LiveGroup

HOT_S = 10.0  # a group that throttled is watched at period resolution at least this long
ANALYZE_S = 1.0  # hot groups' samples are classified this often
REDISCOVER = 6  # the hierarchy is walked every this many coarse intervals (new groups), at least
ROUTINE_SHARE = 0.25  # of the CPU budget, what discovery and (apart) the coarse reads may each use
LABELS = ("id", "container_id", "pod_uid")
BUCKET_S = 10.0  # the CPU budget can be saved up for this long (CpuBudget)
NR_THROTTLED = re.compile(rb"^nr_throttled (\d+)$", re.MULTILINE)


@dataclass
class Counts:
    """What the detector found in a group's watched periods, since the exporter started."""

    watched_periods: int = 0
    below: int = 0
    at: int = 0
    below_s: float = 0.0  # throttled time in below-quota periods
    at_s: float = 0.0
    debt_s: float = 0.0  # usage beyond quota + burst in throttled periods: paid from the next
    causes: dict[str, int] = field(default_factory=dict)  # cause -> throttled periods it was named for
    recommended_burst_us: int | None = None


@dataclass
class Hot:
    """A group watched at period resolution."""

    reader: sampler.Reader
    interval_s: float
    until: float
    due: float
    raws: list[tuple[float, bytes, bytes | None]] = field(default_factory=list)
    recorder: threads.ThreadRecorder | None = None
    stepper: threads.Stepper | None = None  # when the recorder reads the threads
    allowed: tuple[int, ...] = ()  # the CPUs its threads may run on (cpuset, affinity), read as it heated

    def close(self) -> None:
        self.reader.close()
        if self.recorder is not None:
            self.recorder.close()


@dataclass
class Tracked:
    group: LiveGroup
    last_throttled: int | None = None  # nr_throttled at the last coarse read
    stat_fd: int | None = None  # cpu.stat, kept open for the coarse reads
    counts: Counts = field(default_factory=Counts)
    hot: Hot | None = None
    failed: bool = False  # a read error was logged once
    last_hot: float = -math.inf  # when it was last watched finely: the least recent goes first

    def close(self) -> None:
        if self.stat_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.stat_fd)
            self.stat_fd = None
        if self.hot is not None:
            self.hot.close()
            self.hot = None


def process_cpu_s() -> float:
    """CPU time of this process, every thread (sampling, analysis, scrapes), in seconds."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class CpuBudget:
    """A token bucket of CPU time: `share` of one CPU accrues each second, up to BUCKET_S
    seconds' worth; the process's CPU time (every thread) is taken from it. Fine sampling may
    start or go on while the balance is positive, so over any T seconds the exporter uses at
    most share x T + share x BUCKET_S plus what its hot groups cost until the next analysis
    (ANALYZE_S), when they cool. A window average let the first 300 s reach 1.36 % for 1 %: its
    base cost kept running after the hot groups had spent the window; a 30 s bucket with hot
    groups left to run out their HOT_S, 1.07 %."""

    def __init__(self, share: float, clock: Callable[[], float] = time.monotonic,
                 cpu: Callable[[], float] = process_cpu_s) -> None:  # fmt: skip
        self.share, self.clock, self.cpu = share, clock, cpu
        self.t, self.c = clock(), cpu()
        self.balance = share * BUCKET_S  # full at the start: a throttling group is watched at once

    def update(self) -> float:
        """The balance now, in CPU seconds."""
        t, c = self.clock(), self.cpu()
        self.balance = min(self.share * BUCKET_S, self.balance + self.share * (t - self.t) - (c - self.c))
        self.t, self.c = t, c
        return self.balance


def labels(group: LiveGroup) -> list[str]:
    ident = group.identity
    return [group.path, ident.container_id or "", ident.pod_uid or ""]


def sample_interval(period_us: int) -> float:
    """Several samples a period: a tenth of it, 1 to 10 ms."""
    return min(0.010, max(0.001, period_us / 1e6 / 10))


class Watcher:
    """Every limited group of a hierarchy, read coarsely; the throttling ones classified per
    period. run() loops until stop(); the collector reads `tracked` under `lock`."""

    def __init__(self, hier: Hierarchy, interval_s: float, max_hot: int, facts: diagnose.Facts,
                 log: Any = None, budget: CpuBudget | None = None) -> None:  # fmt: skip
        self.hier = hier
        self.interval_s = interval_s
        self.max_hot = max_hot
        self.budget = budget  # what the exporter may use of one CPU; None: no limit
        self.facts = facts
        self.log = log or (lambda msg: None)
        self.lock = threading.Lock()
        self.tracked: dict[str, Tracked] = {}
        self.hot: dict[str, Tracked] = {}  # the tracked groups with a Hot: the fine loop's only ones
        self.errors: dict[str, int] = {"read": 0, "discovery": 0}
        self._stop = threading.Event()
        self.next_discovery = -math.inf
        # how often discovery and the coarse reads run: --interval (x REDISCOVER) unless their
        # measured CPU time would take more than ROUTINE_SHARE of the budget each (10,000
        # groups: a walk costs 0.75 s, a round of reads 50 ms)
        self.discovery_every_s = REDISCOVER * interval_s
        self.coarse_every_s = interval_s

    # --- coarse: every group every interval ---------------------------------------------------

    def discover(self) -> None:
        try:
            found = {g.path: g for g in groups.discover(self.hier)}
        except BwlabError as exc:
            with self.lock:
                self.errors["discovery"] += 1
            self.log(f"discovery: {exc}")
            return
        with self.lock:
            for path in list(self.tracked):
                if path not in found:
                    self._drop(path)
            for path, group in found.items():
                old = self.tracked.get(path)
                if old is None:
                    self.tracked[path] = Tracked(group)
                elif old.group.effective != group.effective:  # its limit changed: keep its counts
                    old.group = group

    def _drop(self, path: str) -> None:
        self.hot.pop(path, None)
        self.tracked.pop(path).close()

    def coarse_round(self) -> None:
        """Every group's nr_throttled (one pread of cpu.stat on a file kept open); a group whose
        count moved turns hot, the least recently watched first, while the exporter's average
        CPU use is within its budget. Over it, no group turns hot and the hot ones cool at the
        next analysis, and the throttling groups take turns (a hot group costs
        about 1.5 % of a CPU on a 2-CPU VM: 100 wake-ups a second, docs/exporter.md)."""
        now = time.monotonic()
        if now >= self.next_discovery:
            cpu0 = time.thread_time()
            self.discover()
            self.discovery_every_s = self._every(REDISCOVER * self.interval_s, time.thread_time() - cpu0)
            self.next_discovery = now + self.discovery_every_s
        cpu0 = time.thread_time()
        within = self.budget is None or self.budget.update() > 0
        waiting = []
        for path, tr in list(self.tracked.items()):
            try:
                throttled = self._nr_throttled(tr)
            except BwlabError as exc:
                self._read_failed(path, tr, exc)
                continue
            moved = tr.last_throttled is not None and throttled > tr.last_throttled
            tr.last_throttled = throttled
            if tr.hot is not None and not within:
                tr.hot.until = now  # cools at the next analysis, its samples classified first
            elif moved and within:
                if tr.hot is not None:
                    tr.hot.until = now + HOT_S
                else:
                    waiting.append((tr.last_hot, path, tr))
        self.coarse_every_s = self._every(self.interval_s, time.thread_time() - cpu0)
        waiting.sort(key=lambda w: w[0])
        for _, path, tr in waiting[: max(0, self.max_hot - len(self.hot))]:
            self._heat(path, tr, now)

    def _every(self, least_s: float, cost_s: float) -> float:
        """How often a routine that costs `cost_s` of CPU may run: every `least_s`, or less
        often when that would take more than its share of the budget."""
        if self.budget is None:
            return least_s
        return max(least_s, cost_s / (self.budget.share * ROUTINE_SHARE))

    def _nr_throttled(self, tr: Tracked) -> int:
        path = tr.group.stat_file
        try:
            if tr.stat_fd is None:
                tr.stat_fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            text = os.pread(tr.stat_fd, 4096, 0)
        except OSError as exc:
            tr.close()
            raise BwlabError(f"cannot read {path}: {exc.strerror}") from None
        match = NR_THROTTLED.search(text)
        if match is None:
            raise BwlabError(f"{path}: no nr_throttled count")
        return int(match.group(1))

    def _read_failed(self, path: str, tr: Tracked, exc: BwlabError) -> None:
        gone = not tr.group.dir.is_dir()
        with self.lock:
            if gone:
                self._drop(path)
                return
            self.errors["read"] += 1
        if not tr.failed:
            self.log(f"{path}: {exc}" if path not in str(exc) else str(exc))
            tr.failed = True

    def hot_count(self) -> int:
        return len(self.hot)

    def _heat(self, path: str, tr: Tracked, now: float) -> None:
        try:
            reader = sampler.Reader(tr.group)
        except BwlabError:
            return
        interval = sample_interval(tr.group.effective.period_us)
        tids = tr.group.threads()
        recorder = threads.ThreadRecorder(tids)
        step = max(threads.STEP_S, tr.group.effective.period_us / 1e6 / 2)
        # On a grid of its interval from one epoch: groups of the same period are read in one
        # wake-up (each wake-up of this loop costs more than a read).
        due = (now // interval + 1) * interval
        stepper = threads.Stepper.of(recorder, tr.group.threads, interval, step)
        tr.hot = Hot(reader, interval, now + HOT_S, due, recorder=recorder, stepper=stepper,
                     allowed=tuple(tr.group.allowed_cpus(tids)))  # fmt: skip
        tr.last_hot = now
        self.hot[path] = tr

    # --- fine: the hot groups at period resolution ---------------------------------------------

    def sample_hot(self, now: float) -> float:
        """Read each hot group that is due; the next time one is."""
        nxt = now + self.interval_s
        for path, tr in list(self.hot.items()):
            hot = tr.hot
            if hot is None:  # closed by a failed coarse read
                self.hot.pop(path, None)
                continue
            if hot.due <= now:
                try:
                    raw = hot.reader.read_raw()
                except BwlabError as exc:
                    self._read_failed(path, tr, exc)
                    continue
                hot.raws.append(raw)
                if hot.stepper is not None:
                    with contextlib.suppress(BwlabError):
                        hot.stepper.feed(raw[0], sampler.nr_periods(raw[1]), functools.partial(hot.reader.parse, raw))
                hot.due += hot.interval_s
                if hot.due < now:  # fell behind: do not burst to catch up, stay on the grid
                    hot.due = (now // hot.interval_s + 1) * hot.interval_s
            nxt = min(nxt, hot.due)
        return nxt

    def analyze_hot(self, now: float) -> None:
        for path, tr in list(self.hot.items()):
            hot = tr.hot
            if hot is None or len(hot.raws) < 3:
                continue
            try:
                samples = [hot.reader.parse(raw) for raw in hot.raws]
            except BwlabError as exc:
                hot.raws.clear()
                self._read_failed(path, tr, exc)
                continue
            edges = [i for i in range(1, len(samples)) if samples[i].nr_periods != samples[i - 1].nr_periods]
            if len(edges) >= 2:
                limit = tr.group.effective
                cpus = max(1, min(self.facts.ncpu, len(hot.recorder.tids) if hot.recorder else self.facts.ncpu))
                rec = hot.recorder
                # samples past the last boundary too: its throttles are read a little after it
                analysis = periods.analyze(samples, limit, hot.interval_s, cpus,
                                           rec.wanted_cpus if rec else None,
                                           rec.wanted_us if rec else None)  # fmt: skip
                self._count(tr, analysis, rec, hot.allowed)
                hot.raws = hot.raws[edges[-1] - 1 :]  # the last boundary starts the next analysis
                if rec is not None:
                    rec.forget_before(samples[edges[-1] - 1].t)
            if now > hot.until:
                hot.close()
                tr.hot = None
                self.hot.pop(path, None)

    def _count(self, tr: Tracked, analysis: periods.Analysis, rec: threads.ThreadRecorder | None,
               allowed: tuple[int, ...] = ()) -> None:  # fmt: skip
        limit = tr.group.effective
        capacity = (limit.quota_us or 0) + limit.burst_us
        with self.lock:
            c = tr.counts
            for p in analysis.periods:
                c.watched_periods += p.periods
                if p.verdict == "below":
                    c.below += p.throttled
                    c.below_s += p.throttled_us / 1e6
                elif p.verdict == "at":
                    c.at += p.throttled
                    c.at_s += p.throttled_us / 1e6
                if p.throttled:
                    c.debt_s += max(0.0, p.usage_us - capacity * p.periods) / 1e6
            if analysis.throttled:
                threads_n = (rec.busy_threads() or len(rec.tids)) if rec else 0
                facts = dataclasses.replace(self.facts, threads=threads_n, allowed=allowed)
                diag = diagnose.diagnose(tr.group, analysis, facts)
                for cause in diag.causes:
                    c.causes[cause.key] = c.causes.get(cause.key, 0) + analysis.throttled
                if diag.burst_us is not None:
                    c.recommended_burst_us = diag.burst_us

    # --- the loop --------------------------------------------------------------------------------

    def run(self) -> None:
        """The loop, in the thread that calls it: with the shortest fair slice, as doctor's
        sampler has (sampler.prompt), so that a read due at a boundary is not a tick late
        behind the hot group's threads."""
        with sampler.prompt():
            self._loop()

    def _loop(self) -> None:
        next_coarse = time.monotonic()
        next_analysis = next_coarse + ANALYZE_S
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= next_coarse:
                self.coarse_round()
                next_coarse += self.coarse_every_s
                if next_coarse < now:
                    next_coarse = now + self.coarse_every_s
            if now >= next_analysis:
                self.analyze_hot(now)
                next_analysis = now + ANALYZE_S
            nxt = min(self.sample_hot(time.monotonic()), next_coarse, next_analysis)
            delay = nxt - time.monotonic()
            if delay > 0.05:
                self._stop.wait(delay)
            elif delay > 0:  # the fine loop's wake-ups: a sleep costs half an Event.wait (19 vs 33 us)
                time.sleep(delay)
        with self.lock:
            for tr in self.tracked.values():
                tr.close()

    def stop(self) -> None:
        self._stop.set()


class BwlabCollector(Collector):
    """Fresh metric families from the watcher's counts at each scrape."""

    def __init__(self, watcher: Watcher) -> None:
        self.watcher = watcher

    def collect(self) -> Iterator[Any]:
        start = time.perf_counter()
        w = self.watcher
        watched = CounterMetricFamily("bwlab_watched_periods", "Periods of the group classified at period "
                                      "resolution: the denominator of the throttled rates", labels=LABELS)  # fmt: skip
        throttled = CounterMetricFamily("bwlab_throttled_periods", "Throttled periods among the watched ones, by "
                                        "verdict: below_quota (what it ran plus what it was stopped from running "
                                        "fits in its quota: unnecessary) or at_quota (it wanted more)",
                                        labels=(*LABELS, "verdict"))  # fmt: skip
        seconds = CounterMetricFamily("bwlab_throttled", "Time the group's runqueues sat throttled in "
                                      "watched throttled periods, by verdict", labels=(*LABELS, "verdict"),
                                      unit="seconds")  # fmt: skip
        debt = CounterMetricFamily("bwlab_carried_debt", "CPU time used beyond quota and burst in throttled "
                                   "periods, paid from the next period", labels=LABELS, unit="seconds")  # fmt: skip
        causes = CounterMetricFamily("bwlab_throttle_causes", "Watched throttled periods for which a cause was "
                                     "named (a period may have several)", labels=(*LABELS, "cause"))  # fmt: skip
        burst = GaugeMetricFamily("bwlab_recommended_burst", "The burst the detector recommends for the group "
                                  "(cpu.max.burst), absent if none", labels=LABELS, unit="seconds")  # fmt: skip
        with w.lock:
            hot = len(w.hot)
            for tr in w.tracked.values():
                if tr.last_hot == -math.inf:
                    continue  # never watched: no series (they would all be 0; 10,000 groups took 355 ms a scrape)
                lv = labels(tr.group)
                c = tr.counts
                watched.add_metric(lv, c.watched_periods)
                throttled.add_metric([*lv, "below_quota"], c.below)
                throttled.add_metric([*lv, "at_quota"], c.at)
                seconds.add_metric([*lv, "below_quota"], c.below_s)
                seconds.add_metric([*lv, "at_quota"], c.at_s)
                debt.add_metric(lv, c.debt_s)
                for cause, n in sorted(c.causes.items()):
                    causes.add_metric([*lv, cause], n)
                if c.recommended_burst_us is not None:
                    burst.add_metric(lv, c.recommended_burst_us / 1e6)
            groups_n = len(w.tracked)
            errors = dict(w.errors)
        yield from (watched, throttled, seconds, debt, causes, burst)
        yield GaugeMetricFamily("bwlab_limited_cgroups", "Cgroups with a CPU limit (their own or a parent's) "
                                "being watched", value=groups_n)  # fmt: skip
        yield GaugeMetricFamily("bwlab_hot_cgroups", "Of them, those sampled at period resolution now", value=hot)
        yield GaugeMetricFamily("bwlab_read_interval_seconds", "How often every group's counters are read "
                                "now (--interval, longer if the budget requires)", value=w.coarse_every_s)  # fmt: skip
        yield GaugeMetricFamily("bwlab_discovery_interval_seconds", "How often the hierarchy is walked for new "
                                "groups now", value=w.discovery_every_s)  # fmt: skip
        if w.budget is not None:
            yield GaugeMetricFamily("bwlab_cpu_budget_ratio", "Share of one CPU the exporter may use on average "
                                    "(compare rate(process_cpu_seconds_total))", value=w.budget.share)  # fmt: skip
        err = CounterMetricFamily("bwlab_errors", "Errors reading cgroups, by kind", labels=("kind",))
        for kind, n in sorted(errors.items()):
            err.add_metric([kind], n)
        yield err
        yield GaugeMetricFamily("bwlab_scrape_duration_seconds", "Time this scrape took to build its metrics",
                                value=time.perf_counter() - start)  # fmt: skip


def raise_nofile() -> None:
    """Hot groups keep their counter files open: the soft open-file limit up to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
