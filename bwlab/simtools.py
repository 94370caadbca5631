"""What the simulator is for beyond single runs: validation against lab results, sweeps over
the bandwidth parameters, and a Fig. 4-style explanation of a short window."""

from __future__ import annotations

import csv
import dataclasses
import itertools
import json
import math
import statistics
from pathlib import Path
from typing import Any

from bwlab import policies, results, scenario, sim
from bwlab.errors import BwlabError
from bwlab.scenario import RunSpec

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


def _mean_sd(values: list[float]) -> tuple[float, float]:
    if not values:
        return float("nan"), float("nan")
    return statistics.fmean(values), statistics.pstdev(values) if len(values) > 1 else 0.0


def _throttled(reps: list[dict[str, Any]]) -> list[float]:
    return [float(r["metrics"]["throttled_pct"]) for r in reps
            if "metrics" in r and r["metrics"].get("throttled_pct") is not None]  # fmt: skip


def measured_for(doc: dict[str, Any], measured: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The timerlat (or noise) result measured on the same machine as a lab result: same target
    and HZ (the label without the policy: a patched guest's timers run as late as the baseline's).
    Several (e.g. one per boot: a TCG guest's timer lateness differs from boot to boot) are
    pooled into one, their repetitions side by side."""
    meta = doc["meta"]
    same = [t for t in measured
            if t["meta"].get("target") == meta.get("target") and t["meta"].get("hz") == meta.get("hz")]  # fmt: skip
    exact = [t for t in same if t["meta"].get("label") == meta.get("label")]
    found = exact or same
    if len(found) <= 1:
        return found[0] if found else None
    label = found[0]["meta"]["label"]
    found = [t for t in found if t["meta"].get("label") == label]
    if len(found) == 1:
        return found[0]
    cases = [case for t in found for case in t["cases"]]
    return {**found[0], "meta": {**found[0]["meta"], "label": f"{label} x{len(found)}"}, "cases": cases}


def in_run_noise(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The noise probes a lab run made in its own boot (meta["noise"]: a list, before and after
    the cases; a single one in results of 2026-11-21), as one noise result."""
    probes = doc["meta"].get("noise")
    probes = [probes] if isinstance(probes, dict) else probes or []
    reps = [{"rep": i, "metrics": p["metrics"], "raw": {"stdout": p["stdout"]}}
            for i, p in enumerate(probes) if "metrics" in p]  # fmt: skip
    if not reps:
        return None
    return {"scenario": "noise", "meta": {**doc["meta"], "label": "in-run"},
            "cases": [{"case": "probe", "reps": reps}]}  # fmt: skip


def lab_target(doc: dict[str, Any], timerlat: dict[str, Any] | None,
               noise: dict[str, Any] | None = None) -> sim.SimTarget:  # fmt: skip
    """The simulated machine matching a lab result file's machine and kernel policy, with its
    measured timer latencies and other work when there are timerlat and noise results."""
    meta = doc["meta"]
    policy = meta.get("policy") or "mainline"
    if policy not in policies.POLICIES:
        raise BwlabError(f"{meta.get('label')}: policy {policy!r} unknown to the simulator")
    measured: dict[str, Any] = {}
    if noise is not None:
        # the noise probe's timer interrupts, on a busy CPU, are the better measure: timerlat's
        # sleeper also waits for whatever else runs on its CPU when it wakes
        name = f"noise-{noise['meta']['label']}"
        measured = sim.machine_noise(noise, name).target_fields(name)
    elif timerlat is not None:
        name = f"timerlat-{timerlat['meta']['label']}"
        measured = {"latency_ns": sim.timer_latency(timerlat, name), "latency_source": name}
    return sim.SimTarget(ncpu=int(meta.get("vcpus") or 2), hz=int(meta.get("hz") or 250), policy=policy,
                         **measured)  # fmt: skip


def validate(lab_dir: Path, out_dir: Path, reps: int = 20, use_latency: bool = True,
             use_noise: bool = True) -> tuple[list[dict[str, Any]], Path]:  # fmt: skip
    """Every lab result of the validated scenarios against the simulator; rows + report path.

    Measured on the same machine: the CPUs carry the other work of the noise probe the lab
    run made in its own boot (meta["noise"]), or else of a `noise` result in the directory,
    if `use_noise`; ticks and timers are delayed by its timer interrupt lateness, or else by
    a `timerlat` result's, if `use_latency`."""
    all_docs = results.load_dir(lab_dir)
    docs = [d for d in all_docs
            if d["scenario"] in VALIDATED and d["meta"].get("target") in ("host", "guest")]  # fmt: skip
    timerlats = [d for d in all_docs if d["scenario"] == "timerlat"]
    noises = [d for d in all_docs if d["scenario"] == "noise" and use_noise]
    if not docs:
        raise BwlabError(f"{lab_dir}: no host or guest results of {', '.join(VALIDATED)} to validate against")
    rows: list[dict[str, Any]] = []
    for doc in docs:
        # the noise probe of the lab run's own boot, else one of the same machine
        noise = (in_run_noise(doc) if use_noise else None) or measured_for(doc, noises)
        target = lab_target(doc, measured_for(doc, timerlats), noise)
        if not use_latency:
            target = dataclasses.replace(target, latency_ns=(), latency_source="")
        sc = scenario.load(scenario.find(doc["scenario"]), {"repetitions": reps})
        specs = {s.case: s for s in sc.resolve(target.ncpu)}
        wanted = [c for c in doc["cases"] if c["case"] in specs and _throttled(c["reps"])]
        sims = sim.run_specs([specs[c["case"]] for c in wanted], target)
        for case, outs in zip(wanted, sims, strict=True):
            spec = specs[case["case"]]
            lab_v = _throttled(case["reps"])
            sim_v = [sim.rep_metrics(spec, o)[0]["throttled_pct"] or 0.0 for o in outs]
            (lab_m, lab_sd), (sim_m, sim_sd) = _mean_sd(lab_v), _mean_sd(sim_v)
            if spec.quota_us is None:
                continue
            rows.append({"scenario": doc["scenario"], "lab": doc["meta"]["label"], "case": case["case"],
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


# ---- sweeps ------------------------------------------------------------------------------

SWEEP_AXES = ("period_us", "quota_cpus", "slice_us", "hz", "burst_us", "policy")


def sweep(spec: RunSpec, base: sim.SimTarget, axes: dict[str, list[Any]], reps: int,
          jobs: int | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """Every combination of the axes' values, `reps` seeds each, all in parallel."""
    for name in axes:
        if name not in SWEEP_AXES:
            raise BwlabError(f"sweep: unknown axis {name!r} (known: {', '.join(SWEEP_AXES)})")
    names = list(axes)
    combos = list(itertools.product(*(axes[n] for n in names)))
    configs, points = [], []
    for combo in combos:
        point = dict(zip(names, combo, strict=True))
        period = int(point.get("period_us", spec.period_us))
        quota = spec.quota_us
        if "quota_cpus" in point:
            quota = round(float(point["quota_cpus"]) * period)
        elif quota is not None and spec.quota_us is not None:
            quota = round(spec.quota_us / spec.period_us * period)
        sysctls = dict(spec.sysctls)
        if "slice_us" in point:
            sysctls[sim.SLICE_SYSCTL] = str(int(point["slice_us"]))
        burst = int(point.get("burst_us", spec.burst_us))
        if quota is not None and quota < 1000:
            raise BwlabError(f"sweep: quota {quota} us at period {period} us is below 1 ms")
        if burst and (quota is None or burst > quota):
            raise BwlabError(f"sweep: burst {burst} us needs a quota of at least as much (quota {quota} us)")
        s = dataclasses.replace(
            spec, period_us=period, quota_us=quota, burst_us=burst, sysctls=sysctls, repetitions=reps
        )
        # replace() runs SimTarget's checks on the new HZ and policy
        t = dataclasses.replace(base, hz=int(point.get("hz", base.hz)), policy=str(point.get("policy", base.policy)))
        for rep in range(reps):
            configs.append(sim.config(s, t, rep, samples=True))
        points.append((point, s))
    outs = sim.simulate_many(configs, jobs)
    rows = []
    for i, (point, s) in enumerate(points):
        ms = [sim.rep_metrics(s, o)[0] for o in outs[i * reps : (i + 1) * reps]]
        row: dict[str, Any] = dict(point)
        for key in ("throttled_pct", "throttled_time_pct", "usage_per_quota", "p99_us", "wakeup_p99_us",
                    "request_p99_us", "nr_bursts"):  # fmt: skip
            vals = [float(v) for m in ms if (v := m.get(key)) is not None]
            if vals:
                row[key], row[f"{key}_sd"] = _mean_sd(vals)
        rows.append(row)
    return rows


def write_csv(rows: list[dict[str, Any]], path: Path) -> Path:
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    return path


# ---- explain -----------------------------------------------------------------------------


def explain(spec: RunSpec, target: sim.SimTarget, from_ms: float, to_ms: float,
            png: Path | None) -> tuple[list[str], dict[str, Any]]:  # fmt: skip
    """The accounting events of one repetition in [from_ms, to_ms]: text lines and the output."""
    if not 0 <= from_ms < to_ms:
        raise BwlabError(f"explain: need 0 <= --from-ms < --to-ms, got {from_ms} .. {to_ms}")
    if to_ms - from_ms > 10_000:
        raise BwlabError("explain: a window of at most 10 s (it lists every tick)")
    cfg = sim.config(spec, dataclasses.replace(target), 0, periods=True, events=(from_ms, to_ms))
    cfg["duration_ns"] = max(cfg["duration_ns"], round(to_ms * 1e6) + 1)
    out = sim.simulate_many([cfg], 1)[0]
    ms = 1e6
    lines = [f"{'t ms':>9} {'cpu':>4} {'event':11} {'amount':>9} {'local':>9} {'pool':>9}   (ms)"]
    for e in out["events"]:
        if e["group"] != 0:
            continue
        cpu = "-" if e["cpu"] < 0 else str(e["cpu"])
        local = "" if e["cpu"] < 0 else f"{e['local_ns'] / ms:9.3f}"
        amount = "" if e["kind"] == "tick" else f"{e['amount_ns'] / ms:9.3f}"
        lines.append(f"{e['t_ns'] / ms:9.3f} {cpu:>4} {e['kind']:11} {amount:>9} {local:>9} {e['pool_ns'] / ms:9.3f}")
    if png is not None:
        plot_explain(out, spec, target, from_ms, to_ms, png)
    return lines, out


def plot_explain(out: dict[str, Any], spec: RunSpec, target: sim.SimTarget, from_ms: float, to_ms: float,
                 png: Path) -> Path:  # fmt: skip
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    events = [e for e in out["events"] if e["group"] == 0]
    ncpu = spec.ncpu
    fig, axes = plt.subplots(ncpu + 1, 1, figsize=(11, 1.9 * (ncpu + 1)), sharex=True)
    ms = 1e6
    # global pool: its level after every event
    pool_t = [e["t_ns"] / ms for e in events if e["kind"] != "tick"]
    pool_v = [e["pool_ns"] / ms for e in events if e["kind"] != "tick"]
    ax = axes[0]
    ax.step(pool_t, pool_v, where="post", color="tab:blue")
    for e in events:
        if e["kind"] in ("refill", "write"):
            ax.axvline(e["t_ns"] / ms, color="grey", lw=0.8, ls="--")
    ax.set_ylabel("global pool\n(ms)")
    slice_ms = int(spec.sysctls.get(sim.SLICE_SYSCTL, "5000")) / 1000
    ax.set_title(f"{spec.scenario}/{spec.case}: period {spec.period_us / 1000:g} ms, quota "
                 f"{(spec.quota_us or 0) / 1000:g} ms, slice {slice_ms:g} ms,"
                 f" HZ={target.hz}, policy {target.policy} (simulated)", fontsize=9)  # fmt: skip
    for c in range(ncpu):
        ax = axes[c + 1]
        mine = [e for e in events if e["cpu"] == c]
        # the local pool as accounted: it changes only at ticks, acquisitions and returns
        t = [e["t_ns"] / ms for e in mine]
        v = [e["local_ns"] / ms for e in mine]
        ax.step(t, v, where="post", color="tab:green")
        ax.axhline(0, color="black", lw=0.6)
        for e in mine:
            x = e["t_ns"] / ms
            if e["kind"] == "tick":
                ax.axvline(x, color="lightgrey", lw=0.6, zorder=0)
            if e["kind"] == "abort":
                ax.plot([x], [e["local_ns"] / ms], marker="x", color="tab:red", ms=8)
            if e["kind"] == "acquire" and e["local_ns"] - e["amount_ns"] < 0:
                debt = (e["local_ns"] - e["amount_ns"]) / ms
                ax.plot([x, x], [debt, 0], color="tab:orange", lw=3)
        start = None
        for e in mine:
            if e["kind"] == "throttle":
                start = e["t_ns"] / ms
            elif e["kind"] == "unthrottle" and start is not None:
                ax.axvspan(start, e["t_ns"] / ms, color="tab:red", alpha=0.3)
                start = None
        if start is not None:
            ax.axvspan(start, to_ms, color="tab:red", alpha=0.3)
        ax.set_ylabel(f"CPU {c} local\n(ms)")
    axes[-1].set_xlabel("time (ms); red: throttled (x: unthrottle aborted), orange: debt paid at an acquisition, "
                        "dashed: refills")  # fmt: skip
    axes[-1].set_xlim(from_ms, to_ms)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png
