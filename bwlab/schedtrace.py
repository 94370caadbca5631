"""A group's demand and period boundaries as the kernel's tracepoints record them: the ground
truth the per-period detector (periods.py) is checked against.

Two recorders fill the same model: doctor's eBPF mode (live/ebpf.py, bpftrace on a live group's
threads) and the `trace` side action of a scenario (ftrace in a tracefs instance of its own,
on any target that runs the plan or on the host: `Ftrace` below and targets/plan.py). The
events, and why these: the period timer's expiries (timer:hrtimer_expire_entry for
sched_cfs_period_timer, the hrtimer's address telling groups apart), and when each of the
group's threads wants a CPU: from its wakeup (sched:sched_waking) or its birth
(sched:sched_process_fork) until it is switched out asleep (sched:sched_switch with a sleeping
prev_state). A thread switched out runnable was preempted or throttled: it still wants the CPU.
A period's demand is the integral over it of min(threads wanting a CPU, the CPUs they can
use): what the group ran plus what it was stopped from running.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from bwlab.errors import BwlabError

TRACEFS = Path("/sys/kernel/tracing")
# what the trace side action enables (system/event), in its own tracefs instance
FTRACE_EVENTS = ("sched/sched_switch", "sched/sched_waking", "sched/sched_process_fork",
                 "timer/hrtimer_expire_entry")  # fmt: skip
# the first line of the trace side action's output, and the trace markers that bound it
FTRACE_HEADER = "bwlab-ftrace"
ROOT_MARK = "bwlab-root"
END_MARK = "bwlab-end"
# per CPU; the wakelat bursts (30 threads) make ~2,000 events a second, about 100 KiB
FTRACE_BUFFER_KB = 32768


@dataclass
class Trace:
    """What the tracepoints saw, in monotonic seconds."""

    start: float
    end: float
    timers: dict[int, list[float]] = field(default_factory=dict)  # hrtimer address -> expiries
    wanting: dict[int, list[tuple[float, float]]] = field(default_factory=dict)  # tid -> [start, end)
    lost: int = 0  # events the recorder dropped (a full buffer): the demand is then not the truth

    def timer_of(self, edges: list[tuple[float, float]]) -> list[float]:
        """The expiries of the period timer that fell inside the most of these sampled intervals,
        each of which holds one of the group's boundaries (nr_periods moved in it)."""
        key = self.timer_key(edges)
        return [] if key is None else self.timers[key]

    def timer_key(self, edges: list[tuple[float, float]]) -> int | None:
        """The address of that timer (the group's `cfs_bandwidth.period_timer`), or None."""
        best: int | None = None
        score = 0
        for key, expiries in self.timers.items():
            hits = sum(any(a < t <= b for t in expiries) for a, b in edges)
            if hits > score:
                best, score = key, hits
        return best

    def demand_us(self, start: float, end: float, cpus: float) -> float:
        """CPU time the threads wanted in [start, end): the integral of min(threads wanting a
        CPU, `cpus`)."""
        points: list[tuple[float, int]] = []
        for spans in self.wanting.values():
            for a, b in spans:
                a, b = max(a, start), min(b, end)
                if a < b:
                    points += [(a, 1), (b, -1)]
        points.sort()
        total, depth, last = 0.0, 0, start
        for t, delta in points:
            total += min(depth, cpus) * (t - last)
            depth, last = depth + delta, t
        return total * 1e6

    def lateness_us(self, expiries: list[float], period_s: float) -> list[float]:
        """How late each expiry ran after the earliest phase seen: the timer is forwarded by
        whole periods, so on time every expiry has the same phase."""
        if not expiries:
            return []
        base = expiries[0]
        offsets = [((t - base) % period_s) for t in expiries]
        offsets = [o - period_s if o > period_s / 2 else o for o in offsets]
        low = min(offsets)
        return [(o - low) * 1e6 for o in offsets]


def kallsyms(names: tuple[str, ...]) -> dict[str, int]:
    """The addresses /proc/kallsyms gives these kernel symbols (those it has; 0 where
    kptr_restrict hides them from this user)."""
    try:
        lines = Path("/proc/kallsyms").read_text().splitlines()
    except OSError as exc:
        raise BwlabError(f"cannot read /proc/kallsyms: {exc.strerror}") from None
    out: dict[str, int] = {}
    for line in lines:
        parts = line.split()
        if len(parts) >= 3 and parts[2] in names:
            out.setdefault(parts[2], int(parts[0], 16))
    return out


def period_timer_address() -> int:
    """The kernel address of sched_cfs_period_timer (root reads real addresses)."""
    address = kallsyms(("sched_cfs_period_timer",)).get("sched_cfs_period_timer")
    if address is None:
        raise BwlabError("this kernel has no sched_cfs_period_timer (no CFS bandwidth control)")
    if address == 0:
        raise BwlabError("/proc/kallsyms hides addresses (kptr_restrict): --ebpf needs root")
    return address


# One event: (monotonic s, kind, values). Kinds: "p" period timer (hrtimer address), "w" woken
# or born (tid), "s" switched out (tid, asleep: 1 or 0), "i" switched in (tid; ftrace only).
Event = tuple[float, str, tuple[int, ...]]


def build(events: list[Event], start: float, end: float, initially: dict[int, bool]) -> Trace:
    """A Trace from the events of the group's threads. A thread's first event says whether it
    wanted a CPU when the trace began: switched out first, it was on a CPU or queued for one (a
    thread asleep is woken, an event, before it runs); woken first, it slept. `initially` (its
    state as the trace began, where that was read) decides only for a thread with no event at
    all. Not the state alone: a thread that 6.18 throttled is off its runqueue and not shown
    runnable, and one such thread, wanting a CPU through three periods, went untraced until it
    slept, its periods weighed at half what its group wanted (wakelat at 1 CPU per 10 ms,
    2026-11-24).

    A wakeup seen while the thread wanted a CPU, then a switch out asleep, is one of two things,
    and the thread's next event tells which. A TCG guest's CPUs' clocks differ by microseconds:
    the wakeup, traced on another CPU, can sort before the sleep it ends; the thread then wants
    a CPU throughout and next runs with no wakeup (its next event a switch). Or, on any
    machine, the thread was woken twice and slept again after the second (a wait in a loop:
    this host's wakelat workers, 2026-11-28); its next event is a wakeup, and it slept from the
    switch out. Taken always for the first, such a thread counted as wanting a CPU for a
    second and more while it slept, and doctor --ebpf's truth put two quotas in periods whose
    group ran one thread (docs/testing.md). The eBPF mode traces no switch-ins: there a thread
    of the skew's case that, once run, is woken again before it next switches out is read as
    asleep from the first switch out (a TCG guest's doctor --ebpf only; the host has no skew)."""
    trace = Trace(start, end)
    since: dict[int, float | None] = {tid: (start if wants else None) for tid, wants in initially.items()}
    seen: set[int] = set()
    woken_awake: set[int] = set()  # woken while wanting a CPU: since it last switched
    asleep_at: dict[int, float] = {}  # then switched out asleep, at: its next event says which
    for t, kind, values in sorted(events):
        if kind == "p":
            trace.timers.setdefault(values[0], []).append(t)
            continue
        tid = values[0]
        if tid not in seen:
            seen.add(tid)
            since[tid] = start if kind in "si" else None
        if (slept := asleep_at.pop(tid, None)) is not None and kind == "w":
            began = since.get(tid)  # woken again: it slept from the switch out
            if began is not None and began < slept:
                trace.wanting.setdefault(tid, []).append((began, slept))
            since[tid] = t
        elif kind == "w":
            if since.get(tid) is None:
                since[tid] = t
            else:
                woken_awake.add(tid)
        elif kind == "i":  # on a CPU: it wants one (a wakeup the trace missed or put after this)
            if since.get(tid) is None:
                since[tid] = t
        elif values[1] and tid in woken_awake:
            # A wakeup is traced only for a thread in a sleeping state, and it makes the thread
            # runnable: one seen while the thread already wanted a CPU, then a switch out asleep,
            # is a wakeup that came after that sleep began, timed by another CPU's clock a few
            # microseconds off (a TCG guest: wakelat's message thread woken 9 us "before" it
            # slept, then run with no wakeup after; its periods were weighed at 0). It
            # wants a CPU throughout, unless its next event is a wakeup (the docstring).
            woken_awake.discard(tid)
            asleep_at[tid] = t
        elif values[1]:  # switched out asleep
            began = since.get(tid, start)
            since[tid] = None
            if began is not None and began < t:
                trace.wanting.setdefault(tid, []).append((began, t))
        else:
            woken_awake.discard(tid)
    for tid, began in since.items():
        until = asleep_at.get(tid, end)  # no event after such a sleep: taken as a sleep
        if began is not None and began < until:
            trace.wanting.setdefault(tid, []).append((began, until))
    return trace


# a line of a tracefs instance's `trace`, whatever its options print between the task and the
# time (irq-info's flags, the tgid column):
#   wakelat-212     [001] d..2.   123.456789: sched_switch: prev_comm=wakelat prev_pid=212 ...
FTRACE_LINE = re.compile(r"^\s*(?P<task>.*?)-(?P<pid>\d+)\s+(?:\(.*?\)\s+)?\[(?P<cpu>\d+)\]\s+(?:\S+\s+)?"
                         r"(?P<time>\d+\.\d+): (?P<event>\w+): (?P<body>.*)$")  # fmt: skip
FIELD = re.compile(r"(\w+)=(\S+)")


def parse_ftrace(text: str) -> Trace:
    """The trace side action's output: its header line (`bwlab-ftrace LOST [gzip]`, the events
    the buffer dropped, and whether the trace follows gzip'd in base64), then the instance's
    trace. Two trace markers bound it: `bwlab-root PID`,
    written by the workload's first process before it starts the workload, and `bwlab-end`,
    after the workload exited. The members are that process and every task forked from a
    member after it (tracing began before it, so each member's first event is its birth); the
    period timers are every sched_cfs_period_timer expiry (Trace.timer_of picks the group's)."""
    lines = text.splitlines()
    head = lines[0].split() if lines else []
    if len(head) not in (2, 3) or head[0] != FTRACE_HEADER or not head[1].isdigit() or head[2:] not in ([], ["gzip"]):
        raise BwlabError(f"the trace side action's output does not start with its header: {text[:80]!r}")
    if head[2:] == ["gzip"]:  # the plan's, where the machine had gzip and base64
        try:
            data = base64.b64decode("".join(lines[1:]), validate=True)  # a stray message is damage too
            lines = [lines[0], *gzip.decompress(data).decode().splitlines()]
        except (ValueError, OSError, EOFError) as exc:
            raise BwlabError(f"the trace side action's compressed trace is damaged: {exc}") from None
    members: set[int] = set()
    events: list[Event] = []
    start = end = None
    for line in lines[1:]:
        match = FTRACE_LINE.match(line)
        if match is None:
            continue  # the header comments, "CPU 1 buffer started"
        t, event, body = float(match["time"]), match["event"], match["body"]
        if event in ("tracing_mark_write", "print"):
            mark = body.split()
            if len(mark) >= 2 and mark[-2] == ROOT_MARK and mark[-1].isdigit() and start is None:
                members.add(int(mark[-1]))
                start = t
            elif mark and mark[-1] == END_MARK:
                end = t
            continue
        if start is None:
            continue
        fields = dict(FIELD.findall(body))
        try:
            if event == "hrtimer_expire_entry":
                if fields.get("function") == "sched_cfs_period_timer":
                    events.append((t, "p", (int(fields["hrtimer"], 16),)))
            elif event == "sched_process_fork":
                if int(fields["pid"]) in members:
                    members.add(int(fields["child_pid"]))
                    events.append((t, "w", (int(fields["child_pid"]),)))
            elif event == "sched_waking":
                if int(fields["pid"]) in members:
                    events.append((t, "w", (int(fields["pid"]),)))
            elif event == "sched_switch":
                if int(fields["prev_pid"]) in members:
                    asleep = not fields["prev_state"].startswith("R")  # R, R+: preempted or throttled
                    events.append((t, "s", (int(fields["prev_pid"]), int(asleep))))
                if int(fields["next_pid"]) in members:
                    events.append((t, "i", (int(fields["next_pid"]),)))
        except (KeyError, ValueError):
            raise BwlabError(f"the trace side action's {event} line is not as 7.x prints it: {line[:120]!r}") from None
    if start is None:
        raise BwlabError(f"the trace side action's output has no '{ROOT_MARK} PID' marker: the workload never started")
    if end is None:
        raise BwlabError(f"the trace side action's output has no '{END_MARK}' marker: the trace was cut short")
    trace = build(events, start, end, {})
    trace.lost = int(head[1])
    return trace


class TracefsMount:
    """tracefs at TRACEFS for one trace: mounted if it is not (a machine whose init does not
    mount it, like this one), and then unmounted by release(), which may be called any number
    of times; BwlabError if it cannot be mounted."""

    def __init__(self, who: str) -> None:
        self.mounted = False
        if (TRACEFS / "instances").is_dir():
            return
        proc = subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise BwlabError(f"{who} needs tracefs at {TRACEFS}: {proc.stderr.strip() or 'mount failed'}")
        self.mounted = True

    def release(self) -> None:
        """Unmounted if this mounted it. A file of it still open (a tracer's last reader that
        has not yet exited) makes umount fail with EBUSY for a moment: tried for a second."""
        if not self.mounted:
            return
        self.mounted = False
        deadline = time.monotonic() + 1.0
        while subprocess.run(["umount", str(TRACEFS)], capture_output=True).returncode != 0:
            if time.monotonic() > deadline or not (TRACEFS / "instances").is_dir():
                return
            time.sleep(0.05)


class Ftrace:
    """The trace side action on this machine (the host target): a tracefs instance of its
    own with FTRACE_EVENTS on, the mono clock (cgsample's), and its own buffer; removed on
    close whatever happened. `mark_root(pid)` names the workload's first process; `text()` is the
    output parse_ftrace reads."""

    def __init__(self, name: str) -> None:
        self._tracefs = TracefsMount("the trace side action")  # released on close
        self.dir = TRACEFS / "instances" / name
        try:
            self.dir.mkdir()
        except OSError as exc:
            self._tracefs.release()
            raise BwlabError(f"cannot make the tracefs instance {self.dir}: {exc.strerror}") from None
        try:
            (self.dir / "trace_clock").write_text("mono")
            (self.dir / "buffer_size_kb").write_text(str(FTRACE_BUFFER_KB))
            # the period timers only, not every tick's (the expiry prints the function's name)
            timer = self.dir / "events" / "timer" / "hrtimer_expire_entry" / "filter"
            timer.write_text(f"function == {period_timer_address():#x}")
            for event in FTRACE_EVENTS:
                (self.dir / "events" / event / "enable").write_text("1")
            (self.dir / "tracing_on").write_text("1")
        except OSError as exc:
            self.close()
            raise BwlabError(f"cannot set up the tracefs instance {self.dir}: {exc.strerror}") from None
        except BwlabError:
            self.close()
            raise

    def mark_root(self, pid: int) -> None:
        """The workload's first process, as it starts (before its first fork)."""
        (self.dir / "trace_marker").write_text(f"{ROOT_MARK} {pid}\n")

    def text(self) -> str:
        """Stopped at the end marker: the output parse_ftrace reads."""
        (self.dir / "trace_marker").write_text(f"{END_MARK}\n")
        (self.dir / "tracing_on").write_text("0")
        lost = 0
        for stats in sorted((self.dir / "per_cpu").glob("cpu*/stats")):
            for line in stats.read_text().splitlines():
                if line.startswith("overrun:"):
                    lost += int(line.split()[1])
        return f"{FTRACE_HEADER} {lost}\n" + (self.dir / "trace").read_text()

    def close(self) -> None:
        """Events off, then the instance removed (rmdir fails while an event is on)."""
        with contextlib.suppress(OSError):
            (self.dir / "tracing_on").write_text("0")
        for event in FTRACE_EVENTS:
            with contextlib.suppress(OSError):
                (self.dir / "events" / event / "enable").write_text("0")
        with contextlib.suppress(OSError):
            self.dir.rmdir()
        self._tracefs.release()

    def __enter__(self) -> Ftrace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
