"""onoff (simulator only): threads alternating between running and sleeping, durations drawn
from a distribution."""

from __future__ import annotations

from bwlab.workloads.base import DISTS, Param, Resolved, SimModel, WorkloadKind, dist


class OnOff(WorkloadKind):
    name = "onoff"
    description = "threads that run on_us and sleep off_us (simulator only)"
    params = {"threads": Param("count", "ncpu"), "on_us": Param("number", None, 1e-3, 1e9, required=True),
              "off_us": Param("number", None, 1e-3, 1e9, required=True),
              "dist": Param("choice", "exp", choices=DISTS)}  # fmt: skip
    runs_on_real = False

    def sim_model(self, w: Resolved, cpus: list[int]) -> SimModel:
        behavior = {"type": "onoff", "on": dist(w["on_us"], w["dist"]), "off": dist(w["off_us"], w["dist"])}
        return SimModel([behavior] * int(w["threads"]))


KIND = OnOff()
