"""sysbench cpu: CPU-bound threads computing primes, never sleeping (demand == threads)."""

from __future__ import annotations

import re

from bwlab.errors import BwlabError
from bwlab.workloads.base import Metric, Param, Resolved, SimModel, WorkloadKind, duration_arg

EVENTS = (Metric("events_per_s", "events/s", console=True), Metric("events"))


def parse_events(stdout: str) -> dict[str, float]:
    eps = re.search(r"events per second:\s*([\d.]+)", stdout)
    total = re.search(r"total number of events:\s*(\d+)", stdout)
    if not eps or not total:
        raise BwlabError("sysbench output has no 'events per second' / 'total number of events'")
    return {"events_per_s": float(eps.group(1)), "events": float(total.group(1))}


class SysbenchCpu(WorkloadKind):
    name = "sysbench-cpu"
    description = "sysbench cpu: threads that never sleep"
    params = {"threads": Param("count", "ncpu", help="threads (CPU-count expression)"),
              "max_prime": Param("int", 20000, 3, 10**7, help="sysbench --cpu-max-prime")}  # fmt: skip
    programs = ("sysbench",)
    metrics = EVENTS

    def argv(self, w: Resolved, ncpu: int, duration_s: float) -> tuple[str, ...]:
        # --time=0 would never end; sysbench's default of 10 s cuts a longer case short
        return ("sysbench", "cpu", f"--threads={w['threads']}", f"--cpu-max-prime={w['max_prime']}",
                f"--time={duration_arg(duration_s)}", "--events=0", "run")  # fmt: skip

    def parse(self, stdout: str, w: Resolved) -> tuple[dict[str, float], list[int]]:
        return parse_events(stdout), []

    def sim_model(self, w: Resolved, cpus: list[int]) -> SimModel:
        return SimModel([{"type": "cpu"}] * int(w["threads"]))


KIND = SysbenchCpu()
