#!/usr/bin/env bash
# The real runtime bwlab-nri's tests drive (tests/test_nri_real.py): containerd with its CRI and
# NRI plugins, its runc shim, ctr, and cri-tools' crictl, built from the Go module proxy into
# CACHE/runtime/containerd-V-crictl-V (Debian's containerd 1.6 predates NRI). ~3 min once, then
# nothing. The build tags leave out the snapshotters that need cgo libraries.
set -euo pipefail
CONTAINERD=v2.4.2
CRICTL=v1.37.0
cache=${1:?usage: install-runtime.sh CACHE}
dest="$cache/runtime/containerd-$CONTAINERD-crictl-$CRICTL"
if [ -x "$dest/crictl" ] && [ -x "$dest/containerd" ] && [ -x "$dest/containerd-shim-runc-v2" ] && [ -x "$dest/ctr" ]; then
  exit 0
fi
GO=$(command -v go || echo /usr/local/go/bin/go)
mkdir -p "$dest.tmp"
echo "setup: building containerd $CONTAINERD and crictl $CRICTL for bwlab-nri's tests" >&2
GOBIN="$dest.tmp" "$GO" install -tags "no_btrfs no_devmapper no_zfs" \
  "github.com/containerd/containerd/v2/cmd/containerd@$CONTAINERD" \
  "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$CONTAINERD" \
  "github.com/containerd/containerd/v2/cmd/ctr@$CONTAINERD" >&2
GOBIN="$dest.tmp" "$GO" install "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL" >&2
rm -rf "$dest" && mv "$dest.tmp" "$dest"
