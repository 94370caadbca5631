"""The burst comparison tables (docs/burst.md, the slush changelog) from result directories.

Each directory holds runs of the `burst-vs-slush` and `burst-wide` scenarios (throttled periods at
demand == quota) and/or the `overdelivery` scenario (the most a group ran in 1/10/100 periods over the
quota) for one machine (CPU count, HZ), under one or more policies. A row is a policy and a
burst (the case's suffix), a column a period (the case's prefix); a cell is the mean of the
repetitions with its standard deviation:

    .venv/bin/python scripts/burst_table.py DIR [DIR ...] [--markdown]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from bwlab import results
from bwlab.errors import BwlabError
from bwlab.results import Result

PERIODS = ("100ms", "50ms", "10ms")
BURSTS = ("none", "1tick", "sized", "2ticks", "4ticks", "quota")
SCENARIOS = ("burst-vs-slush", "burst-wide", "overdelivery", "overdelivery-small")
POLICY_ORDER = ("mainline", "clip-slice", "default-burst", "burst-clip", "slush", "slush-clip", "all", "all-slush")


def _cell(values: list[float], digits: int) -> str:
    if not values:
        return "-"
    mean = statistics.fmean(values)
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{mean:.{digits}f} ({sd:.{digits}f})"


def _who(doc: Result) -> str:
    """The row's kernel behaviour: the policy a series kernel (or the model) ran under; an
    unpatched kernel is mainline; a patched kernel without policies by its label."""
    policy = doc.meta.get("policy")
    if policy:
        return str(policy)
    if doc.meta.get("target") != "sim" and not doc.meta.get("patches"):
        return "mainline"
    return str(doc.meta.get("label") or "?")


def _machine(doc: Result) -> str:
    where = "model" if doc.meta.get("target") == "sim" else f"{doc.meta.get('target')} {doc.meta.get('kernel_release')}"
    return f"{where}, {doc.meta.get('vcpus')} CPUs, HZ={doc.meta.get('hz')}"


def _rows(docs: list[Result], metric: str, periods: tuple[str, ...], digits: int) -> list[tuple[str, list[str]]]:
    table: dict[tuple[str, str], dict[str, list[float]]] = {}
    for doc in docs:
        who = _who(doc)
        for case in doc.cases:
            period, _, burst = case.case.partition("-")
            values = [float(v) for r in case.reps if (v := r.metrics.get(metric)) is not None]
            table.setdefault((who, burst), {})[period] = values
    order = {p: i for i, p in enumerate(POLICY_ORDER)}
    keys = sorted(table, key=lambda k: (order.get(k[0], 99), BURSTS.index(k[1]) if k[1] in BURSTS else 99))
    return [(f"{who}, burst {burst}", [_cell(table[(who, burst)].get(p, []), digits) for p in periods])
            for who, burst in keys]  # fmt: skip


def render(directory: Path) -> str:
    docs = [d for d in results.load_dir(directory) if d.scenario in SCENARIOS]
    if not docs:
        raise BwlabError(f"{directory}: no results of {', '.join(SCENARIOS)}")
    out = []
    tables: list[tuple[str, str, tuple[str, ...], int, str]] = [
        ("burst-vs-slush", "throttled_pct", PERIODS, 2, "throttled periods in percent at demand == quota"),
        ("burst-wide", "throttled_pct", PERIODS, 2, "throttled periods in percent, demand == quota on 2 x its CPUs"),
    ]
    for od in ("overdelivery", "overdelivery-small"):
        for n in (1, 10, 100):
            what = "one period / quota" if n == 1 else f"{n} periods / {n} quotas"
            tables.append((od, f"max_usage_per_quota_{n}", ("100ms", "10ms"), 3, f"most run in {what}"))
    for scenario, metric, periods, digits, what in tables:
        sdocs = [d for d in docs if d.scenario == scenario]
        if not sdocs:
            continue
        out.append(f"{scenario}: {what}, mean (stdev) of the repetitions; {_machine(sdocs[0])}")
        out.append("")
        width = 30
        out.append(" " * width + "".join(f"{p:>16}" for p in periods))
        for name, cells in _rows(sdocs, metric, periods, digits):
            out.append(f"{name:<{width}}" + "".join(f"{c:>16}" for c in cells))
        out.append("")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+", type=Path)
    args = parser.parse_args()
    try:
        for directory in args.dirs:
            print(render(directory))
    except BwlabError as exc:
        print(f"burst_table: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
