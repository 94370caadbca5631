"""`bwlab validate` and `bwlab sim explain|sweep`: the simulator beyond single runs."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.table import Table

from bwlab import results
from bwlab.analysis import explain, sweep, validate
from bwlab.commands import common
from bwlab.errors import BwlabError
from bwlab.progress import console
from bwlab.scenario import RunSpec
from bwlab.targets import sim


def sim_target(args: argparse.Namespace) -> sim.SimTarget:
    measured: dict[str, Any] = {}
    if getattr(args, "noise", None):  # its other work and timer lateness, as validate uses them
        doc = results.load(Path(args.noise))
        if doc.scenario != "noise":  # a lab result: the noise probes its run made (validate does the same)
            probes = validate.in_run_noise(doc)
            if probes is None:
                raise BwlabError(f"{args.noise}: neither a noise result nor a run with noise probes ([probe])")
            doc = probes
        measured = sim.machine_noise(doc, args.noise).target_fields(args.noise)
    if args.timer_latency:  # an explicit timerlat result's latencies win
        measured["latency_ns"] = sim.timer_latency(results.load(Path(args.timer_latency)), args.timer_latency)
        measured["latency_source"] = args.timer_latency
    return sim.SimTarget(ncpu=args.vcpus, hz=args.hz, policy=args.policy or "mainline", tick=args.tick,
                         seed=args.seed, jitter_us=args.jitter_us, **measured)  # fmt: skip


def cmd_validate(args: argparse.Namespace) -> int:
    lab = Path(args.results)
    out = Path(args.out) if args.out else lab
    with console.status("simulating every lab point"):
        rows, path = validate.validate(lab, out, args.reps, use_latency=not args.no_timer_latency,
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


def _one_spec(args: argparse.Namespace, ncpu: int, hz: int) -> RunSpec:
    sc = common.load_scenario(args.scenario, args)
    specs = sc.resolve(ncpu, hz)
    if args.case is None:
        limited = [s for s in specs if s.quota_us is not None]
        return (limited or specs)[-1]
    for s in specs:
        if s.case == args.case:
            return s
    raise BwlabError(f"scenario {sc.name} has no case {args.case!r} (cases: {', '.join(s.case for s in specs)})")


def cmd_explain(args: argparse.Namespace) -> int:
    target = sim_target(args)
    spec = _one_spec(args, target.ncpu, target.hz)
    png = Path(args.out) if args.out else Path("results") / f"explain-{spec.scenario}-{spec.case}.png"
    lines, out = explain.explain(spec, target, args.from_ms, args.to_ms, png)
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


def cmd_sweep(args: argparse.Namespace) -> int:
    target = sim_target(args)
    spec = _one_spec(args, target.ncpu, target.hz)
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
        rows = sweep.sweep(spec, target, axes, args.reps, args.jobs)
    out = Path(args.out) if args.out else Path("results") / f"sweep-{spec.scenario}.csv"
    sweep.write_csv(rows, out)
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
