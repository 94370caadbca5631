"""`bwlab kernel fetch|build|scheduler|git|export|list|clean`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bwlab.analysis import compare
from bwlab.commands import common
from bwlab.errors import BwlabError
from bwlab.kernel import build as kernel_build
from bwlab.kernel import export as kernel_export
from bwlab.kernel import git as kernel_git
from bwlab.kernel import scheduler as kernel_scheduler
from bwlab.kernel import source as kernel_source
from bwlab.paths import POSTED_SERIES
from bwlab.progress import step


def cmd_fetch(args: argparse.Namespace) -> int:
    rel = kernel_source.release_of(args.release or kernel_source.DEFAULT_RELEASE)
    with step(f"fetch {rel.package} from {rel.suite}"):
        src = kernel_source.fetch(force=args.force, release=rel.name)
    print(f"{src.version} {src.origin} {src.path}")
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    image = common.build(common.variant_of(args, common.kernel_source_of(args, fetch=False), common.series_of(args)))
    print(f"{image.key} {image.bzimage}")
    return 0


def cmd_scheduler(args: argparse.Namespace) -> int:
    with step(f"scx_bwlab for {args.kernel}"):
        loader = kernel_scheduler.build(args.kernel)
    print(loader)
    return 0


def cmd_git(args: argparse.Namespace) -> int:
    source = common.kernel_source_of(args, fetch=False)
    series = common.series_of(args)
    with step(f"git tree of {source.version} with {len(series.patches)} patches at {args.dest}"):
        base, head = kernel_git.git_tree(source, series, Path(args.dest))
    print(f"base-commit {base} (tag v{source.version})\nbwlab {head}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    source = common.kernel_source_of(args, fetch=False)
    series = kernel_build.read_series(Path(args.series) if args.series else POSTED_SERIES)
    identity = kernel_export.git_identity()
    table = None
    if args.compare:
        (ref, (other, *_)), *_ = compare.pair([Path(p) for p in args.compare])
        # a case without enough repetitions (an unlimited baseline) says nothing in a cover letter
        found = [c for c in compare.compare_results(ref, other, compare.metric_keys(args.metric)) if c.kind != "n/a"]
        if not found:
            raise BwlabError("--compare: no case and metric that both results have")
        table = "\n".join(compare.lines(ref, other, found)) + "\n"
    dest = Path(args.dest)
    keep = Path(args.keep_tree) if args.keep_tree else None
    own = kernel_export.own_patches(series)
    on = f" on {len(series.patches) - own} prerequisite patches" if own < len(series.patches) else ""
    with step(f"export {own} patches{on} as {identity[0]} <{identity[1]}> to {dest}"):
        out = kernel_export.export(source, series, dest, identity, compare_table=table, keep_tree=keep)
    for f in out.files:
        print(f)
    print(f"base-commit {out.base}" + (f" (+{out.prerequisites} prerequisite patches)" if out.prerequisites else ""))
    print(f"To: {', '.join(out.to)}")
    print(f"Cc: {', '.join(out.cc)}")
    dirty = {name: text for name, text in out.checkpatch.items() if text}
    for name, text in dirty.items():
        print(f"checkpatch {name}:\n{text}", file=sys.stderr)
    if dirty:
        raise BwlabError(f"checkpatch --strict found problems in {len(dirty)} of {len(out.checkpatch)} patches")
    print(f"checkpatch --strict: {len(out.checkpatch)} patches clean (ignoring {kernel_export.CHECKPATCH_IGNORE})")
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
