#!/bin/bash
# Inside a lab guest with sched_ext (benchmarks/foreign_scheduler.sh runs it):
#   foreign_scheduler_guest.sh SPIN SECONDS REPS none|CMD...
# table2's shape (a busy thread per CPU) at 100, 50 and 10 ms periods, at demand == quota
# (quota = CPUs x period) and at twice the quota (half that), each repetition in a fresh
# group, under the scheduler CMD starts (none: CFS). Measured without the scheduler's own
# counters (cpu.stat's throttle counters stay 0 under sched_ext): the kernel's usage_usec,
# which every scheduler keeps (usage per quota over the run), and the threads' own gaps (spin
# -g: each time a thread was off its CPU more than GAP_US; benchmarks/foreign_scheduler.sh
# sums them: foreign_scheduler_summary.py). Prints one "foreign {json}" line per repetition.
set -u
spin=$1 seconds=$2 reps=$3; shift 3
GAP_US=300 PRIME=300  # an event of spin -p 300 takes ~20 us under TCG: gaps from 0.3 ms
cg=/sys/fs/cgroup
ncpu=$(nproc)
pid=
cleanup() {
  [ -n "$pid" ] && kill -INT "$pid" 2>/dev/null && wait "$pid"
  for d in $cg/foreign-*; do [ -d "$d" ] && rmdir "$d"; done
}
trap cleanup EXIT
state() { cat /sys/kernel/sched_ext/state 2>/dev/null || echo none; }
if [ "$1" != none ]; then
  "$@" > /tmp/foreign-sched.log 2>&1 & pid=$!
  for _ in $(seq 600); do [ "$(state)" = enabled ] && break; sleep 0.1; done  # scx_lavd: 16 s under TCG
  if [ "$(state)" != enabled ]; then
    echo "foreign-error the scheduler did not start: $(tail -n 3 /tmp/foreign-sched.log | tr '\n' ' ')"; exit 1
  fi
fi
echo "foreign-scheduler {\"ops\": \"$(cat /sys/kernel/sched_ext/root/ops 2>/dev/null)\", \"state\": \"$(state)\"}"
stat_of() { awk -v k="$2" '$1 == k {print $2}' "$1/cpu.stat"; }
for period in 100000 50000 10000; do
  for load in at-quota twice-the-quota; do
    quota=$((ncpu * period)); [ $load = twice-the-quota ] && quota=$((quota / 2))
    for rep in $(seq "$reps"); do
      g=$cg/foreign-$period-$load-$rep
      mkdir "$g" && echo "$quota $period" > "$g/cpu.max"
      u0=$(stat_of "$g" usage_usec) t0=$(stat_of "$g" nr_throttled) w0=$(date +%s%N)
      spun=$(echo $BASHPID > "$g/cgroup.procs"; exec "$spin" -t "$ncpu" -d "$seconds" -p $PRIME -g $GAP_US)
      w1=$(date +%s%N) u1=$(stat_of "$g" usage_usec) t1=$(stat_of "$g" nr_throttled)
      printf 'foreign {"period_us": %d, "load": "%s", "rep": %d, "quota_us": %d, "wall_s": %s, "usage_per_quota": %s, "cfs_nr_throttled": %d, "state": "%s", "gap_us": %d, "spin": %s}\n' \
        "$period" "$load" "$rep" "$quota" "$(awk -v a="$w0" -v b="$w1" 'BEGIN {printf "%.3f", (b - a) / 1e9}')" \
        "$(awk -v u="$((u1 - u0))" -v q="$quota" -v p="$period" -v a="$w0" -v b="$w1" 'BEGIN {printf "%.4f", u / (q * ((b - a) / 1e3) / p)}')" \
        "$((t1 - t0))" "$(state)" $GAP_US "${spun:-null}"
      rmdir "$g"
    done
  done
done
