#!/bin/sh
# The live tools on v7.3.4 and on the series side by side (docs/live.md): in one host-userland
# guest of KEY (POLICY: a patched kernel's policy, guest exec --policy), a group at demand ==
# quota (sysbench cpu, a thread per CPU, quota = every CPU, 10 ms periods), then at twice its
# quota. For each: top's row after one 10 s refresh, then the exporter for 30 s (its defaults,
# reading every second, written with --textfile): the group's lines of its metrics, the kernel's
# own count (bwlab_cfs_throttled_periods_total) beside its verdicts.
#   sh benchmarks/live_v2_side_by_side.sh KEY [POLICY]
set -eu
cd "$(dirname "$0")/.."
[ $# -eq 1 ] || [ $# -eq 2 ] || { echo "usage: live_v2_side_by_side.sh KEY [POLICY]" >&2; exit 2; }
exec .venv/bin/bwlab guest exec --kernel "$1" ${2:+--policy "$2"} --accel tcg --timeout 1200 -- sh -c '
  set -eu
  n=$(nproc) period=10000
  G=/sys/fs/cgroup/bwlab-side
  W=$(mktemp -d)
  mkdir $G
  sysbench cpu --threads="$n" --time=0 run > /dev/null &
  sb=$!
  echo $sb > $G/cgroup.procs
  for kind in equal twice; do
    if [ $kind = equal ]; then echo "$((n * period)) $period" > $G/cpu.max; else echo "$((n * period / 2)) $period" > $G/cpu.max; fi
    sleep 1
    echo "$kind top: $(COLUMNS=300 .venv/bin/bwlab top --iterations 1 --interval 10 | grep -F bwlab-side | tr -s " ")"
    .venv/bin/bwlab exporter --textfile $W --interval 1 --duration 30 2> $W/err
    grep -F "id=\"/bwlab-side\"" $W/bwlab.prom | grep -E "^bwlab_(throttled_periods|estimated_throttled_periods|watched_periods|periods|cfs_throttled_periods)_total" |
      sed "s/^/$kind exporter: /"
    [ ! -s $W/err ] || sed "s/^/$kind exporter said: /" $W/err
  done
  kill $sb
  wait || true
  rmdir $G
  rm -rf $W
'
