#!/usr/bin/env bash
# The per-boot distribution of the kselftests test_series_real asserts (docs/testing.md,
# "test_series_real kselftests"): N boots of the patched lab kernel in the test's own mode and
# selection (smp, --only the tests it asserts), one after another on a quiet machine.
#
#   bash benchmarks/kselftest_boots.sh N OUT
#
# OUT/boot-K/ holds boot K's kselftest JSON; OUT/boots.tsv, after a header, one line per boot
# and test: K, the test, its result, the numbers it printed (ksft_print_msg's lines, joined by
# " | "), the machine's steal over the boot in seconds and the splats the guest logged; a boot
# whose bwlab failed adds a line "K - bwlab-exit-STATUS". The loop never stops on a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -ne 2 ] || ! [[ $1 =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: bash benchmarks/kselftest_boots.sh N OUT" >&2
  exit 2
fi
runs=$1 out=$2
mkdir -p "$out"
key=$(.venv/bin/bwlab kernel build | tail -1 | cut -d' ' -f1)  # its last line: KEY BZIMAGE
printf 'boot\ttest\tresult\tprinted\tsteal_s\tsplats\n' >"$out/boots.tsv"
tests=(test_cpucg_subtree_control test_cpucg_nested_weight_overprovisioned
  test_cpucg_max_demand_equals_quota test_cpucg_max_rewrite test_cpucg_max_kernel_time
  test_cpucg_max_overdelivery test_cpucg_latency_awareness_files test_cpucg_load_credit
  test_cpucg_latency_awareness_fair_share test_cpucg_latency_awareness_fair_share_bursty)
only=()
for t in "${tests[@]}"; do only+=(--only "$t"); done
steal() { awk '/^cpu / {print $9}' /proc/stat; }
hz=$(getconf CLK_TCK)
for k in $(seq 1 "$runs"); do
  s0=$(steal)
  rc=0
  .venv/bin/bwlab kselftest --kernel "$key" --out "$out/boot-$k" --expect-fail --cgroup-mode smp \
    "${only[@]}" >"$out/boot-$k.log" 2>&1 || rc=$?
  [ $rc -eq 0 ] || printf '%s\t-\tbwlab-exit-%s\t-\t-\t-\n' "$k" "$rc" >>"$out/boots.tsv"
  s1=$(steal)
  .venv/bin/python - "$out/boot-$k" "$k" "$(awk -v t=$((s1 - s0)) -v hz="$hz" 'BEGIN {printf "%.2f", t / hz}')" \
    >>"$out/boots.tsv" <<'EOF'
import json, pathlib, sys
from bwlab.kernel.kselftest import printed_by_test
boot, k, steal = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
docs = list(boot.glob("kselftest-*.json"))
if not docs:
    print(f"{k}\t-\tno-result\t-\t{steal}")
    raise SystemExit
doc = json.loads(docs[0].read_text())
said = {name: " | ".join(lines) for name, lines in printed_by_test(doc["output"]).items()}
splats = len(doc["meta"]["splats"])
for test in doc["tests"]:
    print(f"{k}\t{test['name']}\t{test['status']}\t{said.get(test['name'], '')}\t{steal}\t{splats}")
EOF
done
awk -F'\t' 'NR == 1 {next} $3 != "pass" {f[$1] = 1} {b[$1] = 1}
  END {printf "%d boots, %d with a test not passed\n", length(b), length(f)}' \
  "$out/boots.tsv"
