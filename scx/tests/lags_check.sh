#!/bin/bash
# LAGS' real check, run inside a lab guest with sched_ext (tests/test_scx_real.py):
#   lags_check.sh LOADER WAKELAT SPIN SECONDS
# Three groups without quotas, each started at once: light (a request server using ~3 % of a
# CPU), heavy (a request server that wants every CPU) and plain (a busy thread per CPU). Run
# twice under the scheduler: LAGS off (no -l), then on with light and heavy latency-aware
# (-l). Prints one "lags-check {json}" line per run: the servers' wakeup latencies (wakelat's
# JSON less its samples), each group's CPU time over the run (cpu.stat usage_usec, the
# kernel's own), the loader's exit status and the scheduler's state before it was stopped.
set -u
loader=$1 wakelat=$2 spin=$3 seconds=$4
cg=/sys/fs/cgroup
grep -q "^cgroup2 $cg " /proc/mounts || mount -t cgroup2 none $cg
echo +cpu > $cg/cgroup.subtree_control
ncpu=$(nproc)
out=$(mktemp -d)
pid=
groups="lags-light lags-heavy lags-plain"
cleanup() {
  [ -n "$pid" ] && kill -INT "$pid" 2>/dev/null && wait "$pid"
  for g in $groups; do for p in $(cat $cg/$g/cgroup.procs 2>/dev/null); do kill -9 "$p" 2>/dev/null; done; done
  sleep 0.2
  for g in $groups; do rmdir $cg/$g 2>/dev/null; done
  rm -rf "$out"
}
trap cleanup EXIT
for g in $groups; do mkdir $cg/$g; done
usage() { awk '$1 == "usage_usec" {print $2}' $cg/$1/cpu.stat; }
. "$(dirname "$0")/lib.sh"  # json
in_group() { local g=$1; shift; (echo $BASHPID > $cg/$g/cgroup.procs; exec "$@"); }
server() { sed 's/, *"samples_us": *\[[^]]*\]//' "$out/$1.json"; }  # wakelat's JSON less its samples
counter() { grep -o "\"$1\": [0-9]*" "$out/stats.json" | awk '{print $2}'; }  # a top-level one of the loader's
for mode in off on; do
  lags=()
  [ $mode = on ] && lags=(-l lags-light -l lags-heavy)
  rm -f "$out/stats.json"
  "$loader" "${lags[@]}" -o "$out/stats.json" -i 100 2>"$out/loader.log" & pid=$!
  for _ in $(seq 100); do
    [ "$(cat /sys/kernel/sched_ext/state)" = enabled ] && [ -s "$out/stats.json" ] && break
    sleep 0.1
  done
  if [ "$(cat /sys/kernel/sched_ext/state)" != enabled ]; then
    echo "lags_check: the scheduler did not start ($mode): $(tail -n 1 "$out/loader.log")" >&2
    exit 1
  fi
  declare -A u0
  for g in $groups; do u0[$g]=$(usage $g); done
  in_group lags-light "$wakelat" -m 1 -t 1 -r 100 -p -c 300 -w 1 -d "$seconds" > "$out/light.json" & light=$!
  in_group lags-heavy "$wakelat" -m 1 -t $((2 * ncpu)) -r $((1000 * ncpu)) -p -c 1000 -w 1 -d "$seconds" \
    > "$out/heavy.json" & heavy=$!
  in_group lags-plain "$spin" -t "$ncpu" -d "$seconds" > /dev/null & plain=$!
  wait $light $heavy $plain
  used=""
  for g in $groups; do used="$used\"${g#lags-}\": $(( $(usage $g) - ${u0[$g]} )), "; done
  state=$(cat /sys/kernel/sched_ext/state)
  kill -INT $pid; wait $pid; rc=$?; pid=
  echo "lags-check {\"lags\": \"$mode\", \"light\": $(server light), \"heavy\": $(server heavy), \"usage_us\": {${used%, }}, \"rc\": $rc, \"state\": \"$state\", \"log\": $(tail -n 3 "$out/loader.log" | json), \"lags_kicks\": $(counter lags_kicks), \"lags_picks\": $(counter lags_picks)}"
done
