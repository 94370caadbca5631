#!/usr/bin/env bash
# Set up, then run every check: ruff, mypy, the workloads' -Werror build, and pytest
# (unit tests plus real host-cgroup and QEMU-guest integration tests).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check bwlab tests
.venv/bin/ruff format --check bwlab tests
.venv/bin/mypy
exec .venv/bin/pytest -v -ra "$@"
