#!/bin/sh
# Upstream test_cpucg_nested_weight_overprovisioned's tree, built at the cgroup v2 root as the
# test does: top leaf (weight 1000) beside a child (weight 1000) with two leaves (5000 each),
# one process with two spinning threads (noise) per leaf for 10 s, under $2 as 7.3's
# /sys/kernel/debug/sched/cgroup_mode (the old mode is put back). Prints the leaves' usage and
# the top leaf's share of the CPU time as JSON (the test expects 0.5 within 15 %).
mode=$2
M=/sys/kernel/debug/sched/cgroup_mode
T=/sys/fs/cgroup/bwlab-nested-weight
[ -w $M ] || { echo "nested-weight.sh: no $M (a 7.3 kernel with debugfs)" >&2; exit 1; }
old=$(sed -n 's/.*(\(.*\)).*/\1/p' $M)
cleanup() {
	for l in leaf0 child/leaf1 child/leaf2; do
		for p in $(cat $T/$l/cgroup.procs 2>/dev/null); do kill $p 2>/dev/null; done
	done
	sleep 0.2
	rmdir $T/child/leaf1 $T/child/leaf2 $T/child $T/leaf0 $T 2>/dev/null
	echo $old > $M
}
trap cleanup EXIT INT TERM
echo $mode > $M || exit 1
mkdir -p $T && echo +cpu > $T/cgroup.subtree_control
mkdir -p $T/leaf0 $T/child && echo +cpu > $T/child/cgroup.subtree_control
mkdir -p $T/child/leaf1 $T/child/leaf2
echo 1000 > $T/leaf0/cpu.weight; echo 1000 > $T/child/cpu.weight
echo 5000 > $T/child/leaf1/cpu.weight; echo 5000 > $T/child/leaf2/cpu.weight
for l in leaf0 child/leaf1 child/leaf2; do
	sh -c "echo \$\$ > $T/$l/cgroup.procs && exec noise -t 2 -d 10 > /dev/null" &
done
wait
u() { grep usage_usec $T/$1/cpu.stat | cut -d' ' -f2; }
l0=$(u leaf0); l1=$(u child/leaf1); l2=$(u child/leaf2); c=$(u child)
echo "{\"leaf0_us\": $l0, \"leaf1_us\": $l1, \"leaf2_us\": $l2, \"child_us\": $c, \"top_leaf_share\": $(awk "BEGIN {print $l0 / ($l0 + $c)}")}"
