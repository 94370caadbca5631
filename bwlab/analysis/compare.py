"""`bwlab compare A B ...`: each result against the first, case by case and metric by metric,
in pyperf's spirit: mean ±stdev of the repetitions, the ratio B/A with its 95 % confidence
interval, and "not significant" when the interval includes 1 (a difference interval that
includes 0 where A's mean is 0 and no ratio exists).

A and B are result files, or directories whose files are paired by scenario and label
(the file name); the metadata that differ between two paired results is shown above them.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bwlab import results, stats
from bwlab.analysis import report
from bwlab.errors import BwlabError
from bwlab.results import Case, Result

LEVEL = 0.95
# Metadata shown when it differs between two compared results.
META_KEYS = ("kernel_release", "kernel_key", "policy", "hz", "vcpus", "slice_us", "accel", "cgroup",
             "bwlab_revision")  # fmt: skip


@dataclass(frozen=True)
class Comparison:
    """One metric of one case: reference A against B."""

    scenario: str
    label: str
    case: str
    metric: str
    a: list[float]
    b: list[float]
    kind: str  # "ratio" (b/a), "diff" (b - a, where a's mean is 0), or "n/a" (too few values)
    value: float = math.nan
    lo: float = math.nan
    hi: float = math.nan

    @property
    def significant(self) -> bool:
        if self.kind == "ratio":
            return not self.lo <= 1.0 <= self.hi
        if self.kind == "diff":
            return not self.lo <= 0.0 <= self.hi
        return False

    def verdict(self) -> str:
        if self.kind == "n/a":
            return "too few repetitions (need 2 each)"
        return "significant" if self.significant else "not significant"

    def interval(self) -> str:
        if self.kind == "n/a":
            return "-"
        if self.a == self.b or (self.kind == "diff" and not any(self.a) and not any(self.b)):
            return "identical"
        if self.kind == "ratio":
            if math.isinf(self.lo) or self.lo < 0 <= min(*self.a, *self.b):
                # Fieller's interval of a ratio of non-negative means reaches below 0 (or has no
                # bound at all) when A's mean cannot be told from 0 at this level
                return f"{self.value:.3f}x (no interval: A's mean cannot be told from 0 with these repetitions)"
            return f"{self.value:.3f}x [{self.lo:.3f} to {self.hi:.3f}]"
        return f"{self.value:+.3g} [{self.lo:+.3g} to {self.hi:+.3g}] (A is 0: difference)"


def compare_values(scenario: str, label: str, case: str, metric: str, a: Sequence[float],
                   b: Sequence[float]) -> Comparison:  # fmt: skip
    """The comparison of two samples of one metric (no repetitions' mean needed beforehand)."""
    a, b = list(a), list(b)
    if len(a) < 2 or len(b) < 2:
        return Comparison(scenario, label, case, metric, a, b, "n/a")
    if statistics.fmean(a) != 0:
        value, lo, hi = stats.ratio_interval(a, b, LEVEL)
        return Comparison(scenario, label, case, metric, a, b, "ratio", value, lo, hi)
    value, lo, hi = stats.diff_interval(a, b, LEVEL)
    return Comparison(scenario, label, case, metric, a, b, "diff", value, lo, hi)


def _values(case: Case, metric: str) -> list[float]:
    return [float(v) for r in case.reps if (v := r.metrics.get(metric)) is not None]


def metric_keys(text: str | None) -> list[str] | None:
    """`--metric a,b`: the keys named, or None (the report's columns) when none is given."""
    return [m.strip() for m in text.split(",") if m.strip()] if text else None


def compare_results(a: Result, b: Result, metrics: Sequence[str] | None = None) -> list[Comparison]:
    """Every case the two have in common; `metrics` (default: the report's columns both have)."""
    out = []
    b_cases = {c.case: c for c in b.cases}
    keys = list(metrics) if metrics else [m.key for m in report.columns()]
    for case in a.cases:
        other = b_cases.get(case.case)
        if other is None:
            continue
        for key in keys:
            va, vb = _values(case, key), _values(other, key)
            if metrics or (va and vb):
                out.append(compare_values(a.scenario, a.meta.label, case.case, key, va, vb))
    return out


def meta_differences(a: Result, b: Result) -> list[str]:
    """'hz: 250 -> 1000' for every compared metadata field that differs."""
    da, db = a.meta.as_dict(), b.meta.as_dict()
    return [f"{k}: {da.get(k)} -> {db.get(k)}" for k in META_KEYS if da.get(k) != db.get(k)]


def pair(paths: Sequence[Path]) -> list[tuple[Result, list[Result]]]:
    """(reference, others) per compared result: files as given, or directories' files paired
    by name (scenario and label)."""
    if len(paths) < 2:
        raise BwlabError("compare needs at least two results (files or directories)")
    if all(p.is_file() for p in paths):
        loaded = [results.load(p) for p in paths]
        return [(loaded[0], loaded[1:])]
    if not all(p.is_dir() for p in paths):
        missing = next((p for p in paths if not p.exists()), None)
        if missing is not None:
            raise BwlabError(f"{missing}: no such file or directory")
        raise BwlabError("compare takes result files or results directories, not a mix of both")
    for directory in paths:
        if not any(directory.glob("*.json")):
            raise BwlabError(f"{directory}: no result files (*.json)")
    ref = {p.name: p for p in sorted(paths[0].glob("*.json"))}
    pairs = []
    for name, path in ref.items():
        others = [d / name for d in paths[1:]]
        if all(o.is_file() for o in others):
            pairs.append((results.load(path), [results.load(o) for o in others]))
    if not pairs:  # other targets name their files otherwise (table2-host, table2-sim-all): by scenario
        pairs = _pair_by_scenario(paths)
    if not pairs:
        raise BwlabError(f"no result of {paths[0]} pairs with one in {', '.join(map(str, paths[1:]))}: directories "
                         "pair by file name, else by scenario where each holds one result of it; "
                         "or name the files: bwlab compare A/X.json B/Y.json")  # fmt: skip
    return pairs


def _pair_by_scenario(paths: Sequence[Path]) -> list[tuple[Result, list[Result]]]:
    """Results of one scenario across directories (host against sim, guest against ssh), for
    every scenario of which each directory holds exactly one result."""
    per_dir: list[dict[str, list[Result]]] = []
    for directory in paths:
        found: dict[str, list[Result]] = {}
        for path in sorted(directory.glob("*.json")):
            try:
                doc = results.load(path)
            except BwlabError:
                continue  # not a result (validate.json, a report's data)
            found.setdefault(doc.scenario, []).append(doc)
        per_dir.append(found)
    pairs = []
    for name, docs in per_dir[0].items():
        others = [d.get(name, []) for d in per_dir[1:]]
        if len(docs) == 1 and all(len(o) == 1 for o in others):
            pairs.append((docs[0], [o[0] for o in others]))
    return pairs


def known_metrics(docs: Sequence[Result]) -> list[str]:
    """Every metric some repetition of these results has."""
    return sorted({k for d in docs for c in d.cases for r in c.reps for k in r.metrics})


def fmt_sample(values: Sequence[float], factor: float = 1.0) -> str:
    """'mean ±stdev (n=N)' in the heading's unit."""
    s = stats.summarize(values)
    if not s["n"]:
        return "-"
    sd = f" ±{report.num(float(s['stdev']) * factor)}" if s["stdev"] is not None else ""
    return f"{report.num(float(s['mean'] or 0) * factor)}{sd} (n={s['n']})"


def lines(ref: Result, other: Result, found: Sequence[Comparison], significant_only: bool = False) -> list[str]:
    """A comparison as plain text, one line per metric, pyperf-style."""
    diffs = meta_differences(ref, other)
    out = [f"{ref.scenario}: {ref.meta.label} -> {other.meta.label}" + (f"  ({'; '.join(diffs)})" if diffs else "")]
    cols = {m.key: m for m in report.columns()}
    heads = {k: m.heading or k for k, m in cols.items()}
    scales = {k: m.scale for k, m in cols.items()}  # a metric's unit -> its heading's (us -> ms)
    width_case = max((len(c.case) for c in found), default=4)
    width_metric = max((len(heads.get(c.metric, c.metric)) for c in found), default=6)
    for c in found:
        if significant_only and not c.significant:
            continue
        out.append(f"  {c.case:{width_case}}  {heads.get(c.metric, c.metric):{width_metric}}  "
                   f"{fmt_sample(c.a, scales.get(c.metric, 1.0))} -> {fmt_sample(c.b, scales.get(c.metric, 1.0))}: "
                   f"{c.interval()}, "
                   f"{c.verdict()}")  # fmt: skip
    return out
