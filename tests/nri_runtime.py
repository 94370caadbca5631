"""containerd with its CRI and NRI plugins, started for a test or a benchmark: everything in a
directory of its own (sockets, state, runc's root), the native snapshotter, cgroupfs, no CNI
(pods use the host's network), images built here (oci_image.py) and imported. Driven with
crictl as the kubelet drives a runtime. Used by tests/test_nri_real.py and
benchmarks/nri_latency.py."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bwlab import cgroup

import oci_image
from conftest import pids_with

PAUSE, BUSYBOX = "localhost/bwlab/pause:1", "localhost/bwlab/busybox:1"


def config(d: Path) -> str:
    """containerd's configuration: everything under d (its socket, NRI's socket, runc's state),
    the native snapshotter, cgroupfs, no CNI (the pods use the host's network)."""
    runtime = "plugins.'io.containerd.cri.v1.runtime'"
    return f"""version = 3
root = "{d}/root"
state = "{d}/state"
[grpc]
  address = "{d}/containerd.sock"
[ttrpc]
  address = "{d}/containerd.sock.ttrpc"
[plugins.'io.containerd.nri.v1.nri']
  disable = false
  socket_path = "{d}/nri.sock"
  plugin_path = "{d}/nri-plugins"
  plugin_config_path = "{d}/nri-conf"
  plugin_registration_timeout = "5s"
  plugin_request_timeout = "2s"
[plugins.'io.containerd.transfer.v1.local']
  [[plugins.'io.containerd.transfer.v1.local'.unpack_config]]
    platform = "linux/amd64"
    snapshotter = "native"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "native"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{PAUSE}"
[{runtime}]
  # this machine's root lacks CAP_SYS_RESOURCE: a pod's oom_score_adj below containerd's own
  # (-998 for the sandbox) kills runc's init ("can't get final child's PID from pipe: EOF")
  restrict_oom_score_adj = true
  [{runtime}.containerd]
    default_runtime_name = "runc"
    [{runtime}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{runtime}.containerd.runtimes.runc.options]
        BinaryName = "{shutil.which("runc")}"
        Root = "{d}/runc"
        SystemdCgroup = false
  [{runtime}.cni]
    bin_dirs = ["{d}/cni-bin"]
    conf_dir = "{d}/cni-conf"
"""


@dataclass
class Runtime:
    dir: Path
    bin: Path
    plugin_bin: Path
    parent: str  # the pods' cgroup parent (a bwlab-* group: conftest's leftover checks see it)
    containerd: subprocess.Popen[bytes]
    plugin: subprocess.Popen[bytes] | None = None
    pods: int = 0

    def crictl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        sock = f"unix://{self.dir}/containerd.sock"
        argv = [str(self.bin / "crictl"), "--runtime-endpoint", sock, "--image-endpoint", sock, "--timeout", "30s"]
        return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=60, check=check)

    def start_plugin(self, *args: str) -> None:
        """Start the plugin and wait until it has synchronized with the runtime."""
        syncs = self.log().count("synchronized with")
        with (self.dir / "plugin.log").open("ab") as log:  # the child keeps its own descriptor
            self.plugin = subprocess.Popen([str(self.plugin_bin), "-socket", str(self.dir / "nri.sock"), "-idx",
                                            "10", *args], stdout=log, stderr=log)  # fmt: skip
        deadline = time.monotonic() + 20
        while self.log().count("synchronized with") == syncs and time.monotonic() < deadline:
            assert self.plugin.poll() is None, f"bwlab-nri exited: {self.log()}"
            time.sleep(0.1)
        assert self.log().count("synchronized with") > syncs, self.log()

    def stop_plugin(self) -> None:
        if self.plugin is not None and self.plugin.poll() is None:
            self.plugin.kill()
            self.plugin.wait(timeout=10)

    def log(self) -> str:
        path = self.dir / "plugin.log"
        return path.read_text() if path.exists() else ""

    def pod(self, annotations: dict[str, str] | None = None, quota_us: int | None = None) -> tuple[str, Path]:
        """A pod sandbox: in the shared parent, or (quota_us) in a pod group of its own with that
        quota, made first, as the kubelet makes a pod's group with the sum of its limits."""
        self.pods += 1
        parent = self.parent
        if quota_us is not None:
            parent = f"{self.parent}/pod{self.pods}"
            group = cgroup.CGROUP_ROOT / "cpu" / parent.strip("/")
            group.mkdir(parents=True)
            (group / "cpu.cfs_quota_us").write_text(str(quota_us))
        cfg = self.dir / f"pod{self.pods}.json"
        cfg.write_text(json.dumps({
            "metadata": {"name": f"p{self.pods}", "namespace": "default", "uid": f"u{self.pods}", "attempt": 0},
            "annotations": annotations or {}, "log_directory": str(self.dir / "logs"),
            "linux": {"cgroup_parent": parent,  # the host's network: no CNI
                      "security_context": {"namespace_options": {"network": 2}}}}))  # fmt: skip
        return self.crictl("runp", str(cfg)).stdout.strip(), cfg

    def container(self, pod: tuple[str, Path], name: str, quota_us: int, period_us: int = 100000,
                  annotations: dict[str, str] | None = None) -> str:  # fmt: skip
        cfg = self.dir / f"ctr-{name}.json"
        cfg.write_text(json.dumps({
            "metadata": {"name": name}, "image": {"image": BUSYBOX}, "command": ["/bin/sleep", "3600"],
            "annotations": annotations or {}, "log_path": f"{name}.log",
            "linux": {"resources": {"cpu_period": period_us, "cpu_quota": quota_us}}}))  # fmt: skip
        cid = self.crictl("create", pod[0], str(cfg), str(pod[1])).stdout.strip()
        self.crictl("start", cid)
        return cid

    def group(self, pod: tuple[str, Path], cid: str = "") -> Path:
        """The container's group (the pod's own group without a container ID)."""
        parent = json.loads(pod[1].read_text())["linux"]["cgroup_parent"]
        return cgroup.CGROUP_ROOT / "cpu" / parent.strip("/") / cid

    def update(self, cid: str, quota_us: int) -> subprocess.CompletedProcess[str]:
        return self.crictl("update", "--cpu-period", "100000", "--cpu-quota", str(quota_us), cid, check=False)


@contextlib.contextmanager
def started(bin_dir: Path, plugin_bin: Path) -> Iterator[Runtime]:
    """A containerd of its own (~3 s to start), in a directory removed at the end with every
    process it started, mount it made and group it made (under a bwlab-nri-PID parent)."""
    d = Path(tempfile.mkdtemp(prefix="bwlab-nri-", dir="/tmp"))  # sockets: short paths
    for sub in ("nri-plugins", "nri-conf", "cni-bin", "cni-conf", "logs"):
        (d / sub).mkdir()
    (d / "config.toml").write_text(config(d))
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    run_existed = Path("/run/containerd").exists()
    log = (d / "containerd.log").open("wb")
    proc = subprocess.Popen([str(bin_dir / "containerd"), "--config", str(d / "config.toml")], stdout=log,
                            stderr=log, env=env, start_new_session=True)  # fmt: skip
    rt = Runtime(d, bin_dir, plugin_bin, f"/bwlab-nri-{os.getpid()}", proc)
    mounted: list[str] = []
    try:
        deadline = time.monotonic() + 30
        while rt.crictl("info", check=False).returncode != 0:
            assert proc.poll() is None, (d / "containerd.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "containerd did not answer in 30 s"
            time.sleep(0.2)
        for name, cmd in ((PAUSE, ["/bin/sleep", "2147483647"]), (BUSYBOX, ["/bin/sh"])):
            archive = oci_image.write(d / f"{name.rsplit('/', 1)[-1]}.tar", name, cmd)
            subprocess.run([str(bin_dir / "ctr"), "-a", str(d / "containerd.sock"), "-n", "k8s.io", "images",
                            "import", "--snapshotter", "native", str(archive)],
                           check=True, capture_output=True, timeout=60)  # fmt: skip
        yield rt
    finally:
        rt.stop_plugin()
        rt.crictl("rmp", "-fa", check=False)
        proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=20)
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        log.close()
        for pid in pids_with(str(d)):  # the shims outlive containerd by design
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        mounted = mounts_under(d)  # a sandbox's shm, a container's rootfs: rmp unmounts them
        for point in sorted(mounted, key=len, reverse=True):
            subprocess.run(["umount", "-l", point], check=False)
        for top in cgroup.CGROUP_ROOT.iterdir():
            group = top / rt.parent.strip("/")
            for procs in group.rglob("cgroup.procs"):  # a container rmp did not stop
                with contextlib.suppress(OSError, ValueError):
                    for pid in procs.read_text().split():
                        os.kill(int(pid), signal.SIGKILL)
            for sub in sorted((p for p in group.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                with contextlib.suppress(OSError):
                    sub.rmdir()
            with contextlib.suppress(OSError):
                group.rmdir()
        if not run_existed:
            shutil.rmtree("/run/containerd", ignore_errors=True)
        shutil.rmtree(d, ignore_errors=True)
    assert not mounted, f"left mounted after crictl rmp: {mounted}"


def mounts_under(d: Path) -> list[str]:
    with open("/proc/self/mountinfo") as fh:
        return [f.split()[4] for f in fh if f.split()[4].startswith(f"{d}/")]
