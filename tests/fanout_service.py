"""The fanout service (workloads/fanout) as the thread-count what-if's real test and its
benchmark (benchmarks/threads_whatif.py) run it: built with the machine's Go, and its work per
part measured once for every run that is compared with another."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent / "workloads" / "fanout"


def build(go: str, out: Path) -> subprocess.CompletedProcess[str]:
    """`go build` of the service into `out`, its output captured."""
    env = {**os.environ, "GOTOOLCHAIN": "local"}  # go.mod's version or newer: nothing fetched
    return subprocess.run([go, "build", "-o", str(out), "."], cwd=SOURCE, capture_output=True, text=True, env=env,
                          timeout=600)  # fmt: skip


def calibrate(fanout: Path, load: list[str]) -> int:
    """Spin rounds per part (-rounds) for `load`'s -work_us, the most of five processes' own
    measure: every run then does the same work per request (measured per process it varied
    by 15 %: 9,866 to 11,575 rounds for 3.5 ms here)."""
    runs = [subprocess.run([str(fanout), *load, "-seconds", "0.001"], capture_output=True, text=True, check=True)
            for _ in range(5)]  # fmt: skip
    return max(int(json.loads(r.stdout)["rounds_per_part"]) for r in runs)
