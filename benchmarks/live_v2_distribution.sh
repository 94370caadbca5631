#!/bin/sh
# The distribution behind test_hostroot_real.py's bounds (docs/testing.md): in one host-userland
# guest of KEY, a group at demand == quota (sysbench cpu, a thread per CPU, quota = every CPU,
# PERIOD us) watched N times by `bwlab doctor --seconds 4`, then twice its quota watched N times.
# One line per run on stdout: "equal|twice THROTTLED PERIODS BELOW AT". POLICY: a patched
# kernel's policy (guest exec --policy), for the series' effect side by side (docs/live.md).
#   sh benchmarks/live_v2_distribution.sh KEY N PERIOD [POLICY]
set -eu
cd "$(dirname "$0")/.."
[ $# -eq 3 ] || [ $# -eq 4 ] || { echo "usage: live_v2_distribution.sh KEY N PERIOD [POLICY]" >&2; exit 2; }
exec .venv/bin/bwlab guest exec --kernel "$1" ${4:+--policy "$4"} --accel tcg --timeout 3600 -- sh -c '
  set -eu
  n=$(nproc) runs=$1 period=$2
  G=/sys/fs/cgroup/bwlab-live-dist
  mkdir $G
  sysbench cpu --threads="$n" --time=0 run > /dev/null &
  echo $! > $G/cgroup.procs
  for kind in equal twice; do
    if [ $kind = equal ]; then echo "$((n * period)) $period" > $G/cpu.max; else echo "$((n * period / 2)) $period" > $G/cpu.max; fi
    sleep 1
    i=0
    while [ $i -lt "$runs" ]; do
      .venv/bin/bwlab doctor /bwlab-live-dist --seconds 4 --json - --no-predict |
        .venv/bin/python -c "import json, sys; d = json.load(sys.stdin); print(sys.argv[1], d[\"throttled\"], d[\"periods\"], d[\"below_quota\"], d[\"at_quota\"], flush=True)" $kind
      i=$((i + 1))
    done
  done
  kill $!
  wait || true
  rmdir $G
' sh "$2" "$3"
