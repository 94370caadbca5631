#!/bin/sh
# Run in a host-userland guest (bwlab guest exec) by test_hostroot_real.py: the live tools that
# keep running (tune --watch, the exporter scraped by this machine's Prometheus) and the cgroup
# v2 shapes they meet (a threaded subtree, a burst the kernel refuses), on the guest kernel's
# real v2. Nothing here is timed: counts and values only. One line "NAME value" per result.
set -eu
R=/sys/fs/cgroup
W=$(mktemp -d)
B=.venv/bin/bwlab
pids=""
# a JSON document's top-level keys named in $1 (comma-separated), as one line of JSON
pick() { .venv/bin/python -c 'import json, sys; d = json.load(sys.stdin); print(json.dumps({k: d.get(k) for k in sys.argv[1].split(",")}))' "$1"; }
# lines "NAME_doctor" (doctor's JSON on GROUP, a few keys) and "NAME_doctor_err" (what it said)
diagnosed() {
  doc=$($B doctor "$2" --seconds 2 --json - --no-predict 2> "$W/$1.err") || :
  echo "$1_doctor $(echo "$doc" | pick asked,group,limit,periods,throttled)"
  echo "$1_doctor_err $(head -c 300 "$W/$1.err" | tr '\n' ' ')"
}
# the agent: groups matching the glob get their burst, one made after it started too; a
# group outside the selector is left alone
for g in w-a w-b other; do mkdir $R/bwlab-tools-$g; done
echo "20000 10000" > $R/bwlab-tools-w-a/cpu.max
echo "1000 10000" > $R/bwlab-tools-w-b/cpu.max
echo "20000 10000" > $R/bwlab-tools-other/cpu.max
$B tune '/bwlab-tools-w-*' --watch --burst auto --interval 0.5 --iterations 10 > $W/watch.out 2>&1 &
watch=$!
sleep 2
mkdir $R/bwlab-tools-w-late
echo "20000 10000" > $R/bwlab-tools-w-late/cpu.max
wait $watch && echo "watch_rc 0" || echo "watch_rc $?"
for g in w-a w-b w-late other; do echo "burst_$g $(cat $R/bwlab-tools-$g/cpu.max.burst)"; done
echo "watch_verified $(grep -c '(verified)' $W/watch.out || :)"
# a burst larger than the quota (the kernel's rule, which tune checks first): a one-line error,
# the old value kept
T=$R/bwlab-tools-t
mkdir $T $T/thr
echo "5000 10000" > $T/cpu.max
echo 3000 > $T/cpu.max.burst
$B tune /bwlab-tools-t --burst 20000 > /dev/null 2> $W/refused.err && echo "refused_rc 0" || echo "refused_rc $?"
echo "refused_lines $(wc -l < $W/refused.err) $(head -c 200 $W/refused.err)"
echo "refused_kept $(cat $T/cpu.max.burst)"
# a threaded subtree: the limit (half a CPU) on the threaded domain, one of the work's two
# threads in a threaded child
sysbench cpu --threads=2 --time=0 run > /dev/null &
sb=$!
echo $sb > $T/cgroup.procs
echo threaded > $T/thr/cgroup.type
echo +cpu > $T/cgroup.subtree_control
i=0  # its worker threads exist (sysbench makes them after it starts), at most 30 s
while [ "$(ls /proc/$sb/task | wc -l)" -lt 3 ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
ls /proc/$sb/task | grep -vx "$sb" | head -1 > $T/thr/cgroup.threads
echo "threaded_type $(cat $T/thr/cgroup.type) $(wc -w < $T/thr/cgroup.threads)"
diagnosed threaded /bwlab-tools-t/thr
echo "top $($B top --iterations 1 --interval 1 2> $W/top.err | tr -s ' \n' '  ') $(head -c 300 $W/top.err | tr '\n' ' ')"
kill $sb
wait $sb 2> /dev/null || :
# a child whose own limit (2 CPUs) is looser than its parent's (half a CPU): the parent throttles
# it, which the child's own cpu.stat never counts, so doctor watches the parent
L=$R/bwlab-tools-l
mkdir $L
echo "5000 10000" > $L/cpu.max
echo +cpu > $L/cgroup.subtree_control
mkdir $L/c
echo "20000 10000" > $L/c/cpu.max
sysbench cpu --threads=1 --time=0 run > /dev/null &
sb=$!
echo $sb > $L/c/cgroup.procs
diagnosed looser /bwlab-tools-l/c
kill $sb
wait $sb 2> /dev/null || :
# A: one thread at half a CPU, twice its quota (at quota), on a burst, stopped for 0.3 s every
# 0.3 s (the quota it leaves then is what a burst accrues, whatever else takes the CPUs); the
# exporter reads it each second, Prometheus scrapes the exporter each second
A=$R/bwlab-tools-a
mkdir $A
echo "5000 10000" > $A/cpu.max
echo 2000 > $A/cpu.max.burst
sysbench cpu --threads=1 --time=0 run > /dev/null &
a=$!
echo $a > $A/cgroup.procs
pids="$pids $a"
(while kill -STOP $a 2> /dev/null; do sleep 0.3; kill -CONT $a; sleep 0.3; done) &
pids="$pids $!"
$B exporter --listen 127.0.0.1:9860 --interval 1 2> $W/exporter.err &
pids="$pids $!"
cat > $W/prometheus.yml << EOF
global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs: [{job_name: bwlab, static_configs: [{targets: ["127.0.0.1:9860"]}]}]
EOF
prometheus --config.file=$W/prometheus.yml --storage.tsdb.path=$W/data \
  --web.listen-address=127.0.0.1:9090 > $W/prometheus.log 2>&1 &
pids="$pids $!"
q() { curl -s --get --data-urlencode "query=$1" http://127.0.0.1:9090/api/v1/query && echo; }
i=0  # until Prometheus has scraped A's at-quota throttles and burst counter (at most 90 s)
until { q 'bwlab_cfs_bursts_total{id="/bwlab-tools-a"} > 0' && q 'bwlab_throttled_periods_total{id="/bwlab-tools-a",verdict="at_quota"} > 0'; } 2> /dev/null |
  grep -c '"value"' | grep -qx 2 || [ $i -ge 90 ]; do
  sleep 1
  i=$((i + 1))
done
echo "prom_at $(q 'bwlab_throttled_periods_total{id="/bwlab-tools-a",verdict="at_quota"}')"
echo "prom_bursts $(q 'bwlab_cfs_bursts_total{id="/bwlab-tools-a"}')"
echo "stat_bursts $(sed -n 's/^nr_bursts //p' $A/cpu.stat)"
curl -s http://127.0.0.1:9860/metrics > $W/metrics
promtool check metrics < $W/metrics > $W/lint 2>&1 && echo "lint 0" || echo "lint $? $(head -c 300 $W/lint)"
echo "exporter_err $(head -c 300 $W/exporter.err | tr '\n' ' ')"
# shellcheck disable=SC2086
kill $pids 2> /dev/null || :
kill -CONT $a 2> /dev/null || :
wait || :
for g in t/thr t l/c l a w-a w-b w-late other; do
  i=0 # the killed tasks leave their groups
  while ! rmdir $R/bwlab-tools-$g 2> /dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
done
rm -rf "$W"
