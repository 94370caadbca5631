"""What a workload kind is: the parameters of its [workload] table, the command it becomes, the
metrics its output gives and how the report shows them, and how the simulator models it.

A kind is one module in this package that defines `KIND`, an instance of a `WorkloadKind`
subclass; the registry (`bwlab.workloads`) finds it. Nothing else in bwlab lists kinds.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from bwlab.errors import BwlabError
from bwlab.stats import percentile

CPU_EXPR = re.compile(r"^ncpu(?:\s*([*/])\s*(\d+(?:\.\d+)?))?$")
FLOOR_EXPR = re.compile(r"^max\(\s*(\d+(?:\.\d+)?)\s*,\s*(.+?)\s*\)$")
# In a workload's argv: the directory of the group it runs in (cpu controller), filled in by
# the target; funcs makes its per-function child groups there.
CGROUP_ARG = "@CGROUP@"
# ... and the repetition's number (1, 2, ...): funcs' seed, so that repetitions see different
# arrivals while the cases of one repetition see the same ones.
REP_ARG = "@REP@"


def cpu_value(value: Any, ncpu: int, what: str) -> float:
    """Evaluate a CPU-count expression: a number, 'ncpu', 'ncpu/K', 'ncpu*K' or 'max(N, expr)'."""
    if isinstance(value, bool):
        raise BwlabError(f"{what}: expected a CPU count, got {value!r}")
    if isinstance(value, int | float):
        if value <= 0:
            raise BwlabError(f"{what}: must be positive, got {value}")
        return float(value)
    if isinstance(value, str):
        floor = FLOOR_EXPR.match(value.strip())
        if floor:
            return max(float(floor.group(1)), cpu_value(floor.group(2), ncpu, what))
        match = CPU_EXPR.match(value.strip())
        if match:
            op, num = match.groups()
            if op is None:
                return float(ncpu)
            factor = float(num)
            if factor == 0:
                raise BwlabError(f"{what}: division by zero in {value!r}")
            return ncpu * factor if op == "*" else ncpu / factor
    raise BwlabError(f"{what}: expected a number, 'ncpu', 'ncpu/K', 'ncpu*K' or 'max(N, ...)', got {value!r}")


class ParamError(BwlabError):
    """A [workload] value that does not fit its parameter; `key` names it for the line number."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class Param:
    """One key of a [workload] table.

    type: "int" and "number" (within lo..hi), "count" (a CPU-count expression, resolved to an
    integer >= 1, at most hi), "rate" (a number or CPU-count expression, resolved to a float),
    "bool", "choice" (one of choices), "str", "strings" (a non-empty list of strings), "path"
    and "paths" (one or a list of file names, relative to the scenario file's directory)."""

    type: str
    default: Any = None  # None: no default (absent unless given, or required)
    lo: float = 0
    hi: float = math.inf
    choices: tuple[str, ...] = ()
    required: bool = False
    help: str = ""

    def check(self, key: str, value: Any) -> None:
        """Raise ParamError if `value` cannot be this parameter (before CPU counts are known)."""
        t = self.type
        bad = f"[workload] {key} must be"
        if t == "int":
            if isinstance(value, bool) or not isinstance(value, int) or not self.lo <= value <= self.hi:
                raise ParamError(key, f"{bad} an integer in {self.lo:g}..{self.hi:g}, got {value!r}")
        elif t == "number":
            if isinstance(value, bool) or not isinstance(value, int | float) or not self.lo <= value <= self.hi:
                raise ParamError(key, f"{bad} a number in {self.lo:g}..{self.hi:g}, got {value!r}")
        elif t in ("count", "rate"):
            try:
                cpu_value(value, 1, key)
            except BwlabError as exc:
                raise ParamError(key, f"[workload] {exc}") from None
        elif t == "bool":
            if not isinstance(value, bool):
                raise ParamError(key, f"{bad} true or false, got {value!r}")
        elif t == "choice":
            if value not in self.choices:
                raise ParamError(key, f"{bad} one of {', '.join(self.choices)}, got {value!r}")
        elif t in ("str", "path"):
            if not isinstance(value, str) or not value:
                raise ParamError(key, f"{bad} a non-empty string, got {value!r}")
        elif t in ("strings", "paths"):
            if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
                raise ParamError(key, f"{bad} a non-empty list of strings, got {value!r}")
        else:  # pragma: no cover - a kind's own mistake
            raise AssertionError(f"unknown parameter type {t}")

    def resolve(self, key: str, value: Any, ncpu: int, base_dir: Path) -> Any:
        if self.type == "count":
            count = max(1, round(cpu_value(value, ncpu, key)))
            return min(count, int(self.hi)) if self.hi != math.inf else count
        if self.type == "rate":
            return cpu_value(value, ncpu, key)
        if self.type == "path":
            return str((base_dir / value).resolve())
        if self.type == "paths":
            return [str((base_dir / v).resolve()) for v in value]
        return value


@dataclass(frozen=True)
class Metric:
    """A metric a kind's output gives: its key in results, the report's heading and scale
    (None: kept in results, not a report column), and whether the console summary shows it."""

    key: str
    heading: str | None = None
    scale: float = 1.0
    console: bool = False


@dataclass(frozen=True)
class SimModel:
    """How the simulator runs a case: one behaviour per thread, and an optional request stream."""

    behaviors: list[dict[str, Any]]
    requests: dict[str, Any] | None = None


@dataclass(frozen=True)
class Resolved:
    """A [workload] table resolved for one CPU count: every parameter with its value (defaults
    filled in, CPU counts evaluated, paths absolute)."""

    kind: str
    values: dict[str, Any]

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)


class WorkloadKind:
    """A workload kind. Subclasses set the class attributes and override what applies."""

    name: ClassVar[str]
    description: ClassVar[str] = ""
    params: ClassVar[Mapping[str, Param]] = {}
    # logical programs it runs (bwlab.workloads.programs resolves them), shipped into guests
    programs: ClassVar[tuple[str, ...]] = ()
    metrics: ClassVar[tuple[Metric, ...]] = ()
    # what a case's latency samples are, for the report's CDF axis (None: it has none)
    sample_axis: ClassVar[str | None] = None
    runs_on_real: ClassVar[bool] = True  # False: a shape only the simulator has

    def check(self, table: Mapping[str, Any]) -> None:
        """Checks across keys, before CPU counts are known; raise ParamError."""

    def argv(self, w: Resolved, ncpu: int, duration_s: float) -> tuple[str, ...]:
        """The command: argv[0] is a logical program name (or one of files()); CGROUP_ARG and
        REP_ARG are filled in per repetition."""
        raise BwlabError(f"workload kind '{self.name}' runs only in the simulator (--target sim)")

    def files(self, w: Resolved) -> dict[str, Path]:
        """Files a target must carry for this case (name -> host path), beyond `programs`."""
        return {}

    def exit_is_failure(self, w: Resolved, rc: int) -> bool:
        return rc != 0

    def stop_after_s(self, w: Resolved, duration_s: float) -> float | None:
        """Seconds after its start at which a target stops the workload (SIGTERM to every task
        of its group, STOP_GRACE_S later SIGKILL) and records it as stopped, not failed; None:
        it ends by itself (the built-in programs take the duration as an argument), and only a
        target's hang limit applies."""
        return None

    def parse(self, stdout: str, w: Resolved) -> tuple[dict[str, float], list[int]]:
        """Metrics from the program's output, and its latency samples (us) if it has any."""
        return {}, []

    def sim_model(self, w: Resolved, cpus: list[int]) -> SimModel:
        raise BwlabError(f"workload kind '{self.name}' is not modelled by the simulator")

    def dynamic_metrics(self) -> bool:
        """True if parse() gives metrics not declared in `metrics` (a user's own program)."""
        return False


# How long a stopped workload has between SIGTERM and SIGKILL (to print its last line).
STOP_GRACE_S = 5.0


def stop_time_s(duration_s: float) -> int:
    """When a workload that does not end by itself is stopped, in whole seconds (a plan's
    `sleep` needs no fractions): the duration it is told (@DURATION@, rounded up) and a slack
    (5 %, at least 1 s) for a program that ends and prints on its own."""
    told = int(duration_arg(duration_s))
    return math.ceil(told + max(1.0, 0.05 * told))


def duration_arg(duration_s: float) -> str:
    """A workload's whole-second duration argument (at least 1)."""
    return str(max(1, math.ceil(duration_s)))


def json_doc(stdout: str, program: str) -> dict[str, Any]:
    """A workload's JSON document: the last line of its output, an object; else a one-line
    error naming `program`."""
    try:
        doc = json.loads(stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError) as exc:
        raise BwlabError(f"{program} output is not its JSON document: {exc}") from exc
    if not isinstance(doc, dict):
        raise BwlabError(f"{program} output is not its JSON document: the last line is not an object")
    return doc


def percentiles(prefix: str, table: dict[str, Any]) -> dict[str, float]:
    """A workload's {"n", "p50", ..., "p99_9", "max"} (us) as metrics: prefix_p50_us ...
    prefix_p999_us, prefix_max_us."""
    return {f"{prefix}_{key.replace('_', '')}_us": float(val) for key, val in table.items() if key != "n"}


def latency_metrics(samples: list[int]) -> dict[str, float]:
    """Percentiles (us) of latency samples: p50_us, p90_us, p99_us, p999_us, max_us."""
    metrics = {f"p{str(p).replace('.', '')}_us": percentile(samples, p) for p in (50, 90, 99, 99.9)}
    metrics["max_us"] = float(max(samples))
    return metrics


# percentile names a latency metric may have: Python's latency_metrics() gives p50, p90, p99,
# p999 and max; workloads/lat.h also p75, p95 and p995
LATENCY_POINTS = ("p50", "p75", "p90", "p95", "p99", "p995", "p999", "max")


def latency_metric_decls(prefix: str, heading: str, shown: tuple[str, ...] = ("p50", "p99", "max"),
                         console: tuple[str, ...] = ()) -> tuple[Metric, ...]:  # fmt: skip
    """Declarations of prefix_p50_us ... prefix_max_us; `shown` get report columns (ms)."""
    out = []
    for p in LATENCY_POINTS:
        key = f"{prefix}_{p}_us" if prefix else f"{p}_us"
        head = f"{heading} {p} ms" if p in shown else None
        out.append(Metric(key, head, 1e-3, p in console))
    return tuple(out)


DISTS = ("fixed", "exp", "uniform", "lognormal")


def dist(mean_us: float, shape: str) -> dict[str, Any]:
    """A simulator duration distribution of mean `mean_us`: uniform over m +/- 50 %,
    log-normal with sigma 1 (heavy tail)."""
    m = float(mean_us) * 1000.0
    if shape == "fixed":
        return {"fixed": m}
    if shape == "exp":
        return {"exp": m}
    if shape == "uniform":
        return {"uniform": [0.5 * m, 1.5 * m]}
    return {"lognormal": [m / math.exp(0.5), 1.0]}


# Metrics every repetition may have whatever its kind: cpu.stat's (bwlab.cpustat), the lock
# statistics probe's, the rewrite side action's and the simulator's own.
COMMON_METRICS = (
    Metric("throttled_pct", "throttled %", console=True),
    Metric("throttled_time_pct", "throttled time %"),
    Metric("usage_per_quota", "usage/quota", console=True),
    Metric("usage_per_period_quota", "usage/(periods x quota)"),
    Metric("lock_acq_per_s", "cfs_b->lock acq/s"),
    Metric("lock_con_per_s", "cfs_b->lock cont/s"),
    Metric("lock_hold_ns_per_acq", "cfs_b->lock held ns/acq"),
    Metric("lock_wait_ns_per_acq", "cfs_b->lock wait ns/acq"),
    Metric("cpus_used", "CPUs used"),
    Metric("nr_bursts", "nr_bursts"),
    # the most the group ran in any 1, 10, 100 consecutive periods over that many quotas
    # (simulator: its per-period timeline; over-delivery, 1.0 = exactly the quota)
    Metric("max_usage_per_quota_1", "max usage/quota, 1 period"),
    Metric("max_usage_per_quota_10", "max usage/quota, 10 periods"),
    Metric("max_usage_per_quota_100", "max usage/quota, 100 periods"),
    # the sample side action (cgsample) read by the per-period detector (bwlab/periods.py): the
    # share of periods throttled below quota (unnecessary), and of the throttled periods
    Metric("below_quota_pct", "throttled below quota %"),
    Metric("below_quota_share", "below-quota share of throttled"),
    Metric("sampled_periods", "periods sampled"),
    # with the trace side action: the detector against the traced truth (schedtrace.py), its
    # precision and recall of *below quota*, and the counts that pool repetitions
    Metric("below_recall", "below-quota recall"),
    Metric("below_precision", "below-quota precision"),
    Metric("traced_below", "truly below quota (traced)"),
    Metric("below_both", "below quota, traced and sampled"),
    Metric("traced_timer_hits", "period timer expiries traced"),
    Metric("disagree_near_line", "verdicts unlike the truth, truth near the line"),
    # simulator: unthrottles that found their grant used up and left the cfs_rq throttled
    Metric("unthrottle_aborts", "aborted unthrottles"),
    # a workload that does not end by itself (WorkloadKind.stop_after_s): 1 where it was stopped
    Metric("stopped", "stopped at the duration"),
    *(Metric(k) for k in ("nr_periods", "nr_throttled", "throttled_us", "burst_us", "usage_us", "wall_s",
                          "lock_acquisitions", "lock_contentions", "lock_hold_us", "lock_wait_us", "rewrites",
                          "rewrite_errors", "sim_ticks", "exit_status")),
)  # fmt: skip
