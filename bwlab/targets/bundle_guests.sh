# Sourced by a bundle's run.sh (as guest/run-guests.sh) when the bundle carries guests
# (bundle_guest.py): boots each guest in guest/list with $V vCPUs under the carried QEMU, one
# after the other, and writes OUT/guest-G.{txt,records.txt,console.txt,qemu.txt}. Uses run.sh's
# B, OUT, D, V, V2, QPID, WPID, die() and v1(); QEMU's command line is the lab's (targets/qemu.py,
# qemu_command()) with no display, network card or option ROMs beyond those carried.
G=$B/guest
Q=$G/qemu
LOADER=$(ls "$Q"/lib/ld-linux* 2> /dev/null | head -n 1)
[ -n "$LOADER" ] || die "the bundle's QEMU has no dynamic loader in $Q/lib"
ACCEL=${BWLAB_ACCEL:-auto}
case "$ACCEL" in
auto | kvm | tcg) ;;
*) die "BWLAB_ACCEL=$ACCEL: expected kvm or tcg (unset: KVM if /dev/kvm opens, else TCG)" ;;
esac
# Under TCG the guest's timers are raised by QEMU's main loop, punctual only at SCHED_FIFO
# (targets/qemu.py, prioritize_timers()); reset-on-fork keeps the vCPU threads it makes
# normal. Tried first on a stand-in, because the kernel command line depends on it; why it
# failed is recorded.
# guest/fifo (workloads/fifo.c) does what chrt -R -f -p 1 does, on machines without util-linux.
# EPERM as root most often means a group without RT runtime: with CONFIG_RT_GROUP_SCHED every
# cgroup but the root starts with cpu.rt_runtime_us = 0, and cgroup v2 has no file to give it
# any (seen on a borrowed 16-core machine, whose processes run in /process_api/<id>). QEMU then
# runs from the root group of the hierarchy holding the cpu controller (RTROOT), where the
# system's RT runtime applies; it is ours and ends with the run, so nothing is left there.
FIFO=0 RTROOT=""
sleep 5 &
NOFIFO=$("$G/fifo" $! 2>&1) && FIFO=1
if [ $FIFO = 0 ]; then
  root=${V2:-$(v1 cpu)}  # run.sh's probe: the v2 mount with the cpu controller, else the v1 cpu hierarchy
  if [ -n "$root" ] && echo $! > "$root/cgroup.procs" 2> /dev/null; then
    if again=$("$G/fifo" $! 2>&1); then
      FIFO=1 RTROOT=$root
    else
      NOFIFO="$NOFIFO; from the root group $root too: $again"
    fi
  fi
fi
kill $! 2> /dev/null
wait $! 2> /dev/null
# Under --accel auto a KVM guest must say hello within this many seconds, else TCG (as the
# lab's probe, qemu.PROBE_TIMEOUT_S): on a 16-core Firecracker VM with /dev/kvm, KVM guests
# stopped after SeaBIOS's "Booting from ROM..." with a vCPU spinning in the host kernel.
KVM_HELLO_S=15
# boot_guest G KEY LIMIT TRACED ACCEL: one boot; sets STATUS (ok, failed, timeout)
boot_guest() {
  append="console=ttyS0 panic=-1 loglevel=7"
  [ "$4" = 1 ] && append="$append $(cat "$G/traced-append")"
  if [ "$5" = kvm ]; then
    set -- "$1" "$2" "$3" "$4" "$5" -accel kvm -cpu host
    TIMER="KVM (the guest's timers are the host kernel's)"
  else
    set -- "$1" "$2" "$3" "$4" "$5" -accel tcg,thread=multi -cpu max
    [ $FIFO = 1 ] && append="$append tsc=reliable"
    TIMER="normal ($NOFIFO: timers may arrive up to a host tick late)"
  fi
  g=$1 key=$2 limit=$3 acc=$5
  shift 5
  rm -f "$OUT/guest-$g.records.txt" "$OUT/guest-$g.console.txt"
  t0=$(cut -d ' ' -f 1 /proc/uptime)
  QEMU_MODULE_DIR=$Q/modules "$LOADER" --library-path "$Q/lib" "$Q/bin/qemu-system-x86_64" -L "$Q/share" \
    "$@" -smp "$V" -m 1G -nographic -no-reboot -monitor none -vga none -nic none \
    -kernel "$G/kernels/$key/bzImage" -initrd "$D/initrd-$g.cpio" -append "$append" \
    -serial "file:$OUT/guest-$g.console.txt" -serial "file:$OUT/guest-$g.records.txt" \
    < /dev/null > "$OUT/guest-$g.qemu.txt" 2>&1 &
  QPID=$!
  if [ "$acc" = tcg ] && [ $FIFO = 1 ]; then
    [ -z "$RTROOT" ] || echo $QPID > "$RTROOT/cgroup.procs" 2> /dev/null
    "$G/fifo" $QPID > /dev/null 2>&1 && TIMER="SCHED_FIFO 1"
  fi
  # a watchdog that leaves no sleep behind when it is stopped
  (
    sleep "$limit" &
    trap 'kill $! 2> /dev/null; exit 0' TERM
    wait $!
    kill -KILL $QPID 2> /dev/null
  ) &
  WPID=$!
  if [ "$ACCEL" = auto ] && [ "$acc" = kvm ]; then  # a KVM guest that never reaches /init: stop it
    tries=$((KVM_HELLO_S * 5))
    until grep -q BWLAB-HELLO "$OUT/guest-$g.records.txt" 2> /dev/null || ! kill -0 $QPID 2> /dev/null; do
      tries=$((tries - 1))
      if [ $tries -le 0 ]; then
        echo "no hello within $KVM_HELLO_S s" >> "$OUT/guest-$g.qemu.txt"
        kill -KILL $QPID 2> /dev/null
        break
      fi
      sleep 0.2
    done
  fi
  wait $QPID
  rc=$?
  kill $WPID 2> /dev/null
  wait $WPID 2> /dev/null
  QPID="" WPID=""
  t1=$(cut -d ' ' -f 1 /proc/uptime)
  ELAPSED=$(echo "$t0 $t1" | awk '{ printf "%.1f", $2 - $1 }')
  if grep -q BWLAB-DONE "$OUT/guest-$g.records.txt" 2> /dev/null; then
    STATUS=ok
  elif [ $rc = 137 ]; then
    STATUS=timeout
  else
    STATUS=failed
  fi
  return 0
}
n=$(wc -l < "$G/list")
KVMBAD=""
while read -r g key hz limit traced label; do
  cat "$G/initramfs.cpio" "$G/plans/n$V/$g.cpio" > "$D/initrd-$g.cpio" || die "cannot write $D/initrd-$g.cpio"
  ACC=$ACCEL WHY="asked for (BWLAB_ACCEL=$ACCEL)"
  if [ -n "$KVMBAD" ]; then
    ACC=tcg WHY=$KVMBAD
  elif [ "$ACC" = auto ]; then
    if [ -c /dev/kvm ] && [ -r /dev/kvm ] && [ -w /dev/kvm ]; then
      ACC=kvm WHY="/dev/kvm opens"
    else
      ACC=tcg WHY="no usable /dev/kvm"
    fi
  fi
  echo "bwlab bundle: guest $((g + 1)) of $n ($label, kernel $key, HZ=$hz, $V vCPUs, $ACC) ..." >&2
  boot_guest "$g" "$key" "$limit" "$traced" "$ACC"
  if [ "$ACCEL" = auto ] && [ "$ACC" = kvm ] && ! grep -q BWLAB-HELLO "$OUT/guest-$g.records.txt" 2> /dev/null; then
    WHY="a KVM guest did not reach /init ($(tail -n 1 "$OUT/guest-$g.qemu.txt")); TCG instead"
    ACC=tcg KVMBAD=$WHY
    echo "bwlab bundle: $WHY" >&2
    boot_guest "$g" "$key" "$limit" "$traced" tcg
  fi
  rm -f "$D/initrd-$g.cpio"
  {
    echo "vcpus=$V"
    echo "hz=$hz"
    echo "accel=$ACC"
    echo "accel_reason=$WHY"
    echo "timer_thread=$TIMER"
    [ -z "$RTROOT" ] || echo "qemu_cgroup=the root group of $RTROOT (its own gave SCHED_FIFO no RT runtime)"
    echo "status=$STATUS"
    echo "elapsed_s=$ELAPSED"
  } > "$OUT/guest-$g.txt"
  [ $STATUS = ok ] || echo "bwlab bundle: guest $label: $STATUS (see $OUT/guest-$g.console.txt)" >&2
done < "$G/list"
