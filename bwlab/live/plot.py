"""doctor's timeline: per period, what the group ran and how long it sat throttled, against its
quota, each throttled period marked by its verdict."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.artist import Artist
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle

from bwlab.periods import Analysis

COLOURS = {"below": "tab:orange", "at": "tab:red", "": "tab:blue"}


def timeline(analysis: Analysis, title: str, path: Path) -> Path:
    """A PNG of usage and throttled time per period (ms), the quota as a line."""
    ps = analysis.periods
    if not ps:
        raise ValueError("no periods to plot")
    t0 = ps[0].start
    xs = [p.start - t0 for p in ps]
    widths = [(p.end - p.start) * 0.9 for p in ps]
    usage = [p.usage_us / 1000 for p in ps]
    stopped = [p.throttled_us / 1000 for p in ps]
    fig, ax = plt.subplots(figsize=(12, 4))
    ax.bar(xs, usage, widths, align="edge", color=[COLOURS[p.verdict] for p in ps], label="usage")
    ax.bar(xs, stopped, widths, bottom=usage, align="edge", color="lightgrey", label="throttled time")
    if analysis.limit.quota_us is not None:
        ax.axhline(analysis.limit.quota_us / 1000, color="black", linewidth=1, label="quota")
    handles: list[Artist] = [Rectangle((0, 0), 1, 1, color=c) for c in COLOURS.values()]
    handles += [Rectangle((0, 0), 1, 1, color="lightgrey"), Line2D([], [], color="black")]
    labels = ["usage, throttled below quota", "usage, throttled at quota", "usage, not throttled",
              "throttled time", "quota"]  # fmt: skip
    ax.legend(handles, labels, loc="upper right", fontsize="small")
    ax.set_xlabel("seconds")
    ax.set_ylabel("ms of CPU time per period")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
