"""Turn a directory of result files into report.md, PNG plots and a summary table."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from bwlab import results, workloads
from bwlab.results import Result
from bwlab.stats import summarize
from bwlab.workloads.base import COMMON_METRICS, Metric


def columns() -> list[Metric]:
    """The report's columns: cpu.stat's and the probes' first, then each workload kind's, in
    registry order; one per metric key."""
    seen: dict[str, Metric] = {}
    for metric in (*COMMON_METRICS, *(m for k in workloads.kinds().values() for m in k.metrics)):
        if metric.heading and metric.key not in seen:
            seen[metric.key] = metric
    return list(seen.values())


def declared() -> set[str]:
    """Every metric key some kind (or cpu.stat) declares, shown or not."""
    return {m.key for m in (*COMMON_METRICS, *(m for k in workloads.kinds().values() for m in k.metrics))}


def columns_for(docs: list[Result]) -> list[Metric]:
    """The declared columns these results have, then any metric no kind declares (a user's
    own program's): none goes missing from a report."""
    present = {k for d in docs for c in d.cases for r in c.reps for k, v in r.metrics.items() if v is not None}
    cols = [m for m in columns() if m.key in present]
    known = declared()
    cols += [Metric(k, k) for k in sorted(present - known)]
    return cols


def num(value: float) -> str:
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _fmt(summary: dict[str, Any], scale: float, brief: bool = False) -> str:
    """'mean [min-max] ±stdev' (brief: 'mean ±stdev') of a summarize() result."""
    if not summary["n"]:
        return "-"
    mean, lo, hi = (summary[k] * scale for k in ("mean", "min", "max"))
    sd = summary["stdev"]
    spread = f" ±{num(sd * scale)}" if sd is not None else ""
    if brief:
        return f"{num(mean)}{spread}"
    return f"{num(mean)} [{num(lo)}-{num(hi)}]{spread}"


def case_summaries(doc: Result) -> list[tuple[str, dict[str, dict[str, Any]]]]:
    """Per case: metric -> summarize() over the repetitions that succeeded."""
    out = []
    for case in doc.cases:
        per_metric: dict[str, list[float]] = defaultdict(list)
        for rep in case.reps:
            for key, value in rep.metrics.items():
                if value is not None:
                    per_metric[key].append(value)
        out.append((case.case, {k: summarize(v) for k, v in per_metric.items()}))
    return out


def what_ran(doc: Result) -> str:
    """'(6.18.44)', '(simulated, HZ=250)': the kernel a run ran, or the model."""
    meta = doc.meta
    if meta.target == "sim":
        return f"(simulated, HZ={meta.hz})"
    return f"({meta.kernel_release or 'kernel unknown'})"


def label(doc: Result) -> str:
    """A run's name with what it ran: 'host (6.18.44)', 'sim-mainline (simulated, HZ=250)'."""
    return f"{doc.meta.label} {what_ran(doc)}"


def distinct_labels(docs: list[Result]) -> dict[int, str]:
    """Short names per result (by id), unique: results of one label whose kernel, HZ, CPUs,
    slice, accel or policy differ get what differs appended, so that no two runs unlike each
    other share a row or column."""
    by_label: dict[str, list[Result]] = defaultdict(list)
    for doc in docs:
        by_label[doc.meta.label].append(doc)
    names: dict[int, str] = {}
    for lab, group in by_label.items():
        variants = {d.meta.variant() for d in group}
        for i, doc in enumerate(group):
            if len(variants) == 1 and len(group) == 1:
                names[id(doc)] = lab
                continue
            others = [d for d in group if d is not doc]
            diff = [f"{k}={doc.meta.get(k)}" for k in doc.meta.VARIANT_KEYS
                    if any(d.meta.get(k) != doc.meta.get(k) for d in others)]  # fmt: skip
            names[id(doc)] = f"{lab} [{', '.join(diff) or f'run {i + 1}'}]"
    return names


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
        ax.bar(xs, means, width, yerr=[lo, hi], capsize=3, label=label(doc))
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
        ax.set_title(label(doc), fontsize=9)
        ax.legend(fontsize=8, loc="lower right")
    return _save(fig, out, scenario, "latency", f"{scenario}: latency CDF")


def _plot_density(scenario: str, docs: list[Result], out: Path) -> Path | None:
    """funcs scenarios (colocation): completion p99 and throughput against the number of
    function groups, one line per target, latency awareness and offered load."""
    lines: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    for doc in docs:
        if _kind(doc) != "funcs":
            continue
        for case, summary in zip(doc.cases, case_summaries(doc), strict=True):
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


# The seed's (burst patch, schbench) table: percentiles down, variants across.
PERCENTILE_ROWS = [("p50", "50.0th"), ("p75", "75.0th"), ("p90", "90.0th"), ("p95", "95.0th"),
                   ("p99", "*99.0th"), ("p995", "99.5th"), ("p999", "99.9th"), ("max", "max")]  # fmt: skip


def _latency_table(sdocs: list[Result], names: dict[int, str], prefix: str, what: str) -> list[str]:
    """Percentiles of `prefix` metrics (us) as mean over repetitions, one column per target and
    case, with the group's burst and throttling counters underneath."""
    cols = [(names[id(doc)], case, metrics) for doc in sdocs for case, metrics in case_summaries(doc)
            if f"{prefix}_p99_us" in metrics]  # fmt: skip
    if not cols:
        return []
    lines = [f"{what} percentiles (µs), mean over repetitions:", "",
             "| | " + " | ".join(f"{label}: {case}" for label, case, _ in cols) + " |",
             "|---|" + "---|" * len(cols)]  # fmt: skip

    def cell(metrics: dict[str, dict[str, Any]], key: str, scale: float = 1.0) -> str:
        summary = metrics.get(key)
        return num(summary["mean"] * scale) if summary and summary["n"] else "-"

    for key, head in PERCENTILE_ROWS:
        lines.append(f"| {head} | " + " | ".join(cell(m, f"{prefix}_{key}_us") for *_, m in cols) + " |")
    for key, head, scale in (("rps_achieved", "rps", 1.0), ("nr_bursts", "nr_bursts", 1.0),
                             ("burst_us", "burst_time (ms)", 1e-3), ("nr_throttled", "nr_throttled", 1.0),
                             ("throttled_pct", "throttled %", 1.0)):  # fmt: skip
        if any(key in m for *_, m in cols):
            lines.append(f"| {head} | " + " | ".join(cell(m, key, scale) for *_, m in cols) + " |")
    return [*lines, ""]


def summary_rows(docs: list[Result], brief: bool = False) -> list[tuple[str, str, str, dict[str, str]]]:
    """(scenario, target name, case, {column heading: formatted cell}) for every case."""
    rows = []
    names = distinct_labels(docs)
    cols = columns_for(docs)
    for doc in sorted(docs, key=lambda d: names[id(d)]):
        for case, metrics in case_summaries(doc):
            cells = {m.heading or m.key: _fmt(metrics[m.key], m.scale, brief) for m in cols if m.key in metrics}
            rows.append((doc.scenario, names[id(doc)], case, cells))
    return rows


def _pivot(sdocs: list[Result], names: dict[int, str], key: str, head: str) -> list[str]:
    """A compact table: one row per target, one column per case, `key` as mean ±stdev."""
    cases: list[str] = []
    rows = []
    for doc in sdocs:
        summaries = dict(case_summaries(doc))
        for case in summaries:
            if case not in cases:
                cases.append(case)
        rows.append((names[id(doc)], summaries))
    lines = [f"{head} by case:", "", "| target | " + " | ".join(cases) + " |", "|---|" + "---|" * len(cases)]
    for name, summaries in rows:
        cells = [_fmt(summaries[c][key], 1.0, brief=True) if key in summaries.get(c, {}) else "-" for c in cases]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _kselftest_section(kdocs: list[Result]) -> list[str]:
    names = distinct_labels(kdocs)
    labels = [names[id(d)] for d in kdocs]
    tests: list[str] = []
    status: dict[tuple[str, str], str] = {}
    for doc in kdocs:
        for test in doc.tests:
            if test["name"] not in tests:
                tests.append(test["name"])
            status[(names[id(doc)], test["name"])] = test["status"]
    lines = ["## kselftest", "", "tools/testing/selftests/cgroup/test_cpu (with the series' tests) in guests:", "",
             "| test | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]  # fmt: skip
    for name in tests:
        lines.append(f"| {name} | " + " | ".join(status.get((lab, name), "-") for lab in labels) + " |")
    return [*lines, ""]


def write_report(directory: Path) -> Path:
    docs = results.load_dir(directory)
    by_scenario: dict[str, list[Result]] = defaultdict(list)
    for doc in docs:
        by_scenario[doc.scenario].append(doc)
    kdocs = sorted(by_scenario.pop("kselftest", []), key=lambda d: d.meta.label)
    lines = ["# bwlab report", "", f"Results in `{directory}`. Cells: mean [min-max] ±stdev over "
             "repetitions (each repetition in a fresh cgroup).", ""]  # fmt: skip
    for scenario, sdocs in sorted(by_scenario.items()):
        names = distinct_labels(sdocs)
        sdocs.sort(key=lambda d: names[id(d)])
        lines += [f"## {scenario}", "", sdocs[0].description, ""]
        for doc in sdocs:
            meta = doc.meta
            accel = f", {meta.accel}" if meta.accel else ""
            lines.append(
                f"- **{names[id(doc)]}** {what_ran(doc)}: status {doc.status}, "
                f"{meta.vcpus} CPUs{accel}, HZ={meta.hz}, slice {meta.slice_us} µs, {meta.get('cgroup')}, "
                f"series {meta.get('series_hash') or '-'}, config {meta.get('config_hash') or '-'}, "
                f"bwlab {meta.bwlab_revision}, {meta.date}"
            )
        lines.append("")
        rows = summary_rows(sdocs)
        heads = [m.heading or m.key for m in columns_for(sdocs)]
        lines.append("| target | case | " + " | ".join(heads) + " |")
        lines.append("|---|---|" + "---|" * len(heads))
        for _, name, case, cells in rows:
            lines.append(f"| {name} | {case} | " + " | ".join(cells.get(h, "-") for h in heads) + " |")
        lines.append("")
        if len({c for d in sdocs for c, m in case_summaries(d) if "throttled_pct" in m}) > 1:
            lines += _pivot(sdocs, names, "throttled_pct", "Throttled periods (%)")
        lines += _latency_table(sdocs, names, "wakeup", "Wakeup latency")
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
