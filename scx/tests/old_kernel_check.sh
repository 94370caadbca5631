#!/bin/bash
# scx_bwlab on a kernel whose sched_ext does not hand cpu.max to the scheduler (6.12-6.16: no
# sched_ext_ops.cgroup_set_bandwidth), run inside a lab guest (tests/test_scx_real.py):
#   old_kernel_check.sh LOADER SPIN
# The loader must refuse, one line, and leave every task to CFS, whose bandwidth control keeps
# throttling a group over its quota. Prints one "scx-old {json}" line per step.
set -u
loader=$1 spin=$2
cg=/sys/fs/cgroup
grep -q "^cgroup2 $cg " /proc/mounts || mount -t cgroup2 none $cg
echo +cpu > $cg/cgroup.subtree_control
g=$cg/scx-old
mkdir $g
out=$(mktemp -d)
cleanup() {
  for p in $(cat $g/cgroup.procs 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
  sleep 0.2; rmdir $g 2>/dev/null; rm -rf "$out"
}
trap cleanup EXIT
report() { echo "scx-old $1"; }
. "$(dirname "$0")/lib.sh"  # json
throttled() { awk '$1 == "nr_throttled" {print $2}' $g/cpu.stat; }
# one busy thread for 2 s in a group held to a tenth of a CPU: CFS throttles it every period,
# even with the host busy (the parallel phase of the suite)
burn() {
  t0=$(throttled)
  (echo $BASHPID > $g/cgroup.procs; exec "$spin" -t 1 -d 2 -p 2000 >/dev/null)
  echo $(($(throttled) - t0))
}
echo "10000 100000" > $g/cpu.max

"$loader" >"$out/stdout" 2>"$out/refused"; rc=$?
report "{\"step\": \"refused\", \"rc\": $rc, \"state\": \"$(cat /sys/kernel/sched_ext/state)\", \"stderr\": $(json < "$out/refused")}"

report "{\"step\": \"cfs\", \"state\": \"$(cat /sys/kernel/sched_ext/state)\", \"cfs_nr_throttled\": $(burn)}"
