"""sysbench threads: threads contending for mutexes and yielding (scheduler-heavy, CPU-bound)."""

from __future__ import annotations

import re

from bwlab.errors import BwlabError
from bwlab.workloads.base import Param, Resolved, SimModel, WorkloadKind, duration_arg
from bwlab.workloads.sysbench_cpu import EVENTS


class SysbenchThreads(WorkloadKind):
    name = "sysbench-threads"
    description = "sysbench threads: lock/yield loops"
    params = {"threads": Param("count", "ncpu*4"), "locks": Param("int", 8, 1, 10**6),
              "yields": Param("int", 1000, 1, 10**7)}  # fmt: skip
    programs = ("sysbench",)
    metrics = EVENTS

    def argv(self, w: Resolved, ncpu: int, duration_s: float) -> tuple[str, ...]:
        return ("sysbench", "threads", f"--threads={w['threads']}", f"--thread-locks={w['locks']}",
                f"--thread-yields={w['yields']}", f"--time={duration_arg(duration_s)}", "--events=0",
                "run")  # fmt: skip

    def parse(self, stdout: str, w: Resolved) -> tuple[dict[str, float], list[int]]:
        total = re.search(r"total time:\s*([\d.]+)s", stdout)
        events = re.search(r"total number of events:\s*(\d+)", stdout)
        if not total or not events or float(total.group(1)) <= 0:
            raise BwlabError("sysbench threads output has no 'total time' / 'total number of events'")
        n = float(events.group(1))
        return {"events": n, "events_per_s": n / float(total.group(1))}, []

    def sim_model(self, w: Resolved, cpus: list[int]) -> SimModel:
        # the lock/yield loop never sleeps: as CPU-bound as sysbench cpu
        return SimModel([{"type": "cpu"}] * int(w["threads"]))


KIND = SysbenchThreads()
