"""Host-userland guests for real: `bwlab guest exec` boots the lab's v7.3.4 kernel with this
machine's / shared read-only, and runs this machine's programs in it on the guest kernel's real
cgroup v2 (the host's own cpu controller is on cgroup v1).

Contract: the command's stdout, stderr and exit status come back apart and unchanged; the guest
writes nothing to the host; cgroup2 has the cpu, cpuset, memory and pids controllers; bwlab's
doctor and tune work there as on v1 (test_live_real.py): demand == quota is below quota and
tune's burst (cpu.max.burst) is written, read back and reverted; twice the quota is at quota.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bwlab.kernel.build import image_by_key
from bwlab.targets import hostroot

from conftest import DATA, REPO, baseline_kernel, bwlab, pids_with, tool_or_skip

pytestmark = pytest.mark.guest


@pytest.fixture(scope="module")
def kernel_key() -> str:
    return baseline_kernel()


@pytest.mark.untimed  # no timing in it: runs in the parallel phase
def test_exec_returns_output_and_status_and_writes_nothing_here(kernel_key: str) -> None:
    mark = REPO / "written-by-a-guest"
    script = ("cat /sys/fs/cgroup/cgroup.controllers; test -t 1 || echo piped; echo to-stderr >&2; "
              f"touch {mark} && test -e {mark} && echo wrote; "
              '.venv/bin/python -c "import bwlab, os; print(os.getcwd())"; exit 7')  # fmt: skip
    res = bwlab("guest", "exec", "--kernel", kernel_key, "--accel", "tcg", "--", "sh", "-c", script, timeout=300)
    assert res.returncode == 7, res.stderr
    lines = res.stdout.splitlines()
    assert set(lines[0].split()) >= {"cpu", "cpuset", "memory", "pids"}, lines
    assert lines[1:] == ["piped", "wrote", str(REPO)], lines  # the same programs, at the same path
    assert res.stderr == "to-stderr\n"
    assert not mark.exists()  # the guest's writes stay in its overlay


@pytest.mark.untimed  # no timing in it: runs in the parallel phase
def test_output_arrives_whole_from_a_directory_with_spaces(kernel_key: str, tmp_path: Path) -> None:
    """2 MB of output arrives byte for byte; a working directory under the host's /tmp, its name
    with a space, is the command's; a child left running with the pipes open does not hold the
    guest past its 2 s."""
    where = tmp_path / "a dir"
    where.mkdir()
    script = "seq 300000; pwd >&2; sleep 1000 &"
    res = subprocess.run([*bwlab_argv(), "guest", "exec", "--kernel", kernel_key, "--accel", "tcg", "--", "sh", "-c",
                          script], cwd=where, capture_output=True, timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout == subprocess.run(["seq", "300000"], capture_output=True, check=True).stdout
    assert res.stderr == f"{where}\n".encode()


@pytest.mark.untimed  # no timing in it: runs in the parallel phase
def test_timeout_and_interrupt_leave_nothing(kernel_key: str, tmp_path: Path) -> None:
    """--timeout: exit 124, what was printed before it kept; SIGTERM (as SIGINT): exit 130; after
    both no QEMU of these runs is left (their shares, under a TMPDIR of this test's own, name
    them: other tests' guests may run beside this one) and no share is left."""
    tmp = tmp_path / "t"
    tmp.mkdir()
    env = {"TMPDIR": str(tmp)}
    res = bwlab("guest", "exec", "--kernel", kernel_key, "--accel", "tcg", "--timeout", "40", "--", "sh", "-c",
                "echo started; exec sleep 1000", env=env, timeout=300)  # fmt: skip
    assert res.returncode == 124 and res.stdout == "started\n" and "within 40 s" in res.stderr, res
    assert not pids_with(str(tmp)) and list(tmp.iterdir()) == []
    proc = subprocess.Popen([*bwlab_argv(), "guest", "exec", "--kernel", kernel_key, "--accel", "tcg", "--", "sh", "-c",
                             "echo started; exec sleep 1000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=REPO, env={**os.environ, **env}, start_new_session=True)  # fmt: skip
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"started\n"  # the command runs in the guest
    assert pids_with(str(tmp))  # its QEMU, found by its share
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and b"interrupted" in err, err
    assert not pids_with(str(tmp)) and list(tmp.iterdir()) == []


@pytest.mark.untimed  # no timing in it: runs in the parallel phase
def test_boot_to_command(kernel_key: str) -> None:
    """Not a timing bound (benchmarks hold speed goals): the time to the command, printed for
    docs/live.md, and a one-line error for a command that is not there."""
    image = image_by_key(kernel_key)
    assert image is not None
    out, err = io.BytesIO(), io.BytesIO()
    done = hostroot.run(image, ["true"], stdout=out, stderr=err, timeout_s=300)
    assert done.status == 0 and out.getvalue() == err.getvalue() == b""
    print(f"guest exec: command started at {done.started_s:.2f} s of guest uptime, {done.elapsed_s:.1f} s in all, "
          f"timer thread {done.timer_thread}")  # fmt: skip
    missing = hostroot.run(image, ["/no/such/program"], stdout=out, stderr=err, timeout_s=300)
    assert missing.status == 127 and b"/no/such/program" in err.getvalue()


def bwlab_argv() -> list[str]:
    return [sys.executable, "-m", "bwlab.cli"]


def _results(stdout: str) -> dict[str, list[Any]]:
    """The guest script's lines "NAME VALUE", VALUE a JSON document or a word, by NAME."""
    found: dict[str, list[Any]] = {}
    for line in stdout.splitlines():
        name, _, rest = line.partition(" ")
        found.setdefault(name, []).append(json.loads(rest) if rest.startswith("{") else rest)
    return found


def test_doctor_and_tune_on_real_cgroup_v2(kernel_key: str) -> None:
    res = bwlab("guest", "exec", "--kernel", kernel_key, "--accel", "tcg", "--", "sh",
                str(DATA / "live-v2-guest.sh"), "10000", timeout=900)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    got = _results(res.stdout)
    runs = got["equal"]
    throttled = sum(doc["throttled"] for doc in runs)
    below = sum(doc["below_quota"] for doc in runs)
    print(f"v2, demand == quota: throttled {[d['throttled'] for d in runs]} of {[d['periods'] for d in runs]}, "
          f"below quota {[d['below_quota'] for d in runs]}")  # fmt: skip
    assert all(d["hierarchy"] == "cgroup v2 at /sys/fs/cgroup" and d["limit"].startswith("2.00 CPUs") for d in runs)
    # 20 runs in one guest (docs/testing.md): 0-15 throttles each, 0 in 2 of them: three runs
    # with none, ~1 in 1000
    assert throttled >= 1, runs
    assert below >= 0.95 * throttled, runs  # recall of "below quota": every throttle here is
    for doc in runs:
        if doc["throttled"]:
            diag = doc["diagnosis"]
            assert diag["verdict"] == "below-quota" and diag["recommended_burst_us"] == 8000, diag  # a tick per CPU
            assert any("cpu.max" in alt["command"] for alt in diag["alternatives"]), diag
    assert got["tuned"] == ["8000"] and got["reverted"] == ["0"]  # written, read back, reverted
    print(f"v2, demand == quota, tuned: {got['tuned_periods']}")
    (twice,) = got["twice"]
    print(f"v2, twice the quota: throttled {twice['throttled']} of {twice['periods']}, at quota {twice['at_quota']}")
    # the same 20 runs: 0.67-1.00 of the periods throttled (doctor's sampling takes CPU from a
    # group that wants twice its quota too), >= 0.986 of them at quota
    assert twice["throttled"] > 0.4 * twice["periods"] and twice["at_quota"] >= 0.95 * twice["throttled"]
    assert twice["diagnosis"]["verdict"] == "at-quota"
    # top on v2: the podman, systemd and tools guests (parallel phase)
    # nested: a child with no limit of its own ("max") under the limited parent
    assert got["child_max"][0].startswith("max "), got["child_max"]
    (nested,) = got["nested"]
    print(f"v2, nested: limit {nested['limit']!r}, effective {nested['effective_limit']!r} by "
          f"{nested['limited_by']}, throttled {nested['throttled']} of {nested['periods']}, verdict "
          f"{nested['diagnosis']['verdict']}")  # fmt: skip
    # the child counts no periods of its own: doctor watches the parent whose limit throttles it
    assert nested["asked"] == "/bwlab-live-v2/work" and nested["group"] == "/bwlab-live-v2", nested
    assert nested["effective_limit"].startswith("1.00 CPUs"), nested
    assert nested["diagnosis"]["verdict"] == "at-quota", nested["diagnosis"]


def _prom_value(doc: dict[str, Any]) -> float:
    """The one sample of a Prometheus instant query's answer."""
    assert doc["status"] == "success", doc
    (sample,) = doc["data"]["result"]
    return float(sample["value"][1])


@pytest.mark.untimed  # counts and values, no timing: runs in the parallel phase
def test_the_agent_and_the_exporter_on_real_cgroup_v2(kernel_key: str) -> None:
    """tune --watch gives matching v2 groups their burst (one made after it started too) and
    leaves the others; a burst above the quota is a one-line error and the old one stays; a
    threaded subtree is diagnosed through its limited threaded domain and listed by top; a
    child whose own limit is looser than its parent's is diagnosed through the parent; the
    exporter on v2, scraped by this machine's Prometheus, has a group's throttles and its
    burst's own counters (cpu.stat nr_bursts), and its exposition passes promtool."""
    res = bwlab("guest", "exec", "--kernel", kernel_key, "--accel", "tcg", "--", "sh",
                str(DATA / "live-v2-tools.sh"), timeout=600)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    got = _results(res.stdout)
    print(res.stdout[-3000:])
    assert got["watch_rc"] == ["0"] and got["watch_verified"] == ["3"], res.stdout
    tick_us = 4000  # HZ=250: one tick per CPU of quota (2 CPUs), within the quota
    bursts = {name: got[f"burst_{name}"] for name in ("w-a", "w-b", "w-late", "other")}
    assert bursts == {"w-a": [str(2 * tick_us)], "w-b": ["1000"], "w-late": [str(2 * tick_us)], "other": ["0"]}
    assert got["refused_rc"] == ["1"] and got["refused_kept"] == ["3000"], res.stdout
    (refused,) = got["refused_lines"]
    assert refused.startswith("1 bwlab: error: burst 20000 us is above the quota 5000 us"), refused
    assert got["threaded_type"] == ["threaded 1"]
    (threaded,) = got["threaded_doctor"]
    assert threaded["asked"] == "/bwlab-tools-t/thr" and threaded["group"] == "/bwlab-tools-t", threaded
    assert threaded["limit"].startswith("0.50 CPUs") and threaded["throttled"] > 0, threaded
    (looser,) = got["looser_doctor"]  # its own 2 CPUs under the parent's 0.5: the parent's throttles
    assert looser["asked"] == "/bwlab-tools-l/c" and looser["group"] == "/bwlab-tools-l", looser
    assert looser["limit"].startswith("0.50 CPUs") and looser["throttled"] > 0, looser
    (said,) = got["looser_doctor_err"]
    assert "own limit (2.00 CPUs" in said and "looser than /bwlab-tools-l's (0.50 CPUs" in said, said
    (top,) = got["top"]
    assert "/bwlab-tools-t " in top and "/bwlab-tools-w-late" in top, top
    (at,) = got["prom_at"]
    (prom_bursts,) = got["prom_bursts"]
    (stat_bursts,) = got["stat_bursts"]
    # scraped before cpu.stat was read: the exporter's last read is at most the kernel's count
    assert _prom_value(at) > 0 and 0 < _prom_value(prom_bursts) <= int(stat_bursts), res.stdout
    assert got["lint"] == ["0"], got["lint"]
    (exporter_err,) = got["exporter_err"]
    assert exporter_err.count("bwlab exporter:") == 1 and "error" not in exporter_err.lower(), exporter_err


@pytest.mark.untimed  # who and which limit, no timing: runs in the parallel phase
def test_a_podman_container_on_real_cgroup_v2(kernel_key: str) -> None:
    """A container podman made on cgroup v2 (runc, cgroupfs manager, an image imported from a
    busybox rootfs, --cpus=1.5, three busy loops): top names it with its limit, doctor finds it
    by an ID prefix, sees its three threads and says it wants more than its quota; removed, it
    leaves no group. Four vCPUs: with two loops on two, doctor's own reads took the CPU the
    loops would have overrun with, and the CI of dc4d935 saw 2 periods of ~30 throttled
    (verdict mixed)."""
    res = bwlab("guest", "exec", "--kernel", kernel_key, "--accel", "tcg", "--vcpus", "4", "--", "sh",
                str(DATA / "podman-v2-guest.sh"), timeout=600)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    print(res.stdout)
    got = _results(res.stdout)
    (cid,) = got["cid"]
    group = f"/libpod_parent/libpod-{cid}"
    assert got["cgroup"] == [f"0::{group}"]  # v2: one line, the unified hierarchy
    (top,) = got["top"]
    cells = [c.strip() for c in top.split("│")]
    assert cells[1:4] == [group, f"container podman {cid[:12]}", "1.50"], top
    (doc,) = got["doctor"]
    assert doc["group"] == group and doc["identity"] == f"container podman {cid[:12]}", doc
    assert doc["limit"].startswith("1.50 CPUs") and doc["threads"] == 3 and doc["verdict"] == "at-quota", doc
    assert got["left"] == ["0"]


@pytest.mark.untimed  # who, which limit and what to do; throttle counts printed, not bounded
def test_systemd_as_pid_1_makes_the_groups_the_tools_name(kernel_key: str) -> None:
    """`guest exec --init systemd`: this machine's systemd is the guest's PID 1 and makes the v2
    groups itself. A service run with CPUQuota=150% is named by top and found by doctor by its
    unit name (two threads, at quota); a service with no CPU setting in a slice given
    CPUQuota=50% at run time has no cpu controller of its own (no cpu.max: the slice's
    subtree_control does not give it one) and doctor watches the slice; an unknown unit is a
    one-line error; at demand == quota with CPUQuotaPeriodSec=10ms, what doctor tells a systemd
    user to do names the unit, and tune by the unit's name writes the burst. The script's stderr
    and exit status (3) come back as under bwlab's own init."""
    res = bwlab("guest", "exec", "--init", "systemd", "--kernel", kernel_key, "--accel", "tcg", "--", "sh",
                str(DATA / "systemd-v2-guest.sh"), timeout=600)  # fmt: skip
    assert res.returncode == 3 and res.stderr == "to stderr\n", res.stderr[-2000:]
    print(res.stdout)
    got = _results(res.stdout)
    assert got["pid1"] == ["systemd"] and got["over_cpu_max"] == ["150000 100000"], res.stdout
    (top,) = got["top"]
    cells = [c.strip() for c in top.split("│")]
    assert cells[1:4] == ["/system.slice/bwlab-over.service", "systemd bwlab-over.service", "1.50"], top
    (over,) = got["over"]
    assert over["identity"] == "systemd bwlab-over.service" and over["threads"] == 2, over
    assert over["verdict"] == "at-quota", over
    assert got["slice_cpu_max"] == ["50000 100000"]
    (inslice,) = got["inslice"]
    assert inslice["asked"] == "/bwlab.slice/bwlab-lim.slice/bwlab-inslice.service", inslice
    assert inslice["group"] == "/bwlab.slice/bwlab-lim.slice" and inslice["identity"] == "systemd bwlab-lim.slice"
    assert inslice["limit"].startswith("0.50 CPUs"), inslice
    (not_found,) = got["not_found"]
    assert not_found.startswith("1 bwlab: error: no CPU-limited systemd unit 'bwlab-nope.service'"), not_found
    assert got["equal_cpu_max"] == ["20000 10000"] and got["equal_burst"] == ["8000"], res.stdout
    assert got["equal_floor"] == ["refuses a quota below 8000 us from systemd (CPUQuota=)"], res.stdout
    (equal,) = got["equal"]
    assert equal["identity"] == "systemd bwlab-equal.service", equal
    # watched, 0-15 throttles in 4 s (docs/testing.md): "none" in 2 runs of 20, else below quota
    assert equal["verdict"] in ("below-quota", "none"), equal
    if equal["verdict"] == "below-quota":
        systemd = [c["command"] for c in equal["commands"] if c["runtime"] == "systemd"]
        assert systemd and "bwlab tune --watch bwlab-equal.service --burst 8000" in systemd[0], equal
        assert "CPUQuotaPeriodSec=100ms" in systemd[0], equal  # its period is 10 ms


# each prints the pool size its runtime chose, then sleeps
GO_PROGRAM = ('package main\nimport ("fmt"; "runtime"; "time")\n'
              "func main() { fmt.Println(runtime.GOMAXPROCS(0)); time.Sleep(time.Hour) }\n")  # fmt: skip
JAVA_PROGRAM = ("class Pools { public static void main(String[] a) throws Exception {\n"
                "System.out.println(Runtime.getRuntime().availableProcessors());\n"
                "Thread.sleep(3600000); } }\n")  # fmt: skip


@pytest.mark.untimed  # pool sizes, no timing: runs in the parallel phase
def test_go_and_jvm_pools_on_real_cgroup_v2_are_what_the_runtimes_chose(kernel_key: str, tmp_path: Path) -> None:
    """In a 4-vCPU guest, a 1-CPU quota on v2: doctor's pool size for each program is the one
    its runtime chose, as the program itself prints it. This machine's Go built twice: go.mod
    `go 1.25` (GOMAXPROCS from the quota: 2) and `go 1.24` (DefaultGODEBUG containermaxprocs=0:
    the 4 CPUs); the JVM with no flag (JDK 17.0.15 on this kernel: container support off,
    /proc/cgroups has no cpuset or memory row, so the 4 CPUs; a JDK with JDK-8349988: 1)."""
    go = tool_or_skip("go")
    env = {**os.environ, "GOCACHE": str(tmp_path / "gocache"), "GOTOOLCHAIN": "local"}
    for name, line in (("old", "go 1.24"), ("new", "go 1.25")):
        src = tmp_path / name
        src.mkdir()
        (src / "main.go").write_text(GO_PROGRAM)
        (src / "go.mod").write_text(f"module sleep{name}\n{line}\n")
        built = subprocess.run([go, "build", "-o", str(tmp_path / f"sleep-{name}"), "."], cwd=src, env=env,
                               capture_output=True, text=True)  # fmt: skip
        assert built.returncode == 0, built.stderr
    (tmp_path / "Pools.java").write_text(JAVA_PROGRAM)
    res = bwlab("guest", "exec", "--vcpus", "4", "--kernel", kernel_key, "--accel", "tcg", "--", "sh",
                str(DATA / "pools-v2-guest.sh"), str(tmp_path), timeout=600)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    print(res.stdout)
    got = _results(res.stdout)
    pids = {line.split()[0]: int(line.split()[1]) for line in got["pid"]}
    said = {line.split()[0]: int(line.split()[1]) for line in got["said"]}
    (pools,) = got["doctor"]
    by_pid = {pool["pid"]: pool for pool in json.loads(pools)}
    sizes = {name: by_pid[pid]["size"] for name, pid in pids.items()}
    assert sizes == said, (sizes, said, by_pid)  # doctor's sizes are what the runtimes chose
    assert said["go-old"] == 4 and said["go-new"] == 2, said
    assert "go.mod" in by_pid[pids["go-old"]]["why"], by_pid[pids["go-old"]]


@pytest.mark.untimed  # twice the quota: throttled in most periods however loaded the machine
def test_a_scenario_runs_this_machines_programs_in_a_guest(kernel_key: str, tmp_path: Path) -> None:
    """A scenario whose workload is a dynamic program (this machine's Python) and which asks for
    this machine's userland ([target] userland = "host"): `--target guest` runs it as
    `--target guest-host`, on the guest kernel's cgroup v2, and its result is the guest's: the
    kernel and its key, v2, the guest's CPUs, the userland named."""
    res = bwlab("run", str(DATA / "guest-host-python.toml"), "--target", "guest", "--kernel", kernel_key,
                "--accel", "tcg", "--out", str(tmp_path), timeout=600)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    (path,) = tmp_path.glob("guest-host-python-*.json")
    doc = json.loads(path.read_text())
    meta = doc["meta"]
    assert (meta["target"], meta["label"], meta["kernel_key"], meta["userland"], meta["vcpus"], meta["hz"]) == (
        "guest-host",
        "guest-baseline-userland",
        kernel_key,
        "host",
        2,
        250,
    ), meta
    assert meta["kernel_release"].startswith("7.3.4") and meta["cgroup"].startswith("cgroup v2"), meta
    reps = doc["cases"][0]["reps"]
    pcts = [r["metrics"]["throttled_pct"] for r in reps]
    print(f"guest-host: python at twice its quota, throttled {pcts} % of periods, boot to command "
          f"{meta['boot_to_command_s']} s")  # fmt: skip
    assert len(reps) == 2 and all(p > 50 for p in pcts), reps


@pytest.mark.untimed  # a group throttled every period: counts and offsets, no timing
def test_doctor_reads_the_kernels_state_at_each_throttle_with_kprobes(kernel_key: str) -> None:
    """doctor --ebpf in a lab guest (kprobes, the layout compiled from the build tree): the
    kprobes find the watched group's throttles and refills by its period timer; the quota the
    kernel holds is the group's (the offsets are right); every period the counters count as
    throttled has a throttle the kprobes saw before its end, whose cause it is given; with a
    layout whose quota offset is wrong, doctor leaves the state out and says why."""
    res = bwlab("guest", "exec", "--kernel", kernel_key, "--accel", "tcg", "--", "sh",
                str(DATA / "kprobes-v2-guest.sh"), timeout=600)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    got = _results(res.stdout)
    print(res.stdout[-3000:])
    assert got["layout"][0].endswith(f"{kernel_key}/layout.json"), got
    (doc,) = got["doc"]
    state = doc["kernel_state"]
    assert state is not None and state["quota_us"] == [50000], got
    assert doc["throttled"] >= 0.9 * doc["periods"] > 10, doc  # a busy loop under half a CPU
    by_verdict = state["by_verdict"]
    assert set(by_verdict) <= {"at", "below", "uncounted"}, by_verdict
    # every period the counters count as throttled has a throttle the kprobes saw before its end
    assert sum(by_verdict.get("at", {}).values()) + sum(by_verdict.get("below", {}).values()) == doc["throttled"]
    assert all(row["unseen"] == 0 for row in by_verdict.values()), by_verdict
    (wrong,) = got["wrong"]  # the quota's offset moved by a field: the state is left out
    assert "does not fit this kernel" in wrong["ignored"], wrong
    assert got["said"][0].strip().startswith(f"the kernel's state at its {state['throttles']} throttles"), got
