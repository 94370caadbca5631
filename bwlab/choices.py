"""The values the command line offers for its choice options, kept apart from the modules
that act on them: parsing a command line imports none of those (bwlab.cli)."""

# guest accelerators: auto boots a probe guest with KVM and falls back to TCG
ACCELS = ("auto", "kvm", "tcg")
# the simulator's phase of the CPUs' ticks: aligned is the kernel's skew_tick=0
TICK_MODES = ("aligned", "skew", "random")
# 7.3's /sys/kernel/debug/sched/cgroup_mode values
CGROUP_MODES = ("up", "smp", "concur", "max", "tasks")
# sched_ext schedulers the lab builds and loads in a guest (scx/, bwlab/kernel/scheduler.py)
SCHEDULERS = ("scx_bwlab",)
