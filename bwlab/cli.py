"""Command line: bwlab kernel|run|report|reproduce|scenarios|check|validate|sim."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

from rich.table import Table

from bwlab import (
    cgroup,
    kernel_build,
    kernel_source,
    kselftest,
    policies,
    report,
    reproduce,
    results,
    runner,
    scenario,
    sim,
    simtools,
)
from bwlab.errors import BwlabError
from bwlab.paths import DEFAULT_SERIES, REPO_ROOT
from bwlab.progress import console, step
from bwlab.scenario import RunSpec


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def _source(args: argparse.Namespace, fetch: bool) -> kernel_source.KernelSource:
    if args.kernel_src:
        return kernel_source.user_source(Path(args.kernel_src))
    if fetch:
        with step(f"kernel source {kernel_source.PACKAGE}"):
            return kernel_source.fetch()
    cached = kernel_source.cached_source()
    if cached is None:
        raise BwlabError("kernel source not fetched: run 'bwlab kernel fetch' or pass --kernel-src DIR")
    return cached


def _series(args: argparse.Namespace) -> kernel_build.Series:
    if args.baseline:
        return kernel_build.read_series(None)
    return kernel_build.read_series(Path(args.series) if args.series else DEFAULT_SERIES)


def _variant(
    args: argparse.Namespace, source: kernel_source.KernelSource, series: kernel_build.Series
) -> kernel_build.Variant:
    frags = kernel_build.default_fragments([Path(f) for f in args.config or []])
    return kernel_build.Variant(source, series, frags, args.hz)


def _add_variant_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kernel-src", metavar="DIR", help="use this kernel tree instead of the fetched one")
    default = DEFAULT_SERIES.relative_to(REPO_ROOT)
    p.add_argument("--series", metavar="PATH", help=f"patch series file (default {default})")
    p.add_argument("--baseline", action="store_true", help="build without any patches")
    p.add_argument("--config", metavar="FRAGMENT", action="append", help="extra kconfig fragment (repeatable)")
    p.add_argument("--hz", type=int, default=250, help="CONFIG_HZ (default 250, as on the host)")


def _load_scenario(name: str, args: argparse.Namespace) -> scenario.Scenario:
    overrides: dict[str, object] = {}
    if getattr(args, "reps", None) is not None:
        overrides["repetitions"] = args.reps
    if getattr(args, "duration", None) is not None:
        overrides["duration_s"] = args.duration
    return scenario.load(scenario.find(name), overrides)


def _default_out(tag: str) -> Path:
    return Path("results") / f"{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}-{tag}"


def cmd_kernel_fetch(args: argparse.Namespace) -> int:
    with step(f"fetch {kernel_source.PACKAGE} from {kernel_source.SUITE}"):
        src = kernel_source.fetch(force=args.force)
    print(f"{src.version} {src.origin} {src.path}")
    return 0


def _build(variant: kernel_build.Variant) -> kernel_build.KernelImage:
    cached = kernel_build.cached_image(variant)
    if cached is not None:
        console.print(f"[green]✓[/green] kernel {cached.key} (cached)")
        return cached
    desc = f"build kernel {variant.key} ({len(variant.series.patches)} patches, HZ={variant.hz})"
    with step(desc):
        return kernel_build.build(variant)


def cmd_kernel_build(args: argparse.Namespace) -> int:
    image = _build(_variant(args, _source(args, fetch=False), _series(args)))
    print(f"{image.key} {image.bzimage}")
    return 0


def cmd_kernel_git(args: argparse.Namespace) -> int:
    source = _source(args, fetch=False)
    series = _series(args)
    with step(f"git tree of {source.version} with {len(series.patches)} patches at {args.dest}"):
        base, head = kernel_build.git_tree(source, series, Path(args.dest))
    print(f"base-commit {base} (tag v{source.version})\nbwlab {head}")
    return 0


def cmd_kernel_list(args: argparse.Namespace) -> int:
    images = kernel_build.list_images()
    if not images:
        print("no kernels built (bwlab kernel build)")
    for img in images:
        patches = f"{len(img.patches)} patches" if img.patches else "baseline"
        patches += f" +{img.flavor}" if img.flavor else ""
        print(f"{img.key}  {img.release}  HZ={img.hz}  {patches}  series={img.series_digest} "
              f"config={img.config_digest}  {img.origin}  built in {img.build_seconds} s")  # fmt: skip
    return 0


def cmd_kernel_clean(args: argparse.Namespace) -> int:
    for path in kernel_build.clean(all_images=args.all):
        print(f"removed {path}")
    return 0


def cmd_scenarios(args: argparse.Namespace) -> int:
    for name in scenario.builtin_names():
        sc = scenario.load(scenario.builtin_path(name))
        print(f"{name:15} {len(sc.cases)} cases x {sc.data['repetitions']} reps  {sc.description}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    for name in args.files:
        sc = scenario.load(scenario.find(name))
        for spec in sc.resolve(args.ncpu):
            print(f"{sc.name}/{spec.case}: {spec.settings()}")
    return 0


def _sim_target(args: argparse.Namespace) -> sim.SimTarget:
    measured: dict[str, Any] = {}
    if getattr(args, "noise", None):  # its other work and timer lateness, as validate uses them
        measured = sim.machine_noise(results.load(Path(args.noise)), args.noise).target_fields(args.noise)
    if args.timer_latency:  # an explicit timerlat result's latencies win
        measured["latency_ns"] = sim.timer_latency(results.load(Path(args.timer_latency)), args.timer_latency)
        measured["latency_source"] = args.timer_latency
    return sim.SimTarget(ncpu=args.vcpus, hz=args.hz, policy=args.policy or "mainline", tick=args.tick,
                         seed=args.seed, jitter_us=args.jitter_us, **measured)  # fmt: skip


def _add_sim_args(p: argparse.ArgumentParser, hz: bool = True) -> None:
    if hz:
        p.add_argument("--hz", type=int, default=250, help="CONFIG_HZ (default 250)")
    p.add_argument("--tick", choices=sim.TICK_MODES, default="aligned",
                   help="sim: phase of the CPUs' ticks (default aligned, the kernel's skew_tick=0)")  # fmt: skip
    p.add_argument("--jitter-us", type=int, default=0, help="sim: ticks and timers run up to this late (default 0)")
    p.add_argument("--timer-latency", metavar="RESULT",
                   help="sim: a timerlat result file; ticks and timers run late by its measured latencies")  # fmt: skip
    p.add_argument("--noise", metavar="RESULT",
                   help="sim: a noise result file; every CPU carries the other work it measured, and "
                        "ticks and timers run late by its timer lateness (unless --timer-latency)")  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="sim: seed of the repetitions' phases")


def cmd_validate(args: argparse.Namespace) -> int:
    lab = Path(args.results)
    out = Path(args.out) if args.out else lab
    with console.status("simulating every lab point"):
        rows, path = simtools.validate(lab, out, args.reps, use_latency=not args.no_timer_latency,
                                       use_noise=not args.no_noise)  # fmt: skip
    table = Table(title="throttled periods %: lab vs simulator")
    for col in ("scenario", "lab target", "case", "lab", "sim", "within"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["scenario"], r["lab"], r["case"], f"{r['lab_mean']:.1f} ±{r['lab_sd']:.1f}",
                      f"{r['sim_mean']:.1f} ±{r['sim_sd']:.1f}", "yes" if r["ok"] else "NO")  # fmt: skip
    console.print(table)
    console.print(f"details: {path}")
    bad = [r for r in rows if not r["ok"]]
    if bad:
        raise BwlabError(f"{len(bad)} of {len(rows)} points outside the tolerance (see {path})")
    return 0


def _one_spec(args: argparse.Namespace, ncpu: int) -> RunSpec:
    sc = _load_scenario(args.scenario, args)
    specs = sc.resolve(ncpu)
    if args.case is None:
        limited = [s for s in specs if s.quota_us is not None]
        return (limited or specs)[-1]
    for s in specs:
        if s.case == args.case:
            return s
    raise BwlabError(f"scenario {sc.name} has no case {args.case!r} (cases: {', '.join(s.case for s in specs)})")


def cmd_sim_explain(args: argparse.Namespace) -> int:
    target = _sim_target(args)
    spec = _one_spec(args, target.ncpu)
    png = Path(args.out) if args.out else Path("results") / f"explain-{spec.scenario}-{spec.case}.png"
    lines, out = simtools.explain(spec, target, args.from_ms, args.to_ms, png)
    for line in lines:
        print(line)
    g = out["groups"][0]
    print(f"{spec.scenario}/{spec.case} ({target.label}): {g['nr_throttled']} of {g['nr_periods']} periods throttled "
          f"in {out['duration_ns'] / 1e9:g} s; plot: {png}")  # fmt: skip
    return 0


def _floats(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BwlabError(f"expected comma-separated numbers, got {text!r}") from None


def cmd_sim_sweep(args: argparse.Namespace) -> int:
    target = _sim_target(args)
    spec = _one_spec(args, target.ncpu)
    axes: dict[str, list[object]] = {}
    for name in ("period_us", "quota_cpus", "slice_us", "hz", "burst_us"):
        text = getattr(args, "hz_list" if name == "hz" else name)
        if text:
            vals = _floats(text)
            axes[name] = [v if name == "quota_cpus" else int(v) for v in vals]
    if args.policy_list:
        axes["policy"] = [p.strip() for p in args.policy_list.split(",") if p.strip()]
    if not axes:
        raise BwlabError(
            "sweep: give at least one axis (--period-us, --quota-cpus, --slice-us, --hz, --burst-us, --policies)"
        )
    with console.status(f"sweeping {spec.scenario}/{spec.case}"):
        rows = simtools.sweep(spec, target, axes, args.reps, args.jobs)
    out = Path(args.out) if args.out else Path("results") / f"sweep-{spec.scenario}.csv"
    simtools.write_csv(rows, out)
    table = Table(title=f"{spec.scenario}/{spec.case}: {args.reps} seeds per point (simulated)")
    metrics = [k for k in ("throttled_pct", "usage_per_quota", "p99_us", "wakeup_p99_us", "request_p99_us")
               if any(k in r for r in rows)]  # fmt: skip
    for col in (*axes, *metrics):
        table.add_column(col)
    for r in rows:
        cells = [str(r[a]) for a in axes]
        cells += [f"{r[m]:.3g} ±{r[m + '_sd']:.2g}" if m in r else "-" for m in metrics]
        table.add_row(*cells)
    console.print(table)
    console.print(f"csv: {out}")
    return 0


def _guest_image(args: argparse.Namespace) -> kernel_build.KernelImage:
    if args.kernel:
        for img in kernel_build.list_images():
            if img.key == args.kernel:
                return img
        raise BwlabError(f"no built kernel with key {args.kernel} (see 'bwlab kernel list')")
    variant = _variant(args, _source(args, fetch=False), _series(args))
    image = kernel_build.cached_image(variant)
    if image is None:
        raise BwlabError(f"kernel {variant.key} is not built: run 'bwlab kernel build' with the same options")
    return image


def cmd_run(args: argparse.Namespace) -> int:
    sc = _load_scenario(args.scenario, args)
    out = Path(args.out) if args.out else _default_out(sc.name)
    sim_opts = {"--tick": args.tick != "aligned", "--jitter-us": args.jitter_us != 0,
                "--timer-latency": bool(args.timer_latency), "--noise": bool(args.noise),
                "--seed": args.seed != 0}  # fmt: skip
    if args.target != "sim" and any(sim_opts.values()):
        raise BwlabError(f"{next(k for k, v in sim_opts.items() if v)} applies to --target sim only")
    if args.target == "sim":
        with console.status(f"{sc.name} in the simulator"):
            path = sim.run_scenario(sc, _sim_target(args), out)
    elif args.target == "host":
        path = runner.run_host(sc, out)
    else:
        image = _guest_image(args)
        variant = image.variant_name
        if args.policy and not image.patches:
            raise BwlabError(f"--policy {args.policy} needs a patched kernel; kernel {image.key} has no patches")
        path = runner.run_guest(sc, image, args.vcpus, out, variant, args.timeout, args.policy)
    console.print(f"result: {path}")
    report.write_report(out)
    _print_summary(out)
    return 0


def _print_summary(directory: Path) -> None:
    """One compact table per scenario: target label, case and the metrics it has."""
    docs = results.load_dir(directory)
    for sc_name in sorted({d["scenario"] for d in docs if d["cases"]}):
        rows = report.summary_rows([d for d in docs if d["scenario"] == sc_name], brief=True, short=True)
        heads = [h for _, h, _ in report.COLUMNS if h in report.CONSOLE_COLUMNS and any(h in c for *_, c in rows)]
        table = Table(title=f"{sc_name}: mean ±stdev over repetitions")
        for col in ("target", "case", *heads):
            table.add_column(col)
        for _, label, case, cells in rows:
            table.add_row(label, case, *(cells.get(h, "-") for h in heads))
        console.print(table)
    console.print(f"details: {directory / 'report.md'}")


def cmd_kselftest(args: argparse.Namespace) -> int:
    image = _guest_image(args)
    if args.tests_tree:
        test_cpu = kselftest.build_test_cpu(Path(args.tests_tree))
    else:
        with step("test_cpu from the source with the series applied"):
            test_cpu = kselftest.series_test_cpu(_source(args, fetch=False))
    out = Path(args.out) if args.out else _default_out("kselftest")
    label = runner.guest_label(image.variant_name, None, image.hz)
    with console.status(f"test_cpu in {label} ({args.vcpus} vCPUs, kernel {image.key})"):
        path, tests = kselftest.run(image, test_cpu, args.vcpus, out, label)
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


def cmd_report(args: argparse.Namespace) -> int:
    path = report.write_report(Path(args.dir))
    _print_summary(Path(args.dir))
    print(path)
    return 0


def cmd_reproduce(args: argparse.Namespace) -> int:
    start = time.monotonic()
    out = Path(args.out) if args.out else _default_out("reproduce")
    source = None if args.no_guest else _source(args, fetch=True)
    patched = bool(kernel_build.read_series(DEFAULT_SERIES).patches)
    jobs = reproduce.plan(patched, host=not args.no_host, guest=not args.no_guest, quick=args.quick)
    overrides: dict[str, object] = {}
    if args.reps is not None:
        overrides["repetitions"] = args.reps
    if args.duration is not None:
        overrides["duration_s"] = args.duration
    console.print(f"reproduce: {len(jobs)} runs into {out}")
    failures = reproduce.run(jobs, source, out, args.vcpus, overrides)
    _print_summary(out)
    console.print(f"report: {out / 'report.md'} (reproduce took {time.monotonic() - start:.0f} s)")
    if failures:
        raise BwlabError(f"{len(failures)} run(s) failed, first: {failures[0]}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="bwlab", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    kernel = sub.add_parser("kernel", help="fetch, build, list and clean kernels")
    ksub = kernel.add_subparsers(dest="kernel_command", required=True, parser_class=Parser)
    p = ksub.add_parser("fetch", help=f"download {kernel_source.PACKAGE} into the cache")
    p.add_argument("--force", action="store_true", help="download again even if cached")
    p.set_defaults(func=cmd_kernel_fetch)
    p = ksub.add_parser("build", help="build a kernel variant (cached by source, series, config)")
    _add_variant_args(p)
    p.set_defaults(func=cmd_kernel_build)
    p = ksub.add_parser("git", help="a git tree of the source (reproducible base commit) with the series applied")
    p.add_argument("dest", help="directory to create")
    p.add_argument("--kernel-src", metavar="DIR", help="use this kernel tree instead of the fetched one")
    p.add_argument("--series", metavar="PATH", help="patch series file (default kernel/patches/series)")
    p.add_argument("--baseline", action="store_true", help="no patches, only the base commit")
    p.set_defaults(func=cmd_kernel_git)
    ksub.add_parser("list", help="list built kernels").set_defaults(func=cmd_kernel_list)
    p = ksub.add_parser("clean", help="remove build trees (--all: images too)")
    p.add_argument("--all", action="store_true")
    p.set_defaults(func=cmd_kernel_clean)

    sub.add_parser("scenarios", help="list built-in scenarios").set_defaults(func=cmd_scenarios)
    p = sub.add_parser("check", help="check scenario files and show their cases")
    p.add_argument("files", nargs="+")
    p.add_argument("--ncpu", type=int, default=2, help="CPU count to resolve 'ncpu' with")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("validate", help="simulate table2, slice and rewrite-storm and compare with lab results")
    p.add_argument("--results", default="results", metavar="DIR", help="lab result files (default results/)")
    p.add_argument("--out", metavar="DIR", help="where validate.md/.json go (default: the results directory)")
    p.add_argument("--reps", type=int, default=20, help="simulated seeds per point (default 20)")
    p.add_argument("--no-timer-latency", action="store_true",
                   help="ignore timerlat results: ticks and timers exactly on time")  # fmt: skip
    p.add_argument("--no-noise", action="store_true",
                   help="ignore noise results: the groups have the CPUs to themselves")  # fmt: skip
    p.set_defaults(func=cmd_validate)

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
        _add_sim_args(p, hz=name == "explain")
        if name == "explain":
            p.add_argument("--policy", choices=policies.names(), default="mainline")
            p.add_argument("--from-ms", type=float, default=0.0)
            p.add_argument("--to-ms", type=float, default=100.0)
            p.set_defaults(func=cmd_sim_explain)
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
            p.set_defaults(func=cmd_sim_sweep, hz=250)

    p = sub.add_parser("run", help="run one scenario on the host, in a guest or in the simulator")
    p.add_argument("scenario", help="built-in scenario name or path to a .toml file")
    p.add_argument("--target", choices=("host", "guest", "sim"), default="host")
    p.add_argument("--kernel", metavar="KEY", help="guest: a built kernel by key (bwlab kernel list)")
    _add_variant_args(p)
    _add_sim_args(p, hz=False)
    p.add_argument("--vcpus", type=int, default=2)
    p.add_argument("--out", metavar="DIR")
    p.add_argument("--reps", type=int, help="override the scenario's repetitions")
    p.add_argument("--duration", type=float, help="override the scenario's duration_s")
    p.add_argument("--timeout", type=float, help="guest time limit in seconds (default: from the plan)")
    p.add_argument(
        "--policy",
        choices=policies.names(),
        help="patched guest: which of the series' sched_feat switches are on (default: all)",
    )
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("kselftest", help="run the kernel's cgroup test_cpu (with the series' tests) in a guest")
    p.add_argument("--kernel", metavar="KEY", help="a built kernel by key (bwlab kernel list)")
    _add_variant_args(p)
    p.add_argument("--tests-tree", metavar="DIR", help="kernel tree to build test_cpu from "
                   "(default: the fetched source with the series applied)")  # fmt: skip
    p.add_argument("--vcpus", type=int, default=2)
    p.add_argument("--out", metavar="DIR")
    p.add_argument("--expect-fail", action="store_true", help="exit 0 even if tests fail (baseline runs)")
    p.set_defaults(func=cmd_kselftest)

    p = sub.add_parser("report", help="write report.md and plots for a results directory")
    p.add_argument("dir")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("reproduce", help="the whole evaluation: kernels, every scenario on host and guests, report")
    p.add_argument("--out", metavar="DIR")
    p.add_argument("--kernel-src", metavar="DIR", help="use this kernel tree instead of the fetched one")
    p.add_argument("--vcpus", type=int, default=2)
    p.add_argument("--reps", type=int)
    p.add_argument("--duration", type=float)
    p.add_argument("--no-host", action="store_true")
    p.add_argument("--no-guest", action="store_true")
    p.add_argument("--quick", action="store_true",
                   help="every scenario once and short at HZ=250 (host, baseline, patched): a few minutes")  # fmt: skip
    p.set_defaults(func=cmd_reproduce)
    return parser


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _on_sigterm)
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
