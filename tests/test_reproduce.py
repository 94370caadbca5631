from __future__ import annotations

from pathlib import Path

from bwlab import scenario
from bwlab.commands import reproduce
from bwlab.kernel import policies
from bwlab.paths import CORE_CONFIG, DEBUG_CONFIG, LAB_CONFIG, LOCKSTAT_CONFIG


def test_plan_without_series_is_the_lab() -> None:
    jobs = reproduce.plan(patched=False, host=True, guest=True, quick=False)
    assert {j.what for j in jobs} == {"timerlat", "noise", "table2", "rewrite-storm", "cglat", "slice", "burst",
                                      "hierarchy", "colocation"}  # fmt: skip
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
    # and the other work on its CPUs (noise), measured right before table2 on the same machine
    for what in ("timerlat", "noise"):
        where = {(None if j.kernel is None else (j.kernel.patched, j.kernel.hz)) for j in jobs if j.what == what}
        assert where == {None, (False, 250), (False, 1000)}, what
        for kernel in {j.kernel for j in jobs if j.what == what}:
            order = [j.what for j in jobs if j.kernel == kernel]
            assert order.index(what) < order.index("table2")


def test_quick_and_partial_plans() -> None:
    quick = reproduce.plan(patched=True, host=True, guest=True, quick=True)
    assert {j.what for j in quick} == {"timerlat", "noise", "table2", "rewrite-storm", "cglat", "burst",
                                       "hierarchy", "colocation"}  # fmt: skip
    assert all(j.kernel is None or j.kernel.hz == 250 for j in quick)
    assert all(dict(j.overrides)["repetitions"] == 1 for j in quick)  # trimmed to one repetition
    patched = {j.what for j in quick if j.kernel and j.kernel.patched}
    assert {"burst", "hierarchy", "table2"} <= patched
    assert all(j.kernel is None for j in reproduce.plan(patched=True, host=True, guest=False, quick=False))
    assert all(j.kernel is not None for j in reproduce.plan(patched=True, host=False, guest=True, quick=True))


def test_the_quick_plan_builds_the_measurement_kernels_and_the_full_one_the_lab_kernels() -> None:
    """The main job (quick) boots core.config alone, named so in its results; --full the lab
    kernels (core.config, lab.config and any extra fragment)."""
    quick = {j.kernel for j in reproduce.plan(patched=True, host=True, guest=True, quick=True) if j.kernel}
    assert {k.config for k in quick} == {(CORE_CONFIG,)}
    assert {k.variant_name for k in quick} == {"baseline-core", "patched-core"}
    full = {j.kernel for j in reproduce.plan(patched=True, host=True, guest=True, quick=False) if j.kernel}
    assert all(k.config[:2] == (CORE_CONFIG, LAB_CONFIG) for k in full)
    assert {k.variant_name for k in full} == {"baseline", "patched", "baseline-lockstat", "patched-lockstat",
                                              "patched-debug"}  # fmt: skip


def test_burst_and_hierarchy_on_every_kernel() -> None:
    jobs = reproduce.plan(patched=True, host=True, guest=True, quick=False)
    for what in ("burst", "hierarchy"):
        where = {(None if j.kernel is None else (j.kernel.patched, j.policy)) for j in jobs if j.what == what}
        assert where == {None, (False, None), (True, "all")}
    # the full run uses the scenarios as written; colocation without the series has LAGS off
    assert all(not j.overrides for j in jobs if j.what != "colocation")
    lags = sorted((str(j.kernel and j.kernel.patched), str(dict(j.overrides).get("matrix.workload.latency_awareness")))
                  for j in jobs if j.what == "colocation")  # fmt: skip
    assert lags == [("False", "[0]"), ("None", "[0]"), ("True", "None")]


def test_quick_overrides_load() -> None:
    for job in reproduce.plan(patched=True, host=True, guest=True, quick=True):
        if job.what != "kselftest":
            specs = scenario.load(scenario.find(job.what), dict(job.overrides)).resolve(2)
            assert all(s.repetitions == 1 for s in specs)
    (spec, _) = scenario.load(scenario.find("hierarchy"), {"workload.loops": 7}).resolve(2)
    assert spec.workload.argv[-1] == "7"
    quick = {(j.kernel.patched if j.kernel else None): j for j in reproduce.plan(True, True, True, True)
             if j.what == "colocation"}  # fmt: skip
    base = scenario.load(scenario.find("colocation"), dict(quick[False].overrides)).resolve(2)
    assert [s.workload.argv[s.workload.argv.index("-L") + 1] for s in base] == ["0"]
    patched = scenario.load(scenario.find("colocation"), dict(quick[True].overrides)).resolve(2)
    assert sorted(s.workload.argv[s.workload.argv.index("-L") + 1] for s in patched) == ["0", "1"]
    assert all(s.workload.argv[s.workload.argv.index("-n") + 1] == "16" for s in patched)


def test_a_failed_run_does_not_stop_the_rest(tmp_path: Path) -> None:
    """Two runs that fail (an unknown scenario; a guest run without kernel source): both are
    listed, and the simulator's runs and the report still happen."""
    jobs = [reproduce.Job("no-such-scenario"), reproduce.Job("table2", reproduce.Kernel(False))]
    failures = reproduce.run(jobs, None, tmp_path, 2, {})
    assert len(failures) == 2
    assert failures[0].startswith("no-such-scenario on host: unknown scenario 'no-such-scenario'")
    assert failures[1] == "table2 in guest-baseline: guest runs need the kernel source"
    assert (tmp_path / "report.md").is_file() and (tmp_path / "table2-sim-all.json").is_file()


def test_quick_plan_boots_each_kernel_once() -> None:
    """Consecutive guest jobs of one kernel and policy share a boot in the quick plan; the host's
    runs and the full plan's stay one per run; a kselftest never shares."""
    quick = reproduce.plan(patched=True, host=True, guest=True, quick=True)
    batches = reproduce.batches(quick, one_boot=True)
    guests = [b for b in batches if b[0].kernel is not None]
    kernels = [(b[0].kernel.patched if b[0].kernel else None, b[0].policy) for b in guests]
    assert kernels == [(False, None), (True, "all")]
    assert sum(len(b) for b in guests) == sum(1 for j in quick if j.kernel is not None)
    assert all(len(b) == 1 for b in batches if b[0].kernel is None)
    full = reproduce.plan(patched=True, host=True, guest=True, quick=False)
    assert all(len(b) == 1 for b in reproduce.batches(full, one_boot=False))
    kernel = reproduce.Kernel(False)
    mixed = [reproduce.Job("table2", kernel), reproduce.Job("kselftest", kernel), reproduce.Job("cglat", kernel),
             reproduce.Job("burst", kernel), reproduce.Job("burst", kernel, "all")]  # fmt: skip
    assert [[j.what for j in b] for b in reproduce.batches(mixed, one_boot=True)] == [
        ["table2"], ["kselftest"], ["cglat", "burst"], ["burst"]]  # fmt: skip
