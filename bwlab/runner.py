"""Run a scenario on a target (host kernel or guest kernel) and write its result file."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from bwlab import cgroup, guest, host, policies, results
from bwlab.errors import BwlabError
from bwlab.kernel_build import KernelImage
from bwlab.metrics import RawRep, parse_noise, rep_metrics, stdout_without_samples
from bwlab.progress import console
from bwlab.scenario import RunSpec, Scenario, noise_seconds


def _case_docs(specs: list[RunSpec], raws: dict[tuple[int, int], RawRep]) -> list[dict[str, Any]]:
    cases = []
    for ci, spec in enumerate(specs):
        reps = []
        for rep in range(spec.repetitions):
            raw = raws.get((ci, rep))
            if raw is None:
                reps.append({"rep": rep, "error": "no record (run incomplete)"})
                continue
            try:
                metrics, samples = rep_metrics(spec, raw)
                entry: dict[str, Any] = {"rep": rep, "metrics": metrics}
            except BwlabError as exc:
                entry, samples = {"rep": rep, "error": str(exc)}, []
            if samples:
                entry["samples_us"] = samples
            raw_doc = raw.to_json()
            if samples:
                raw_doc["stdout"] = stdout_without_samples(raw_doc.get("stdout", ""))
            entry["raw"] = raw_doc
            reps.append(entry)
        cases.append({"case": spec.case, "params": spec.params, "settings": spec.settings(), "reps": reps})
    return cases


def machine_noise(outputs: list[str]) -> list[dict[str, Any]]:
    """The noise probes run before and after the cases (RunSpec.noise_s), for the result's
    meta: each one's output, kept whole for the simulator (bwlab validate), and its metrics,
    or why it has none."""
    probes: list[dict[str, Any]] = []
    for stdout in outputs:
        try:
            probes.append({"metrics": parse_noise(stdout), "stdout": stdout})
        except BwlabError as exc:
            probes.append({"error": str(exc), "stdout": stdout[-2000:]})
    return probes


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=console, transient=True)  # fmt: skip


def _check_reps(doc: dict[str, Any], where: str) -> None:
    errors = [r["error"] for c in doc["cases"] for r in c["reps"] if "error" in r]
    if errors:
        raise BwlabError(f"{where}: {len(errors)} repetition(s) failed, first: {errors[0]}")


def run_host(sc: Scenario, out_dir: Path) -> Path:
    """All cases on the running kernel, one fresh cgroup per repetition."""
    if os.geteuid() != 0:
        raise BwlabError("the host target needs root (it creates cgroups)")
    hier = cgroup.detect()
    ncpu = len(os.sched_getaffinity(0))
    specs = sc.resolve(ncpu)
    for spec in specs:
        spec.workload.require_real()
    raws: dict[tuple[int, int], RawRep] = {}
    total = sum(s.repetitions for s in specs)
    noise_s = noise_seconds(specs)
    outputs: list[str] = []

    def probe() -> None:
        if noise_s:
            with console.status(f"noise probe, {noise_s} s"):
                outputs.append(host.run_noise(noise_s, ncpu))

    probe()
    with _progress() as progress:
        task = progress.add_task(f"{sc.name} on host", total=total)
        for ci, spec in enumerate(specs):
            for rep in range(spec.repetitions):
                progress.update(task, description=f"{sc.name} host {spec.case} rep {rep + 1}")
                raws[(ci, rep)] = host.run_rep(hier, spec, rep)
                progress.advance(task)
    probe()
    meta = results.base_meta("host", "host")
    slice_file = cgroup.sysctl_path("kernel.sched_cfs_bandwidth_slice_us")
    meta.update({
        "kernel_release": platform.release(),
        "source_version": platform.release().split("-")[0],
        "series_hash": None,
        "config_hash": None,
        "hz": host.kernel_hz(),
        "vcpus": ncpu,
        "slice_us": int(slice_file.read_text()) if slice_file.is_file() else None,
        "cgroup": hier.describe(),
    })  # fmt: skip
    if outputs:
        meta["noise"] = machine_noise(outputs)
    doc = {"schema": results.SCHEMA, "scenario": sc.name, "description": sc.description,
           "status": "ok", "meta": meta, "cases": _case_docs(specs, raws)}  # fmt: skip
    path = results.write(out_dir / f"{sc.name}-host.json", doc)
    _check_reps(doc, str(path))
    return path


def guest_timeout(specs: list[RunSpec]) -> float:
    """Boot, per-repetition setup under emulation, and 1.5x the nominal workload time."""
    reps = sum(s.repetitions for s in specs)
    work = sum(s.duration_s * s.repetitions for s in specs) + 2 * noise_seconds(specs)
    return 120.0 + 1.5 * work + 15.0 * reps


def guest_label(variant: str, policy: str | None, hz: int = 250) -> str:
    """'guest-baseline', 'guest-patched-slush', 'guest-patched-all-hz1000'."""
    label = f"guest-{variant}" + (f"-{policy}" if policy else "")
    return label + (f"-hz{hz}" if hz != 250 else "")


def run_guest(sc: Scenario, image: KernelImage, vcpus: int, out_dir: Path, variant: str,
              timeout_s: float | None = None, policy: str | None = None) -> Path:  # fmt: skip
    """All cases in one boot of a vcpus-CPU guest running the given kernel.

    `policy` (patched kernels) selects the series' sched_feat switches, see policies.py."""
    specs = sc.resolve(vcpus)
    for spec in specs:
        spec.workload.require_real()
    label = guest_label(variant, policy, image.hz)
    features = policies.feature_writes(policy) if policy else None
    limit = timeout_s if timeout_s is not None else guest_timeout(specs)
    with console.status(f"{sc.name} in {label} ({vcpus} vCPUs, kernel {image.key}, limit {limit:.0f} s)"):
        run = guest.run(image, specs, vcpus, out_dir / "logs", f"{sc.name}-{label}", limit, features)
    if guest.fifo_requested() and not run.timer_thread.startswith("SCHED_FIFO"):
        console.print(f"[yellow]note[/yellow]: QEMU's timer thread ran at {run.timer_thread}")
    meta = results.base_meta("guest", label)
    meta.update({
        "policy": policy,
        "sched_features": policies.parse_features(run.output.features),
        "kernel_release": run.output.hello.get("release"),
        "kernel_key": image.key,
        "source_version": image.version,
        "source_origin": image.origin,
        "series_hash": image.series_digest,
        "patches": list(image.patches),
        "config_hash": image.config_digest,
        "hz": image.hz,
        "vcpus": vcpus,
        "guest_ncpu": int(run.output.hello["ncpu"]) if "ncpu" in run.output.hello else None,
        "slice_us": int(run.output.hello["slice_us"]) if "slice_us" in run.output.hello else None,
        "cgroup": "cgroup v2 at /sys/fs/cgroup (guest)",
        "console_log": str(run.console),
        "splats": run.splats[:20],
        "elapsed_s": round(run.elapsed_s, 1),
        "qemu_timer_thread": run.timer_thread,
    })  # fmt: skip
    if run.output.noise:
        meta["noise"] = machine_noise(run.output.noise)
    doc = {"schema": results.SCHEMA, "scenario": sc.name, "description": sc.description,
           "status": run.status, "meta": meta, "cases": _case_docs(specs, run.output.records)}  # fmt: skip
    path = results.write(out_dir / f"{sc.name}-{label}.json", doc)
    if run.status == "timeout":
        raise BwlabError(f"guest timed out after {limit:.0f} s and was killed; console: {run.console}")
    if run.status != "ok":
        why = (run.splats[:1] or run.output.errors[:1] or ["results incomplete (no BWLAB-DONE)"])[0]
        raise BwlabError(f"guest run failed: {why}; console: {run.console}")
    if meta["guest_ncpu"] != vcpus:
        raise BwlabError(f"guest saw {meta['guest_ncpu']} CPUs, expected {vcpus}; console: {run.console}")
    _check_reps(doc, str(path))
    return path
