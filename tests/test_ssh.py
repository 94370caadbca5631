"""The ssh:// target's pieces without a remote: its URL, what it makes of a probe, and the
plan it renders for a cgroup v1 machine. tests/test_ssh_real.py runs it against a real sshd."""

from __future__ import annotations

import signal
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from bwlab import scenario
from bwlab.errors import BwlabError
from bwlab.targets import plan, ssh
from bwlab.targets.ssh import Remote, parse_probe

from conftest import bwlab


@pytest.mark.parametrize(
    ("url", "user", "host", "port"),
    [
        ("ssh://box", None, "box", None),
        ("ssh://root@box.example:2222", "root", "box.example", 2222),
        ("ssh://root@10.0.0.7", "root", "10.0.0.7", None),
        ("ssh://root@[fe80::1]:22/", "root", "fe80::1", 22),
    ],
)
def test_url_is_user_host_and_port(url: str, user: str | None, host: str, port: int | None) -> None:
    remote = Remote.parse(url)
    assert (remote.user, remote.host, remote.port) == (user, host, port)
    argv = remote.argv("true")
    assert argv[0] == "ssh" and "BatchMode=yes" in argv and argv[-1] == "true"
    assert argv[-2] == (f"{user}@{host}" if user else host)
    assert ("-p" in argv) == (port is not None)
    assert Remote.parse(remote.url) == remote  # the URL it prints names the same machine


@pytest.mark.parametrize("url", ["ssh://", "ssh://a@b@c", "ssh://box:0", "ssh://box:65536", "ssh://box/path",
                                 "ssh://-oProxyCommand=x", "ssh://-oFoo", "ssh://-l@box", "http://box"])  # fmt: skip
def test_bad_url_is_an_error(url: str) -> None:
    with pytest.raises(BwlabError):
        Remote.parse(url)


def test_missing_ssh_config_is_an_error(tmp_path: object) -> None:
    with pytest.raises(BwlabError, match="no such file"):
        Remote.parse("ssh://box", "/nonexistent/ssh_config")


V1_PROBE = """release=6.18.0
hostname=box
ncpu=8
euid=0
slice_us=5000
hz=1000
v1mount=/sys/fs/cgroup/cpu rw,relatime,cpu
v1mount=/sys/fs/cgroup/cpuacct rw,relatime,cpuacct
v1mount=/sys/fs/cgroup/cpuset rw,relatime,cpuset
v1mount=/sys/fs/cgroup/memory rw,relatime,memory
have_tar=/usr/bin/tar
have_setsid=/usr/bin/setsid
have_ldd=/usr/bin/ldd
dir=/tmp/bwlab-AbC123
"""


def test_probe_of_a_v1_machine() -> None:
    machine = parse_probe("ssh://box", V1_PROBE)
    assert machine.ncpu == 8 and machine.dir == "/tmp/bwlab-AbC123"
    assert machine.layout == plan.Layout(1, "/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpuacct", "/sys/fs/cgroup/cpuset")


def test_probe_of_a_comounted_v1_machine_and_of_a_v2_one() -> None:
    separate = "v1mount=/sys/fs/cgroup/cpu rw,relatime,cpu\nv1mount=/sys/fs/cgroup/cpuacct rw,relatime,cpuacct\n"
    comounted = V1_PROBE.replace(separate, "v1mount=/sys/fs/cgroup/cpu,cpuacct rw,cpu,cpuacct\n")
    layout = parse_probe("ssh://box", comounted).layout
    assert (layout.version, layout.cpu, layout.cpuacct) == (1, "/sys/fs/cgroup/cpu,cpuacct", None)
    v2 = parse_probe("ssh://box", V1_PROBE + "v2=/sys/fs/cgroup\n").layout
    assert v2 == plan.Layout(2, "/sys/fs/cgroup")  # v2 with the cpu controller wins, as on the host


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("euid=0", "euid=1000"), "needs root"),
        (("have_tar=/usr/bin/tar", "have_tar="), "tar is not installed"),
        (("ncpu=8", "ncpu="), "cannot count the CPUs"),
        (("dir=/tmp/bwlab-AbC123", "dir="), "cannot make a directory"),
        (("v1mount=/sys/fs/cgroup/cpu rw,relatime,cpu\n", ""), "no cgroup CPU bandwidth control"),
        (("v1mount=/sys/fs/cgroup/cpuacct rw,relatime,cpuacct\n", ""), "without cpuacct"),
    ],
)
def test_probe_says_what_is_missing(change: tuple[str, str], message: str) -> None:
    with pytest.raises(BwlabError, match=message):
        parse_probe("ssh://box", V1_PROBE.replace(*change))


def test_v1_plan_uses_the_cfs_files_and_every_hierarchy() -> None:
    """A nested case with a burst and a cpuset: each level in cpu, cpuacct and cpuset, the
    quota and period in cpu.cfs_*, tasks joined in all three, usage from cpuacct.usage."""
    layout = plan.Layout(1, "/cg/cpu", "/cg/cpuacct", "/cg/cpuset")
    spec = replace(scenario.load(scenario.builtin_path("hierarchy")).resolve(2)[0], depth=2, burst_us=1000, cpus="0")
    text = plan.render_plan([spec], layout=layout, bin_dir="/d/bin", tmp_dir="/d", prefix="bwlab-X-")
    for root in ("/cg/cpu", "/cg/cpuacct", "/cg/cpuset"):
        assert f"mkdir {root}/bwlab-X-0-0\n" in text and f"mkdir {root}/bwlab-X-0-0/l2\n" in text
        assert f"echo $$ > {root}/bwlab-X-0-0/l2/cgroup.procs" in text
        assert f"find {root}/bwlab-X-0-0 -depth" in text
    assert f"echo {spec.quota_us} > /cg/cpu/bwlab-X-0-0/l2/cpu.cfs_quota_us" in text
    assert f"echo {spec.period_us} > /cg/cpu/bwlab-X-0-0/cpu.cfs_period_us" in text
    assert "echo 1000 > /cg/cpu/bwlab-X-0-0/l2/cpu.cfs_burst_us" in text
    assert "cat /cg/cpuset/cpuset.mems > /cg/cpuset/bwlab-X-0-0/l2/cpuset.mems" in text
    assert '"cpuacct_usage_ns $(cat /cg/cpuacct/bwlab-X-0-0/cpuacct.usage)"' in text
    assert "cpu.max" not in text and "subtree_control" not in text and "/tmp/" not in text


def test_v1_plan_without_cpuset_refuses_a_cpuset_case() -> None:
    spec = replace(scenario.load(scenario.builtin_path("hierarchy")).resolve(2)[0], cpus="0")
    with pytest.raises(BwlabError, match="cpuset"):
        plan.render_plan([spec], layout=plan.Layout(1, "/cg/cpu", "/cg/cpuacct", None))


def test_plan_saves_what_it_changes_only_when_asked() -> None:
    specs = scenario.load(scenario.builtin_path("slice")).resolve(2)
    assert "restore.sh" not in plan.render_plan(specs)  # a guest reboots
    text = plan.render_plan(specs, features=["NO_LAGS"], tmp_dir="/d", restore=True)
    assert "/d/restore.sh" in text and "sched_cfs_bandwidth_slice_us" in text
    assert text.index("restore.sh") < text.index("echo NO_LAGS")  # saved before it is changed


def test_cli_refuses_guest_options_and_bad_targets() -> None:
    proc = bwlab("run", "table2", "--target", "ssh://box", "--accel", "kvm")
    assert proc.returncode == 1 and "--accel applies to --target guest and guest-host only" in proc.stderr
    proc = bwlab("run", "table2", "--target", "host", "--ssh-config", "/etc/hostname")
    assert proc.returncode == 1 and "ssh://" in proc.stderr
    proc = bwlab("run", "table2", "--target", "ftp://box")
    assert proc.returncode == 2 and "ssh://[user@]host[:port]" in proc.stderr
    proc = bwlab("kselftest", "--target", "host")
    assert proc.returncode == 1 and "guest or over ssh" in proc.stderr


def test_cleanup_kills_the_runners_process_group_under_the_systems_sh(tmp_path: Path) -> None:
    """cleanup.sh, run by /bin/sh (Debian's dash, whose kill took "--" for a PID and killed
    nothing until 2026-11-25), kills the process group whose leader's PID run.sh wrote, runs
    restore.sh, removes the run's directory and says it is clean; the groups' roots here are
    empty directories."""
    run_dir = tmp_path / "bwlab-abc123"
    run_dir.mkdir()
    root = tmp_path / "cg"
    root.mkdir()
    machine = ssh.Machine({"ncpu": "2"}, plan.Layout(2, str(root)), str(run_dir))
    (run_dir / "cleanup.sh").write_text(ssh.cleaner(machine))
    (run_dir / "restore.sh").write_text(f"touch {tmp_path / 'restored'}\n")
    leader = subprocess.Popen(["sleep", "60"], start_new_session=True)  # a group of its own, as run.sh's
    try:
        (run_dir / "pid").write_text(f"{leader.pid}\n")
        out = subprocess.run(["sh", str(run_dir / "cleanup.sh")], capture_output=True, text=True, timeout=30)
        assert leader.wait(timeout=5) == -signal.SIGKILL, out.stderr
    finally:
        if leader.poll() is None:
            leader.kill()
            leader.wait()
    assert out.stdout.strip() == "BWLAB-CLEAN" and (tmp_path / "restored").exists()
    assert not run_dir.exists() and not Path(f"{run_dir}.cleaning").exists()
