#!/usr/bin/env bash
# Build bwlab's images here, with no registry: a Debian base made by debootstrap, imported into
# podman. Two images, as the DaemonSets name them:
#   bwlab-exporter:0.1.0  Debian bookworm (minbase) + python3 + bwlab in /opt/bwlab: the exporter
#                         (deploy/kubernetes/daemonset.yaml) and the tune agent (bwlab-agent.yaml)
#   bwlab-nri:0.1.0       the plugin, a static Go binary, alone (bwlab-nri.yaml)
# Usage: deploy/build-images.sh CACHE [PODMAN_ARGS...]   (root; from the repository root, after
# scripts/setup.sh). The base (~1 min once) is kept in CACHE/images/; PODMAN_ARGS (e.g.
# --root DIR --runroot DIR) say which storage gets the images. deploy/Dockerfile and
# deploy/nri.Dockerfile build the same images where a registry and a builder are at hand.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${1:?usage: deploy/build-images.sh CACHE [PODMAN_ARGS...]}
shift
podman=(podman "$@")
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$cache/cargo-target}"  # setup.sh's: the simulator built once
GO=$(command -v go || echo /usr/local/go/bin/go)
base="$cache/images/bookworm-python3"
if [ ! -x "$base/usr/bin/python3" ]; then
  rm -rf "$base.tmp" && mkdir -p "$(dirname "$base")"
  echo "images: debootstrap bookworm (minbase, python3) into $base" >&2
  debootstrap --variant=minbase --include=python3,python3-venv bookworm "$base.tmp" >&2
  rm -rf "$base.tmp/var/cache/apt/archives"/*.deb "$base.tmp/var/lib/apt/lists"/*
  rm -rf "$base" && mv "$base.tmp" "$base"
fi
work=$(mktemp -d /tmp/bwlab-images-XXXXXX)
cleanup() {
  for m in proc dev; do umount -l "$work/rootfs/$m" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

# bwlab-exporter: bwlab's wheel (the simulator built by maturin from the cached cargo target)
# and its runtime dependencies but matplotlib (only doctor --png draws), in a venv of the base
# (fetched here, with this machine's pip and its certificates; installed in the image offline)
.venv/bin/pip wheel -q --no-deps -w "$work/rootfs-wheels" . >&2
.venv/bin/pip download -q --only-binary=:all: -d "$work/rootfs-wheels" "rich>=13" "prometheus-client>=0.17" >&2
cp -a "$base" "$work/rootfs"
cp -r "$work/rootfs-wheels" "$work/rootfs/tmp/wheels"
mount --bind /dev "$work/rootfs/dev" && mount -t proc proc "$work/rootfs/proc"
chroot "$work/rootfs" python3 -m venv /opt/bwlab
chroot "$work/rootfs" sh -c '/opt/bwlab/bin/pip install -q --no-index --find-links /tmp/wheels /tmp/wheels/bwlab-*.whl rich prometheus-client --no-deps && /opt/bwlab/bin/pip install -q --no-index --find-links /tmp/wheels rich prometheus-client' >&2
umount "$work/rootfs/proc" "$work/rootfs/dev"
rm -rf "$work/rootfs/tmp/wheels"
tar -C "$work/rootfs" -c . | "${podman[@]}" import \
  --change 'ENTRYPOINT ["/opt/bwlab/bin/bwlab"]' --change 'CMD ["exporter", "--listen", ":9860"]' \
  --change 'USER 65534:65534' --change 'EXPOSE 9860' - bwlab-exporter:0.1.0 >/dev/null

# bwlab-nri: the plugin alone
mkdir -p "$work/nri"
(cd nri && CGO_ENABLED=0 "$GO" build -trimpath -ldflags="-s -w" -o "$work/nri/bwlab-nri" .)
tar -C "$work/nri" -c bwlab-nri | "${podman[@]}" import --change 'ENTRYPOINT ["/bwlab-nri"]' - bwlab-nri:0.1.0 >/dev/null
echo "images: bwlab-exporter:0.1.0 bwlab-nri:0.1.0" >&2
