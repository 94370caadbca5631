"""bwlab's images, built here (deploy/build-images.sh: a debootstrap base imported into podman,
no registry), run under podman with their DaemonSets' own security settings, doing what the
manifests claim:

- the exporter (daemonset.yaml): uid 65534, no capability, read-only root, the host's cgroupfs
  read-only at /host/sys/fs/cgroup, the host's PID namespace: serves metrics for a host group;
- the agent (bwlab-agent.yaml: tune --watch): uid 0 without any capability, read-only root, the
  host's cgroupfs writable at /sys/fs/cgroup, host PID: sets a host group's burst;
- the plugin (bwlab-nri.yaml): uid 0 without any capability, read-only root, the NRI socket's
  directory and the host's cgroupfs: registers with a real containerd and sets a container's
  burst.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_exporter_real import free_port, get
from test_nri_real import auto_burst

from bwlab import cgroup
from bwlab.paths import cache_root

import nri_runtime
import prereqs
from conftest import (
    REPO,
    lacking,
    needs_root,
    pids_with,
    podman_parents,
    remove_podman_parents,
    running_in_group,
    tool_or_skip,
)

pytestmark = [needs_root(), pytest.mark.untimed]

ULIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"]  # no CAP_SYS_RESOURCE here
LOCKED = ["--cap-drop=ALL", "--read-only", "--security-opt", "no-new-privileges", *ULIMITS]


@pytest.fixture
def podman(tmp_path: Path) -> Iterator[list[str]]:
    """podman with storage of the test's own, bwlab's two images built into it."""
    tool_or_skip("podman")
    if shutil.which("debootstrap") is None:
        lacking("debootstrap is not installed (scripts/setup.sh --tests)")
    runroot = Path(tempfile.mkdtemp(prefix="bwlab-pr-", dir="/tmp"))  # podman: at most 50 characters
    parents = podman_parents()
    storage = tmp_path / "storage"
    argv = ["podman", "--root", str(storage), "--runroot", str(runroot), "--storage-driver", "vfs",
            "--cgroup-manager", "cgroupfs", "--runtime", "runc"]  # fmt: skip
    try:
        built = subprocess.run(["bash", "deploy/build-images.sh", str(cache_root()), *argv[1:]], cwd=REPO,
                               capture_output=True, text=True, timeout=900)  # fmt: skip
        assert built.returncode == 0, built.stderr[-3000:]
        yield argv
    finally:
        subprocess.run([*argv, "rm", "-af", "-t", "0"], capture_output=True)
        deadline = time.monotonic() + 30  # conmon's cleanup writes in the storage after rm returns
        while pids_with(str(runroot)) and time.monotonic() < deadline:
            time.sleep(0.2)
        subprocess.run(["rm", "-rf", str(runroot), str(storage)], check=False)
        remove_podman_parents(parents)


def test_the_exporter_and_the_agent_run_as_their_daemonsets_say(podman: list[str], tmp_path: Path) -> None:
    port = free_port()
    exporter = subprocess.run([*podman, "run", "-d", "--name", "exporter", "--user", "65534:65534", "--pid=host",
                               "--network=host", *LOCKED, "-v", "/sys/fs/cgroup:/host/sys/fs/cgroup:ro",
                               "bwlab-exporter:0.1.0", "exporter", f"--listen=127.0.0.1:{port}", "--interval=1",
                               "--cgroup-root=/host/sys/fs/cgroup", "--duration=120"],
                              capture_output=True, text=True)  # fmt: skip
    assert exporter.returncode == 0, exporter.stderr
    with running_in_group("img", 10000, 5000, ["sh", "-c", "while :; do :; done"]) as grp:
        url, seen, text = f"http://127.0.0.1:{port}/metrics", False, ""
        deadline = time.monotonic() + 60
        while not seen and time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                text = get(url)
                seen = f'id="/{grp.name}"' in text
            time.sleep(0.5)
        logs = subprocess.run([*podman, "logs", "exporter"], capture_output=True, text=True)
        said = logs.stdout[-1500:] + logs.stderr[-1500:]
        assert seen, f"the exporter in its container never served /{grp.name}: {said}"
        # the agent: tune --watch as bwlab-agent.yaml runs it, on the host's groups
        state = tmp_path / "state"
        state.mkdir()
        agent = subprocess.run([*podman, "run", "--rm", "--user", "0:0", "--pid=host", "--network=none", *LOCKED,
                                "-v", "/sys/fs/cgroup:/sys/fs/cgroup", "-v", f"{state}:/var/lib/bwlab",
                                "-e", "BWLAB_CACHE=/var/lib/bwlab", "bwlab-exporter:0.1.0", "tune", f"/{grp.name}",
                                "--watch", "--burst=auto", "--interval=0.5", "--iterations=2"],
                               capture_output=True, text=True, timeout=120)  # fmt: skip
        assert agent.returncode == 0, agent.stderr
        burst = int((grp.stat_file.parent / "cpu.cfs_burst_us").read_text())
        assert burst > 0 and f"/{grp.name}" in agent.stdout and "(verified)" in agent.stdout, agent.stdout
        assert list(state.glob("tune/*.json")), "the agent's revert state is on the host"


def test_the_plugins_image_registers_with_containerd_and_sets_a_burst(podman: list[str]) -> None:
    bin_dir = prereqs.runtime_dir()
    if not all((bin_dir / tool).is_file() for tool in prereqs.RUNTIME_TOOLS):
        lacking(f"containerd or crictl missing in {bin_dir} (scripts/setup.sh --tests builds them)")
    if not (cgroup.CGROUP_ROOT / "cpu" / "cpu.cfs_burst_us").is_file():
        pytest.skip("drives cgroup v1's cpu.cfs_burst_us (this host's)")  # a host property, not installable
    with nri_runtime.started(bin_dir, Path("/nonexistent")) as rt:
        plugin = subprocess.run([*podman, "run", "-d", "--name", "plugin", "--user", "0:0", "--network=none", *LOCKED,
                                 "-v", f"{rt.dir}:/var/run/nri", "-v", "/sys/fs/cgroup:/host/sys/fs/cgroup",
                                 "bwlab-nri:0.1.0", "-socket=/var/run/nri/nri.sock", "-idx=10",
                                 "-cgroup-root=/host/sys/fs/cgroup"], capture_output=True, text=True)  # fmt: skip
        assert plugin.returncode == 0, plugin.stderr
        try:
            deadline, logs = time.monotonic() + 30, ""
            while "synchronized with" not in logs and time.monotonic() < deadline:
                out = subprocess.run([*podman, "logs", "plugin"], capture_output=True, text=True)
                logs = out.stdout + out.stderr
                time.sleep(0.3)
            assert "synchronized with" in logs, logs
            pod = rt.pod()
            cid = rt.container(pod, "web", 50000)
            burst = int((rt.group(pod, cid) / "cpu.cfs_burst_us").read_text())
            logs = subprocess.run([*podman, "logs", "plugin"], capture_output=True, text=True).stderr
            assert burst == auto_burst(50000), logs
        finally:
            subprocess.run([*podman, "rm", "-f", "-t", "0", "plugin"], capture_output=True)
