#!/bin/sh
# Run in a host-userland guest (bwlab guest exec --vcpus 4) by test_hostroot_real.py: Go
# programs and a JVM in a group with a 1-CPU quota on real cgroup v2, each printing the pool
# size its runtime chose (runtime.GOMAXPROCS(0), availableProcessors()) to DIR/<name>.out;
# doctor's pools for the group beside them. DIR holds the programs, built on the host.
#   sh pools-v2-guest.sh DIR
set -eu
D=$1
G=/sys/fs/cgroup/bwlab-pools
mkdir $G
echo "100000 100000" > $G/cpu.max
pids=""
start() {  # NAME ARGV...: in the group, its own count to $D/NAME.out
  name=$1
  shift
  sh -c 'echo $$ > '$G'/cgroup.procs && exec "$@"' sh "$@" > "$D/$name.out" 2>&1 &
  pids="$pids $!"
  echo "pid $name $!"
}
start go-old "$D/sleep-old"
start go-new "$D/sleep-new"
start jvm java "$D/Pools.java"
i=0  # until each has said its count (the JVM's start is slow under TCG), at most 120 s
while [ $i -lt 120 ] && ! { [ -s "$D/go-old.out" ] && [ -s "$D/go-new.out" ] && [ -s "$D/jvm.out" ]; }; do
  sleep 1
  i=$((i + 1))
done
for name in go-old go-new jvm; do echo "said $name $(head -c 100 "$D/$name.out" | tr '\n' ' ')"; done
echo "doctor $(.venv/bin/bwlab doctor /bwlab-pools --seconds 1 --json - --no-predict |
  .venv/bin/python -c 'import json, sys; print(json.dumps(json.load(sys.stdin)["facts"]["pools"]))')"
# shellcheck disable=SC2086
kill $pids
wait || :
rmdir $G
