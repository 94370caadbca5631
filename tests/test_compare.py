"""bwlab compare: ratio intervals on known samples, the significance call, and the command on
real result files (made by the simulator target)."""

from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path

import pytest

from bwlab import stats
from bwlab.analysis import compare

from conftest import bwlab


def test_t_quantiles_match_the_tables() -> None:
    for df, t in ((1, 12.7062), (2, 4.3027), (4, 2.7764), (10, 2.2281), (30, 2.0423), (1e7, 1.9600)):
        assert stats.t_quantile(0.975, df) == pytest.approx(t, abs=1e-4)
    assert stats.t_quantile(0.5, 3) == pytest.approx(0.0, abs=1e-6)


def test_ratio_interval_is_fiellers() -> None:
    a, b = [10.0, 11.0, 9.0, 10.0], [20.0, 21.0, 19.0, 20.0]
    rho, lo, hi = stats.ratio_interval(a, b)
    # by hand: means 10 and 20, squared standard errors va = vb = (2/3)/4 = 1/6, Welch df = 6,
    # t = 2.4469, g = t^2 va / 100; limits (rho +- t/10 sqrt(vb (1 - g) + 4 va)) / (1 - g)
    va = vb = statistics.variance(a) / 4
    t = stats.t_quantile(0.975, 6)
    g = t * t * va / 100
    half = t / 10 * math.sqrt(vb * (1 - g) + 4 * va)
    assert rho == 2.0
    assert (lo, hi) == (pytest.approx((2 - half) / (1 - g)), pytest.approx((2 + half) / (1 - g)))
    assert 1.79 < lo < 1.80 and 2.24 < hi < 2.25


def test_not_significant_when_the_interval_holds_one() -> None:
    same = compare.compare_values("s", "l", "c", "m", [10, 12, 11, 9], [11, 10, 12, 10])
    assert same.kind == "ratio" and same.lo < 1 < same.hi and not same.significant
    assert same.verdict() == "not significant"
    apart = compare.compare_values("s", "l", "c", "m", [10, 12, 11, 9], [20, 22, 21, 19])
    assert apart.significant and apart.verdict() == "significant" and apart.lo > 1
    # a reference that cannot be told from 0 gives no ratio at all: unbounded, not significant
    noisy = compare.compare_values("s", "l", "c", "m", [-1, 1, 0.5], [5, 6, 7])
    assert noisy.kind == "ratio" and math.isinf(noisy.lo) and not noisy.significant
    assert "no interval: A's mean cannot be told from 0" in noisy.interval()
    # the range reads as a range: "[0.9 to 1.1]", never "[-7.353-9.994]"
    assert re.fullmatch(r"\d\.\d{3}x \[\d\.\d{3} to \d\.\d{3}\]", same.interval()), same.interval()
    # non-negative samples whose ratio interval reaches below 0: said in words
    low = compare.compare_values("s", "l", "c", "m", [0.1, 3.0, 0.2], [5.0, 6.0, 7.0])
    assert low.kind == "ratio" and (low.lo < 0 or math.isinf(low.lo)) and "no interval" in low.interval()


def test_difference_when_the_reference_is_zero() -> None:
    zero = compare.compare_values("s", "l", "c", "throttled_pct", [0, 0, 0], [0.2, 0.3, 0.25, 0.3, 0.2, 0.25])
    assert zero.kind == "diff" and zero.value == pytest.approx(0.25) and zero.lo > 0.19 and zero.significant
    # three spread values: t(2 df) = 4.30 makes the interval reach below 0
    wide = compare.compare_values("s", "l", "c", "throttled_pct", [0, 0, 0], [0.2, 0.5, 0.3])
    assert wide.kind == "diff" and wide.lo < 0 < wide.hi and not wide.significant
    both = compare.compare_values("s", "l", "c", "throttled_pct", [0, 0], [0, 0])
    assert both.kind == "diff" and both.value == 0 and not both.significant


def test_too_few_repetitions() -> None:
    one = compare.compare_values("s", "l", "c", "m", [1.0], [2.0, 3.0])
    assert one.kind == "n/a" and not one.significant and "too few" in one.verdict()


def test_compare_two_result_directories(tmp_path: Path) -> None:
    """Two simulated table2 runs at 10 ms: mainline vs the series' `all` policy. The model
    throttles ~50 % of periods under mainline and ~0 under `all`: significant; the same
    policy twice with other seeds: not significant."""
    for name, policy, seed in (("a", "mainline", 0), ("b", "all", 0), ("c", "mainline", 7)):
        proc = bwlab("run", "table2", "--target", "sim", "--policy", policy, "--seed", str(seed), "--reps", "4",
                     "--duration", "2", "--out", str(tmp_path / name))  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        # the directories' files must pair by name: one label per run
        for f in (tmp_path / name).glob("table2-sim-*.json"):
            f.rename(f.with_name("table2-sim.json"))
    proc = bwlab("compare", str(tmp_path / "a"), str(tmp_path / "b"), "--metric", "throttled_pct", "--json", "-")
    assert proc.returncode == 0, proc.stderr
    rows = {r["case"]: r for r in map(json.loads, proc.stdout.splitlines())}
    assert rows["10ms"]["significant"] and rows["10ms"]["hi"] < 0.1  # all / mainline
    assert "unlimited" not in rows or not rows["unlimited"]["significant"]
    proc = bwlab("compare", str(tmp_path / "a"), str(tmp_path / "c"), "--metric", "throttled_pct", "--json", "-")
    rows = {r["case"]: r for r in map(json.loads, proc.stdout.splitlines())}
    assert not rows["10ms"]["significant"], rows["10ms"]
    table = bwlab("compare", str(tmp_path / "a" / "table2-sim.json"), str(tmp_path / "b" / "table2-sim.json"))
    assert table.returncode == 0 and "significant" in table.stdout + table.stderr


def test_compare_bad_input_is_one_line(tmp_path: Path) -> None:
    for args, message in ((["x"], "at least two"), ([str(tmp_path / "nope"), str(tmp_path)], "no such file"),
                          ([str(tmp_path), str(tmp_path)], "no result files")):  # fmt: skip
        proc = bwlab("compare", *args)
        assert proc.returncode == 1 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_host_and_sim_results_pair_by_scenario_and_metrics_are_checked(tmp_path: Path) -> None:
    """Directories whose files are named by their targets (table2-sim-mainline.json against
    table2-sim-all.json) pair by scenario; an unknown --metric is an error listing the known."""
    for name, policy in (("a", "mainline"), ("b", "all")):
        proc = bwlab("run", "table2", "--target", "sim", "--policy", policy, "--reps", "2", "--duration", "1",
                     "--out", str(tmp_path / name))  # fmt: skip
        assert proc.returncode == 0, proc.stderr
    proc = bwlab("compare", str(tmp_path / "a"), str(tmp_path / "b"), "--metric", "throttled_pct", "--json", "-")
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert rows and {(r["a"], r["b"]) for r in rows} == {("sim-mainline", "sim-all")}
    proc = bwlab("compare", str(tmp_path / "a"), str(tmp_path / "b"), "--metric", "throttled")
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "--metric throttled: not a metric of these results (they have: " in proc.stderr
    assert "throttled_pct" in proc.stderr
