"""Turn a directory of result files into report.md, PNG plots and a summary table."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from bwlab import results
from bwlab.stats import summarize

# Metrics shown in tables, in order, with their heading and scale.
COLUMNS: list[tuple[str, str, float]] = [
    ("throttled_pct", "throttled %", 1.0),
    ("throttled_time_pct", "throttled time %", 1.0),
    ("usage_per_quota", "usage/quota", 1.0),
    ("usage_per_period_quota", "usage/(periods x quota)", 1.0),
    ("lock_acq_per_s", "cfs_b->lock acq/s", 1.0),
    ("lock_con_per_s", "cfs_b->lock cont/s", 1.0),
    ("stress_violations", "invalid writes accepted", 1.0),
    ("cpus_used", "CPUs used", 1.0),
    ("events_per_s", "events/s", 1.0),
    ("p50_us", "sleep p50 ms", 1e-3),
    ("p99_us", "sleep p99 ms", 1e-3),
    ("max_us", "sleep max ms", 1e-3),
    ("wakeup_p99_us", "wakeup p99 ms", 1e-3),
    ("nr_bursts", "nr_bursts", 1.0),
    ("hackbench_s", "hackbench s", 1.0),
    ("throughput_rps", "requests/s", 1.0),
    ("completion_p50_us", "completion p50 ms", 1e-3),
    ("completion_p99_us", "completion p99 ms", 1e-3),
    ("ctx_switches_per_req", "ctx switches/request", 1.0),
    ("sys_us_per_req", "sys µs/request", 1.0),
    ("run_delay_ms_per_req", "runqueue wait ms/request", 1.0),
    ("light_funcs_p99_us", "light functions p99 ms", 1e-3),
    ("heavy_funcs_p99_us", "heavy functions p99 ms", 1e-3),
    ("funcs_p99_mean_us", "p99 per function, mean ms", 1e-3),
    ("top_func_p99_us", "most popular function p99 ms", 1e-3),
    ("load_credit_max", "max load credit", 1.0),
    ("uncharged_pct", "uncharged %", 1.0),
    ("burst_mean_us", "uncharged burst mean µs", 1.0),
    ("burst_p99_us", "uncharged burst p99 ms", 1e-3),
    ("timer_late_p99_us", "timer late p99 µs", 1.0),
]


def _num(value: float) -> str:
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


# The columns the terminal summary shows (report.md shows all).
CONSOLE_COLUMNS = {"throttled %", "usage/quota", "events/s", "sleep p50 ms", "sleep p99 ms", "uncharged %",
                   "uncharged burst mean µs"}  # fmt: skip


def _fmt(summary: dict[str, Any], scale: float, brief: bool = False) -> str:
    """'mean [min-max] ±stdev' (brief: 'mean ±stdev') of a summarize() result."""
    if not summary["n"]:
        return "-"
    mean, lo, hi = (summary[k] * scale for k in ("mean", "min", "max"))
    sd = summary["stdev"]
    spread = f" ±{_num(sd * scale)}" if sd is not None else ""
    if brief:
        return f"{_num(mean)}{spread}"
    return f"{_num(mean)} [{_num(lo)}-{_num(hi)}]{spread}"


def case_summaries(doc: dict[str, Any]) -> list[tuple[str, dict[str, dict[str, Any]]]]:
    """Per case: metric -> summarize() over the repetitions that succeeded."""
    out = []
    for case in doc["cases"]:
        per_metric: dict[str, list[float]] = defaultdict(list)
        for rep in case["reps"]:
            for key, value in rep.get("metrics", {}).items():
                if value is not None:
                    per_metric[key].append(value)
        out.append((case["case"], {k: summarize(v) for k, v in per_metric.items()}))
    return out


def _label(doc: dict[str, Any]) -> str:
    meta = doc["meta"]
    return f"{meta['label']} ({meta.get('kernel_release') or '?'})"


def _save(fig: Any, out: Path, scenario: str, suffix: str, title: str | None = None) -> Path:
    """Title, lay out, write <scenario>-<suffix>.png and close the figure."""
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = out / f"{scenario}-{suffix}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot_throttling(scenario: str, docs: list[dict[str, Any]], out: Path) -> Path | None:
    series = [(d, case_summaries(d)) for d in docs]
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
        ax.bar(xs, means, width, yerr=[lo, hi], capsize=3, label=_label(doc))
    ax.set_xticks(range(len(cases)), cases, rotation=15)
    ax.set_ylabel("throttled periods (%)  [bar: mean, whiskers: min-max]")
    ax.set_title(f"{scenario}: throttled periods by case")
    ax.legend(fontsize=8)
    return _save(fig, out, scenario, "throttled")


# What a scenario's latency samples are, by workload (argv[0] of the case's settings).
SAMPLE_AXIS = {"cglat": "a 10 ms sleep took (ms)", "wakelat": "wakeup latency (ms)",
               "funcs": "request completion latency (ms)"}  # fmt: skip


def _workload(doc: dict[str, Any]) -> str:
    cases = doc.get("cases") or [{}]
    argv = cases[0].get("settings", {}).get("workload") or ["?"]
    return str(argv[0])


def _plot_latency(scenario: str, docs: list[dict[str, Any]], out: Path) -> Path | None:
    """Latency CDFs, one panel per target/kernel, one line per case: log-scale x, and a logit
    y axis so that p99 and p99.9 are as readable as the median."""
    panels = []
    for doc in docs:
        per_case = {c["case"]: [s for r in c["reps"] for s in r.get("samples_us", [])] for c in doc["cases"]}
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
        ax.set_xlabel(SAMPLE_AXIS.get(_workload(doc), "latency (ms)"))
        ax.set_ylabel("fraction of samples <= x")
        ax.set_title(_label(doc), fontsize=9)
        ax.legend(fontsize=8, loc="lower right")
    return _save(fig, out, scenario, "latency", f"{scenario}: latency CDF")


def _plot_density(scenario: str, docs: list[dict[str, Any]], out: Path) -> Path | None:
    """funcs scenarios (colocation): completion p99 and throughput against the number of
    function groups, one line per target, latency awareness and offered load."""
    lines: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    for doc in docs:
        if _workload(doc) != "funcs":
            continue
        for case, summary in zip(doc["cases"], case_summaries(doc), strict=True):
            argv = case.get("settings", {}).get("workload", [])
            metrics = summary[1]
            if "-n" not in argv or "completion_p99_us" not in metrics:
                continue
            funcs = float(argv[argv.index("-n") + 1])
            load = argv[argv.index("-l") + 1] if "-l" in argv else "?"
            aware = argv[argv.index("-L") + 1] if "-L" in argv else "-"
            key = f"{doc['meta']['label']} LAGS={aware} load={load}"
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


# The seed's (burst patch, schbench) table: percentiles down, variants across.
PERCENTILE_ROWS = [("p50", "50.0th"), ("p75", "75.0th"), ("p90", "90.0th"), ("p95", "95.0th"),
                   ("p99", "*99.0th"), ("p995", "99.5th"), ("p999", "99.9th"), ("max", "max")]  # fmt: skip


def _latency_table(sdocs: list[dict[str, Any]], prefix: str, what: str) -> list[str]:
    """Percentiles of `prefix` metrics (us) as mean over repetitions, one column per target and
    case, with the group's burst and throttling counters underneath."""
    cols = [(doc["meta"]["label"], case, metrics) for doc in sdocs for case, metrics in case_summaries(doc)
            if f"{prefix}_p99_us" in metrics]  # fmt: skip
    if not cols:
        return []
    lines = [f"{what} percentiles (µs), mean over repetitions:", "",
             "| | " + " | ".join(f"{label}: {case}" for label, case, _ in cols) + " |",
             "|---|" + "---|" * len(cols)]  # fmt: skip

    def cell(metrics: dict[str, dict[str, Any]], key: str, scale: float = 1.0) -> str:
        summary = metrics.get(key)
        return _num(summary["mean"] * scale) if summary and summary["n"] else "-"

    for key, head in PERCENTILE_ROWS:
        lines.append(f"| {head} | " + " | ".join(cell(m, f"{prefix}_{key}_us") for *_, m in cols) + " |")
    for key, head, scale in (("rps_achieved", "rps", 1.0), ("nr_bursts", "nr_bursts", 1.0),
                             ("burst_us", "burst_time (ms)", 1e-3), ("nr_throttled", "nr_throttled", 1.0),
                             ("throttled_pct", "throttled %", 1.0)):  # fmt: skip
        if any(key in m for *_, m in cols):
            lines.append(f"| {head} | " + " | ".join(cell(m, key, scale) for *_, m in cols) + " |")
    return [*lines, ""]


def summary_rows(
    docs: list[dict[str, Any]], brief: bool = False, short: bool = False
) -> list[tuple[str, str, str, dict[str, str]]]:
    """(scenario, target label, case, {column heading: formatted cell}) for every case."""
    rows = []
    for doc in sorted(docs, key=lambda d: str(d["meta"]["label"])):
        for case, metrics in case_summaries(doc):
            cells = {head: _fmt(metrics[key], scale, brief) for key, head, scale in COLUMNS if key in metrics}
            rows.append((doc["scenario"], doc["meta"]["label"] if short else _label(doc), case, cells))
    return rows


def _pivot(sdocs: list[dict[str, Any]], key: str, head: str) -> list[str]:
    """A compact table: one row per target, one column per case, `key` as mean ±stdev."""
    cases: list[str] = []
    rows = []
    for doc in sdocs:
        summaries = dict(case_summaries(doc))
        for case in summaries:
            if case not in cases:
                cases.append(case)
        rows.append((doc["meta"]["label"], summaries))
    lines = [f"{head} by case:", "", "| target | " + " | ".join(cases) + " |", "|---|" + "---|" * len(cases)]
    for label, summaries in rows:
        cells = [_fmt(summaries[c][key], 1.0, brief=True) if key in summaries.get(c, {}) else "-" for c in cases]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _kselftest_section(kdocs: list[dict[str, Any]]) -> list[str]:
    labels = [d["meta"]["label"] for d in kdocs]
    names: list[str] = []
    status: dict[tuple[str, str], str] = {}
    for doc in kdocs:
        for test in doc.get("tests", []):
            if test["name"] not in names:
                names.append(test["name"])
            status[(doc["meta"]["label"], test["name"])] = test["status"]
    lines = ["## kselftest", "", "tools/testing/selftests/cgroup/test_cpu (with the series' tests) in guests:", "",
             "| test | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]  # fmt: skip
    for name in names:
        lines.append(f"| {name} | " + " | ".join(status.get((lab, name), "-") for lab in labels) + " |")
    return [*lines, ""]


def write_report(directory: Path) -> Path:
    docs = results.load_dir(directory)
    by_scenario: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for doc in docs:
        by_scenario[doc["scenario"]].append(doc)
    kdocs = sorted(by_scenario.pop("kselftest", []), key=lambda d: str(d["meta"]["label"]))
    lines = ["# bwlab report", "", f"Results in `{directory}`. Cells: mean [min-max] ±stdev over "
             "repetitions (each repetition in a fresh cgroup).", ""]  # fmt: skip
    for scenario, sdocs in sorted(by_scenario.items()):
        sdocs.sort(key=lambda d: d["meta"]["label"])
        lines += [f"## {scenario}", "", sdocs[0].get("description", ""), ""]
        for doc in sdocs:
            meta = doc["meta"]
            lines.append(
                f"- **{_label(doc)}**: status {doc['status']}, {meta.get('vcpus')} CPUs, "
                f"HZ={meta.get('hz')}, slice {meta.get('slice_us')} µs, {meta.get('cgroup')}, "
                f"series {meta.get('series_hash') or '-'}, config {meta.get('config_hash') or '-'}, "
                f"bwlab {meta.get('bwlab_revision')}, {meta.get('date')}"
            )
        lines.append("")
        rows = summary_rows(sdocs)
        heads = [h for _, h, _ in COLUMNS if any(h in cells for *_, cells in rows)]
        lines.append("| target | case | " + " | ".join(heads) + " |")
        lines.append("|---|---|" + "---|" * len(heads))
        for _, label, case, cells in rows:
            lines.append(f"| {label} | {case} | " + " | ".join(cells.get(h, "-") for h in heads) + " |")
        lines.append("")
        if len({c for d in sdocs for c, m in case_summaries(d) if "throttled_pct" in m}) > 1:
            lines += _pivot(sdocs, "throttled_pct", "Throttled periods (%)")
        lines += _latency_table(sdocs, "wakeup", "Wakeup latency")
        plots = (_plot_throttling(scenario, sdocs, directory), _plot_latency(scenario, sdocs, directory),
                 _plot_density(scenario, sdocs, directory))  # fmt: skip
        for plot in plots:
            if plot is not None:
                lines += [f"![{plot.stem}]({plot.name})", ""]
    if kdocs:
        lines += _kselftest_section(kdocs)
    path = directory / "report.md"
    path.write_text("\n".join(lines))
    return path
