"""hackbench (rt-tests): groups of senders and receivers passing messages; time per run."""

from __future__ import annotations

import re

from bwlab.errors import BwlabError
from bwlab.workloads.base import Metric, Param, Resolved, WorkloadKind


class Hackbench(WorkloadKind):
    name = "hackbench"
    description = "hackbench message passing (runs a fixed number of loops)"
    params = {"groups": Param("count", "ncpu"), "loops": Param("int", 1000, 1, 10**7),
              "pipe": Param("bool", True, help="pipes (the lab's guests have no sockets)")}  # fmt: skip
    programs = ("hackbench",)
    metrics = (Metric("hackbench_s", "hackbench s", console=True),)

    def argv(self, w: Resolved, ncpu: int, duration_s: float) -> tuple[str, ...]:
        # pipes by default: the lab's guest kernels are built without networking (no socketpair)
        return ("hackbench", *(("-p",) if w["pipe"] else ()), "-g", str(w["groups"]), "-l", str(w["loops"]))

    def parse(self, stdout: str, w: Resolved) -> tuple[dict[str, float], list[int]]:
        match = re.search(r"Time:\s*([\d.]+)", stdout)
        if not match:
            raise BwlabError("hackbench output has no 'Time:' line")
        return {"hackbench_s": float(match.group(1))}, []


KIND = Hackbench()
