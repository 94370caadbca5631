"""`bwlab reproduce`: the project's evaluation as one plan of runs, kernels built on demand.

Every run writes its result file into one directory; the report covers them all. With an
empty patch series only the lab's own runs (host and baseline guest) remain.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from dataclasses import dataclass
from pathlib import Path

from bwlab import scenario
from bwlab.analysis import report, validate
from bwlab.commands import common
from bwlab.errors import BwlabError
from bwlab.kernel import build as kernel_build
from bwlab.kernel import kselftest
from bwlab.kernel.source import KernelSource
from bwlab.paths import DEBUG_CONFIG, DEFAULT_SERIES, LOCKSTAT_CONFIG
from bwlab.progress import console, step
from bwlab.targets import sim
from bwlab.targets.host import HostTarget
from bwlab.targets.qemu import QemuTarget, guest_label

# Bandwidth policies table2 is measured under on the patched kernel (see policies.py).
TABLE2_POLICIES = ("unthrottle-retry", "clip-slice", "default-burst", "early-refill", "slush", "all")


@dataclass(frozen=True)
class Kernel:
    """Which kernel a guest run needs: patched or not, HZ, extra config fragments; `core`: the
    measurement kernel alone (core.config), not the lab kernel (the quick plan's: 179 s against
    the lab baseline's 305 s here, docs/testing.md)."""

    patched: bool
    hz: int = 250
    fragments: tuple[Path, ...] = ()
    core: bool = False

    @property
    def config(self) -> tuple[Path, ...]:
        """Every config fragment, in order."""
        fragments = kernel_build.core_fragments if self.core else kernel_build.default_fragments
        return fragments(list(self.fragments))

    @property
    def variant_name(self) -> str:
        return kernel_build.variant_name(self.patched, kernel_build.flavor_of(self.config))


@dataclass(frozen=True)
class Job:
    """One run: a scenario (or the kselftest) on the host or in a guest of a kernel."""

    what: str  # scenario name, or "kselftest"
    kernel: Kernel | None = None  # None: the host
    policy: str | None = None
    overrides: tuple[tuple[str, object], ...] = ()  # the scenario's settings trimmed (the quick plan)

    def describe(self) -> str:
        if self.kernel is None:
            return f"{self.what} on host"
        label = guest_label(self.kernel.variant_name, self.policy, self.kernel.hz)
        return f"{self.what} in {label}"


# The quick plan (the default; --full is the whole evaluation): one repetition of every
# scenario, 2 s per case (a first complete report in about 3 minutes with kernels cached, not
# the published numbers: a 100 ms period gets 20 periods); burst's latency tail needs some 150
# requests (6 s), hierarchy is loop-bounded (its duration_s is only a time-out).
QUICK_DEFAULT: dict[str, object] = {"repetitions": 1, "duration_s": 2}
QUICK_OVERRIDES: dict[str, dict[str, object]] = {
    # the in-run noise probe (for validate) 1 s before and after the cases instead of 3
    "table2": {**QUICK_DEFAULT, "probe.noise_s": 1},
    "rewrite-storm": {**QUICK_DEFAULT, "probe.noise_s": 1},
    "burst": {"repetitions": 1, "duration_s": 6},
    "hierarchy": {"repetitions": 1, "workload.loops": 200},
    # the densest, most loaded point only
    "colocation": {
        "repetitions": 1,
        "duration_s": 6,
        "matrix.workload.functions": ["ncpu*8"],
        "matrix.workload.load": [1.2],
    },
}
# Kernels without the LAGS patches run colocation with every group at 0 (the file is absent).
LAGS_OFF: tuple[tuple[str, object], ...] = (("matrix.workload.latency_awareness", [0]),)


def _quick(jobs: list[Job]) -> list[Job]:
    return [Job(j.what, j.kernel, j.policy, tuple(QUICK_OVERRIDES.get(j.what, QUICK_DEFAULT).items()) + j.overrides)
            for j in jobs]  # fmt: skip


def _colocation(kernel: Kernel | None) -> Job:
    """colocation on the host or a kernel: LAGS on and off with the series, off without it."""
    return Job("colocation", kernel, "all" if kernel and kernel.patched else None,
               () if kernel and kernel.patched else LAGS_OFF)  # fmt: skip


def plan(patched: bool, host: bool, guest: bool, quick: bool) -> list[Job]:
    """The evaluation: lab scenarios on host and baseline guest, the series' scenarios on
    baseline and patched guests (HZ=250 and 1000), overhead on lock-statistics kernels,
    stress on a debug kernel. `quick`: every scenario family once, short, at HZ=250 on host,
    baseline and patched (all) guests, without the kselftest, overhead, stress and HZ=1000."""
    if quick:
        lab = ["timerlat", "noise", "table2", "rewrite-storm", "cglat", "burst", "hierarchy"]
        jobs = [Job(w) for w in lab] if host else []
        if guest:  # the measurement kernels (core.config): none of the lab config's extras is used
            base, patch = Kernel(False, core=True), Kernel(True, core=True)
            jobs += [Job(w, base) for w in lab] + [_colocation(base)]
            if patched:
                jobs += [Job(w, patch, "all") for w in ("table2", "rewrite-storm", "burst", "hierarchy")]
                jobs.append(_colocation(patch))
        return _quick(jobs)
    base, patch = Kernel(False), Kernel(True)
    jobs = []
    # timerlat and noise: the machine's timer latency under load and the other work on its
    # CPUs, which the simulator replays (validate); measured right before what they explain
    lab = ["timerlat", "noise", "table2", "rewrite-storm", "cglat", "slice", "burst", "hierarchy"]
    if host:
        jobs += [Job(w) for w in lab] + [_colocation(None)]
    if not guest:
        return jobs
    jobs += [Job(w, base) for w in lab] + [_colocation(base)]
    if not patched:
        return jobs
    jobs += [Job("table2", patch, p) for p in TABLE2_POLICIES]
    jobs += [Job("rewrite-storm", patch, "all"), Job("kselftest", base), Job("kselftest", patch)]
    jobs += [Job("rewrite-storm", patch, "noop-update"), Job("cglat", patch, "all"), Job("burst", patch, "all"),
             Job("hierarchy", patch, "all"), _colocation(patch)]  # fmt: skip
    base1000, patch1000 = Kernel(False, 1000), Kernel(True, 1000)
    jobs += [Job("timerlat", base1000), Job("noise", base1000), Job("table2", base1000),
             Job("table2", patch1000, "slush"), Job("table2", patch1000, "all"),
             Job("kselftest", base1000), Job("kselftest", patch1000)]  # fmt: skip
    lockstat = (LOCKSTAT_CONFIG,)
    jobs += [Job("overhead", Kernel(False, 250, lockstat)), Job("overhead", Kernel(True, 250, lockstat), "all"),
             Job("overhead", base), Job("overhead", patch, "all")]  # fmt: skip
    jobs.append(Job("stress", Kernel(True, 250, (DEBUG_CONFIG,)), "all"))
    return jobs


def _build(
    source: KernelSource, kernel: Kernel, cache: dict[Kernel, kernel_build.KernelImage]
) -> kernel_build.KernelImage:
    if kernel not in cache:
        series = kernel_build.read_series(DEFAULT_SERIES if kernel.patched else None)
        variant = kernel_build.Variant(source, series, kernel.config, kernel.hz)
        image = kernel_build.cached_image(variant)
        if image is None:
            with step(f"build kernel {variant.key} ({kernel.variant_name}, HZ={kernel.hz})"):
                image = kernel_build.build(variant)
        cache[kernel] = image
    return cache[kernel]


def batches(jobs: list[Job], one_boot: bool) -> list[list[Job]]:
    """The jobs in the order given, as runs: with `one_boot`, consecutive scenarios in a guest of
    the same kernel and policy share one boot (the quick plan: ~3 s saved per boot under TCG)."""
    out: list[list[Job]] = []
    for job in jobs:
        last = out[-1][-1] if out else None
        if (one_boot and last is not None and job.kernel is not None and job.what != "kselftest"
                and last.what != "kselftest" and (last.kernel, last.policy) == (job.kernel, job.policy)):  # fmt: skip
            out[-1].append(job)
        else:
            out.append([job])
    return out


def _describe(batch: list[Job]) -> str:
    if len(batch) == 1:
        return batch[0].describe()
    label = batch[0].describe().split(" in ", 1)[1]
    return f"{', '.join(j.what for j in batch)} in {label} (one boot)"


def run(jobs: list[Job], source: KernelSource | None, out: Path, vcpus: int,
        overrides: dict[str, object], accel: str = "auto", one_boot: bool = False) -> list[str]:  # fmt: skip
    """Run every job (a failure is recorded and the rest go on); return the failures."""
    images: dict[Kernel, kernel_build.KernelImage] = {}
    failures: list[str] = []
    test_cpu: Path | None = None
    for batch in batches(jobs, one_boot):
        start = time.monotonic()
        job = batch[0]
        try:
            with step(_describe(batch)):
                if job.kernel is None:
                    HostTarget().run(_load(job, overrides), out)
                    continue
                if source is None:
                    raise BwlabError("guest runs need the kernel source")
                image = _build(source, job.kernel, images)
                if job.what == "kselftest":
                    if test_cpu is None:
                        test_cpu = kselftest.series_test_cpu(source)
                    QemuTarget(image, vcpus, accel=accel).run_kselftest(test_cpu, out)
                else:
                    QemuTarget(image, vcpus, job.policy, accel=accel).run_all([_load(j, overrides) for j in batch], out)
        except BwlabError as exc:
            failures.append(f"{_describe(batch)}: {exc}")
            console.print(f"[red]{_describe(batch)} failed after {time.monotonic() - start:.0f} s:[/red] {exc}")
    try:
        simulate_and_validate(out)
    except BwlabError as exc:
        failures.append(f"simulator: {exc}")
        console.print(f"[red]simulator failed:[/red] {exc}")
    try:
        report.write_report(out)
    except BwlabError as exc:
        failures.append(f"report: {exc}")
    return failures


def _load(job: Job, overrides: dict[str, object]) -> scenario.Scenario:
    """The job's scenario with its own trimmed settings; the command line's --reps/--duration win."""
    return scenario.load(scenario.find(job.what), {**dict(job.overrides), **overrides})


SIM_POLICIES = ("mainline", "slush", "all")


def simulate_and_validate(out: Path) -> None:
    """The validated scenarios in the simulator (each policy), then every lab point of them
    against the model: validate.md. A mismatch is reported, not a failure of the run."""
    with step("simulator: table2, slice, rewrite-storm x mainline/slush/all; validate against the lab"):
        for name in validate.VALIDATED:
            for policy in SIM_POLICIES:
                sim.SimTarget(policy=policy).run(scenario.load(scenario.find(name)), out)
        try:
            rows, path = validate.validate(out, out)
        except BwlabError as exc:
            console.print(f"validate: {exc}")
            return
        console.print(f"validate: {sum(r['ok'] for r in rows)} of {len(rows)} lab points within tolerance ({path})")


def cmd_reproduce(args: argparse.Namespace) -> int:
    if args.full and args.quick:
        raise BwlabError("--full and --quick: choose one (without --full the run is the quick one)")
    start = time.monotonic()
    out = Path(args.out) if args.out else common.default_out("reproduce")
    source = None if args.no_guest else common.kernel_source_of(args, fetch=True)
    patched = bool(kernel_build.read_series(DEFAULT_SERIES).patches)
    jobs = plan(patched, host=not args.no_host, guest=not args.no_guest, quick=not args.full)
    console.print(f"reproduce: {len(jobs)} runs into {out}")
    failures = run(jobs, source, out, args.vcpus, common.overrides(args), args.accel, one_boot=not args.full)
    with contextlib.suppress(BwlabError):  # nothing to summarize when every run failed
        common.print_summary(out)
    console.print(f"report: {out / 'report.md'} (reproduce took {time.monotonic() - start:.0f} s)")
    if failures:
        for failure in failures:
            console.print(f"[red]failed[/red]: {failure}")
        raise BwlabError(f"{len(failures)} of {len(jobs)} run(s) failed, first: {failures[0]}")
    return 0
