"""The programs a scenario runs: our static workloads (workloads/*.c, built on demand) and
packaged tools, by logical name."""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path

from bwlab.errors import BwlabError
from bwlab.paths import WORKLOAD_SRC, workload_bin_dir

# Logical program name -> (executable, Debian package that provides it).
PACKAGED = {"sysbench": ("sysbench", "sysbench"), "hackbench": ("hackbench", "rt-tests"),
            "busybox": ("busybox", "busybox-static"), "perf": ("perf", "linux-perf")}  # fmt: skip


def ours() -> tuple[str, ...]:
    """Our static workloads: one per C file in workloads/ (the Makefile builds them all)."""
    return tuple(sorted(p.stem for p in WORKLOAD_SRC.glob("*.c")))


@functools.cache
def build_workloads() -> Path:
    """`make -C workloads` into the cache, once per process (make keeps it incremental)."""
    out = workload_bin_dir()
    if shutil.which("make") is None or shutil.which("cc") is None:
        raise BwlabError("building workloads needs make and a C compiler (apt-get install build-essential)")
    proc = subprocess.run(["make", "-s", "-C", str(WORKLOAD_SRC), f"OUT={out}"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        raise BwlabError(f"building workloads failed: {lines[0] if lines else 'no output'}")
    return out


def resolve(name: str) -> Path:
    """Absolute path of a program on this host: ours, a packaged tool, else found on PATH."""
    if name in ours():
        path = build_workloads() / name
        if not path.is_file():
            raise BwlabError(f"workload {name} was not built (expected {path})")
        return path
    exe, package = PACKAGED.get(name, (name, ""))
    found = shutil.which(exe) or shutil.which(exe, path="/usr/sbin:/sbin:/bin:/usr/bin")
    if found is None:
        hint = f" (apt-get install {package})" if package else " (not on PATH; or list it in the workload's files)"
        raise BwlabError(f"{exe} is not installed{hint}")
    return Path(found)
