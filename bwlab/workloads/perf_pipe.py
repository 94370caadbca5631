"""perf bench sched pipe: two tasks passing a token through a pair of pipes, the scheduler's
wakeup and context-switch path with nothing else in it; time per round trip."""

from __future__ import annotations

import re
from pathlib import Path

from bwlab.errors import BwlabError
from bwlab.workloads import programs
from bwlab.workloads.base import Metric, Param, Resolved, WorkloadKind


class PerfPipe(WorkloadKind):
    name = "perf-pipe"
    description = "perf bench sched pipe (a fixed number of round trips; usecs per op)"
    params = {"loops": Param("int", 100000, 1, 10**9),
              "threads": Param("bool", False, help="two threads of one process instead of two processes")}  # fmt: skip
    metrics = (Metric("pipe_us_per_op", "pipe us/op", console=True), Metric("pipe_ops_per_s"))

    def argv(self, w: Resolved, ncpu: int, duration_s: float) -> tuple[str, ...]:
        return ("perf", "bench", "sched", "pipe", "-l", str(w["loops"]), *(("-T",) if w["threads"] else ()))

    def files(self, w: Resolved) -> dict[str, Path]:
        # carried only by the cases that run it (perf and its libraries are ~25 MB), not by
        # every guest as the kinds' `programs` are
        return {"perf": programs.resolve("perf")}

    def parse(self, stdout: str, w: Resolved) -> tuple[dict[str, float], list[int]]:
        per_op = re.search(r"([\d.]+)\s+usecs/op", stdout)
        per_s = re.search(r"(\d+)\s+ops/sec", stdout)
        if not per_op or not per_s:
            raise BwlabError("perf bench sched pipe output has no 'usecs/op' and 'ops/sec' lines")
        return {"pipe_us_per_op": float(per_op.group(1)), "pipe_ops_per_s": float(per_s.group(1))}, []


KIND = PerfPipe()
