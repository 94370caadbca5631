"""noise (workloads/noise.c): one spinning thread per CPU, no limit, recording the CPU time it
was not charged for (other tasks, the hypervisor) and how late a periodic timer interrupted it.
Run as a workload, and as a probe before and after a scenario's cases (what the simulator
replays in `bwlab validate`)."""

from __future__ import annotations

from typing import Any

from bwlab.errors import BwlabError
from bwlab.workloads.base import (
    LATENCY_POINTS,
    Metric,
    Param,
    Resolved,
    WorkloadKind,
    duration_arg,
    json_doc,
    percentiles,
)


def probe_argv(seconds: int, threads: str) -> tuple[str, ...]:
    """The noise probe's command (threads: a number, or "$(nproc)" in a shell plan)."""
    return ("noise", "-t", threads, "-d", str(seconds))


def _doc(stdout: str) -> dict[str, Any]:
    doc = json_doc(stdout, "noise")
    if doc.get("workload") != "noise":
        raise BwlabError("noise output is not its JSON document: not noise's document")
    return doc


def _sample_lists(doc: dict[str, Any]) -> tuple[list[float], list[float]]:
    try:
        return [float(b) for b in doc["bursts_us"]], [float(t) for t in doc["timer_late_us"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise BwlabError(f"noise output is not its JSON document: {exc}") from exc


def samples(stdout: str) -> tuple[list[float], list[float]]:
    """noise's samples (us): the uncharged bursts' sizes and the timer interrupts' lateness."""
    return _sample_lists(_doc(stdout))


def parse_noise(stdout: str) -> dict[str, float]:
    """The share of a busy CPU the threads were not charged for, the sizes of the bursts it came
    in (us), and how late timer interrupts came (us)."""
    doc = _doc(stdout)
    _sample_lists(doc)  # both sample lists are there and numbers
    try:
        return {"uncharged_pct": float(doc["uncharged_pct"]), "bursts": float(doc["burst_us"]["n"]),
                "burst_mean_us": float(doc["burst_mean_us"]), **percentiles("burst", doc["burst_us"]),
                "timer_interval_us": float(doc["timer_interval_us"]),
                **percentiles("timer_late", doc["timer_late"])}  # fmt: skip
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise BwlabError(f"noise output is not its JSON document: {exc}") from exc


class Noise(WorkloadKind):
    name = "noise"
    description = "spinning threads, no limit: uncharged CPU time and timer lateness"
    params = {"threads": Param("count", "ncpu"), "gap_us": Param("int", 5, 1, 10**6),
              "merge_us": Param("int", 100, 0, 10**6), "work": Param("int", 0, 0, 10**9),
              "timer_interval_us": Param("int", 997, 10, 10**6)}  # fmt: skip
    programs = ("noise",)
    metrics = (Metric("uncharged_pct", "uncharged %", console=True), Metric("bursts"),
               Metric("burst_mean_us", "uncharged burst mean µs", console=True), Metric("timer_interval_us"),
               *(Metric(f"burst_{p}_us", "uncharged burst p99 ms" if p == "p99" else None, 1e-3)
                 for p in LATENCY_POINTS),
               *(Metric(f"timer_late_{p}_us", "timer late p99 µs" if p == "p99" else None)
                 for p in LATENCY_POINTS))  # fmt: skip

    def argv(self, w: Resolved, ncpu: int, duration_s: float) -> tuple[str, ...]:
        return ("noise", "-t", str(w["threads"]), "-d", duration_arg(duration_s), "-g", str(w["gap_us"]),
                "-m", str(w["merge_us"]), "-w", str(w["work"]), "-i", str(w["timer_interval_us"]))  # fmt: skip

    def parse(self, stdout: str, w: Resolved) -> tuple[dict[str, float], list[int]]:
        return parse_noise(stdout), []  # its samples stay in the raw output (two kinds of them)


KIND = Noise()
