"""The ssh:// target against a real OpenSSH server: Debian's sshd started here on 127.0.0.1
(a free port, throwaway host and user keys, its own config; stopped afterwards), reached
through an ssh_config file (--ssh-config) as a user's ~/.ssh/config would be.

Contracts: a scenario over ssh:// gives the host target's result shape and, on the same
kernel, numbers within noise; SIGINT, and a killed bwlab, leave no group, process or
directory there; bad input (unreachable host, refused key, no cgroup CPU control there, a
program whose library is missing there) is one line and exit status 1.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bwlab import cgroup
from bwlab.machine import kernel_hz

from conftest import (
    DATA,
    REPO,
    assert_truth_knows_known_demand,
    bwlab,
    interrupt_when,
    kill_tree,
    needs_root,
    traced_below_quota,
    tracefs_state,
)

pytestmark = needs_root()

SSHD = Path("/usr/sbin/sshd")
V1_ROOTS = [Path("/sys/fs/cgroup") / n for n in ("cpu", "cpuacct", "cpuset")]


@dataclass
class Sshd:
    config: Path  # the client's ssh_config, naming the server "bwlab-test"
    work: Path
    proc: subprocess.Popen[bytes]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _keys_and_configs(work: Path, port: int, listen: str, user_key: str = "user_key") -> None:
    """Fresh host and user keys in `work`, sshd_config (root by key only, on `listen`) and the
    client's ssh_config naming the server "bwlab-test" at 127.0.0.1:`port`."""
    work.mkdir(parents=True, exist_ok=True)
    for key in ("host_key", "user_key", "other_key"):
        if not (work / key).exists():
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(work / key)], check=True)
    shutil.copy(work / "user_key.pub", work / "authorized_keys")
    (work / "sshd_config").write_text(
        f"{listen}\nHostKey {work / 'host_key'}\n"
        f"AuthorizedKeysFile {work / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
        f"PidFile {work / 'sshd.pid'}\n"
    )
    (work / "ssh_config").write_text(
        f"Host bwlab-test\n  HostName 127.0.0.1\n  Port {port}\n  User root\n  IdentityFile {work / user_key}\n"
        f"  IdentitiesOnly yes\n  UserKnownHostsFile {work / 'known_hosts'}\n  StrictHostKeyChecking accept-new\n"
    )


def start_sshd(work: Path, wrap: list[str] | None = None, user_key: str = "user_key") -> Sshd:
    """sshd on a free port of 127.0.0.1 with fresh keys, root by key only; `wrap` runs it
    inside another command (a mount namespace)."""
    if not SSHD.is_file():
        pytest.fail("sshd is missing: scripts/setup.sh --tests installs openssh-server")
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
    port = _free_port()
    _keys_and_configs(work, port, f"Port {port}\nListenAddress 127.0.0.1", user_key)
    cmd = [str(SSHD), "-D", "-e", "-f", str(work / "sshd_config")]
    proc = subprocess.Popen([*(wrap or []), *cmd], stdout=subprocess.DEVNULL, stderr=(work / "sshd.log").open("wb"))
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return Sshd(work / "ssh_config", work, proc)
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    pytest.fail(f"sshd did not start: {(work / 'sshd.log').read_text()[-500:]}")


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


def ssh_args(server: Sshd) -> list[str]:
    return ["--target", "ssh://bwlab-test", "--ssh-config", str(server.config)]


def _groups() -> set[Path]:
    return {g for root in V1_ROOTS if root.is_dir() for g in root.iterdir() if g.name.startswith("bwlab-")}


def leftovers(before: set[Path]) -> list[str]:
    """What a run may leave on the "remote" (this machine), beyond what was there `before`
    (_run_dirs()): groups, run directories, processes started from a run directory."""
    found = [str(g) for g in _groups() - before]
    found += [str(d) for d in set(Path("/tmp").glob("bwlab-*")) - before if d.is_dir() and len(d.name) == 12]
    found += [f"pid {pid}: {cmd}" for pid, cmd in _processes() if RUN_DIR.search(cmd)]
    return found


RUN_DIR = re.compile(r"/tmp/bwlab-[A-Za-z0-9]{6}/")  # what the probe's mktemp makes


def _processes() -> list[tuple[int, str]]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found.append((int(entry.name), (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()))
            except OSError:
                continue
    return found


def _run_dirs() -> set[Path]:
    """The run directories and groups there are before a run (another test's, or a user's)."""
    return set(Path("/tmp").glob("bwlab-*")) | _groups()


def _shape(doc: dict[str, object]) -> list[tuple[str, list[list[str]]]]:
    cases = doc["cases"]
    assert isinstance(cases, list)
    return [(c["case"], [sorted(r["metrics"]) for r in c["reps"]]) for c in cases]


def _compare_throttled(a: Path, b: Path) -> dict[str, object]:
    proc = bwlab("compare", str(a), str(b), "--metric", "throttled_pct", "--json", "-")
    assert proc.returncode == 0, proc.stderr
    (row,) = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return dict(row)


def host_and_ssh(sshd: Sshd, scenario: str, name: str, out: Path, *args: str) -> tuple[dict[str, Any], ...]:
    """`bwlab run` of one scenario on the host target, then over ssh:// into `out`; both
    result documents (the scenario's file names start with `name`)."""
    common = ["run", scenario, *args, "--out", str(out)]
    for target in (["--target", "host"], ssh_args(sshd)):
        proc = bwlab(*common, *target, timeout=300)
        assert proc.returncode == 0, proc.stderr
    return tuple(json.loads((out / f"{name}-{label}.json").read_text()) for label in ("host", "ssh-bwlab-test"))


def test_table2_over_ssh_matches_the_host(sshd: Sshd, tmp_path: Path) -> None:
    """The same kernel twice, once through sshd: the same result shape and meta, and the same
    throttled % at a 10 ms period (demand == quota: about half the periods), as medians of six
    3 s repetitions each, within 10 % of each other.

    Medians, because throttling at demand == quota is all or nothing in outside load: a task
    that takes 1-2 % of a CPU from the group for a few seconds takes its demand below the quota
    and its repetition's share down (this machine: 6 of 264 repetitions in 18 runs, at 1.7-37 %,
    at most 2 together; docs/testing.md). Bounds from those 18 runs (22 pairs): median ratio ssh/host
    0.969-1.040; on the machine of 2026-11-28 (21 runs) 0.873-1.060, the 3rd lowest 37.7-47.2 %.
    Before, `bwlab compare`'s "not significant at 95 %" and every repetition above
    20 %, with a second pair on failure, failed 2 of the 18 runs."""
    before = _run_dirs()
    host_doc, ssh_doc = host_and_ssh(sshd, str(DATA / "table2-10ms.toml"), "table2-10ms", tmp_path, "--reps", "6",
                                     "--duration", "3")  # fmt: skip
    assert _shape(ssh_doc) == _shape(host_doc) and ssh_doc["status"] == "ok"
    meta = ssh_doc["meta"]
    assert meta["target"] == "ssh" and meta["remote"] == "ssh://bwlab-test"
    assert meta["kernel_release"] == platform.release() and meta["hz"] == kernel_hz()
    assert meta["vcpus"] == len(os.sched_getaffinity(0)) and meta["cgroup"] == cgroup.detect().describe()
    assert len(meta["noise"]) == 2 and all("metrics" in p for p in meta["noise"])
    comparison = _compare_throttled(tmp_path / "table2-10ms-host.json", tmp_path / "table2-10ms-ssh-bwlab-test.json")
    print(f"table2 over ssh: {json.dumps(comparison)}")  # docs/testing.md's distribution
    host, ssh = (sorted(comparison[side]) for side in ("a_values", "b_values"))  # type: ignore[call-overload]
    # demand == quota is throttled on both, at most 2 of 6 repetitions lost to outside load; the
    # level is the machine's (49-50 % on the machine of 2026-11-26, 38-47 % on that of 2026-11-28:
    # docs/testing.md), so the bound is below both
    assert host[2] > 30 and ssh[2] > 30, comparison
    assert 0.8 <= statistics.median(ssh) / statistics.median(host) <= 1.2, comparison
    assert leftovers(before) == []


def test_cglat_over_ssh_has_the_host_shape(sshd: Sshd, tmp_path: Path) -> None:
    """cglat's cases (a cpuset one among them) over ssh: every case and metric the host has."""
    before = _run_dirs()
    host_doc, ssh_doc = host_and_ssh(sshd, "cglat", "cglat", tmp_path, "--reps", "1", "--duration", "1")
    assert _shape(ssh_doc) == _shape(host_doc)
    for case in ssh_doc["cases"]:
        for rep in case["reps"]:
            assert rep["samples_us"] and rep["metrics"]["cpus_used"] > 0
    assert leftovers(before) == []


def test_the_trace_side_over_ssh_knows_known_demand(sshd: Sshd, tmp_path: Path) -> None:
    """The trace side action over ssh:// (a tracefs instance there, mounted first if it is not;
    its output carried back gzip'd in base64): the traced truth of the below-quota scenario
    calls demand == quota below quota and twice the quota over-use, and the detector agrees, as
    on the host; tracefs there is left as it was found, no instance of ours."""
    before_dirs, before = _run_dirs(), tracefs_state()
    proc = bwlab("run", str(traced_below_quota(tmp_path)), "--reps", "1", "--out", str(tmp_path), *ssh_args(sshd),
                 timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert tracefs_state() == before
    doc = json.loads((tmp_path / "below-quota-ssh-bwlab-test.json").read_text())
    assert_truth_knows_known_demand(doc, detector_too=True)
    assert leftovers(before_dirs) == []


def test_sigint_mid_trace_over_ssh_undoes_the_trace_there(sshd: Sshd, tmp_path: Path) -> None:
    """SIGINT while the trace side action traces there: the plan's restore.sh turns the events
    off, removes the instance and unmounts tracefs if the plan mounted it, before bwlab exits,
    and the plan is dead by then. Until 2026-11-25 dash's kill took cleanup.sh's "--" for a PID
    and killed nothing: the plan ran on through the trace's end (~2.5 s past bwlab's exit in 3
    of 10 runs), its reading of the trace made restore.sh's umount fail (EBUSY), and the mark
    that said to unmount was removed all the same: tracefs stayed mounted."""
    before_dirs, before = _run_dirs(), tracefs_state()
    cmd = [sys.executable, "-m", "bwlab.cli", "run", str(traced_below_quota(tmp_path)), "--reps", "1",
           "--out", str(tmp_path / "out"), *ssh_args(sshd)]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    rc, err = interrupt_when(
        proc,
        lambda: any(name.startswith("bwlab-") for name in tracefs_state()[1]),
        "the trace never started there",
        within=120,
        settle=0.5,
    )
    assert rc == 130 and "interrupted" in err
    assert tracefs_state() == before
    assert leftovers(before_dirs) == []


def _interrupted(sshd: Sshd, sig: int, tmp_path: Path) -> tuple[int, str]:
    """Start a run over ssh, wait until its first group exists there, send `sig` to bwlab."""
    cmd = [sys.executable, "-m", "bwlab.cli", "run", str(DATA / "table2-10ms.toml"), "--reps", "3",
           "--duration", "5", "--out", str(tmp_path), *ssh_args(sshd)]  # fmt: skip
    # only a group this run makes: a group another run left (a CI killed on this machine left
    # one in the CI of 1130f98) was taken for this run's, with no workload in it
    others = _groups()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def running_there() -> bool:
        if not [g for g in _groups() - others if g.parent == V1_ROOTS[0]]:
            return False
        time.sleep(0.5)
        assert [c for _, c in _processes() if RUN_DIR.search(c) and "sysbench" in c], "no workload running there"
        return True

    return interrupt_when(proc, running_there, "the run never made its group", within=60, settle=0, sig=sig)


def test_sigint_during_an_ssh_run_leaves_nothing_there(sshd: Sshd, tmp_path: Path) -> None:
    before = _run_dirs()
    rc, err = _interrupted(sshd, signal.SIGINT, tmp_path)
    assert rc == 130 and "interrupted" in err
    assert leftovers(before) == []  # bwlab's own cleanup ran before it exited


def test_killed_bwlab_leaves_nothing_there(sshd: Sshd, tmp_path: Path) -> None:
    """SIGKILL: no cleanup in bwlab; its ssh client dies with it and the remote watchdog cleans."""
    before = _run_dirs()
    rc, _ = _interrupted(sshd, signal.SIGKILL, tmp_path)
    assert rc == -signal.SIGKILL
    deadline = time.monotonic() + 20
    while leftovers(before) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert leftovers(before) == []


def _one_line_error(proc: subprocess.CompletedProcess[str], expected: str) -> None:
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()  # progress lines ("✓ step") may come before it
    errors = [line for line in lines if "error" in line.lower() or "Traceback" in line]
    assert errors == lines[-1:] and lines[-1].startswith("bwlab: error: ") and expected in lines[-1], proc.stderr


def test_unreachable_host_and_refused_key_are_one_line_errors(sshd: Sshd) -> None:
    before = _run_dirs()
    closed = _free_port()  # nothing listens there
    _one_line_error(bwlab("run", "table2", "--target", f"ssh://root@127.0.0.1:{closed}"), "Connection refused")
    refused = sshd.config.with_name("ssh_config_other_key")
    refused.write_text(sshd.config.read_text().replace("user_key", "other_key"))
    _one_line_error(bwlab("run", "table2", "--target", "ssh://bwlab-test", "--ssh-config", str(refused)),
                    "Permission denied")  # fmt: skip
    assert leftovers(before) == []


def test_remote_without_cgroup_cpu_control_is_a_one_line_error(tmp_path: Path) -> None:
    """sshd in a mount namespace where /sys/fs/cgroup is an empty tmpfs: a machine whose
    kernel offers no cgroup CPU controller to its users."""
    before = _run_dirs()
    hide = ["unshare", "-m", "--propagation", "private", "sh", "-c", 'mount -t tmpfs none /sys/fs/cgroup && exec "$@"',
            "sh"]  # fmt: skip
    server = start_sshd(tmp_path / "sshd", wrap=hide)
    try:
        proc = bwlab("run", "table2", *ssh_args(server))
    finally:
        server.stop()
    _one_line_error(proc, "no cgroup CPU bandwidth control there")
    assert leftovers(before) == []


def test_program_missing_a_library_there_is_a_one_line_error(sshd: Sshd, tmp_path: Path) -> None:
    """A user's program linked against a library that only bwlab's environment finds
    (LD_LIBRARY_PATH here, nothing on the remote)."""
    before = _run_dirs()
    (tmp_path / "lib.c").write_text("int bw_answer(void) { return 42; }\n")
    (tmp_path / "main.c").write_text('#include <stdio.h>\nint bw_answer(void);\n'
                                     'int main(void) { printf("%d\\n", bw_answer()); return 0; }\n')  # fmt: skip
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(tmp_path / "libbwtest.so"), str(tmp_path / "lib.c")],
                   check=True)  # fmt: skip
    subprocess.run(["cc", "-o", str(tmp_path / "uses-lib"), str(tmp_path / "main.c"), f"-L{tmp_path}", "-lbwtest"],
                   check=True)  # fmt: skip
    (tmp_path / "s.toml").write_text('name = "lib"\nrepetitions = 1\nduration_s = 1\n[cgroup]\nperiod_us = 10000\n'
                                     'quota_cpus = 0.5\n[workload]\nkind = "command"\nargv = ["uses-lib"]\n'
                                     'files = ["uses-lib"]\n')  # fmt: skip
    proc = bwlab("run", str(tmp_path / "s.toml"), "--out", str(tmp_path / "out"), *ssh_args(sshd),
                 env={"LD_LIBRARY_PATH": str(tmp_path)})  # fmt: skip
    _one_line_error(proc, "uses-lib needs libbwtest.so, which the remote does not have")
    assert leftovers(before) == []


@pytest.fixture(scope="module")
def kernel_source_fetched() -> None:
    fetch = bwlab("kernel", "fetch", timeout=1800)
    assert fetch.returncode == 0, fetch.stderr


def test_kselftest_over_ssh(sshd: Sshd, kernel_source_fetched: None, tmp_path: Path) -> None:
    """test_cpu copied there and run on its kernel. It needs the cpu controller in cgroup v2:
    where that exists its upstream tests report; on a v1 machine (this one) it skips them
    all, which is a one-line error naming why."""
    before = _run_dirs()
    proc = bwlab("kselftest", "--out", str(tmp_path), *ssh_args(sshd), "--expect-fail", timeout=900)
    doc = json.loads((tmp_path / "kselftest-ssh-bwlab-test.json").read_text())
    assert doc["meta"]["kernel_release"] == platform.release() and doc["output"].startswith("TAP version")
    if isinstance(cgroup.detect(), cgroup.CgroupV2):
        assert proc.returncode == 0, proc.stderr
        assert {t["name"]: t["status"] for t in doc["tests"]}["test_cpucg_subtree_control"] == "pass"
    else:
        _one_line_error(proc, "needs the cpu controller in cgroup v2")
    assert leftovers(before) == []


@pytest.fixture(scope="module")
def guest_sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    """This machine's sshd in a host-userland guest of the patched lab kernel (`bwlab guest
    exec --forward`): another kernel (7.3.4 and the series, not the host's), cgroup v2 (the
    host has v1), reached through QEMU's user network at 127.0.0.1:PORT here."""
    if not SSHD.is_file():
        pytest.fail("sshd is missing: scripts/setup.sh --tests installs openssh-server")
    build = bwlab("kernel", "build", timeout=3600)
    assert build.returncode == 0, build.stderr[-2000:]
    key = build.stdout.split()[0]
    work = tmp_path_factory.mktemp("guest-sshd")
    port = _free_port()
    _keys_and_configs(work, port, "Port 22")
    argv = [sys.executable, "-m", "bwlab.cli", "guest", "exec", "--kernel", key, "--accel", "tcg", "--forward",
            f"{port}:22", "--timeout", "1800", "--", "/bin/sh", "-c",
            f"mkdir -p /run/sshd && exec {SSHD} -D -e -f {work / 'sshd_config'}"]  # fmt: skip
    with (work / "sshd.log").open("wb") as log:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    server = Sshd(work / "ssh_config", work, proc)
    try:
        deadline = time.monotonic() + 180  # a TCG boot with the host's userland: 20-40 s here
        while time.monotonic() < deadline and proc.poll() is None:
            probe = subprocess.run(["ssh", "-F", str(server.config), "-o", "BatchMode=yes", "-o",
                                    "ConnectTimeout=10", "bwlab-test", "uname -r"],
                                   capture_output=True, text=True, check=False, timeout=60)  # fmt: skip
            if probe.returncode == 0:
                break
            time.sleep(2)
        else:
            pytest.fail(f"sshd in the guest never answered: {(work / 'sshd.log').read_text()[-800:]}")
        yield server
        proc.send_signal(signal.SIGTERM)  # bwlab stops QEMU, removes its files and says so: 130
        assert proc.wait(timeout=60) == 130, (work / "sshd.log").read_text()[-800:]
    finally:
        if proc.poll() is None:  # a failure or an interrupt above: QEMU goes with bwlab's group
            kill_tree(proc.pid)
            proc.wait(timeout=60)


def test_table2_over_ssh_runs_on_the_remote_kernel(guest_sshd: Sshd, tmp_path: Path) -> None:
    """The ssh target measures the machine it reaches, not this one: against sshd in a guest
    of the patched lab kernel, the run's metadata is the guest's (its kernel release, cgroup v2
    whatever this host has, its two vCPUs) and the groups the run made there are gone after it.
    The throttled % at demand == quota (10 ms) is printed, not bounded (no distribution yet)."""

    def there() -> set[str]:  # the groups and run directories in the guest
        ls = subprocess.run(["ssh", "-F", str(guest_sshd.config), "-o", "BatchMode=yes", "bwlab-test",
                             "ls -d /sys/fs/cgroup/bwlab-* /tmp/bwlab-?????? 2>/dev/null; true"],
                            capture_output=True, text=True, check=True)  # fmt: skip
        return set(ls.stdout.split())

    before, out = there(), tmp_path / "out"
    proc = bwlab("run", str(DATA / "table2-10ms.toml"), "--reps", "3", "--duration", "3", "--out", str(out),
                 *ssh_args(guest_sshd), timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads((out / "table2-10ms-ssh-bwlab-test.json").read_text())
    meta = doc["meta"]
    assert doc["status"] == "ok" and meta["target"] == "ssh" and meta["remote"] == "ssh://bwlab-test"
    assert meta["kernel_release"].startswith("7.3.4") and meta["kernel_release"] != platform.release()
    assert meta["vcpus"] == 2 and "v2" in str(meta["cgroup"])
    throttled = {c["case"]: [r["metrics"].get("throttled_pct") for r in c["reps"]] for c in doc["cases"]}
    print(f"table2 over ssh in the patched guest: {json.dumps(throttled)}")
    assert there() - before == set()
