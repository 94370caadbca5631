"""`bwlab run`, `bwlab scenarios`, `bwlab check`: scenarios on a target."""

from __future__ import annotations

import argparse
import contextlib
import shlex
from pathlib import Path

from rich.table import Table

from bwlab import scenario, workloads
from bwlab.analysis import report
from bwlab.commands import common
from bwlab.commands.sim import sim_target
from bwlab.errors import BwlabError
from bwlab.kernel import scheduler as kernel_scheduler
from bwlab.progress import console, out
from bwlab.targets.base import Target
from bwlab.targets.host import HostTarget
from bwlab.targets.hostroot import HostUserlandTarget
from bwlab.targets.qemu import QemuTarget
from bwlab.targets.ssh import Remote, SshTarget


def target_of(args: argparse.Namespace, sc: scenario.Scenario | None = None) -> Target:
    """The --target the command line names, with its options; a guest boots with this
    machine's programs where the scenario asks for them ([target] userland = "host")."""
    sim_opts = {"--tick": args.tick != "aligned", "--jitter-us": args.jitter_us != 0,
                "--timer-latency": bool(args.timer_latency), "--noise": bool(args.noise),
                "--seed": args.seed != 0}  # fmt: skip
    if args.target != "sim" and any(sim_opts.values()):
        raise BwlabError(f"{next(k for k, v in sim_opts.items() if v)} applies to --target sim only")
    if args.scheduler and (args.target != "guest" or args.show_command or args.policy):
        raise BwlabError("--scheduler applies to --target guest only, without --show-command or --policy")
    if args.target == "sim":
        return sim_target(args)
    if args.policy and args.target == "host":
        raise BwlabError("--policy applies to patched guests, ssh:// machines and the simulator, not the host")
    if args.target != "guest" and (args.show_command or args.keep):
        raise BwlabError("--show-command and --keep apply to --target guest only")
    if args.target not in ("guest", "guest-host") and args.accel != "auto":
        raise BwlabError("--accel applies to --target guest and guest-host only")
    if args.ssh_config and not args.target.startswith("ssh://"):
        raise BwlabError("--ssh-config applies to --target ssh://... only")
    if args.target == "host":
        return HostTarget()
    if args.target.startswith("ssh://"):
        return SshTarget(Remote.parse(args.target, args.ssh_config), args.policy, args.timeout)
    asked = args.target == "guest" and sc is not None and sc.userland == "host"
    if asked and (args.show_command or args.keep):
        raise BwlabError("this scenario asks for this machine's userland ([target] userland = \"host\"): "
                         "--show-command and --keep apply to the initramfs guest only")  # fmt: skip
    if asked and args.scheduler:
        raise BwlabError("--scheduler runs in the initramfs guest: this scenario asks for this machine's userland")
    if args.target == "guest-host" or asked:
        return HostUserlandTarget(common.guest_image(args), args.vcpus, args.policy, args.timeout, args.accel)
    image = common.guest_image(args)
    loader = kernel_scheduler.build(image.key) if args.scheduler else None
    return QemuTarget(image, args.vcpus, args.policy, args.timeout, args.accel, args.keep, loader)


def cmd_run(args: argparse.Namespace) -> int:
    sc = common.load_scenario(args.scenario, args)
    out = Path(args.out) if args.out else common.default_out(sc.name)
    target = target_of(args, sc)
    if args.show_command:
        assert isinstance(target, QemuTarget)
        print(shlex.join(target.command(sc, out)))
        console.print(f"initramfs and plan.sh: {out / 'boot'}")
        return 0
    # the host's and guests' own progress displays show what runs; the simulator has none
    with console.status(f"{sc.name} on {target.label}") if args.target == "sim" else contextlib.nullcontext():
        path = target.run(sc, out)
    console.print(f"result: {path}")
    report.write_report(out)
    common.print_summary(out)
    return 0


def cmd_scenarios(args: argparse.Namespace) -> int:
    for name in scenario.builtin_names():
        sc = scenario.load(scenario.builtin_path(name))
        print(f"{name:15} {len(sc.cases)} cases x {sc.data['repetitions']} reps  {sc.description}")
    return 0


def cmd_workloads(args: argparse.Namespace) -> int:
    """The workload kinds and their parameters (defaults), from the registry."""
    for name, kind in workloads.kinds().items():
        where = "" if kind.runs_on_real else " (simulator only)"
        print(f"{name}{where}: {kind.description}")
        for key, param in kind.params.items():
            default = ("required" if param.required else "optional" if param.default is None
                       else f"default {param.default!r}")  # fmt: skip
            print(f"    {key:18} {param.type:8} {default}{'  ' + param.help if param.help else ''}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """Each scenario's cases as a table, resolved for --ncpu and --hz: what a run would do."""
    for name in args.files:
        sc = scenario.load(scenario.find(name))
        specs = sc.resolve(args.ncpu, args.hz)
        table = Table(title=f"{sc.name}: {len(specs)} cases for {args.ncpu} CPUs"
                      + (f", HZ={args.hz}" if args.hz else ""), title_justify="left")  # fmt: skip
        for col in ("case", "period", "quota", "burst", "cpus", "reps x s", "workload", "sides, sysctls"):
            table.add_column(col)
        for spec in specs:
            extra = [f"{s.kind}@{s.interval_us}us" for s in spec.sides] + [f"{k}={v}" for k, v in spec.sysctls.items()]
            table.add_row(f"{sc.name}/{spec.case}", f"{spec.period_us} us",
                          "max" if spec.quota_us is None else f"{spec.quota_us} us",
                          f"{spec.burst_us} us" if spec.burst_us else "-", spec.cpus or "all",
                          f"{spec.repetitions} x {spec.duration_s:g}",
                          shlex.join(spec.workload.argv) + (f" (depth {spec.depth})" if spec.depth > 1 else ""),
                          ", ".join(extra) or "-")  # fmt: skip
        out.print(table)
    return 0
