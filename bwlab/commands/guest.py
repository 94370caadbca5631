"""`bwlab guest exec|shell`: a lab kernel with this machine's own programs (targets/hostroot.py)."""

from __future__ import annotations

import argparse
import sys

from bwlab.commands import common
from bwlab.errors import BwlabError
from bwlab.targets import hostroot, qemu


def _run(args: argparse.Namespace, argv: list[str], interactive: bool, timeout_s: float | None) -> int:
    if args.vcpus < 1 or args.vcpus > 64:
        raise BwlabError(f"--vcpus {args.vcpus}: expected 1 to 64 (the lab kernel's NR_CPUS)")
    env = hostroot.parse_env(args.env)
    forwards = hostroot.parse_forwards(args.forward)
    image = common.guest_image(args)
    accel = qemu.choose_accel(args.accel, image)
    try:
        done = hostroot.run(image, argv, vcpus=args.vcpus, policy=args.policy, accel=accel.name,
                            memory=args.memory, env=env, timeout_s=timeout_s, interactive=interactive,
                            init=args.init, forwards=forwards)  # fmt: skip
    except hostroot.Timeout as exc:
        sys.stderr.write(f"bwlab: {exc}\n")
        return 124
    if args.verbose:  # on request only: the command's stderr is its own
        sys.stderr.write(f"bwlab: {accel.name} ({accel.reason}); QEMU's main loop {done.timer_thread}; the "
                         f"command started at {done.started_s:.2f} s of guest uptime, {done.elapsed_s:.1f} s "
                         f"in all\n")  # fmt: skip
    return done.status


def cmd_exec(args: argparse.Namespace) -> int:
    return _run(args, list(args.argv), False, args.timeout)


def cmd_shell(args: argparse.Namespace) -> int:
    if not sys.stdin.isatty():
        raise BwlabError("guest shell needs a terminal on stdin (for a command, use bwlab guest exec)")
    return _run(args, [], True, None)
