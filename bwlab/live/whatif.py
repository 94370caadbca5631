"""What a change would do: a group's recorded threads (threads.py: their episodes of work, due
when they began) replayed in the simulator under its current settings and under alternatives
(burst, another period, the series' policy), several seeds each (the period timer's phase
differs between groups as between seeds)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bwlab.periods import Limit
from bwlab.stats import mean_sd


@dataclass(frozen=True)
class Variant:
    label: str
    limit: Limit
    policy: str = "mainline"  # a stock kernel; "all": the series
    trace: Path | None = None  # another recording of the work (threads.pool_episodes), else predict()'s
    paced: bool = True  # the trace's intervals are due at their recorded times (threads.episodes)


@dataclass(frozen=True)
class Prediction:
    variant: Variant
    throttled_pct: float
    throttled_pct_sd: float
    reps: int
    stall_p99_us: float | None = None  # p99 of a CPU's throttled time in a period, when throttled


def agrees(measured_pct: float, predicted_pct: float) -> bool:
    """A prediction of throttled periods within the issue's tolerance of what was measured:
    20 % of it, or 3 points when it is below 15 %. The replay "as it is" against the watched
    group says how far its other rows can be trusted: work a group could not run and queued
    in user space (a Go program's goroutines beyond GOMAXPROCS) is not in the recording, so an
    over-used group is replayed wanting only what it got."""
    off = abs(predicted_pct - measured_pct)
    return off <= 0.2 * measured_pct or (measured_pct < 15 and off <= 3)


def stall_p99(outs: list[dict[str, Any]]) -> float | None:
    """The p99 of how long a CPU's runqueue of the group sat throttled in a period, over the
    periods the simulations kept (the first seed's); None if none was throttled."""
    stalls = sorted(cpu[2] / 1000 for out in outs for row in out.get("periods") or [] for cpu in row["cpus"]
                    if cpu[2] > 0)  # fmt: skip
    return stalls[min(len(stalls) - 1, int(0.99 * len(stalls)))] if stalls else None


def predict(trace: Path, variants: list[Variant], ncpu: int, hz: int, slice_us: int, seconds: float,
            reps: int = 5) -> list[Prediction]:  # fmt: skip
    """Throttled periods (%) predicted for each variant, mean and stdev over `reps` seeds, and
    the p99 throttle stall."""
    # the simulator and the scenario loader are the lab's: loaded only when a prediction runs
    # (doctor --no-predict, top and tune never do; in a TCG guest each import costs seconds)
    from bwlab import scenario
    from bwlab.targets import sim

    out = []
    with tempfile.TemporaryDirectory(prefix="bwlab-whatif-") as tmp:
        for i, v in enumerate(variants):
            cpus = v.limit.cpus
            quota = '"max"' if cpus is None else repr(cpus)
            text = (f'name = "whatif"\nrepetitions = {reps}\nduration_s = {seconds:g}\n'
                    f"[cgroup]\nperiod_us = {v.limit.period_us}\nquota_cpus = {quota}\nburst_us = {v.limit.burst_us}\n"
                    f'[sysctl]\n"kernel.sched_cfs_bandwidth_slice_us" = {slice_us}\n'
                    f'[workload]\nkind = "trace"\nfile = "{v.trace or trace}"\n'
                    f"paced = {str(v.paced).lower()}\n")  # fmt: skip
            path = Path(tmp) / f"whatif-{i}.toml"
            path.write_text(text)
            specs = scenario.load(path).resolve(ncpu, hz)
            outs = sim.run_specs(specs, sim.SimTarget(ncpu=ncpu, hz=hz, policy=v.policy))[0]
            values = [float(m) for o in outs if (m := sim.rep_metrics(specs[0], o)[0].get("throttled_pct")) is not None]
            mean, sd = mean_sd(values) if values else (0.0, 0.0)
            out.append(Prediction(v, mean, sd, len(values), stall_p99(outs)))
    return out
