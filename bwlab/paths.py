"""Where bwlab keeps its caches and where the repository's data lives."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIR = Path(__file__).resolve().parent
SCENARIO_DIR = PACKAGE_DIR / "scenarios"
KERNEL_DIR = REPO_ROOT / "kernel"
# The series as posted (no switches), and what the lab builds by default: it, LAGS, the
# paper's slush fund, the lock-free pool RFC and the lab-only patches that put every fix
# behind a sched_feat switch and can make the period timer late (kernel/lab/series).
POSTED_SERIES = KERNEL_DIR / "patches" / "series"
LAGS_SERIES = KERNEL_DIR / "lags" / "series"
SLUSH_SERIES = KERNEL_DIR / "slush" / "series"
LOCKFREE_SERIES = KERNEL_DIR / "lockfree" / "series"
DEFAULT_SERIES = KERNEL_DIR / "lab" / "series"
# The measurement kernel (core.config, the quick plan's alone) and what every other lab kernel
# adds to it (lab.config: tracing, host-userland guests, BPF)
CORE_CONFIG = KERNEL_DIR / "configs" / "core.config"
LAB_CONFIG = KERNEL_DIR / "configs" / "lab.config"
TEST_CPU_ONLY = KERNEL_DIR / "selftest" / "test_cpu_only.c"
DEBUG_CONFIG = KERNEL_DIR / "configs" / "debug.config"
LOCKSTAT_CONFIG = KERNEL_DIR / "configs" / "lockstat.config"
SCX_CONFIG = KERNEL_DIR / "configs" / "scx.config"
WORKLOAD_SRC = REPO_ROOT / "workloads"
# the exporter's file in its --textfile directory (node_exporter's textfile collector reads *.prom)
EXPORTER_TEXTFILE = "bwlab.prom"


def cache_root() -> Path:
    """Root of the cache: $BWLAB_CACHE, else $XDG_CACHE_HOME/bwlab, else ~/.cache/bwlab."""
    env = os.environ.get("BWLAB_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "bwlab"


def workload_bin_dir() -> Path:
    """Built static workloads (make -C workloads)."""
    return cache_root() / "workloads"


def sysctl_path(name: str) -> Path:
    """/proc/sys/kernel/foo_bar for kernel.foo_bar (on any machine: the host, a guest's plan)."""
    return Path("/proc/sys") / name.replace(".", "/")
