"""`bwlab sim sweep`: a case simulated over a grid of bandwidth parameters, in parallel."""

from __future__ import annotations

import csv
import dataclasses
import itertools
from pathlib import Path
from typing import Any

from bwlab.errors import BwlabError
from bwlab.scenario import RunSpec, check_bandwidth
from bwlab.stats import mean_sd
from bwlab.targets import sim

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
        check_bandwidth("sweep", f"a point at a {period} us period", quota, burst)
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
                row[key], row[f"{key}_sd"] = mean_sd(vals)
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
