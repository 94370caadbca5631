#!/bin/sh
# PID 1 of a host-userland guest (bwlab/targets/hostroot.py). The kernel mounted the host's /
# read-only over virtio 9p as its root and runs this file from there with the host's /bin/sh.
#
# Stage 1 (no argument): a tmpfs-backed overlay over that root, so that every path is writable
# in the guest and nothing is ever written to the host; pivot into it and start stage 2.
# Stage 2 ("stage2"): the guest's own /proc, /sys, /dev, /run, debugfs, tracefs and cgroup2
# with every controller on for children (/tmp is the host's, written in the overlay); the exec
# share (the host's command, its working directory and environment; the guest's answers) at
# /run/bwlab-exec; loopback up, and eth0 as 10.0.2.15 where the share asks (--forward); the
# bandwidth policy's sched/features writes; then the command, stdin from /dev/null, its stdout
# and stderr through pipes into the share's files, which the host copies out as they grow
# (`exec`), or a login shell on the console (`shell`). Its exit status goes to the share, and
# the guest reboots, which ends QEMU (-no-reboot). What keeps the command from running is
# written to the share's `failed`, for the host to say.
# With the share's `systemd` (--init systemd: systemd's path), stage 2 hands PID 1 to it with
# a target of its own that starts one service, bwlab-exec.service, which runs stage 3 ("stage3"):
# the command as above. No other unit of the host's starts unless the command starts it.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
self=$(readlink -f "$0")
# the command (or the shell), its status to the share, and the end of the guest
run_command() {
  cut -d ' ' -f 1 /proc/uptime > $X/started
  status=0
  if [ -e $X/interactive ]; then
    # a shell with the console as its controlling terminal (job control, ^C)
    setsid -c -w /bin/sh -c ". $X/env; stty rows \${LINES:-24} cols \${COLUMNS:-80}; cd \"\$BWLAB_CWD\" 2> /dev/null;
      exec \${SHELL:-/bin/sh} -l" \
      < /dev/ttyS0 > /dev/ttyS0 2>&1 || status=$?
  else
    # the command writes to pipes, as under ssh without -t: no colours, no progress spinners
    mkfifo /run/bwlab-out /run/bwlab-err
    cat /run/bwlab-out > $X/stdout &
    out=$!
    cat /run/bwlab-err > $X/stderr &
    err=$!
    /bin/sh -c ". $X/env; cd \"\$BWLAB_CWD\" || exit 126; . $X/command" < /dev/null > /run/bwlab-out \
      2> /run/bwlab-err || status=$?
    # what the command left running may hold the pipes open: its output gets 2 s more
    (sleep 2 && kill $out $err 2> /dev/null) &
    wait $out $err
  fi
  echo $status > $X/status.tmp && mv $X/status.tmp $X/status
  sync
  exec /bin/busybox reboot -f
}
if [ "${1:-}" = stage3 ]; then
  X=/run/bwlab-exec
  run_command
fi
if [ "${1:-}" != stage2 ]; then
  mount -t tmpfs -o mode=0755 bwlab-rw /run || exec /bin/busybox reboot -f
  mkdir /run/upper /run/work /run/new
  mount -t overlay overlay -o lowerdir=/,upperdir=/run/upper,workdir=/run/work /run/new ||
    exec /bin/busybox reboot -f
  cd /run/new || exec /bin/busybox reboot -f
  mkdir -p .bwlab-oldroot
  pivot_root . .bwlab-oldroot || exec /bin/busybox reboot -f
  exec chroot . /bin/sh "$self" stage2
fi
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs -o mode=0755 run /run
X=/run/bwlab-exec
mkdir -p $X
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 bwlab-exec $X || exec /bin/busybox reboot -f
fail() {
  echo "$*" > $X/failed
  sync
  exec /bin/busybox reboot -f
}
mkdir -p /dev/pts /dev/shm
mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts || fail "cannot mount devpts"
mount -t tmpfs -o mode=1777 shm /dev/shm || fail "cannot mount /dev/shm"
umount -l /.bwlab-oldroot && rmdir /.bwlab-oldroot
mount -t debugfs debugfs /sys/kernel/debug || fail "cannot mount debugfs"
mount -t tracefs tracefs /sys/kernel/tracing 2> /dev/null
mount -t cgroup2 cgroup2 /sys/fs/cgroup || fail "cannot mount cgroup2"
for c in $(cat /sys/fs/cgroup/cgroup.controllers); do
  echo "+$c" > /sys/fs/cgroup/cgroup.subtree_control || fail "cannot enable the $c controller"
done
/bin/busybox hostname bwlab-guest
/bin/busybox ip link set lo up 2> /dev/null
# --forward's network card: QEMU's user network answers at 10.0.2.2 and forwards to 10.0.2.15
if [ -e $X/forward ]; then
  [ -e /sys/class/net/eth0 ] || fail "--forward: this kernel has no network card driver (CONFIG_VIRTIO_NET: lab.config)"
  /bin/busybox ip link set eth0 up && /bin/busybox ip addr add 10.0.2.15/24 dev eth0 &&
    /bin/busybox ip route add default via 10.0.2.2 || fail "cannot set up eth0 (10.0.2.15/24)"
fi
for f in $(cat $X/features 2> /dev/null); do
  echo "$f" > /sys/kernel/debug/sched/features || fail "cannot write $f to /sys/kernel/debug/sched/features"
done
if [ -e $X/systemd ]; then
  U=/run/systemd/system
  mkdir -p $U
  # masked: systemd-tmpfiles --boot would empty the host's /tmp in the guest (the command's
  # working directory may be there), walking all of it over 9p first (it took minutes); the
  # host's timers (apt, man-db, fstrim) and sysctl.d (for the host's kernel) are not the
  # guest's; an emergency or rescue shell would wait on a console nobody reads
  for unit in systemd-tmpfiles-setup.service systemd-tmpfiles-clean.timer timers.target \
    systemd-sysctl.service emergency.target emergency.service rescue.target rescue.service; do
    ln -s /dev/null $U/$unit
  done
  : > /etc/fstab # the host's filesystems are not the guest's (written in the overlay)
  printf '%s\n' "[Unit]" "Description=bwlab guest exec" "DefaultDependencies=no" \
    "Wants=basic.target bwlab-exec.service" > $U/bwlab-exec.target
  # the guest ends whatever becomes of the command's service: stage 3 reboots when the command
  # ends; a service that never starts (5 min) or ends otherwise reboots the guest too, saying so
  printf '%s\n' "[Unit]" "Description=bwlab guest exec: the command" "DefaultDependencies=no" \
    "After=basic.target" "JobTimeoutSec=300" "JobTimeoutAction=reboot-force" \
    "SuccessAction=reboot-force" "FailureAction=reboot-force" "[Service]" \
    "Type=exec" "ExecStart=/bin/sh $self stage3" "StandardInput=null" "StandardOutput=null" \
    "StandardError=null" \
    "ExecStopPost=/bin/sh -c '[ -e $X/status ] || echo systemd stopped the command before it ended > $X/failed'" \
    > $U/bwlab-exec.service
  exec "$(cat $X/systemd)" --unit=bwlab-exec.target --log-target=kmsg --log-level=warning --show-status=false
fi
run_command
