"""requests (simulator only): workers serving Poisson arrivals, service times from a distribution."""

from __future__ import annotations

from bwlab.workloads.base import DISTS, Metric, Param, Resolved, SimModel, WorkloadKind, dist, latency_metric_decls


class Requests(WorkloadKind):
    name = "requests"
    description = "workers serving Poisson requests (simulator only)"
    params = {"workers": Param("count", "ncpu"), "rps": Param("rate", 1000),
              "service_us": Param("number", None, 1e-3, 1e9, required=True),
              "dist": Param("choice", "exp", choices=DISTS)}  # fmt: skip
    metrics = (Metric("rps_achieved", "rps"), Metric("requests_done"),
               *latency_metric_decls("request", "request", shown=("p50", "p99")))  # fmt: skip
    runs_on_real = False

    def sim_model(self, w: Resolved, cpus: list[int]) -> SimModel:
        req = {"rate_per_s": float(w["rps"]), "service": dist(w["service_us"], w["dist"])}
        return SimModel([{"type": "worker"}] * int(w["workers"]), req)


KIND = Requests()
