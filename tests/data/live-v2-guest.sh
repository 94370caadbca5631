#!/bin/sh
# Run in a host-userland guest (bwlab guest exec) by test_hostroot_real.py: bwlab's live tools on
# the guest kernel's real cgroup v2. A group at demand == quota (sysbench cpu, one thread per
# CPU, quota = every CPU, period $1 us), then twice its quota; doctor's JSON of each, tune's write,
# read-back and revert. Each result is one line "NAME <json or value>" on stdout.
set -eu
period=$1
n=$(nproc)
G=/sys/fs/cgroup/bwlab-live-v2
mkdir $G
echo "$((n * period)) $period" > $G/cpu.max
sysbench cpu --threads="$n" --time=0 run > /dev/null &
sb=$!
echo $sb > $G/cgroup.procs
sleep 1
# watched in the guest, doctor's 1 ms sampling takes CPU the group would use: a run sees 0-15
# throttles in ~400 periods (docs/testing.md), so up to three runs, until one was seen
seen=0 runs=0
while [ $seen -lt 1 ] && [ $runs -lt 3 ]; do
  doc=$(.venv/bin/bwlab doctor /bwlab-live-v2 --seconds 4 --json - --no-predict)
  echo "equal $(echo "$doc" | tr -d '\n')"
  # the top-level count (its first "periods", "throttled" pair: "before" and "unwatched" come
  # after it); not python, which takes ~4 s to start under TCG
  seen=$((seen + $(echo "$doc" | tr -d '\n' | grep -o '"periods": [0-9]*, *"throttled": [0-9]*' | head -n 1 | sed 's/.* //')))
  runs=$((runs + 1))
done
.venv/bin/bwlab tune /bwlab-live-v2 --burst auto > /dev/null
echo "tuned $(cat $G/cpu.max.burst)"
before=$(sed -n 's/^nr_throttled //p' $G/cpu.stat) periods=$(sed -n 's/^nr_periods //p' $G/cpu.stat)
sleep 5
echo "tuned_periods $(($(sed -n 's/^nr_periods //p' $G/cpu.stat) - periods)) throttled $(($(sed -n 's/^nr_throttled //p' $G/cpu.stat) - before))"
.venv/bin/bwlab tune /bwlab-live-v2 --revert > /dev/null
echo "reverted $(cat $G/cpu.max.burst)"
echo "$((n * period / 2)) $period" > $G/cpu.max
sleep 1
echo "twice $(.venv/bin/bwlab doctor /bwlab-live-v2 --seconds 4 --json - --no-predict | tr -d '\n')"
# nested: the limit on the parent, the work in a child whose own cpu.max is "max" (v2 lets a
# group hand the cpu controller to children only once its processes moved down)
mkdir $G/work
echo $sb > $G/work/cgroup.procs
echo +cpu > $G/cgroup.subtree_control
echo "child_max $(cat $G/work/cpu.max)"
echo "nested $(.venv/bin/bwlab doctor /bwlab-live-v2/work --seconds 4 --json - --no-predict | tr -d '\n')"
kill $sb
wait || true
rmdir $G/work $G
