"""scx_bwlab (scx/), the sched_ext scheduler, built for a lab kernel that carries sched_ext.

The scheduler's BPF side is checked against the BTF of the kernel it runs on, and its loader
links the libbpf of that kernel's tree (bookworm's 1.1 is too old for sched_ext skeletons), so
it is built per kernel: from the kernel's build tree (kept in the cache beside its image) into
the cache, by scx/Makefile with Debian's clang-19. The loader is static: a guest's userland
need not be the build machine's.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

from bwlab.errors import BwlabError
from bwlab.kernel import build as kernel_build
from bwlab.paths import REPO_ROOT, SCX_CONFIG, cache_root

SOURCE = REPO_ROOT / "scx"
CLANG = "clang-19"
LLD = "ld.lld-19"


def output_dir(key: str) -> Path:
    return cache_root() / "scx" / key


def build(key: str) -> Path:
    """The loader built for the kernel `key` (made, or brought up to date, by scx/Makefile)."""
    image = kernel_build.image_by_key(key)
    if image is None:
        raise BwlabError(f"no kernel {key} in the cache (bwlab kernel list)")
    src = kernel_build.builds_dir() / key / "src"
    vmlinux = kernel_build.output_dir(src) / "vmlinux"
    config = kernel_build.output_dir(src) / ".config"
    if not vmlinux.is_file() or not config.is_file():
        raise BwlabError(f"kernel {key}: its build tree {src} is gone (bwlab kernel clean?): build it again")
    text = config.read_text()
    if "\nCONFIG_SCHED_CLASS_EXT=y" not in text or "\nCONFIG_DEBUG_INFO_BTF=y" not in text:
        fragment = SCX_CONFIG.relative_to(REPO_ROOT)
        raise BwlabError(f"kernel {key} has no sched_ext with BTF: build one with --config {fragment}")
    missing = [tool for tool in (CLANG, LLD) if shutil.which(tool) is None]
    if missing:  # the tree's libbpf and bpftool link with ld.lld-19 under LLVM=-19
        raise BwlabError(f"the scheduler needs {missing[0]} (apt-get install clang-19 llvm-19 lld-19)")
    out = output_dir(key)
    out.mkdir(parents=True, exist_ok=True)
    # one make at a time per output tree: the suite's parallel workers may both want the loader
    with (out / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _make(out, src, vmlinux)


def _make(out: Path, src: Path, vmlinux: Path) -> Path:
    log = out / "build.log"
    cmd = ["make", "-C", str(SOURCE), f"KSRC={src}", f"VMLINUX_BTF={vmlinux}", f"O={out}",
           f"LLVM={CLANG.removeprefix('clang')}", f"-j{os.cpu_count() or 1}"]  # fmt: skip
    with log.open("w") as fh:
        done = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        errors = [line for line in log.read_text().splitlines() if "error" in line.lower()]
        raise BwlabError(f"scx_bwlab build failed: {errors[0] if errors else 'see ' + str(log)} ({log})")
    loader = out / "scx_bwlab"
    if not loader.is_file():
        raise BwlabError(f"scx_bwlab build made no {loader} ({log})")
    return loader
