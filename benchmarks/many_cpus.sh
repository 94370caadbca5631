#!/bin/sh
# The many-CPU runs (issue 33), as one prepared script in steps, so that a borrowed many-core
# machine's minutes go to the run alone:
#
#   sh benchmarks/many_cpus.sh prepare [N...]   here: a bundle of the many-cpus scenario for
#                                                N CPUs (default 16 and this machine's) in .many/
#   sh benchmarks/many_cpus.sh prepare-guests N BASELINE PATCHED
#                                                here: .many/guests.tar.xz, the many-cpus-series
#                                                scenario in guests of N vCPUs: kernel BASELINE
#                                                (v7.3.4), PATCHED under `all` and `clip-slice`
#   sh benchmarks/many_cpus.sh run OUT          there, as root, from the repository's root with
#                                                .many/ carried: the bundle's run.sh, the machine's
#                                                facts and steal; OUT gets many-cpus.tar.gz and run.log
#   sh benchmarks/many_cpus.sh run-guests OUT   there, with .many/guests.tar.xz carried: unpacks it
#                                                in /tmp, boots the guests (KVM where it works),
#                                                removes it; OUT as for run
#   sh benchmarks/many_cpus.sh finish OUT       here: ingest, the simulator's prediction for the
#                                                same CPU count and HZ (10 seeds; each policy for
#                                                guests), one report
#   sh benchmarks/many_cpus.sh all              prepare, run and finish here, at this machine's
#                                                CPU count (the host part)
#
# `run` needs a POSIX shell, tar, gzip and root only (no bwlab, Python or compiler): on the
# 16-core machine it takes about 4 minutes (10 cases x 3 repetitions x 6 s, noise probes).
# `run-guests` also needs xz or Python 3 to unpack; 3 guests x 7 cases x 2 x 5 s: ~5 minutes.
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
prepare-guests)
  [ $# -eq 3 ] || { echo "usage: many_cpus.sh prepare-guests N BASELINE-KEY PATCHED-KEY" >&2; exit 2; }
  rm -rf .many/guests .many/guests.tar.xz
  mkdir -p .many
  "$BWLAB" bundle many-cpus-series --ncpu "$1" --kernel "$2" --kernel "$3" --policy all --policy clip-slice \
    --duration 5 -o .many/guests
  rm -rf .many/guests  # the archive is what travels (the device carries 64 MiB)
  ;;
run | run-guests)
  out=${1:?usage: many_cpus.sh $step OUT}
  mkdir -p "$out"
  raw=$(mktemp -d /tmp/many-cpus-XXXXXX)
  bundle=.many/bundle
  if [ "$step" = run-guests ]; then
    [ -f .many/guests.tar.xz ] || { echo "many_cpus.sh: no .many/guests.tar.xz (run 'prepare-guests' first)" >&2; exit 1; }
    tar -C "$raw" -xJf .many/guests.tar.xz 2> /dev/null ||
      python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' .many/guests.tar.xz "$raw"
    bundle=$raw/guests
    export BWLAB_ONLY=guests
  fi
  [ -x $bundle/run.sh ] || { echo "many_cpus.sh: no bundle in $bundle (run 'prepare' first)" >&2; rm -rf "$raw"; exit 1; }
  {
    echo "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "uname=$(uname -a)"
    echo "cpus=$(grep -c ^processor /proc/cpuinfo) $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | sort | uniq -c | tr -s ' ')"
    echo "kvm=$([ -e /dev/kvm ] && echo yes || echo no)"
    echo "caps=$(grep '^CapEff' /proc/self/status | tr -s '\t' ' ')"
    echo "self_cgroup=$(tr '\n' ' ' < /proc/self/cgroup)"
    echo "cgroup_mounts=$(grep cgroup /proc/mounts | tr '\n' ';')"
    echo "stat_before=$(grep '^cpu ' /proc/stat)"
  } > "$raw/machine.txt" 2>&1
  rc=0
  # LIMIT_S=N: run.sh is stopped (and cleans up) after N s, so that what finished still comes back
  if [ -n "${LIMIT_S:-}" ]; then
    timeout -s TERM "$LIMIT_S" sh $bundle/run.sh "$raw/out" > "$out/run.log" 2>&1 || rc=$?
  else
    sh $bundle/run.sh "$raw/out" > "$out/run.log" 2>&1 || rc=$?
  fi
  echo "stat_after=$(grep '^cpu ' /proc/stat)" >> "$raw/machine.txt"
  echo "rc=$rc" >> "$raw/machine.txt"
  tar -C "$raw" -czf "$out/many-cpus.tar.gz" machine.txt out
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
  if [ "$(sed -n 's/^host=//p' "$work/out/run.txt")" = 0 ]; then  # guests: their kernels' HZ and policies
    n=$(sed -n 's/^vcpus=//p' "$work/out/guest-0.txt")
    hz=$(sed -n 's/^hz=//p' "$work/out/guest-0.txt")
    for policy in mainline all clip-slice; do
      "$BWLAB" run many-cpus-series --target sim --vcpus "$n" --hz "$hz" --policy $policy --reps 10 --seed 1 \
        --out "$out/results"
    done
    # the model again, its ticks and timers as late as each guest's own noise probes found them
    for guest in baseline:mainline patched-all:all patched-clip-slice:clip-slice; do
      "$BWLAB" run many-cpus-series --target sim --vcpus "$n" --hz "$hz" --policy "${guest#*:}" --reps 10 \
        --seed 1 --noise "$(ls "$out"/results/many-cpus-series-guest-"${guest%%:*}"-*.json | head -n 1)" \
        --out "$out/results-late-timers"
    done
    "$BWLAB" report "$out/results-late-timers"
  else
    hz=$(sed -n 's/^hz=//p' "$work/out/run.txt")
    "$BWLAB" run many-cpus --target sim --vcpus "$n" --hz "$hz" --reps 10 --seed 1 --out "$out/results"
  fi
  "$BWLAB" report "$out/results"
  ;;
all)
  out=${1:-results/many-cpus-$(date +%Y%m%d-%H%M%S)}
  sh "$0" prepare "$(nproc)"
  sh "$0" run "$out"
  sh "$0" finish "$out"
  ;;
*)
  echo "usage: many_cpus.sh prepare [N...] | prepare-guests N BASELINE PATCHED | run OUT | run-guests OUT |" \
    "finish OUT | all [OUT]" >&2
  exit 2
  ;;
esac
