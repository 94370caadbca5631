"""The simulator target: the Rust model through bwlab._sim, scenarios, explain, sweep, validate."""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from bwlab import results, scenario
from bwlab.analysis import validate
from bwlab.errors import BwlabError
from bwlab.results import Result
from bwlab.targets import sim
from bwlab.workloads.trace import read_trace

from conftest import DATA, REPO, bwlab

MS = 1_000_000


def fig4_config(features: list[str]) -> dict[str, object]:
    # the figure's t=0 is t=4 ms here: a tick and a period boundary (see sim/tests/fig4.rs)
    return {"ncpu": 1, "hz": 250, "duration_ns": 44 * MS, "slice_ns": 5 * MS, "tick": {"phases": [0]},
            "features": features,
            "groups": [{"name": "g", "period_ns": 10 * MS, "quota_ns": 10 * MS, "timer_expires_ns": 4 * MS,
                        "initial_local_ns": MS}],
            "threads": [{"group": 0, "cpu": 0, "start_ns": 3 * MS, "behavior": {"type": "cpu"}}],
            "record": {"events_from_ns": 4 * MS, "events_to_ns": 40 * MS}}  # fmt: skip


def test_fig4_through_python() -> None:
    out = sim.simulate_many([fig4_config([]), fig4_config(["BW_SLUSH"])])
    mainline, slush = out
    acquires = [e for e in mainline["events"] if e["kind"] == "acquire"]
    debts = [
        (e["t_ns"] - 4 * MS) // MS for e in acquires if e["local_ns"] - e["amount_ns"] < 0 and e["t_ns"] <= 32 * MS
    ]
    assert debts == [8, 12, 20, 28]  # figure times of the four debts
    throttles = [(e["t_ns"] - 4 * MS) / MS for e in mainline["events"] if e["kind"] in ("throttle", "unthrottle")][:2]
    assert throttles == [28.0, 30.0]  # the 2 ms throttle in the third period
    assert mainline["groups"][0]["nr_throttled"] == 1
    assert slush["groups"][0]["nr_throttled"] == 0
    assert any(e["kind"] == "slush" and e["amount_ns"] == 3 * MS for e in slush["events"])


def test_bad_config_is_a_value_error_with_one_line() -> None:
    cfg = fig4_config([])
    cfg["hz"] = 123
    with pytest.raises(BwlabError, match=r"hz must be one of"):
        sim.simulate_many([cfg])
    cfg = fig4_config(["BW_NOPE"])
    with pytest.raises(BwlabError, match=r"unknown feature"):
        sim.simulate_many([cfg])


def _throttled(name: str, policy: str, case: str, reps: int = 8, duration: float = 5) -> list[float]:
    sc = scenario.load(scenario.find(name), {"repetitions": reps, "duration_s": duration})
    spec = next(s for s in sc.resolve(2) if s.case == case)
    outs = sim.run_specs([spec], sim.SimTarget(policy=policy))[0]
    return [float(sim.rep_metrics(spec, o)[0]["throttled_pct"] or 0) for o in outs]


def test_table2_policies_in_the_model() -> None:
    mainline = statistics.fmean(_throttled("table2", "mainline", "10ms"))
    slush = statistics.fmean(_throttled("table2", "slush", "10ms"))
    every = statistics.fmean(_throttled("table2", "all", "10ms"))
    assert mainline > 40.0
    assert slush < mainline / 2
    assert every < 3.0


def test_unthrottle_retry_ends_the_unthrottles_late_timers_abort() -> None:
    """With ticks and timers up to 2 ms late, a throttled task runs on past the grant that
    queued its unthrottle, which then gives up (an abort) and leaves the cfs_rq throttled for a
    period; BW_UNTHROTTLE_RETRY asks the pool again: no aborts, and the quota is used."""
    sc = scenario.load(scenario.find("table2"), {"repetitions": 3, "duration_s": 5})
    spec = next(s for s in sc.resolve(2) if s.case == "10ms")
    got = {}
    for policy in ("mainline", "unthrottle-retry"):
        outs = sim.run_specs([spec], sim.SimTarget(policy=policy, jitter_us=2000))[0]
        metrics = [sim.rep_metrics(spec, o)[0] for o in outs]
        got[policy] = (sum(m["unthrottle_aborts"] or 0 for m in metrics),
                       statistics.fmean(m["usage_per_quota"] or 0 for m in metrics))  # fmt: skip
    assert got["mainline"][0] > 10 and got["unthrottle-retry"][0] == 0, got
    assert got["unthrottle-retry"][1] > got["mainline"][1] + 0.02, got
    on_time = sim.run_specs([spec], sim.SimTarget(policy="mainline"))[0]  # timers on time: no aborts
    assert all(sim.rep_metrics(spec, o)[0]["unthrottle_aborts"] == 0 for o in on_time)


def test_rewrites_give_extra_runtime_unless_noop() -> None:
    sc = scenario.load(scenario.find("rewrite-storm"), {"repetitions": 3, "duration_s": 5})
    spec = next(s for s in sc.resolve(2) if s.case == "demand=2xquota-rewrite=on")
    for policy, lo, hi in (("mainline", 1.03, 2.0), ("noop-update", 0.98, 1.005)):
        outs = sim.run_specs([spec], sim.SimTarget(policy=policy))[0]
        usage = [sim.rep_metrics(spec, o)[0]["usage_per_quota"] for o in outs]
        assert all(u is not None and lo <= u <= hi for u in usage), (policy, usage)


def _scenario(tmp_path: Path, text: str, name: str = "s.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_burst_counts_only_with_burst(tmp_path: Path) -> None:
    text = """name = "b"
repetitions = 2
duration_s = 5
[cgroup]
period_us = 100000
quota_cpus = 1.4
[workload]
kind = "onoff"
threads = 2
on_us = 20000
off_us = 12000
dist = "exp"
[matrix]
"cgroup.burst_us" = [0, 100000]
"""
    sc = scenario.load(_scenario(tmp_path, text))
    specs = sc.resolve(2)
    outs = sim.run_specs(specs, sim.SimTarget())
    bursts = {
        s.case: [sim.rep_metrics(s, o)[0]["nr_bursts"] for o in reps] for s, reps in zip(specs, outs, strict=True)
    }
    assert all(b == 0 for b in bursts["burst_us=0"])
    assert all(b is not None and b > 0 for b in bursts["burst_us=100000"])


def test_requests_workload_reports_latency(tmp_path: Path) -> None:
    text = """name = "r"
repetitions = 1
duration_s = 5
[cgroup]
period_us = 100000
quota_cpus = 1
[workload]
kind = "requests"
workers = 4
rps = 500
service_us = 1000
dist = "lognormal"
"""
    sc = scenario.load(_scenario(tmp_path, text))
    spec = sc.resolve(2)[0]
    m = sim.rep_metrics(spec, sim.run_specs([spec], sim.SimTarget())[0][0])[0]
    assert m["rps_achieved"] is not None and 400 < m["rps_achieved"] < 600
    assert m["request_p99_us"] is not None and m["request_p50_us"] is not None
    assert m["request_p99_us"] >= m["request_p50_us"] >= 0
    assert m["wakeup_p99_us"] is not None


def test_trace_replay_and_trace_errors(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"thread": i % 2, "run_us": 3000, "sleep_us": 1000}) + "\n" for i in range(8)))
    text = f"""name = "tr"
repetitions = 1
duration_s = 2
[cgroup]
period_us = 10000
quota_cpus = 1
[workload]
kind = "trace"
file = "{trace.name}"
repeat = true
"""
    path = _scenario(tmp_path, text)
    proc = bwlab("run", str(path), "--target", "sim", "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "out" / "tr-sim-mainline.json").read_text())
    m = doc["cases"][0]["reps"][0]["metrics"]
    # two threads, 75 % busy each, limited to one CPU
    assert 0.9 <= m["cpus_used"] <= 1.01
    assert m["throttled_pct"] > 0
    trace.write_text('{"run_us": 10}\n{"run_us": -1, "sleep_us": 5}\n')
    proc = bwlab("run", str(path), "--target", "sim", "--out", str(tmp_path / "out"))
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [f"bwlab: error: {trace}:2: run_us must be a number of microseconds"
                                                " >= 0, got -1"]  # fmt: skip
    trace.write_text('{"run_us": 10, "cpu": 3}\n')
    with pytest.raises(BwlabError, match=r"t.jsonl:1: unknown field 'cpu'"):
        read_trace(trace)
    trace.write_text("not json\n")
    with pytest.raises(BwlabError, match=r"t.jsonl:1: not a JSON object"):
        read_trace(trace)


def test_sim_only_kinds_and_unmodelled_workloads_are_clear_errors(tmp_path: Path) -> None:
    text = """name = "x"
[cgroup]
quota_cpus = 1
[workload]
kind = "onoff"
on_us = 100
off_us = 100
"""
    proc = bwlab("run", str(_scenario(tmp_path, text)), "--target", "host", "--out", str(tmp_path))
    assert proc.returncode == 1
    assert "runs only in the simulator" in proc.stderr
    text = """name = "y"
[cgroup]
quota_cpus = 1
[workload]
kind = "hackbench"
"""
    proc = bwlab("run", str(_scenario(tmp_path, text, "y.toml")), "--target", "sim", "--out", str(tmp_path))
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == ["bwlab: error: workload kind 'hackbench' is not modelled by the "
                                                "simulator (scenario y)"]  # fmt: skip
    command = 'name = "c"\n[cgroup]\nquota_cpus = 1\n[workload]\nkind = "command"\nargv = ["true"]\n'
    proc = bwlab("run", str(_scenario(tmp_path, command, "c.toml")), "--target", "sim", "--out", str(tmp_path))
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1
    hint = 'record it with `bwlab doctor GROUP --save-trace FILE` and replay the file with kind = "trace"'
    assert hint in proc.stderr, proc.stderr
    text = text.replace('kind = "hackbench"', 'kind = "onoff"\ndist = "pareto"')
    proc = bwlab("run", str(_scenario(tmp_path, text, "z.toml")), "--target", "sim", "--out", str(tmp_path))
    assert proc.returncode == 1
    assert "z.toml:6: [workload] dist must be one of" in proc.stderr


def test_explain_writes_text_and_png(tmp_path: Path) -> None:
    png = tmp_path / "e.png"
    proc = bwlab("sim", "explain", "table2", "--case", "10ms", "--to-ms", "60", "--out", str(png))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert any(" acquire " in line for line in lines)
    assert any(" refill " in line for line in lines)
    assert png.stat().st_size > 10_000
    proc = bwlab("sim", "explain", "table2", "--case", "nope")
    assert proc.returncode == 1 and "has no case 'nope'" in proc.stderr


def test_sweep_csv(tmp_path: Path) -> None:
    out = tmp_path / "s.csv"
    proc = bwlab("sim", "sweep", "table2", "--case", "10ms", "--slice-us", "1000,20000", "--policies", "mainline,all",
                 "--reps", "3", "--duration", "3", "--out", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = out.read_text().splitlines()
    assert rows[0].startswith("slice_us,policy,throttled_pct")
    assert len(rows) == 5
    proc = bwlab("sim", "sweep", "table2", "--hz", "123", "--reps", "1")
    assert proc.returncode == 1 and "--hz must be" in proc.stderr


def test_diff_se() -> None:
    # lab 10 and 30 (sample variance 200, 2 reps), model always 20: se = sqrt(200 / 2) = 10
    assert validate.diff_se([10.0, 30.0], [20.0, 20.0, 20.0]) == pytest.approx(10.0)
    assert validate.diff_se([10.0, 30.0], [0.0, 40.0]) == pytest.approx(math.sqrt(100 + 400))
    assert math.isnan(validate.diff_se([10.0], [20.0, 30.0]))


def test_validate_against_a_lab_directory(tmp_path: Path) -> None:
    # a "lab" result that is the simulator itself (same seeds) must validate; doubled, it must not
    lab = tmp_path / "lab"
    proc = bwlab("run", "table2", "--target", "sim", "--reps", "20", "--duration", "3", "--out", str(lab))
    assert proc.returncode == 0, proc.stderr
    path = lab / "table2-sim-mainline.json"
    doc = json.loads(path.read_text())
    doc["meta"]["target"], doc["meta"]["label"] = "guest", "guest-baseline"
    path.unlink()
    (lab / "report.md").unlink()
    (lab / "table2-guest-baseline.json").write_text(json.dumps(doc))
    rows, _ = validate.validate(lab, tmp_path / "v", reps=20)
    # the validation runs the scenario's own duration (10 s); the 3 s lab is close, not equal
    assert {r["case"] for r in rows} == {"100ms", "50ms", "10ms"}
    assert rows[-1]["ok"] and rows[-2]["ok"]
    for case in doc["cases"]:
        for rep in case["reps"]:
            if rep["metrics"].get("throttled_pct") is not None:
                rep["metrics"]["throttled_pct"] = 99.0
    (lab / "table2-guest-baseline.json").write_text(json.dumps(doc))
    proc = bwlab("validate", "--results", str(lab), "--out", str(tmp_path / "v"), "--reps", "5")
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith("bwlab: error: 3 of 3 points outside the tolerance")
    text = (tmp_path / "v" / "validate.md").read_text()
    assert "| table2 | guest-baseline | 10ms |" in text and "| diff/se |" in text
    assert "0 of 3 points within tolerance; of the other 3, 0 within two standard errors" in text
    # validating into the results directory itself leaves it readable as a results directory
    proc = bwlab("validate", "--results", str(lab), "--reps", "5")
    assert proc.returncode == 1 and (lab / "validate.jsonl").is_file()
    proc = bwlab("validate", "--results", str(lab), "--reps", "5")
    assert proc.returncode == 1 and "outside the tolerance" in proc.stderr
    assert bwlab("report", str(lab)).returncode == 0


def test_tolerance() -> None:
    assert validate.within(50.0, 59.9) and not validate.within(50.0, 60.1)
    assert validate.within(10.0, 12.9) and not validate.within(10.0, 13.1)
    assert validate.within(0.0, 3.0) and not validate.within(0.0, 3.5)


def R(doc: dict[str, object]) -> Result:
    return Result.from_json(doc, "test")


def _meta_only(label: str, target: str, hz: int) -> Result:
    return R({"schema": "bwlab-result/2", "scenario": "table2", "status": "ok",
              "meta": {"label": label, "target": target, "hz": hz}, "cases": []})  # fmt: skip


def _timerlat_doc(label: str, target: str, hz: int, samples: list[int]) -> dict[str, object]:
    return {"schema": "bwlab-result/1", "scenario": "timerlat", "status": "ok",
            "meta": {"label": label, "target": target, "hz": hz},
            "cases": [{"case": "default", "settings": {"workload": ["cglat", "-b", "2", "-s", "1000", "-d", "10"]},
                       "reps": [{"rep": 0, "samples_us": samples}]}]}  # fmt: skip


def test_timer_latency_from_a_timerlat_result() -> None:
    doc = _timerlat_doc("guest-baseline", "guest", 250, [1040, 1065, 1200, 4000])
    # beyond the 1 ms asked for and the 50 us timer slack, in ns, never negative
    assert sim.timer_latency(R(doc), "x") == (0, 15_000, 150_000, 2_950_000)
    with pytest.raises(BwlabError, match=r"x: not a timerlat result"):
        sim.timer_latency(_meta_only("host", "host", 250), "x")
    with pytest.raises(BwlabError, match=r"x: the timerlat result has no samples"):
        sim.timer_latency(R(_timerlat_doc("host", "host", 250, [])), "x")


def test_validate_uses_the_timerlat_of_the_same_machine() -> None:
    lats = [R(_timerlat_doc("host", "host", 250, [1100])), R(_timerlat_doc("guest-baseline", "guest", 250, [1100])),
            R(_timerlat_doc("guest-baseline-hz1000", "guest", 1000, [1100]))]  # fmt: skip

    def pick(label: str, target: str, hz: int) -> object:
        found = validate.measured_for(_meta_only(label, target, hz), lats)
        return None if found is None else found.meta.label

    assert pick("guest-patched-all", "guest", 250) == "guest-baseline"
    assert pick("guest-patched-slush-hz1000", "guest", 1000) == "guest-baseline-hz1000"
    assert pick("host", "host", 250) == "host"
    assert pick("guest-baseline-hz300", "guest", 300) is None
    # one per boot: pooled, repetitions side by side
    boots = [R(_noise_doc("guest-baseline", 0.1, [5], [float(i)])) for i in range(3)]
    for b in boots:
        b.meta.target = "guest"
    pooled = validate.measured_for(_meta_only("guest-patched-all", "guest", 250), boots)
    assert pooled is not None and pooled.meta.label == "guest-baseline x3"
    assert sim.machine_noise(pooled, "x").latency_ns == (0, 1000, 2000)


def test_sim_options_need_the_sim_target(tmp_path: Path) -> None:
    proc = bwlab("run", "table2", "--target", "host", "--tick", "random", "--out", str(tmp_path))
    assert proc.returncode == 1
    assert proc.stderr.strip() == "bwlab: error: --tick applies to --target sim only"


def test_wakelat_scenarios_in_the_simulator(tmp_path: Path) -> None:
    # the host test's scenario, unchanged (the model has no custom slices: slice_us is a no-op)
    text = (DATA / "wakelat-quota.toml").read_text()
    path = _scenario(tmp_path, text, "wl.toml")
    proc = bwlab("run", str(path), "--target", "sim", "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    m = json.loads((tmp_path / "out" / "wl-sim-mainline.json").read_text())["cases"][0]["reps"][0]["metrics"]
    assert 80 <= m["rps_achieved"] <= 120 and m["request_p50_us"] >= 5000
    path.write_text(text.replace("poisson = true", "poisson = true\nbatch = 4"))
    proc = bwlab("run", str(path), "--target", "sim", "--out", str(tmp_path / "out"))
    assert proc.returncode == 1
    assert "wakelat with batched posts (batch = 4) is not modelled by the simulator" in proc.stderr


def _noise_doc(label: str, pct: float, bursts: list[int], late: list[float] | None = None) -> dict[str, object]:
    stdout = json.dumps({"workload": "noise", "bursts_us": bursts, "timer_late_us": late or [0.0, 20.0]})
    rep = {"rep": 0, "metrics": {"uncharged_pct": pct}, "raw": {"stdout": stdout}}
    return {"schema": "bwlab-result/1", "scenario": "noise", "description": "", "status": "ok",
            "meta": {"label": label, "target": "host", "hz": 250},
            "cases": [{"case": "default", "reps": [rep]}]}  # fmt: skip


def test_machine_noise_from_a_noise_result() -> None:
    machine = sim.machine_noise(R(_noise_doc("host", 1.5, [100, 0, 2000])), "x")
    assert machine.other_pct == 1.5 and machine.bursts_ns == (100_000, 2_000_000)  # ns; a 0 us burst is no burst
    many = sim.machine_noise(R(_noise_doc("host", 1.0, list(range(1, 10_001)))), "x").bursts_ns
    assert len(many) == sim.OTHER_SAMPLES and many[0] == 1000 and many[-1] > 9_000_000  # thinned evenly
    late = sim.machine_noise(R(_noise_doc("host", 1.0, [5], [0.0, 12.5, 3300.0])), "x").latency_ns
    assert late == (0, 12_500, 3_300_000)
    with pytest.raises(BwlabError, match=r"x: not a noise result"):
        sim.machine_noise(R(_timerlat_doc("host", "host", 250, [1])), "x")
    with pytest.raises(BwlabError, match=r"x: the noise result has an uncharged share but no burst sizes"):
        sim.machine_noise(R(_noise_doc("host", 1.0, [])), "x")
    doc = _noise_doc("host", 1.0, [5])
    doc["cases"][0]["reps"][0]["raw"]["stdout"] = "garbage"  # type: ignore[index]
    with pytest.raises(BwlabError, match=r"x: noise output is not its JSON document"):
        sim.machine_noise(R(doc), "x")
    with pytest.raises(BwlabError, match=r"other work must take 0\.\.50 %"):
        sim.SimTarget(other_pct=60.0, other_bursts_ns=(1000,))


def test_other_work_takes_its_share_and_is_not_charged() -> None:
    # one unlimited CPU-bound thread per CPU; other work measured at 10 % in 1-3 ms bursts
    spec = scenario.load(scenario.find("table2")).resolve(2)[0]
    assert spec.quota_us is None
    target = sim.SimTarget(other_pct=10.0, other_bursts_ns=(1_000_000, 3_000_000), other_source="test")
    cfg = sim.config(spec, target, 0)
    other = [t for t in cfg["threads"] if t["group"] == len(cfg["groups"]) - 1]
    assert cfg["groups"][-1]["quota_ns"] is None and [t["cpu"] for t in other] == [0, 1]
    assert other[0]["behavior"]["on"] == {"empirical": [1e6, 3e6]}
    assert other[0]["behavior"]["off"]["exp"] == pytest.approx(2e6 * 90 / 10)
    out = sim.simulate_many([cfg])[0]
    used = out["groups"][0]["usage_ns"] / out["duration_ns"] / 2
    assert 0.87 <= used <= 0.93, used  # the group ran 90 % of its CPUs
    plain = sim.simulate_many([sim.config(spec, sim.SimTarget(), 0)])[0]
    assert plain["groups"][0]["usage_ns"] == 2 * plain["duration_ns"]  # without: all of them


def test_validate_carries_the_noise_of_the_same_machine(tmp_path: Path) -> None:
    lab = tmp_path / "lab"
    lab.mkdir()
    doc = {"schema": "bwlab-result/1", "scenario": "table2", "description": "", "status": "ok",
           "meta": {"target": "host", "label": "host", "hz": 250, "vcpus": 2},
           "cases": [{"case": "10ms", "reps": [{"metrics": {"throttled_pct": 45.0}}]}]}  # fmt: skip
    (lab / "table2-host.json").write_text(json.dumps(doc))
    (lab / "noise-host.json").write_text(json.dumps(_noise_doc("host", 2.0, [500, 1500])))
    timerlat = {"schema": "bwlab-result/1", "description": "", "status": "ok",
                **_timerlat_doc("host", "host", 250, [1100])}  # fmt: skip
    (lab / "timerlat-host.json").write_text(json.dumps(timerlat))
    rows, path = validate.validate(lab, tmp_path / "v", reps=3)
    # the noise probe's interrupt lateness is preferred to the timerlat sleeper's
    assert rows and all(r["other_work"] == "noise-host (2.00 %)" and r["timer_latency"] == "noise-host" for r in rows)
    assert "noise-host (2.00 %)" in path.read_text()
    rows, _ = validate.validate(lab, tmp_path / "v", reps=3, use_noise=False)
    assert all(r["other_work"] == "none" and r["timer_latency"] == "timerlat-host" for r in rows)
    rows, _ = validate.validate(lab, tmp_path / "v", reps=3, use_latency=False)
    assert all(r["other_work"] == "noise-host (2.00 %)" and r["timer_latency"] == "none" for r in rows)
    # the probe the lab run made in its own boot comes first
    before = _noise_doc("x", 0.5, [300], [7.0])["cases"][0]["reps"][0]  # type: ignore[index]
    after = _noise_doc("x", 1.5, [300], [9.0])["cases"][0]["reps"][0]  # type: ignore[index]
    probes = [{"metrics": p["metrics"], "stdout": p["raw"]["stdout"]} for p in (before, after)]
    doc["meta"]["noise"] = [*probes, {"error": "noise: timed out", "stdout": ""}]  # type: ignore[index]
    (lab / "table2-host.json").write_text(json.dumps(doc))
    rows, _ = validate.validate(lab, tmp_path / "v", reps=3)
    # both probes pooled (the failed one left out): 1.0 % of other work
    assert all(r["other_work"] == "noise-in-run (1.00 %)" and r["timer_latency"] == "noise-in-run" for r in rows)
    doc["meta"]["noise"] = probes[0]  # results of 2026-11-21 kept one probe, not a list
    (lab / "table2-host.json").write_text(json.dumps(doc))
    rows, _ = validate.validate(lab, tmp_path / "v", reps=3)
    assert all(r["other_work"] == "noise-in-run (0.50 %)" for r in rows)


def test_over_delivery_is_the_most_any_window_of_periods_ran_over_its_quota() -> None:
    quota_us = 10_000
    per_period = [99e6, 10e6, 10e6, 25e6, 5e6, 10e6]  # ns on 2 CPUs; the first row is partial, left out
    rows = [{"cpus": [[u / 2, 0, 0, 0], [u / 2, 0, 0, 0]]} for u in per_period]
    got = sim.over_delivery(rows, quota_us)
    assert got["max_usage_per_quota_1"] == 2.5
    assert "max_usage_per_quota_10" not in got  # five whole periods make no window of ten
    usage = per_period[1:] + per_period * 3  # 23 whole periods, the 99 ms one among them twice
    best = max(sum(usage[i : i + 10]) for i in range(len(usage) - 9))
    longer = sim.over_delivery(rows * 4, quota_us)
    assert longer["max_usage_per_quota_10"] == pytest.approx(best / 10 / 10e6)
    assert longer["max_usage_per_quota_1"] == 9.9


def test_burst_table_pivots_policies_and_bursts_by_period(tmp_path: Path) -> None:
    """scripts/burst_table.py on real simulator results: a row per policy and burst, a column
    per period, each cell the mean (stdev) of that case's repetitions."""
    for policy in ("mainline", "slush-clip"):
        proc = bwlab("run", "burst-vs-slush", "--target", "sim", "--policy", policy, "--reps", "2",
                     "--duration", "2", "--out", str(tmp_path), timeout=120)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
    table = subprocess.run([sys.executable, str(REPO / "scripts" / "burst_table.py"), str(tmp_path)],
                           capture_output=True, text=True, check=True).stdout  # fmt: skip
    docs = {d.meta.get("policy"): d for d in results.load_dir(tmp_path)}
    for policy, burst in (("mainline", "none"), ("mainline", "1tick"), ("slush-clip", "none")):
        (line,) = [ln for ln in table.splitlines() if ln.startswith(f"{policy}, burst {burst} ")]
        case = next(c for c in docs[policy].cases if c.case == f"10ms-{burst}")
        mean = statistics.fmean(float(r.metrics["throttled_pct"] or 0) for r in case.reps)
        assert line.split()[-2] == f"{mean:.2f}"  # the 10 ms column, last
    other = tmp_path / "other"  # results, but of another scenario: one line, exit 1
    ran = bwlab("run", "table2", "--target", "sim", "--reps", "1", "--duration", "1", "--out", str(other))
    assert ran.returncode == 0, ran.stderr
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "burst_table.py"), str(other)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1 and "no results of" in proc.stderr
