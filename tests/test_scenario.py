from __future__ import annotations

import re
from pathlib import Path

import pytest

from bwlab import scenario
from bwlab.errors import BwlabError
from bwlab.kernel.build import KernelImage
from bwlab.targets.qemu import QemuTarget
from bwlab.workloads.base import cpu_value

from conftest import DATA, bwlab


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sc.toml"
    path.write_text(text)
    return path


GOOD = """
name = "t"
repetitions = 2
duration_s = 1
[cgroup]
period_us = 10000
quota_cpus = "ncpu"
[workload]
kind = "sysbench-cpu"
threads = "ncpu"
"""


@pytest.mark.parametrize("name", scenario.builtin_names())
def test_builtin_scenarios_load_and_resolve(name: str) -> None:
    sc = scenario.load(scenario.builtin_path(name))
    for ncpu in (1, 2, 8):
        specs = sc.resolve(ncpu, 250)
        assert specs and all(s.ncpu == ncpu for s in specs)
        assert len({s.case for s in specs}) == len(specs)


def test_the_benchmarks_scenarios_load_and_resolve() -> None:
    """benchmarks/scenarios/ (run by the benchmark scripts by path): the same checks."""
    found = sorted((Path(__file__).parent.parent / "benchmarks" / "scenarios").glob("*.toml"))
    assert found
    for path in found:
        specs = scenario.load(path).resolve(2, 250)
        assert specs and len({s.case for s in specs}) == len(specs), path


def test_builtins_shipped() -> None:
    assert {"table2", "rewrite-storm", "slice", "cglat"} <= set(scenario.builtin_names())


def test_table2_quota_equals_demand() -> None:
    specs = {s.case: s for s in scenario.load(scenario.builtin_path("table2")).resolve(4)}
    assert specs["unlimited"].quota_us is None
    for case, period in (("100ms", 100000), ("50ms", 50000), ("10ms", 10000)):
        assert specs[case].period_us == period
        assert specs[case].quota_us == 4 * period
        assert "--threads=4" in specs[case].workload.argv


def test_cglat_quota_vs_cpuset_half_cpus() -> None:
    specs = {s.case: s for s in scenario.load(scenario.builtin_path("cglat")).resolve(4)}
    assert specs["quota"].quota_us == 2 * 100000 and specs["quota"].cpus is None
    assert specs["cpuset"].quota_us is None and specs["cpuset"].cpus == "0-1"
    assert specs["quota-burst"].quota_us == specs["quota-burst"].burst_us == 2 * 100000
    assert specs["quota"].burst_us == 0
    one = {s.case: s for s in scenario.load(scenario.builtin_path("cglat")).resolve(1)}
    assert one["quota"].quota_us == 100000  # at least one CPU... of quota
    assert one["cpuset"].cpus is None  # one CPU of one is all CPUs


def test_rewrite_storm_matrix() -> None:
    specs = scenario.load(scenario.builtin_path("rewrite-storm")).resolve(2)
    assert len(specs) == 4
    with_writer = [s for s in specs if s.sides]
    assert len(with_writer) == 2 and all(s.sides[0].interval_us == 100000 for s in with_writer)
    assert {s.quota_us for s in specs} == {20000, 10000}


def test_slice_matrix_sets_sysctl() -> None:
    specs = scenario.load(scenario.builtin_path("slice")).resolve(2)
    values = sorted(int(s.sysctls["kernel.sched_cfs_bandwidth_slice_us"]) for s in specs)
    assert values == [1000, 5000, 20000]


def test_burst_scales_with_cpus() -> None:
    for ncpu in (2, 8):
        specs = {s.case: s for s in scenario.load(scenario.builtin_path("burst")).resolve(ncpu)}
        assert specs["no-burst"].burst_us == 0
        assert specs["burst"].burst_us == ncpu * 50000  # 0.5 x CPUs x 100 ms
        for spec in specs.values():
            assert spec.quota_us == ncpu * 87500
            argv = spec.workload.argv
            rps, burn = float(argv[argv.index("-r") + 1]), int(argv[argv.index("-c") + 1])
            assert rps * burn / 1e6 == pytest.approx(0.625 * ncpu)  # average demand in CPUs
            assert spec.workload.resolved["rps"] == rps  # the simulator reads the resolved rate


def test_overrides_apply(tmp_path: Path) -> None:
    sc = scenario.load(write(tmp_path, GOOD), {"repetitions": 1, "duration_s": 3})
    (spec,) = sc.resolve(2)
    assert spec.repetitions == 1 and spec.duration_s == 3


@pytest.mark.parametrize(
    ("text", "message", "line"),
    [
        (GOOD.replace("period_us", "peroid_us"), "unknown key 'peroid_us' in [cgroup]", 6),
        (GOOD.replace('kind = "sysbench-cpu"', 'kind = "nope"'), "unknown workload kind 'nope'", 9),
        (GOOD.replace('quota_cpus = "ncpu"', 'quota_cpus = "lots"'), "quota_cpus", 7),
        (GOOD.replace("period_us = 10000", "period_us = 10"), "period_us must be an integer in 1000..1000000", 6),
        (GOOD.replace("repetitions = 2", "repetitions = 0"), "repetitions must be", 3),
        ("bogus = 1\n" + GOOD, "unknown top-level key 'bogus'", 1),
        (GOOD.replace('threads = "ncpu"', 'threads = "ncpu"\nmax_prim = 3'), "unknown key 'max_prim'", 11),
        (GOOD.replace('quota_cpus = "ncpu"', 'quota_cpus = "ncpu"\nburst_cpus = "lots"'), "burst_cpus", 8),
        (
            GOOD.replace('quota_cpus = "ncpu"', 'quota_cpus = "ncpu"\nburst_us = 5\nburst_cpus = 1'),
            "burst_us and burst_cpus",
            9,
        ),
        (
            GOOD.replace('kind = "sysbench-cpu"\nthreads = "ncpu"', 'kind = "wakelat"\nrps = "fast"'),
            "rps",
            10,
        ),
        (
            GOOD.replace('kind = "sysbench-cpu"\nthreads = "ncpu"', 'kind = "cgstress"\nhotplug = "yes"'),
            "hotplug must be true or false",
            10,
        ),
    ],
)
def test_invalid_scenarios_name_key_and_line(tmp_path: Path, text: str, message: str, line: int) -> None:
    path = write(tmp_path, text)
    with pytest.raises(scenario.ScenarioError) as exc:
        scenario.load(path)
    assert message in str(exc.value)
    assert str(exc.value).startswith(f"{path}:{line}:")
    assert "\n" not in str(exc.value)


def test_invalid_toml_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(scenario.ScenarioError, match="invalid TOML"):
        scenario.load(write(tmp_path, "name = \n"))


def test_matrix_and_cases(tmp_path: Path) -> None:
    text = GOOD + '\n[matrix]\n"cgroup.period_us" = [10000, 20000]\n[[case]]\nname = "a"\n[[case]]\nname = "b"\n'
    sc = scenario.load(write(tmp_path, text))
    assert [c for c, _, _ in sc.cases] == [
        "a-period_us=10000",
        "b-period_us=10000",
        "a-period_us=20000",
        "b-period_us=20000",
    ]


def test_matrix_bad_path(tmp_path: Path) -> None:
    with pytest.raises(scenario.ScenarioError, match="does not address a setting"):
        scenario.load(write(tmp_path, GOOD + '\n[matrix]\n"nothing" = [1]\n'))


def test_matrix_value_validated(tmp_path: Path) -> None:
    with pytest.raises(scenario.ScenarioError, match=r"case period_us=5\)"):
        scenario.load(write(tmp_path, GOOD + '\n[matrix]\n"cgroup.period_us" = [10000, 5]\n'))


def test_duplicate_case_names(tmp_path: Path) -> None:
    with pytest.raises(scenario.ScenarioError, match="both named 'x'"):
        scenario.load(write(tmp_path, GOOD + '\n[[case]]\nname = "x"\n[[case]]\nname = "x"\n'))


def test_rewrite_needs_quota(tmp_path: Path) -> None:
    sc = scenario.load(write(tmp_path, GOOD.replace('quota_cpus = "ncpu"', 'quota_cpus = "max"') + "[side.rewrite]\n"))
    with pytest.raises(BwlabError, match="needs a quota"):
        sc.resolve(2)


def test_cpuset_larger_than_target(tmp_path: Path) -> None:
    sc = scenario.load(write(tmp_path, GOOD.replace('quota_cpus = "ncpu"', "cpus = 4")))
    with pytest.raises(BwlabError, match="target has 2"):
        sc.resolve(2)


@pytest.mark.parametrize(
    ("expr", "ncpu", "value"),
    [
        ("ncpu", 4, 4),
        ("ncpu/2", 4, 2),
        ("ncpu*1.5", 2, 3),
        (3, 8, 3),
        ("max(1, ncpu/2)", 1, 1),
        ("max(1, ncpu/2)", 8, 4),
    ],
)
def test_cpu_expressions(expr: object, ncpu: int, value: float) -> None:
    assert cpu_value(expr, ncpu, "x") == value


@pytest.mark.parametrize("expr", ["ncpu/0", "cpus", -1, True, "2*ncpu"])
def test_bad_cpu_expressions(expr: object) -> None:
    with pytest.raises(BwlabError):
        cpu_value(expr, 2, "x")


def test_find_unknown() -> None:
    with pytest.raises(scenario.ScenarioError, match="unknown scenario 'nope'"):
        scenario.find("nope")


def test_stress_scenario_argv() -> None:
    (spec,) = scenario.load(scenario.builtin_path("stress")).resolve(2)
    assert spec.workload.argv == ("cgstress", "-d", "600", "-b", "8", "-H")
    (short,) = scenario.load(scenario.builtin_path("stress"), {"duration_s": 30}).resolve(4)
    assert short.workload.argv[:5] == ("cgstress", "-d", "30", "-b", "16")


def test_non_utf8_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "latin.toml"
    path.write_bytes(GOOD.replace('name = "t"', 'name = "t"\ndescription = "caf\xe9"').encode("latin-1"))
    with pytest.raises(scenario.ScenarioError, match=r"latin.toml: not UTF-8 text \(byte \d+\)"):
        scenario.load(path)
    proc = bwlab("check", str(path))
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1 and "not UTF-8" in proc.stderr


@pytest.mark.parametrize(
    ("cgroup", "message"),
    [
        # the kernel refuses a burst above the quota (tg_set_cfs_bandwidth: -EINVAL)
        ("quota_cpus = 1\nburst_us = 20000", "burst 20000 us is above the quota 10000 us"),
        ('quota_cpus = "ncpu"\nburst_cpus = "ncpu*2"', "burst 40000 us is above the quota 20000 us"),
        ("burst_us = 5000", r"a burst \(5000 us\) needs a quota"),
        # 0.001 CPUs of a 10 ms period is 10 us: below the kernel's 1 ms minimum, never raised silently
        ("quota_cpus = 0.001", "quota of 10 us; the kernel's minimum is 1000 us"),
    ],
)
def test_settings_the_kernel_refuses_are_errors(tmp_path: Path, cgroup: str, message: str) -> None:
    path = write(tmp_path, GOOD.replace('quota_cpus = "ncpu"', cgroup))
    with pytest.raises(BwlabError, match=message):
        scenario.load(path).resolve(2)
    proc = bwlab("check", str(path))
    assert proc.returncode == 1 and re.search(message, proc.stderr) and proc.stderr.count("\n") == 1


@pytest.mark.parametrize(("ncpu", "hz", "period", "ticks", "burst"), [
    (2, 250, 100_000, 1, 8_000),  # one 4 ms tick on each of 2 CPUs
    (2, 1000, 100_000, 2, 4_000),  # 2 ticks of 1 ms on 2 CPUs
    (64, 250, 100_000, 1, 256_000),
    (2, 250, 10_000, 4, 20_000),  # 32 ms of ticks, held to the 20 ms quota (the kernel's upper bound)
])  # fmt: skip
def test_burst_ticks_are_ticks_of_the_targets_hz_on_each_cpu(
    tmp_path: Path, ncpu: int, hz: int, period: int, ticks: int, burst: int
) -> None:
    text = GOOD.replace("period_us = 10000", f"period_us = {period}\nburst_ticks = {ticks}")
    (spec,) = scenario.load(write(tmp_path, text)).resolve(ncpu, hz)
    assert spec.burst_us == burst == min(ticks * ncpu * 1_000_000 // hz, ncpu * period)


def test_burst_ticks_count_the_cpus_of_the_groups_cpuset(tmp_path: Path) -> None:
    text = GOOD.replace("period_us = 10000", "period_us = 100000\nburst_ticks = 1\ncpus = 2")
    (spec,) = scenario.load(write(tmp_path, text)).resolve(8, 250)
    assert spec.cpus == "0-1" and spec.burst_us == 2 * 4000


@pytest.mark.parametrize(("ncpu", "quota", "period", "ticks", "burst"), [
    (64, "2", 100_000, 1, 2 * 4000),  # a tick on each of the 2 CPUs the quota buys, not on all 64
    (64, "2.5", 100_000, 1, 3 * 4000),  # rounded up, as DIV_ROUND_UP(quota, period)
    (2, '"ncpu"', 10_000, 4, 20_000),  # held to the quota
])  # fmt: skip
def test_burst_quota_ticks_count_the_cpus_the_quota_buys(
    tmp_path: Path, ncpu: int, quota: str, period: int, ticks: int, burst: int
) -> None:
    text = GOOD.replace('quota_cpus = "ncpu"', f"quota_cpus = {quota}")
    text = text.replace("period_us = 10000", f"period_us = {period}\nburst_quota_ticks = {ticks}")
    (spec,) = scenario.load(write(tmp_path, text)).resolve(ncpu, 250)
    assert spec.burst_us == burst


@pytest.mark.parametrize(("cgroup", "hz", "message"), [
    ('quota_cpus = "ncpu"\nburst_ticks = 1', None, "burst_ticks needs the target kernel's HZ"),
    ("burst_ticks = 1", 250, r"a burst \(1 ticks\) needs a quota"),
    ('quota_cpus = "ncpu"\nburst_ticks = 1\nburst_us = 5', 250, "burst_us and burst_ticks are ways to say one"),
    ('quota_cpus = "ncpu"\nburst_ticks = -1', 250, "burst_ticks must be an integer"),
    ('quota_cpus = "ncpu"\nburst_quota_ticks = 1', None, "burst_quota_ticks needs the target kernel's HZ"),
    ("burst_quota_ticks = 1", 250, r"a burst \(1 ticks\) needs a quota"),
    ('quota_cpus = "ncpu"\nburst_ticks = 1\nburst_quota_ticks = 1', 250, "burst_ticks and burst_quota_ticks are"),
])  # fmt: skip
def test_bad_burst_ticks_are_errors(tmp_path: Path, cgroup: str, hz: int | None, message: str) -> None:
    with pytest.raises(BwlabError, match=message):
        scenario.load(write(tmp_path, GOOD.replace('quota_cpus = "ncpu"', cgroup))).resolve(2, hz)


def test_a_huge_matrix_is_refused_with_its_size(tmp_path: Path) -> None:
    values = ", ".join(str(1000 + i) for i in range(1001))
    text = GOOD + f'[matrix]\n"cgroup.period_us" = [{values}]\n"workload.max_prime" = [{values}]\n'
    path = write(tmp_path, text)
    with pytest.raises(scenario.ScenarioError, match=r"make 1,002,001 cases; at most 10,000"):
        scenario.load(path)
    proc = bwlab("check", str(path), timeout=30)  # refused at once, not expanded
    assert proc.returncode == 1 and "1,002,001 cases" in proc.stderr


def test_a_bad_value_in_the_matrix_or_a_case_names_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD + '[matrix]\n"cgroup.period_us" = [10000, "fast"]\n')
    with pytest.raises(scenario.ScenarioError, match=r"sc.toml:12: \[cgroup\] period_us must be an integer"):
        scenario.load(path)
    path = write(tmp_path, GOOD + '[[case]]\nname = "x"\n"cgroup.period_us" = -1\n')
    with pytest.raises(scenario.ScenarioError, match=r"sc.toml:13: \[cgroup\] period_us must be an integer"):
        scenario.load(path)


def test_a_scenario_may_ask_for_this_machines_userland(tmp_path: Path) -> None:
    """[target] userland: "initramfs" (the default) or "host" (a guest with this machine's
    programs: --target guest then runs it as guest-host); anything else is an error that
    names the line."""
    assert scenario.load(write(tmp_path, GOOD)).userland == "initramfs"
    assert scenario.load(write(tmp_path, GOOD + '[target]\nuserland = "host"\n')).userland == "host"
    for bad, message in (('[target]\nuserland = "docker"\n', "userland must be one of initramfs, host"),
                         ('[target]\nkernel = "x"\n', "unknown key 'kernel' in \\[target\\]"),
                         ('target = "host"\n', "target must be a table")):  # fmt: skip
        text = bad + GOOD if bad.startswith("target =") else GOOD + bad
        with pytest.raises(BwlabError, match=message) as exc:
            scenario.load(write(tmp_path, text))
        assert "\n" not in str(exc.value) and "sc.toml" in str(exc.value)


def test_a_scenario_asking_for_the_host_userland_has_no_initramfs_options() -> None:
    """--target guest with a scenario that asks for this machine's userland runs it as
    guest-host, where --show-command and --keep (the initramfs's) mean nothing: one line."""
    res = bwlab("run", str(DATA / "guest-host-python.toml"), "--target", "guest", "--show-command", "--kernel", "x")
    assert res.returncode == 1 and res.stderr.count("\n") == 1 and "userland" in res.stderr, res.stderr
    image = KernelImage(key="k", bzimage=Path("bzImage"), version="7.3.4", release="7.3.4-k", origin="",
                        series_digest="", patches=(), config_digest="", hz=250, build_seconds=0.0)  # fmt: skip
    with pytest.raises(BwlabError, match="not in the initramfs guest"):  # reproduce, bundles: QemuTarget itself
        QemuTarget(image).run(scenario.load(DATA / "guest-host-python.toml"), Path("unused"))
