"""picks (workloads/picks.c): the cost of a scheduling decision with many tasks queued on one CPU.

Yielding tasks in child groups, all pinned to one CPU: every sched_yield() passes through a
pick among all of them. With one plain (never latency-aware) task beside them, LAGS considers
only eligible tasks and every yield switches, with or without LAGS, so the ns per yield of the
two differ by what the pick costs (switches_per_yield shows whether that premise held).
"""

from __future__ import annotations

from bwlab.errors import BwlabError
from bwlab.workloads.base import CGROUP_ARG, Metric, Param, Resolved, WorkloadKind, duration_arg, json_doc


class Picks(WorkloadKind):
    name = "picks"
    description = "yielding tasks in many groups on one CPU: CPU time per pick"
    params = {"tasks": Param("int", 64, 1, 4000, help="yielding tasks spread over the groups"),
              "groups": Param("int", 16, 1, 1024, help="child groups for them"),
              "plain": Param("int", 1, 0, 16, help="tasks in one more group that is never latency-aware"),
              "latency_awareness": Param("int", None, 0, 1, help="cpu.latency_awareness of the groups")}  # fmt: skip
    programs = ("picks",)
    metrics = (Metric("ns_per_yield", "ns per yield", console=True), Metric("switches_per_yield", "switches/yield"),
               Metric("yields_per_s"), Metric("yields_per_task_min"), Metric("yields_per_task_max"))  # fmt: skip

    def argv(self, w: Resolved, ncpu: int, duration_s: float) -> tuple[str, ...]:
        return ("picks", "-t", str(w["tasks"]), "-g", str(w["groups"]), "-P", str(w["plain"]),
                "-d", duration_arg(duration_s), "-G", CGROUP_ARG,
                *(("-L", str(w["latency_awareness"])) if w.get("latency_awareness") is not None else ()))  # fmt: skip

    def parse(self, stdout: str, w: Resolved) -> tuple[dict[str, float], list[int]]:
        doc = json_doc(stdout, "picks")
        try:
            out = {"ns_per_yield": float(doc["ns_per_yield"]), "switches_per_yield": float(doc["switches_per_yield"]),
                   "yields_per_s": float(doc["yields"]) / float(doc["duration_s"]),
                   "yields_per_task_min": float(doc["yields_per_task"]["min"]),
                   "yields_per_task_max": float(doc["yields_per_task"]["max"])}  # fmt: skip
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
            raise BwlabError(f"picks output is not its JSON document: {exc}") from exc
        return out, []


KIND = Picks()
