"""Below-quota throttling of every limited cgroup, counted continuously for Prometheus.

The per-period detector (periods.py) needs a group's counters read several times a period;
doing that for every group of a node would cost more than the 1 % of a CPU an exporter may
take. So sampling is adaptive: every group's cpu.stat is read every `interval` seconds (cheap:
one pread each), and a group whose nr_throttled moved becomes *hot*: its counters are read at
period resolution (a tenth of its period, 1-10 ms) and classified period by period for at least
HOT_S seconds, as long as it keeps throttling, at most `max_hot` groups at once, within the
CPU budget. Its periods are `bwlab_watched_periods_total`.

Between its hot spells a group is never blind: at each coarse read, the periods since the last
one that the detector did not classify are classified as one window from the kernel's own
counters (window.py, as `bwlab top` does: all its throttled periods below quota when its usage
plus throttled time fits in its periods' quota, else all at quota). So
`bwlab_throttled_periods_total` counts every throttled period of the group, by verdict, and
`bwlab_periods_total` every period: rates stay continuous at any budget, and the estimated part
is exported apart (`bwlab_estimated_throttled_periods_total`). The kernel's raw counters are
exported too, named and labelled to join cAdvisor's container_cpu_cfs_* series.

The collector builds fresh metric families at each scrape, so a group removed is gone at the
next scrape. A group gets series once it has throttled: 10,000 groups that never did would cost
a scrape 355 ms for zeros.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
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
from bwlab.live import diagnose, groups, sampler, window
from bwlab.live.groups import Hierarchy, LiveGroup

HOT_S = 10.0  # a group that throttled is watched at period resolution at least this long
ANALYZE_S = 1.0  # hot groups' samples are classified this often
REDISCOVER = 6  # the hierarchy is walked every this many coarse intervals (new groups), at least
ROUTINE_SHARE = 0.25  # of the CPU budget, what discovery and (apart) the coarse reads may each use
LABELS = ("id", "container_id", "pod_uid")
BUCKET_S = 10.0  # the CPU budget can be saved up for this long (CpuBudget)


@dataclass
class Tally:
    """Periods, throttled periods, usage and throttled time, summed."""

    periods: int = 0
    throttled: int = 0
    usage_us: float = 0.0
    throttled_us: float = 0.0

    def add(self, periods_n: int, throttled: int, usage_us: float, throttled_us: float) -> None:
        self.periods += periods_n
        self.throttled += throttled
        self.usage_us += usage_us
        self.throttled_us += throttled_us


@dataclass
class Counts:
    """What the exporter found in a group since it first read it: every period, classified by
    the detector (watched) or as a window of the kernel's counters (estimated)."""

    watched_periods: int = 0
    below: int = 0  # throttled periods below quota, watched and estimated
    at: int = 0
    below_s: float = 0.0  # throttled time in below-quota periods
    at_s: float = 0.0
    estimated_periods: int = 0  # of every period, those classified as a window
    estimated_below: int = 0
    estimated_at: int = 0
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
    raws: list[sampler.Raw] = field(default_factory=list)
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
    reader: sampler.Reader | None = None  # its counters, kept open for the coarse reads
    first: periods.Sample | None = None  # the counters at the first read: counting starts there
    last: periods.Sample | None = None  # at the last coarse read
    classified: Tally = field(default_factory=Tally)  # since `first`, by the detector or as windows
    counts: Counts = field(default_factory=Counts)
    hot: Hot | None = None
    failed: bool = False  # a read error was logged once
    unusable: bool = False  # v1, in the cpu hierarchy alone: no usage to read, never read again
    raw: tuple[bytes, bytes | None] | None = None  # the counters' text at the last coarse read
    last_hot: float = -math.inf  # when it was last watched finely: the least recent goes first

    @property
    def exported(self) -> bool:
        """It has series: once it throttled (or was watched)."""
        return self.last_hot != -math.inf or self.counts.below + self.counts.at > 0

    def close(self) -> None:
        self.raw = None
        if self.reader is not None:
            self.reader.close()
            self.reader = None
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
        """Every group's counters (cpu.stat, and v1's cpuacct.usage: a pread each, on files kept
        open), what the detector did not classify counted as a window; a group whose
        nr_throttled moved turns hot, the least recently watched first, while the exporter's average
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
        windows: list[tuple[Tracked, window.Window]] = []
        opening = 0.0  # CPU time of first reads (files opened, counters parsed): not every round's cost
        for path, tr in list(self.tracked.items()):
            if tr.unusable:
                continue
            fresh = tr.raw is None
            t0 = time.thread_time() if fresh else 0.0
            try:
                sample = self._read(tr)
            except sampler.NoUsage as exc:  # it never will be: said once, not an error each round
                tr.unusable = True
                self.log(str(exc))
                continue
            except BwlabError as exc:
                self._read_failed(path, tr, exc)
                continue
            if fresh:
                opening += time.thread_time() - t0
            moved = sample is not None and tr.last is not None and sample.nr_throttled > tr.last.nr_throttled
            rest = self._unclassified(tr, sample) if sample is not None else None
            if rest is not None:
                windows.append((tr, rest))
            if tr.hot is not None and not within:
                tr.hot.until = now  # cools at the next analysis, its samples classified first
            elif moved and within:
                if tr.hot is not None:
                    tr.hot.until = now + HOT_S
                else:
                    waiting.append((tr.last_hot, path, tr))
        self._count_windows(windows)  # under one lock: a scrape holds it while it builds its families
        # from what a round costs once its groups are open: a first round that opens and parses
        # every group's files costs many rounds' worth, and would put the next one off by as much
        self.coarse_every_s = self._every(self.interval_s, time.thread_time() - cpu0 - opening)
        waiting.sort(key=lambda w: w[0])
        for _, path, tr in waiting[: max(0, self.max_hot - len(self.hot))]:
            self._heat(path, tr, now)

    def _every(self, least_s: float, cost_s: float) -> float:
        """How often a routine that costs `cost_s` of CPU may run: every `least_s`, or less
        often when that would take more than its share of the budget."""
        if self.budget is None:
            return least_s
        return max(least_s, cost_s / (self.budget.share * ROUTINE_SHARE))

    @staticmethod
    def _read(tr: Tracked) -> periods.Sample | None:
        """The group's counters (cpu.stat, and v1's cpuacct.usage), on files kept open; None
        when they read as they did last time (an idle group: most of a node's, and parsing
        them every round cost 1,000 groups a quarter of the budget)."""
        if tr.reader is None:
            tr.reader = sampler.Reader(tr.group)
        try:
            raw = tr.reader.read_raw()
            if (raw[1], raw[2]) == tr.raw:
                return None
            tr.raw = (raw[1], raw[2])
            return tr.reader.parse(raw)
        except BwlabError:
            tr.close()
            raise

    def _unclassified(self, tr: Tracked, sample: periods.Sample) -> window.Window | None:
        """The periods since the first read that are not classified yet, as one window of the
        kernel's counters: those since the last coarse read, less what the detector counted of
        them. None while the group is hot (its samples still to be analysed are the
        detector's), or when none is left: a remainder below zero (the detector's periods cut
        at other times than the coarse reads) waits for the next read. Counters that went back
        (the group removed and made again under its path, a service restarted) start the
        count again from this read."""
        if tr.first is None or (tr.last is not None and sample.nr_periods < tr.last.nr_periods):
            tr.first, tr.classified = sample, Tally()
        tr.last = sample
        if tr.hot is not None:
            return None
        since = window.window(tr.first, sample, tr.group.effective)
        done = tr.classified
        rest = window.Window(since.seconds, since.periods - done.periods, max(0, since.throttled - done.throttled),
                             since.usage_us - done.usage_us, max(0.0, since.throttled_us - done.throttled_us),
                             since.limit, self.facts.ncpu)  # fmt: skip
        return rest if rest.periods > 0 else None

    def _count_windows(self, windows: list[tuple[Tracked, window.Window]]) -> None:
        """Each window's throttled periods: all below quota when its demand fits its quota
        (window.Window.likely_below), else all at quota."""
        with self.lock:
            for tr, rest in windows:
                below = rest.likely_below
                c = tr.counts
                c.estimated_periods += rest.periods
                c.estimated_below += below
                c.estimated_at += rest.throttled - below
                c.below += below
                c.at += rest.throttled - below
                share = below / rest.throttled if rest.throttled else 0.0
                c.below_s += rest.throttled_us / 1e6 * share
                c.at_s += rest.throttled_us / 1e6 * (1 - share)
                tr.classified.add(rest.periods, rest.throttled, rest.usage_us, rest.throttled_us)

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

    def analysis_round(self, now: float) -> None:
        """Every ANALYZE_S: over the budget, every hot group cools now (its samples classified
        first), not at the next coarse round. A spell that began with a little balance left
        ran a whole coarse interval (5 s) at a hot group's cost (4-8 % of a CPU here, more for
        several groups) before a coarse round saw the balance spent: each spell overshot the
        budget by up to 0.4 CPU-s, and a machine slow for a while ran the first spell deep
        into debt (the landing CI of 31f023c: 1.97 CPU-s in 120 s against at most 1.7, no
        period watched after the first 30 s)."""
        if self.hot and self.budget is not None and self.budget.update() <= 0:
            for tr in self.hot.values():
                if tr.hot is not None:
                    tr.hot.until = min(tr.hot.until, now)
        self.analyze_hot(now)

    def analyze_hot(self, now: float) -> None:
        for path, tr in list(self.hot.items()):
            hot = tr.hot
            if hot is None:
                continue
            try:
                samples = [hot.reader.parse(raw) for raw in hot.raws]
            except BwlabError as exc:
                hot.raws.clear()
                self._read_failed(path, tr, exc)
                continue
            edges = [i for i in range(1, len(samples)) if samples[i].nr_periods != samples[i - 1].nr_periods]
            if len(samples) >= 3 and len(edges) >= 2:
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
            if now >= hot.until:
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
                tr.classified.add(p.periods, p.throttled, p.usage_us, p.throttled_us)
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
                self.analysis_round(now)
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
        every = CounterMetricFamily("bwlab_periods", "Periods of the group since the exporter first read it, "
                                    "every one classified: the denominator of the throttled rates",
                                    labels=LABELS)  # fmt: skip
        watched = CounterMetricFamily("bwlab_watched_periods", "Of bwlab_periods_total, those classified period "
                                      "by period (the group sampled at period resolution)", labels=LABELS)  # fmt: skip
        throttled = CounterMetricFamily("bwlab_throttled_periods", "Throttled periods by verdict: below_quota "
                                        "(what it ran plus what it was stopped from running fits in its quota: "
                                        "unnecessary) or at_quota (it wanted more); per period where watched, "
                                        "else per window of the kernel's counters",
                                        labels=(*LABELS, "verdict"))  # fmt: skip
        estimated = CounterMetricFamily("bwlab_estimated_throttled_periods", "Of bwlab_throttled_periods_total, "
                                        "those classified as a window of the kernel's counters (between "
                                        "watched spells), by verdict", labels=(*LABELS, "verdict"))  # fmt: skip
        seconds = CounterMetricFamily("bwlab_throttled", "Time the group's runqueues sat throttled in throttled "
                                      "periods, by verdict", labels=(*LABELS, "verdict"), unit="seconds")  # fmt: skip
        debt = CounterMetricFamily("bwlab_carried_debt", "CPU time used beyond quota and burst in watched throttled "
                                   "periods, paid from the next period", labels=LABELS, unit="seconds")  # fmt: skip
        causes = CounterMetricFamily("bwlab_throttle_causes", "Watched throttled periods for which a cause was "
                                     "named (a period may have several)", labels=(*LABELS, "cause"))  # fmt: skip
        burst = GaugeMetricFamily("bwlab_recommended_burst", "The burst the detector recommends for the group "
                                  "(cpu.max.burst), absent if none", labels=LABELS, unit="seconds")  # fmt: skip
        # the kernel's own counters, as cAdvisor's container_cpu_cfs_* and container_cpu_usage have them
        kernel = (
            ("periods", "nr_periods"),
            ("throttled_periods", "nr_throttled"),
            ("throttled_seconds", "throttled time"),
            ("bursts", "periods that ran on burst (nr_bursts)"),
            ("burst_seconds", "time run on burst (burst_usec, v1 burst_time)"),
        )
        raw = {
            key: CounterMetricFamily(f"bwlab_cfs_{key}", f"The kernel's {what} (cpu.stat), as read last", labels=LABELS)
            for key, what in kernel
        }
        usage = CounterMetricFamily("bwlab_cpu_usage", "The group's CPU time (cpu.stat usage_usec, v1 "
                                    "cpuacct.usage), as read last", labels=LABELS, unit="seconds")  # fmt: skip
        with w.lock:
            hot = len(w.hot)
            for tr in w.tracked.values():
                if not tr.exported:
                    continue  # never throttled: no series (they would all be 0; 10,000 groups took 355 ms a scrape)
                lv = labels(tr.group)
                c = tr.counts
                every.add_metric(lv, c.watched_periods + c.estimated_periods)
                watched.add_metric(lv, c.watched_periods)
                throttled.add_metric([*lv, "below_quota"], c.below)
                throttled.add_metric([*lv, "at_quota"], c.at)
                estimated.add_metric([*lv, "below_quota"], c.estimated_below)
                estimated.add_metric([*lv, "at_quota"], c.estimated_at)
                seconds.add_metric([*lv, "below_quota"], c.below_s)
                seconds.add_metric([*lv, "at_quota"], c.at_s)
                debt.add_metric(lv, c.debt_s)
                for cause, n in sorted(c.causes.items()):
                    causes.add_metric([*lv, cause], n)
                if c.recommended_burst_us is not None:
                    burst.add_metric(lv, c.recommended_burst_us / 1e6)
                if tr.last is not None:
                    raw["periods"].add_metric(lv, tr.last.nr_periods)
                    raw["throttled_periods"].add_metric(lv, tr.last.nr_throttled)
                    raw["throttled_seconds"].add_metric(lv, tr.last.throttled_us / 1e6)
                    raw["bursts"].add_metric(lv, tr.last.nr_bursts)
                    raw["burst_seconds"].add_metric(lv, tr.last.burst_us / 1e6)
                    usage.add_metric(lv, tr.last.usage_us / 1e6)
            groups_n = len(w.tracked)
            errors = dict(w.errors)
        yield from (every, watched, throttled, estimated, seconds, debt, causes, burst, *raw.values(), usage)
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
    """Every group keeps its counter files open (two on v1): the soft open-file limit up to the
    hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
