"""A cgroup's CPU counters read again and again: cpu.stat (and v1's cpuacct.usage), each read
with pread on a file kept open (about 3 us a sample), on an absolute schedule so that a slow
read does not shift the ones after it."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import math
import os
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from bwlab import cpustat
from bwlab.errors import BwlabError
from bwlab.live.groups import LiveGroup
from bwlab.periods import Sample

# One read of a group's counters: (monotonic time as it began, cpu.stat, cpuacct.usage or None,
# monotonic time as it ended); a boundary the read saw lies before its end (Sample.read_end)
Raw = tuple[float, bytes, bytes | None, float]


class NoUsage(BwlabError):
    """A v1 group made in the cpu hierarchy alone: its CPU usage (cpuacct) cannot be read."""


class Reader:
    """Open counter files of one group; read() is one Sample."""

    def __init__(self, group: LiveGroup) -> None:
        self.group = group
        self._fds: list[int] = []
        self._parsed: tuple[bytes | None, tuple[int, int, float, int, float, float | None]] = (
            None,
            (0, 0, 0.0, 0, 0.0, None),
        )
        try:
            self._stat = self._open(str(group.stat_file))
            usage = group.usage_file
            if usage is not None and not usage.parent.is_dir():
                # v1 with cpuacct mounted apart: systemd, Docker and the kubelet make each group in
                # both hierarchies, a group made by hand in cpu alone has no usage to read
                raise NoUsage(f"cgroup {group.path} has no group in the cpuacct hierarchy "
                              f"({usage.parent}): its usage cannot be read")  # fmt: skip
            self._usage = self._open(str(usage)) if usage is not None else None
        except BaseException:
            self.close()
            raise

    def _open(self, path: str) -> int:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise BwlabError(f"cgroup {self.group.path} has no {os.path.basename(path)} (removed?)") from None
        except PermissionError:
            raise BwlabError(f"no permission to read {path}") from None
        except OSError as exc:  # EMFILE, ENODEV after rmdir, ...
            raise BwlabError(f"cannot open {path}: {exc.strerror}") from None
        self._fds.append(fd)
        return fd

    def read_raw(self) -> Raw:
        """(monotonic time, cpu.stat, cpuacct.usage or None, time the read ended) as read:
        parsing waits (parse())."""
        try:
            t = time.monotonic()
            stat = os.pread(self._stat, 4096, 0)
            usage = os.pread(self._usage, 64, 0) if self._usage is not None else None
        except OSError as exc:  # ENODEV after rmdir
            raise BwlabError(f"cgroup {self.group.path} was removed while watched ({exc.strerror})") from None
        return t, stat, usage, time.monotonic()

    def parse(self, raw: Raw) -> Sample:
        t, stat_bytes, usage_bytes, read_end = raw
        try:
            usage_ns = int(usage_bytes) if usage_bytes is not None else None
        except ValueError:
            raise BwlabError(f"cgroup {self.group.path}: cpuacct.usage is not a number") from None
        if stat_bytes != self._parsed[0]:  # v1's cpu.stat changes only at boundaries and unthrottles
            self._parsed = (stat_bytes, self._parse_stat(stat_bytes))
        nr_periods, nr_throttled, throttled, nr_bursts, burst, usage_usec = self._parsed[1]
        if usage_ns is not None:
            usage = usage_ns / 1000
        elif usage_usec is not None:
            usage = usage_usec
        else:
            raise BwlabError(f"cgroup {self.group.path}: cpu.stat has no usage_usec")
        return Sample(t, nr_periods, nr_throttled, throttled, usage, nr_bursts, burst, read_end)

    @staticmethod
    def _parse_stat(stat_bytes: bytes) -> tuple[int, int, float, int, float, float | None]:
        """(nr_periods, nr_throttled, throttled us, nr_bursts, burst us, usage_usec or None) of
        cpu.stat (the burst's two are 0 where the kernel counts no bursts: before 5.14)."""
        raw_stat = cpustat.parse_kv(stat_bytes.decode())
        norm = cpustat.normalize_cpu_stat(raw_stat)
        throttled = (raw_stat["throttled_time"] / 1000 if "throttled_time" in raw_stat
                     else float(norm.get("throttled_us", 0)))  # fmt: skip
        usage = float(raw_stat["usage_usec"]) if "usage_usec" in raw_stat else None
        burst = raw_stat["burst_time"] / 1000 if "burst_time" in raw_stat else float(norm.get("burst_us", 0))
        return norm["nr_periods"], norm["nr_throttled"], throttled, norm.get("nr_bursts", 0), burst, usage

    def read(self) -> Sample:
        return self.parse(self.read_raw())

    def close(self) -> None:
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()


def nr_periods(stat: bytes) -> int | None:
    """cpu.stat's nr_periods from its text as read, without parsing the rest (once a sample)."""
    at = stat.find(b"nr_periods ")
    if at < 0:
        return None
    end = stat.find(b"\n", at)
    value = stat[at + len(b"nr_periods ") : end if end >= 0 else len(stat)]
    return int(value) if value.isdigit() else None


# boundaries in a row after the phase's window that make it a new phase, not late expiries
# (the period timer's expiry is late by up to half a millisecond now and then: one in ten in a
# run on this host, 2026-11-24)
LATE_RUN = 3


@dataclass
class Schedule:
    """When to read a group's counters next: just before and just after each period boundary
    (`interval_s` apart), and every `step_s` between them (the threads' steps, the throttle
    counters' settling read); reading every `interval_s` throughout costs a wake-up each, and in
    this VM a wake-up costs 17.5 us of CPU however little is read (docs/live.md).

    The period timer is an hrtimer forwarded by whole periods, so a group's boundaries keep one
    phase, across idle stretches too (the timer is restarted forwarded from its last expiry). The
    phase is learnt from boundaries seen between reads at most 1.5 `interval_s` apart, narrowed
    by each one that agrees with it, and reset by one that does not (the quota rewritten). A
    boundary not seen by the read after it (a late expiry, an idle group whose timer stopped) is
    searched for at `interval_s`, for half a period; one seen only between reads further apart
    is searched for at `interval_s` around where the next one falls. Until a phase is known the
    reads come every `step_s`."""

    interval_s: float
    period_s: float
    step_s: float
    lo: float | None = None  # a boundary lies in (lo, hi]: the phase, as one boundary's window
    hi: float | None = None
    target: float | None = None  # the boundary expected next (locked)
    search: tuple[float, float] | None = None  # a boundary expected in (a, b]: read densely there
    last_t: float | None = None
    last_n: int | None = None
    next_step: float = 0.0
    late: int = 0  # boundaries in a row seen after the phase's window
    waiting: bool = False  # a boundary was not found: read at the steps until nr_periods moves

    @classmethod
    def of(cls, interval_s: float, period_s: float, step_s: float) -> Schedule | None:
        """A schedule, or None when reading every `interval_s` costs about as much (a period of
        less than four steps' worth of reads)."""
        return cls(interval_s, period_s, step_s) if period_s >= 8 * interval_s and step_s >= 2 * interval_s else None

    def _seen(self, a: float, b: float) -> None:
        """A boundary lies in (a, b]."""
        narrow = b - a <= 1.5 * self.interval_s
        if self.lo is not None and self.hi is not None:
            k = math.ceil((a - self.hi) / self.period_s)  # the first of the phase's windows ending after a
            lo, hi = self.lo + k * self.period_s, self.hi + k * self.period_s
            if lo < b:  # they overlap: the phase stands, narrowed by a narrow bracket
                if narrow:
                    self.lo, self.hi = max(lo, a), min(hi, b)
                self.late = 0
                return
            if narrow and a - (hi - self.period_s) < lo - b and self.late < LATE_RUN:
                self.late += 1  # after the window: a late expiry (never an early one); the phase stands
                return
        if narrow:  # no phase yet, earlier than it (learnt from a late expiry), or late again and again
            self.lo, self.hi, self.late = a, b, 0
        else:  # look for the next one closely
            self.lo = self.hi = None
            self.search = (a + self.period_s - self.interval_s, b + self.period_s + self.interval_s)

    def after(self, t: float, nr_periods: int | None) -> float:
        """A read at `t` saw `nr_periods`: when to read next."""
        h = self.interval_s / 2
        moved = self.last_n is not None and nr_periods != self.last_n
        if moved and self.last_t is not None:
            self.search = self.target = None
            self.waiting = False
            self._seen(self.last_t, t)
            self.next_step = t + self.step_s
        elif t >= self.next_step - h:
            self.next_step = t + self.step_s
        self.last_t, self.last_n = t, nr_periods
        if self.search is not None:
            a, b = self.search
            if t < a - self.interval_s:
                return min(self.next_step, a - self.interval_s)
            if t < b:
                return t + self.interval_s
            self.search = None  # not found: the timer stopped (an idle group); wait for a move
            self.waiting = True
        if self.waiting or self.lo is None:
            return self.next_step
        # locked: the window's start is the phase's earliest (an expiry is late, never early):
        # read a quarter interval before it, for reads that come late, and an interval after
        if self.target is None:
            self.target = self.lo + (math.floor((t - self.lo) / self.period_s) + 1) * self.period_s
        pre, post = self.target - h / 2, self.target + 3 * h / 2
        if t < pre - 1e-6:
            return self.next_step if self.next_step < pre - self.step_s / 4 else pre
        if t < post - 1e-6:
            return post
        self.target = None  # read after it and it was not there: late, or the timer stopped
        self.search = (t, t + self.period_s / 2)
        return t + self.interval_s


SYS_SCHED_SETATTR = {"x86_64": 314, "aarch64": 274}.get(os.uname().machine)
SHORT_SLICE_NS = 100_000  # the least the kernel allows (6.12 and later)
LIBC = ctypes.CDLL(None, use_errno=True)  # the process's C library, for syscall()


def _set_slice(slice_ns: int) -> None:
    """The calling thread's fair-class slice (sched_setattr's sched_runtime; 0: the default),
    its policy and nice kept; OSError if the kernel or the machine has none, or the thread is
    not SCHED_OTHER (batch or idle: left as the user ran it)."""
    if SYS_SCHED_SETATTR is None:
        raise OSError(errno.ENOSYS, "no sched_setattr for this machine")
    if os.sched_getscheduler(0) != os.SCHED_OTHER:
        raise OSError(errno.EINVAL, "not SCHED_OTHER")
    nice = os.getpriority(os.PRIO_PROCESS, 0)  # Linux: the calling thread's
    # struct sched_attr, version 1 (56 bytes): size, policy, flags, nice, priority, runtime, ...
    attr = ctypes.create_string_buffer(
        struct.pack("IIQiIQQQII", 56, os.SCHED_OTHER, 0, nice, 0, slice_ns, 0, 0, 0, 0))  # fmt: skip
    if LIBC.syscall(SYS_SCHED_SETATTR, 0, attr, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


@contextlib.contextmanager
def prompt() -> Iterator[bool]:
    """The calling thread with the shortest fair slice inside, if the kernel has slices (6.12
    and later; EEVDF lets a waking task with a shorter slice preempt the running one); yields
    whether it has. With the default slice a sampler that wakes while the group's threads hold
    every CPU waits for a tick: wakelat's bursts at 1 CPU per 10 ms on this host's two CPUs
    (6.18, HZ=250) left a 3 ms hole in the 1 ms samples at one boundary in eight, just as the
    refilled group ran on both CPUs, and the thread step meant to end at the boundary ended
    3 ms into the next period. Not SCHED_FIFO, which closed the holes too: a real-time task
    wakes on the CPU it last ran on rather than an idle one, and took its 3 % from the group's
    only thread (mixed.c's one busy process at a 1-CPU quota: throttled in none of its
    periods in 3 of 8 runs, where unwatched or at normal priority it is in about half)."""
    try:
        _set_slice(SHORT_SLICE_NS)
    except OSError:  # an older kernel: sample with the default slice, and say so
        yield False
        return
    try:
        yield True
    finally:
        with contextlib.suppress(OSError):
            _set_slice(0)  # 0: the default slice again


def sample(group: LiveGroup, seconds: float, interval_s: float,
           on_sample: Callable[[float, bytes, Callable[[], Sample]], None] | None = None,
           schedule: Schedule | None = None) -> list[Sample]:  # fmt: skip
    """The group's counters for `seconds`: every `interval_s`, or when `schedule` says. They are
    only read while sampling and parsed afterwards (a 1 ms loop that parses costs twice the
    CPU); `on_sample(t, stat, parse)` sees each as it comes (cpu.stat's text: nr_periods() reads
    it cheaply) and may parse it."""
    if not 0 < interval_s <= seconds:
        raise BwlabError(f"sampling interval {interval_s * 1000:g} ms must be > 0 and at most the {seconds:g} s")
    reader = Reader(group)
    raws: list[Raw] = []
    try:
        start = time.monotonic()
        tick = 0
        while True:
            raw = reader.read_raw()
            raws.append(raw)
            if on_sample is not None:
                on_sample(raw[0], raw[1], functools.partial(reader.parse, raw))
            if schedule is not None:
                due = schedule.after(raw[0], nr_periods(raw[1]))
            else:
                tick += 1
                due = start + tick * interval_s
            if due - start > seconds:
                break
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        return [reader.parse(raw) for raw in raws]
    finally:
        reader.close()
