from __future__ import annotations

import json
from pathlib import Path

import pytest

from bwlab import stats
from bwlab.errors import BwlabError
from bwlab.scenario import RunSpec, Workload
from bwlab.targets import base
from bwlab.workloads import cglat, funcs, noise, sysbench_cpu, sysbench_threads
from bwlab.workloads.base import Resolved

NO_PARAMS = Resolved("", {})


def test_summarize() -> None:
    s = stats.summarize([1.0, 2.0, 3.0, 6.0])
    assert s == {"n": 4, "mean": 3.0, "min": 1.0, "max": 6.0, "stdev": pytest.approx(2.160246899)}
    assert stats.summarize([5])["stdev"] is None
    assert stats.summarize([])["n"] == 0


def test_percentile_nearest_rank() -> None:
    data = list(range(1, 101))
    assert stats.percentile(data, 50) == 50
    assert stats.percentile(data, 99) == 99
    assert stats.percentile(data, 100) == 100
    assert stats.percentile([7], 0) == 7
    with pytest.raises(ValueError):
        stats.percentile([], 50)


def spec(kind: str = "sysbench-cpu", quota: int | None = 20000) -> RunSpec:
    return RunSpec(
        scenario="s",
        case="c",
        params={},
        ncpu=2,
        period_us=10000,
        quota_us=quota,
        burst_us=0,
        cpus=None,
        sysctls={},
        workload=Workload(kind, (kind,)),
        sides=(),
        duration_s=1,
        repetitions=1,
    )


SYSBENCH = """CPU speed:
    events per second:   345.67
General statistics:
    total time:                          10.0010s
    total number of events:              3457
"""


def test_rep_metrics_v2() -> None:
    raw = base.RawRep(
        stat_before="usage_usec 1000\nnr_periods 10\nnr_throttled 1\nthrottled_usec 5\n",
        stat_after="usage_usec 9001000\nnr_periods 510\nnr_throttled 251\nthrottled_usec 1005\n",
        wall_s=5.0,
        rc=0,
        stdout=SYSBENCH,
        sides=['{"writer":"cgwrite","writes":50,"errors":0}\n'],
    )
    m, samples = base.rep_metrics(spec(), raw)
    assert m["throttled_pct"] == pytest.approx(50.0)
    assert m["cpus_used"] == pytest.approx(1.8)
    assert m["usage_per_quota"] == pytest.approx(0.9)
    assert m["events_per_s"] == 345.67 and m["rewrites"] == 50
    assert samples == []


def test_rep_metrics_no_periods_is_none() -> None:
    raw = base.RawRep("nr_periods 0\nnr_throttled 0\n", "nr_periods 0\nnr_throttled 0\n", 1.0, 0, SYSBENCH)
    m, _ = base.rep_metrics(spec(quota=None), raw)
    assert m["throttled_pct"] is None and "usage_per_quota" not in m


def test_rep_metrics_failed_workload() -> None:
    raw = base.RawRep("nr_periods 0\nnr_throttled 0\n", "nr_periods 0\nnr_throttled 0\n", 1.0, 3, "", "FATAL: boom")
    with pytest.raises(BwlabError, match=r"exited 3 .*boom"):
        base.rep_metrics(spec(), raw)


def test_cglat_metrics() -> None:
    doc = {"workload": "cglat", "samples_us": [10100] * 98 + [95000, 110000]}
    m, samples = cglat.KIND.parse("noise\n" + json.dumps(doc) + "\n", NO_PARAMS)
    assert m["p50_us"] == 10100 and m["p99_us"] == 95000 and m["max_us"] == 110000 and len(samples) == 100
    with pytest.raises(BwlabError):
        cglat.KIND.parse("not json", NO_PARAMS)


def test_sysbench_garbage() -> None:
    with pytest.raises(BwlabError, match="events per second"):
        sysbench_cpu.parse_events("FATAL")


LOCK_STAT = """\
    &cfs_b->lock: 12 34 0.10 9.90 100.00 2.94 56 7890 0.05 3.00 400.00 0.05
    ------------
    &cfs_b->lock 20 [<0>] throttle_cfs_rq+0x5c/0x1e0
    &rq->__lock: 1 2 0.10 9.90 100.00 2.94 56 999 0.05 3.00 400.00 0.05
"""


def test_parse_lock_stat_counts_class_lines_only() -> None:
    from bwlab.targets.base import LockStat, parse_lock_stat

    assert parse_lock_stat(LOCK_STAT, ("&cfs_b->lock",)) == {"&cfs_b->lock": LockStat(34, 7890, 100.0, 400.0)}
    both = parse_lock_stat(LOCK_STAT + LOCK_STAT, ("&cfs_b->lock", "&rq->__lock"))
    assert both == {"&cfs_b->lock": LockStat(68, 15780, 200.0, 800.0), "&rq->__lock": LockStat(4, 1998, 200.0, 800.0)}
    assert parse_lock_stat("", ("&cfs_b->lock",)) == {}


def test_parse_sysbench_threads() -> None:
    def parse_sysbench_threads(out: str) -> dict[str, float]:
        return sysbench_threads.KIND.parse(out, Resolved("sysbench-threads", {}))[0]

    out = "General statistics:\n    total time:                          2.0000s\n    total number of events:  500\n"
    assert parse_sysbench_threads(out) == {"events": 500.0, "events_per_s": 250.0}
    with pytest.raises(BwlabError, match="sysbench threads output"):
        parse_sysbench_threads("nothing")


def test_funcs_metrics() -> None:
    doc = {"workload": "funcs", "duration_s": 10, "offered": 110, "completed": 100, "unfinished": 10,
           "throughput_rps": 10.0, "nvcsw": 300, "nivcsw": 200, "stime_s": 0.05,
           "schedstat": {"sched_count": 5000, "rq_cpu_time_s": 9.0, "run_delay_s": 2.0},
           "latency_us": {"n": 110, "p50": 5000.0, "p99": 80000.0, "p99_9": 90000.0, "max": 95000.0},
           "samples_us": [5000] * 110}  # fmt: skip
    m, samples = funcs.KIND.parse(json.dumps(doc) + "\n", NO_PARAMS)
    assert m["throughput_rps"] == 10 and m["requests_unfinished"] == 10 and len(samples) == 110
    assert m["ctx_switches_per_s"] == 50 and m["ctx_switches_per_req"] == 5
    assert m["sys_us_per_req"] == 500 and m["sched_switches_per_s"] == 500 and m["run_delay_ms_per_req"] == 20
    assert m["completion_p99_us"] == 80000 and m["completion_p999_us"] == 90000
    assert "light_funcs_p99_us" not in m  # no per-function results
    doc["per_function"] = [{"requests": 50, "p50_us": 9000, "p99_us": 90000, "load_credit": 700},
                           {"requests": 30, "p50_us": 7000, "p99_us": 70000, "load_credit": 300},
                           {"requests": 20, "p50_us": 3000, "p99_us": 10000, "load_credit": 100},
                           {"requests": 0, "p50_us": 0, "p99_us": 0, "load_credit": 0}]  # fmt: skip
    m = funcs.KIND.parse(json.dumps(doc), NO_PARAMS)[0]
    assert m["heavy_funcs_p99_us"] == 90000 and m["light_funcs_p99_us"] == 40000 and m["load_credit_max"] == 700
    assert m["funcs_p99_mean_us"] == 170000 / 3 and m["top_func_p99_us"] == 90000
    del doc["schedstat"]
    assert "sched_switches_per_s" not in funcs.KIND.parse(json.dumps(doc), NO_PARAMS)[0]
    with pytest.raises(BwlabError, match="funcs output"):
        funcs.KIND.parse('{"workload": "funcs"}', NO_PARAMS)


def _noise_stdout(**over: object) -> str:
    doc = {"workload": "noise", "uncharged_pct": 1.25, "burst_mean_us": 400.5, "bursts_us": [30, 1400, 8000],
           "burst_us": {"n": 3, "p50": 1400.0, "p99": 8000.0, "p99_9": 8000.0, "max": 8000.0},
           "timer_interval_us": 997, "timer_late_us": [0.0, 12.5, 3300.0],
           "timer_late": {"n": 3, "p50": 12.5, "p99": 3300.0, "max": 3300.0}}  # fmt: skip
    return "noise: a line before\n" + json.dumps({**doc, **over})


def test_parse_noise() -> None:
    out = noise.parse_noise(_noise_stdout())
    assert out["uncharged_pct"] == 1.25 and out["bursts"] == 3 and out["burst_mean_us"] == 400.5
    assert out["burst_p99_us"] == 8000.0 and out["burst_p999_us"] == 8000.0
    assert out["timer_late_p50_us"] == 12.5 and out["timer_late_max_us"] == 3300.0
    assert noise.samples(_noise_stdout()) == ([30.0, 1400.0, 8000.0], [0.0, 12.5, 3300.0])
    for bad in ("", "not json", json.dumps({"workload": "cglat"}), _noise_stdout(bursts_us=None),
                _noise_stdout(timer_late_us=["x"]), _noise_stdout(timer_late=None)):  # fmt: skip
        with pytest.raises(BwlabError, match="noise output is not its JSON document"):
            noise.parse_noise(bad)


def test_machine_noise_for_the_meta() -> None:

    good, bad = base.machine_noise([_noise_stdout(), "noise: cannot create timer\n"])
    assert good["metrics"]["uncharged_pct"] == 1.25 and "timer_late_us" in good["stdout"]
    assert "noise output is not its JSON document" in bad["error"] and "metrics" not in bad
    assert base.machine_noise([]) == []


def test_raw_stdout_keeps_the_document_but_not_the_samples() -> None:
    from bwlab.targets.base import stdout_without_samples

    doc = {"workload": "funcs", "per_function": [{"requests": 3, "p99_us": 900}], "samples_us": [1, 2, 3]}
    kept = stdout_without_samples("starting\n" + json.dumps(doc) + "\n")
    assert kept.splitlines()[0] == "starting"
    assert json.loads(kept.splitlines()[-1]) == {"workload": "funcs", "per_function": [{"requests": 3, "p99_us": 900}]}
    assert stdout_without_samples("not json") == "(samples_us)" == stdout_without_samples("[1, 2]")


def test_a_failed_noise_probe_fails_the_run(tmp_path: Path) -> None:
    meta = {"noise": base.machine_noise(["noise: cannot start threads\n"])}
    assert "error" in meta["noise"][0] and meta["noise"][0]["stdout"].startswith("noise: cannot")
    with pytest.raises(BwlabError, match=r"r.json: the noise probe failed: noise output is not its JSON document"):
        base.check_run([], meta, tmp_path / "r.json")
    base.check_run([], {"noise": base.machine_noise([])}, tmp_path / "r.json")  # no probe: nothing to fail


def sampler_text(periods: int, used_us: int, stopped_us: int, every: int = 1) -> str:
    """cgsample's output for a group with 10 ms periods on 2 CPUs, sampled every ms, period
    boundaries at 10 ms + 0.5 ms: each period it uses `used_us` and every `every`-th period it
    is throttled for `stopped_us` (counted at the boundary)."""
    lines = ["cgsample 1000"]
    nr, thr, thr_us, usage = 0, 0, 0, 0
    for ms in range(periods * 10 + 1):
        if ms and ms % 10 == 1:  # the boundary at ms - 0.5 passed
            nr += 1
            if nr % every == 0:
                thr, thr_us = thr + 1, thr_us + stopped_us
        lines.append(f"{ms * 1_000_000} {nr} {thr} {thr_us * 1000} {usage * 1000} 0")
        usage += used_us // 10
    return "\n".join(lines) + "\n"


def test_sampled_periods_below_and_at_quota() -> None:
    """The sample side action's counters read by the per-period detector: a group throttled
    every other period for 1 ms of a CPU after using 19 ms of its 20 (demand 20 ms, its quota:
    below); one with half the quota that used its 10 ms and was stopped for 10 ms more (both
    CPUs for half the period: twice its quota, at)."""
    below = dict(base.sampled_metrics(sampler_text(40, 19000, 1000, every=2), spec()))
    assert below["sampled_periods"] >= 35 and below["below_quota_share"] == 1.0
    assert below["below_quota_pct"] == pytest.approx(50, abs=4)
    at = base.sampled_metrics(sampler_text(40, 10000, 10000), spec(quota=10000))
    assert at["below_quota_share"] == 0.0 and at["below_quota_pct"] == 0.0
    calm = base.sampled_metrics(sampler_text(40, 10000, 0, every=10**6), spec())
    assert "below_quota_share" not in calm and calm["below_quota_pct"] == 0.0


def test_sampler_output_and_metrics_in_a_rep() -> None:
    raw = base.RawRep("nr_periods 0\nnr_throttled 0\nusage_usec 0\n", "nr_periods 40\nnr_throttled 20\nusage_usec 1\n",
                      0.4, 0, SYSBENCH, sides=[sampler_text(40, 19000, 1000, every=2)])  # fmt: skip
    m, _ = base.rep_metrics(spec(), raw)
    assert m["below_quota_share"] == 1.0 and m["sampled_periods"] >= 35
    docs = base.case_docs([spec()], {(0, 0): raw})
    assert docs[0]["reps"][0]["raw"]["sides"] == ["cgsample 1000 (401 lines, left out)"]
    with pytest.raises(BwlabError, match="does not start with its header"):
        base.parse_sampler("1 2 3 4 5 6\n")
    with pytest.raises(BwlabError, match="line 3 is not 6 numbers"):
        base.parse_sampler("cgsample 1000\n1 2 3 4 5 6\n1 2 x\n")
