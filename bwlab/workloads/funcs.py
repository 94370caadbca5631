"""funcs (workloads/funcs.c): function colocation, one server process per function in its own
child group; Zipf popularity, log-normal service times, ON/OFF bursts (CFS-LAGS's benchmark)."""

from __future__ import annotations

from bwlab.errors import BwlabError
from bwlab.workloads.base import (
    CGROUP_ARG,
    REP_ARG,
    Metric,
    Param,
    Resolved,
    WorkloadKind,
    duration_arg,
    json_doc,
    latency_metric_decls,
    percentiles,
)

# flag, key of the float options, in argv order
OPTIONS = (("-l", "load"), ("-z", "zipf"), ("-m", "median_us"), ("-s", "sigma"), ("-B", "on_ms"), ("-O", "off_ms"))


class Funcs(WorkloadKind):
    name = "funcs"
    description = "function colocation in child groups (throughput, completion latency)"
    params = {"functions": Param("count", "ncpu*4"), "load": Param("number", 1.0, 0.001, 100.0),
              "zipf": Param("number", 1.0, 0.0, 10.0), "median_us": Param("number", 5000, 1.0, 1e7),
              "sigma": Param("number", 1.0, 0.0, 5.0), "on_ms": Param("number", 1000, 1.0, 1e7),
              "off_ms": Param("number", 3000, 0.0, 1e7), "workers": Param("count", 2),
              "latency_awareness": Param("int", None, 0, 1, help="cpu.latency_awareness of each group")}  # fmt: skip
    programs = ("funcs",)
    metrics = (Metric("requests_offered"), Metric("requests_done"), Metric("requests_unfinished"),
               Metric("throughput_rps", "requests/s"), Metric("ctx_switches_per_s"),
               Metric("ctx_switches_per_req", "ctx switches/request"), Metric("sys_us_per_req", "sys µs/request"),
               *latency_metric_decls("completion", "completion", shown=("p50", "p99")),
               Metric("sched_switches_per_s"), Metric("run_delay_ms_per_req", "runqueue wait ms/request"),
               Metric("light_funcs_p99_us", "light functions p99 ms", 1e-3),
               Metric("heavy_funcs_p99_us", "heavy functions p99 ms", 1e-3),
               Metric("funcs_p99_mean_us", "p99 per function, mean ms", 1e-3),
               Metric("top_func_p99_us", "most popular function p99 ms", 1e-3),
               Metric("load_credit_max", "max load credit"))  # fmt: skip
    sample_axis = "request completion latency (ms)"

    def argv(self, w: Resolved, ncpu: int, duration_s: float) -> tuple[str, ...]:
        return ("funcs", "-n", str(w["functions"]), "-c", str(ncpu), "-w", str(w["workers"]),
                "-d", duration_arg(duration_s),
                *(a for flag, key in OPTIONS for a in (flag, f"{float(w[key]):g}")),
                "-S", REP_ARG, "-G", CGROUP_ARG,
                *(("-L", str(w["latency_awareness"])) if w.get("latency_awareness") is not None else ()))  # fmt: skip

    def parse(self, stdout: str, w: Resolved) -> tuple[dict[str, float], list[int]]:
        doc = json_doc(stdout, "funcs")
        try:
            done = float(doc["completed"])
            dur = float(doc["duration_s"])
            switches = float(doc["nvcsw"]) + float(doc["nivcsw"])
            out = {"requests_offered": float(doc["offered"]), "requests_done": done,
                   "requests_unfinished": float(doc["unfinished"]), "throughput_rps": float(doc["throughput_rps"]),
                   "ctx_switches_per_s": switches / dur, "ctx_switches_per_req": switches / done if done else 0.0,
                   "sys_us_per_req": 1e6 * float(doc["stime_s"]) / done if done else 0.0,
                   **percentiles("completion", doc["latency_us"])}  # fmt: skip
            if "schedstat" in doc:  # sched_count only with kernel.sched_schedstats=1
                st = doc["schedstat"]
                if st["sched_count"]:
                    out["sched_switches_per_s"] = float(st["sched_count"]) / dur
                out["run_delay_ms_per_req"] = 1e3 * float(st["run_delay_s"]) / done if done else 0.0
            # functions are in popularity order (Zipf): the first half heavy, the second half light
            served = [f for f in doc.get("per_function", []) if f["requests"]]
            half = len(served) // 2
            if half:
                out["heavy_funcs_p99_us"] = sum(float(f["p99_us"]) for f in served[:half]) / half
                out["light_funcs_p99_us"] = sum(float(f["p99_us"]) for f in served[half:]) / (len(served) - half)
                # what each function's owner sees (its own p99), averaged; and the most popular one's
                out["funcs_p99_mean_us"] = sum(float(f["p99_us"]) for f in served) / len(served)
                out["top_func_p99_us"] = float(served[0]["p99_us"])
                credits = [float(f["load_credit"]) for f in served if f["load_credit"] >= 0]
                if credits:
                    out["load_credit_max"] = max(credits)
            samples = [int(s) for s in doc["samples_us"]]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise BwlabError(f"funcs output is not its JSON document: {exc}") from exc
        return out, samples


KIND = Funcs()
