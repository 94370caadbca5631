"""The exporter's watcher and collector on a fake cgroup v2 tree (the real kernel, a real
Prometheus server and promtool: tests/test_exporter_real.py).

Contract: every limited group is read each round; one whose nr_throttled moved turns hot (at
most max_hot); the detector's per-period verdicts become counters with labels that join
cAdvisor's (id = the cgroup path), and every period it did not watch is counted once as a
window of the kernel's counters, so the counters cover every period; a group removed is gone
from the next scrape; a malformed file counts an error and is logged once."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from bwlab import periods
from bwlab.commands.exporter import parse_listen
from bwlab.errors import BwlabError
from bwlab.live import diagnose, exporter
from bwlab.live.groups import Hierarchy

POD = "0b9c3c2e-4b8f-4c9e-9a53-2f3c4d5e6f70"


def _stat(
    directory: Path,
    periods_n: int,
    throttled: int,
    usage_us: int = 0,
    throttled_us: int = 0,
    bursts: tuple[int, int] = (0, 0),
) -> None:
    (directory / "cpu.stat").write_text(
        f"usage_usec {usage_us}\nuser_usec 0\nsystem_usec 0\nnr_periods {periods_n}\nnr_throttled {throttled}\n"
        f"throttled_usec {throttled_us}\nnr_bursts {bursts[0]}\nburst_usec {bursts[1]}\n"
    )


def _tree(root: Path) -> dict[str, Path]:
    dirs = {"pod": root / "kubepods" / f"pod{POD}", "svc": root / "system.slice" / "a.service"}
    for name, d in dirs.items():
        d.mkdir(parents=True)
        (d / "cpu.max").write_text("20000 10000\n" if name == "pod" else "50000 100000\n")
        (d / "cpu.max.burst").write_text("0\n")
        _stat(d, 10, 0)
    for parent in ("kubepods", "system.slice"):
        (root / parent / "cpu.max").write_text("max 100000\n")
    return dirs


def _watcher(root: Path, max_hot: int = 4) -> tuple[exporter.Watcher, list[str]]:
    logged: list[str] = []
    facts = diagnose.Facts(ncpu=2, hz=250, slice_us=5000, threads=0, mean_cpus=0.0)
    return exporter.Watcher(Hierarchy(2, root), 1.0, max_hot, facts, logged.append), logged


def _scrape(watcher: exporter.Watcher) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(exporter.BwlabCollector(watcher))
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}  # fmt: skip


def test_groups_turn_hot_when_they_throttle_and_vanish_when_removed(tmp_path: Path) -> None:
    dirs = _tree(tmp_path)
    watcher, logged = _watcher(tmp_path)
    watcher.coarse_round()
    assert set(watcher.tracked) == {f"/kubepods/pod{POD}", "/system.slice/a.service"}
    assert watcher.hot_count() == 0
    _stat(dirs["pod"], 20, 3)
    watcher.coarse_round()
    assert watcher.tracked[f"/kubepods/pod{POD}"].hot is not None
    assert watcher.tracked["/system.slice/a.service"].hot is None
    assert watcher.tracked[f"/kubepods/pod{POD}"].hot.interval_s == 0.001  # type: ignore[union-attr]
    metrics = _scrape(watcher)
    pod_labels = (("container_id", ""), ("id", f"/kubepods/pod{POD}"), ("pod_uid", POD))
    assert metrics[("bwlab_watched_periods_total", pod_labels)] == 0
    # the 10 periods before it turned hot: counted, as a window of the kernel's counters
    assert metrics[("bwlab_periods_total", pod_labels)] == 10
    assert metrics[("bwlab_estimated_throttled_periods_total", (*pod_labels, ("verdict", "below_quota")))] == 3
    assert metrics[("bwlab_cfs_throttled_periods_total", pod_labels)] == 3  # the kernel's, as cAdvisor has it
    assert metrics[("bwlab_limited_cgroups", ())] == 2 and metrics[("bwlab_hot_cgroups", ())] == 1
    # the service never throttled, so was never watched: no series of its own (all would be 0)
    assert not any(dict(lv).get("id") == "/system.slice/a.service" for _, lv in metrics)
    # removed: gone from the watcher and from the next scrape (on cgroupfs the next read fails
    # with ENODEV; a plain file kept open reads on, so here the next discovery finds it gone)
    for f in dirs["svc"].iterdir():
        f.unlink()
    dirs["svc"].rmdir()
    watcher.discover()
    assert "/system.slice/a.service" not in watcher.tracked
    assert not any(labels and dict(labels).get("id") == "/system.slice/a.service" for _, labels in _scrape(watcher))
    # malformed: an error counted, one log line however often it is read
    (dirs["pod"] / "cpu.stat").write_text("nr_periods lots\n")
    watcher.coarse_round()
    watcher.coarse_round()
    assert _scrape(watcher)[("bwlab_errors_total", (("kind", "read"),))] == 2
    assert len(logged) == 1 and f"/kubepods/pod{POD}" in logged[0]


def test_every_period_is_counted_once_watched_or_as_a_window(tmp_path: Path) -> None:
    """Between hot spells the kernel's counters classify what the detector did not: the
    periods before the group turned hot (their usage and throttled time fit the quota: below),
    none while it is hot (its samples are the detector's), and after it cooled the rest less
    what the detector counted (here over-use: at). The totals are the kernel's deltas."""
    dirs = _tree(tmp_path)
    path = f"/kubepods/pod{POD}"
    watcher, _ = _watcher(tmp_path)
    watcher.facts = dataclasses.replace(watcher.facts, ncpu=4)  # a 2-CPU quota on 4 CPUs: it can want more
    watcher.coarse_round()  # 10 periods: where counting starts
    _stat(dirs["pod"], 20, 3, usage_us=150_000, throttled_us=10_000)  # 16 % of 10 x 20 ms: fits
    watcher.coarse_round()
    tr = watcher.tracked[path]
    assert tr.hot is not None and (tr.counts.estimated_periods, tr.counts.estimated_below) == (10, 3)
    _stat(dirs["pod"], 30, 5, usage_us=300_000, throttled_us=20_000)
    watcher.coarse_round()  # hot: nothing estimated
    assert tr.counts.estimated_periods == 10
    analysis = periods.Analysis(tr.group.effective, 0.001)
    for k in range(4):  # what the detector classified of those periods: 2 throttled at quota
        analysis.periods.append(periods.Period(k * 0.01, (k + 1) * 0.01, 1, 20_000, k % 2, 1000.0 * (k % 2), 0,
                                               "at" if k % 2 else ""))  # fmt: skip
    watcher._count(tr, analysis, None)
    tr.hot.close()
    tr.hot = None
    watcher.hot.pop(path)
    # the rest, 30 - 10 - 4 = 16 periods and 9 - 3 - 2 = 4 throttled, ran 1.5 quotas each: at quota
    _stat(
        dirs["pod"],
        40,
        9,
        usage_us=150_000 + 80_000 + 16 * 30_000,
        throttled_us=10_000 + 2_000 + 40_000,
        bursts=(7, 12_500),
    )
    watcher.coarse_round()
    c = tr.counts
    assert (c.watched_periods, c.estimated_periods, c.estimated_below, c.estimated_at) == (4, 26, 3, 4)
    metrics = _scrape(watcher)
    lv = (("container_id", ""), ("id", path), ("pod_uid", POD))
    assert metrics[("bwlab_periods_total", lv)] == 30  # the kernel's 40 - 10
    below = metrics[("bwlab_throttled_periods_total", (*lv, ("verdict", "below_quota")))]
    at = metrics[("bwlab_throttled_periods_total", (*lv, ("verdict", "at_quota")))]
    assert (below, at) == (3, 6) and below + at == 9  # every throttle the kernel counted
    assert metrics[("bwlab_cfs_periods_total", lv)] == 40 and metrics[("bwlab_cpu_usage_seconds_total", lv)] == 0.71
    # the burst's own counters (cpu.stat nr_bursts, burst_usec), as read last
    assert (metrics[("bwlab_cfs_bursts_total", lv)], metrics[("bwlab_cfs_burst_seconds_total", lv)]) == (7, 0.0125)


def test_max_hot_caps_the_groups_sampled_finely(tmp_path: Path) -> None:
    dirs = _tree(tmp_path)
    watcher, _ = _watcher(tmp_path, max_hot=1)
    watcher.coarse_round()
    for d in dirs.values():
        _stat(d, 20, 5)
    watcher.coarse_round()
    assert watcher.hot_count() == 1


def test_verdicts_become_counters() -> None:
    """Two periods below quota and one at, each throttled 1 ms; the debt is the usage beyond
    the quota in throttled periods."""
    from bwlab.live.groups import LiveGroup
    from bwlab.live.identity import identify
    from bwlab.periods import Limit

    limit = Limit(20000, 10000)
    group = LiveGroup(f"/kubepods/pod{POD}", Hierarchy(2, Path("/nonexistent")), limit, limit,
                      f"/kubepods/pod{POD}", identify(f"/kubepods/pod{POD}"))  # fmt: skip
    analysis = periods.Analysis(limit, 0.001)
    for usage, verdict in ((21000, "below"), (19000, "below"), (20000, "at"), (5000, "")):
        analysis.periods.append(periods.Period(0, 0.01, 1, usage, 1 if verdict else 0, 1000 if verdict else 0,
                                               0, verdict))  # fmt: skip
    watcher, _ = _watcher(Path("/nonexistent"))
    tracked = exporter.Tracked(group, last_hot=0.0)  # watched (a group never watched has no series)
    watcher.tracked[group.path] = tracked
    watcher._count(tracked, analysis, None)
    c = tracked.counts
    assert (c.watched_periods, c.below, c.at) == (4, 2, 1)
    assert c.below_s == pytest.approx(0.002) and c.at_s == pytest.approx(0.001)
    assert c.debt_s == pytest.approx(0.001)
    assert c.causes.get("tick-overrun") == 3 and c.recommended_burst_us == 8000
    metrics = _scrape(watcher)
    lv = (("container_id", ""), ("id", group.path), ("pod_uid", POD))
    assert metrics[("bwlab_throttled_periods_total", (*lv, ("verdict", "below_quota")))] == 2
    assert metrics[("bwlab_throttled_seconds_total", (*lv, ("verdict", "at_quota")))] == pytest.approx(0.001)
    assert metrics[("bwlab_recommended_burst_seconds", lv)] == pytest.approx(0.008)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("127.0.0.1:9860", ("127.0.0.1", 9860)), (":9860", ("0.0.0.0", 9860)), ("[::1]:80", ("::1", 80))],
)
def test_listen(value: str, expected: tuple[str, int]) -> None:
    assert parse_listen(value) == expected


@pytest.mark.parametrize("value", ["9860", "localhost:9860", "1.2.3.4:0", "1.2.3.4:http"])
def test_bad_listen(value: str) -> None:
    with pytest.raises(BwlabError, match="--listen"):
        parse_listen(value)


class _Clock:
    def __init__(self) -> None:
        self.t, self.cpu = 0.0, 0.0


def test_over_its_cpu_budget_no_group_turns_hot_and_the_least_recently_watched_goes_first(tmp_path: Path) -> None:
    """The exporter's CPU use beyond its budget (a token bucket of 1 % of a CPU): a throttling
    group stays coarse; once the budget has accrued again, of two throttling groups with one
    place, the one never watched turns hot before the one watched a moment ago."""
    dirs = _tree(tmp_path)
    clock = _Clock()
    budget = exporter.CpuBudget(0.01, lambda: clock.t, lambda: clock.cpu)
    assert budget.balance == pytest.approx(0.01 * exporter.BUCKET_S)  # full at the start
    facts = diagnose.Facts(ncpu=2, hz=250, slice_us=5000, threads=0, mean_cpus=0.0)
    watcher = exporter.Watcher(Hierarchy(2, tmp_path), 1.0, 1, facts, budget=budget)
    watcher.coarse_round()
    clock.t, clock.cpu = 60.0, 6.0  # 10 % of a CPU for a minute
    _stat(dirs["pod"], 20, 3)
    watcher.coarse_round()
    cap = 0.01 * exporter.BUCKET_S
    assert budget.balance == pytest.approx(cap + 0.6 - 6) and watcher.hot_count() == 0
    clock.t = 600.0  # idle since: the 5.4 s of CPU beyond the budget repaid at 1 % in 540 s
    svc = "/system.slice/a.service"
    watcher.tracked[svc].last_hot = 0.0  # watched before; the pod never was
    _stat(dirs["pod"], 40, 6)
    _stat(dirs["svc"], 40, 6)
    watcher.coarse_round()
    assert 0 < budget.balance <= cap
    assert watcher.tracked[f"/kubepods/pod{POD}"].hot is not None and watcher.tracked[svc].hot is None
    _stat(dirs["pod"], 60, 9)
    _stat(dirs["svc"], 60, 9)
    watcher.coarse_round()  # the pod keeps its place (extended) while within the budget
    pod = watcher.tracked[f"/kubepods/pod{POD}"]
    # a hot window runs on the real clock (not the budget's): on a machine up < 600 s, clock.t
    # (the budget's) was ahead of it (the cold CI of 5ae8f38, a new machine)
    assert pod.hot is not None and pod.hot.until > time.monotonic() and watcher.hot_count() == 1
    clock.cpu += 1.0  # a second of CPU at once: over the budget, the hot pod cools at the next analysis
    watcher.coarse_round()
    assert budget.balance < 0 and pod.hot is not None and pod.hot.until <= time.monotonic()


def test_a_hot_group_cools_at_the_first_analysis_over_the_budget(tmp_path: Path) -> None:
    """Between two coarse rounds (5 s apart at the defaults) the budget is read at each analysis
    (every second): once it is spent every hot group cools there, its samples classified
    first, instead of sampling on until the next coarse round; within it, they stay hot."""
    dirs = _tree(tmp_path)
    clock = _Clock()
    budget = exporter.CpuBudget(0.01, lambda: clock.t, lambda: clock.cpu)
    facts = diagnose.Facts(ncpu=2, hz=250, slice_us=5000, threads=0, mean_cpus=0.0)
    watcher = exporter.Watcher(Hierarchy(2, tmp_path), 5.0, 4, facts, budget=budget)
    watcher.coarse_round()
    _stat(dirs["pod"], 20, 3)
    watcher.coarse_round()
    pod = watcher.tracked[f"/kubepods/pod{POD}"]
    assert pod.hot is not None and watcher.hot_count() == 1
    now = time.monotonic()
    watcher.analysis_round(now)  # within the budget: hot on
    assert pod.hot is not None
    clock.t, clock.cpu = 1.0, 0.2  # a second at 20 % of a CPU: the 0.1 s bucket spent
    watcher.analysis_round(now + 1)
    assert budget.balance < 0 and pod.hot is None and watcher.hot_count() == 0
