#!/bin/sh
# Run in a host-userland guest (bwlab guest exec) by test_hostroot_real.py: doctor --ebpf with
# the kernel's state at each throttle (kprobes; the layout the lab passes in
# BWLAB_KERNEL_LAYOUT). One busy loop under half a CPU (throttled every period, at quota).
# One line "NAME value" per result.
set -eu
G=/sys/fs/cgroup/bwlab-kprobes
W=$(mktemp -d)
cleanup() { kill "$loop" 2> /dev/null || :; wait 2> /dev/null || :; rmdir "$G" 2> /dev/null || :; rm -rf "$W"; }
mkdir "$G"
trap cleanup EXIT
echo "50000 100000" > "$G/cpu.max"
sh -c "echo \$\$ > $G/cgroup.procs; exec sh -c 'while :; do :; done'" &
loop=$!
echo "layout ${BWLAB_KERNEL_LAYOUT:-none}"
.venv/bin/bwlab doctor "$G" --seconds 5 --ebpf --no-predict --json "$W/doc.json" > "$W/out" 2> "$W/err" || :
echo "said $(grep -F "kernel's state" "$W/out" | tr -s ' ')"
echo "err $(head -c 300 "$W/err" | tr '\n' ' ')"
echo "doc $(.venv/bin/python -c 'import json, sys; d = json.load(open(sys.argv[1])); print(json.dumps({"kernel_state": d.get("kernel_state"), "per_period": [[p["start"], p["end"], p["throttled"], p["verdict"]] for p in d["per_period"]], "throttled": d["throttled"], "periods": d["periods"]}))' "$W/doc.json")"
# a layout whose quota offset is off by a field: doctor leaves the state out, saying why
.venv/bin/python -c 'import json, sys; d = json.load(open(sys.argv[1])); d["fields"]["cfs_b_quota"] += 8; json.dump(d, open(sys.argv[2], "w"))' "$BWLAB_KERNEL_LAYOUT" "$W/wrong.json"
echo "wrong $(BWLAB_KERNEL_LAYOUT=$W/wrong.json .venv/bin/bwlab doctor "$G" --seconds 2 --ebpf --no-predict --json - 2> /dev/null | .venv/bin/python -c 'import json, sys; print(json.dumps(json.load(sys.stdin).get("kernel_state")))')"
