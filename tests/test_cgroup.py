from __future__ import annotations

from pathlib import Path

import pytest

from bwlab import cgroup, cpustat
from bwlab.errors import BwlabError

V1_STAT = "nr_periods 120\nnr_throttled 60\nthrottled_time 4500000000\nnr_bursts 2\nburst_time 3000000\n"
V2_STAT = (
    "usage_usec 2000000\nuser_usec 1990000\nsystem_usec 10000\nnr_periods 100\nnr_throttled 49\n"
    "throttled_usec 250000\nnr_bursts 0\nburst_usec 0\n"
)


def test_v1_cpu_stat_in_microseconds() -> None:
    raw = cpustat.parse_kv(V1_STAT + "cpuacct_usage_ns 7000000\n")
    stat = cpustat.normalize_cpu_stat(raw)
    assert stat == {
        "nr_periods": 120,
        "nr_throttled": 60,
        "nr_bursts": 2,
        "throttled_us": 4500000,
        "burst_us": 3000,
        "usage_us": 7000,
    }


def test_v2_cpu_stat() -> None:
    stat = cpustat.normalize_cpu_stat(cpustat.parse_kv(V2_STAT))
    assert stat["throttled_us"] == 250000 and stat["usage_us"] == 2000000 and stat["nr_throttled"] == 49


def test_cpu_stat_without_bandwidth_fields() -> None:
    with pytest.raises(BwlabError, match="nr_periods"):
        cpustat.normalize_cpu_stat(cpustat.parse_kv("usage_usec 5\n"))


def test_cpu_stat_garbage() -> None:
    with pytest.raises(BwlabError, match="line 2"):
        cpustat.parse_kv("nr_periods 1\nnr_throttled lots\n")


def fake_v1(root: Path) -> None:
    for name, files in {
        "cpu": ["cpu.cfs_quota_us", "cpu.cfs_period_us", "cpu.stat"],
        "cpuacct": ["cpuacct.usage"],
        "cpuset": ["cpuset.cpus", "cpuset.mems"],
    }.items():
        (root / name).mkdir(parents=True)
        for f in files:
            (root / name / f).write_text("0\n")


def test_detect_prefers_v2_with_cpu(tmp_path: Path) -> None:
    fake_v1(tmp_path)
    (tmp_path / "unified").mkdir()
    (tmp_path / "unified" / "cgroup.controllers").write_text("hugetlb\n")
    assert isinstance(cgroup.detect(tmp_path), cgroup.CgroupV1)
    (tmp_path / "unified" / "cgroup.controllers").write_text("cpuset cpu io\n")
    hier = cgroup.detect(tmp_path)
    assert isinstance(hier, cgroup.CgroupV2) and hier.root == tmp_path / "unified"


def test_detect_nothing(tmp_path: Path) -> None:
    with pytest.raises(BwlabError, match="no cgroup cpu controller"):
        cgroup.detect(tmp_path)


def test_v1_create_writes_settings(tmp_path: Path) -> None:
    fake_v1(tmp_path)
    hier = cgroup.detect(tmp_path)
    grp = hier.create("bwlab-t", 10000, 20000, 5000, "0")
    try:
        cpu = tmp_path / "cpu" / "bwlab-t"
        assert (cpu / "cpu.cfs_period_us").read_text() == "10000"
        assert (cpu / "cpu.cfs_quota_us").read_text() == "20000"
        assert (cpu / "cpu.cfs_burst_us").read_text() == "5000"
        assert (tmp_path / "cpuset" / "bwlab-t" / "cpuset.cpus").read_text() == "0"
        assert (tmp_path / "cpuset" / "bwlab-t" / "cpuset.mems").read_text() == "0"
        assert grp.bandwidth_file == cpu / "cpu.cfs_quota_us" and grp.bandwidth_value == "20000"
        assert {p.parent.parent.name for p in grp.procs_files} == {"cpu", "cpuacct", "cpuset"}
    finally:
        cgroup._LIVE.pop("bwlab-t", None)


def test_v2_create_writes_cpu_max(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu cpuset\n")
    (tmp_path / "cgroup.subtree_control").write_text("")
    cgroup.detect(tmp_path).create("bwlab-u", 50000, None, 0, None)
    try:
        assert (tmp_path / "bwlab-u" / "cpu.max").read_text() == "max 50000"
        assert (tmp_path / "cgroup.subtree_control").read_text() == "+cpu"
        assert not (tmp_path / "bwlab-u" / "cpu.max.burst").exists()
    finally:
        cgroup._LIVE.pop("bwlab-u", None)


def test_v2_nested_groups_same_limits_tasks_in_the_deepest(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu cpuset\n")
    (tmp_path / "cgroup.subtree_control").write_text("")
    grp = cgroup.detect(tmp_path).create("bwlab-n", 100000, 50000, 20000, None, depth=3)
    try:
        top = tmp_path / "bwlab-n"
        for level in (top, top / "l2", top / "l2" / "l3"):
            assert (level / "cpu.max").read_text() == "50000 100000"
            assert (level / "cpu.max.burst").read_text() == "20000"
        assert (top / "cgroup.subtree_control").read_text() == "+cpu"
        assert (top / "l2" / "cgroup.subtree_control").read_text() == "+cpu"
        assert grp.procs_files == [top / "l2" / "l3" / "cgroup.procs"]
        assert grp.stat_file == top / "cpu.stat"  # the top group's view
    finally:
        cgroup._LIVE.pop("bwlab-n", None)


def test_v1_nested_groups_in_every_hierarchy(tmp_path: Path) -> None:
    fake_v1(tmp_path)
    grp = cgroup.detect(tmp_path).create("bwlab-m", 10000, 20000, 0, "0", depth=2)
    try:
        for name in ("cpu", "cpuacct", "cpuset"):
            assert (tmp_path / name / "bwlab-m" / "l2").is_dir()
        for level in (tmp_path / "cpu" / "bwlab-m", tmp_path / "cpu" / "bwlab-m" / "l2"):
            assert (level / "cpu.cfs_quota_us").read_text() == "20000"
            assert (level / "cpu.cfs_period_us").read_text() == "10000"
        assert (tmp_path / "cpuset" / "bwlab-m" / "l2" / "cpuset.cpus").read_text() == "0"
        assert sorted(p.parent.name for p in grp.procs_files) == ["l2", "l2", "l2"]
    finally:
        cgroup._LIVE.pop("bwlab-m", None)


def test_create_failure_is_clear(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu\n")
    (tmp_path / "cgroup.subtree_control").write_text("cpu\n")
    (tmp_path / "bwlab-x").mkdir()
    with pytest.raises(BwlabError, match=r"cannot create cgroup .*bwlab-x"):
        cgroup.detect(tmp_path).create("bwlab-x", 10000, None, 0, None)


def test_unique_names() -> None:
    a, b = cgroup.unique_name("case/1 x"), cgroup.unique_name("case/1 x")
    assert a != b and a.startswith("bwlab-") and "/" not in a and " " not in a


def test_sysctls_restore(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "kernel" / "knob"
    f.parent.mkdir()
    f.write_text("5\n")
    monkeypatch.setattr(cgroup, "sysctl_path", lambda name: tmp_path / name.replace(".", "/"))
    with cgroup.sysctls({"kernel.knob": "7"}):
        assert f.read_text() == "7"
    assert f.read_text() == "5"
    with pytest.raises(BwlabError, match="does not exist"), cgroup.sysctls({"kernel.nope": "1"}):
        pass


def test_a_group_removed_from_under_its_run_is_a_one_line_error(tmp_path: Path) -> None:
    """The host target reads cpu.stat after the workload; a group someone else removed in
    between (CI once: a second test run beside it cleaned up every bwlab group) is a
    BwlabError naming it, not a FileNotFoundError's traceback."""
    gone = tmp_path / "bwlab-gone"
    grp = cgroup.Group("bwlab-gone", [gone], gone / "cpu.stat", None, gone / "cpu.max", "max 100000")
    with pytest.raises(BwlabError, match=f"^cgroup {gone} was removed while the run used it$"):
        grp.read_stat()
