#!/usr/bin/env bash
# The distribution of a real test's bounded quantities (docs/testing.md, "Bounds"): run the
# given pytest node ids N times in a row, in order, on a quiet machine, and keep each run's
# output, its result, the machine's steal and the quantities the tests print.
#
#   bash benchmarks/distribution.sh N OUT NODEID...
#
# OUT/run-K.log is run K's output (pytest -s: the quantities the real tests print, one line per
# bounded quantity), OUT/runs.tsv one line per run: K, exit status, seconds, the machine's steal
# seconds. The loop never stops on a failure: a failure is a sample of the distribution too.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 3 ] || ! [[ $1 =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: bash benchmarks/distribution.sh N OUT NODEID..." >&2
  exit 2
fi
runs=$1 out=$2
shift 2
mkdir -p "$out"
steal() { awk '/^cpu / {print $9}' /proc/stat; }
hz=$(getconf CLK_TCK)
for k in $(seq 1 "$runs"); do
  start=$(date +%s) s0=$(steal)
  rc=0
  .venv/bin/pytest -q -s -p no:cacheprovider "$@" >"$out/run-$k.log" 2>&1 || rc=$?
  s1=$(steal)
  printf '%s\t%s\t%s\t%s\n' "$k" "$rc" "$(($(date +%s) - start))" \
    "$(awk -v t=$((s1 - s0)) -v hz="$hz" 'BEGIN {printf "%.2f", t / hz}')" >>"$out/runs.tsv"
done
awk -F'\t' '{n++; if ($2 != 0) f++} END {printf "%d runs, %d failed\n", n, f}' "$out/runs.tsv"
