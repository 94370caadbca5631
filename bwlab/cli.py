"""Command line: bwlab kernel|run|check|scenarios|workloads|report|compare|reproduce|kselftest|
validate|sim. Parsing only: each verb family is a module of bwlab.commands."""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import re
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import NoReturn

from bwlab import cgroup
from bwlab.choices import ACCELS, CGROUP_MODES, SCHEDULERS, TICK_MODES
from bwlab.errors import BwlabError
from bwlab.kernel import policies
from bwlab.kernel import source as kernel_source
from bwlab.paths import DEFAULT_SERIES, EXPORTER_TEXTFILE, REPO_ROOT

DESCRIPTION = (
    "Linux CPU bandwidth control, measured: run scenarios on this host, in QEMU guests of built "
    "kernels, over ssh and in a simulator; diagnose and tune live cgroups (doctor, top, tune, "
    "exporter). README.md has the concepts; each verb has its own --help."
)
INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)$")


class Command:
    """A verb's function in its module of bwlab.commands, imported only when the verb runs:
    parsing a command line imports none of them (each pulls in what its verb needs: rich,
    prometheus_client, the targets), so `bwlab doctor` does not pay for `bwlab bundle`."""

    def __init__(self, module: str, name: str) -> None:
        self.module, self.name = module, name

    def resolve(self) -> Callable[[argparse.Namespace], int]:
        """The function itself, its module imported now."""
        func: Callable[[argparse.Namespace], int] = getattr(importlib.import_module(f"bwlab.commands.{self.module}"),
                                                            self.name)  # fmt: skip
        return func

    def __call__(self, args: argparse.Namespace) -> int:
        return int(self.resolve()(args))


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors, and "did you mean" for a mistyped verb or choice."""

    def error(self, message: str) -> NoReturn:
        found = INVALID_CHOICE.search(message)
        if found:
            choices = [c.strip().strip("'") for c in found.group(2).split(",")]
            close = difflib.get_close_matches(found.group(1), choices, n=1, cutoff=0.6)
            if close:
                message = (f"{message[: found.start()]}invalid choice: '{found.group(1)}': did you mean "
                           f"'{close[0]}'? (choose from {found.group(2)})")  # fmt: skip
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def add_release_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--release", choices=list(kernel_source.RELEASES),
                   help=f"the fetched source: {kernel_source.DEFAULT_RELEASE} (default; the series' base) "
                        "or 6.12 (sched_ext without cgroup_set_bandwidth; builds take --baseline)")  # fmt: skip


def add_variant_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kernel-src", metavar="DIR", help="use this kernel tree instead of the fetched one")
    add_release_arg(p)
    default = DEFAULT_SERIES.relative_to(REPO_ROOT)
    p.add_argument("--series", metavar="PATH", help=f"patch series file (default {default})")
    p.add_argument("--baseline", action="store_true", help="build without any patches")
    p.add_argument("--config", metavar="FRAGMENT", action="append", help="extra kconfig fragment (repeatable)")
    p.add_argument("--hz", type=int, default=250, help="CONFIG_HZ (default 250, as on the host)")


def add_sim_args(p: argparse.ArgumentParser, hz: bool = True) -> None:
    if hz:
        p.add_argument("--hz", type=int, default=250, help="CONFIG_HZ (default 250)")
    p.add_argument("--tick", choices=TICK_MODES, default="aligned",
                   help="sim: phase of the CPUs' ticks (default aligned, the kernel's skew_tick=0)")  # fmt: skip
    p.add_argument("--jitter-us", type=int, default=0, help="sim: ticks and timers run up to this late (default 0)")
    p.add_argument("--timer-latency", metavar="RESULT",
                   help="sim: a timerlat result file; ticks and timers run late by its measured latencies")  # fmt: skip
    p.add_argument("--noise", metavar="RESULT",
                   help="sim: a noise result file, or a run's result with its noise probes; every CPU "
                        "carries the other work it measured, and "
                        "ticks and timers run late by its timer lateness (unless --timer-latency)")  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="sim: seed of the repetitions' phases")


def target_arg(value: str) -> str:
    """host, guest, guest-host, sim or an ssh:// URL (checked in full by the ssh target)."""
    if value in ("host", "guest", "guest-host", "sim") or value.startswith("ssh://"):
        return value
    raise argparse.ArgumentTypeError(f"{value!r}: expected host, guest, guest-host, sim or ssh://[user@]host[:port]")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="bwlab", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    kernel = sub.add_parser("kernel", help="fetch, build, list and clean kernels")
    ksub = kernel.add_subparsers(dest="kernel_command", required=True, parser_class=Parser)
    p = ksub.add_parser("fetch", help="download Debian's linux-source package into the cache")
    add_release_arg(p)
    p.add_argument("--force", action="store_true", help="download again even if cached")
    p.set_defaults(func=Command("kernel", "cmd_fetch"))
    p = ksub.add_parser("build", help="build a kernel variant (cached by source, series, config)")
    add_variant_args(p)
    p.set_defaults(func=Command("kernel", "cmd_build"))
    p = ksub.add_parser("scheduler", help="build scx_bwlab (scx/) for a kernel built with kernel/configs/scx.config; "
                        "prints the loader's path")  # fmt: skip
    p.add_argument("--kernel", required=True, metavar="KEY", help="the kernel's key (bwlab kernel list)")
    p.set_defaults(func=Command("kernel", "cmd_scheduler"))
    p = ksub.add_parser("git", help="a git tree of the source (reproducible base commit) with the series applied")
    p.add_argument("dest", help="directory to create")
    p.add_argument("--kernel-src", metavar="DIR", help="use this kernel tree instead of the fetched one")
    p.add_argument(
        "--series",
        metavar="PATH",
        help="patch series file (default kernel/lab/series: the series, LAGS and the lab switches)",
    )
    p.add_argument("--baseline", action="store_true", help="no patches, only the base commit")
    p.set_defaults(func=Command("kernel", "cmd_git"))
    p = ksub.add_parser("export", help="the posted series as git format-patch output in your git identity, "
                        "with cover letter, base-commit, To/Cc from get_maintainer.pl, checkpatch")  # fmt: skip
    p.add_argument("dest", help="directory to write the patches to (new or empty)")
    p.add_argument("--kernel-src", metavar="DIR", help="use this kernel tree instead of the fetched one")
    p.add_argument("--series", metavar="PATH", help="patch series file (default kernel/patches/series)")
    p.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"),
                   help="result files whose `bwlab compare` table goes into the cover letter")  # fmt: skip
    p.add_argument("--metric", help="metric keys for --compare (default: the report's columns)")
    p.add_argument("--keep-tree", metavar="DIR", help="keep the git tree the patches were exported from here")
    p.set_defaults(func=Command("kernel", "cmd_export"))
    ksub.add_parser("list", help="list built kernels").set_defaults(func=Command("kernel", "cmd_list"))
    p = ksub.add_parser("clean", help="remove build trees (--all: images too)")
    p.add_argument("--all", action="store_true")
    p.set_defaults(func=Command("kernel", "cmd_clean"))

    sub.add_parser("scenarios", help="list built-in scenarios").set_defaults(func=Command("run", "cmd_scenarios"))
    sub.add_parser("workloads", help="list workload kinds and their parameters").set_defaults(
        func=Command("run", "cmd_workloads")
    )
    p = sub.add_parser("check", help="check scenario files and show their cases")
    p.add_argument("files", nargs="+")
    p.add_argument("--ncpu", type=int, default=2, help="CPU count to resolve 'ncpu' with")
    p.add_argument("--hz", type=int, default=250, help="kernel HZ to resolve burst_ticks with")
    p.set_defaults(func=Command("run", "cmd_check"))

    p = sub.add_parser("validate", help="simulate table2, slice and rewrite-storm and compare with lab results")
    p.add_argument("--results", default="results", metavar="DIR", help="lab result files (default results/)")
    p.add_argument("--out", metavar="DIR", help="where validate.md/.json go (default: the results directory)")
    p.add_argument("--reps", type=int, default=20, help="simulated seeds per point (default 20)")
    p.add_argument("--no-timer-latency", action="store_true",
                   help="ignore timerlat results: ticks and timers exactly on time")  # fmt: skip
    p.add_argument("--no-noise", action="store_true",
                   help="ignore noise results: the groups have the CPUs to themselves")  # fmt: skip
    p.set_defaults(func=Command("sim", "cmd_validate"))

    simp = sub.add_parser("sim", help="the simulator: explain a window, sweep parameters")
    ssub = simp.add_subparsers(dest="sim_command", required=True, parser_class=Parser)
    for name, helptext in (("explain", "per-CPU timeline of a short window, as text and PNG (Fig. 4 style)"),
                           ("sweep", "throttling over period/quota/slice/HZ/burst/policy, in parallel")):  # fmt: skip
        p = ssub.add_parser(name, help=helptext)
        p.add_argument("scenario", help="built-in scenario name or path to a .toml file")
        p.add_argument("--case", help="case name (default: the last case with a quota)")
        p.add_argument("--vcpus", type=int, default=2)
        p.add_argument("--duration", type=float, help="override the scenario's duration_s")
        p.add_argument("--out", metavar="FILE")
        add_sim_args(p, hz=name == "explain")
        if name == "explain":
            p.add_argument("--policy", choices=policies.names(), default="mainline")
            p.add_argument("--from-ms", type=float, default=0.0)
            p.add_argument("--to-ms", type=float, default=100.0)
            p.set_defaults(func=Command("sim", "cmd_explain"))
        else:
            p.add_argument("--policy", choices=policies.names(), default="mainline")
            p.add_argument("--period-us", help="comma-separated values")
            p.add_argument("--quota-cpus", help="comma-separated CPU counts (quota = value x period)")
            p.add_argument("--slice-us", help="comma-separated sched_cfs_bandwidth_slice_us values")
            p.add_argument("--hz", dest="hz_list", help="comma-separated CONFIG_HZ values")
            p.add_argument("--burst-us", help="comma-separated cpu.max.burst values")
            p.add_argument("--policies", dest="policy_list", help="comma-separated policies")
            p.add_argument("--reps", type=int, default=10, help="seeds per point (default 10)")
            p.add_argument("--jobs", type=int, help="parallel simulations (default: all cores)")
            p.set_defaults(func=Command("sim", "cmd_sweep"), hz=250)

    p = sub.add_parser("run", help="run one scenario on the host, in a guest or in the simulator")
    p.add_argument("scenario", help="built-in scenario name or path to a .toml file")
    p.add_argument("--target", type=target_arg, default="host",
                   metavar="{host,guest,guest-host,sim,ssh://[user@]host[:port]}",
                   help="where it runs (default host); guest-host: a guest with this machine's programs "
                   "(bwlab guest exec); ssh://: a machine as root over the OpenSSH client")  # fmt: skip
    p.add_argument("--ssh-config", metavar="FILE", help="ssh: an ssh_config file instead of ~/.ssh/config")
    p.add_argument("--kernel", metavar="KEY", help="guest: a built kernel by key (bwlab kernel list)")
    add_variant_args(p)
    add_sim_args(p, hz=False)
    p.add_argument("--vcpus", type=int, default=2)
    p.add_argument("--out", metavar="DIR")
    p.add_argument("--reps", type=int, help="override the scenario's repetitions")
    p.add_argument("--duration", type=float, help="override the scenario's duration_s")
    p.add_argument("--timeout", type=float, help="guest time limit in seconds (default: from the plan)")
    p.add_argument(
        "--accel",
        choices=ACCELS,
        default="auto",
        help="guest: kvm, tcg, or auto (KVM if a probe guest boots with it, else TCG; the default)",
    )
    p.add_argument(
        "--show-command",
        action="store_true",
        help="guest: print the QEMU command line and keep its initramfs and plan.sh in OUT/boot/; run nothing",
    )
    p.add_argument("--keep", action="store_true", help="guest: keep the initramfs and plan.sh in OUT/boot/")
    p.add_argument("--scheduler", choices=SCHEDULERS,
                   help="guest: load this sched_ext scheduler before the cases (a kernel built with "
                   "kernel/configs/scx.config); the groups' throttle counters are then the scheduler's")  # fmt: skip
    p.add_argument(
        "--policy",
        choices=policies.names(),
        help="patched guest: which of the series' sched_feat switches are on (default: all)",
    )
    p.set_defaults(func=Command("run", "cmd_run"))

    p = sub.add_parser("bundle", help="scenarios as a self-contained directory for a machine without bwlab")
    p.add_argument("scenarios", nargs="+", metavar="SCENARIO", help="built-in scenario names or .toml files")
    p.add_argument("-o", "--out", required=True, metavar="DIR", help="the bundle's directory (and DIR.tar.xz)")
    p.add_argument("--ncpu", type=int, action="append", metavar="N",
                   help="a CPU count the target may have (repeat for several; default: this machine's)")  # fmt: skip
    p.add_argument("--hz", type=int, action="append", metavar="HZ",
                   help="a kernel HZ it may have, for bursts in ticks (default: 100 250 300 1000)")  # fmt: skip
    p.add_argument("--reps", type=int, help="override the scenarios' repetitions")
    p.add_argument("--duration", type=float, help="override the scenarios' duration_s")
    p.add_argument("--max-mib", type=float, default=60.0, help="refuse an archive larger than this (default 60)")
    p.add_argument("--kernel", action="append", metavar="KEY",
                   help="a built kernel to boot there too, under the QEMU the bundle carries (repeatable)")  # fmt: skip
    p.add_argument("--policy", action="append", choices=policies.names(),
                   help="a patched kernel's policy (repeatable; default: its switches as built, all on)")  # fmt: skip
    p.add_argument("--vcpus", type=int, action="append", metavar="N",
                   help="a guest vCPU count to prepare (repeatable; default: the --ncpu values); "
                   "run.sh uses the machine's CPU count or BWLAB_VCPUS")  # fmt: skip
    p.set_defaults(func=Command("bundle", "cmd_bundle"))

    guest = sub.add_parser("guest", help="a lab kernel booted with this machine's own programs: exec, shell")
    gsub = guest.add_subparsers(dest="guest_command", required=True, parser_class=Parser)
    for verb, helptext in (("exec", "run one command in the guest; its output, its exit status"),
                           ("shell", "an interactive shell in the guest (Ctrl-A X stops QEMU)")):  # fmt: skip
        p = gsub.add_parser(verb, help=helptext)
        p.add_argument("--kernel", required=True, metavar="KEY", help="a built kernel by key (bwlab kernel list)")
        p.add_argument("--vcpus", type=int, default=2, help="guest CPUs (default 2)")
        p.add_argument("--memory", default="2G", help="guest memory, as QEMU's -m takes it (default 2G)")
        p.add_argument("--policy", choices=policies.names(), help="a patched kernel's policy (sched/features)")
        p.add_argument("--accel", choices=ACCELS, default="auto", help="kvm, tcg, or auto (the default)")
        p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                       help="an environment variable for the command (repeatable)")  # fmt: skip
        p.add_argument("--init", choices=("sh", "systemd"), default="sh",
                       help="PID 1: bwlab's own (the default) or this machine's systemd, which runs the "
                            "command as a service (systemd-run, slices, CPUQuota= work)")  # fmt: skip
        p.add_argument("-v", "--verbose", action="store_true",
                       help="say after the command how QEMU ran and how long the boot took (on stderr)")  # fmt: skip
        p.add_argument("--forward", action="append", default=[], metavar="PORT:GUESTPORT",
                       help="a network card (QEMU's user network, the guest at 10.0.2.15) and TCP on this "
                            "machine's 127.0.0.1:PORT forwarded to the guest's GUESTPORT (repeatable; the "
                            "kernel needs virtio-net: the lab kernels have it)")  # fmt: skip
        if verb == "exec":
            p.add_argument("--timeout", type=float, metavar="S", help="stop the guest after S seconds (exit 124)")
            p.add_argument("argv", nargs="+", metavar="CMD", help="the command and its arguments, after --")
        p.set_defaults(func=Command("guest", f"cmd_{verb}"))

    p = sub.add_parser("ingest", help="results from the output of a bundle's run.sh")
    p.add_argument("dir", metavar="OUT", help="the directory run.sh wrote")
    p.add_argument("--out", metavar="DIR", help="where the results go (default: OUT/results)")
    p.set_defaults(func=Command("bundle", "cmd_ingest"))

    p = sub.add_parser("kselftest", help="run the kernel's cgroup test_cpu (with the series' tests) in a guest")
    p.add_argument("--kernel", metavar="KEY", help="a built kernel by key (bwlab kernel list)")
    add_variant_args(p)
    p.add_argument("--tests-tree", metavar="DIR", help="kernel tree to build test_cpu from "
                   "(default: the fetched source with the series applied)")  # fmt: skip
    p.add_argument("--vcpus", type=int, default=2)
    p.add_argument("--out", metavar="DIR")
    p.add_argument("--expect-fail", action="store_true", help="exit 0 even if tests fail (baseline runs)")
    p.add_argument("--accel", choices=ACCELS, default="auto", help="kvm, tcg, or auto (the default)")
    p.add_argument("--target", type=target_arg, default="guest", metavar="{guest,ssh://[user@]host[:port]}",
                   help="a guest of the built kernel (default), or a machine as root over ssh")  # fmt: skip
    p.add_argument("--ssh-config", metavar="FILE", help="ssh: an ssh_config file instead of ~/.ssh/config")
    p.add_argument("--cgroup-mode", choices=CGROUP_MODES, metavar="MODE",
                   help="run test_cpu with this /sys/kernel/debug/sched/cgroup_mode (7.3: concur by default; "
                   "smp is the weight split test_cpu was written for)")  # fmt: skip
    p.add_argument("--only", action="append", metavar="TEST",
                   help="run this test_cpu test (repeatable; default: all of them, in test_cpu's order)")  # fmt: skip
    p.set_defaults(func=Command("kselftest", "cmd_kselftest"))

    p = sub.add_parser("doctor", help="watch a live cgroup: unnecessary throttling, its causes, the fix, predicted")
    p.add_argument("target", metavar="CGROUP|PID|CONTAINER", help="a cgroup path, a PID, or a container/pod ID prefix")
    p.add_argument("--seconds", type=float, default=10.0, help="how long to watch (default 10)")
    p.add_argument("--interval-ms", type=float,
                   help="sampling interval (default: a fiftieth of the group's period, 1 to 10 ms)")  # fmt: skip
    p.add_argument("--sparse", action="store_true",
                   help="read only around each period boundary and at the threads' steps: about half the CPU, "
                        "but it changed the throttling of groups at demand == quota (docs/live.md)")  # fmt: skip
    p.add_argument("--json", metavar="FILE", help="write the report as JSON (- for stdout only)")
    p.add_argument("--png", metavar="FILE", help="a timeline: usage, throttled time and verdict per period")
    p.add_argument("--no-predict", action="store_true", help="skip the simulator's what-if")
    p.add_argument("--save-trace", metavar="FILE",
                   help="write the threads' recorded work as a simulator trace (a scenario's workload kind "
                        "'trace' with paced = true replays it)")  # fmt: skip
    p.add_argument("--ebpf", action="store_true",
                   help="trace with bpftrace (root): exact period boundaries, demand, timer lateness")  # fmt: skip
    p.set_defaults(func=Command("live", "cmd_doctor"))

    p = sub.add_parser("exporter", help="Prometheus metrics of below-quota throttling for every limited cgroup")
    p.add_argument("--listen", metavar="ADDR:PORT", help="serve /metrics here (e.g. 127.0.0.1:9860, :9860)")
    p.add_argument("--textfile", metavar="DIR", help=f"write DIR/{EXPORTER_TEXTFILE} for node_exporter, atomically")
    p.add_argument("--interval", type=float, default=5.0,
                   help="seconds between reads of every group's counters, and textfile writes (default 5)")  # fmt: skip
    p.add_argument("--max-hot", type=int, default=16,
                   help="groups sampled at period resolution at once (default 16)")  # fmt: skip
    p.add_argument("--cpu-budget", type=float, default=1.0, metavar="PCT",
                   help="percent of one CPU the exporter may use on average: over it, throttling groups "
                        "take turns at period resolution (default 1)")  # fmt: skip
    p.add_argument("--duration", type=float, help="stop after this many seconds (default: until SIGTERM)")
    p.add_argument("--cgroup-root", metavar="DIR",
                   help="where cgroup filesystems are mounted (default /sys/fs/cgroup)")  # fmt: skip
    p.set_defaults(func=Command("exporter", "cmd_exporter"))

    p = sub.add_parser("top", help="CPU-limited cgroups, live: the most likely unnecessary throttling first")
    p.add_argument("--interval", type=float, default=2.0, help="seconds per refresh (default 2)")
    p.add_argument("--iterations", type=int, help="stop after N refreshes (default: until Ctrl-C)")
    p.add_argument("--limit", type=int, default=40, help="rows shown (default 40)")
    p.set_defaults(func=Command("live", "cmd_top"))

    p = sub.add_parser("tune", help="set a live cgroup's CPU burst, verified (the only command that writes)")
    p.add_argument("target", metavar="CGROUP|PID|CONTAINER")
    p.add_argument("--burst", metavar="auto|US", help="auto: one tick per CPU the group runs on, within its quota")
    p.add_argument("--revert", action="store_true", help="write back the burst the first tune replaced")
    p.add_argument("--watch", action="store_true",
                   help="agent mode: TARGET is a selector (a path glob, a unit glob, a container or pod ID prefix); "
                        "keep the burst on every matching limited group, new ones included")  # fmt: skip
    p.add_argument("--interval", type=float, default=10.0, help="--watch: seconds between rounds (default 10)")
    p.add_argument("--iterations", type=int, help="--watch: stop after N rounds (default: until Ctrl-C)")
    p.set_defaults(func=Command("live", "cmd_tune"))

    p = sub.add_parser("report", help="write report.md and plots for a results directory")
    p.add_argument("dir")
    p.set_defaults(func=Command("results", "cmd_report"))

    p = sub.add_parser("compare", help="each result against the first: ratios with 95 %% intervals, significance")
    p.add_argument(
        "results", nargs="+", metavar="RESULT", help="result files, or results directories (paired by file name)"
    )
    p.add_argument("--metric", help="comma-separated metric keys (default: the report's columns both have)")
    p.add_argument("--significant-only", action="store_true", help="show only significant differences")
    p.add_argument("--json", metavar="FILE", help="write the comparisons as JSON lines (- for stdout)")
    p.set_defaults(func=Command("results", "cmd_compare"))

    p = sub.add_parser(
        "reproduce",
        help="kernels, every scenario family on host, guests and simulator, report (--full: the whole evaluation)",
    )
    p.add_argument("--out", metavar="DIR")
    p.add_argument("--kernel-src", metavar="DIR", help="use this kernel tree instead of the fetched one")
    p.add_argument("--vcpus", type=int, default=2)
    p.add_argument("--reps", type=int)
    p.add_argument("--duration", type=float)
    p.add_argument("--no-host", action="store_true")
    p.add_argument("--no-guest", action="store_true")
    p.add_argument("--accel", choices=ACCELS, default="auto", help="guests: kvm, tcg, or auto (the default)")
    p.add_argument("--full", action="store_true",
                   help="the whole evaluation: six kernels, every policy, HZ=1000, kselftest, overhead, stress "
                        "(about 2 h 45 min); without it every scenario family once and short")  # fmt: skip
    p.add_argument("--quick", action="store_true", help=argparse.SUPPRESS)  # the default; kept for old scripts
    p.set_defaults(func=Command("reproduce", "cmd_reproduce"))
    return parser


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGHUP, _on_sigterm)  # a closed terminal or ssh session: clean up as for SIGTERM
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except BwlabError as exc:
        sys.stderr.write(f"bwlab: error: {' '.join(str(exc).split())}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("bwlab: interrupted; cgroups, child processes and temp files removed\n")
        return 130
    except BrokenPipeError:  # output piped into `head` and the like: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    finally:
        cgroup.remove_all()
        sys.stdout.flush()


if __name__ == "__main__":
    raise SystemExit(main())
