#!/bin/sh
# Run in a host-userland guest (bwlab guest exec) by test_hostroot_real.py: a real container on
# real cgroup v2. Podman (runc, cgroupfs manager, its own storage) runs an image imported from a
# busybox rootfs (no registry) with --cpus=1.5 and three busy loops (4 vCPUs: doctor has one of
# its own); top and doctor find it. One line "NAME value" per result.
set -eu
W=$(mktemp -d)
mkdir -p $W/rootfs/bin
cp "$(command -v busybox)" $W/rootfs/bin/
for a in sh yes sleep; do ln -s busybox $W/rootfs/bin/$a; done
tar -C $W/rootfs -cf $W/rootfs.tar .
P="podman --root $W/storage --runroot $W/run --storage-driver vfs --cgroup-manager cgroupfs --runtime runc"
$P import $W/rootfs.tar bwlab-busybox > /dev/null 2>&1
cid=$($P run -d --network=none --cpus=1.5 --name bwlab-v2 bwlab-busybox sh -c 'yes > /dev/null & yes > /dev/null & yes > /dev/null & sleep 600')
echo "cid $cid"
echo "cgroup $(cat /proc/$($P inspect -f '{{.State.Pid}}' bwlab-v2)/cgroup)"
sleep 1
echo "top $(COLUMNS=400 .venv/bin/bwlab top --iterations 1 --interval 1 | grep -F "$cid" | tr -s ' ')"
echo "doctor $(.venv/bin/bwlab doctor "$(echo "$cid" | cut -c1-12)" --seconds 3 --json - --no-predict |
  .venv/bin/python -c 'import json, sys; d = json.load(sys.stdin); print(json.dumps({"group": d["group"], "identity": d["identity"], "limit": d["limit"], "threads": d["facts"]["threads"], "verdict": d["diagnosis"]["verdict"], "throttled": d["throttled"], "at_quota": d["at_quota"], "commands": d["diagnosis"]["commands"]}))')"
$P rm -f -t 0 bwlab-v2 > /dev/null
echo "left $(find /sys/fs/cgroup -name "libpod-*" | wc -l)"
# conmon's exit command (podman container cleanup) may still be writing in the storage after rm
# returns: wait for every process that names this directory (at most 30 s), then remove it
i=0
while pgrep -f "$W/" > /dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
rm -rf "$W"
