"""The programs a scenario runs: our static workloads (built on demand) and packaged tools."""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path

from bwlab.errors import BwlabError
from bwlab.paths import WORKLOAD_SRC, workload_bin_dir

OUR_PROGRAMS = ("cglat", "cgwrite", "cgstress", "wakelat", "funcs", "noise")
# Logical program name -> (executable, Debian package that provides it).
PACKAGED = {"sysbench": ("sysbench", "sysbench"), "hackbench": ("hackbench", "rt-tests"),
            "busybox": ("busybox", "busybox-static")}  # fmt: skip


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
    """Absolute path of a logical program on this host; a clear error if it is missing."""
    if name in OUR_PROGRAMS:
        path = build_workloads() / name
        if not path.is_file():
            raise BwlabError(f"workload {name} was not built (expected {path})")
        return path
    if name in PACKAGED:
        exe, package = PACKAGED[name]
        found = shutil.which(exe) or (shutil.which(exe, path="/usr/sbin:/sbin:/bin:/usr/bin"))
        if found is None:
            raise BwlabError(f"{exe} is not installed (apt-get install {package})")
        return Path(found)
    raise BwlabError(f"unknown program {name!r}")
