from __future__ import annotations

from bwlab import policies, reproduce
from bwlab.paths import DEBUG_CONFIG, LOCKSTAT_CONFIG


def test_plan_without_series_is_the_lab() -> None:
    jobs = reproduce.plan(patched=False, host=True, guest=True, quick=False)
    assert {j.what for j in jobs} == {"timerlat", "table2", "rewrite-storm", "cglat", "slice"}
    assert all(j.kernel is None or not j.kernel.patched for j in jobs)


def test_full_plan_covers_the_evaluation() -> None:
    jobs = reproduce.plan(patched=True, host=True, guest=True, quick=False)
    t2 = {(j.kernel.patched, j.kernel.hz, j.policy) for j in jobs if j.what == "table2" and j.kernel}
    for policy in reproduce.TABLE2_POLICIES:
        assert (True, 250, policy) in t2 and policy in policies.POLICIES
    assert (False, 250, None) in t2 and (False, 1000, None) in t2 and (True, 1000, "all") in t2
    assert sum(j.what == "kselftest" for j in jobs) == 4
    overhead = [j for j in jobs if j.what == "overhead" and j.kernel]
    assert {j.kernel.fragments for j in overhead} == {(LOCKSTAT_CONFIG,), ()}
    (stress,) = [j for j in jobs if j.what == "stress"]
    assert stress.kernel is not None and stress.kernel.fragments == (DEBUG_CONFIG,)
    assert len({j.describe() for j in jobs}) == len(jobs)  # every run writes its own result file
    # the simulator's validation finds a timer latency measurement for every machine and HZ
    timerlat = {(None if j.kernel is None else (j.kernel.patched, j.kernel.hz)) for j in jobs if j.what == "timerlat"}
    assert timerlat == {None, (False, 250), (False, 1000)}


def test_quick_and_partial_plans() -> None:
    quick = reproduce.plan(patched=True, host=True, guest=True, quick=True)
    assert {j.what for j in quick} == {"timerlat", "table2", "rewrite-storm", "kselftest"}
    assert all(j.kernel is None or j.kernel.hz == 250 for j in quick)
    assert all(j.kernel is None for j in reproduce.plan(patched=True, host=True, guest=False, quick=False))
    assert all(j.kernel is not None for j in reproduce.plan(patched=True, host=False, guest=True, quick=True))
