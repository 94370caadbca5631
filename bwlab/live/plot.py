"""doctor's timeline: above, what the group ran and how long it sat throttled per period,
against its quota; below, the share of periods throttled below quota and at quota. Periods are
binned (at most MAX_BINS bins, each the mean of its periods) so that 10,000 of them read as well
as 100: one pixel per period would alias, and white gaps between bars would hide the data. The
legend sits outside the axes."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.artist import Artist
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle

from bwlab.periods import Analysis, Period

# 12 inches at 100 dpi: about two pixels a bin at the most
MAX_BINS = 500
USAGE, THROTTLED, BELOW, AT = "tab:blue", "dimgrey", "tab:orange", "tab:red"


def bins(ps: list[Period], most: int = MAX_BINS) -> list[list[Period]]:
    """Consecutive periods in at most `most` bins of equal count (the last one may be short)."""
    size = max(1, math.ceil(len(ps) / most))
    return [ps[i : i + size] for i in range(0, len(ps), size)]


def timeline(analysis: Analysis, title: str, path: Path) -> Path:
    """A PNG of the watched periods (see the module's comment)."""
    ps = analysis.periods
    if not ps:
        raise ValueError("no periods to plot")
    chunks = bins(ps)
    t0 = ps[0].start
    edges = [c[0].start - t0 for c in chunks] + [chunks[-1][-1].end - t0]
    counts = [sum(p.periods for p in c) for c in chunks]  # a coarse Period may hold several

    def mean(value: Callable[[Period], float]) -> list[float]:  # per period, in each bin
        return [sum(value(p) for p in c) / n for c, n in zip(chunks, counts, strict=True)]

    usage = mean(lambda p: p.usage_us / 1000)
    waited = [u + s for u, s in zip(usage, mean(lambda p: p.throttled_us / 1000), strict=True)]
    below = mean(lambda p: p.throttled * (p.verdict == "below"))
    at = [b + a for b, a in zip(below, mean(lambda p: p.throttled * (p.verdict == "at")), strict=True)]
    fig, (top, low) = plt.subplots(2, 1, sharex=True, figsize=(12, 5.5), height_ratios=[3, 1.4], layout="constrained")
    top.stairs(usage, edges, fill=True, color=USAGE)
    top.stairs(waited, edges, baseline=usage, fill=True, color=THROTTLED, alpha=0.75)
    if analysis.limit.quota_us is not None:
        top.axhline(analysis.limit.quota_us / 1000, color="black", linewidth=1.2)
    top.set_ylabel("ms per period")
    top.set_ylim(bottom=0)
    low.stairs(below, edges, fill=True, color=BELOW)
    low.stairs(at, edges, baseline=below, fill=True, color=AT)
    low.set_ylim(0, 1)
    low.set_ylabel("throttled\nshare of periods")
    low.set_xlabel("seconds")
    low.set_xlim(edges[0], edges[-1])
    size = len(chunks[0])
    top.set_title(title + (f" (each bin the mean of {size} periods)" if size > 1 else ""))
    handles: list[Artist] = [Rectangle((0, 0), 1, 1, color=USAGE), Rectangle((0, 0), 1, 1, color=THROTTLED, alpha=0.75)]
    handles += [Line2D([], [], color="black"), *(Rectangle((0, 0), 1, 1, color=c) for c in (BELOW, AT))]
    labels = ["usage", "throttled time (all CPUs)", "quota", "throttled below quota (unnecessary)",
              "throttled at quota (wanted more)"]  # fmt: skip
    fig.legend(handles, labels, loc="outside lower center", ncols=5, fontsize="small", frameon=False)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
