#!/usr/bin/env bash
# Another sched_ext scheduler against CFS and scx_bwlab, same cases, same guest kernel
# (docs/scx.md, issue 37): table2's shape at 100/50/10 ms, demand == quota and twice the
# quota, measured by usage per quota and by the time the threads themselves were held (spin
# -g: benchmarks/foreign_scheduler_guest.sh, foreign_scheduler_summary.py). The other
# scheduler is built elsewhere, from its own project; nothing of it is in this repository.
#   bash benchmarks/foreign_scheduler.sh OUT NAME CMD...   e.g. NAME=lavd CMD=/path/scx_lavd --enable-cpu-bw
#   (BWLAB_SECONDS, BWLAB_REPS: 10 and 2 by default)
# Measure on a quiet machine: nothing else running (TCG guest timers, DEVELOPERS.md).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 3 ] || { echo "usage: $0 OUT NAME CMD..." >&2; exit 2; }
out=$1 name=$2; shift 2
[ -x "$1" ] || { echo "$0: $1: not an executable" >&2; exit 2; }
seconds=${BWLAB_SECONDS:-10} reps=${BWLAB_REPS:-2}
bw=.venv/bin/bwlab
"$bw" kernel fetch >/dev/null
# scx.config, and every kernel symbol listed (scx_lavd's BPF needs it; kernel/configs/kallsyms-all.config)
scx=$("$bw" kernel build --baseline --config kernel/configs/scx.config --config kernel/configs/kallsyms-all.config | tail -n 1 | cut -d' ' -f1)
loader=$("$bw" kernel scheduler --kernel "$scx" | tail -n 1)
spin=$(.venv/bin/python -c "from bwlab.workloads import programs; print(programs.resolve('spin'))")
mkdir -p "$out"
echo "kernel $scx, revision $(git rev-parse --short HEAD), $(date -u +%FT%TZ); results in $out"
guest() { "$bw" guest exec --kernel "$scx" --accel tcg --timeout 900 -- bash "$PWD/benchmarks/foreign_scheduler_guest.sh" "$spin" "$seconds" "$reps" "$@"; }
guest none > "$out/cfs.log"
guest "$loader" > "$out/scx_bwlab.log"
guest "$@" > "$out/$name.log"
for f in cfs scx_bwlab "$name"; do
  echo "== $f"
  .venv/bin/python benchmarks/foreign_scheduler_summary.py < "$out/$f.log"
done
