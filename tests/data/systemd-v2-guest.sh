#!/bin/sh
# Run by test_hostroot_real.py with `bwlab guest exec --init systemd`: this machine's systemd is
# PID 1 of the guest, on the guest kernel's real cgroup v2, and makes the groups itself. A
# service with CPUQuota=150% and two busy threads; a slice with CPUQuota=50% and a service in
# it with no limit of its own; top and doctor name the units, doctor by a unit's name. One line
# "NAME value" per result.
set -eu
B=.venv/bin/bwlab
pick() { .venv/bin/python -c 'import json, sys; d = json.load(sys.stdin); print(json.dumps({"asked": d.get("asked"), "group": d["group"], "identity": d["identity"], "limit": d["limit"], "limited_by": d["limited_by"], "threads": d["facts"]["threads"], "verdict": d["diagnosis"]["verdict"], "throttled": d["throttled"], "commands": d["diagnosis"]["commands"], "alternatives": d["diagnosis"]["alternatives"]}))'; }
echo "pid1 $(cat /proc/1/comm)"
systemd-run --quiet --unit bwlab-over -p CPUQuota=150% sysbench cpu --threads=2 --time=0 run
echo "over_cpu_max $(cat /sys/fs/cgroup/system.slice/bwlab-over.service/cpu.max)"
sleep 1
echo "top $(COLUMNS=400 $B top --iterations 1 --interval 1 | grep -F bwlab-over | tr -s ' ')"
echo "over $($B doctor bwlab-over.service --seconds 3 --json - --no-predict | pick)"
systemctl stop bwlab-over
# the slice is made with its service; its limit set after, at run time (set-property)
systemd-run --quiet --unit bwlab-inslice --slice bwlab-lim sysbench cpu --threads=1 --time=0 run
systemctl set-property --runtime bwlab-lim.slice CPUQuota=50%
echo "slice_cpu_max $(cat /sys/fs/cgroup/bwlab.slice/bwlab-lim.slice/cpu.max 2> /dev/null ||
  cat /sys/fs/cgroup/bwlab-lim.slice/cpu.max)"
echo "inslice $($B doctor bwlab-inslice.service --seconds 3 --json - --no-predict 2> /tmp/inslice.err | pick)"
echo "inslice_err $(head -c 300 /tmp/inslice.err | tr '\n' ' ')"
systemctl stop bwlab-inslice
rc=0
$B doctor bwlab-nope.service --seconds 1 > /dev/null 2> /tmp/nope.err || rc=$?
echo "not_found $rc $(head -c 300 /tmp/nope.err)"
# demand == quota at a 10 ms period: what doctor says to do for a unit, and tune by its name
n=$(nproc)
systemd-run --quiet --unit bwlab-equal -p CPUQuota=$((n * 100))% -p CPUQuotaPeriodSec=10ms \
  sysbench cpu --threads="$n" --time=0 run
E=/sys/fs/cgroup/system.slice/bwlab-equal.service
echo "equal_cpu_max $(cat $E/cpu.max)"
sleep 1
echo "equal $($B doctor bwlab-equal.service --seconds 4 --json - --no-predict | pick)"
# (what the burst does to its throttling: docs/live.md, measured apart; not in this test's time)
$B tune bwlab-equal.service --burst auto > /dev/null 2> /tmp/tune.err
echo "equal_burst $(cat $E/cpu.max.burst)"
# the floor the burst sets, and who it binds: systemd's next CPUQuota= below it is refused
note=$(tr '\n' ' ' < /tmp/tune.err)
echo "equal_floor $(echo "$note" | grep -o 'refuses a quota below [0-9]* us') $(echo "$note" | grep -o 'from systemd (CPUQuota=)')"
systemctl stop bwlab-equal
# the command's stderr and exit status come back from systemd's service as from bwlab's init
echo "to stderr" >&2
exit 3
