"""`bwlab bundle` and `bwlab ingest`: scenarios carried to a machine where nothing can be
installed, and their records brought back as results (targets/bundle.py)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from bwlab.analysis import report
from bwlab.commands import common
from bwlab.errors import BwlabError
from bwlab.progress import console
from bwlab.targets import bundle, bundle_guest


def cmd_bundle(args: argparse.Namespace) -> int:
    ncpus = sorted(set(args.ncpu or [os.cpu_count() or 1]))
    hzs = sorted(set(args.hz or bundle.HZ_CHOICES))
    if min(ncpus) < 1 or min(hzs) < 1:
        raise BwlabError("--ncpu and --hz must be at least 1")
    vcpus = sorted(set(args.vcpus or ncpus))
    if min(vcpus) < 1 or max(vcpus) > 64:
        raise BwlabError("--vcpus must be in 1..64")
    if args.policy and not args.kernel:
        raise BwlabError("--policy applies to guests: name a patched kernel with --kernel KEY")
    guests = bundle_guest.guests_for(args.kernel or [], args.policy or [])
    parts = bundle.load_parts(args.scenarios, common.overrides(args))
    archive = bundle.write_bundle(parts, ncpus, hzs, Path(args.out), args.max_mib, guests, vcpus)
    size = archive.stat().st_size / 2**20
    cpus = ", ".join(map(str, ncpus)) + " CPUs"
    if guests:
        cpus += f"; guests {', '.join(g.label for g in guests)} with {', '.join(map(str, vcpus))} vCPUs"
    console.print(f"bundle: {args.out} and {archive} ({size:.1f} MiB), for {cpus}; there, as root: "
                  f"sh {Path(args.out).name}/run.sh OUT; here: bwlab ingest OUT", soft_wrap=True)  # fmt: skip
    return 0


def cmd_ingest(args: argparse.Namespace) -> int:
    out = Path(args.dir)
    if not out.is_dir():
        raise BwlabError(f"ingest: {out} is not a directory")
    results_dir = Path(args.out) if args.out else out / "results"
    paths = bundle.ingest(out, results_dir)
    for path in paths:
        console.print(f"result: {path}")
    report.write_report(results_dir)
    common.print_summary(results_dir)
    return 0
