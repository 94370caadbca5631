"""cpu.stat as every target reports it: parsed, normalized across cgroup v1 and v2, and turned
into the metrics every repetition has (throttled periods, usage against the quota)."""

from __future__ import annotations

import re

from bwlab.errors import BwlabError

_INTEGER = re.compile(r"-?\d+")


def parse_kv(text: str) -> dict[str, int]:
    """Parse 'key value' lines (cpu.stat, cpuacct.usage lines) into integers."""
    out: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2 or not _INTEGER.fullmatch(parts[1]):
            raise BwlabError(f"cpu.stat line {lineno} is not 'key integer': {line!r}")
        out[parts[0]] = int(parts[1])
    return out


def normalize_cpu_stat(raw: dict[str, int]) -> dict[str, int]:
    """One schema for v1 (nanosecond *_time, cpuacct usage) and v2 (*_usec) cpu.stat."""
    out: dict[str, int] = {}
    for key in ("nr_periods", "nr_throttled", "nr_bursts"):
        if key in raw:
            out[key] = raw[key]
    for name in ("throttled", "burst"):
        if f"{name}_usec" in raw:
            out[f"{name}_us"] = raw[f"{name}_usec"]
        elif f"{name}_time" in raw:
            out[f"{name}_us"] = raw[f"{name}_time"] // 1000
    if "usage_usec" in raw:
        out["usage_us"] = raw["usage_usec"]
    elif "cpuacct_usage_ns" in raw:
        out["usage_us"] = raw["cpuacct_usage_ns"] // 1000
    if "nr_periods" not in out or "nr_throttled" not in out:
        raise BwlabError("cpu.stat has no nr_periods/nr_throttled: is CFS bandwidth control built in?")
    return out


def delta(before: str, after: str) -> dict[str, int]:
    """after - before of two cpu.stat texts, normalized."""
    b = normalize_cpu_stat(parse_kv(before))
    a = normalize_cpu_stat(parse_kv(after))
    return {k: a[k] - b[k] for k in a if k in b}


def stat_metrics(delta: dict[str, int], wall_s: float, period_us: int,
                 quota_us: int | None) -> dict[str, float | None]:  # fmt: skip
    """Metrics from a repetition's cpu.stat delta (normalized names) and its wall time:
    the same for every target."""
    out: dict[str, float | None] = {k: float(v) for k, v in delta.items()}
    out["wall_s"] = wall_s
    periods = delta.get("nr_periods", 0)
    out["throttled_pct"] = 100.0 * delta["nr_throttled"] / periods if periods else None
    usage = delta.get("usage_us")
    if usage and "throttled_us" in delta:
        out["throttled_time_pct"] = 100.0 * delta["throttled_us"] / usage
    if usage is not None and quota_us is not None and periods:
        # > 1 means the group received more than one quota per period it was active in
        out["usage_per_period_quota"] = usage / (periods * quota_us)
    if usage is not None and wall_s > 0:
        cpus_used = usage / (wall_s * 1e6)
        out["cpus_used"] = cpus_used
        if quota_us is not None:
            out["usage_per_quota"] = cpus_used / (quota_us / period_us)
    return out
