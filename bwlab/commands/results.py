"""`bwlab report` and `bwlab compare`: what a results directory says."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bwlab.analysis import compare, report
from bwlab.commands import common
from bwlab.errors import BwlabError


def cmd_report(args: argparse.Namespace) -> int:
    path = report.write_report(Path(args.dir))
    common.print_summary(Path(args.dir))
    print(path)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    paths = [Path(p) for p in args.results]
    metrics = compare.metric_keys(args.metric)
    rows: list[dict[str, object]] = []
    pairs = compare.pair(paths)
    if metrics:
        known = compare.known_metrics([doc for ref, others in pairs for doc in (ref, *others)])
        unknown = [m for m in metrics if m not in known]
        if unknown:
            raise BwlabError(f"--metric {', '.join(unknown)}: not a metric of these results "
                             f"(they have: {', '.join(known)})")  # fmt: skip
    for ref, others in pairs:
        for other in others:
            found = compare.compare_results(ref, other, metrics)
            if not found:
                continue
            if args.json is None:
                print("\n".join(compare.lines(ref, other, found, args.significant_only)) + "\n")
            for c in found:
                if args.significant_only and not c.significant:
                    continue
                rows.append({"scenario": c.scenario, "a": ref.meta.label, "b": other.meta.label, "case": c.case,
                             "metric": c.metric, "a_values": c.a, "b_values": c.b, "kind": c.kind,
                             "value": c.value, "lo": c.lo, "hi": c.hi, "significant": c.significant})  # fmt: skip
    if not rows:
        raise BwlabError("nothing to compare: no case and metric that both results have")
    if args.json is not None:
        text = "".join(json.dumps(r) + "\n" for r in rows)
        if args.json == "-":
            print(text, end="")
        else:
            Path(args.json).write_text(text)
    return 0
