"""cglat (workloads/cglat.c): CPU burners and one thread sleeping in a loop, recording how long
each sleep really took (Uber's quota-vs-cpuset benchmark)."""

from __future__ import annotations

from bwlab.errors import BwlabError
from bwlab.workloads.base import (
    Metric,
    Param,
    Resolved,
    SimModel,
    WorkloadKind,
    duration_arg,
    json_doc,
    latency_metric_decls,
    latency_metrics,
)

SLEEPER_RUN_NS = 2_000  # the sleeper's work per wakeup: a clock read and a loop test


class Cglat(WorkloadKind):
    name = "cglat"
    description = "burners + a sleeper: how late sleeps end"
    params = {"burners": Param("count", 32), "sleep_us": Param("int", 10000, 1, 10**7)}
    programs = ("cglat",)
    metrics = (*latency_metric_decls("", "sleep", console=("p50", "p99")), Metric("sleeps"))
    sample_axis = "a sleep took (ms)"

    def argv(self, w: Resolved, ncpu: int, duration_s: float) -> tuple[str, ...]:
        return ("cglat", "-b", str(w["burners"]), "-s", str(w["sleep_us"]), "-d", duration_arg(duration_s))

    def parse(self, stdout: str, w: Resolved) -> tuple[dict[str, float], list[int]]:
        doc = json_doc(stdout, "cglat")
        try:
            samples = [int(s) for s in doc["samples_us"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise BwlabError(f"cglat output is not its JSON document: {exc}") from exc
        if not samples:
            raise BwlabError("cglat recorded no sleep samples")
        return {**latency_metrics(samples), "sleeps": float(len(samples))}, samples

    def sim_model(self, w: Resolved, cpus: list[int]) -> SimModel:
        sleeper = {"type": "sleeper", "sleep_ns": int(w["sleep_us"]) * 1000, "run_ns": SLEEPER_RUN_NS}
        return SimModel([sleeper] + [{"type": "cpu"}] * int(w["burners"]))


KIND = Cglat()
