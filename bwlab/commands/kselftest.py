"""`bwlab kselftest`: the kernel's cgroup test_cpu, with the series' tests, on a target."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.table import Table

from bwlab.commands import common
from bwlab.errors import BwlabError
from bwlab.kernel import kselftest
from bwlab.kernel import source as kernel_source
from bwlab.progress import console, step
from bwlab.targets.qemu import QemuTarget
from bwlab.targets.ssh import Remote, SshTarget


def cmd_kselftest(args: argparse.Namespace) -> int:
    target: QemuTarget | SshTarget
    if args.target.startswith("ssh://"):
        if args.kernel or args.accel != "auto":
            raise BwlabError("--kernel and --accel apply to guests; over ssh test_cpu runs on the kernel booted there")
        target = SshTarget(Remote.parse(args.target, args.ssh_config))
    elif args.target == "guest":
        if args.ssh_config:
            raise BwlabError("--ssh-config applies to --target ssh://... only")
        target = QemuTarget(common.guest_image(args), args.vcpus, accel=args.accel)
    else:
        raise BwlabError(f"--target {args.target}: kselftest runs in a guest or over ssh://")
    if args.release not in (None, kernel_source.DEFAULT_RELEASE) and not args.tests_tree:
        raise BwlabError(f"--release {args.release}: test_cpu comes from the lab's series on "
                         f"{kernel_source.DEFAULT_RELEASE}; name a --tests-tree of that release")  # fmt: skip
    if args.tests_tree:
        test_cpu = kselftest.build_test_cpu(Path(args.tests_tree))
    else:
        with step("test_cpu from the source with the series applied"):
            test_cpu = kselftest.series_test_cpu(common.kernel_source_of(args, fetch=False))
    only = kselftest.only_arguments(test_cpu, args.only or [])
    out = Path(args.out) if args.out else common.default_out("kselftest")
    label = target.label
    where = (f"{args.vcpus} vCPUs, kernel {target.image.key}" if isinstance(target, QemuTarget)
             else target.remote.url)  # fmt: skip
    with console.status(f"test_cpu on {label} ({where})"):
        path, tests = target.run_kselftest(test_cpu, out, cgroup_mode=args.cgroup_mode, only=only)
    table = Table(title=f"test_cpu on {label}")
    table.add_column("test")
    table.add_column("result")
    for test in tests:
        colour = {"pass": "green", "fail": "red"}.get(test.status, "yellow")
        table.add_row(test.name, f"[{colour}]{test.status}[/{colour}]")
    console.print(table)
    console.print(f"result: {path}")
    failed = [t.name for t in tests if t.status == "fail"]
    if failed and not args.expect_fail:
        raise BwlabError(f"{len(failed)} of {len(tests)} test_cpu tests failed: {', '.join(failed)}")
    return 0
