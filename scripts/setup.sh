#!/usr/bin/env bash
# Install what bwlab needs on a Debian machine (root or sudo) and the Python package in .venv.
# Idempotent: packages already present are not reinstalled.
#   setup.sh           what the main job (bwlab reproduce, the CLI) needs
#   setup.sh --tests   that and what only the tests use: sshd, podman, bpftrace, Prometheus,
#                      clang, a JRE, containerd and crictl (scripts/test.sh runs this one)
set -euo pipefail
cd "$(dirname "$0")/.."
tests=0
if [ $# -gt 1 ]; then
  echo "setup: one argument at most (usage: setup.sh [--tests])" >&2
  exit 2
fi
case "${1:-}" in
  "") ;;
  --tests) tests=1 ;;
  *) echo "setup: unknown argument '$1' (usage: setup.sh [--tests])" >&2; exit 2 ;;
esac

PACKAGES=(
  qemu-system-x86 busybox-static sysbench rt-tests linux-perf   # guest and workloads
  build-essential flex bison bc libelf-dev libssl-dev            # kernel build
  cpio patch xz-utils file python3-venv                          # initramfs, sources
  git perl                                                       # git am, checkpatch.pl
  openssh-client                                                 # the ssh:// target
)
TEST_PACKAGES=(
  openssh-server                                                 # the ssh:// target's tests
  podman runc                                                    # a real container for bwlab doctor/top tests
  bpftrace                                                       # bwlab doctor --ebpf and its tests
  prometheus                                                     # bwlab exporter tests: a real server, promtool
  debootstrap                                                    # deploy/build-images.sh: the images' base; trixie's pahole (BTF)
  clang-19 llvm-19 lld-19 zlib1g-dev                             # scx_bwlab (scx/): BPF, its static loader
)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

if [ "$tests" = 1 ]; then
  PACKAGES+=("${TEST_PACKAGES[@]}")
  # doctor's JVM pool test needs a JRE: Debian's where the machine has none (Go >= 1.25 for its
  # Go case is expected from the machine: /usr/local/go/bin; tests/prereqs.py checks both)
  if ! command -v java >/dev/null 2>&1; then PACKAGES+=(default-jre-headless); fi
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  $SUDO apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi

# bwlab-nri's real tests (tests/test_nri_real.py) drive containerd 2.x and crictl, built once
# from the Go module proxy into bwlab's cache (nri/install-runtime.sh): the tests' alone
if [ "$tests" = 1 ]; then
  bash nri/install-runtime.sh "${BWLAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bwlab}"
fi

# The simulator (sim/) is Rust, built into bwlab._sim by maturin during the pip install; its
# build directory is kept in bwlab's cache (bwlab/paths.py) for the next clone to reuse.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${BWLAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bwlab}/cargo-target}"
if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: the simulator needs a Rust toolchain (cargo); install it with rustup" >&2
  exit 1
fi

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "setup: bwlab needs Python >= 3.11 (found $("$PYTHON" --version 2>&1))" >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
# Reinstall only when pyproject.toml or the simulator's sources changed since the last install.
stale=$(find pyproject.toml sim/Cargo.toml sim/src -newer .venv/.bwlab-installed 2>/dev/null | head -1 || true)
if [ ! -f .venv/.bwlab-installed ] || [ -n "$stale" ] || ! ls bwlab/_sim*.so >/dev/null 2>&1; then
  .venv/bin/python -m pip install -q -e '.[dev]' >&2
  touch .venv/.bwlab-installed
fi
