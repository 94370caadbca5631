#!/usr/bin/env bash
# Set up, then run the main job: bwlab reproduce (arguments are passed through).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/bwlab reproduce "$@"
