"""The workload registry and the package's layering: a kind is one module, found without a
list; every metric a kind's output gives is declared by it (so the report shows it); imports
run one way (commands -> analysis -> targets -> scenario -> workloads, kernel -> core)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from bwlab import workloads
from bwlab.analysis import report
from bwlab.paths import PACKAGE_DIR, SCENARIO_DIR, WORKLOAD_SRC
from bwlab.workloads import programs
from bwlab.workloads.base import COMMON_METRICS, LATENCY_POINTS, Resolved

# One output per kind that has a program, as that program prints it (samples trimmed).
PCT = {p: float(i) for i, p in enumerate(("p50", "p75", "p90", "p95", "p99", "p99_5", "p99_9", "max"))}
OUTPUTS = {
    "sysbench-cpu": "CPU speed:\n    events per second:   345.67\n    total number of events:   3457\n",
    "spin-cpu": json.dumps(
        {"events": 2770, "events_per_s": 1384.5, "duration_s": 2.0, "threads": 2, "per_thread": [1388, 1382]}
    ),
    "sysbench-threads": "    total time:   2.0s\n    total number of events:   500\n",
    "hackbench": "Running in process mode\nTime: 1.234\n",
    "perf-pipe": "# Running 'sched/pipe' benchmark:\n# Executed 20000 pipe operations between two processes\n\n"
    "     Total time: 0.189 [sec]\n\n       9.474350 usecs/op\n         105548 ops/sec\n",
    "cglat": json.dumps({"workload": "cglat", "samples_us": [10100, 10200]}),
    "cgstress": json.dumps(
        {
            k: 1
            for k in (
                "valid_writes",
                "invalid_writes",
                "einval_kept",
                "violations",
                "mkdir",
                "rmdir",
                "moves",
                "hotplug",
                "hotplug_errors",
                "scaled_by_timer",
                "lags_writes",
            )
        }
    ),
    "wakelat": json.dumps(
        {
            "rps": 10,
            "completed": 100,
            "dropped": 0,
            "wakeup_us": {"n": 2, **PCT},
            "request_us": {"n": 2, **PCT},
            "samples_us": [1, 2],
        }
    ),
    "funcs": json.dumps(
        {
            "offered": 10,
            "completed": 10,
            "unfinished": 0,
            "throughput_rps": 5,
            "duration_s": 2,
            "nvcsw": 4,
            "nivcsw": 2,
            "stime_s": 0.1,
            "latency_us": {"n": 2, **PCT},
            "schedstat": {"sched_count": 9, "run_delay_s": 0.5},
            "samples_us": [1],
            "per_function": [
                {"requests": 5, "p99_us": 10, "load_credit": 3},
                {"requests": 5, "p99_us": 20, "load_credit": -1},
            ],
        }
    ),
    "picks": json.dumps(
        {
            "workload": "picks",
            "yields": 1000,
            "duration_s": 2,
            "ns_per_yield": 50000.0,
            "switches_per_yield": 1.0,
            "yields_per_task": {"min": 10, "median": 15, "max": 20},
        }
    ),
    "noise": json.dumps(
        {
            "workload": "noise",
            "uncharged_pct": 0.5,
            "burst_us": {"n": 3, **PCT},
            "burst_mean_us": 9,
            "timer_interval_us": 997,
            "timer_late": {"n": 3, **PCT},
            "bursts_us": [1],
            "timer_late_us": [2],
        }
    ),
    "quotaflip": json.dumps({"flips": 40, "throttled_after": 3, "throttled_after_pct": 7.5}),
}


def test_every_kind_is_found_without_a_list() -> None:
    modules = {p.stem for p in (PACKAGE_DIR / "workloads").glob("*.py")} - {"__init__", "base", "programs"}
    assert {k.__module__.rsplit(".", 1)[-1] for k in map(type, workloads.kinds().values())} == modules
    assert workloads.get("sysbench-cpu").name == "sysbench-cpu"


@pytest.mark.parametrize("name", sorted(OUTPUTS))
def test_every_metric_a_kind_gives_is_declared(name: str) -> None:
    kind = workloads.get(name)
    metrics, _ = kind.parse(OUTPUTS[name], Resolved(name, {}))
    declared = {m.key for m in kind.metrics}
    assert metrics and set(metrics) <= declared, set(metrics) - declared
    shown = {m.key for m in report.columns()}
    assert any(k in shown for k in metrics), f"{name}: none of its metrics is a report column"


def test_every_kind_with_a_program_has_an_output_here() -> None:
    real = {n for n, k in workloads.kinds().items() if k.runs_on_real and not k.dynamic_metrics()}
    assert real == set(OUTPUTS)


def test_programs_are_ours_or_packaged() -> None:
    ours = programs.ours()
    assert set(ours) == {p.stem for p in WORKLOAD_SRC.glob("*.c")}
    for kind in workloads.kinds().values():
        for program in kind.programs:
            assert program in ours or program in programs.PACKAGED, (kind.name, program)


def test_report_columns_are_unique_and_have_headings() -> None:
    cols = report.columns()
    assert len({c.key for c in cols}) == len(cols) and all(c.heading for c in cols)
    assert {m.key for m in COMMON_METRICS if m.heading} <= {c.key for c in cols}
    assert f"wakeup_{LATENCY_POINTS[4]}_us" in {c.key for c in cols}  # wakeup p99


def test_builtin_scenarios_use_registered_kinds() -> None:
    for path in SCENARIO_DIR.glob("*.toml"):
        text = path.read_text()
        kind = text.split('kind = "', 1)[1].split('"', 1)[0]
        assert kind in workloads.kinds(), path


# The layers, lowest first: a module may import its own layer's and lower layers' modules.
LAYERS = [
    {
        "errors",
        "paths",
        "machine",
        "choices",
        "progress",
        "stats",
        "results",
        "cpustat",
        "cgroup",
        "periods",
        "schedtrace",
        "threads",
    },
    {"workloads", "kernel"},
    {"scenario"},
    {"targets"},
    {"analysis", "live"},
    {"commands"},
    {"cli"},
]


def _layer(module: str) -> int:
    top = module.split(".")[1] if module.startswith("bwlab.") else module
    for i, names in enumerate(LAYERS):
        if top in names:
            return i
    raise AssertionError(f"{module}: in no layer")


def test_imports_run_one_way() -> None:
    bad = []
    for path in PACKAGE_DIR.rglob("*.py"):
        rel = path.relative_to(PACKAGE_DIR.parent).with_suffix("")
        module = ".".join(rel.parts)
        if module in ("bwlab.__init__",) or rel.parts[1] == "_sim":
            continue
        mine = _layer(module)
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("bwlab"):
                names = [node.module] if node.module != "bwlab" else [f"bwlab.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name.startswith("bwlab.")]
            for name in names:
                if name.startswith("bwlab._sim"):
                    continue
                if _layer(name) > mine:
                    bad.append(f"{module} imports {name}")
    assert not bad, bad


def test_sim_features_match_the_model() -> None:
    """The series' sched_feat switches as Python writes them and as the Rust model knows them."""
    from bwlab.kernel import policies

    rust = (Path(__file__).resolve().parent.parent / "sim" / "src" / "config.rs").read_text()
    array = re.search(r"FEATURES: \[&str; \d+\] =\s*\[([^\]]*)\]", rust)
    assert array is not None, "sim/src/config.rs has no FEATURES array"
    assert tuple(re.findall(r'"(\w+)"', array.group(1))) == policies.FEATURES


def test_hz_values_match_the_model() -> None:
    """CONFIG_HZ values a kernel can be built with are the ones the model accepts."""
    from bwlab.kernel.build import SUPPORTED_HZ

    rust = (Path(__file__).resolve().parent.parent / "sim" / "src" / "config.rs").read_text()
    listed = re.search(r"if !\[([\d, ]+)\]\.contains\(&self\.hz\)", rust)
    assert listed is not None, "sim/src/config.rs no longer checks hz against a list"
    assert tuple(int(h) for h in listed.group(1).split(",")) == SUPPORTED_HZ
