"""What several commands share: the kernel a command names, the scenario it loads, where its
results go, and the summary it prints."""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path

from rich.table import Table

from bwlab import results, scenario
from bwlab.analysis import report
from bwlab.errors import BwlabError
from bwlab.kernel import build as kernel_build
from bwlab.kernel import source as kernel_source
from bwlab.paths import DEFAULT_SERIES
from bwlab.progress import console, step


def kernel_source_of(args: argparse.Namespace, fetch: bool) -> kernel_source.KernelSource:
    named = getattr(args, "release", None)
    release = named or kernel_source.DEFAULT_RELEASE
    if args.kernel_src:
        if named:
            raise BwlabError("--kernel-src and --release: name one source")
        return kernel_source.user_source(Path(args.kernel_src))
    if release != kernel_source.DEFAULT_RELEASE and not getattr(args, "baseline", False):
        raise BwlabError(f"--release {release} builds only with --baseline: the series is against "
                         f"{kernel_source.RELEASES[kernel_source.DEFAULT_RELEASE].version_prefix}")  # fmt: skip
    if fetch:
        with step(f"kernel source {kernel_source.release_of(release).package}"):
            return kernel_source.fetch(release=release)
    cached = kernel_source.cached_source(release)
    if cached is None:
        again = "" if release == kernel_source.DEFAULT_RELEASE else f" --release {release}"
        raise BwlabError(f"kernel source not fetched: run 'bwlab kernel fetch{again}' or pass --kernel-src DIR")
    return cached


def series_of(args: argparse.Namespace) -> kernel_build.Series:
    if args.baseline:
        return kernel_build.read_series(None)
    return kernel_build.read_series(Path(args.series) if args.series else DEFAULT_SERIES)


def variant_of(
    args: argparse.Namespace, source: kernel_source.KernelSource, series: kernel_build.Series
) -> kernel_build.Variant:
    frags = kernel_build.default_fragments([Path(f) for f in args.config or []])
    return kernel_build.Variant(source, series, frags, args.hz)


def overrides(args: argparse.Namespace) -> dict[str, object]:
    """The scenario settings --reps and --duration replace."""
    out: dict[str, object] = {}
    if getattr(args, "reps", None) is not None:
        out["repetitions"] = args.reps
    if getattr(args, "duration", None) is not None:
        out["duration_s"] = args.duration
    return out


def load_scenario(name: str, args: argparse.Namespace) -> scenario.Scenario:
    return scenario.load(scenario.find(name), overrides(args))


def default_out(tag: str) -> Path:
    return Path("results") / f"{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}-{tag}"


def build(variant: kernel_build.Variant) -> kernel_build.KernelImage:
    cached = kernel_build.cached_image(variant)
    if cached is not None:
        console.print(f"[green]✓[/green] kernel {cached.key} (cached)")
        return cached
    desc = f"build kernel {variant.key} ({len(variant.series.patches)} patches, HZ={variant.hz})"
    with step(desc):
        return kernel_build.build(variant)


def guest_image(args: argparse.Namespace) -> kernel_build.KernelImage:
    if args.kernel and getattr(args, "release", None):
        raise BwlabError("--kernel names a built kernel: --release does not apply")
    if args.kernel:
        found = kernel_build.image_by_key(args.kernel)
        if found is None:
            raise BwlabError(f"no built kernel with key {args.kernel} (see 'bwlab kernel list')")
        return found
    variant = variant_of(args, kernel_source_of(args, fetch=False), series_of(args))
    image = kernel_build.cached_image(variant)
    if image is None:
        raise BwlabError(f"kernel {variant.key} is not built: run 'bwlab kernel build' with the same options")
    return image


def print_summary(directory: Path) -> None:
    """One compact table per scenario: target label, case and the metrics it has."""
    docs = results.load_dir(directory)
    for sc_name in sorted({d.scenario for d in docs if d.cases}):
        sdocs = [d for d in docs if d.scenario == sc_name]
        rows = report.summary_rows(sdocs, brief=True)
        heads = [m.heading or m.key for m in report.columns_for(sdocs) if m.console or m.key not in report.declared()]
        heads = [h for h in heads if any(h in c for *_, c in rows)]
        table = Table(title=f"{sc_name}: mean ±stdev over repetitions")
        for col in ("target", "case"):
            table.add_column(col, overflow="fold")  # a case name is cut by nothing
        for col in heads:
            table.add_column(col)
        for _, label, case, cells in rows:
            table.add_row(label, case, *(cells.get(h, "-") for h in heads))
        console.print(table)
    console.print(f"details: {directory / 'report.md'}")
