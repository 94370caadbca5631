"""The report's PNG figures: throttled periods per case, latency CDFs, and density (funcs)
curves. Apart from report.py because matplotlib's import takes about 0.9 s, which every
`bwlab` command paid at its start while only the report draws."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from bwlab import workloads
from bwlab.analysis import report
from bwlab.results import Result


def plots(scenario: str, docs: list[Result], out: Path) -> list[Path]:
    """Every figure that `docs` (one scenario's results) have data for, written into `out`."""
    drawn = (_plot_throttling(scenario, docs, out), _plot_latency(scenario, docs, out),
             _plot_density(scenario, docs, out))  # fmt: skip
    return [p for p in drawn if p is not None]


def _save(fig: Any, out: Path, scenario: str, suffix: str, title: str | None = None) -> Path:
    """Title, lay out, write <scenario>-<suffix>.png and close the figure."""
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = out / f"{scenario}-{suffix}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot_throttling(scenario: str, docs: list[Result], out: Path) -> Path | None:
    series = [(d, report.case_summaries(d)) for d in docs]
    cases = [c for c, _ in series[0][1]]
    if not any("throttled_pct" in m for _, cs in series for _, m in cs):
        return None
    fig, ax = plt.subplots(figsize=(max(6.0, 1.4 * len(cases) * len(docs) / 2 + 3), 4))
    width = 0.8 / len(series)
    for i, (doc, cs) in enumerate(series):
        means, lo, hi = [], [], []
        for case in cases:
            s = dict(cs).get(case, {}).get("throttled_pct", {"n": 0})
            m = s["mean"] if s["n"] else 0.0
            means.append(m)
            lo.append(m - s["min"] if s["n"] else 0.0)
            hi.append(s["max"] - m if s["n"] else 0.0)
        xs = [x + (i - (len(series) - 1) / 2) * width for x in range(len(cases))]
        ax.bar(xs, means, width, yerr=[lo, hi], capsize=3, label=report.label(doc))
    ax.set_xticks(range(len(cases)), cases, rotation=15)
    ax.set_ylabel("throttled periods (%)  [bar: mean, whiskers: min-max]")
    ax.set_title(f"{scenario}: throttled periods by case")
    ax.legend(fontsize=8)
    return _save(fig, out, scenario, "throttled")


def _kind(doc: Result) -> str:
    return doc.cases[0].kind if doc.cases else ""


def _sample_axis(doc: Result) -> str:
    """What a result's latency samples are, as its workload kind says."""
    kinds = workloads.kinds()
    axis = kinds[_kind(doc)].sample_axis if _kind(doc) in kinds else None
    return axis or "latency (ms)"


def _plot_latency(scenario: str, docs: list[Result], out: Path) -> Path | None:
    """Latency CDFs, one panel per target/kernel, one line per case: log-scale x, and a logit
    y axis so that p99 and p99.9 are as readable as the median."""
    panels = []
    for doc in docs:
        per_case = {c.case: [s for r in c.reps for s in r.samples_us] for c in doc.cases}
        if any(per_case.values()):
            panels.append((doc, per_case))
    if not panels:
        return None
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 3.2 * len(panels)), squeeze=False)
    for ax, (doc, per_case) in zip(axes[:, 0], panels, strict=True):
        for case, samples in per_case.items():
            if not samples:
                continue
            xs = sorted(max(s, 1) / 1000 for s in samples)  # ms; 1 us floor for the log axis
            n = len(xs)
            ys = [(i + 0.5) / n for i in range(n)]  # plotting positions, strictly inside (0, 1)
            ax.step(xs, ys, where="post", label=f"{case} (n={n})")
        ax.set_xscale("log")
        ax.set_yscale("logit")
        ax.set_ylim(0.01, 0.9995)
        ax.grid(True, which="major", alpha=0.3)
        ax.set_xlabel(_sample_axis(doc))
        ax.set_ylabel("fraction of samples <= x")
        ax.set_title(report.label(doc), fontsize=9)
        ax.legend(fontsize=8, loc="lower right")
    return _save(fig, out, scenario, "latency", f"{scenario}: latency CDF")


def _plot_density(scenario: str, docs: list[Result], out: Path) -> Path | None:
    """funcs scenarios (colocation): completion p99 and throughput against the number of
    function groups, one line per target, latency awareness and offered load."""
    lines: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    for doc in docs:
        if _kind(doc) != "funcs":
            continue
        for case, summary in zip(doc.cases, report.case_summaries(doc), strict=True):
            argv = case.settings.get("workload", [])
            metrics = summary[1]
            if "-n" not in argv or "completion_p99_us" not in metrics:
                continue
            funcs = float(argv[argv.index("-n") + 1])
            load = argv[argv.index("-l") + 1] if "-l" in argv else "?"
            aware = argv[argv.index("-L") + 1] if "-L" in argv else "-"
            key = f"{doc.meta.label} LAGS={aware} load={load}"
            lines[key].append((funcs, metrics["completion_p99_us"]["mean"] / 1000, metrics["throughput_rps"]["mean"]))
    if not lines:
        return None
    fig, (ax_lat, ax_thr) = plt.subplots(1, 2, figsize=(12, 4.5))
    for key, points in sorted(lines.items()):
        points.sort()
        xs = [p[0] for p in points]
        style = "-" if "LAGS=1" in key else "--"
        ax_lat.plot(xs, [p[1] for p in points], style, marker="o", label=key)
        ax_thr.plot(xs, [p[2] for p in points], style, marker="o", label=key)
    ax_lat.set_yscale("log")
    ax_lat.set_xlabel("function groups")
    ax_lat.set_ylabel("completion p99 (ms, mean over repetitions)")
    ax_thr.set_xlabel("function groups")
    ax_thr.set_ylabel("completed requests/s")
    ax_thr.legend(fontsize=6)
    return _save(fig, out, scenario, "density", f"{scenario}: latency and throughput against density")
