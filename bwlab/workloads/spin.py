"""spin (workloads/spin.c): CPU-bound threads that never sleep, with a work rate -- sysbench
cpu's role in a static program, for machines without sysbench (bwlab bundle)."""

from __future__ import annotations

from bwlab.errors import BwlabError
from bwlab.workloads.base import Param, Resolved, SimModel, WorkloadKind, duration_arg, json_doc
from bwlab.workloads.sysbench_cpu import EVENTS


class SpinCpu(WorkloadKind):
    name = "spin-cpu"
    description = "static CPU-bound threads that never sleep (sysbench cpu's events, no sysbench needed)"
    params = {"threads": Param("count", "ncpu", help="threads (CPU-count expression)"),
              "max_prime": Param("int", 20000, 3, 10**7, help="an event counts the primes below this")}  # fmt: skip
    programs = ("spin",)
    metrics = EVENTS

    def argv(self, w: Resolved, ncpu: int, duration_s: float) -> tuple[str, ...]:
        return ("spin", "-t", str(w["threads"]), "-p", str(w["max_prime"]), "-d", duration_arg(duration_s))

    def parse(self, stdout: str, w: Resolved) -> tuple[dict[str, float], list[int]]:
        doc = json_doc(stdout, "spin")
        try:
            return {"events_per_s": float(doc["events_per_s"]), "events": float(doc["events"])}, []
        except (KeyError, TypeError, ValueError) as exc:
            raise BwlabError(f"spin output has no events/events_per_s: {exc}") from exc

    def sim_model(self, w: Resolved, cpus: list[int]) -> SimModel:
        return SimModel([{"type": "cpu"}] * int(w["threads"]))


KIND = SpinCpu()
