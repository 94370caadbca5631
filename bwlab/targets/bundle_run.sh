#!/bin/sh
# A bwlab bundle (bwlab bundle; bwlab/targets/bundle.py): sh run.sh [OUT] as root. Probes this
# machine, runs each scenario in fresh cgroups, then boots each guest the bundle carries (if
# any; bundle_guest.py) and runs every scenario in it, writes the records to OUT (default:
# out-HOST-DATE beside this script) and removes its groups, processes and temporary files, also
# when interrupted. Then, on a machine with bwlab: bwlab ingest OUT
#
# BWLAB_ONLY=host or BWLAB_ONLY=guests runs one part; BWLAB_VCPUS=N boots the guests with N
# vCPUs (default: this machine's CPUs); BWLAB_ACCEL=kvm or tcg forces the guests' accelerator.
#
# Needs a POSIX shell, sed, awk, mktemp and setsid (busybox has them all) and root. The plans
# were rendered ahead (plans/LAYOUT/nCPUS[-hzHZ]/K.sh) with @BWLAB_...@ placeholders for what
# only this machine knows: its cgroup roots, the run's directory and where the programs are.
set -u
B=$(cd "$(dirname "$0")" && pwd) || exit 1
OUT=${1:-$B/out-$(uname -n)-$(date +%Y%m%d-%H%M%S)}
D=""
QPID="" WPID=""
die() {
  echo "bwlab bundle: $*" >&2
  stop_guest
  [ -n "$D" ] && rm -rf "$D"
  exit 1
}
# the running guest's QEMU and its watchdog, if any
stop_guest() {
  [ -n "$WPID" ] && kill "$WPID" 2> /dev/null
  [ -n "$QPID" ] && kill -KILL "$QPID" 2> /dev/null
  [ -n "$QPID" ] && wait "$QPID" 2> /dev/null
  QPID="" WPID=""
}
ONLY=${BWLAB_ONLY:-all}
case "$ONLY" in
all | host | guests) ;;
*) die "BWLAB_ONLY=$ONLY: expected host or guests (unset: both)" ;;
esac
HOST=1 GUESTS=0
[ -f "$B/guest/list" ] && GUESTS=1
[ "$ONLY" = host ] && GUESTS=0
[ "$ONLY" = guests ] && HOST=0
if [ "$ONLY" = guests ] && [ ! -f "$B/guest/list" ]; then
  die "BWLAB_ONLY=guests: this bundle carries no guests (bwlab bundle --kernel KEY)"
fi
for tool in sed awk mktemp setsid; do
  command -v $tool > /dev/null || die "this machine has no $tool (busybox has every tool a bundle needs)"
done
mkdir -p "$OUT" || die "cannot make $OUT"
OUT=$(cd "$OUT" && pwd)
sh "$B/probe.sh" > "$OUT/probe.txt" 2> "$OUT/probe.err" || die "the probe failed: $(tail -n 1 "$OUT/probe.err")"
fact() { sed -n "s/^$1=//p" "$OUT/probe.txt" | head -n 1; }
# the mount point of the v1 hierarchy that has controller $1 (the probe's v1mount lines)
v1() {
  sed -n 's/^v1mount=//p' "$OUT/probe.txt" |
    awk -v c="$1" '{ n = split($2, o, ","); for (i = 1; i <= n; i++) if (o[i] == c) { print $1; exit } }'
}
D=$(fact dir)
case "$D" in
/tmp/bwlab-?*) ;;
*) D="" && die "cannot make a directory in /tmp (mktemp -d)" ;;
esac
RUN=${D#/tmp/bwlab-}
[ "$(fact euid)" = 0 ] || die "run me as root (uid $(fact euid)): I make cgroups"
N=$(fact ncpu)
HZ=${BWLAB_HZ:-$(fact hz)}
CPU="" ACCT="" CPUSET=""
V2=$(fact v2)
if [ $HOST = 0 ]; then
  L=none
elif [ -n "$V2" ]; then
  L=v2 CPU=$V2
else
  CPU=$(v1 cpu) ACCT=$(v1 cpuacct) CPUSET=$(v1 cpuset)
  [ -n "$CPU" ] || die "no cgroup CPU bandwidth control here (no cpu controller in cgroup v2 nor a v1 cpu hierarchy)"
  [ -n "$ACCT" ] || die "cgroup v1 without cpuacct here: a group's usage cannot be measured"
  if [ "$ACCT" = "$CPU" ]; then L=v1; else L=v1-acct; fi
  if [ -e "$B/needs-cpuset" ] && [ -z "$CPUSET" ]; then
    die "a case asks for cpus but this machine has no v1 cpuset hierarchy"
  fi
fi
if [ $HOST = 1 ]; then
  mkdir "$CPU/bwlab-$RUN-probe" 2> /dev/null && rmdir "$CPU/bwlab-$RUN-probe" ||
    die "cannot make a group in $CPU (a read-only cgroupfs, or not this machine's own cgroups?)"
fi
P=$B/plans/$L/n$N-hz$HZ
[ -d "$P" ] || P=$B/plans/$L/n$N
if [ $HOST = 1 ] && [ ! -d "$P" ]; then
  ls -d "$B/plans/$L/n$N-hz"* > /dev/null 2>&1 &&
    die "this kernel's HZ (${HZ:-unknown}) is not one the bundle was made for; say it: BWLAB_HZ=250 sh run.sh"
  made=$(ls "$B/plans/$L" | sed -n 's/^n\([0-9]*\).*/\1/p' | sort -n -u | tr '\n' ' ')
  die "this bundle was made for ${made}CPUs; this machine has $N: make one with bwlab bundle --ncpu $N"
fi
fill() {
  sed -e "s|@BWLAB_CPU@|$CPU|g" -e "s|@BWLAB_ACCT@|$ACCT|g" -e "s|@BWLAB_CPUSET@|$CPUSET|g" \
    -e "s|@BWLAB_RUN@|$RUN|g" -e "s|@BWLAB_BIN@|$B/bin|g" "$1"
}
V=${BWLAB_VCPUS:-$N}
if [ $GUESTS = 1 ] && [ ! -d "$B/guest/plans/n$V" ]; then
  made=$(ls "$B/guest/plans" | sed -n 's/^n//p' | sort -n | tr '\n' ' ')
  die "the guests were made for ${made}vCPUs, not $V: BWLAB_VCPUS=N sh run.sh, or bwlab bundle --vcpus $V"
fi
if [ $HOST = 1 ]; then
  fill "$B/plans/$L/cleanup.sh" > "$D/cleanup.sh"
else
  printf 'rm -rf %s\necho BWLAB-CLEAN\n' "$D" > "$D/cleanup.sh"
fi
cleanup() {
  stop_guest
  sh "$D/cleanup.sh" > "$OUT/cleanup.txt" 2>&1
}
trap 'trap "" INT TERM HUP; cleanup; echo "bwlab bundle: interrupted; its groups, processes and $D removed" >&2; exit 130' \
  INT TERM HUP
{
  echo "host=$HOST"
  echo "layout=$L"
  echo "hz=$HZ"
  echo "plans=${P#"$B"/}"
  echo "start=$(cat /proc/uptime)"
} > "$OUT/run.txt"
if [ $HOST = 1 ] && [ $L = v2 ]; then
  ctl=+cpu
  [ -e "$B/needs-cpuset" ] && ctl="+cpu +cpuset"
  echo "$ctl" > "$CPU/cgroup.subtree_control" || die "cannot enable $ctl in $CPU"
fi
count=$(ls "$P" 2> /dev/null | wc -l)
[ $HOST = 1 ] && for f in "$P"/*.sh; do
  k=$(basename "$f" .sh)
  fill "$f" > "$D/plan-$k.sh"
  echo "bwlab bundle: scenario $((k + 1)) of $count ($(sed -n "$((k + 1))p" "$B/names")) ..." >&2
  # a session of its own: cleanup.sh kills the plan's whole process group by the pid it wrote
  setsid sh -c 'echo $$ > "$1/pid"; exec 3> "$2" > "$3" 2>&1; . "$1/plan-$4.sh"; echo BWLAB-DONE >&3' \
    sh "$D" "$OUT/records-$k.txt" "$OUT/plan-$k.log" "$k" &
  wait $!
done
[ $GUESTS = 1 ] && . "$B/guest/run-guests.sh"
echo "end=$(cat /proc/uptime)" >> "$OUT/run.txt"
trap - INT TERM HUP
cleanup
cp "$B/bundle.json" "$OUT/" && cp -R "$B/scenarios" "$OUT/"
if grep -q BWLAB-LEFT "$OUT/cleanup.txt"; then
  die "left behind: $(cat "$OUT/cleanup.txt")"
fi
echo "bwlab bundle: done; the records are in $OUT (bwlab ingest $OUT)" >&2
