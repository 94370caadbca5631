"""`bwlab validate`: every lab point of the validated scenarios against the simulator, with
the lab machine's measured timer lateness and other work replayed."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from pathlib import Path
from typing import Any

from bwlab import results, scenario
from bwlab.errors import BwlabError
from bwlab.kernel import policies
from bwlab.results import Case, Rep, Result
from bwlab.stats import mean_sd
from bwlab.targets import sim

VALIDATED = ("table2", "slice", "rewrite-storm")


def within(lab: float, model: float) -> bool:
    """The issue's tolerance: +/-20 % relative, or +/-3 points where the lab ratio is < 15 %."""
    if lab < 15.0:
        return abs(model - lab) <= 3.0
    return abs(model - lab) <= 0.2 * lab


def diff_se(lab: list[float], model: list[float]) -> float:
    """Standard error of the difference of the two means (sample variances): how far apart
    they may be by chance alone, given the lab's few repetitions and the seeds' spread."""
    if len(lab) < 2 or len(model) < 2:
        return float("nan")
    return math.sqrt(statistics.variance(lab) / len(lab) + statistics.variance(model) / len(model))


def _throttled(reps: list[Rep]) -> list[float]:
    return [float(v) for r in reps if (v := r.metrics.get("throttled_pct")) is not None]


def measured_for(doc: Result, measured: list[Result]) -> Result | None:
    """The timerlat (or noise) result measured on the same machine as a lab result: same target
    and HZ (the label without the policy: a patched guest's timers run as late as the baseline's).
    Several (e.g. one per boot: a TCG guest's timer lateness differs from boot to boot) are
    pooled into one, their repetitions side by side."""
    meta = doc.meta
    same = [t for t in measured if t.meta.target == meta.target and t.meta.hz == meta.hz]
    exact = [t for t in same if t.meta.label == meta.label]
    found = exact or same
    if len(found) <= 1:
        return found[0] if found else None
    label = found[0].meta.label
    found = [t for t in found if t.meta.label == label]
    if len(found) == 1:
        return found[0]
    cases = [case for t in found for case in t.cases]
    return dataclasses.replace(found[0], meta=dataclasses.replace(found[0].meta, label=f"{label} x{len(found)}"),
                               cases=cases)  # fmt: skip


def in_run_noise(doc: Result) -> Result | None:
    """The noise probes a lab run made in its own boot (meta["noise"]: a list, before and after
    the cases; a single one in results of 2026-11-21), as one noise result."""
    probes = doc.meta.get("noise")
    probes = [probes] if isinstance(probes, dict) else probes or []
    reps = [Rep(rep=i, metrics=p["metrics"], raw={"stdout": p["stdout"]}) for i, p in enumerate(probes)
            if "metrics" in p]  # fmt: skip
    if not reps:
        return None
    return Result(scenario="noise", status="ok", meta=dataclasses.replace(doc.meta, label="in-run"),
                  cases=[Case(case="probe", reps=reps)])  # fmt: skip


def lab_target(doc: Result, timerlat: Result | None, noise: Result | None = None) -> sim.SimTarget:
    """The simulated machine matching a lab result file's machine and kernel policy, with its
    measured timer latencies and other work when there are timerlat and noise results."""
    meta = doc.meta
    policy = meta.policy or "mainline"
    if policy not in policies.POLICIES:
        raise BwlabError(f"{meta.label}: policy {policy!r} unknown to the simulator")
    measured: dict[str, Any] = {}
    if noise is not None:
        # the noise probe's timer interrupts, on a busy CPU, are the better measure: timerlat's
        # sleeper also waits for whatever else runs on its CPU when it wakes
        name = f"noise-{noise.meta.label}"
        measured = sim.machine_noise(noise, name).target_fields(name)
    elif timerlat is not None:
        name = f"timerlat-{timerlat.meta.label}"
        measured = {"latency_ns": sim.timer_latency(timerlat, name), "latency_source": name}
    return sim.SimTarget(ncpu=meta.vcpus or 2, hz=meta.hz or 250, policy=policy,
                         **measured)  # fmt: skip


def validate(lab_dir: Path, out_dir: Path, reps: int = 20, use_latency: bool = True,
             use_noise: bool = True) -> tuple[list[dict[str, Any]], Path]:  # fmt: skip
    """Every lab result of the validated scenarios against the simulator; rows + report path.

    Measured on the same machine: the CPUs carry the other work of the noise probe the lab
    run made in its own boot (meta["noise"]), or else of a `noise` result in the directory,
    if `use_noise`; ticks and timers are delayed by its timer interrupt lateness, or else by
    a `timerlat` result's, if `use_latency`."""
    all_docs = results.load_dir(lab_dir)
    docs = [d for d in all_docs if d.scenario in VALIDATED and d.meta.target in ("host", "guest")]
    timerlats = [d for d in all_docs if d.scenario == "timerlat"]
    noises = [d for d in all_docs if d.scenario == "noise" and use_noise]
    if not docs:
        raise BwlabError(f"{lab_dir}: no host or guest results of {', '.join(VALIDATED)} to validate against")
    rows: list[dict[str, Any]] = []
    for doc in docs:
        # the noise probe of the lab run's own boot, else one of the same machine
        noise = (in_run_noise(doc) if use_noise else None) or measured_for(doc, noises)
        target = lab_target(doc, measured_for(doc, timerlats), noise)
        if not use_latency:
            target = dataclasses.replace(target, latency_ns=(), latency_source="")
        sc = scenario.load(scenario.find(doc.scenario), {"repetitions": reps})
        specs = {s.case: s for s in sc.resolve(target.ncpu, target.hz)}
        wanted = [c for c in doc.cases if c.case in specs and _throttled(c.reps)]
        sims = sim.run_specs([specs[c.case] for c in wanted], target)
        for case, outs in zip(wanted, sims, strict=True):
            spec = specs[case.case]
            lab_v = _throttled(case.reps)
            sim_v = [sim.rep_metrics(spec, o)[0]["throttled_pct"] or 0.0 for o in outs]
            (lab_m, lab_sd), (sim_m, sim_sd) = mean_sd(lab_v), mean_sd(sim_v)
            if spec.quota_us is None:
                continue
            rows.append({"scenario": doc.scenario, "lab": doc.meta.label, "case": case.case,
                         "policy": target.policy, "hz": target.hz, "timer_latency": target.latency_source or "none",
                         "other_work": target.other_source or "none",
                         "lab_mean": lab_m, "lab_sd": lab_sd, "lab_reps": len(lab_v),
                         "sim_mean": sim_m, "sim_sd": sim_sd, "sim_reps": len(outs),
                         "diff_se": diff_se(lab_v, sim_v), "ok": within(lab_m, sim_m)})  # fmt: skip
    out_dir.mkdir(parents=True, exist_ok=True)
    # JSON lines, not *.json: a results directory's *.json are result files (results.load_dir)
    (out_dir / "validate.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = ["# Simulator vs lab: throttled periods (%)", "",
             f"Lab results from `{lab_dir}`; simulator: {reps} seeds per point (period-timer and tick phases",
             "drawn per seed). Measured on the same machine: ticks and timers late by the timer",
             "interrupt lateness of a busy CPU (`noise-in-run`: the noise probe the lab run made in its",
             "own boot; `noise-LABEL`: noise results of that machine; else a `timerlat` sleeper's; none:",
             "on time); the CPUs carry the other work the noise probe measured (the share of a busy CPU",
             "its threads were not charged for, replayed as bursts of the measured sizes; none: the",
             "group has the CPUs to itself).",
             "Tolerance: +/-20 % relative, +/-3 points where the lab mean is below 15 %.",
             "diff/se: the difference of the means in standard errors of that difference (lab and seeds'",
             "sample variances); below 2, the lab's repetitions cannot tell the model from the kernel.", "",
             "| scenario | lab target | case | lab mean ±sd (n) | sim mean ±sd (n) | within | diff/se "
             "| timer latency | other work |",
             "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        lines.append(f"| {r['scenario']} | {r['lab']} | {r['case']} | {r['lab_mean']:.1f} ±{r['lab_sd']:.1f} "
                     f"({r['lab_reps']}) | {r['sim_mean']:.1f} ±{r['sim_sd']:.1f} ({r['sim_reps']}) | "
                     f"{'yes' if r['ok'] else '**no**'} | {_z(r)} | {r['timer_latency']} "
                     f"| {r['other_work']} |")  # fmt: skip
    ok = sum(r["ok"] for r in rows)
    chance = sum(not r["ok"] and abs(r["sim_mean"] - r["lab_mean"]) < 2 * r["diff_se"] for r in rows)
    lines += ["", f"{ok} of {len(rows)} points within tolerance; of the other {len(rows) - ok}, "
              f"{chance} within two standard errors."]  # fmt: skip
    path = out_dir / "validate.md"
    path.write_text("\n".join(lines) + "\n")
    return rows, path


def _z(row: dict[str, Any]) -> str:
    diff, se = abs(row["sim_mean"] - row["lab_mean"]), row["diff_se"]
    if math.isnan(se):
        return "-"
    return "0.0" if diff == 0 else ("inf" if se == 0 else f"{diff / se:.1f}")
