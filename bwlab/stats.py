"""Summary statistics for repeated measurements and latency samples."""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence


def summarize(values: Sequence[float]) -> dict[str, float | int | None]:
    """n, mean, min, max and sample stdev (None for fewer than two values)."""
    vals = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if not vals:
        return {"n": 0, "mean": None, "min": None, "max": None, "stdev": None}
    return {
        "n": len(vals),
        "mean": statistics.fmean(vals),
        "min": min(vals),
        "max": max(vals),
        "stdev": statistics.stdev(vals) if len(vals) > 1 else None,
    }


def percentile(samples: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of unsorted samples."""
    if not samples:
        raise ValueError("percentile of no samples")
    if not 0 <= p <= 100:
        raise ValueError(f"percentile {p} outside 0..100")
    ordered = sorted(samples)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return float(ordered[min(rank, len(ordered)) - 1])


def histogram(samples: Sequence[float], edges: Sequence[float]) -> list[int]:
    """Counts per [edges[i], edges[i+1]) bucket; the last bucket also holds values >= its end."""
    if len(edges) < 2 or any(b <= a for a, b in itertools.pairwise(edges)):
        raise ValueError("histogram edges must be at least two increasing values")
    counts = [0] * (len(edges) - 1)
    for s in samples:
        if s < edges[0]:
            continue
        idx = len(counts) - 1
        for i in range(len(counts)):
            if s < edges[i + 1]:
                idx = i
                break
        counts[idx] += 1
    return counts
