"""bwlab-nri (nri/) against a real runtime: containerd 2.4.2 with its CRI and NRI plugins, its
runc shim and Debian's runc, driven by crictl as the kubelet would, on this host's cgroups
(v1 here). Images are built here (tests/oci_image.py) and imported: no registry.

Contract: a container with a CPU limit gets one tick per CPU it may run on as its burst,
clamped to its quota; a lower quota than the burst is accepted (the plugin lowers the burst
first) and the burst follows the quota up again; `off` leaves none; a malformed annotation is
logged and counted and the container runs; a restarted plugin re-synchronizes the running
containers; with the plugin killed, containers still start. And the hazard the plugin exists
for, pinned: without it, the runtime's own update of a quota below the group's burst is
refused by the kernel and the quota stays as it was.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from bwlab import cgroup
from bwlab.machine import kernel_hz

import nri_runtime
import prereqs
from conftest import REPO, daemonset, lacking, needs_root
from nri_runtime import Runtime

pytestmark = [needs_root(), pytest.mark.untimed]


def read(group: Path, name: str) -> int:
    return int((group / name).read_text())


def runtime_or_skip() -> Path:
    found = prereqs.runtime_dir()
    if not all((found / tool).is_file() for tool in prereqs.RUNTIME_TOOLS):
        lacking(f"containerd, its shim, ctr or crictl missing in {found} (scripts/setup.sh --tests builds them)")
    if shutil.which("runc") is None:
        lacking("runc is not installed (scripts/setup.sh --tests)")
    if not (cgroup.CGROUP_ROOT / "cpu" / "cpu.cfs_burst_us").is_file():
        # a property of the host nothing can install (CI's hosts have it): a skip, saying so
        pytest.skip("these tests drive cgroup v1's cpu.cfs_burst_us (this host's); v2 hosts: nri/README.md")
    return found


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Runtime]:
    """A containerd of the test's own, and the plugin built from nri/ (Go's cache: seconds)."""
    bin_dir = runtime_or_skip()
    go = prereqs.which("go")
    if go is None:
        lacking("go is not installed")
    assert go is not None
    plugin_bin = tmp_path / "bwlab-nri"
    subprocess.run([go, "build", "-o", str(plugin_bin), "."], cwd=REPO / "nri", check=True, timeout=600)
    with nri_runtime.started(bin_dir, plugin_bin) as rt:
        yield rt


def online_cpus() -> int:
    """|/sys/devices/system/cpu/online|: the CPUs a container without a cpuset may run on."""
    n = 0
    for part in Path("/sys/devices/system/cpu/online").read_text().strip().split(","):
        lo, _, hi = part.partition("-")
        n += int(hi or lo) - int(lo) + 1
    return n


def auto_burst(quota_us: int) -> int:
    """What the plugin's auto gives: one tick per CPU, at most the quota."""
    return min(quota_us, 1_000_000 // (kernel_hz() or 250) * online_cpus())


def test_the_plugin_sets_the_burst_and_a_lower_quota_is_not_refused(runtime: Runtime) -> None:
    runtime.start_plugin()
    pod = runtime.pod()
    cid = runtime.container(pod, "web", 50000)
    group = runtime.group(pod, cid)
    assert read(group, "cpu.cfs_quota_us") == 50000
    assert read(group, "cpu.cfs_burst_us") == auto_burst(50000), runtime.log()
    # a quota below the burst: the plugin lowers the burst before the runtime writes the quota
    done = runtime.update(cid, 5000)
    assert done.returncode == 0, done.stderr
    assert read(group, "cpu.cfs_quota_us") == 5000
    assert read(group, "cpu.cfs_burst_us") == min(5000, auto_burst(5000))
    if auto_burst(10**9) > 5000:
        assert "burst clamped" in runtime.log() and "above the quota 5000 us" in runtime.log()
    # and up again: the burst follows
    assert runtime.update(cid, 80000).returncode == 0
    assert (read(group, "cpu.cfs_quota_us"), read(group, "cpu.cfs_burst_us")) == (80000, auto_burst(80000))


def test_annotations_off_and_malformed(runtime: Runtime) -> None:
    runtime.start_plugin()
    pod = runtime.pod({"cpu-burst.bwlab.io/container.quiet": "off"})
    quiet = runtime.container(pod, "quiet", 50000)
    assert read(runtime.group(pod, quiet), "cpu.cfs_burst_us") == 0
    fixed = runtime.container(pod, "fixed", 50000, annotations={"cpu-burst.bwlab.io/container.fixed": "3000"})
    assert read(runtime.group(pod, fixed), "cpu.cfs_burst_us") == 3000
    bad = runtime.container(pod, "bad", 50000, annotations={"cpu-burst.bwlab.io/container.bad": "lots"})
    state = runtime.crictl("inspect", "-o", "go-template", "--template", "{{.status.state}}", bad).stdout
    assert "RUNNING" in state
    assert read(runtime.group(pod, bad), "cpu.cfs_burst_us") == 0
    said = [line for line in runtime.log().splitlines() if "container.bad" in line and "level=error" in line]
    assert said and "expected auto, off or microseconds" in said[0] and "errors=" in said[0], runtime.log()


def test_a_restarted_plugin_resynchronizes_and_a_dead_one_blocks_nothing(runtime: Runtime) -> None:
    runtime.start_plugin()
    pod = runtime.pod()
    cid = runtime.container(pod, "sync", 40000)
    group = runtime.group(pod, cid)
    assert read(group, "cpu.cfs_burst_us") == auto_burst(40000)
    runtime.stop_plugin()
    (group / "cpu.cfs_burst_us").write_text("0")  # drift while the plugin is away
    runtime.start_plugin()
    assert read(group, "cpu.cfs_burst_us") == auto_burst(40000), runtime.log()
    # killed: the runtime drops it, containers start as they would without it
    runtime.stop_plugin()
    alone = runtime.container(pod, "alone", 40000)  # crictl's own 30 s timeout: no bound of ours
    state = runtime.crictl("inspect", "-o", "go-template", "--template", "{{.status.state}}", alone).stdout
    assert "RUNNING" in state and read(runtime.group(pod, alone), "cpu.cfs_burst_us") == 0
    # the hazard the plugin handles, with no plugin: a quota below the group's burst is refused
    (runtime.group(pod, alone) / "cpu.cfs_burst_us").write_text("8000")
    refused = runtime.update(alone, 5000)
    assert refused.returncode != 0 and "invalid argument" in refused.stderr, refused.stderr
    assert read(runtime.group(pod, alone), "cpu.cfs_quota_us") == 40000


def test_the_pods_group_gets_a_burst_and_the_kubelets_lower_pod_quota_is_not_refused(runtime: Runtime) -> None:
    """The kubelet gives a pod's group the sum of its containers' limits: without a burst of
    its own the pod's group throttles where the container's burst would not. In a resize down
    the kubelet lowers the containers' quotas, then the pod's: the plugin lowers the pod's
    burst at the container's update, so the pod's lower quota is not refused."""
    runtime.start_plugin()
    pod = runtime.pod(quota_us=50000)
    cid = runtime.container(pod, "web", 50000)
    assert read(runtime.group(pod), "cpu.cfs_burst_us") == auto_burst(50000), runtime.log()
    assert read(runtime.group(pod, cid), "cpu.cfs_burst_us") == auto_burst(50000)
    assert runtime.update(cid, 5000).returncode == 0
    assert read(runtime.group(pod), "cpu.cfs_burst_us") <= 5000, runtime.log()
    (runtime.group(pod) / "cpu.cfs_quota_us").write_text("5000")  # the kubelet's write: accepted
    assert read(runtime.group(pod), "cpu.cfs_quota_us") == 5000


def test_the_daemonset_validates_and_asks_only_what_the_plugin_needs() -> None:
    spec, container = daemonset(REPO / "deploy" / "kubernetes" / "bwlab-nri.yaml")
    ctx = container["securityContext"]
    assert ctx["capabilities"]["drop"] == ["ALL"] and "add" not in ctx["capabilities"]
    assert ctx["readOnlyRootFilesystem"] is True and ctx["allowPrivilegeEscalation"] is False
    assert not spec.get("hostPID") and not spec.get("hostNetwork") and not ctx.get("privileged")
    assert "cpu" not in container["resources"].get("limits", {})  # a throttled plugin delays every creation
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert set(mounts) == {"/var/run/nri", "/host/sys/fs/cgroup", "/host/boot"} and mounts["/host/boot"]["readOnly"]
    args = dict(a.lstrip("-").split("=", 1) for a in container["args"])
    assert args["cgroup-root"] == "/host/sys/fs/cgroup" and args["socket"].startswith("/var/run/nri/")
