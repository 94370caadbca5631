"""The result model: bwlab-result/1 files upgrade on load, documents round-trip, damage is a
one-line error, and a report never puts unlike runs in one row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bwlab import results
from bwlab.analysis import report
from bwlab.errors import BwlabError
from bwlab.results import Result

V1 = {
    "schema": "bwlab-result/1", "scenario": "table2", "description": "d", "status": "ok",
    "meta": {"target": "guest", "label": "guest-baseline", "bwlab_revision": "abc", "date": "2026-11-21",
             "host_kernel": "6.18", "kernel_release": "7.3.4", "hz": 250, "vcpus": 2, "slice_us": 5000,
             "splats": [], "noise": []},
    "cases": [{"case": "10ms", "params": {}, "settings": {"workload": ["sysbench", "cpu", "--threads=2"]},
               "reps": [{"rep": 0, "metrics": {"throttled_pct": 49.0}}, {"rep": 1, "error": "boom"}]},
              {"case": "t", "settings": {"workload": ["sysbench", "threads", "--threads=8"]}, "reps": []}],
}  # fmt: skip


def test_v1_upgrades_on_load(tmp_path: Path) -> None:
    path = tmp_path / "table2-guest-baseline.json"
    path.write_text(json.dumps(V1))
    res = results.load(path)
    assert res.meta.accel == "tcg" and res.meta.hz == 250 and res.meta.extra["splats"] == []
    assert [c.kind for c in res.cases] == ["sysbench-cpu", "sysbench-threads"]
    assert res.cases[0].reps[0].metrics == {"throttled_pct": 49.0} and res.cases[0].reps[1].error == "boom"
    # written back as /2, read back the same
    results.write(path, res)
    again = json.loads(path.read_text())
    assert again["schema"] == "bwlab-result/2" and again["meta"]["accel"] == "tcg"
    assert again["cases"][0]["reps"][1] == {"rep": 1, "error": "boom"}
    assert results.load(path) == res


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not a readable result file"),
        ('{"schema": "other"}', "not a bwlab result"),
        ('{"schema": "bwlab-result/2", "scenario": "x", "status": "ok", "meta": {"label": "l"}, "cases": []}',
         "malformed bwlab result"),
        ('{"schema": "bwlab-result/2", "scenario": "x", "status": "ok", "meta": {"target": "h", "label": "l"},'
         ' "cases": [{"reps": []}]}', "malformed bwlab result"),
    ],
)  # fmt: skip
def test_damaged_results_are_one_line_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "r.json"
    path.write_text(text)
    with pytest.raises(BwlabError, match=message):
        results.load(path)
    (tmp_path / "b.json").write_bytes(b"\xff\xfe")
    with pytest.raises(BwlabError, match="not a readable result file"):
        results.load(tmp_path / "b.json")


def _result(label: str, hz: int, vcpus: int = 2) -> Result:
    doc = json.loads(json.dumps(V1))
    doc["meta"].update({"label": label, "hz": hz, "vcpus": vcpus})
    return Result.from_json(doc, "t")


def test_unlike_runs_never_share_a_row() -> None:
    same = report.distinct_labels([_result("guest-baseline", 250), _result("guest-patched", 250)])
    assert sorted(same.values()) == ["guest-baseline", "guest-patched"]
    a, b, c = _result("guest-baseline", 250), _result("guest-baseline", 1000), _result("guest-baseline", 250, 4)
    names = report.distinct_labels([a, b, c])
    assert len(set(names.values())) == 3
    assert "hz=250" in names[id(a)] and "hz=1000" in names[id(b)] and "vcpus=4" in names[id(c)]
    rows = report.summary_rows([a, b])
    assert len({label for _, label, _, _ in rows}) == 2


def test_simulated_runs_are_named_by_model_not_kernel() -> None:
    doc = json.loads(json.dumps(V1))
    doc["meta"].update({"target": "sim", "label": "sim-mainline", "kernel_release": None, "policy": "mainline"})
    assert report.label(Result.from_json(doc, "t")) == "sim-mainline (simulated, HZ=250)"
