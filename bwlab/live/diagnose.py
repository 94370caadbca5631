"""Why a group was throttled below its quota, with the evidence for each cause, and what to
change, as the command each runtime needs.

The causes on a stock kernel (docs/method.md, the cover letter):
- tick overrun: a CPU's runtime is charged at its ticks, so each CPU running the group can
  overrun a period's end by up to a tick; the debt is paid from the next period, and the
  group is throttled although its demand fits. A burst of one tick per CPU it runs on absorbs
  it (on 6.18 at 10 ms: 51 % of periods -> 0.04 %, docs/results.md).
- stranded runtime: CPUs take runtime from the group's pool a slice (5 ms) at a time; what a
  CPU holds when its thread sleeps another CPU cannot use.
- more runnable threads than the quota's CPUs: they overrun together, and each runs in
  shorter bursts (GOMAXPROCS, thread pools sized to the machine, not the limit).
- a parent's limit: the group is throttled by an ancestor's quota.
- bursts: periods that want more than the quota while the average is well below it; that is
  what cpu.max.burst is for (it saves unused quota, up to the burst, for the peaks).
- a late period timer (traced only): the refill comes late, the throttled runqueues wait for it,
  and the period that follows is shorter by as much, its quota unchanged.
"""

from __future__ import annotations

import math
import os
import shlex
from dataclasses import dataclass, field
from typing import Any

from bwlab.live import groups, threadpools
from bwlab.live.groups import LiveGroup
from bwlab.machine import kernel_hz
from bwlab.paths import sysctl_path
from bwlab.periods import Analysis

# over-use in some periods while the average is at most this share of the quota: bursty
BURSTY_SHARE = 0.9

# a period timer later than this share of the period (p99) is named as a cause
LATE_TIMER_SHARE = 0.02

# a quota within this share of a whole number of CPUs is taken as that many CPUs
WHOLE_CPU = 0.001


def _pool_advice(pools: tuple[threadpools.Pool, ...], n: int) -> str:
    """What sizes each Go or JVM pool wider than `n`, and how to make it `n`."""
    wide = [p for p in pools if p.size > n]
    return "".join(f"; {p.describe()}: {p.advice(n)}" for p in wide[:3])


def n_cpus(n: int) -> str:
    """ "1 CPU", "2 CPUs"."""
    return f"{n} CPU" if n == 1 else f"{n} CPUs"


def _whole(cpus: float) -> int:
    """The whole number of CPUs a quota is, or 0 if it is not one."""
    n = round(cpus)
    return n if n >= 1 and abs(cpus - n) <= WHOLE_CPU * n else 0


@dataclass(frozen=True)
class Facts:
    """The machine and the group as measured."""

    ncpu: int  # CPUs the machine has
    hz: int | None  # CONFIG_HZ, None if unknown
    slice_us: int  # kernel.sched_cfs_bandwidth_slice_us
    threads: int  # the group's threads that were busy while watched (all of them if none was)
    mean_cpus: float  # CPUs the group used on average while watched
    timer_late_us: list[float] | None = None  # each period timer expiry's lateness, if traced (ebpf.py)
    allowed: tuple[int, ...] = ()  # the CPUs its threads may run on (affinity, cpuset); (): all
    pools: tuple[threadpools.Pool, ...] = ()  # its Go programs' and JVMs' thread pools

    @property
    def tick_us(self) -> int:
        return 1_000_000 // (self.hz or 250)  # unknown: the common 250 (4 ms), the larger tick

    @property
    def cpus(self) -> int:
        """How many CPUs the group's threads may run on."""
        return len(self.allowed) or self.ncpu


def machine_facts() -> Facts:
    """This machine's CPUs, HZ and bandwidth slice; the group's fields are left empty."""
    slice_file = sysctl_path("kernel.sched_cfs_bandwidth_slice_us")
    slice_us = int(slice_file.read_text()) if slice_file.is_file() else 5000
    return Facts(ncpu=os.cpu_count() or 1, hz=kernel_hz(), slice_us=slice_us, threads=0, mean_cpus=0.0)


@dataclass(frozen=True)
class Cause:
    key: str
    title: str
    evidence: str


@dataclass
class Diagnosis:
    verdict: str  # "none", "below-quota", "at-quota", "mixed"
    summary: str
    causes: list[Cause] = field(default_factory=list)
    burst_us: int | None = None  # the recommended burst, if one is
    commands: list[tuple[str, str]] = field(default_factory=list)  # (runtime, command)
    # in place of the quota (a cpuset, or nothing: "quota-covers-cpus", "cpuset"): (runtime, how)
    alternatives: list[tuple[str, str]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "summary": self.summary,
                "causes": [c.__dict__ for c in self.causes], "recommended_burst_us": self.burst_us,
                "commands": [{"runtime": r, "command": c} for r, c in self.commands],
                "alternatives": [{"runtime": r, "command": c} for r, c in self.alternatives]}  # fmt: skip


def burst_cpus(group: LiveGroup, facts: Facts) -> int:
    """The CPUs the group can run on at once: its quota's CPUs, its threads and the CPUs they
    may run on bound that."""
    quota = group.limit.quota_us or 0
    return max(1, min(facts.cpus, facts.threads or facts.cpus, math.ceil(quota / group.limit.period_us)))


def recommended_burst(group: LiveGroup, facts: Facts) -> int | None:
    """One tick per CPU the group can run on at once, within the kernel's rule burst <= quota."""
    quota = group.limit.quota_us
    if quota is None:
        return None
    return min(quota, facts.tick_us * burst_cpus(group, facts))


def burst_clamp(group: LiveGroup, facts: Facts) -> str | None:
    """Where one tick per CPU is more than the quota (the kernel allows a burst of at most the
    quota): what the clamped burst still covers, and what would cover the rest. None where it
    fits."""
    quota = group.limit.quota_us
    cpus = burst_cpus(group, facts)
    want = facts.tick_us * cpus
    if quota is None or want <= quota:
        return None
    fit = quota // facts.tick_us  # CPUs whose tick the quota covers
    period_ms = math.ceil(want * group.limit.period_us / quota / 1000)  # the same share, quota >= want
    cpuset = f", a cpuset of at most {n_cpus(fit)}" if fit >= 1 else ""
    return (f"one tick ({facts.tick_us} us) on each of {n_cpus(cpus)} is {want} us, above the quota {quota} us: "
            f"a burst of {quota} us (the most the kernel allows) covers {100 * quota // want} % of it; "
            f"a period of {period_ms} ms at the same CPU share{cpuset}, or the bwlab kernel series would cover "
            "the rest")  # fmt: skip


def diagnose(group: LiveGroup, analysis: Analysis, facts: Facts) -> Diagnosis:
    """The verdict on the watched periods, the causes the evidence supports, the fix."""
    below, at, total = analysis.below, analysis.at, analysis.total
    limit = group.effective
    if total == 0:
        return Diagnosis("none", "the group did not run a full period with a quota while watched")
    if below + at == 0:
        return Diagnosis("none", f"not throttled in {total} periods")
    share = below / (below + at)
    verdict = "below-quota" if share >= 0.8 else "at-quota" if share <= 0.2 else "mixed"
    summary = (f"throttled in {below + at} of {total} periods ({100 * (below + at) / total:.1f} %): "
               f"{below} below quota (unnecessary), {at} at quota (it wanted more)")  # fmt: skip
    diag = Diagnosis(verdict, summary)
    quota = limit.quota_us or 0
    if group.limited_by != group.path:
        diag.causes.append(Cause("parent-limit", "a parent's limit", f"{group.limited_by} allows {limit.describe()}, "
                                 f"less than this group's own {group.limit.describe()}"))  # fmt: skip
    running = max(1, min(facts.cpus, facts.threads or 1, math.ceil(limit.cpus or 1)))
    # below-quota causes and their fix only when such periods are more than strays among
    # over-use (sysbench at twice its quota: 1 of 399 called below quota, and a burst offered)
    unnecessary = below > 0 and verdict != "at-quota"
    if unnecessary:
        overrun = facts.tick_us * running
        diag.causes.append(Cause("tick-overrun", "tick-overrun debt paid from the next period",
                                 f"HZ={facts.hz or '? (assumed 250)'}: each of the {n_cpus(running)} it runs on can "
                                 f"overrun a period's end by up to a {facts.tick_us / 1000:g} ms tick, "
                                 f"{overrun / 1000:g} ms of a {quota / 1000:g} ms quota "
                                 f"({100 * overrun / quota:.0f} %); burst {limit.burst_us / 1000:g} ms"))  # fmt: skip
        held = facts.slice_us * running
        if held * 4 >= quota:
            diag.causes.append(Cause("stranded-runtime", "runtime stranded in other CPUs' local pools",
                                     f"each CPU takes {facts.slice_us / 1000:g} ms slices; {n_cpus(running)} can hold "
                                     f"{held / 1000:g} ms of the {quota / 1000:g} ms quota"))  # fmt: skip
    late = sorted(facts.timer_late_us or [])
    if unnecessary and late:
        p99 = late[min(len(late) - 1, int(0.99 * len(late)))]
        if p99 >= LATE_TIMER_SHARE * limit.period_us:
            diag.causes.append(Cause("late-timer", "a late period timer",
                                     f"the refill ran up to {late[-1] / 1000:.2f} ms late (p99 {p99 / 1000:.2f} ms) "
                                     f"in a {limit.period_us / 1000:g} ms period: throttled runqueues wait for it; "
                                     "an interrupt-heavy or overcommitted (virtual) machine"))  # fmt: skip
    at_once = min(facts.threads, facts.cpus)  # threads beyond the CPUs they may use wait for each other
    if limit.cpus is not None and at_once > math.ceil(limit.cpus):
        diag.causes.append(Cause("threads", "more threads running at once than the quota's CPUs",
                                 f"{facts.threads} threads on {n_cpus(facts.cpus)} run {at_once} at once against "
                                 f"{limit.cpus:.2f} CPUs of quota, which they spend {at_once / limit.cpus:.1f} x as "
                                 "fast as the period passes: size thread pools (GOMAXPROCS, "
                                 f"-XX:ActiveProcessorCount) to {math.ceil(limit.cpus)}"
                                 + _pool_advice(facts.pools, math.ceil(limit.cpus))))  # fmt: skip
    own = group.limited_by == group.path  # a parent's quota is shared with the group's siblings
    if own and below + at > 0 and limit.cpus is not None and limit.cpus >= facts.cpus * (1 - WHOLE_CPU):
        # every throttle of such a group is unnecessary: it cannot want more than its CPUs
        diag.causes.append(Cause("quota-covers-cpus", "a quota as large as the CPUs it may run on",
                                 f"{limit.cpus:.2f} CPUs of quota, and its threads may run on {n_cpus(facts.cpus)} "
                                 f"({groups.cpu_list(list(facts.allowed)) or 'all'}): the quota caps nothing the "
                                 "CPUs do not, it only throttles"))  # fmt: skip
        diag.alternatives = alternatives(group, None)
    elif own and unnecessary and limit.cpus is not None and 0 < _whole(limit.cpus) < facts.cpus:
        pinned = list(facts.allowed or range(facts.cpus))[: _whole(limit.cpus)]
        diag.causes.append(Cause("cpuset", "a whole-CPU quota that a cpuset could replace",
                                 f"{limit.cpus:.2f} CPUs of quota on {n_cpus(facts.cpus)}: pinned to "
                                 f"{len(pinned)} of them ({groups.cpu_list(pinned)}) with no quota it is bounded the "
                                 "same and never throttled; it can then no longer use the other CPUs when they "
                                 "are idle"))  # fmt: skip
        diag.alternatives = alternatives(group, pinned)
    used = analysis.used_cpus
    bursty = at > 0 and used is not None and limit.cpus is not None and used <= BURSTY_SHARE * limit.cpus
    if bursty and used is not None and limit.cpus is not None and group.limited_by == group.path:
        # what it leaves unused on average is what a burst lets it save for its peaks
        spare = round((limit.cpus - used) * limit.period_us)
        diag.causes.append(Cause("bursty", "bursts above the quota, below it on average",
                                 f"it used {used:.2f} of {limit.cpus:.2f} CPUs on average, and {at} periods "
                                 f"wanted more than the quota: a burst of {spare / 1000:g} ms lets it spend in "
                                 "its peaks the quota it leaves unused"))  # fmt: skip
        diag.burst_us = max(recommended_burst(group, facts) or 0, min(quota, spare))
    elif verdict == "at-quota":
        diag.causes.append(Cause("over-use", "demand above the quota",
                                 f"{at} of {below + at} throttled periods needed more than the quota, "
                                 f"{used or 0:.2f} CPUs used on average: a burst does not help; raise the quota or "
                                 "make the work smaller"))  # fmt: skip
    if unnecessary and diag.burst_us is None:
        diag.burst_us = recommended_burst(group, facts)
    if unnecessary and (clamp := burst_clamp(group, facts)) is not None:
        diag.causes.append(Cause("burst-clamped", "one tick per CPU is more than the quota", clamp))
    if diag.burst_us is not None and diag.burst_us > group.limit.burst_us:
        diag.commands = commands(group, diag.burst_us)
        if group.limit.burst_us > 0:  # it has one, and is throttled through it
            diag.causes.append(Cause("burst-too-small", "a burst too small",
                                     f"its burst of {group.limit.burst_us / 1000:g} ms is less than the "
                                     f"{diag.burst_us / 1000:g} ms recommended above"))  # fmt: skip
    return diag


def commands(group: LiveGroup, burst_us: int) -> list[tuple[str, str]]:
    """How to set this burst where the group comes from; raw writes do not survive the
    runtime recreating the group (bwlab tune --watch keeps them)."""
    hier = group.hierarchy
    file = "cpu.max.burst" if hier.version == 2 else "cpu.cfs_burst_us"
    path = group.dir / file
    out = [
        ("bwlab", f"bwlab tune {shlex.quote(group.path)} --burst {burst_us}"),
        (f"cgroup v{hier.version}", f"echo {burst_us} > {shlex.quote(str(path))}"),
    ]
    ident = group.identity
    if ident.runtime == "docker" and ident.container_id:
        out.append(("docker", f"no flag sets burst: the raw write above (docker update --cpus keeps it only until "
                              f"the container restarts); container {ident.container_id[:12]}"))  # fmt: skip
    if ident.kind == "pod":
        out.append(("kubernetes", "a pod cannot set burst (KEP open); the runtime can: bwlab-nri (nri/, an NRI "
                                  "plugin for containerd and CRI-O) sets it at creation and keeps resizes safe; or a "
                                  f"node agent: bwlab tune --watch --burst {burst_us} {ident.pod_uid}; or a longer "
                                  "period for every pod with the kubelet's cpuCFSQuotaPeriod (CustomCPUCFSQuotaPeriod "
                                  "feature gate)"))  # fmt: skip
    if ident.kind == "systemd" and ident.unit:
        unit = shlex.quote(ident.unit)
        # a longer period halves nothing at systemd's default of 100 ms: offered only below it
        longer = (f", or a longer period: systemctl set-property {unit} CPUQuotaPeriodSec=100ms"
                  if group.limit.period_us < 100000 else "")  # fmt: skip
        out.append(("systemd", f"no unit option sets burst: bwlab tune --watch {unit} --burst {burst_us} keeps "
                               f"it, or the raw write above after each start of {unit}{longer}"))  # fmt: skip
    return out


def alternatives(group: LiveGroup, pinned: list[int] | None) -> list[tuple[str, str]]:
    """How to drop the group's quota, pinning it first to `pinned` CPUs if given, where it
    comes from. bwlab writes only bursts (tune): these are the user's to run."""
    hier = group.hierarchy
    raw: list[str] = []
    cpus = groups.cpu_list(pinned) if pinned is not None else ""
    if pinned is not None:
        cpuset = group.dir / "cpuset.cpus"
        if hier.version == 2 and cpuset.is_file():
            raw.append(f"echo {cpus} > {shlex.quote(str(cpuset))}")
        else:  # v1 keeps cpusets in another hierarchy: the threads' affinity does the same
            procs = shlex.quote(str(group.dir / "cgroup.procs"))
            raw.append(f"for p in $(cat {procs}); do taskset -a -c -p {cpus} $p; done")
    if hier.version == 2:
        raw.append(f"echo max > {shlex.quote(str(group.dir / 'cpu.max'))}")
    else:
        raw.append(f"echo -1 > {shlex.quote(str(group.dir / 'cpu.cfs_quota_us'))}")
    out = [(f"cgroup v{hier.version}", " && ".join(raw))]
    ident = group.identity
    if ident.runtime == "docker" and ident.container_id:
        how = f"--cpuset-cpus {cpus} in place of --cpus" if pinned is not None else "without --cpus: its CPUs bound it"
        out.append(("docker", f"run container {ident.container_id[:12]} {how}"))
    if ident.kind == "systemd" and ident.unit:
        how = f"AllowedCPUs={cpus} (cgroup v2) in place of CPUQuota=" if pinned is not None else "no CPUQuota="
        out.append(("systemd", f"{ident.unit} with {how} (systemctl edit {ident.unit})"))
    if ident.kind == "pod":
        out.append(("kubernetes", "a Guaranteed pod (CPU request == limit, whole CPUs) on a kubelet with "
                                  "cpuManagerPolicy: static gets exclusive CPUs, and from Kubernetes 1.33 "
                                  "(DisableCPUQuotaWithExclusiveCPUs) no CFS quota"))  # fmt: skip
    return out
