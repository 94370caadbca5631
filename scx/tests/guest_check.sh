#!/bin/bash
# scx_bwlab's real check, run inside a lab guest with sched_ext (tests/test_scx_real.py):
#   guest_check.sh LOADER SPIN SECONDS
# In a cgroup v2 group, with the scheduler loaded: demand == quota (a busy thread per CPU
# under a quota of every CPU), then twice the quota (the same threads under half of it), each
# for SECONDS; then the scheduler stopped and the same group under CFS again. Prints one
# "scx-check {json}" line per step; the test asserts on them.
set -u
loader=$1 spin=$2 seconds=$3
cg=/sys/fs/cgroup
grep -q "^cgroup2 $cg " /proc/mounts || mount -t cgroup2 none $cg
echo +cpu > $cg/cgroup.subtree_control
g=$cg/scx-check
mkdir $g
ncpu=$(nproc)
out=$(mktemp -d)
pid=
cleanup() {
  [ -n "$pid" ] && kill -INT "$pid" 2>/dev/null && wait "$pid"
  for p in $(cat $g/cgroup.procs 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
  sleep 0.2; rmdir $g 2>/dev/null; rm -rf "$out"
}
trap cleanup EXIT
report() { echo "scx-check $1"; }
stat_of() { awk -v k="$1" '$1 == k {print $2}' $g/cpu.stat; }
# the group's counters in the scheduler's stats file, as one JSON object (the loader writes
# each cgroup's on a line of its own). No python3 in here: it takes ~4 s to start under TCG.
counters() { grep -o "{\"cgid\": $(stat -c %i $g),[^}]*}" "$out/stats.json" || echo "{}"; }
. "$(dirname "$0")/lib.sh"  # json
in_group() { (echo $BASHPID > $g/cgroup.procs; exec "$spin" -t "$ncpu" -d "$1" -p 2000 >/dev/null); }

"$loader" -o "$out/stats.json" -i 100 2>"$out/loader.log" & pid=$!
for _ in $(seq 100); do
  [ "$(cat /sys/kernel/sched_ext/state)" = enabled ] && [ -s "$out/stats.json" ] && break
  sleep 0.1
done
report "{\"step\": \"loaded\", \"state\": \"$(cat /sys/kernel/sched_ext/state)\", \"ops\": \"$(cat /sys/kernel/sched_ext/root/ops 2>/dev/null)\"}"
# refusals while it runs, each one line: a second scheduler (the kernel takes one), and a
# loader without root (its BPF programs cannot load)
"$loader" 2>"$out/second"; second=$?
setpriv --reuid=65534 --regid=65534 --clear-groups "$loader" 2>"$out/nobody"; nobody=$?
report "{\"step\": \"refusals\", \"second_rc\": $second, \"second\": $(json < "$out/second"), \"nobody_rc\": $nobody, \"nobody\": $(json < "$out/nobody"), \"state\": \"$(cat /sys/kernel/sched_ext/state)\"}"
# CPU hotplug under the scheduler: the last CPU offline and back, twice; the scheduler stays
hp=/sys/devices/system/cpu/cpu$((ncpu - 1))/online
hotplug_rc=0
for _ in 1 2; do echo 0 > $hp && sleep 0.2 && echo 1 > $hp && sleep 0.2 || hotplug_rc=1; done
kill -USR1 $pid; sleep 0.3
report "{\"step\": \"hotplug\", \"rc\": $hotplug_rc, \"state\": \"$(cat /sys/kernel/sched_ext/state)\", \"online\": \"$(cat /sys/devices/system/cpu/online)\", \"counts\": {$(grep -o '"cpus_online": [0-9]*, "cpus_offline": [0-9]*' "$out/stats.json.now")}}"
# ... and under load: the group's busy threads lose that CPU (cpuset v2 pins them to the
# others) while this shell (the root group, not pinned) sleeps and wakes five times, then
# stops them. When pinned tasks went to their CPU's local queue (FIFO), that queue never ran
# dry, the shared one was never dispatched, and this shell ran again only when the watchdog
# had ejected the scheduler (30 s): the state says which.
want=0; [ "$ncpu" -gt 2 ] && want=0-$((ncpu - 2))  # the CPUs left
(echo $BASHPID > $g/cgroup.procs; exec "$spin" -t $((ncpu * 2)) -d 120 -p 2000 >/dev/null) & busy=$!
sleep 0.5
echo 0 > $hp; t0=$(date +%s%N)
for _ in 1 2 3 4 5; do sleep 0.1; done
t1=$(date +%s%N) state=$(cat /sys/kernel/sched_ext/state)
pinned=$(grep -c "^Cpus_allowed_list:[[:space:]]*$want$" /proc/$busy/status)
kill $busy; wait $busy; echo 1 > $hp
report "{\"step\": \"hotplug-under-load\", \"state\": \"$state\", \"online\": \"$(cat /sys/devices/system/cpu/online)\", \"pinned\": $pinned, \"sleeps_ms\": $(((t1 - t0) / 1000000))}"
for step in at-quota twice-the-quota; do
  quota=$((ncpu * 100000)); [ $step = twice-the-quota ] && quota=$((ncpu * 50000))
  echo "$quota 100000" > $g/cpu.max
  sleep 0.3  # the scheduler's stats file rewritten after the write
  before=$(counters) cfs0=$(stat_of nr_throttled)
  in_group "$seconds"
  sleep 0.3
  after=$(counters) cfs1=$(stat_of nr_throttled)
  report "{\"step\": \"$step\", \"quota_us\": $quota, \"threads\": $ncpu, \"before\": $before, \"after\": $after, \"cpustat_nr_throttled\": $((cfs1 - cfs0))}"
done
kill -INT $pid; wait $pid; rc=$?; pid=
report "{\"step\": \"stopped\", \"rc\": $rc, \"state\": \"$(cat /sys/kernel/sched_ext/state)\", \"log\": $(tail -3 "$out/loader.log" | json)}"
cfs0=$(stat_of nr_throttled); in_group 2; cfs1=$(stat_of nr_throttled)
report "{\"step\": \"cfs-after\", \"cpu_max\": \"$(cat $g/cpu.max)\", \"cpustat_nr_throttled\": $((cfs1 - cfs0))}"
