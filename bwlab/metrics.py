"""From one repetition's raw record (host or guest alike) to its metrics."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from bwlab.cgroup import normalize_cpu_stat, parse_kv
from bwlab.errors import BwlabError
from bwlab.scenario import RunSpec
from bwlab.stats import percentile


@dataclass
class RawRep:
    """What a runner observed for one repetition, before any interpretation."""

    stat_before: str
    stat_after: str
    wall_s: float
    rc: int
    stdout: str
    stderr: str = ""
    sides: list[str] = field(default_factory=list)
    lock_stat: str = ""  # /proc/lock_stat lines of the probed classes, after the run

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def cpu_stat_delta(before: str, after: str) -> dict[str, int]:
    b = normalize_cpu_stat(parse_kv(before))
    a = normalize_cpu_stat(parse_kv(after))
    return {k: a[k] - b[k] for k in a if k in b}


def parse_sysbench(stdout: str) -> dict[str, float]:
    eps = re.search(r"events per second:\s*([\d.]+)", stdout)
    total = re.search(r"total number of events:\s*(\d+)", stdout)
    if not eps or not total:
        raise BwlabError("sysbench output has no 'events per second' / 'total number of events'")
    return {"events_per_s": float(eps.group(1)), "events": float(total.group(1))}


def workload_doc(stdout: str) -> Any:
    """A workload's JSON document: the last line of its output (IndexError if there is none,
    json.JSONDecodeError if that line is not JSON)."""
    return json.loads(stdout.strip().splitlines()[-1])


def stdout_without_samples(stdout: str) -> str:
    """A workload's output with its document's latency samples left out (a result keeps them
    once, as the rep's samples_us); the rest (per-function tables, schedstat) stays readable."""
    try:
        doc = workload_doc(stdout)
    except (IndexError, json.JSONDecodeError):
        return "(samples_us)"
    if not isinstance(doc, dict):
        return "(samples_us)"
    doc.pop("samples_us", None)
    return "\n".join([*stdout.strip().splitlines()[:-1], json.dumps(doc, separators=(",", ":"))])


def parse_cglat(stdout: str) -> tuple[dict[str, float], list[int]]:
    try:
        doc = workload_doc(stdout)
        samples = [int(s) for s in doc["samples_us"]]
    except (json.JSONDecodeError, IndexError, KeyError, TypeError, ValueError) as exc:
        raise BwlabError(f"cglat output is not its JSON document: {exc}") from exc
    if not samples:
        raise BwlabError("cglat recorded no sleep samples")
    metrics = latency_metrics(samples)
    metrics["sleeps"] = float(len(samples))
    return metrics, samples


def noise_samples(stdout: str) -> tuple[list[float], list[float]]:
    """noise's samples (us): the uncharged bursts' sizes and the timer interrupts' lateness."""
    return _noise_sample_lists(_noise_doc(stdout))


def _noise_doc(stdout: str) -> dict[str, Any]:
    try:
        doc = workload_doc(stdout)
        if not isinstance(doc, dict) or doc.get("workload") != "noise":
            raise ValueError("not noise's document")
    except (json.JSONDecodeError, IndexError, ValueError) as exc:
        raise BwlabError(f"noise output is not its JSON document: {exc}") from exc
    return doc


def _noise_sample_lists(doc: dict[str, Any]) -> tuple[list[float], list[float]]:
    try:
        return [float(b) for b in doc["bursts_us"]], [float(t) for t in doc["timer_late_us"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise BwlabError(f"noise output is not its JSON document: {exc}") from exc


def parse_noise(stdout: str) -> dict[str, float]:
    """noise's JSON: the share of a busy CPU its threads were not charged for, the sizes of the
    bursts it came in (us), and how late timer interrupts came (us). The raw output, kept in the
    result, holds the samples the simulator replays (noise_samples())."""
    doc = _noise_doc(stdout)
    _noise_sample_lists(doc)  # both sample lists are there and numbers
    try:
        return {"uncharged_pct": float(doc["uncharged_pct"]), "bursts": float(doc["burst_us"]["n"]),
                "burst_mean_us": float(doc["burst_mean_us"]), **_percentiles("burst", doc["burst_us"]),
                "timer_interval_us": float(doc["timer_interval_us"]),
                **_percentiles("timer_late", doc["timer_late"])}  # fmt: skip
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise BwlabError(f"noise output is not its JSON document: {exc}") from exc


def parse_sysbench_threads(stdout: str) -> dict[str, float]:
    total = re.search(r"total time:\s*([\d.]+)s", stdout)
    events = re.search(r"total number of events:\s*(\d+)", stdout)
    if not total or not events or float(total.group(1)) <= 0:
        raise BwlabError("sysbench threads output has no 'total time' / 'total number of events'")
    return {"events": float(events.group(1)), "events_per_s": float(events.group(1)) / float(total.group(1))}


def parse_lock_stat(text: str, classes: tuple[str, ...]) -> dict[str, tuple[int, int]]:
    """(contentions, acquisitions) per class from /proc/lock_stat class lines.

    A class line is 'NAME: con-bounces contentions waittime-min waittime-max waittime-total
    waittime-avg acq-bounces acquisitions holdtime-...'; classes with one name are summed."""
    found: dict[str, tuple[int, int]] = {}
    for line in text.splitlines():
        name, sep, rest = line.strip().rpartition(":")
        fields = rest.split()
        if not sep or name not in classes or len(fields) < 8:
            continue
        try:
            contentions, acquisitions = int(fields[1]), int(fields[7])
        except ValueError:
            continue
        con, acq = found.get(name, (0, 0))
        found[name] = (con + contentions, acq + acquisitions)
    return found


def _percentiles(prefix: str, table: dict[str, Any]) -> dict[str, float]:
    """A workload's {"n", "p50", ..., "p99_9", "max"} (us) as metrics named like cglat's and the
    simulator's: prefix_p50_us ... prefix_p999_us, prefix_max_us."""
    return {f"{prefix}_{key.replace('_', '')}_us": float(val) for key, val in table.items() if key != "n"}


def parse_wakelat(stdout: str) -> tuple[dict[str, float], list[int]]:
    """wakelat's JSON: wakeup and request percentiles (us), achieved RPS; wakeup samples."""
    try:
        doc = workload_doc(stdout)
        out = {"rps_achieved": float(doc["rps"]), "requests_done": float(doc["completed"]),
               "requests_dropped": float(doc["dropped"])}  # fmt: skip
        for name in ("wakeup", "request"):
            out.update(_percentiles(name, doc[f"{name}_us"]))
        samples = [int(s) for s in doc["samples_us"]]
    except (json.JSONDecodeError, IndexError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise BwlabError(f"wakelat output is not its JSON document: {exc}") from exc
    return out, samples


def parse_funcs(stdout: str) -> tuple[dict[str, float], list[int]]:
    """funcs' JSON: throughput, completion-latency percentiles (us), context switches and
    system time per completed request, /proc/schedstat deltas when the kernel has them."""
    try:
        doc = workload_doc(stdout)
        done = float(doc["completed"])
        dur = float(doc["duration_s"])
        switches = float(doc["nvcsw"]) + float(doc["nivcsw"])
        out = {"requests_offered": float(doc["offered"]), "requests_done": done,
               "requests_unfinished": float(doc["unfinished"]), "throughput_rps": float(doc["throughput_rps"]),
               "ctx_switches_per_s": switches / dur, "ctx_switches_per_req": switches / done if done else 0.0,
               "sys_us_per_req": 1e6 * float(doc["stime_s"]) / done if done else 0.0,
               **_percentiles("completion", doc["latency_us"])}  # fmt: skip
        if "schedstat" in doc:  # sched_count only with kernel.sched_schedstats=1
            st = doc["schedstat"]
            if st["sched_count"]:
                out["sched_switches_per_s"] = float(st["sched_count"]) / dur
            out["run_delay_ms_per_req"] = 1e3 * float(st["run_delay_s"]) / done if done else 0.0
        # functions are in popularity order (Zipf): the first half heavy, the second half light
        served = [f for f in doc.get("per_function", []) if f["requests"]]
        half = len(served) // 2
        if half:
            out["heavy_funcs_p99_us"] = sum(float(f["p99_us"]) for f in served[:half]) / half
            out["light_funcs_p99_us"] = sum(float(f["p99_us"]) for f in served[half:]) / (len(served) - half)
            # what each function's owner sees (its own p99), averaged; and the most popular one's
            out["funcs_p99_mean_us"] = sum(float(f["p99_us"]) for f in served) / len(served)
            out["top_func_p99_us"] = float(served[0]["p99_us"])
            credits = [float(f["load_credit"]) for f in served if f["load_credit"] >= 0]
            if credits:
                out["load_credit_max"] = max(credits)
        samples = [int(s) for s in doc["samples_us"]]
    except (json.JSONDecodeError, IndexError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise BwlabError(f"funcs output is not its JSON document: {exc}") from exc
    return out, samples


def parse_hackbench(stdout: str) -> dict[str, float]:
    match = re.search(r"Time:\s*([\d.]+)", stdout)
    if not match:
        raise BwlabError("hackbench output has no 'Time:' line")
    return {"hackbench_s": float(match.group(1))}


STRESS_COUNTERS = ("valid_writes", "invalid_writes", "einval_kept", "violations", "mkdir", "rmdir",
                   "moves", "hotplug", "hotplug_errors", "scaled_by_timer", "lags_writes")  # fmt: skip


def parse_cgstress(stdout: str) -> dict[str, float]:
    try:
        doc = workload_doc(stdout)
        return {f"stress_{k}": float(doc[k]) for k in STRESS_COUNTERS}
    except (json.JSONDecodeError, IndexError, KeyError, TypeError, ValueError) as exc:
        raise BwlabError(f"cgstress output is not its JSON document: {exc}") from exc


def stat_metrics(spec: RunSpec, delta: dict[str, int], wall_s: float) -> dict[str, float | None]:
    """Metrics from a repetition's cpu.stat delta (normalized names) and its wall time:
    the same for host, guest and simulator."""
    out: dict[str, float | None] = {k: float(v) for k, v in delta.items()}
    out["wall_s"] = wall_s
    periods = delta.get("nr_periods", 0)
    out["throttled_pct"] = 100.0 * delta["nr_throttled"] / periods if periods else None
    usage = delta.get("usage_us")
    if usage and "throttled_us" in delta:
        out["throttled_time_pct"] = 100.0 * delta["throttled_us"] / usage
    if usage is not None and spec.quota_us is not None and periods:
        # > 1 means the group received more than one quota per period it was active in
        out["usage_per_period_quota"] = usage / (periods * spec.quota_us)
    if usage is not None and wall_s > 0:
        cpus_used = usage / (wall_s * 1e6)
        out["cpus_used"] = cpus_used
        if spec.quota_us is not None:
            out["usage_per_quota"] = cpus_used / (spec.quota_us / spec.period_us)
    return out


def latency_metrics(samples: list[int]) -> dict[str, float]:
    """Percentiles (us) of latency samples, as cglat's are reported."""
    metrics = {f"p{str(p).replace('.', '')}_us": percentile(samples, p) for p in (50, 90, 99, 99.9)}
    metrics["max_us"] = float(max(samples))
    return metrics


def rep_metrics(spec: RunSpec, raw: RawRep) -> tuple[dict[str, float | None], list[int]]:
    """Metrics of one repetition and its raw latency samples (empty when not a latency test)."""
    if raw.rc != 0:
        tail = (raw.stderr or raw.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise BwlabError(f"{spec.workload.argv[0]} exited {raw.rc} in case {spec.case}: {tail[0]}")
    out = stat_metrics(spec, cpu_stat_delta(raw.stat_before, raw.stat_after), raw.wall_s)
    samples: list[int] = []
    kind = spec.workload.kind
    if kind == "sysbench-cpu":
        out.update(parse_sysbench(raw.stdout))
    elif kind == "cglat":
        lat, samples = parse_cglat(raw.stdout)
        out.update(lat)
    elif kind == "hackbench":
        out.update(parse_hackbench(raw.stdout))
    elif kind == "cgstress":
        out.update(parse_cgstress(raw.stdout))
    elif kind == "wakelat":
        lat, samples = parse_wakelat(raw.stdout)
        out.update(lat)
    elif kind == "funcs":
        lat, samples = parse_funcs(raw.stdout)
        out.update(lat)
    elif kind == "noise":
        out.update(parse_noise(raw.stdout))  # samples stay in the raw output (two kinds)
    elif kind == "sysbench-threads":
        out.update(parse_sysbench_threads(raw.stdout))
    if spec.lock_classes and raw.lock_stat:
        stats = parse_lock_stat(raw.lock_stat, spec.lock_classes)
        con = sum(c for c, _ in stats.values())
        acq = sum(a for _, a in stats.values())
        out["lock_acquisitions"], out["lock_contentions"] = float(acq), float(con)
        if raw.wall_s > 0:
            out["lock_acq_per_s"], out["lock_con_per_s"] = acq / raw.wall_s, con / raw.wall_s
    for side in raw.sides:
        match = re.search(r'"writes":(\d+),"errors":(\d+)', side)
        if match:
            out["rewrites"] = float(match.group(1))
            out["rewrite_errors"] = float(match.group(2))
    return out, samples
