"""What bwlab-nri adds to a container's creation: `crictl create` + `crictl start` of a container
with a CPU limit, timed with the plugin registered and without it, alternated (ABAB...) in
one containerd, one pod, so that drift of the machine falls on both alike.

    .venv/bin/python benchmarks/nri_latency.py [ROUNDS]     (root; default 30 rounds)

Prints one JSON document: each arm's median, p10, p90 in ms, and the median of the paired
differences (with - without) with a 95 % interval from the pairs' order statistics. On a quiet
machine: nothing else running.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
import nri_runtime  # noqa: E402
import prereqs  # noqa: E402


def quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def median_interval(diffs: list[float]) -> tuple[float, float]:
    """A distribution-free 95 % interval of the median: order statistics n/2 ± 0.98 sqrt(n)."""
    s, n = sorted(diffs), len(diffs)
    half = 0.98 * n**0.5
    return s[max(0, int(n / 2 - half))], s[min(n - 1, int(n / 2 + half))]


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    go = prereqs.which("go")
    bin_dir = prereqs.runtime_dir()
    if go is None or not (bin_dir / "containerd").is_file():
        print(
            "nri_latency: needs go and nri/install-runtime.sh's containerd (scripts/setup.sh --tests)", file=sys.stderr
        )
        return 1
    with tempfile.TemporaryDirectory(prefix="bwlab-nri-bench-") as tmp:
        plugin = Path(tmp) / "bwlab-nri"
        subprocess.run([go, "build", "-o", str(plugin), "."], cwd=ROOT / "nri", check=True)
        with nri_runtime.started(bin_dir, plugin) as rt:
            pod = rt.pod()
            times: dict[str, list[float]] = {"with": [], "without": []}
            for i in range(2 * rounds + 2):  # the first pair warms both up and is not counted
                arm = "with" if i % 2 == 0 else "without"
                if arm == "with":
                    rt.start_plugin()
                started = time.perf_counter()
                cid = rt.container(pod, f"c{i}", 50000)
                took = time.perf_counter() - started
                if arm == "with":
                    rt.stop_plugin()
                rt.crictl("rm", "-f", cid)
                if i >= 2:
                    times[arm].append(took * 1000)
    diffs = [a - b for a, b in zip(times["with"], times["without"], strict=True)]
    lo, hi = median_interval(diffs)
    doc = {arm: {"median_ms": round(statistics.median(xs), 1), "p10_ms": round(quantile(xs, 0.1), 1),
                 "p90_ms": round(quantile(xs, 0.9), 1), "n": len(xs)} for arm, xs in times.items()}  # fmt: skip
    doc["added_ms"] = {"median": round(statistics.median(diffs), 1), "ci95": [round(lo, 1), round(hi, 1)]}
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
