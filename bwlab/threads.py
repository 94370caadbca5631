"""What a group's threads wanted to run, from /proc/TID/schedstat (time on a CPU, time waiting
on a runqueue) and the group's throttled time: a thread's CPU need in an interval is its run
time and its share (by run time) of the time the group sat throttled in it (what the trace
replays); the time it wanted a CPU is its run time and run delay (what the detector weighs:
the run delay counts the time throttled as well, measured on 6.18 against the eBPF trace).
Written as the simulator's trace (JSON lines: run_us, sleep_us, thread) to replay it under
other settings.
"""

from __future__ import annotations

import bisect
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bwlab.errors import BwlabError
from bwlab.periods import SETTLE_S, Sample

# a thread that was neither on a CPU nor waiting for one for all but this long of a step slept
SLEPT_US = 100.0
# a thread on a CPU or waiting for one this share of an interval between its reads wanted one
# through it (and one that was, 1 - this, not at all): how a late read is split (_at)
WANTED_THROUGH = 0.95


# Per-thread demand is read at each boundary and every 10 ms between (once a period at periods
# up to 10 ms), by doctor, the exporter's hot groups and cgsample. At a 10 ms period, reading it
# every 5 ms as well found no more below-quota periods (wakelat's bursts against the trace: 90
# of 94 found, 90 of 92 calls right; once a period: 67 of 69 and 67 of 68) and cost 0.4 % of a
# CPU more; every 2.5 ms found fewer.
STEP_S = 0.010

BUSY_SHARE = 0.05  # a thread that wanted a CPU more than this share of the time is busy (a worker)
FOLLOW_S = 1.0  # how often the group's thread list is read again (every 0.1 s cost 0.5 % of a CPU)


def read_schedstat(tid: int, fds: dict[int, int] | None = None) -> tuple[int, int] | None:
    """(ns on a CPU, ns waiting on a runqueue) of thread `tid`; None once it has exited. With
    `fds` the file is kept open there (a pread per step instead of an open, read and close)."""
    try:
        if fds is None:
            data = Path(f"/proc/{tid}/schedstat").read_bytes()
        else:
            fd = fds.get(tid)
            if fd is None:
                fd = fds[tid] = os.open(f"/proc/{tid}/schedstat", os.O_RDONLY | os.O_CLOEXEC)
            data = os.pread(fd, 128, 0)
    except OSError:  # ESRCH from a kept file once the thread has exited
        if fds is not None and tid in fds:
            os.close(fds.pop(tid))
        return None
    fields = data.split()
    if len(fields) < 2 or not fields[0].isdigit() or not fields[1].isdigit():
        return None
    return int(fields[0]), int(fields[1])


@dataclass
class ThreadRecorder:
    """Per-thread demand per sampling step, for the threads the group had when it started."""

    tids: list[int]
    ncpu: int = field(default_factory=lambda: os.cpu_count() or 1)
    last: dict[int, tuple[int, int]] = field(default_factory=dict)
    last_t: float | None = None
    last_throttled_us: float = 0.0
    carry: dict[int, float] = field(default_factory=dict)  # demand beyond a step, moved to the next
    last_weights: dict[int, float] = field(default_factory=dict)  # run per thread, the last step any ran
    # per step: (start, end, CPUs the threads wanted: each thread's demand / step, summed)
    steps: list[tuple[float, float, float]] = field(default_factory=list)
    intervals: dict[int, list[tuple[float, float]]] = field(default_factory=dict)  # tid -> (run_us, sleep_us)
    # per thread and step: (start, end, us on a CPU, us waiting for one): what episodes() reads
    spent: dict[int, list[tuple[float, float, float, float]]] = field(default_factory=dict)
    throttled: list[tuple[float, float, float]] = field(default_factory=list)  # (start, end, us) counted per step
    fds: dict[int, int] = field(default_factory=dict)  # tid -> its schedstat, kept open; close()
    # tid -> its last read: (when, run ns, wait ns, the share of the interval before it that it
    # wanted a CPU, None before its second read)
    read: dict[int, tuple[float, int, int, float | None]] = field(default_factory=dict)
    born: dict[int, float] = field(default_factory=dict)  # tid -> born after this (follow()), until first read
    interval_steps: int = 0  # steps since the intervals were last cleared (forget_before)
    ran_us: list[float] = field(default_factory=list)  # per step: what the threads ran, together
    active: list[int] = field(default_factory=list)  # per step: threads that ran or waited
    boundaries: list[float] = field(default_factory=list)  # period boundaries seen (Stepper), in order
    # per step: the threads' wanted CPUs before the cap at every CPU (what a run delay spread back adds to)
    wanted_sum: list[float] = field(default_factory=list)
    spread: dict[int, dict[int, float]] = field(default_factory=dict)  # tid -> {step number: us spread back}
    step_count: int = 0  # steps ever recorded: the number of the next one
    _wanting: list[tuple[float, float, float]] = field(default_factory=list)  # wanting(), cached
    _wanting_key: tuple[int, int, float] | None = None
    _wanting_ends: list[float] = field(default_factory=list)

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()

    def follow(self, tids: list[int], since: float | None = None) -> None:
        """Watch these threads too (the group's list read again: pools grow, runtimes start
        threads as they need them). A new thread's first step only reads it (_pad), unless it
        was born after `since` (the list's read before this one): then what its counters hold
        was all wanted since then (step())."""
        known = set(self.tids)
        new = [tid for tid in tids if tid not in known]
        self.tids += new
        if since is not None:
            self.born.update(dict.fromkeys(new, since))

    def _pad(self, tid: int) -> None:
        """Give `tid` the steps it has no interval for as asleep (it exited, or was not read
        yet): every thread keeps one interval per step."""
        ivs = self.intervals.setdefault(tid, [])
        if (missing := self.interval_steps - len(ivs)) > 0:
            ivs += [(0.0, (b - a) * 1e6) for a, b, _ in self.steps[-missing:]]
        spent = self.spent.setdefault(tid, [])
        if (missing := len(self.steps) - len(spent)) > 0:
            spent += [(a, b, 0.0, 0.0) for a, b, _ in self.steps[-missing:]]

    def step(self, t: float, throttled_us: float, now: dict[int, tuple[int, int, float]] | None = None) -> None:
        """Read every thread at monotonic time `t` (the group's throttled time then: its cpu.stat
        counter), or take `now`, their (run ns, wait ns, monotonic s when read) as read elsewhere
        (cgsample's steps); from the second call on, each live thread gets one interval: its
        demand (capped at the step) then the rest as sleep."""
        if now is None:
            now = {}
            for tid in self.tids:
                if (read := read_schedstat(tid, self.fds)) is not None:
                    now[tid] = (*read, time.monotonic())
        at_t = self._at(t, now)
        if self.last_t is not None:
            dt_us = (t - self.last_t) * 1e6
            ran = {tid: (run - self.last[tid][0], wait - self.last[tid][1]) for tid, (run, wait) in at_t.items()
                   if tid in self.last}  # fmt: skip
            # a thread born since the list's last read: its counters are what it wanted since
            # (wakelat's 16 workers, started between two reads of the list as a step of a 10 ms
            # period began, wanted 1.8 quotas that the steps saw none of, and the first three
            # periods of a run were called below quota). Not one that moved in from elsewhere:
            # a thread cannot have run and waited longer than it has lived.
            for tid, (run, wait, at) in now.items():
                if (
                    tid not in self.last
                    and (born := self.born.get(tid)) is not None
                    and (run + wait) / 1e9 <= at - born
                ):
                    ran[tid] = at_t[tid]
            # the throttled time goes to the threads that ran, by what they ran; in a step where
            # none ran (all throttled) to those that ran in the last step that had any
            weights = {tid: float(r) for tid, (r, _) in ran.items()}
            if not any(weights.values()):
                weights = {tid: self.last_weights.get(tid, 0.0) for tid in ran}
            else:
                self.last_weights = weights
            total = sum(weights.values())
            stopped = max(0.0, throttled_us - self.last_throttled_us)
            active = sum(1 for r, w in ran.values() if r or w)
            wanted = 0.0
            late: dict[int, float] = {}  # tid -> run delay beyond the step, us
            for tid in ran:
                self._pad(tid)
            for tid, (run, wait) in ran.items():
                if dt_us <= 0:
                    continue
                # the throttled time is counted when the period timer unthrottles, often a
                # step after the thread was stopped: what does not fit in this step goes on
                share = stopped * weights[tid] / total if total else 0.0
                # CPU time, what a replay runs: its run, its share of the throttled time, and its
                # wait when no more threads were active than CPUs (then it waited for the CPU
                # time it was owed, not behind its siblings: wakelat's 30 workers, their wait
                # replayed as work, were predicted 87 % throttled for 9.5 % measured; sysbench's
                # two threads on two CPUs, without it, 15-18 % for 30-50 %)
                own_wait = wait / 1000 if active <= self.ncpu else 0.0
                need = run / 1000 + share + own_wait + self.carry.get(tid, 0.0)
                self.carry[tid] = min(dt_us, max(0.0, need - dt_us))  # the counter lags a step at most
                need = min(dt_us, need)
                self.intervals[tid].append((need, dt_us - need))  # both lists made by _pad
                self.spent[tid].append((self.last_t, t, run / 1000, wait / 1000))
                # wanting a CPU is being on one or waiting for one: run delay counts the wait
                # behind siblings and, measured on 6.18, the time throttled (wakelat's bursts, 20 s
                # against the eBPF trace: run + wait came to 0.98-1.00 x the time its threads
                # wanted a CPU; adding their share of the throttled time, as the CPU need does,
                # made it 1.5 x at a 10 ms period and called half the periods below quota over-use)
                wanted += min(dt_us, (run + wait) / 1000) / dt_us
                if (run + wait) / 1000 > dt_us:
                    late[tid] = (run + wait) / 1000 - dt_us
            # threads beyond the CPUs wait for each other: the group wants at most every CPU
            self.steps.append((self.last_t, t, min(wanted, float(self.ncpu))))
            self.wanted_sum.append(wanted)
            self.step_count += 1
            for tid, us in late.items():
                self._spread_back(tid, us, self.born.get(tid))
            self.ran_us.append(sum(run for run, _ in ran.values()) / 1000)
            self.active.append(active)
            self.interval_steps += 1
            if stopped > 0:
                self.throttled.append((self.last_t, t, stopped))
            for tid in (self.intervals.keys() | at_t.keys()) - ran.keys():  # `ran`: padded above
                self._pad(tid)
        self.last, self.last_t, self.last_throttled_us = at_t, t, throttled_us
        self.born.clear()  # set by follow() just before: each such thread read now, or gone
        for gone in self.read.keys() - now.keys():  # exited: a long watch keeps no trace of it
            del self.read[gone]

    def _at(self, t: float, now: dict[int, tuple[int, int, float]]) -> dict[int, tuple[int, int]]:
        """Each thread's counters as they stood at time `t`: a thread read after `t` has what
        it gained since its last read split at `t` (as read on its first read, or a read at or
        before `t`). Why: a sampler preempted among the group's threads reads them late
        (cgsample in a TCG guest took 6.3 ms for a step of 17 threads), and a thread that ran
        until after its late read, read as at `t`, showed the period after it as not wanted
        (wakelat's bursts at 10 ms, called below quota while the trace saw 1.5 quotas wanted).

        How it is split: a thread that wanted a CPU through its last interval and less through
        this one most likely went on wanting, then stopped: what it gained goes before `t`
        first; one that wanted nothing in its last interval most likely began to want in this
        one: after `t` first; otherwise in proportion to time. Against the trace (wakelat's
        bursts, 10 ms, guest 7.3.4, 12 runs), in proportion alone: 46,152 steps off by 0.0136
        CPUs on average, 1,306 by more than 0.1; split so: 0.0127 and 1,216."""
        out = {}
        for tid, (run, wait, at) in now.items():
            before = self.read.get(tid)
            if before is None:
                self.read[tid] = (at, run, wait, None)
                out[tid] = (run, wait)
                continue
            last_at, last_run, last_wait, full = before  # full: the share of its last interval it wanted
            gained = (run + wait - last_run - last_wait) / 1e9
            self.read[tid] = (at, run, wait, gained / (at - last_at) if at > last_at else full)
            if at <= t or last_at >= t:
                out[tid] = (run, wait)
                continue
            f = (t - last_at) / (at - last_at)
            if gained > 0 and full is not None and full >= WANTED_THROUGH:
                f = min(gained, t - last_at) / gained
            elif gained > 0 and full is not None and full <= 1 - WANTED_THROUGH:
                f = (gained - min(gained, at - t)) / gained
            out[tid] = (last_run + round((run - last_run) * f), last_wait + round((wait - last_wait) * f))
        return out

    def _spread_back(self, tid: int, us: float, born: float | None = None) -> None:
        """Give the steps before the last one the run delay `us` that thread `tid`'s last step
        read beyond its length. A run delay is counted when the wait ends, as the thread gets a
        CPU: a thread taken off a throttled runqueue (6.18 and 7.3 dequeue it on its way back to
        user space) counts nothing while it is off, then all of it at once. So the wait is
        given back, newest step first, to what each step had room for (its length less what
        the thread already wanted in it), until a step where the thread had run or waited
        before (where the wait began), one that ended before it was `born`, or `us` is spent."""
        spent = self.spent[tid]
        extra = self.spread.setdefault(tid, {})
        for k in range(2, min(len(self.steps), len(spent)) + 1):
            a, b, _ = self.steps[-k]
            if born is not None and b <= born:
                break
            number = self.step_count - k
            dt_us = (b - a) * 1e6
            _, _, run, wait = spent[-k]
            own = min(dt_us, run + wait) + extra.get(number, 0.0)
            add = min(us, max(0.0, dt_us - own))
            if add > 0 and dt_us > 0:
                extra[number] = extra.get(number, 0.0) + add
                self.wanted_sum[-k] += add / dt_us
                self.steps[-k] = (a, b, min(self.wanted_sum[-k], float(self.ncpu)))
                us -= add
            if us <= 0 or run + wait > SLEPT_US:
                break

    def forget_before(self, t: float) -> None:
        """Drop what was recorded before monotonic time `t` (a long-running watcher), and every
        interval."""
        kept = [i for i, s in enumerate(self.steps) if s[1] >= t]
        self.steps = [self.steps[i] for i in kept]
        self.wanted_sum = [self.wanted_sum[i] for i in kept]
        first = self.step_count - len(self.ran_us) + (kept[0] if kept else len(self.ran_us))
        self.spread = {tid: kept_us for tid, spread in self.spread.items()
                       if (kept_us := {n: us for n, us in spread.items() if n >= first})}  # fmt: skip
        self.ran_us = [self.ran_us[i] for i in kept]
        self.active = [self.active[i] for i in kept]
        self.throttled = [s for s in self.throttled if s[1] >= t]
        self.boundaries = [b for b in self.boundaries if b >= t - SETTLE_S]
        self.spent = {tid: [s for s in steps if s[1] >= t] for tid, steps in self.spent.items()}
        self.intervals.clear()
        self.interval_steps = 0

    def episodes(self) -> dict[int, list[tuple[float, float]]]:
        """The threads' work as episodes due at the time they began (what a paced replay runs):
        a thread wants a CPU from the step it ran or waited in until the step it did neither,
        a step inside the group's throttled time not counting (a throttled thread is off its
        runqueue, neither running nor waiting); each episode's work is the CPU time it got,
        due when the first step's run and wait began (at most that step's start).

        Why episodes and not the intervals: a server's requests arrive on their own clock,
        and the work a throttled group could not run waits for it. Replayed as run/sleep
        intervals with the throttled time added as work, wakelat's seeded bursts (host 6.18,
        quota 1.75 CPUs per 100 ms, 30 workers, 4 seeds) were predicted 19-20 % throttled for
        27-34 % measured, and with a 50 ms burst 0.6-5.7 % for 1.5-10.6 %; replayed as
        episodes due when they began, 31-36 % and 4.0-13.5 % (docs/live.md)."""
        cpus = max(1, self.ncpu)
        stops = [(a - us / 1e6 / cpus, b) for a, b, us in self.throttled]  # when the group sat throttled
        stopped: dict[tuple[float, float], bool] = {}  # per step (every thread has the same steps)

        def in_stop(a: float, b: float) -> bool:
            if (a, b) not in stopped:
                stopped[(a, b)] = any(min(b, y) - max(a, x) > 1e-6 for x, y in stops)
            return stopped[(a, b)]

        start = min((s[0][0] for s in self.spent.values() if s), default=0.0)
        out: dict[int, list[tuple[float, float]]] = {}
        for tid, steps in self.spent.items():
            begun: list[tuple[float, float]] = []  # (due, CPU us)
            current: list[float] | None = None
            for a, b, run, wait in steps:
                if run + wait > SLEPT_US:
                    if current is None:
                        current = [max(a, b - (run + wait) / 1e6), 0.0]
                    current[1] += run
                elif current is not None and not in_stop(a, b):
                    begun.append((current[0], current[1]))
                    current = None
            if current is not None:
                begun.append((current[0], current[1]))
            if not steps:
                continue
            end = steps[-1][1]
            ivs = [(0.0, (begun[0][0] - start) * 1e6)] if begun and begun[0][0] > start else []
            for i, (due, work) in enumerate(begun):
                following = begun[i + 1][0] if i + 1 < len(begun) else end
                ivs.append((work, max(0.0, (following - due) * 1e6 - work)))
            out[tid] = ivs or [(0.0, (end - start) * 1e6)]
        return out

    def wanting(self) -> list[tuple[float, float, float]]:
        """Per step (start, end, CPUs the threads wanted): their run plus run delay, or, if more,
        their run plus the group's throttled time in the step (at most a CPU per thread that
        ran or waited around it), at most every CPU. Two lower
        bounds: a thread queued on a throttled runqueue counts run delay, but one taken off it
        (6.18 dequeues a throttled task when it returns to user space) counts nothing until it
        runs again (then step() spreads it back: _spread_back), while the runqueue's throttled
        time goes on (wakelat's bursts at 100 ms: whole periods the trace saw at 2 CPUs wanted
        came to 1.9 by run plus run delay). The throttled time is
        counted at the unthrottle: it is spread back from there over its length on every CPU,
        from the period boundary it was counted after if one lies in its step or just before
        (an unthrottle by the period timer; a runqueue on another CPU is counted up to a tick
        later, in the next step: spread back from that step's end, wakelat's bursts at 100 ms
        had the last 10 ms of a period weighed at 1.0-1.2 CPUs that the trace saw at 2)."""
        key = (len(self.steps), len(self.throttled), self.steps[0][0] if self.steps else 0.0)
        if self._wanting_key == key:
            return self._wanting
        cpus = float(max(1, self.ncpu))
        stops = []  # every CPU stopped
        for a, b, us in self.throttled:
            if us > 0:
                i = bisect.bisect_right(self.boundaries, b) - 1
                end = self.boundaries[i] if i >= 0 and self.boundaries[i] > a - SETTLE_S else b
                stops.append((end - us / 1e6 / cpus, end))
        stops.sort(key=lambda s: s[1])
        longest = max((y - x for x, y in stops), default=0.0)  # stops end in order, start nearly so
        out = []
        j0 = 0
        prev_active = 0
        for (a, b, w), ran, active in zip(self.steps, self.ran_us, self.active, strict=True):
            dt = b - a
            while j0 < len(stops) and stops[j0][1] <= a:
                j0 += 1
            thr = 0.0
            for x, y in stops[j0:]:
                if y - longest >= b:  # this one and every later one start after the step
                    break
                thr += max(0.0, min(b, y) - max(a, x)) * cpus
            alt = (ran / 1e6 + thr) / dt if dt > 0 else 0.0
            # at most a CPU per thread that ran or waited in it or the step before (a thread
            # that ran through a step was not throttled in it: the reach-back is approximate)
            alt = min(alt, max(active, prev_active))
            prev_active = active
            out.append((a, b, min(cpus, max(w, alt))))
        self._wanting, self._wanting_key = out, key
        self._wanting_ends = [b for _, b, _ in out]
        return out

    def wanted_cpus(self, start: float, end: float) -> float | None:
        """The most CPUs the threads wanted in a step overlapping [start, end]; None if no
        step does (not recorded)."""
        found = [w for a, b, w in self.wanting() if a < end and b > start]
        return max(found) if found else None

    def wanted_us(self, start: float, end: float) -> float | None:
        """CPU time the threads wanted in [start, end]: each step's wanted CPUs times its
        overlap with it; None if the steps do not cover it."""
        if not self.steps or self.steps[0][0] > start or self.steps[-1][1] < end:
            return None
        steps = self.wanting()
        total = 0.0
        for a, b, w in steps[bisect.bisect_right(self._wanting_ends, start) :]:
            if a >= end:
                break
            total += w * max(0.0, min(b, end) - max(a, start))
        return total * 1e6

    def busy_threads(self, share: float = BUSY_SHARE) -> int:
        """Threads that wanted a CPU more than `share` of the time: what competes for the quota."""
        count = 0
        for ivs in self.intervals.values():
            span = sum(r + s for r, s in ivs)
            count += span > 0 and sum(r for r, _ in ivs) / span > share
        return count

    def mean_cpus(self) -> float:
        """Average CPUs the threads wanted over the recording."""
        total = sum(run for ivs in self.intervals.values() for run, _ in ivs)
        span = max((sum(r + s for r, s in ivs) for ivs in self.intervals.values()), default=0.0)
        return total / span if span else 0.0

    def write_trace(self, path: Path, intervals: dict[int, list[tuple[float, float]]] | None = None) -> Path:
        """The intervals (the recorded ones, or these) as a trace file, consecutive equal ones
        merged; threads that did no work left out, the rest renumbered in thread ID order. The
        simulator puts thread i on CPU i mod CPUs and never moves it, so a thread that only
        slept would still move the busy ones after it: a Go service whose runtime had replaced
        an idle thread during the watch had its three busy threads on one CPU of two, replayed
        as it is 2.6 % of periods throttled for 56.7 % watched (host 6.18, 20 ms period,
        2026-11-29). Numbering the busiest first instead moved wakelat's bursts from 32.4 % to
        27.3 % (33.5-34.0 % measured), so ID order stays."""
        intervals = self.intervals if intervals is None else intervals
        worked = [tid for tid in sorted(intervals) if any(round(run) >= 1 for run, _ in intervals[tid])]
        if not worked:
            raise BwlabError("no thread of the group ran while it was watched: nothing to replay")
        lines = []
        for n, tid in enumerate(worked):
            merged: list[list[float]] = []
            for run, sleep in intervals[tid]:
                if merged and merged[-1][1] < 1 and sleep < 1:  # both all-run: one longer run
                    merged[-1][0] += run + sleep
                else:
                    merged.append([run, sleep])
            for run, sleep in merged:
                if round(run) >= 1 or round(sleep) >= 1:
                    lines.append(json.dumps({"run_us": round(run), "sleep_us": round(sleep), "thread": n}))
        path.write_text("\n".join(lines) + "\n")
        return path


@dataclass
class Stepper:
    """When a recorder reads its threads, fed the group's counter reads as they come: every
    `step_s` and on the first read after a period boundary (nr_periods moved), so that steps
    end within a read of the boundaries and little of a period's neighbour is weighed in it
    (with steps at a fixed 5 ms, wakelat's bursts at a 10 ms period were weighed 1.15-1.25 x
    what the trace found the threads wanted in throttled periods beside periods of over-use).
    The group's thread list is read again every `follow_s` (threads started since: an
    in-process run begun before wakelat had all its threads saw periods of 180 ms usage with
    no thread wanting). doctor and the exporter's hot groups both step through one."""

    recorder: ThreadRecorder
    list_threads: Callable[[], list[int]]  # the group's threads now; may raise BwlabError
    step_s: float
    slack_s: float = 0.0  # a step comes this much early rather than a read late (half a read's interval)
    follow_s: float = FOLLOW_S
    last_t: float | None = None  # the last read
    last_step: float | None = None
    last_follow: float | None = None
    last_periods: int | None = None

    @classmethod
    def of(cls, recorder: ThreadRecorder, list_threads: Callable[[], list[int]], interval_s: float,
           step_s: float) -> Stepper:  # fmt: skip
        """Steps every `step_s` of reads about `interval_s` apart, the list read every FOLLOW_S."""
        return cls(recorder, list_threads, step_s, interval_s / 2)

    def feed(self, t: float, nr_periods: int | None, parse: Callable[[], Sample]) -> None:
        """One read at monotonic time `t`: its nr_periods (read cheaply from the raw text) and
        how to parse it (only done when the threads are stepped)."""
        prev, self.last_t = self.last_t, t
        boundary = nr_periods != self.last_periods and self.last_step is not None
        self.last_periods = nr_periods
        if not (self.last_step is None or boundary or t - self.last_step >= self.step_s - self.slack_s):
            return
        if self.last_follow is None:
            self.last_follow = t  # the recorder was made with the list
        elif t - self.last_follow >= self.follow_s - self.slack_s:
            since, self.last_follow = self.last_follow, t
            try:
                self.recorder.follow(self.list_threads(), since)
            except BwlabError:  # the group went away: its counters' reader says so
                pass
        s = parse()
        if boundary and prev is not None:
            self.recorder.boundaries.append((prev + t) / 2)  # between the reads either side
        self.recorder.step(s.t, s.throttled_us)
        self.last_step = t


def pool_episodes(episodes: dict[int, list[tuple[float, float]]], k: int,
                  helpers: tuple[tuple[float, float], ...] = ()) -> dict[int, list[tuple[float, float]]]:  # fmt: skip
    """The same work done by a pool of `k` threads (GOMAXPROCS, a thread pool sized to the
    quota), as a paced trace: every thread's episodes (ThreadRecorder.episodes: work due when
    it began), in the order they were due, each taken by the pool's thread that is free
    first, at its due time or when that thread is done with the one before (a queue: work
    that arrived while the pool was busy waits, and what throttling delays in the replay runs
    as soon as it can, as requests do). Each of `helpers` (us of CPU, every us) is a runtime's
    own thread beside the pool on that cadence (a Go program's sysmon: threadpools.GO_SYSMON),
    numbered after the pool's threads and out of step with each other.

    Why episodes, as the replay as it is: folding the steps' intervals (run plus the share of
    the throttled time, what did not fit carried on) counted the throttled time as work and
    again when the backlog ran. The fanout service under 0.8 CPU per 100 ms (host 6.18,
    2026-11-29) was predicted 32, 62 and 60 % throttled with one thread for 22, 41 and 42 %
    measured; from the episodes, 23, 40 and 58 % (the third's wide run, watched, did more work
    than the same arrivals take unwatched: docs/live.md)."""
    due: list[tuple[float, float]] = []  # (when, CPU us)
    end = 0.0
    for ivs in episodes.values():
        t = 0.0
        for work, sleep in ivs:
            if work > 0:
                due.append((t, work))
            t += work + sleep
        end = max(end, t)
    free = [0.0] * k
    starts: list[list[tuple[float, float]]] = [[] for _ in range(k)]
    for when, work in sorted(due):
        i = min(range(k), key=lambda j: free[j])
        start = max(when, free[i])
        starts[i].append((start, work))
        free[i] = start + work
    out: dict[int, list[tuple[float, float]]] = {}
    for i, begun in enumerate(starts):
        ivs = [(0.0, begun[0][0])] if begun and begun[0][0] > 0 else []
        for j, (start, work) in enumerate(begun):
            following = begun[j + 1][0] if j + 1 < len(begun) else max(end, start + work)
            ivs.append((work, following - start - work))
        out[i] = ivs or [(0.0, end)]
    for j, (wake_us, every_us) in enumerate(helpers if end > 0 else ()):
        # a fraction of a cadence in (one helper: half): its phase against the period timer
        # varies with the seed, and two helpers do not wake together
        first = every_us * (j + 1) / (len(helpers) + 1)
        out[k + j] = [(0.0, first)] + [(wake_us, every_us - wake_us)] * int((end - first) // every_us)
    return out
