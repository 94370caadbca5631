#!/usr/bin/env bash
# scx_bwlab against the kernel's own schedulers, same scenarios, one guest at a time
# (docs/scx.md, issue 37): enforcement after idle (benchmarks/scenarios/enforcement.toml:
# `overdelivery`'s on/off shape with a real workload) against CFS on the same kernel and the
# series; overhead (perf bench sched pipe, hackbench, the yield-heavy pick test) against
# EEVDF/CFS; colocation against EEVDF and the in-kernel LAGS (the lab kernel: the series and
# kernel/lab/lags, its latency_awareness 0 and 1).
#   bash benchmarks/scx_compare.sh OUT [STEP...]     steps: enforcement overhead picks colocation
# Measure on a quiet machine: nothing else running (TCG guest timers, DEVELOPERS.md).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 OUT [enforcement|overhead|picks|colocation]..." >&2; exit 2; }
out=$1; shift
steps=("$@"); [ ${#steps[@]} -gt 0 ] || steps=(enforcement overhead picks colocation)
bw=.venv/bin/bwlab
key() { "$bw" kernel build "$@" | tail -n 1 | cut -d' ' -f1; }
"$bw" kernel fetch >/dev/null
scx=$(key --baseline --config kernel/configs/scx.config)   # v7.3.4 + sched_ext; CFS when no scheduler
lab=$(key)                                                  # the series + LAGS (kernel/lab/series)
"$bw" kernel scheduler --kernel "$scx" >/dev/null
echo "kernels: scx $scx, lab $lab; results in $out"
run() { "$bw" run "$@" --target guest --accel tcg --out "$out"; }
for step in "${steps[@]}"; do
  case $step in
    enforcement)  # usage per period run against the quota, 1 s busy / 1 s idle
      sc=benchmarks/scenarios/enforcement.toml
      run $sc --kernel "$scx"
      run $sc --kernel "$scx" --scheduler scx_bwlab
      run $sc --kernel "$lab" ;;
    overhead)
      for sc in overhead-pipe overhead-hackbench; do
        run $sc --kernel "$scx" --reps 3
        run $sc --kernel "$scx" --scheduler scx_bwlab --reps 3
      done ;;
    picks)  # LAGS off and on: the in-kernel one (lab kernel) and the scheduler's
      run lags-pick --kernel "$lab"
      run lags-pick --kernel "$scx" --scheduler scx_bwlab ;;
    colocation)
      run colocation --kernel "$lab" --duration 8
      run colocation --kernel "$scx" --scheduler scx_bwlab --duration 8 ;;
    *) echo "$0: unknown step $step" >&2; exit 2 ;;
  esac
done
