#!/usr/bin/env bash
# Set up, then run every check: ruff, mypy, the simulator's rustfmt, clippy and cargo tests,
# and pytest: the unit tests in parallel, then the real host-cgroup, QEMU-guest and simulator
# tests one at a time. Arguments: set up, then a single pytest run of them (no linters).
# Always as CI runs it (CI=true): a missing prerequisite or a run without root fails the run at
# its start, naming what to install, instead of skipping the real tests (tests/prereqs.py).
# A bare `pytest` skips them, saying why, for a developer's machine.
set -euo pipefail
cd "$(dirname "$0")/.."
export CI=true
# Rust's and mypy's build caches live in bwlab's cache (bwlab/paths.py), beside the kernels, so
# that a fresh clone on a warm machine does not rebuild the simulator's dependencies.
cache="${BWLAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bwlab}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$cache/cargo-target}" MYPY_CACHE_DIR="${MYPY_CACHE_DIR:-$cache/mypy}"
bash scripts/setup.sh --tests
# --durations: the slowest tests in CI's log, where its 90-minute budget goes.
if [ $# -gt 0 ]; then exec .venv/bin/pytest -v -ra --durations=30 "$@"; fi
.venv/bin/ruff check bwlab tests benchmarks scripts
.venv/bin/ruff format --check bwlab tests benchmarks scripts
.venv/bin/mypy
if ! command -v cargo >/dev/null 2>&1; then export PATH="$HOME/.cargo/bin:$PATH"; fi
# The dev profile: the release profile's LTO (for the simulator's speed in Python) costs ~30 s
# a compile and changes no lint and no test's result.
(cd sim && cargo fmt --check && cargo clippy --all-targets -q -- -D warnings \
  && cargo clippy --features python -q -- -D warnings && cargo test -q)
# bwlab-nri (nri/), the NRI plugin: gofmt, go vet and its unit tests (its real tests are pytest's)
GO=$(command -v go || echo /usr/local/go/bin/go)
(cd nri && unformatted=$("$(dirname "$GO")/gofmt" -l .) && { [ -z "$unformatted" ] || { echo "gofmt: $unformatted" >&2; exit 1; }; } \
  && "$GO" vet ./... && "$GO" test ./...)
# The unit tests in parallel, one worker per CPU; then the real tests (marker `real`: cgroups,
# QEMU, tracing, timing windows, see tests/conftest.py) one at a time on a quiet machine.
# worksteal: an idle worker takes tests queued on the other (with the default, the host-userland
# guests, a minute or two each, queued on one worker one after another while the other idled:
# 553 s against 216 s before them, the CI of 64f2eaf)
.venv/bin/pytest -v -ra --durations=10 -n "$(nproc)" --dist worksteal -m "not real"
# The timing tests were measured on a quiet machine: wait (60 s at most, logged) until the
# parallel phase's leftovers are done
.venv/bin/python scripts/quiet_gate.py 60
exec .venv/bin/pytest -v -ra --durations=0 --durations-min=3 -m real
