"""A cgroup's CPU counters read again and again: cpu.stat (and v1's cpuacct.usage), each read
with pread on a file kept open (about 3 us a sample), on an absolute schedule so that a slow
read does not shift the ones after it."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator

from bwlab import cpustat
from bwlab.errors import BwlabError
from bwlab.live.groups import LiveGroup
from bwlab.periods import Sample


class Reader:
    """Open counter files of one group; read() is one Sample."""

    def __init__(self, group: LiveGroup) -> None:
        self.group = group
        self._fds: list[int] = []
        try:
            self._stat = self._open(str(group.stat_file))
            usage = group.usage_file
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
        self._fds.append(fd)
        return fd

    def read_raw(self) -> tuple[float, bytes, bytes | None]:
        """(monotonic time, cpu.stat, cpuacct.usage or None) as read: parsing waits (parse())."""
        try:
            t = time.monotonic()
            stat = os.pread(self._stat, 4096, 0)
            usage = os.pread(self._usage, 64, 0) if self._usage is not None else None
        except OSError as exc:  # ENODEV after rmdir
            raise BwlabError(f"cgroup {self.group.path} was removed while watched ({exc.strerror})") from None
        return t, stat, usage

    def parse(self, raw: tuple[float, bytes, bytes | None]) -> Sample:
        t, stat_bytes, usage_bytes = raw
        try:
            usage_ns = int(usage_bytes) if usage_bytes is not None else None
        except ValueError:
            raise BwlabError(f"cgroup {self.group.path}: cpuacct.usage is not a number") from None
        raw_stat = cpustat.parse_kv(stat_bytes.decode())
        norm = cpustat.normalize_cpu_stat(raw_stat)
        if usage_ns is not None:
            usage = usage_ns / 1000
        elif "usage_usec" in raw_stat:
            usage = float(raw_stat["usage_usec"])
        else:
            raise BwlabError(f"cgroup {self.group.path}: cpu.stat has no usage_usec")
        throttled = (raw_stat["throttled_time"] / 1000 if "throttled_time" in raw_stat
                     else float(norm.get("throttled_us", 0)))  # fmt: skip
        return Sample(t, norm["nr_periods"], norm["nr_throttled"], throttled, usage, norm.get("nr_bursts", 0))

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


@contextlib.contextmanager
def prompt() -> Iterator[bool]:
    """The calling thread at SCHED_FIFO priority 1 inside, if it may be (root, CAP_SYS_NICE);
    yields whether it is. At normal priority a sampler that wakes while the group's threads
    hold every CPU waits for a tick: wakelat's bursts at 1 CPU per 10 ms on this host's two
    CPUs (6.18, HZ=250) left a 3 ms hole in the 1 ms samples at one boundary in eight, just as
    the refilled group ran on both CPUs, and the thread step meant to end at the boundary
    ended 3 ms into the next period (its wanting averaged over both: docs/live.md). A sampler
    costs 3 % of a CPU: at the lowest real-time priority it delays the group by microseconds."""
    try:
        old = os.sched_getscheduler(0), os.sched_getparam(0)
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except OSError:  # not allowed: sample at normal priority, and say so
        yield False
        return
    try:
        yield True
    finally:
        with contextlib.suppress(OSError):
            os.sched_setscheduler(0, old[0], old[1])


def sample(group: LiveGroup, seconds: float, interval_s: float,
           on_sample: Callable[[int, bytes, Callable[[], Sample]], None] | None = None) -> list[Sample]:  # fmt: skip
    """Samples every `interval_s` for `seconds`. The counters are only read while sampling and
    parsed afterwards (a 1 ms loop that parses costs twice the CPU); `on_sample(i, stat, parse)`
    sees each as it comes (cpu.stat's text: nr_periods() reads it cheaply) and may parse it."""
    if not 0 < interval_s <= seconds:
        raise BwlabError(f"sampling interval {interval_s * 1000:g} ms must be > 0 and at most the {seconds:g} s")
    reader = Reader(group)
    raws: list[tuple[float, bytes, bytes | None]] = []
    try:
        start = time.monotonic()
        tick = 0
        while True:
            raw = reader.read_raw()
            raws.append(raw)
            if on_sample is not None:
                on_sample(tick, raw[1], lambda raw=raw: reader.parse(raw))  # type: ignore[misc]
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
