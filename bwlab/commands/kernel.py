"""`bwlab kernel fetch|build|git|list|clean`."""

from __future__ import annotations

import argparse
from pathlib import Path

from bwlab.commands import common
from bwlab.kernel import build as kernel_build
from bwlab.kernel import git as kernel_git
from bwlab.kernel import source as kernel_source
from bwlab.progress import step


def cmd_fetch(args: argparse.Namespace) -> int:
    with step(f"fetch {kernel_source.PACKAGE} from {kernel_source.SUITE}"):
        src = kernel_source.fetch(force=args.force)
    print(f"{src.version} {src.origin} {src.path}")
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    image = common.build(common.variant_of(args, common.kernel_source_of(args, fetch=False), common.series_of(args)))
    print(f"{image.key} {image.bzimage}")
    return 0


def cmd_git(args: argparse.Namespace) -> int:
    source = common.kernel_source_of(args, fetch=False)
    series = common.series_of(args)
    with step(f"git tree of {source.version} with {len(series.patches)} patches at {args.dest}"):
        base, head = kernel_git.git_tree(source, series, Path(args.dest))
    print(f"base-commit {base} (tag v{source.version})\nbwlab {head}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    images = kernel_build.list_images()
    if not images:
        print("no kernels built (bwlab kernel build)")
    for img in images:
        patches = f"{len(img.patches)} patches" if img.patches else "baseline"
        patches += f" +{img.flavor}" if img.flavor else ""
        print(f"{img.key}  {img.release}  HZ={img.hz}  {patches}  series={img.series_digest} "
              f"config={img.config_digest}  {img.origin}  built in {img.build_seconds} s")  # fmt: skip
    return 0


def cmd_clean(args: argparse.Namespace) -> int:
    for path in kernel_build.clean(all_images=args.all):
        print(f"removed {path}")
    return 0
