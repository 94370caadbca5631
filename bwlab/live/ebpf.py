"""doctor's eBPF mode: a group's period boundaries and its threads' demand from kernel
tracepoints (bpftrace), exact where polling estimates.

What it records, and why these probes, is bwlab/schedtrace.py's (the model this fills, as the
lab's trace side action does with ftrace): the period timer's expiries and when each of the
group's threads wants a CPU; a period's demand is what the group ran plus what it was stopped
from running, the quantity periods.py estimates from counters.

Stock kernels have no tracepoint on the bandwidth paths (throttle, unthrottle, distribution);
reading the pool and each CPU's local runtime at a throttle, for a cause per event, needs
kprobes or fentry, which many production kernels (this host's 6.18 among them) are built
without. Tracepoints are always there and are a stable interface: bpftrace's from Debian, no
compiled object to keep in step with the kernel. Where the kernel takes kprobes and the
structures' layout is known (a lab guest's kernel), the program also reads the kernel's state
at each throttle and refill: bwlab/live/kstate.py.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bwlab import schedtrace
from bwlab.errors import BwlabError
from bwlab.live import kstate
from bwlab.schedtrace import TRACEFS, Trace, period_timer_address

ATTACH_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 60.0  # for bpftrace to print its maps once stopped (1-2 s here)
RESIGNAL_S = 0.5  # how often a stop is told again until bpftrace starts printing (Tracer.stop)
# bpftrace says this on stdout once every probe is attached, right before its event loop
ATTACHED = "__BPFTRACE_NOTIFY_PROBES_ATTACHED"
# events kept per map (bpftrace's map size); the wakelat burst scenario makes ~1,000 a second
MAX_EVENTS = 200_000  # bpftrace compiles before it attaches: a second or two here


def unavailable() -> str | None:
    """Why the eBPF mode cannot run here, or None. tracefs (bpftrace reads the tracepoints'
    formats there) is mounted for the trace where it is not (Tracer)."""
    if shutil.which("bpftrace") is None:
        return "--ebpf needs bpftrace (Debian: apt install bpftrace)"
    if os.geteuid() != 0:
        return "--ebpf needs root (bpftrace loads BPF programs)"
    return None


# The tracepoints' formats name kernel types (s64, pid_t) that bpftrace resolves from BTF; a
# kernel without it (the lab's guests) needs them declared: "unknown type name 's64'" else.
# As macros: bpftrace passes a program's preprocessor lines to clang ahead of the formats'
# structs, and its grammar has no typedef.
NO_BTF_TYPES = "".join(
    f"#define {name} {ctype}\n"
    for name, ctype in (
        ("s8", "signed char"),
        ("u8", "unsigned char"),
        ("s16", "short"),
        ("u16", "unsigned short"),
        ("s32", "int"),
        ("u32", "unsigned int"),
        ("s64", "long long"),
        ("u64", "unsigned long long"),
        ("pid_t", "int"),
    )
)
BTF = Path("/sys/kernel/btf/vmlinux")


def script(tids: list[int], timer_address: int, kprobes: str = "", types: str = "") -> str:
    """The bpftrace program. Events are kept in maps keyed by (CPU, that CPU's sequence number)
    and printed when it ends: printing each one would wake bpftrace on every context switch, and
    the CPU it takes stops the group using its quota (sysbench at demand == quota went from
    ~45 % of periods throttled to 0.3 % while bpftrace printed). A BPF program runs without
    migrating, so a CPU's counter has one writer. Times are bpf_ktime_get_ns (CLOCK_MONOTONIC,
    the clock of Python's time.monotonic)."""
    members = " ".join(f"@t[{tid}] = 1;" for tid in tids)
    return (
        f"{types}BEGIN {{ {members} }}\n"
        "tracepoint:timer:hrtimer_expire_entry "
        f"/ (uint64)args->function == (uint64){timer_address:#x} / "
        "{ @p[cpu, @n[cpu]] = (nsecs, (uint64)args->hrtimer); @n[cpu]++; }\n"
        "tracepoint:sched:sched_switch / @t[args->prev_pid] / "
        "{ @s[cpu, @n[cpu]] = (nsecs, args->prev_pid, args->prev_state); @n[cpu]++; }\n"
        "tracepoint:sched:sched_waking / @t[args->pid] / { @w[cpu, @n[cpu]] = (nsecs, args->pid); @n[cpu]++; }\n"
        # a thread a member starts is a member, wanting a CPU from its start (sched_wakeup_new,
        # not sched_waking, wakes it)
        "tracepoint:sched:sched_process_fork / @t[args->parent_pid] / "
        "{ @t[args->child_pid] = 1; @w[cpu, @n[cpu]] = (nsecs, args->child_pid); @n[cpu]++; }\n"
        f"{kprobes}"
        "END { clear(@t); clear(@n); }\n"
    )


# map entries as bpftrace prints them: @s[1, 42]: (123456789, 4242, 1)
EVENT = re.compile(r"^@([psw])\[\d+, \d+\]: \(([\d, -]+)\)$")


def _stat(pid: int) -> list[str] | None:
    """A thread's /proc stat fields after its command name (the state first), or None if gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return None


def _thread_running(tid: int) -> bool:
    stat = _stat(tid)
    return stat is not None and stat[0] == "R"


def parse(text: str, start: float, end: float, initially: dict[int, bool]) -> Trace:
    """The events bpftrace printed (`initially`: each thread's state in /proc as the probes
    attached; schedtrace.build says why only a thread with no event goes by it)."""
    events: list[schedtrace.Event] = []
    for line in text.splitlines():
        match = EVENT.match(line.strip())
        if match:
            values = [int(v) for v in match.group(2).split(",")]
            t, kind = values[0] / 1e9, match.group(1)
            if kind == "s":  # switched out asleep: TASK_REPORT bits (preempted is 0 or 0x100)
                events.append((t, kind, (values[1], int(bool(values[2] & 0xFF)))))
            else:
                events.append((t, kind, (values[1],)))
    return schedtrace.build(events, start, end, initially)


def start_tracing(tids: list[int], threads_now: Callable[[], list[int]], tries: int = 3) -> Tracer:
    """A tracer attached for every thread the group has once bpftrace is attached. `tids` is
    the list read before bpftrace starts, and bpftrace follows only the forks it sees, after it
    has attached (1-2 s later): a thread born in between would be missing from the trace and its
    demand unseen (sysbench's workers, forked as doctor starts). So the list is read again once
    attached, and bpftrace started again with the union while it grew, `tries` times at most."""
    for _ in range(tries):
        tracer = Tracer(tids)
        try:
            tracer.wait_attached()
            missing = set(threads_now()) - set(tids)
        except BaseException:
            tracer.close()
            raise
        if not missing:
            return tracer
        tracer.close()
        tids = sorted({*tids, *missing})
    raise BwlabError(f"--ebpf: the group's threads kept changing while bpftrace attached ({tries} tries)")


def _where(pid: int) -> str:
    """A running process's state, CPU time and kernel wait channel, for an error message."""
    stat = _stat(pid)
    if stat is None:
        return "gone"
    try:
        wchan = Path(f"/proc/{pid}/wchan").read_text().strip() or "-"
    except OSError:
        return "gone"
    cpu_s = (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
    return f"state {stat[0]}, {cpu_s:.1f} CPU-s, waiting in {wchan}"


class Tracer:
    """bpftrace running for the group's threads: start(), then stop() -> Trace."""

    def __init__(self, tids: list[int]) -> None:
        reason = unavailable()
        if reason is not None:
            raise BwlabError(reason)
        if not tids:
            raise BwlabError("the group has no threads to trace")
        self._tracefs = schedtrace.TracefsMount("--ebpf")  # released on close
        try:
            if not (TRACEFS / "events" / "sched" / "sched_switch").is_dir():
                raise BwlabError(f"--ebpf: this kernel has no sched tracepoints ({TRACEFS}/events/sched)")
            self.layout = kstate.layout_here()
            kprobes = kstate.script(self.layout, kstate.possible_cpus()) if self.layout is not None else ""
            text = script(tids, period_timer_address(), kprobes, "" if BTF.exists() else NO_BTF_TYPES)
        except BwlabError:
            self._tracefs.release()
            raise
        self.tids = tids
        self._dir = tempfile.TemporaryDirectory(prefix="bwlab-ebpf-")
        self._out = Path(self._dir.name) / "events"
        program = Path(self._dir.name) / "doctor.bt"
        program.write_text(text)
        self._log = (Path(self._dir.name) / "log").open("w+")
        env = dict(os.environ, BPFTRACE_MAP_KEYS_MAX=str(MAX_EVENTS), **{ATTACHED: "1"})
        self._proc = subprocess.Popen(["bpftrace", "-o", str(self._out), str(program)], stdout=self._log,
                                      stderr=subprocess.STDOUT, start_new_session=True, env=env)  # fmt: skip
        self.start = 0.0
        self.initially: dict[int, bool] = {}
        self.resent = 0  # how often stop() told bpftrace again (its stop was lost)
        self.kernel: kstate.Record | None = None  # the kprobes' record, once stopped (with a layout)

    def wait_attached(self) -> None:
        """Returns once every probe is attached: the trace starts here. Not at "Attaching N
        probes...", which bpftrace prints before it loads and attaches them (25-190 ms earlier
        here, 2026-11-27): a trace started there missed the group's first periods, and a stop
        in between was never seen (Tracer.stop)."""
        deadline = time.monotonic() + ATTACH_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                self._fail(f"bpftrace exited ({self._proc.returncode})")
            self._log.seek(0)
            if ATTACHED in self._log.read():
                self.initially = {tid: _thread_running(tid) for tid in self.tids}
                self.start = time.monotonic()
                return
            time.sleep(0.05)
        self._fail(f"bpftrace did not attach in {ATTACH_TIMEOUT_S:g} s")

    def _fail(self, what: str) -> None:
        self._log.seek(0)
        errors = [line for line in self._log.read().splitlines() if "ERROR" in line]
        self.close()
        hint = " (with kprobes from BWLAB_KERNEL_LAYOUT: unset it for tracepoints only)" if self.layout else ""
        raise BwlabError(f"{what}: {errors[0] if errors else 'no error message'}{hint}")

    def stop(self) -> Trace:
        """The trace, once bpftrace has printed its maps (1-2 s here).

        bpftrace 0.17 (Debian 12) loses a stop that comes while its event loop is not inside
        epoll_wait: the signal handler only sets a flag, and the loop reads the flag only when
        epoll_wait fails with EINTR. epoll_wait that has timed out (every 100 ms) returns 0
        even with the signal pending, so a signal in the time bpftrace takes to get a CPU back
        after each timeout is lost and bpftrace loops on, printing nothing: 3 and 4 of 60 stops
        beside three busy threads on two CPUs here (benchmarks/bpftrace_stop.py, 2026-11-27), as
        in CI (state S, in do_epoll_wait, only "Attaching" printed). So the stop is told again
        every RESIGNAL_S until bpftrace starts printing (0 of 100 lost, twice). Again as
        SIGTERM: bpftrace handles it as SIGINT in its loop, but once the loop is left SIGINT
        kills it, half-way through printing its maps.

        One that has not finished in STOP_TIMEOUT_S is an error, never a trace: what it printed
        by then is a part of the maps, and read as a trace it said the group wanted nothing or
        only what it ran."""
        end = time.monotonic()
        if self._proc.poll() is None:
            printed = self._printed()
            self._proc.send_signal(signal.SIGINT)
            deadline = end + STOP_TIMEOUT_S
            while self._proc.poll() is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    where, printed = _where(self._proc.pid), self._printed()
                    self.close()
                    raise BwlabError(f"--ebpf: bpftrace had not printed its trace {STOP_TIMEOUT_S:g} s after it "
                                     f"was stopped ({where}; {printed} bytes printed): no trace")  # fmt: skip
                try:
                    self._proc.wait(timeout=min(RESIGNAL_S, left))  # it prints the maps first
                except subprocess.TimeoutExpired:
                    if self._printed() == printed:
                        self._proc.send_signal(signal.SIGTERM)  # the stop was lost: nothing printed since
                        self.resent += 1
        text = self._out.read_text(errors="replace") if self._out.is_file() else ""
        self.close()
        if self.layout is not None:
            self.kernel = kstate.parse(text)
        return parse(text, self.start, end, self.initially)

    def _printed(self) -> int:
        """Bytes bpftrace has written to its output so far."""
        return self._out.stat().st_size if self._out.is_file() else 0

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._log.close()
        self._dir.cleanup()
        self._tracefs.release()
