#!/bin/sh
# The many-CPU runs (issue 33), as one prepared script in three steps, so that a borrowed
# many-core machine's minutes go to the run alone:
#
#   sh benchmarks/many_cpus.sh prepare [N...]   here: a bundle of the many-cpus scenario for
#                                                N CPUs (default 16 and this machine's) in .many/
#   sh benchmarks/many_cpus.sh run OUT          there, as root, from the repository's root with
#                                                .many/ carried: the bundle's run.sh, the machine's
#                                                facts and steal; OUT gets many-cpus.tar.gz and run.log
#   sh benchmarks/many_cpus.sh finish OUT       here: ingest, the simulator's prediction for the
#                                                same CPU count and HZ (10 seeds), one report
#   sh benchmarks/many_cpus.sh all              all three here, at this machine's CPU count
#
# `run` needs a POSIX shell, tar, gzip and root only (no bwlab, Python or compiler): on the
# 16-core machine it takes about 4 minutes (10 cases x 3 repetitions x 6 s, noise probes).
set -eu
cd "$(dirname "$0")/.."
BWLAB=${BWLAB:-.venv/bin/bwlab}
step=${1:-}
[ $# -gt 0 ] && shift
case "$step" in
prepare)
  rm -rf .many
  mkdir -p .many
  args=""
  for n in ${*:-16 $(nproc)}; do args="$args --ncpu $n"; done
  # shellcheck disable=SC2086
  "$BWLAB" bundle many-cpus $args -o .many/bundle
  ;;
run)
  out=${1:?usage: many_cpus.sh run OUT}
  [ -x .many/bundle/run.sh ] || { echo "many_cpus.sh: no bundle in .many/ (run 'prepare' first)" >&2; exit 1; }
  mkdir -p "$out"
  raw=$(mktemp -d /tmp/many-cpus-XXXXXX)
  {
    echo "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "uname=$(uname -a)"
    echo "cpus=$(grep -c ^processor /proc/cpuinfo) $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | sort | uniq -c | tr -s ' ')"
    echo "kvm=$([ -e /dev/kvm ] && echo yes || echo no)"
    echo "self_cgroup=$(tr '\n' ' ' < /proc/self/cgroup)"
    echo "cgroup_mounts=$(grep cgroup /proc/mounts | tr '\n' ';')"
    echo "stat_before=$(grep '^cpu ' /proc/stat)"
  } > "$raw/machine.txt" 2>&1
  rc=0
  sh .many/bundle/run.sh "$raw/out" > "$out/run.log" 2>&1 || rc=$?
  echo "stat_after=$(grep '^cpu ' /proc/stat)" >> "$raw/machine.txt"
  echo "rc=$rc" >> "$raw/machine.txt"
  tar -C "$raw" -czf "$out/many-cpus.tar.gz" .
  rm -rf "$raw"
  cat "$out/run.log"
  exit $rc
  ;;
finish)
  out=${1:?usage: many_cpus.sh finish OUT}
  work=$out/unpacked
  rm -rf "$work" && mkdir -p "$work"
  tar -C "$work" -xzf "$out/many-cpus.tar.gz"
  cat "$work/machine.txt"
  "$BWLAB" ingest "$work/out" --out "$out/results"
  n=$(sed -n 's/^ncpu=//p' "$work/out/probe.txt")
  hz=$(sed -n 's/^hz=//p' "$work/out/run.txt")
  "$BWLAB" run many-cpus --target sim --vcpus "$n" --hz "$hz" --reps 10 --seed 1 --out "$out/results"
  "$BWLAB" report "$out/results"
  ;;
all)
  out=${1:-results/many-cpus-$(date +%Y%m%d-%H%M%S)}
  sh "$0" prepare "$(nproc)"
  sh "$0" run "$out"
  sh "$0" finish "$out"
  ;;
*)
  echo "usage: many_cpus.sh prepare [N...] | run OUT | finish OUT | all [OUT]" >&2
  exit 2
  ;;
esac
