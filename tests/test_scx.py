"""The sched_ext scheduler's build glue without building anything: pahole's wrapper and
version check, the BTF switch of a kernel build, the scheduler build's refusals; and a plan
under a scheduler (bwlab run --scheduler): its shell, and the options it refuses."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bwlab import scenario
from bwlab.errors import BwlabError
from bwlab.kernel import pahole, scheduler
from bwlab.paths import SCX_CONFIG
from bwlab.targets import plan
from bwlab.workloads import programs

from conftest import bwlab


def test_btf_is_asked_by_the_scx_fragment_only() -> None:
    assert pahole.wants_btf(SCX_CONFIG.read_text())
    assert not pahole.wants_btf("CONFIG_DEBUG_INFO_BTF=n\n# CONFIG_DEBUG_INFO_BTF=y\nCONFIG_DEBUG_INFO_BTF_MODULES=y\n")


def test_version_reads_pahole_and_refuses_what_does_not_run(tmp_path: Path) -> None:
    fake = tmp_path / "pahole"
    fake.write_text("#!/bin/sh\necho v1.30\n")
    fake.chmod(0o755)
    assert pahole.version(fake) == (1, 30)
    fake.write_text("#!/bin/sh\necho v1.30; exit 3\n")
    assert pahole.version(fake) is None
    assert pahole.version(tmp_path / "missing") is None


def test_the_wrapper_runs_the_root_through_its_own_loader(tmp_path: Path) -> None:
    text = pahole._wrapper_text(tmp_path)
    assert f'exec "{tmp_path}/lib64/ld-linux-x86-64.so.2" --library-path' in text
    assert f'"{tmp_path}/usr/bin/pahole" "$@"' in text


def test_no_debootstrap_is_one_clear_error(empty_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pahole.shutil, "which", lambda _: None)
    with pytest.raises(BwlabError, match=r"pahole >= 1\.26: debootstrap is not installed"):
        pahole.ensure()


def test_the_scheduler_needs_a_built_sched_ext_kernel(empty_cache: Path) -> None:
    with pytest.raises(BwlabError, match=r"no kernel 7\.3\.4-000000000000 in the cache"):
        scheduler.build("7.3.4-000000000000")


def test_a_plan_under_a_scheduler_loads_it_and_reads_its_counters() -> None:
    """--scheduler: the plan loads the scheduler before the cases and stops it after them, and
    each group's stat is cpu.stat less the bandwidth counters, plus the scheduler's."""
    specs = scenario.load(scenario.builtin_path("table2")).resolve(2)
    text = plan.render_plan(specs, scheduler="scx_bwlab")
    start, stop = text.index("/bin/scx_bwlab -o "), text.index("kill -INT $BWLAB_SCHED; wait")
    assert start < text.index("BWLAB-BEGIN 0 0") < text.index("BWLAB-END 3 4") < stop
    assert f"{plan.SCHEDULER_STAT} /sys/fs/cgroup/bwlab-2-0 >&3" in text
    assert "cat /sys/fs/cgroup/bwlab-2-0/cpu.stat" not in text
    assert "/bin/scx_bwlab" not in plan.render_plan(specs)
    with pytest.raises(BwlabError, match="takes cgroup v2"):
        plan.render_plan(specs, layout=plan.Layout(version=1, cpu="/sys/fs/cgroup/cpu"), scheduler="scx_bwlab")
    sampled = scenario.load(scenario.builtin_path("below-quota")).resolve(2)
    assert any(side.kind == "sample" for spec in sampled for side in spec.sides)
    with pytest.raises(BwlabError, match=r"sample side action reads cpu\.stat"):
        plan.render_plan(sampled, scheduler="scx_bwlab")
    out = plan.parse_records("BWLAB-SCHEDULER bwlab\nBWLAB-DONE\n")
    assert out.scheduler == "bwlab" and out.done


def test_lags_goes_to_the_loader_under_a_scheduler() -> None:
    """lags-pick under --scheduler: the groups of the cases with latency_awareness 1 are the
    loader's -l, and no workload is told to write cpu.latency_awareness (the in-kernel LAGS'
    file, absent there); without a scheduler the workload writes it as before."""
    specs = scenario.load(scenario.builtin_path("lags-pick")).resolve(2)
    aware = [ci for ci, spec in enumerate(specs) if spec.workload.resolved.get("latency_awareness") == 1]
    assert aware == [1, 3, 5]
    assert plan.lags_cases(specs) == [specs[ci].case for ci in aware]
    text = plan.render_plan(specs, scheduler="scx_bwlab")
    loader = next(line for line in text.splitlines() if line.startswith("/bin/scx_bwlab "))
    wanted = [f"/sys/fs/cgroup/bwlab-{ci}-{rep}" for ci in aware for rep in range(3)]
    assert loader.split(" 2> ")[0].split(" -l ")[1:] == wanted, loader
    assert " -L " not in text
    assert text.count(" -L 1 ") == 0 and plan.render_plan(specs).count(" -L 1 ") == 9  # 3 cases x 3 reps
    many = scenario.load(scenario.builtin_path("lags-pick"), {"repetitions": 22}).resolve(2)
    with pytest.raises(BwlabError, match=r"66 latency-aware groups .* at most 64"):
        plan.render_plan(many, scheduler="scx_bwlab")


def test_the_scheduler_stat_reads_the_groups_own_line(tmp_path: Path) -> None:
    """The stat function (busybox sh and awk, as in the guest) on a group directory and a
    stats file like the loader's: the group's line and no other's (an id that ends the same)."""
    group = tmp_path / "g"
    group.mkdir()
    (group / "cpu.stat").write_text("usage_usec 100\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\n"
                                    "nr_bursts 0\nburst_usec 0\n")  # fmt: skip
    cgid = group.stat().st_ino
    line = ('    {{"cgid": {}, "period_us": 100000, "quota_us": 200000, "burst_us": 0, "nr_periods": {}, '
            '"nr_throttled": {}, "throttled_usec": 1234, "nr_bursts": 1, "burst_usec": 77, "usage_usec": 9, '
            '"throttled": false}}')  # fmt: skip
    stats = tmp_path / "sched-stats.json"
    answer = tmp_path / "sched-stats.json.now"  # what the loader writes on SIGUSR1
    lines = plan.scheduler_start("scx_bwlab", "/bin", str(tmp_path))
    function = "\n".join(lines[lines.index(f"{plan.SCHEDULER_STAT}() {{") :])
    function = function.replace(f"rm -f {stats}.now; kill -USR1 $BWLAB_SCHED; ", "")  # the loader's part
    busybox = programs.resolve("busybox")

    def stat_of(*accounts: str) -> list[str]:
        answer.write_text('{"scheduler": "bwlab", "cgroups": [\n' + ",\n".join(accounts) + "\n  ]}\n")
        done = subprocess.run([str(busybox), "sh", "-c", f"{function}\n{plan.SCHEDULER_STAT} {group} 3>&1"],
                              capture_output=True, text=True, check=True, timeout=30)  # fmt: skip
        return done.stdout.split("\n")

    assert stat_of(line.format(f"9{cgid}", 8, 8), line.format(cgid, 50, 3)) == [
        "usage_usec 100",
        "nr_periods 50",
        "nr_throttled 3",
        "throttled_usec 1234",
        "nr_bursts 1",
        "burst_usec 77",
        "",
    ]
    # a group the scheduler keeps no account of (no quota, no LAGS load): zeros, as CFS's
    assert stat_of(line.format(f"9{cgid}", 8, 8)) == [
        "usage_usec 100",
        "nr_periods 0",
        "nr_throttled 0",
        "throttled_usec 0",
        "nr_bursts 0",
        "burst_usec 0",
        "",
    ]


SCHEDULER_MISPLACED = [("--target", "host"), ("--target", "sim"), ("--target", "guest", "--show-command"),
                       ("--target", "guest", "--policy", "all")]  # fmt: skip


@pytest.mark.parametrize("extra", SCHEDULER_MISPLACED)
def test_scheduler_applies_to_the_initramfs_guest_only(extra: tuple[str, ...]) -> None:
    res = bwlab("run", "table2", "--scheduler", "scx_bwlab", *extra, timeout=60)
    assert res.returncode != 0 and res.stderr.count("\n") == 1, res.stderr
    assert "--scheduler applies to --target guest only" in res.stderr, res.stderr
