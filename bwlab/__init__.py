"""bwlab: a lab for Linux CPU bandwidth control (cgroup cpu.max / cpu.cfs_quota_us)."""

__version__ = "0.1.0"
