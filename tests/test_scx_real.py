"""scx_bwlab (scx/), the sched_ext scheduler, for real: built from the repo for the lab's
sched_ext kernel (v7.3.4 + kernel/configs/scx.config), loaded in a host-userland TCG guest.

Contract (issue 37): with the scheduler loaded, a group at demand == quota (a busy thread per
CPU under a quota of every CPU) is throttled in no period; the same threads under half that
quota (twice the quota) get their quota and no more, within 1 % over 100 periods; cpu.stat's
own throttle counters stay frozen (the kernel's CFS bandwidth code does not run for sched_ext
tasks: the scheduler's counters are the record); stopped, the scheduler hands every task back
to CFS, which enforces the same cpu.max again. The loader refuses a kernel without sched_ext
and bad input with one line and a non-zero status.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from bwlab.paths import SCX_CONFIG
from bwlab.workloads import programs

from conftest import REPO, bwlab

pytestmark = pytest.mark.guest

SECONDS = 10  # each step: 100 periods of 100 ms


@pytest.fixture(scope="module")
def scx_key() -> str:
    build = bwlab("kernel", "build", "--baseline", "--config", str(SCX_CONFIG), timeout=3600)
    assert build.returncode == 0, build.stderr[-2000:]
    return build.stdout.split()[0]


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
    for bad in (["-s", "0"], ["-s", "5ms"], ["-i", "-3"], ["extra"]):
        res = subprocess.run([str(loader), *bad], capture_output=True, text=True, timeout=30, check=False)
        assert res.returncode == 2 and res.stderr.count("\n") == 1 and res.stderr.startswith("scx_bwlab: "), (bad, res)
    assert subprocess.run([str(loader), "-h"], capture_output=True, timeout=30, check=False).returncode == 0


def _steps(stdout: str) -> dict[str, dict[str, Any]]:
    steps = {}
    for line in stdout.splitlines():
        if line.startswith("scx-check "):
            doc = json.loads(line.split(" ", 1)[1])
            steps[doc["step"]] = doc
    return steps


def test_cpu_max_is_enforced_without_throttling_what_fits(scx_key: str, loader: Path) -> None:
    script = REPO / "scx" / "tests" / "guest_check.sh"
    res = bwlab("guest", "exec", "--kernel", scx_key, "--accel", "tcg", "--timeout", "300", "--", "bash", str(script),
                str(loader), str(programs.resolve("spin")), str(SECONDS), timeout=600)  # fmt: skip
    steps = _steps(res.stdout)
    assert res.returncode == 0 and set(steps) == {"loaded", "at-quota", "twice-the-quota", "stopped", "cfs-after"}, (
        res.stdout[-3000:], res.stderr[-3000:])  # fmt: skip
    assert steps["loaded"]["state"] == "enabled" and steps["loaded"]["ops"] == "bwlab"
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
