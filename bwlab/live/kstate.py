"""The eBPF mode's kprobes: the bandwidth pool and every CPU's local runtime, read by the kernel
at each throttle and each refill, and each throttle's cause named from that state.

Where kprobes attach (a kernel built with CONFIG_KPROBES) and the structures' layout is known
(bwlab/kernel/layout.py: the lab's kernels, which have no BTF), two functions are probed:

- `tg_throttle_down(tg, rq)`: the first thing throttle_cfs_rq() does once the pool could not
  cover this CPU's debt (descendant groups follow, each with its own tg). `rq->cpu` is the CPU
  throttled; its `runtime_remaining` is what it owes (<= 0: the pool had less than it needed,
  and what it had is in this CPU's count now); positive runtime_remaining on CPUs where the
  group has no task queued (`h_nr_queued` 0) is runtime held where nothing will use it:
  stranded, until the slack timer returns it.
- `__refill_cfs_bandwidth_runtime(cfs_b)`: the period timer's refill (and a quota write's).
  Before it, the negative local runtimes are debt the new period's quota pays first: a CPU that
  ran past its runtime until a tick noticed (the tick-overrun debt).

Causes of one throttle, first match:
- `late-timer`: it came after the period should have ended (the last refill plus a period, and
  LATE_SHARE of it): a refill on time would have covered it;
- `stranded`: CPUs with none of its tasks held at least FLOOR_SHARE of the quota, and as much
  as this CPU owed;
- `debt`: the period began paying at least FLOOR_SHARE of the quota of debt from the last;
- `over-use`: none of these; the group ran its quota.
Whether a throttled period was necessary at all is the demand's to say (what the threads
wanted: the tracepoints, ebpf.py), not this state's: at twice its quota a group carries a
tick's debt into each period as it does at demand == quota. The state says why the pool ran dry.

Addresses are of the period timer (`&tg->cfs_bandwidth.period_timer`), the key by which
schedtrace.Trace knows the group's timer, so a throttle is the watched group's when its timer
is the group's.
"""

from __future__ import annotations

import bisect
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from bwlab import schedtrace
from bwlab.errors import BwlabError

FLOOR_SHARE = 0.02  # of the quota: less stranded runtime or debt than this is no cause
LATE_SHARE = 0.01  # of the period: a throttle this far past the period's end is the timer's
CAUSES = ("late-timer", "stranded", "debt", "over-use")
PROBED = ("tg_throttle_down", "__refill_cfs_bandwidth_runtime")
# map entries as bpftrace prints them: @k[1, 42]: (123456789, 18446..., 1, 0, -123, 0, 0)
EVENT = re.compile(r"^@([kr])\[\d+, \d+\]: \(([\d, -]+)\)$")


@dataclass(frozen=True)
class Layout:
    """Offsets (bytes) of the fields read, and the address of __per_cpu_offset."""

    fields: dict[str, int]
    per_cpu_offset: int

    @property
    def timer(self) -> int:
        """From a task_group to its period timer."""
        return self.fields["tg_cfs_bandwidth"] + self.fields["cfs_b_period_timer"]


def layout_here() -> Layout | None:
    """The layout of the running kernel, from the file BWLAB_KERNEL_LAYOUT names (a lab guest
    sets it), or None where none is named or the kernel cannot take kprobes. A file that names
    another kernel (its probed functions elsewhere than /proc/kallsyms has them) is an error:
    offsets of another build read garbage."""
    name = os.environ.get("BWLAB_KERNEL_LAYOUT")
    if not name:
        return None
    try:
        doc = json.loads(Path(name).read_text())
        fields = {str(k): int(v) for k, v in doc["fields"].items()}
        symbols = {str(k): int(v, 16) for k, v in doc["symbols"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise BwlabError(f"BWLAB_KERNEL_LAYOUT={name}: unreadable ({type(exc).__name__}: {exc})") from None
    if not Path("/sys/kernel/debug/kprobes").exists() and not Path("/sys/kernel/tracing/kprobe_events").exists():
        return None  # no CONFIG_KPROBES: tracepoints only
    here = schedtrace.kallsyms(PROBED)
    for sym in PROBED:
        if sym not in symbols or here.get(sym) != symbols[sym]:
            raise BwlabError(f"BWLAB_KERNEL_LAYOUT={name} describes kernel {doc.get('kernel_key', '?')}, not the one "
                             f"running ({sym} is elsewhere): no kprobes")  # fmt: skip
    if "__per_cpu_offset" not in symbols:
        raise BwlabError(f"BWLAB_KERNEL_LAYOUT={name}: no address of __per_cpu_offset")
    return Layout(fields, symbols["__per_cpu_offset"])


def possible_cpus() -> int:
    """How many CPUs the kernel has per-CPU areas for (/sys/devices/system/cpu/possible: '0-N')."""
    try:
        text = Path("/sys/devices/system/cpu/possible").read_text().strip()
    except OSError:
        return os.cpu_count() or 1
    return max(int(part.split("-")[-1]) for part in text.split(",")) + 1


def _sums(layout: Layout, cpus: int, own: str) -> str:
    """bpftrace statements summing each CPU's runtime_remaining of the group at $tg: this CPU's
    (`own`, an expression, "" for none) into $own; the others' negative into $neg, their
    positive into $pos: with `own`, only where the group has no task queued (stranded: a CPU
    that runs the group's tasks is using what it holds). Unrolled: bpftrace 0.17 has no loops
    over a runtime bound."""
    f = layout.fields
    lines = [f"$pc = *(uint64*)($tg + {f['tg_cfs_rq']}); $own = 0; $pos = 0; $neg = 0;"]
    rr, queued = f["cfs_rq_runtime_remaining"], f["cfs_rq_h_nr_queued"]
    for cpu in range(cpus):
        lines.append(f"$c = $pc + *(uint64*)({layout.per_cpu_offset + 8 * cpu:#x}); $v = *(int64*)($c + {rr}); ")
        if own:  # at a throttle: runtime held where the group has no task queued is stranded
            lines[-1] += (
                f"if ({own} == {cpu}) {{ $own = $v; }} else {{ if ($v > 0) {{ if (*(uint32*)($c + {queued}) == 0) "
                "{ $pos += $v; } } else { $neg += $v; } }"
            )
        else:
            lines[-1] += "if ($v > 0) { $pos += $v; } else { $neg += $v; }"
    return "\n  ".join(lines)


def script(layout: Layout, cpus: int) -> str:
    """The kprobe half of doctor's bpftrace program (ebpf.script adds it): per throttle
    @k = (ns, period timer, CPU, pool, this CPU's runtime, others' positive, others'
    negative); per refill @r = (ns, period timer, pool before, positive, negative, quota). Into the
    same per-CPU sequence as the tracepoints' events (@n)."""
    f = layout.fields
    b = f["tg_cfs_bandwidth"]
    return (
        "kprobe:tg_throttle_down {\n  $tg = arg0; $cpu = *(int32*)(arg1 + "
        + str(f["rq_cpu"])
        + ");\n  "
        + _sums(layout, cpus, "$cpu")
        + f"\n  @k[cpu, @n[cpu]] = (nsecs, $tg + {layout.timer}, $cpu, *(int64*)($tg + {b + f['cfs_b_runtime']}), "
        "$own, $pos, $neg); @n[cpu]++;\n}\n"
        f"kprobe:__refill_cfs_bandwidth_runtime {{\n  $tg = arg0 - {b};\n  "
        + _sums(layout, cpus, "")
        + f"\n  @r[cpu, @n[cpu]] = (nsecs, arg0 + {f['cfs_b_period_timer']}, *(int64*)(arg0 + {f['cfs_b_runtime']}), "
        f"$pos, $neg, *(int64*)(arg0 + {f['cfs_b_quota']})); @n[cpu]++;\n}}\n"
    )


@dataclass(frozen=True)
class Throttle:
    t: float  # monotonic s
    cpu: int
    pool_ns: int  # the pool, after this CPU took what it had
    own_ns: int  # this CPU's runtime_remaining (<= 0: its debt)
    stranded_ns: int  # positive runtime_remaining of CPUs where the group has no task queued
    cause: str = ""


@dataclass(frozen=True)
class Refill:
    t: float
    pool_ns: int  # the pool before the refill: what the period left unused there
    held_ns: int  # positive local runtime (carried into the next period)
    debt_ns: int  # negative local runtime, as a positive number: what the new quota pays first
    quota_ns: int  # cfs_b->quota as the kernel holds it


@dataclass
class Record:
    """Throttles and refills by period timer address."""

    throttles: dict[int, list[Throttle]] = field(default_factory=dict)
    refills: dict[int, list[Refill]] = field(default_factory=dict)


def parse(text: str) -> Record:
    rec = Record()
    for line in text.splitlines():
        m = EVENT.match(line.strip())
        if not m:
            continue
        v = [int(x) for x in m.group(2).split(",")]
        timer = v[1] % (1 << 64)  # bpftrace prints a kernel address as a signed 64-bit number
        if m.group(1) == "k":
            rec.throttles.setdefault(timer, []).append(Throttle(v[0] / 1e9, v[2], v[3], v[4], v[5]))
        else:
            rec.refills.setdefault(timer, []).append(Refill(v[0] / 1e9, v[2], v[3], -v[4], v[5]))
    for throttles in rec.throttles.values():
        throttles.sort(key=lambda e: e.t)
    for refills in rec.refills.values():
        refills.sort(key=lambda e: e.t)
    return rec


def cause(th: Throttle, last: Refill | None, quota_us: int, period_us: int) -> str:
    """One throttle's cause (the module's rules), given the refill that began its period."""
    floor_ns = FLOOR_SHARE * quota_us * 1000
    if last is not None and th.t - last.t > period_us * (1 + LATE_SHARE) / 1e6:
        return "late-timer"
    if th.stranded_ns >= max(floor_ns, -th.own_ns):
        return "stranded"
    if last is not None and last.debt_ns >= floor_ns:
        return "debt"
    return "over-use"


def classify(throttles: list[Throttle], refills: list[Refill], quota_us: int, period_us: int) -> list[Throttle]:
    """The group's throttles, each with its cause."""
    out: list[Throttle] = []
    i = 0
    for th in throttles:
        while i < len(refills) and refills[i].t <= th.t:
            i += 1
        last = refills[i - 1] if i else None
        out.append(Throttle(th.t, th.cpu, th.pool_ns, th.own_ns, th.stranded_ns,
                            cause(th, last, quota_us, period_us)))  # fmt: skip
    return out


def layout_problem(quotas_us: list[int], quota_us: int | None) -> str | None:
    """Why the state read cannot be trusted, or None: the quota read through the layout at the
    group's refills must be the one its cpu.max says (a layout of another build reads other
    fields). No refill seen: nothing to check, and nothing read."""
    if quotas_us and quota_us not in quotas_us:
        return (f"the quota read at its refills ({', '.join(map(str, quotas_us))} us) is not the group's "
                f"({quota_us} us): the layout does not fit this kernel")  # fmt: skip
    return None


def by_period(throttles: list[Throttle], spans: list[tuple[float, float, int, str]]) -> dict[str, dict[str, int]]:
    """Why each period the counters count as throttled was: the cause of the throttle in force
    at its end (the kernel counts a period throttled when a runqueue is throttled as its timer
    fires), the last one before its end, weighed as the counters weigh the period; by the
    period's verdict (`spans`: start, end, throttled count, verdict). "uncounted": throttles in
    periods the counters do not count at all (every runqueue unthrottled before the period
    ended: by the slack timer's or an unthrottle's distribution), by cause."""
    out: dict[str, dict[str, int]] = {}
    times = [th.t for th in throttles]
    for start, end, throttled, verdict in spans:
        if throttled:
            i = bisect.bisect_left(times, end)
            cause = throttles[i - 1].cause if i else "unseen"
            row = out.setdefault(verdict, {c: 0 for c in (*CAUSES, "unseen")})
            row[cause] += throttled
        else:
            lo, hi = bisect.bisect_left(times, start), bisect.bisect_left(times, end)
            row = out.setdefault("uncounted", {c: 0 for c in (*CAUSES, "unseen")})
            for th in throttles[lo:hi]:
                row[th.cause] += 1
    return out
