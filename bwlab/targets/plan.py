"""The portable plan: a scenario's cases as straight-line POSIX (busybox) shell, and the
BWLAB- record protocol it writes to file descriptor 3.

Records: `BWLAB-HELLO k=v ...` (the machine), `BWLAB-FEATURES ...` (sched/features),
`BWLAB-NOISE-BEGIN` ... `BWLAB-NOISE-END` (a noise probe's output), per repetition
`BWLAB-BEGIN CASE REP`, `BWLAB-SECTION NAME` + lines, `BWLAB-END CASE REP`, `BWLAB-ERROR ...`
and `BWLAB-DONE` at the end. Several scenarios in one boot: each one's part begins with
`BWLAB-SCENARIO INDEX` (render_plans, split_scenarios). A target that can run a shell (a guest,
a machine over SSH; cgroup v2 or v1, see Layout) runs the plan and parses the stream; nothing
else is scraped.
"""

from __future__ import annotations

import dataclasses
import math
import re
import shlex
from dataclasses import dataclass, field

from bwlab import schedtrace, threads
from bwlab.errors import BwlabError
from bwlab.paths import sysctl_path
from bwlab.scenario import RunSpec, noise_seconds
from bwlab.targets.base import RawRep
from bwlab.workloads import noise
from bwlab.workloads.base import STOP_GRACE_S

CGROUP_ROOT = "/sys/fs/cgroup"

SCHED_FEATURES = "/sys/kernel/debug/sched/features"


@dataclass(frozen=True)
class Layout:
    """Where a plan makes its groups. v2: one directory per group under `cpu` (the unified
    root, cpu controller enabled there), cpu.max. v1: a directory in each hierarchy it needs
    (`cpu`; `cpuacct` unless co-mounted with cpu; `cpuset` for a case with cpus), the
    cpu.cfs_*_us files, and cpuacct.usage next to cpu.stat (the host target's Group does the
    same, see cgroup.py)."""

    version: int = 2
    cpu: str = CGROUP_ROOT
    cpuacct: str | None = None  # v1 only; None: co-mounted with cpu (or absent)
    cpuset: str | None = None  # v1 only

    def describe(self) -> str:
        return f"cgroup v{self.version} at {self.cpu}"

    def roots(self) -> list[str]:
        """Every hierarchy a group may have a directory in."""
        return [r for r in (self.cpu, self.cpuacct, self.cpuset) if r is not None]


@dataclass(frozen=True)
class GroupShell:
    """The shell of one repetition's group: what makes it, where its tasks go, what a rewrite
    writes, what prints its cpu.stat, and its top directories (removed deepest first)."""

    make: list[str]
    leaves: list[str]
    bandwidth_file: str
    bandwidth_value: str
    stat: str
    dirs: list[str]
    stat_file: str  # cpu.stat, and v1's cpuacct.usage ("-" on v2): what cgsample reads
    usage_file: str
    threads_file: str  # its threads (v2 cgroup.threads, v1 tasks, in the deepest group): cgsample steps them


def group_shell(layout: Layout, name: str, spec: RunSpec) -> GroupShell:
    """Group `name` with the spec's limits (nested `depth` deep, the same limits at every
    level, tasks in the deepest) in `layout`."""
    q = shlex.quote
    if layout.version == 2:
        g = f"{layout.cpu}/{name}"
        bw_value = f"{spec.quota_us if spec.quota_us is not None else 'max'} {spec.period_us}"
        lines, leaf = [], g
        for level in range(1, spec.depth + 1):
            if level > 1:
                ctl = "+cpu" + (" +cpuset" if spec.cpus is not None else "")
                lines.append(f"echo {q(ctl)} > {leaf}/cgroup.subtree_control")
                leaf = f"{leaf}/l{level}"
            lines += [f"mkdir {leaf}", f"echo {q(bw_value)} > {leaf}/cpu.max"]
            if spec.burst_us:
                lines.append(f"echo {spec.burst_us} > {leaf}/cpu.max.burst")
            if spec.cpus is not None:
                lines.append(f"echo {spec.cpus} > {leaf}/cpuset.cpus")
        return GroupShell(lines, [leaf], f"{g}/cpu.max", bw_value, f"cat {g}/cpu.stat", [g], f"{g}/cpu.stat", "-",
                          f"{leaf}/cgroup.threads")  # fmt: skip
    if spec.cpus is not None and layout.cpuset is None:
        raise BwlabError(f"case {spec.case} asks for cpus but the machine has no v1 cpuset hierarchy")
    quota = str(spec.quota_us) if spec.quota_us is not None else "-1"
    roots = [layout.cpu, *([layout.cpuacct] if layout.cpuacct else []),
             *([layout.cpuset] if spec.cpus is not None and layout.cpuset else [])]  # fmt: skip
    lines = []
    for level in range(1, spec.depth + 1):
        sub = "/".join([name, *(f"l{k}" for k in range(2, level + 1))])
        lines += [f"mkdir {root}/{sub}" for root in roots]
        lines += [f"echo {spec.period_us} > {layout.cpu}/{sub}/cpu.cfs_period_us",
                  f"echo {quota} > {layout.cpu}/{sub}/cpu.cfs_quota_us"]  # fmt: skip
        if spec.burst_us:
            lines.append(f"echo {spec.burst_us} > {layout.cpu}/{sub}/cpu.cfs_burst_us")
        if spec.cpus is not None:
            lines += [f"echo {spec.cpus} > {layout.cpuset}/{sub}/cpuset.cpus",
                      f"cat {layout.cpuset}/cpuset.mems > {layout.cpuset}/{sub}/cpuset.mems"]  # fmt: skip
    leaves = [f"{root}/{sub}" for root in roots]  # `sub` is the deepest level now
    acct = layout.cpuacct or layout.cpu
    stat = f'{{ cat {layout.cpu}/{name}/cpu.stat; echo "cpuacct_usage_ns $(cat {acct}/{name}/cpuacct.usage)"; }}'
    return GroupShell(lines, leaves, f"{layout.cpu}/{name}/cpu.cfs_quota_us", quota, stat,
                      [f"{root}/{name}" for root in roots], f"{layout.cpu}/{name}/cpu.stat",
                      f"{acct}/{name}/cpuacct.usage", f"{leaves[0]}/tasks")  # fmt: skip


def render_plan(specs: list[RunSpec], features: list[str] | None = None, layout: Layout | None = None,
                bin_dir: str = "/bin", tmp_dir: str = "/tmp", prefix: str = "bwlab-",
                restore: bool = False, boot_events: bool = False, scheduler: str | None = None) -> str:  # fmt: skip
    """The scenario as straight-line POSIX shell writing records to fd 3.

    `features` are written to sched/features first (a bandwidth policy, see kernel/policies.py).
    Groups PREFIX<case>-<rep> are made in `layout` (default: cgroup v2 at /sys/fs/cgroup, a
    guest's); programs are run from `bin_dir`, scratch files go to `tmp_dir`. `restore`: what
    the plan changes besides its groups (sched features, sysctls) it first saves as commands
    in `tmp_dir`/restore.sh, for whoever cleans up after a plan cut short (a guest reboots).
    `boot_events`: the trace side action's events were turned on by the kernel's command line
    (BOOT_EVENTS_PARAM, a guest's), and the plan uses the top-level buffer instead of an
    instance of its own, never turning an event on or off (see trace_start). `scheduler`: a
    sched_ext scheduler's loader in `bin_dir`, loaded before the cases and stopped after them;
    each group's counters are then the scheduler's (scheduler_start), cgroup v2 only."""
    q = shlex.quote
    layout = layout or Layout()
    t = tmp_dir
    lines = ["# generated by bwlab: one block per case and repetition", "set +e"]
    if scheduler is not None:
        if layout.version != 2:
            raise BwlabError(f"a sched_ext scheduler ({scheduler}) takes cgroup v2: {layout.describe()}")
        sampled = [spec.case for spec in specs if any(side.kind == "sample" for side in spec.sides)]
        if sampled:  # cgsample reads cpu.stat's counters, which stay frozen under sched_ext
            raise BwlabError(f"case {sampled[0]}: the sample side action reads cpu.stat's throttle counters, "
                             f"which a sched_ext scheduler ({scheduler}) does not keep")  # fmt: skip
        lags = lags_groups(specs, layout, prefix)
        specs = [lags_to_the_scheduler(spec) for spec in specs]
        if len(lags) > MAX_LAGS_GROUPS:
            raise BwlabError(f"{len(lags)} latency-aware groups (cases x repetitions): {scheduler} takes at most "
                             f"{MAX_LAGS_GROUPS}")  # fmt: skip
        lines += scheduler_start(scheduler, bin_dir, t, lags)
    if features and restore:
        saved = f'for f in $(cat {SCHED_FEATURES}); do echo "echo $f > {SCHED_FEATURES}"; done'
        lines.append(f"{saved} >> {t}/restore.sh")
    for feat in features or []:
        lines.append(f"echo {feat} > {SCHED_FEATURES} || echo 'BWLAB-ERROR sched_feature {feat} not accepted' >&3")
    lines.append(f'echo "BWLAB-FEATURES $(cat {SCHED_FEATURES} 2>/dev/null)" >&3')
    if boot_events:  # the events write nothing until a traced repetition starts
        tr = schedtrace.TRACEFS
        lines.append(f"[ -d {tr}/instances ] || mount -t tracefs nodev {tr}; echo 0 > {tr}/tracing_on")
    noise_s = noise_seconds(specs)
    # the machine as the simulator should see it, in this boot, before and after the cases
    # (see runner.machine_noise)
    probe = " ".join(noise.probe_argv(noise_s, "$(nproc)"))
    noise_block = (f"echo 'BWLAB-NOISE-BEGIN' >&3; {bin_dir}/{probe} > {t}/noise 2>&1; "
                   f"cat {t}/noise >&3; echo 'BWLAB-NOISE-END' >&3")  # fmt: skip
    if noise_s:
        lines.append(noise_block)
    for ci, spec in enumerate(specs):
        for name in spec.sysctls:
            lines.append(f"OLD_{ci}_{_ident(name)}=$(cat {sysctl_path(name)})")
            if restore:
                lines.append(f'echo "echo $OLD_{ci}_{_ident(name)} > {sysctl_path(name)}" >> {t}/restore.sh')
        for name, value in spec.sysctls.items():
            lines.append(f"echo {q(value)} > {sysctl_path(name)} || echo 'BWLAB-ERROR sysctl {name}' >&3")
        for rep in range(spec.repetitions):
            name = f"{prefix}{ci}-{rep}"
            grp = group_shell(layout, name, spec)
            if scheduler is not None:
                grp = dataclasses.replace(grp, stat=f"{SCHEDULER_STAT} {grp.dirs[0]}")
            lines.append(f"# case {spec.case} rep {rep}")
            lines += grp.make
            traced = [si for si, side in enumerate(spec.sides) if side.kind == "trace"]
            instance = str(schedtrace.TRACEFS) if boot_events else f"{schedtrace.TRACEFS}/instances/{name}"
            if traced:
                lines += trace_start(instance, f"{t}/tracefs", f"{t}/restore.sh" if restore else None, boot_events)
            for si, side in enumerate(spec.sides):
                if side.kind == "trace":
                    continue
                if side.kind == "sample":
                    lines.append(f"{bin_dir}/cgsample {grp.stat_file} {grp.usage_file} {side.interval_us} "
                                 f"{grp.threads_file} {round(threads.STEP_S * 1e6)} > {t}/side{si} 2>&1 & "
                                 f"SIDE{si}=$!")  # fmt: skip
                    continue
                lines.append(f"{bin_dir}/cgwrite {grp.bandwidth_file} {q(grp.bandwidth_value)} {side.interval_us} "
                             f"> {t}/side{si} 2>&1 & SIDE{si}=$!")  # fmt: skip
            program = program_path(spec.workload.argv[0], bin_dir)
            argv = " ".join(q(a) for a in (program, *spec.workload.args(grp.leaves[0], rep)))
            join = " && ".join(f"echo $$ > {leaf}/cgroup.procs" for leaf in grp.leaves)
            if traced:  # the workload's first process names itself in the trace before it starts
                join += f' && {{ echo "{schedtrace.ROOT_MARK} $$" > {instance}/trace_marker || :; }}'
            lines += [
                f"echo 'BWLAB-BEGIN {ci} {rep}' >&3",
                f"echo 'BWLAB-SECTION stat_before' >&3; {grp.stat} >&3",
                *(["echo 0 > /proc/lock_stat 2>/dev/null"] if spec.lock_classes else []),
                "echo 'BWLAB-SECTION t0' >&3; cat /proc/uptime >&3",
                *workload_lines(
                    f"sh -c '{join} && exec \"$@\"' sh {argv} > {t}/out 2> {t}/err",
                    grp,
                    t,
                    spec.workload.plugin.stop_after_s(spec.workload.resolved, spec.duration_s),
                ),
                *(trace_stop(instance, f"{t}/side{traced[0]}", f"{t}/tracefs", boot_events) if traced else []),
                "echo 'BWLAB-SECTION t1' >&3; cat /proc/uptime >&3",
                f"echo 'BWLAB-SECTION stat_after' >&3; {grp.stat} >&3",
                *(
                    [
                        "echo 'BWLAB-SECTION lock_stat' >&3; grep -F ': ' /proc/lock_stat | grep -F -e "
                        + " -e ".join(q(c + ":") for c in spec.lock_classes)
                        + " >&3"
                    ]
                    if spec.lock_classes
                    else []
                ),
                "echo 'BWLAB-SECTION rc' >&3; echo $RC >&3",
                f"echo 'BWLAB-SECTION stopped' >&3; if [ -e {t}/stopped ]; then echo 1 >&3; rm -f {t}/stopped; fi",
            ]
            for si in range(len(spec.sides)):
                if si not in traced:
                    lines.append(f"kill $SIDE{si}; wait $SIDE{si}")
                lines.append(f"echo 'BWLAB-SECTION side{si}' >&3; cat {t}/side{si} >&3")
            lines += [
                f"echo 'BWLAB-SECTION stdout' >&3; cat {t}/out >&3",
                f"echo 'BWLAB-SECTION stderr' >&3; tail -n 20 {t}/err >&3",
                f"echo 'BWLAB-END {ci} {rep}' >&3",
            ]
            for g in grp.dirs:
                lines.append(f"find {g} -depth -type d -exec rmdir {{}} \\; 2>/dev/null || rmdir {g}")
        for name in spec.sysctls:
            lines.append(f"echo $OLD_{ci}_{_ident(name)} > {sysctl_path(name)}")
    if noise_s:
        lines.append(noise_block)
    if scheduler is not None:
        lines += scheduler_stop(scheduler, t)
    return "\n".join(lines) + "\n"


# A sched_ext scheduler under the plan. Under sched_ext the kernel's bandwidth code does not
# run and cpu.stat's nr_periods, nr_throttled, throttled_usec, nr_bursts and burst_usec stay
# as they were: the scheduler counts them (scx/: the loader's -o file, a JSON object per
# cgroup on a line of its own, keyed by the cgroup's id, its directory's inode number). A
# group's stat is then cpu.stat less those lines, plus the scheduler's, read fresh: on SIGUSR1
# the loader writes them at once to FILE.now, which the reader removed before asking. A group
# the scheduler keeps no account of (no quota, no LAGS load) has zeros. usage_usec stays the
# kernel's own.
SCHEDULER_STAT = "bwlab_sched_stat"
SCHEDULER_FIELDS = ("nr_periods", "nr_throttled", "throttled_usec", "nr_bursts", "burst_usec")
SCHED_EXT = "/sys/kernel/sched_ext"
CGID_KEY = '"cgid": '
# the line of the cgroup whose id ends `id`: its `wanted` fields as "name value" lines; zeros
# for a cgroup without one
SCHEDULER_AWK = r"""index($0, id) {
  found = 1
  gsub(/[{}",]/, "")
  for (i = 1; i < NF; i++) {
    k = substr($i, 1, length($i) - 1)
    if (index(" " wanted " ", " " k " ")) print k, $(i + 1)
  }
}
END { if (!found) { n = split(wanted, names, " "); for (i = 1; i <= n; i++) print names[i], 0 } }"""


# LAGS under a scheduler: a workload's `latency_awareness` (picks, funcs) writes
# cpu.latency_awareness, the in-kernel LAGS' file, into the groups it makes. A sched_ext
# scheduler takes the opt-in from its loader instead (scx_bwlab -l GROUP: the group and every
# group under it), so under a scheduler the workload runs without it and the case's groups
# with latency_awareness = 1 go to the loader. Its subtree is wider than the file's: picks'
# plain group, under the same case group, is latency-aware too (docs/scx.md).
LAGS_PARAM = "latency_awareness"
MAX_LAGS_GROUPS = 64  # scx_bwlab's -l limit


def lags_to_the_scheduler(spec: RunSpec) -> RunSpec:
    """The spec with its workload's `latency_awareness` left out of its command."""
    w = spec.workload
    if w.resolved.get(LAGS_PARAM) is None:
        return spec
    resolved = dataclasses.replace(w.resolved, values={k: v for k, v in w.resolved.values.items() if k != LAGS_PARAM})
    argv = w.plugin.argv(resolved, spec.ncpu, spec.duration_s)
    return dataclasses.replace(spec, workload=dataclasses.replace(w, argv=argv, resolved=resolved))


def asks_for_lags(spec: RunSpec) -> bool:
    return bool(spec.workload.resolved.get(LAGS_PARAM) == 1)


def lags_cases(specs: list[RunSpec]) -> list[str]:
    """The cases whose workload asks for LAGS (`latency_awareness` 1): under a scheduler, its
    loader's opt-in, not the workload's command (a result's meta.scheduler says which)."""
    return [spec.case for spec in specs if asks_for_lags(spec)]


def lags_groups(specs: list[RunSpec], layout: Layout, prefix: str) -> list[str]:
    """The top group of every repetition of the cases whose workload asks for LAGS (its
    `latency_awareness` is 1)."""
    return [group_shell(layout, f"{prefix}{ci}-{rep}", spec).dirs[0]
            for ci, spec in enumerate(specs) if asks_for_lags(spec)
            for rep in range(spec.repetitions)]  # fmt: skip


def scheduler_start(name: str, bin_dir: str, t: str, lags: list[str] | None = None) -> list[str]:
    """Load the scheduler (its loader in the background, PID in BWLAB_SCHED) and wait until
    the kernel says it is enabled (at most 20 s; else a BWLAB-ERROR and the plan returns: no
    case runs under another scheduler than asked); define SCHEDULER_STAT. `lags`: groups the
    loader opts in to LAGS (-l), made later by their cases: each case's first SCHEDULER_STAT
    (before its workload starts) has the loader mark them (it marks before it answers)."""
    q = shlex.quote
    stats, log = f"{t}/sched-stats.json", f"{t}/sched.log"
    keep = " ".join(f"-e ^{f}" for f in SCHEDULER_FIELDS)
    wanted = " ".join(SCHEDULER_FIELDS)
    opt_in = "".join(f" -l {q(g)}" for g in lags or [])
    return [
        f"{bin_dir}/{name} -o {stats} -i 1000{opt_in} 2> {log} & BWLAB_SCHED=$!",
        "n=0",
        f'while [ "$(cat {SCHED_EXT}/state 2>/dev/null)" != enabled ] || [ ! -s {stats} ]; do',
        "  n=$((n + 1)); if [ $n -gt 400 ] || ! kill -0 $BWLAB_SCHED 2>/dev/null; then",
        f'    echo "BWLAB-ERROR scheduler {name} did not start: $(tail -n 1 {log})" >&3',
        "    kill -INT $BWLAB_SCHED 2>/dev/null; return 0 2>/dev/null || exit 1; fi",
        "  usleep 50000",
        "done",
        f'echo "BWLAB-SCHEDULER $(cat {SCHED_EXT}/root/ops 2>/dev/null)" >&3',
        f"{SCHEDULER_STAT}() {{",
        f"  grep -v {keep} $1/cpu.stat",
        f"  rm -f {stats}.now; kill -USR1 $BWLAB_SCHED; n=0",
        f"  while [ ! -s {stats}.now ] && [ $n -lt 300 ]; do n=$((n + 1)); usleep 10000; done",
        f'  [ -s {stats}.now ] || echo "BWLAB-ERROR scheduler {name} wrote no counters in 3 s" >&3',
        f"  awk -v id={q(CGID_KEY)}$(stat -c %i $1), -v wanted={q(wanted)} {q(SCHEDULER_AWK)} {stats}.now",
        "}",
    ]


def scheduler_stop(name: str, t: str) -> list[str]:
    """Stop the scheduler (SIGINT: every task back to CFS); a BWLAB-ERROR if it had left by
    itself during the cases (an error, the watchdog) or its loader did not exit 0."""
    log = f"{t}/sched.log"
    return [
        f'if [ "$(cat {SCHED_EXT}/state)" != enabled ]; then',
        f"  echo \"BWLAB-ERROR scheduler {name} left during the run: $(tail -n 3 {log} | tr '\\n' ' ')\" >&3; fi",
        "kill -INT $BWLAB_SCHED; wait $BWLAB_SCHED; rc=$?",
        f'[ $rc = 0 ] || echo "BWLAB-ERROR scheduler {name} exited $rc: $(tail -n 1 {log})" >&3',
    ]


def workload_lines(run: str, grp: GroupShell, t: str, stop_s: float | None) -> list[str]:
    """The workload's `run` line, leaving its exit status in RC. A workload that does not end
    by itself (`stop_s`: WorkloadKind.stop_after_s, whole seconds) runs in the background
    beside a watcher that, `stop_s` after the start, marks `t`/stopped, SIGTERMs every task of
    the group once (its cpu hierarchy's directory, nested groups too), gives them
    STOP_GRACE_S to end, SIGKILLs what is left and waits for the group to empty. The watcher
    closes the records' fd 3 (an orphan would hold an ssh session open); it is ended, with its
    sleep, when the workload ends first, else waited for, so the group is empty when the plan
    goes on. A program that ends just as the watcher fires is recorded as stopped."""
    if stop_s is None:
        return [run, "RC=$?"]
    tasks = f"$(cat $(find {grp.dirs[0]} -name cgroup.procs) 2>/dev/null)"
    polls = round(STOP_GRACE_S / 0.2)
    settle = f'i=0; while [ $i -lt {polls} ] && [ -n "{tasks}" ]; do sleep 0.2; i=$((i + 1)); done'
    watcher = (f"( trap 'kill $SL 2>/dev/null; exit 0' TERM; sleep {math.ceil(stop_s)} & SL=$!; wait $SL || exit 0; "
               f": > {t}/stopped; for p in {tasks}; do kill -TERM $p 2>/dev/null; done; {settle}; "
               f"for p in {tasks}; do kill -KILL $p 2>/dev/null; done; {settle} ) 3>&- >/dev/null 2>&1 & "
               "STOPPER=$!")  # fmt: skip
    return [
        f"{run} & WL=$!",
        watcher,
        "wait $WL; RC=$?",
        f"if [ -e {t}/stopped ]; then wait $STOPPER; else kill $STOPPER 2>/dev/null; wait $STOPPER; fi",
    ]


# The kernel command line that turns the trace side action's events on at boot, in the top-level
# buffer, before the other CPUs are started. Turning an event on or off patches the kernel's
# text while it runs (the tracepoint's static key and static call: a breakpoint first, then the
# new bytes), and a 2-vCPU TCG guest died of it once in CI, at the start of a repetition:
# "Oops: int3" (2026-11-25, QEMU 7.2). Patched before SMP, the text is never touched again.
BOOT_EVENTS_PARAM = "trace_event=" + ",".join(e.replace("/", ":") for e in schedtrace.FTRACE_EVENTS)


def trace_start(instance: str, mounted: str, restore: str | None = None, boot_events: bool = False) -> list[str]:
    """The trace side action's start, before the workload: a tracefs instance of its own (tracefs
    mounted first if it is not, and `mounted` made to say so), the mono clock (cgsample's), a
    buffer of FTRACE_BUFFER_KB a CPU, the period timer's expiries only (filtered by the
    function's address where /proc/kallsyms shows it; the parser keeps only its by name
    anyway), and FTRACE_EVENTS on. What fails is a BWLAB-ERROR record and no trace. With
    `restore` (a machine that outlives the plan), what trace_stop undoes is also appended
    there first, for a plan cut short. With `boot_events` (BOOT_EVENTS_PARAM), `instance` is
    the top-level buffer, whose events must already be on: it is stopped, set up and emptied
    (what the events wrote since boot, or in the last repetition, goes) and started again."""
    tr = str(schedtrace.TRACEFS)
    undo = [] if restore is None else [f"echo {shlex.quote(trace_undo(instance, mounted, boot_events))} >> {restore}"]
    if boot_events:
        events = " ".join(schedtrace.FTRACE_EVENTS)
        own = [
            f"for e in {events}; do grep -qx 1 {instance}/events/$e/enable || "
            'echo "BWLAB-ERROR trace side: event $e not on since boot (a kernel without tracing?)" >&3; done',
            f"echo 0 > {instance}/tracing_on",
        ]
        enable = f"echo > {instance}/trace"
    else:
        own = [
            f"mkdir {instance} || echo 'BWLAB-ERROR trace side: no tracefs instance (a kernel without tracing?)' >&3"
        ]
        enable = "; ".join(f"echo 1 > {instance}/events/{e}/enable" for e in schedtrace.FTRACE_EVENTS)
    return [
        *undo,
        f"rm -f {mounted}; [ -d {tr}/instances ] || {{ mount -t tracefs nodev {tr} && touch {mounted}; }}",
        *own,
        f"echo mono > {instance}/trace_clock; echo {schedtrace.FTRACE_BUFFER_KB} > {instance}/buffer_size_kb",
        "A=$(grep ' sched_cfs_period_timer$' /proc/kallsyms | cut -d' ' -f1)",
        f'case "$A" in ""|*[!0]*) [ -n "$A" ] && echo "function == 0x$A" > '
        f"{instance}/events/timer/hrtimer_expire_entry/filter ;; esac",
        f"{enable}; echo 1 > {instance}/tracing_on",
    ]


def trace_stop(instance: str, out: str, mounted: str, boot_events: bool = False) -> list[str]:
    """The trace side action's end, after the workload: the end marker, tracing off, the
    output (a header with the events the buffer dropped, then the trace, gzip'd in base64
    where the machine has both) written to `out`,
    then the instance removed and tracefs unmounted if the start mounted it."""
    return [
        f"echo {schedtrace.END_MARK} > {instance}/trace_marker; echo 0 > {instance}/tracing_on",
        f"L=0; for f in {instance}/per_cpu/cpu*/stats; do n=$(sed -n 's/^overrun: //p' $f); L=$((L + ${{n:-0}})); done",
        # compressed where the machine can (a guest's serial port carried 17 MB a repetition of
        # wakelat's bursts as text); read through cat, and gzip's complaints kept out of the
        # data: GNU gzip given the trace file itself warns that its size changed while zipping
        # (tracefs files have no fixed size), which broke every trace over ssh (2026-11-25)
        f"if command -v gzip > /dev/null && command -v base64 > /dev/null; then "
        f'{{ echo "{schedtrace.FTRACE_HEADER} $L gzip"; cat {instance}/trace | gzip -1 | base64; }} > {out} '
        f"2> {out}.err; "
        f'else {{ echo "{schedtrace.FTRACE_HEADER} $L"; cat {instance}/trace; }} > {out} 2>&1; fi',
        trace_undo(instance, mounted, boot_events),
    ]


def trace_undo(instance: str, mounted: str, boot_events: bool = False) -> str:
    """Events off, the instance removed (rmdir refuses while an event is on), tracefs unmounted
    if the plan mounted it; nothing if it is gone already. With `boot_events` the events stay
    on (turning them off would patch the text) and the top-level buffer stays."""
    tr = str(schedtrace.TRACEFS)
    # the marker goes only with the mount: a file of it still open (a killed plan's writer not yet
    # gone) makes umount fail with EBUSY for a moment, and the undo may run again
    unmount = (f"if [ -e {mounted} ]; then for try in 1 2 3; do umount {tr} && {{ rm -f {mounted}; break; }}; "
               "sleep 1; done; fi")  # fmt: skip
    if boot_events:
        return unmount
    disable = "; ".join(f"echo 0 > {instance}/events/{e}/enable" for e in schedtrace.FTRACE_EVENTS)
    return f"if [ -d {instance} ]; then {disable}; rmdir {instance}; fi; {unmount}"


def render_plans(spec_lists: list[list[RunSpec]], features: list[str] | None = None,
                 boot_events: bool = False, scheduler: str | None = None) -> str:  # fmt: skip
    """Several scenarios' plans one after the other, in one boot: the policy's features are
    written once, first; each part begins with a BWLAB-SCENARIO record."""
    parts = []
    for k, specs in enumerate(spec_lists):
        parts.append(
            f"echo 'BWLAB-SCENARIO {k}' >&3\n"
            + render_plan(specs, features if k == 0 else None, boot_events=boot_events, scheduler=scheduler)
        )
    return "".join(parts)


def split_scenarios(text: str, count: int) -> list[PlanOutput]:
    """The record stream of render_plans() as one PlanOutput per scenario: each has the boot's
    HELLO and features; a part is done when the next one began or the whole plan was."""
    head: list[str] = []
    parts: list[list[str]] = [[] for _ in range(count)]
    current: list[str] | None = None
    for line in text.replace("\r", "").splitlines():
        if line.startswith("BWLAB-SCENARIO "):
            index = line.split()[1]
            current = parts[int(index)] if index.isdigit() and int(index) < count else None
            continue
        (current if current is not None else head).append(line)
    whole = parse_records(text)
    outputs = []
    for k, lines in enumerate(parts):
        out = parse_records("\n".join(head + lines))
        out.hello = whole.hello
        out.features = out.features or whole.features
        out.done = whole.done or any(parts[j] for j in range(k + 1, count))
        outputs.append(out)
    return outputs


def program_path(argv0: str, bin_dir: str) -> str:
    """Where the plan finds a program: an absolute path as it is, a name in `bin_dir`."""
    return argv0 if argv0.startswith("/") else f"{bin_dir}/{argv0}"


def _ident(name: str) -> str:
    return re.sub(r"\W", "_", name)


@dataclass
class PlanOutput:
    """The parsed record stream: boot facts and one raw record per (case, rep)."""

    hello: dict[str, str] = field(default_factory=dict)
    features: str = ""
    # per (case, rep): its raw record, or why the record cannot be used
    records: dict[tuple[int, int], RawRep | str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    done: bool = False
    noise: list[str] = field(default_factory=list)  # the noise probes' outputs (before, after)
    scheduler: str = ""  # the sched_ext scheduler the kernel said was loaded (its ops' name)


def _uptime(text: str) -> float:
    try:
        return float(text.split()[0])
    except (IndexError, ValueError) as exc:
        raise BwlabError(f"the plan sent a malformed /proc/uptime: {text!r}") from exc


def _case_rep(line: str) -> tuple[int, int] | None:
    """(case, rep) of a BWLAB-BEGIN/END line, None if it is malformed (cut short)."""
    parts = line.split()
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    return int(parts[1]), int(parts[2])


def parse_records(text: str) -> PlanOutput:
    """Read a BWLAB- record stream; records cut short (no BWLAB-END) are left out."""
    out = PlanOutput()
    current: tuple[int, int] | None = None
    section = ""
    sections: dict[str, list[str]] = {}
    noise: list[str] | None = None
    for line in text.replace("\r", "").splitlines():
        if line == "BWLAB-NOISE-BEGIN":
            noise = []
        elif line == "BWLAB-NOISE-END" and noise is not None:
            out.noise.append("\n".join(noise) + "\n")
            noise = None
        elif noise is not None:
            noise.append(line)
        elif line.startswith("BWLAB-HELLO "):
            out.hello = dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)
        elif line.startswith("BWLAB-SCHEDULER"):
            out.scheduler = line[len("BWLAB-SCHEDULER") :].strip()
        elif line.startswith("BWLAB-FEATURES"):
            out.features = line[len("BWLAB-FEATURES") :].strip()
        elif line.startswith("BWLAB-ERROR "):
            out.errors.append(line[len("BWLAB-ERROR ") :])
        elif line == "BWLAB-DONE":
            out.done = True
        elif line.startswith("BWLAB-BEGIN "):
            key = _case_rep(line)
            if key is None:
                out.errors.append(f"malformed record line {line[:80]!r}")
            current, section, sections = key, "", {}
        elif line.startswith("BWLAB-SECTION ") and current is not None:
            section = line.split()[1]
            sections[section] = []
        elif line.startswith("BWLAB-END ") and current is not None:
            if _case_rep(line) != current:
                out.records[current] = f"record cut short: {line[:80]!r} after BWLAB-BEGIN {current[0]} {current[1]}"
                current = None
                continue
            text_of = {k: "\n".join(v) + "\n" for k, v in sections.items()}
            try:
                rc = int(text_of.get("rc", "").strip() or "-1")
                wall_s = _uptime(text_of.get("t1", "0")) - _uptime(text_of.get("t0", "0"))
            except (ValueError, BwlabError) as exc:
                out.records[current] = f"malformed record: {exc}"
                current = None
                continue
            out.records[current] = RawRep(
                stat_before=text_of.get("stat_before", ""),
                stat_after=text_of.get("stat_after", ""),
                wall_s=wall_s,
                rc=rc,
                stdout=text_of.get("stdout", ""),
                stderr=text_of.get("stderr", ""),
                sides=[text_of[k] for k in sorted(text_of) if k.startswith("side")],
                lock_stat=text_of.get("lock_stat", ""),
                stopped=text_of.get("stopped", "").strip() == "1",
            )
            current = None
        elif current is not None and section:
            sections[section].append(line)
    return out
