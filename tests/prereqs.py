"""What the real tests need from the machine, checked in one place.

Under CI=true a missing prerequisite fails the whole run at its start (conftest's
pytest_sessionstart) instead of skipping the tests that need it: a green CI means every real
test ran. Elsewhere the tests that need it skip, and the skip says why.

Run it alone to see what this machine lacks: `.venv/bin/python tests/prereqs.py`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from bwlab.paths import cache_root

GO_FALLBACK = Path("/usr/local/go/bin/go")  # where the machine's Go lives when it is not on PATH
GO_MIN = (1, 25)  # the first Go whose GOMAXPROCS follows the cgroup's quota (doctor's pool test)
SSHD = Path("/usr/sbin/sshd")
RUNTIME_SCRIPT = Path(__file__).resolve().parent.parent / "nri" / "install-runtime.sh"
RUNTIME_TOOLS = ("containerd", "containerd-shim-runc-v2", "ctr", "crictl")

# program on PATH -> what provides it (scripts/setup.sh --tests installs each but Go)
TOOLS = {
    "qemu-system-x86_64": "qemu-system-x86 (scripts/setup.sh)",
    "busybox": "busybox-static (scripts/setup.sh)",
    "sysbench": "sysbench (scripts/setup.sh)",
    "hackbench": "rt-tests (scripts/setup.sh)",
    "perf": "linux-perf (scripts/setup.sh)",
    "bpftrace": "bpftrace (scripts/setup.sh --tests)",
    "podman": "podman (scripts/setup.sh --tests)",
    "prometheus": "prometheus (scripts/setup.sh --tests)",
    "promtool": "prometheus (scripts/setup.sh --tests)",
    "java": "a JRE (scripts/setup.sh --tests installs default-jre-headless where none is)",
    "cc": "build-essential (scripts/setup.sh)",
    "make": "build-essential (scripts/setup.sh)",
    "git": "git (scripts/setup.sh)",
    "perl": "perl (scripts/setup.sh)",
    "ssh": "openssh-client (scripts/setup.sh)",
    "unshare": "util-linux",
    "debootstrap": "debootstrap (scripts/setup.sh --tests): deploy/build-images.sh's base, trixie's pahole",
    "clang-19": "clang-19 (scripts/setup.sh --tests): scx_bwlab's BPF",
    "ld.lld-19": "lld-19 (scripts/setup.sh --tests): the kernel tree's libbpf and bpftool for scx_bwlab (LLVM=-19)",
}


def which(tool: str) -> str | None:
    """A tool's path as the tests find it (Go also where the machine keeps it off PATH)."""
    found = shutil.which(tool)
    if found is None and tool == "go" and GO_FALLBACK.is_file():
        return str(GO_FALLBACK)
    return found


def runtime_dir() -> Path:
    """Where nri/install-runtime.sh (run by scripts/setup.sh) puts containerd and crictl: its
    versions, read from the script, name the folder."""
    text = RUNTIME_SCRIPT.read_text()
    versions = [re.search(rf"^{name}=(\S+)$", text, re.MULTILINE) for name in ("CONTAINERD", "CRICTL")]
    assert versions[0] and versions[1], f"{RUNTIME_SCRIPT}: no CONTAINERD= or CRICTL= line"
    return cache_root() / "runtime" / f"containerd-{versions[0].group(1)}-crictl-{versions[1].group(1)}"


def go_version(go: str) -> tuple[int, int] | None:
    out = subprocess.run([go, "version"], capture_output=True, text=True, check=False).stdout
    match = re.search(r"go(\d+)\.(\d+)", out)
    return (int(match.group(1)), int(match.group(2))) if match else None


def missing() -> list[str]:
    """Each missing prerequisite, as 'what (where it comes from)'."""
    out = []
    if os.geteuid() != 0:
        out.append("root (the real tests make cgroups, mount tracefs, boot QEMU)")
    controllers = Path("/sys/fs/cgroup/cgroup.controllers")
    v2 = controllers.is_file() and "cpu" in controllers.read_text().split()
    if not Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").is_file() and not v2:
        out.append("a cgroup cpu controller (v1 cpu, or v2 with cpu at /sys/fs/cgroup)")
    for tool, source in TOOLS.items():
        if which(tool) is None:
            out.append(f"{tool} ({source})")
    for tool in RUNTIME_TOOLS:
        if not (runtime_dir() / tool).is_file():
            out.append(f"{runtime_dir() / tool} (nri/install-runtime.sh, run by scripts/setup.sh --tests)")
    if not SSHD.is_file():
        out.append(f"{SSHD} (openssh-server, scripts/setup.sh --tests)")
    go = which("go")
    if go is None:
        out.append(f"go >= {GO_MIN[0]}.{GO_MIN[1]} (expected from the machine: /usr/local/go/bin or PATH)")
    elif (version := go_version(go)) is None or version < GO_MIN:
        out.append(f"go >= {GO_MIN[0]}.{GO_MIN[1]} ({go} is {version})")
    return out


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


if __name__ == "__main__":
    lacking = missing()
    print("\n".join(lacking) if lacking else "every prerequisite of the real tests is here")
    sys.exit(1 if lacking else 0)
