"""wakelat (workloads/wakelat.c): a message/worker server after schbench's design: wakeup and
request latency at a request rate, each request burning a fixed CPU time."""

from __future__ import annotations

from typing import Any

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
    percentiles,
)


class Wakelat(WorkloadKind):
    name = "wakelat"
    description = "message/worker server: wakeup and request latency"
    params = {"msg_threads": Param("int", 1, 1, 64), "workers": Param("count", "ncpu*2"),
              "rps": Param("rate", help="requests per second over all message threads; absent: back to back"),
              "batch": Param("int", 1, 1, 10**5), "poisson": Param("bool", False),
              "burn_us": Param("int", 1000, 0, 10**7), "sleep_us": Param("int", 0, 0, 10**7),
              "slice_us": Param("int", None, 100, 10**5, help="the threads' EEVDF slice (sched_attr)"),
              "warmup_s": Param("number", 0, 0, 3600, help="seconds run before samples are kept")}  # fmt: skip
    programs = ("wakelat",)
    metrics = (Metric("rps_achieved", "rps"), Metric("requests_done"), Metric("requests_dropped"),
               *latency_metric_decls("wakeup", "wakeup", shown=("p99",)),
               *latency_metric_decls("request", "request", shown=()))  # fmt: skip
    sample_axis = "wakeup latency (ms)"

    def argv(self, w: Resolved, ncpu: int, duration_s: float) -> tuple[str, ...]:
        if w["warmup_s"] >= duration_s:
            raise BwlabError(f"[workload] warmup_s = {w['warmup_s']:g} must be less than duration_s = {duration_s:g} "
                             "(the warm-up is part of the run)")  # fmt: skip
        msgs = int(w["msg_threads"])
        rps = w.get("rps") or 0
        return ("wakelat", "-m", str(msgs), "-t", str(max(1, int(w["workers"]) // msgs)), "-r", f"{rps:g}",
                "-b", str(w["batch"]), *(("-p",) if w["poisson"] else ()),
                "-c", str(w["burn_us"]), "-s", str(w["sleep_us"]),
                *(("-S", str(w["slice_us"])) if w.get("slice_us") is not None else ()),
                *(("-w", f"{float(w['warmup_s']):g}") if w["warmup_s"] else ()),
                "-d", duration_arg(duration_s))  # fmt: skip

    def parse(self, stdout: str, w: Resolved) -> tuple[dict[str, float], list[int]]:
        doc = json_doc(stdout, "wakelat")
        try:
            out = {"rps_achieved": float(doc["rps"]), "requests_done": float(doc["completed"]),
                   "requests_dropped": float(doc["dropped"])}  # fmt: skip
            for name in ("wakeup", "request"):
                out.update(percentiles(name, doc[f"{name}_us"]))
            samples = [int(s) for s in doc["samples_us"]]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise BwlabError(f"wakelat output is not its JSON document: {exc}") from exc
        return out, samples

    def sim_model(self, w: Resolved, cpus: list[int]) -> SimModel:
        rps, batch, poisson = w.get("rps") or 0, w["batch"], w["poisson"]
        for key, val, unsupported, why in (("rps", rps, rps == 0, "back-to-back requests"),
                                           ("batch", batch, batch != 1, "batched posts"),
                                           ("poisson", poisson, not poisson, "evenly spaced arrivals")):  # fmt: skip
            if unsupported:
                raise BwlabError(f"wakelat with {why} ({key} = {val!r}) is not modelled by the simulator "
                                 f"(it has Poisson arrivals at a rate, one request at a time)")  # fmt: skip
        req: dict[str, Any] = {"rate_per_s": float(rps), "service": {"fixed": float(w["burn_us"]) * 1000}}
        return SimModel([{"type": "worker"}] * int(w["workers"]), req)


KIND = Wakelat()


def requests_trace(arrivals: str, workers: int, burn_us: int, skip_s: float = 0.0) -> list[dict[str, int]]:
    """`wakelat -A`'s arrivals as a paced simulator trace (workload kind "trace", paced = true):
    each request is `burn_us` of CPU due when it arrives, on the workers in turn (a worker is
    posted every `workers`-th request, long after its last one ended at the rates used here),
    from `skip_s` seconds after the start on. What a replay of a seeded run's requests needs."""
    times: list[float] = []
    for n, line in enumerate(arrivals.splitlines(), 1):
        parts = line.split()
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            raise BwlabError(f"wakelat -A output line {n}: expected 'MSG NS', got {line!r}")
        t_us = int(parts[1]) / 1000 - skip_s * 1e6
        if t_us >= 0:
            times.append(t_us)
    if workers < 1:
        raise BwlabError(f"workers = {workers}: expected at least 1")
    if not times:
        raise BwlabError("no arrivals to replay")
    times.sort()
    lines: list[dict[str, int]] = []
    for w in range(workers):
        mine = times[w::workers]
        if not mine:
            continue
        lines.append({"run_us": 0, "sleep_us": round(mine[0]), "thread": w})
        for due, following in zip(mine, [*mine[1:], mine[-1] + burn_us], strict=True):
            lines.append({"run_us": burn_us, "sleep_us": max(0, round(following - due) - burn_us), "thread": w})
    return [line for line in lines if line["run_us"] or line["sleep_us"]]
