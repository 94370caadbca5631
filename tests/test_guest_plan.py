from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bwlab import scenario
from bwlab.errors import BwlabError
from bwlab.kernel.build import KernelImage
from bwlab.targets import qemu
from bwlab.targets.base import RawRep, case_docs
from bwlab.targets.plan import Layout, parse_records, render_plan

TESTS = Path(__file__).resolve().parent


def test_render_plan_covers_every_rep_and_setting() -> None:
    specs = scenario.load(scenario.builtin_path("rewrite-storm")).resolve(2)
    plan = render_plan(specs)
    for ci, spec in enumerate(specs):
        for rep in range(spec.repetitions):
            assert f"mkdir /sys/fs/cgroup/bwlab-{ci}-{rep}" in plan
            assert f"echo 'BWLAB-END {ci} {rep}' >&3" in plan
    assert plan.count("/bin/cgwrite /sys/fs/cgroup/") == sum(s.repetitions for s in specs if s.sides)
    assert "echo '20000 10000' > /sys/fs/cgroup/bwlab-0-0/cpu.max" in plan


def test_render_plan_sysctl_and_cpuset() -> None:
    slice_plan = render_plan(scenario.load(scenario.builtin_path("slice")).resolve(2))
    assert "echo 1000 > /proc/sys/kernel/sched_cfs_bandwidth_slice_us" in slice_plan
    assert "OLD_0_kernel_sched_cfs_bandwidth_slice_us=$(cat" in slice_plan
    cg_plan = render_plan(scenario.load(scenario.builtin_path("cglat")).resolve(2))
    assert "echo 0 > /sys/fs/cgroup/bwlab-2-0/cpuset.cpus" in cg_plan
    assert "echo 'max 100000' > /sys/fs/cgroup/bwlab-2-0/cpu.max" in cg_plan


def test_render_plan_nested_groups() -> None:
    specs = scenario.load(scenario.builtin_path("hierarchy")).resolve(2)
    plan = render_plan(specs)
    top = "/sys/fs/cgroup/bwlab-1-0"
    for level in (top, f"{top}/l2", f"{top}/l2/l3"):
        assert f"mkdir {level}\n" in plan and f"echo '100000 100000' > {level}/cpu.max" in plan
    assert f"echo +cpu > {top}/l2/cgroup.subtree_control" in plan
    assert f"echo $$ > {top}/l2/l3/cgroup.procs" in plan
    assert f"cat {top}/cpu.stat" in plan


RESULTS = """noise\r
BWLAB-HELLO release=7.3.4 ncpu=2 slice_us=5000\r
BWLAB-BEGIN 0 0\r
BWLAB-SECTION stat_before\r
usage_usec 0\r
nr_periods 0\r
nr_throttled 0\r
BWLAB-SECTION t0\r
10.50 12.00\r
BWLAB-SECTION t1\r
20.75 30.00\r
BWLAB-SECTION stat_after\r
usage_usec 100\r
nr_periods 1000\r
nr_throttled 490\r
BWLAB-SECTION rc\r
0\r
BWLAB-SECTION side0\r
{"writer":"cgwrite","writes":99,"errors":0}\r
BWLAB-SECTION stdout\r
events per second: 1.0\r
BWLAB-SECTION stderr\r
BWLAB-END 0 0\r
BWLAB-DONE\r
"""


def test_parse_results_channel() -> None:
    out = parse_records(RESULTS)
    assert out.done and out.hello == {"release": "7.3.4", "ncpu": "2", "slice_us": "5000"}
    raw = out.records[(0, 0)]
    assert raw.rc == 0 and abs(raw.wall_s - 10.25) < 1e-9
    assert "nr_throttled 490" in raw.stat_after and "events per second" in raw.stdout
    assert raw.sides == ['{"writer":"cgwrite","writes":99,"errors":0}\n']


def test_parse_results_incomplete() -> None:
    out = parse_records(RESULTS.split("BWLAB-SECTION rc")[0])
    assert not out.done and not out.records


def test_a_truncated_record_fails_that_repetition_only() -> None:
    second = RESULTS.split("BWLAB-BEGIN 0 0")[1].split("BWLAB-DONE")[0].replace("END 0 0", "END 0 1")
    # rep 1's END line cut short by a lost byte; rep 2 intact
    text = RESULTS.replace(
        "BWLAB-DONE\r\n",
        "BWLAB-BEGIN 0 1"
        + second.replace("BWLAB-END 0 1", "BWLAB-END 0")
        + "BWLAB-BEGIN 0 2"
        + second.replace("0 1", "0 2")
        + "BWLAB-DONE\r\n",
    )
    out = parse_records(text)
    assert isinstance(out.records[(0, 0)], RawRep) and isinstance(out.records[(0, 2)], RawRep)
    assert out.records[(0, 1)] == "record cut short: 'BWLAB-END 0' after BWLAB-BEGIN 0 1"
    # a BEGIN line cut short is a protocol error of the run; a garbled uptime one of its record
    bad = parse_records("BWLAB-BEGIN 0\nBWLAB-END 0 0\n" + RESULTS.replace("10.50 12.00", "10.5x"))
    assert bad.errors == ["malformed record line 'BWLAB-BEGIN 0'"]
    assert str(bad.records[(0, 0)]).startswith("malformed record: the plan sent a malformed /proc/uptime")
    docs = case_docs(scenario.load(scenario.builtin_path("table2")).resolve(2)[:1], out.records)
    assert docs[0]["reps"][1] == {"rep": 1, "error": "record cut short: 'BWLAB-END 0' after BWLAB-BEGIN 0 1"}


def test_find_splats() -> None:
    console = "\n".join(
        [
            "[    0.1] Linux version 7.3.4",
            "[    1.0] WARNING: CPU: 1 PID: 5 at kernel/sched/fair.c:123 foo+0x1/0x2",
            "[    2.0] BUG: kernel NULL pointer dereference",
            "[    3.0] rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:",
            "[    4.0] ======================================================",
            "[    4.0] WARNING: possible circular locking dependency detected",
            "[    5.0] reboot: Restarting system",
        ]
    )
    splats = qemu.find_splats(console)
    assert len(splats) == 4
    assert qemu.find_splats("[ 0.1] Linux version\n[ 1.0] reboot: machine restart\n") == []
    # a debug kernel's boot banner is not a splat; its reports are
    banner = "[ 0.2] rcu: \tRCU lockdep checking is enabled.\n[ 0.4] ... MAX_LOCKDEP_KEYS: 8192\n"
    banner += "[ 0.6] kcsan: enabled early\n[ 1.1] kcsan: selftest: 3/3 tests passed\n"
    assert qemu.find_splats(banner) == []
    reports = "[ 9.0] BUG: KCSAN: data-race in foo / bar\n[ 9.1] WARNING: suspicious RCU usage\n"
    assert len(qemu.find_splats(reports)) == 2


def test_noise_probe_runs_before_and_after_the_cases() -> None:
    plan = render_plan(scenario.load(scenario.builtin_path("table2")).resolve(2))
    assert plan.count("/bin/noise -t $(nproc) -d 3") == 2
    assert plan.index("BWLAB-NOISE-BEGIN") < plan.index("BWLAB-BEGIN 0 0")
    assert plan.rindex("BWLAB-NOISE-BEGIN") > plan.rindex("BWLAB-END")
    assert "BWLAB-NOISE" not in render_plan(scenario.load(scenario.builtin_path("cglat")).resolve(2))
    probe = 'BWLAB-NOISE-BEGIN\r\n{"workload": "noise"}\r\nBWLAB-NOISE-END\r\n'
    text = RESULTS.replace("BWLAB-BEGIN 0 0", probe + "BWLAB-BEGIN 0 0")
    out = parse_records(text)
    assert out.noise == ['{"workload": "noise"}\n'] and out.done and (0, 0) in out.records
    assert parse_records(RESULTS).noise == []


def _policies(pid: int) -> dict[int, int]:
    """Scheduling policy (field 41 of stat) of each thread of `pid`."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        stat = (task / "stat").read_text()
        out[int(task.name)] = int(stat[stat.rindex(")") + 2 :].split()[38])
    return out


def test_prioritize_timers_raises_only_the_first_thread() -> None:
    """The real thing on a stand-in process: its first thread gets SCHED_FIFO, a thread it
    starts afterwards (as QEMU starts its vCPUs) stays SCHED_OTHER."""
    code = (
        "import threading, time; time.sleep(0.5); "
        "t = threading.Thread(target=time.sleep, args=(2,)); t.start(); t.join()"
    )
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        done = qemu.prioritize_timers(proc.pid)
        if os.geteuid() != 0:  # not allowed: said so, not hidden
            assert done.startswith("normal (")
            return
        assert done == "SCHED_FIFO 1"
        deadline = time.monotonic() + 5
        while len(pols := _policies(proc.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pols[proc.pid] == os.SCHED_FIFO
        assert [p for tid, p in pols.items() if tid != proc.pid] == [os.SCHED_OTHER]
    finally:
        proc.kill()
        proc.wait()


def test_prioritize_timers_reports_a_missing_process() -> None:
    assert qemu.prioritize_timers(2**22 + 12345).startswith("normal (")


def test_fifo_is_the_default_and_zero_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BWLAB_QEMU_FIFO", raising=False)
    assert qemu.fifo_requested()
    monkeypatch.setenv("BWLAB_QEMU_FIFO", "0")
    assert not qemu.fifo_requested()
    assert qemu.timer_priority_plan() == (False, "normal (BWLAB_QEMU_FIFO=0)")
    monkeypatch.setenv("BWLAB_QEMU_FIFO", "yes")
    with pytest.raises(BwlabError, match="BWLAB_QEMU_FIFO='yes': expected 1"):
        qemu.fifo_requested()


def test_timer_priority_plan_tries_it_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """Real: decided on a stand-in child before QEMU starts (the command line depends on it)."""
    monkeypatch.delenv("BWLAB_QEMU_FIFO", raising=False)
    fifo, said = qemu.timer_priority_plan()
    assert fifo == (os.geteuid() == 0)
    assert said == "SCHED_FIFO 1" if fifo else said.startswith("normal (")


def test_qemu_trusts_the_tsc(tmp_path: Path) -> None:
    image = KernelImage(key="k", bzimage=tmp_path / "bzImage", version="7.3.4", release="7.3.4-k", origin="",
                        series_digest="", patches=(), config_digest="", hz=250, build_seconds=0.0)  # fmt: skip
    cmd = qemu.qemu_command(image, tmp_path / "i", 2, tmp_path / "c", tmp_path / "r", tsc_reliable=True)
    assert "tsc=reliable" in cmd[cmd.index("-append") + 1].split()
    cmd = qemu.qemu_command(image, tmp_path / "i", 2, tmp_path / "c", tmp_path / "r")
    assert "tsc=reliable" not in cmd[cmd.index("-append") + 1].split()


def test_qemu_command_per_accelerator(tmp_path: Path) -> None:
    image = KernelImage(key="k", bzimage=tmp_path / "bzImage", version="7.3.4", release="7.3.4-k", origin="",
                        series_digest="", patches=(), config_digest="", hz=250, build_seconds=0.0)  # fmt: skip
    kvm = qemu.qemu_command(image, tmp_path / "i", 2, tmp_path / "c", tmp_path / "r", accel="kvm")
    assert kvm[1:5] == ["-accel", "kvm", "-cpu", "host"]
    tcg = qemu.qemu_command(image, tmp_path / "i", 2, tmp_path / "c", tmp_path / "r")
    assert tcg[1:5] == ["-accel", "tcg,thread=multi", "-cpu", "max"]
    # asked for TCG: no probe, and the reason says so
    assert qemu.choose_accel("tcg", image) == qemu.Accel("tcg", "asked for (--accel tcg)")
    with pytest.raises(BwlabError, match="--accel 'fast': expected one of auto, kvm, tcg"):
        qemu.choose_accel("fast", image)
    assert qemu.kvm_device_problem(str(tmp_path / "kvm")) == f"{tmp_path / 'kvm'}: No such file or directory"


def test_several_scenarios_split_into_their_own_records() -> None:
    """render_plans: one part per scenario, features written once; split_scenarios gives each
    its records, the boot's HELLO, and done only if the next part began or the plan ended."""
    from bwlab.targets.plan import render_plans, split_scenarios

    a = scenario.load(scenario.builtin_path("table2")).resolve(2)[:1]
    b = scenario.load(scenario.builtin_path("cglat")).resolve(2)[:1]
    text = render_plans([a, b], ["NO_LAGS"])
    assert text.count("BWLAB-SCENARIO") == 2 and text.count("echo NO_LAGS") == 1
    stream = ("BWLAB-HELLO release=7.3.4 ncpu=2\nBWLAB-FEATURES LAGS\nBWLAB-SCENARIO 0\n" + RECORD.format(0, 0)
              + "BWLAB-SCENARIO 1\n" + RECORD.format(0, 0))  # fmt: skip
    first, second = split_scenarios(stream, 2)
    assert first.hello["release"] == "7.3.4" and second.hello["ncpu"] == "2" and second.features == "LAGS"
    assert set(first.records) == set(second.records) == {(0, 0)}
    assert first.done and not second.done  # the boot never said BWLAB-DONE
    assert split_scenarios(stream + "BWLAB-DONE\n", 2)[1].done
    cut = split_scenarios("BWLAB-HELLO ncpu=2\nBWLAB-SCENARIO 0\nBWLAB-BEGIN 0 0\n", 2)
    assert cut[0].records == {} and not cut[0].done and not cut[1].done


RECORD = ("BWLAB-BEGIN {0} {1}\nBWLAB-SECTION stat_before\nusage_usec 0\nBWLAB-SECTION t0\n1.0 0\n"
          "BWLAB-SECTION t1\n2.0 0\nBWLAB-SECTION stat_after\nusage_usec 5\nBWLAB-SECTION rc\n0\n"
          "BWLAB-END {0} {1}\n")  # fmt: skip


def test_the_sample_side_action_reads_the_groups_counters() -> None:
    """[side.sample]: cgsample beside the workload, on v2 cpu.stat alone, on v1 cpu.stat and
    cpuacct.usage, every interval_ms (1 by default), its threads (v2 cgroup.threads, v1 tasks,
    in the group its tasks are in) stepped every 10 ms; stopped after the workload."""
    specs = scenario.load(scenario.builtin_path("below-quota")).resolve(2)
    plan = render_plan(specs)
    line = ("/bin/cgsample /sys/fs/cgroup/bwlab-0-0/cpu.stat - 1000 /sys/fs/cgroup/bwlab-0-0/cgroup.threads 10000 "
            "> /tmp/side0 2>&1 & SIDE0=$!")  # fmt: skip
    assert plan.index(line) < plan.index("echo 'BWLAB-BEGIN 0 0' >&3") < plan.index("kill $SIDE0; wait $SIDE0")
    cpuset = "/sys/fs/cgroup/cpuset"
    v1 = render_plan(specs, layout=Layout(1, "/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpuacct", cpuset))
    assert ("/bin/cgsample /sys/fs/cgroup/cpu/bwlab-1-2/cpu.stat /sys/fs/cgroup/cpuacct/bwlab-1-2/cpuacct.usage 1000 "
            "/sys/fs/cgroup/cpu/bwlab-1-2/tasks 10000 " in v1)  # fmt: skip
    nested = [dataclasses.replace(s, depth=2) for s in specs]
    assert "/bwlab-0-0/l2/cgroup.threads 10000" in render_plan(nested)
    v1_nested = render_plan(nested, layout=Layout(1, "/sys/fs/cgroup/cpu", cpuset=cpuset))
    assert "/sys/fs/cgroup/cpu/bwlab-0-0/l2/tasks 10000" in v1_nested
    assert "cgwrite" not in plan
