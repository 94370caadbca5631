"""scx_bwlab (scx/), the sched_ext scheduler, for real: built from the repo for the lab's
sched_ext kernel (v7.3.4 + kernel/configs/scx.config), loaded in a host-userland TCG guest.

Contract (issue 37): with the scheduler loaded, a group at demand == quota (a busy thread per
CPU under a quota of every CPU) is throttled in no period of 100 ms; the same threads under
half that quota (twice the quota) get their quota and no more, within 1 % over 100 periods;
cpu.stat's own throttle counters stay frozen (the kernel's CFS bandwidth code does not run for
sched_ext tasks: the scheduler's counters are the record); stopped, the scheduler hands every
task back to CFS, which enforces the same cpu.max again. LAGS (-l) wakes a light
latency-aware group ahead of a heavy one while a plain group keeps its share. `bwlab run
--scheduler` runs a scenario under it, its counters the scheduler's. The loader refuses a
kernel without sched_ext and bad input with one line and a non-zero status.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from bwlab.paths import SCX_CONFIG
from bwlab.workloads import programs

from conftest import REPO, built_kernel, bwlab

pytestmark = pytest.mark.guest

SECONDS = 10  # each step: 100 periods of 100 ms


@pytest.fixture(scope="module")
def scx_key() -> str:
    return built_kernel("--baseline", "--config", str(SCX_CONFIG))


@pytest.fixture(scope="module")
def loader(scx_key: str) -> Path:
    res = bwlab("kernel", "scheduler", "--kernel", scx_key, timeout=900)
    assert res.returncode == 0, res.stderr[-2000:]
    return Path(res.stdout.strip())


@pytest.mark.untimed  # no timing in it: runs in the parallel phase (and builds the kernel there)
def test_the_loader_refuses_what_it_cannot_do(loader: Path) -> None:
    """On this host (6.18 without sched_ext) and with bad options: one line, non-zero."""
    assert not Path("/sys/kernel/sched_ext").exists()  # the host, as DEVELOPERS.md measured it
    res = subprocess.run([str(loader)], capture_output=True, text=True, timeout=30, check=False)
    assert res.returncode == 1 and res.stderr == "scx_bwlab: this kernel has no sched_ext (CONFIG_SCHED_CLASS_EXT)\n"
    bad_input = (["-s", "0"], ["-s", "5ms"], ["-i", "-3"], ["extra"], ["-l", "/tmp"], ["-l", "/sys/fs/cgroup/unified"],
                 ["-p"], ["-s"])  # fmt: skip
    for bad in bad_input:  # /sys/fs/cgroup/unified: this host's cgroup v2 root (DEVELOPERS.md)
        res = subprocess.run([str(loader), *bad], capture_output=True, text=True, timeout=30, check=False)
        assert res.returncode == 2 and res.stderr.count("\n") == 1 and res.stderr.startswith("scx_bwlab: "), (bad, res)
    # a group not made yet is said (marked once made), and is no error by itself
    res = subprocess.run([str(loader), "-l", "not-made-yet"], capture_output=True, text=True, timeout=30, check=False)
    assert res.returncode == 1 and res.stderr.splitlines() == [
        "scx_bwlab: -l not-made-yet: no such cgroup yet (marked once made)",
        "scx_bwlab: this kernel has no sched_ext (CONFIG_SCHED_CLASS_EXT)"], res.stderr  # fmt: skip
    assert subprocess.run([str(loader), "-h"], capture_output=True, timeout=30, check=False).returncode == 0


LAGS_SECONDS = 8  # each LAGS run; wakelat's first second is its warm-up


@pytest.fixture(scope="module")
def guest_checks(scx_key: str, loader: Path) -> subprocess.CompletedProcess[str]:
    """Both guest checks in one boot of the host-userland guest (a boot and a load of the
    scheduler under TCG cost about half a minute): scx/tests/guest_check.sh, then
    scx/tests/lags_check.sh, each printing its own lines."""
    tests = REPO / "scx" / "tests"
    spin, wakelat = programs.resolve("spin"), programs.resolve("wakelat")
    script = (f"bash {tests / 'guest_check.sh'} {loader} {spin} {SECONDS}; a=$?; "
              f"bash {tests / 'lags_check.sh'} {loader} {wakelat} {spin} {LAGS_SECONDS}; b=$?; "
              "exit $((a | b))")  # fmt: skip
    return bwlab("guest", "exec", "--kernel", scx_key, "--accel", "tcg", "--timeout", "400", "--", "bash", "-c",
                 script, timeout=800)  # fmt: skip


def _lines(stdout: str, tag: str, key: str) -> dict[str, dict[str, Any]]:
    """The JSON of the lines `tag` {json} by their `key`."""
    found = {}
    for line in stdout.splitlines():
        if line.startswith(tag + " "):
            doc = json.loads(line.split(" ", 1)[1])
            found[doc[key]] = doc
    return found


def test_cpu_max_is_enforced_without_throttling_what_fits(guest_checks: subprocess.CompletedProcess[str]) -> None:
    res = guest_checks
    steps = _lines(res.stdout, "scx-check", "step")
    assert set(steps) == {"loaded", "refusals", "hotplug", "hotplug-under-load", "at-quota", "twice-the-quota",
                          "stopped", "cfs-after"}, (
        res.stdout[-3000:], res.stderr[-3000:])  # fmt: skip
    assert steps["loaded"]["state"] == "enabled" and steps["loaded"]["ops"] == "bwlab"
    refusals = steps["refusals"]  # each one line, and the running scheduler untouched
    assert (
        refusals["second_rc"] == 1
        and refusals["second"].startswith("scx_bwlab: the kernel did not enable the scheduler (")
        and refusals["second"].count("\n") == 1
    ), refusals
    assert (
        refusals["nobody_rc"] == 1
        and refusals["nobody"].startswith("scx_bwlab: loading BPF programs needs root")
        and refusals["nobody"].count("\n") == 1
    ), refusals
    assert refusals["state"] == "enabled"
    hotplug = steps["hotplug"]  # a CPU off and on twice: the scheduler kept (ops.cpu_on/offline)
    assert hotplug["rc"] == 0 and hotplug["state"] == "enabled", hotplug
    assert hotplug["counts"] == {"cpus_online": 2, "cpus_offline": 2}, hotplug
    assert hotplug["online"] == f"0-{steps['at-quota']['threads'] - 1}", hotplug
    # the same with the group's threads pinned to the CPUs left: the root's shell still ran
    # while they spun (pinned: they were), and the scheduler stayed (it was ejected before)
    under_load = steps["hotplug-under-load"]
    print(f"scx hotplug under load: five 0.1 s sleeps took {under_load['sleeps_ms']} ms")
    assert under_load["state"] == "enabled" and under_load["pinned"] == 1, under_load
    assert under_load["online"] == hotplug["online"], under_load
    shares = {}
    for name in ("at-quota", "twice-the-quota"):
        s = steps[name]
        delta = {k: s["after"][k] - s["before"].get(k, 0) for k in ("nr_periods", "nr_throttled", "usage_usec")}
        shares[name] = delta["usage_usec"] / (s["quota_us"] * delta["nr_periods"])
        print(f"scx {name}: quota {s['quota_us']} us per 100 ms, {s['threads']} threads: {delta['nr_periods']} "
              f"periods, {delta['nr_throttled']} throttled, usage / (quota x periods) {shares[name]:.4f}")  # fmt: skip
        assert delta["nr_periods"] >= 0.9 * SECONDS * 10, delta  # the group's periods were counted
        assert s["cpustat_nr_throttled"] == 0  # CFS's counters frozen: the scheduler enforces
        if name == "at-quota":
            assert delta["nr_throttled"] == 0, delta
            assert shares[name] >= 0.9  # the CPUs were kept busy: nothing held back
        else:
            assert delta["nr_throttled"] >= 0.9 * delta["nr_periods"], delta
            assert 0.95 <= shares[name] <= 1.01
    assert steps["stopped"]["rc"] == 0 and steps["stopped"]["state"] == "disabled", steps["stopped"]
    # CFS again, with the group's last cpu.max (half its CPUs): throttled every period of 2 s
    print(f"scx cfs-after: nr_throttled +{steps['cfs-after']['cpustat_nr_throttled']} in 2 s")
    assert steps["cfs-after"]["cpu_max"] == f"{steps['twice-the-quota']['quota_us']} 100000"
    assert steps["cfs-after"]["cpustat_nr_throttled"] >= 10, steps["cfs-after"]


def test_lags_serves_the_light_group_first_and_the_plain_group_keeps_its_share(
    guest_checks: subprocess.CompletedProcess[str],
) -> None:
    """LAGS (-l): of two latency-aware request servers, the light one (~3 % of a CPU) is woken
    ahead of the heavy one (which wants every CPU), while a plain group of busy threads gets the
    CPU time it gets with LAGS off (scx/tests/lags_check.sh: both runs in one boot)."""
    res = guest_checks
    runs = _lines(res.stdout, "lags-check", "lags")
    assert set(runs) == {"off", "on"}, (res.stdout[-3000:], res.stderr[-3000:])
    share = {}
    for mode, doc in runs.items():
        assert doc["rc"] == 0 and doc["state"] == "enabled", doc
        used = doc["usage_us"]
        share[mode] = used["plain"] / sum(used.values())
        light, heavy = doc["light"]["wakeup_us"], doc["heavy"]["wakeup_us"]
        print(f"lags {mode}: light wakeup p50 {light['p50']} p90 {light['p90']} p95 {light['p95']} p99 {light['p99']} "
              f"us (n {light['n']}), heavy p50 {heavy['p50']} p90 {heavy['p90']} p95 {heavy['p95']} p99 {heavy['p99']} "
              f"us; CPU time light {used['light']} heavy {used['heavy']} plain {used['plain']} us "
              f"(plain {share[mode]:.3f}); kicks {doc['lags_kicks']}, picks ahead {doc['lags_picks']}")  # fmt: skip
    on = runs["on"]
    # p95, not p99: ~650 wakeups a run, and a TCG guest's own stalls (timer, vCPU) make its
    # p99 (the 7th latest): LAGS moved p99 from 6.7 to 6.2 ms in one run, from 7.6 to 1.5 in
    # the next (2026-11-28)
    assert on["light"]["wakeup_us"]["p95"] < on["heavy"]["wakeup_us"]["p95"] / 2, on
    assert abs(share["on"] - share["off"]) <= 0.05, share


def test_a_scenario_runs_under_the_scheduler(scx_key: str, loader: Path, tmp_path: Path) -> None:
    """bwlab run --scheduler: the 10 ms row of table2 (demand == quota) in the initramfs guest
    with scx_bwlab loaded before the cases; the result's throttle counters are the scheduler's
    (cpu.stat's stay frozen under sched_ext), its meta names the ops the kernel ran."""
    res = bwlab("run", str(REPO / "tests" / "data" / "table2-10ms.toml"), "--target", "guest", "--kernel", scx_key,
                "--accel", "tcg", "--scheduler", "scx_bwlab", "--out", str(tmp_path), timeout=900)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    doc = json.loads(next(tmp_path.glob("table2-10ms-*-scx_bwlab.json")).read_text())
    assert doc["status"] == "ok" and doc["meta"]["splats"] == []
    assert doc["meta"]["scheduler"] == {"loader": "scx_bwlab", "ops": "bwlab", "latency_aware_cases": []}
    metrics = doc["cases"][0]["reps"][0]["metrics"]
    print(f"scx run 10 ms: throttled {metrics['nr_throttled']:.0f} of {metrics['nr_periods']:.0f} periods "
          f"({metrics['throttled_us']:.0f} us), usage / (quota x periods) "
          f"{metrics['usage_per_period_quota']:.4f}")  # fmt: skip
    assert metrics["nr_periods"] > 200  # the scheduler's periods (CFS would count none)
    # not 0: a single throttle of 2.7-5.5 ms in about one run of ten at this 10 ms period
    # (docs/testing.md; cause not found; none at 100 ms in the guest check). 7.3.4's CFS: ~50 %.
    assert metrics["nr_throttled"] <= 3


@pytest.fixture(scope="module")
def old_sched_ext_key() -> str:
    """Debian trixie's 6.12 (its stable update of the day) with the same sched_ext config: cgroup
    callbacks, but no ops.cgroup_set_bandwidth (6.17)."""
    return built_kernel("--baseline", "--config", str(SCX_CONFIG), release="6.12")


@pytest.mark.untimed  # a count, not a time: a tenth of a CPU is overrun however busy the host
def test_without_the_bandwidth_callback_it_refuses_and_cfs_keeps_cpu_max(old_sched_ext_key: str,
                                                                           loader: Path) -> None:  # fmt: skip
    """The safety rule on a real 6.12 kernel (sched_ext with cgroup callbacks, no
    cgroup_set_bandwidth): the loader refuses in one line (a group's cpu.max would go
    unenforced: the kernel hands it to no one), and CFS keeps throttling a group over its quota."""
    script = f"bash {REPO / 'scx' / 'tests' / 'old_kernel_check.sh'} {loader} {programs.resolve('spin')}"
    res = bwlab("guest", "exec", "--kernel", old_sched_ext_key, "--accel", "tcg", "--timeout", "300", "--",
                "bash", "-c", script, timeout=600)  # fmt: skip
    steps = _lines(res.stdout, "scx-old", "step")
    assert set(steps) == {"refused", "cfs"}, (res.stdout[-3000:], res.stderr[-3000:])
    refused, cfs = steps["refused"], steps["cfs"]
    print(f"scx on 6.12: refused rc {refused['rc']}; CFS throttled the group {cfs['cfs_nr_throttled']} times in 2 s")
    assert refused["rc"] == 1 and refused["state"] == "disabled", refused
    assert refused["stderr"] == ("scx_bwlab: this kernel does not hand cpu.max to sched_ext schedulers (no "
                                 "sched_ext_ops.cgroup_set_bandwidth, added in 6.17): tasks of groups with a "
                                 "cpu.max would run unlimited; refusing\n"), refused  # fmt: skip
    assert cfs["state"] == "disabled"
    assert cfs["cfs_nr_throttled"] >= 10, cfs  # a tenth of a CPU, one busy thread: throttled every period
