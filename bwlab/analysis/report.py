"""Turn a directory of result files into report.md, PNG plots and a summary table."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

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
    # matplotlib's import takes about 0.9 s: only a command that writes a report pays it
    from bwlab.analysis import figures

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
        for plot in figures.plots(scenario, sdocs, directory):
            lines += [f"![{plot.stem}]({plot.name})", ""]
    if kdocs:
        lines += _kselftest_section(kdocs)
    path = directory / "report.md"
    path.write_text("\n".join(lines))
    return path
