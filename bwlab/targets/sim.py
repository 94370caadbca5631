"""The simulator target: a scenario's cases run through the Rust model (sim/, `bwlab._sim`).
How a workload kind becomes simulated threads is the kind's `sim_model()`.

A RunSpec becomes one JSON configuration per repetition (seeded by the repetition, so the
period timer's and the ticks' phases differ between repetitions as they differ between
fresh cgroups on a real machine); results come back as cpu.stat fields and are turned into
the same metrics, in the same result document, as host and guest runs.
"""

from __future__ import annotations

import json
import os
import random
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bwlab import cpustat, results
from bwlab.choices import TICK_MODES
from bwlab.errors import BwlabError
from bwlab.kernel import policies
from bwlab.kernel.build import SUPPORTED_HZ
from bwlab.results import Result
from bwlab.scenario import RunSpec, Scenario
from bwlab.targets import base
from bwlab.workloads import noise
from bwlab.workloads.base import WorkloadKind, latency_metrics

SLICE_SYSCTL = "kernel.sched_cfs_bandwidth_slice_us"


TIMER_SLACK_US = 50  # a normal task's nanosleep may end this late by design (timer_slack_ns)


def timer_latency(doc: Result, where: str) -> tuple[int, ...]:
    """Timer latencies (ns) from a `timerlat` result: how much later than asked, beyond the
    sleeper's timer slack, its 1 ms sleeps ended while every CPU was busy."""
    if doc.scenario != "timerlat":
        raise BwlabError(f"{where}: not a timerlat result (scenario {doc.scenario!r})")
    out: list[int] = []
    for case in doc.cases:
        argv = case.settings.get("workload", [])
        sleep_us = int(argv[argv.index("-s") + 1]) if "-s" in argv else 10000
        for rep in case.reps:
            out += [max(0, s - sleep_us - TIMER_SLACK_US) * 1000 for s in rep.samples_us]
    if not out:
        raise BwlabError(f"{where}: the timerlat result has no samples")
    return tuple(out)


OTHER_SAMPLES = 2000  # burst sizes handed to the model: enough for the shape, small configurations


@dataclass(frozen=True)
class MachineNoise:
    """What a `noise` result says of its machine, as the model takes it."""

    other_pct: float  # share (%) of a busy CPU other work took without it being charged
    bursts_ns: tuple[int, ...]  # the sizes of the bursts it came in, thinned to OTHER_SAMPLES
    latency_ns: tuple[int, ...]  # how late timer interrupts arrived on a busy CPU

    def target_fields(self, source: str) -> dict[str, Any]:
        """SimTarget fields for a machine like this one, `source` naming the measurement."""
        return {"other_pct": self.other_pct, "other_bursts_ns": self.bursts_ns,
                "other_source": f"{source} ({self.other_pct:.2f} %)", "latency_ns": self.latency_ns,
                "latency_source": source}  # fmt: skip


def machine_noise(doc: Result, where: str) -> MachineNoise:
    """A `noise` result (every measured repetition; each one's raw output holds the samples)."""
    if doc.scenario != "noise":
        raise BwlabError(f"{where}: not a noise result (scenario {doc.scenario!r})")
    pcts: list[float] = []
    bursts: list[int] = []
    late: list[int] = []
    for case in doc.cases:
        for rep in case.reps:
            pct = rep.metrics.get("uncharged_pct")
            if pct is None:
                continue
            try:
                bs, ls = noise.samples((rep.raw or {}).get("stdout", ""))
            except BwlabError as exc:
                raise BwlabError(f"{where}: {exc}") from None
            pcts.append(max(0.0, float(pct)))
            bursts += [round(b * 1000) for b in bs if b > 0]
            late += [round(t * 1000) for t in ls]
    if not pcts:
        raise BwlabError(f"{where}: the noise result has no measured repetition")
    pct = statistics.fmean(pcts)
    if pct > 0 and not bursts:
        raise BwlabError(f"{where}: the noise result has an uncharged share but no burst sizes")
    if not late:
        raise BwlabError(f"{where}: the noise result has no timer lateness samples")
    step = max(1, len(bursts) // OTHER_SAMPLES)
    return MachineNoise(pct, tuple(bursts[::step][:OTHER_SAMPLES]), tuple(late))


def _module() -> Any:
    try:
        from bwlab import _sim  # type: ignore[attr-defined]
    except ImportError as exc:
        raise BwlabError(
            f"the simulator extension bwlab._sim is not built ({exc}); run: bash scripts/setup.sh"
        ) from exc
    return _sim


@dataclass(frozen=True)
class SimTarget:
    """What the simulated machine is: CPUs, tick rate and phases, kernel policy."""

    ncpu: int = 2
    hz: int = 250
    policy: str = "mainline"
    tick: str = "aligned"
    seed: int = 0
    jitter_us: int = 0
    # measured timer latencies (ns) the ticks and timers are delayed by (see timer_latency())
    latency_ns: tuple[int, ...] = ()
    latency_source: str = ""
    # other work on every CPU (see machine_noise()): its share (%) and burst sizes (ns)
    other_pct: float = 0.0
    other_bursts_ns: tuple[int, ...] = ()
    other_source: str = ""

    def __post_init__(self) -> None:
        if not 0.0 <= self.other_pct < 50.0:
            raise BwlabError(f"sim: other work must take 0..50 % of a CPU, got {self.other_pct:g}")
        if self.other_pct > 0 and not self.other_bursts_ns:
            raise BwlabError("sim: other work without burst sizes")
        if not 1 <= self.ncpu <= 4096:
            raise BwlabError(f"sim: --vcpus must be in 1..4096, got {self.ncpu}")
        if self.hz not in SUPPORTED_HZ:
            raise BwlabError(f"sim: --hz must be one of {', '.join(map(str, SUPPORTED_HZ))}, got {self.hz}")
        if self.tick not in TICK_MODES:
            raise BwlabError(f"sim: --tick must be one of {', '.join(TICK_MODES)}, got {self.tick!r}")
        policies.feature_writes(self.policy)  # raises on an unknown policy

    @property
    def label(self) -> str:
        return f"sim-{self.policy}" + (f"-hz{self.hz}" if self.hz != 250 else "")

    def run(self, sc: Scenario, out_dir: Path) -> Path:
        return run_scenario(sc, self, out_dir)


def _threads(spec: RunSpec, cpus: list[int]) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The workload kind's model, its threads spread over the case's CPUs in the deepest group."""
    plugin = spec.workload.plugin
    if type(plugin).sim_model is WorkloadKind.sim_model:
        hint = ("; to simulate your program, record it with `bwlab doctor GROUP --save-trace FILE` and replay "
                'the file with kind = "trace", paced = true') if plugin.name == "command" else ""  # fmt: skip
        raise BwlabError(f"workload kind '{plugin.name}' is not modelled by the simulator (scenario {spec.scenario})"
                         + hint)  # fmt: skip
    model = plugin.sim_model(spec.workload.resolved, cpus)
    leaf = spec.depth - 1  # nested groups: the workload runs in the deepest
    threads = [{"group": leaf, "cpu": cpus[i % len(cpus)], "behavior": b} for i, b in enumerate(model.behaviors)]
    return threads, model.requests


def config(spec: RunSpec, target: SimTarget, rep: int, *, periods: bool = False,
           events: tuple[float, float] | None = None, samples: bool = True) -> dict[str, Any]:  # fmt: skip
    """The simulator's configuration for one repetition of a resolved case."""
    ncpu = spec.ncpu
    threads, requests = _threads(spec, spec.cpu_ids)
    slice_us = int(spec.sysctls.get(SLICE_SYSCTL, "5000"))
    unknown = sorted(set(spec.sysctls) - {SLICE_SYSCTL})
    if unknown:
        raise BwlabError(f"sysctl {unknown[0]} is not modelled by the simulator (scenario {spec.scenario})")
    group = {"name": spec.scenario, "period_ns": spec.period_us * 1000,
             "quota_ns": None if spec.quota_us is None else spec.quota_us * 1000,
             "burst_ns": spec.burst_us * 1000}  # fmt: skip
    groups = [group] + [{**group, "name": f"{spec.scenario}/l{n}", "parent": n - 2} for n in range(2, spec.depth + 1)]
    writes = [{"group": 0, "at_ns": side.interval_us * 1000, "every_ns": side.interval_us * 1000,
               "period_ns": group["period_ns"], "quota_ns": group["quota_ns"], "burst_ns": group["burst_ns"]}
              for side in spec.sides if side.kind == "rewrite"]  # fmt: skip
    record: dict[str, Any] = {"periods": periods, "samples": samples}
    if events is not None:
        record["events_from_ns"], record["events_to_ns"] = round(events[0] * 1e6), round(events[1] * 1e6)
    doc: dict[str, Any] = {
        "ncpu": ncpu, "hz": target.hz, "duration_ns": round(spec.duration_s * 1e9),
        "seed": target.seed * 1_000_003 + rep, "slice_ns": slice_us * 1000, "tick": target.tick,
        "jitter_ns": target.jitter_us * 1000, "latency_ns": list(target.latency_ns),
        "features": list(policies.POLICIES[target.policy]), "groups": groups, "threads": threads,
        "writes": writes, "record": record,
    }  # fmt: skip
    if requests is not None:
        doc["requests"] = requests
    _add_other_work(doc, target, ncpu)
    return doc


def _add_other_work(doc: dict[str, Any], target: SimTarget, ncpu: int) -> None:
    """Other work on every CPU, outside the groups (a sibling group with no limit): bursts of
    the measured sizes at Poisson times, spaced so that they take the measured share. It
    preempts the group's threads as a waking task does, and is not charged to them."""
    if target.other_pct <= 0:
        return
    on_mean = statistics.fmean(target.other_bursts_ns)
    off = {"exp": on_mean * (100.0 - target.other_pct) / target.other_pct}
    on = {"empirical": [float(b) for b in target.other_bursts_ns]}
    rng = random.Random(doc["seed"])
    doc["groups"].append({"name": "other", "period_ns": 100_000_000, "quota_ns": None, "burst_ns": 0})
    for cpu in range(ncpu):
        doc["threads"].append({"group": len(doc["groups"]) - 1, "cpu": cpu,
                               "start_ns": round(rng.expovariate(1.0 / off["exp"])),
                               "behavior": {"type": "onoff", "on": on, "off": off}})  # fmt: skip


def simulate_many(configs: list[dict[str, Any]], jobs: int | None = None) -> list[dict[str, Any]]:
    """Run simulations in parallel (Rust threads, one per core by default)."""
    if not configs:
        return []
    mod = _module()
    try:
        outs = mod.run_many([json.dumps(c) for c in configs], jobs or os.cpu_count() or 1)
    except ValueError as exc:
        raise BwlabError(f"simulator: {exc}") from None
    return [json.loads(o) for o in outs]


def rep_metrics(spec: RunSpec, out: dict[str, Any]) -> tuple[dict[str, float | None], list[int]]:
    """The same metrics a host or guest repetition gets, from one simulation's output."""
    g = out["groups"][0]
    delta = {"nr_periods": g["nr_periods"], "nr_throttled": g["nr_throttled"],
             "throttled_us": g["throttled_ns"] // 1000, "nr_bursts": g["nr_bursts"],
             "burst_us": g["burst_ns"] // 1000, "usage_us": g["usage_ns"] // 1000}  # fmt: skip
    metrics = cpustat.stat_metrics(delta, out["duration_ns"] / 1e9, spec.period_us, spec.quota_us)
    samples: list[int] = []
    smp = out["samples"]
    if smp["sleep_ns"]:
        samples = [s // 1000 for s in smp["sleep_ns"]]
        metrics.update(latency_metrics(samples))
        metrics["sleeps"] = float(len(samples))
    if smp["wakeup_ns"]:
        metrics.update({f"wakeup_{k}": v for k, v in latency_metrics([s // 1000 for s in smp["wakeup_ns"]]).items()})
    if smp["request_ns"]:
        metrics.update({f"request_{k}": v for k, v in latency_metrics([s // 1000 for s in smp["request_ns"]]).items()})
    if any(m.key == "rps_achieved" for m in spec.workload.plugin.metrics):  # a kind serving requests
        metrics["requests_done"] = float(out["requests_done"])
        metrics["rps_achieved"] = out["requests_done"] / (out["duration_ns"] / 1e9)
    metrics["sim_ticks"] = float(out["ticks"])
    metrics["unthrottle_aborts"] = float(g.get("unthrottle_aborts", 0))
    if spec.quota_us is not None:
        metrics.update(over_delivery(out.get("periods") or [], spec.quota_us))
    return metrics, samples


OVER_DELIVERY_WINDOWS = (1, 10, 100)


def over_delivery(rows: list[dict[str, Any]], quota_us: int) -> dict[str, float]:
    """The most the group ran in any window of 1, 10 and 100 consecutive periods (the time
    its threads ran, on all CPUs, between period timer expiries), over the quota for that
    many periods: 1.0 is exactly the quota. The first row (a partial period from the start
    of the run) is left out; windows longer than the run give nothing."""
    usage = [sum(c[0] for c in r["cpus"]) for r in rows[1:]]
    out: dict[str, float] = {}
    for n in OVER_DELIVERY_WINDOWS:
        if len(usage) < n:
            continue
        run = best = sum(usage[:n])
        for i in range(n, len(usage)):
            run += usage[i] - usage[i - n]
            best = max(best, run)
        out[f"max_usage_per_quota_{n}"] = best / (n * quota_us * 1000)
    return out


def timeline(out: dict[str, Any]) -> dict[str, Any]:
    """Per period of the group, per CPU: usage, local pool at the boundary, throttled and
    acquired time (ns); compact columns for the result file."""
    rows = out["periods"]
    return {"t_ns": [r["t_ns"] for r in rows], "pool_ns": [r["pool_ns"] for r in rows],
            "slush_ns": [r["slush_ns"] for r in rows], "throttled": [r["throttled"] for r in rows],
            "cpus": ["usage_ns", "local_ns", "throttled_ns", "acquired_ns"],
            "per_cpu": [r["cpus"] for r in rows]}  # fmt: skip


def run_specs(specs: list[RunSpec], target: SimTarget, jobs: int | None = None) -> list[list[dict[str, Any]]]:
    """Every repetition of every case, each with its per-period rows (the over-delivery metrics
    are computed from them; run_scenario keeps the first repetition's as the timeline)."""
    configs, index = [], []
    for ci, spec in enumerate(specs):
        for rep in range(spec.repetitions):
            configs.append(config(spec, target, rep, periods=True))
            index.append(ci)
    outs = simulate_many(configs, jobs)
    per_case: list[list[dict[str, Any]]] = [[] for _ in specs]
    for ci, out in zip(index, outs, strict=True):
        per_case[ci].append(out)
    return per_case


def run_scenario(sc: Scenario, target: SimTarget, out_dir: Path, jobs: int | None = None) -> Path:
    """All cases of a scenario in the simulator; writes SCENARIO-sim-POLICY.json."""
    specs = sc.resolve(target.ncpu, target.hz)
    per_case = run_specs(specs, target, jobs)
    cases = []
    for spec, outs in zip(specs, per_case, strict=True):
        reps = []
        for rep, out in enumerate(outs):
            metrics, samples = rep_metrics(spec, out)
            entry: dict[str, Any] = {"rep": rep, "metrics": metrics}
            if samples:
                entry["samples_us"] = samples
            if rep == 0 and out["periods"]:  # one repetition's timeline per case: results stay small
                entry["timeline"] = timeline(out)
            reps.append(entry)
        cases.append({"case": spec.case, "params": spec.params, "settings": spec.settings(), "reps": reps})
    meta = results.base_meta("sim", target.label)
    slice_us = int(specs[0].sysctls.get(SLICE_SYSCTL, "5000")) if specs else 5000
    meta.update({"timer_latency": target.latency_source or (f"uniform 0..{target.jitter_us} us" if target.jitter_us
                                                             else "none"),
                 "policy": target.policy, "sched_features": {f: f in policies.POLICIES[target.policy]
                                                              for f in policies.FEATURES},
                 "other_work": target.other_source or "none", "kernel_release": f"model, {target.policy}",
                 "source_version": "7.3 (model)", "hz": target.hz, "vcpus": target.ncpu, "tick": target.tick,
                 "seed": target.seed, "slice_us": slice_us, "cgroup": "simulated"})  # fmt: skip
    return base.write_result(out_dir, sc, meta, "ok", cases)
