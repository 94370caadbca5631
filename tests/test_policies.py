from __future__ import annotations

import pytest

from bwlab import scenario
from bwlab.errors import BwlabError
from bwlab.kernel import policies
from bwlab.targets.plan import SCHED_FEATURES, parse_records, render_plan

from conftest import DATA


def test_feature_writes_cover_every_switch() -> None:
    assert policies.feature_writes("all") == [f if f != "BW_SLUSH" else "NO_BW_SLUSH" for f in policies.FEATURES]
    assert policies.feature_writes("mainline") == [f"NO_{f}" for f in policies.FEATURES]
    slush = policies.feature_writes("slush")
    assert "BW_SLUSH" in slush and "NO_BW_CLIP_SLICE" in slush and len(slush) == len(policies.FEATURES)
    with pytest.raises(BwlabError, match="unknown policy 'nope'"):
        policies.feature_writes("nope")


def test_every_fix_alone_is_a_policy() -> None:
    singles = [p for p, feats in policies.POLICIES.items() if len(feats) == 1]
    assert sorted(f for p in singles for f in policies.POLICIES[p]) == sorted(policies.FEATURES)


def test_parse_features_reads_only_the_series_switches() -> None:
    text = "PLACE_LAG NO_NEXT_BUDDY BW_SLUSH NO_BW_CLIP_SLICE BW_NOOP_UPDATE\n"
    assert policies.parse_features(text) == {"BW_SLUSH": True, "BW_CLIP_SLICE": False, "BW_NOOP_UPDATE": True}
    assert policies.parse_features("") == {}


def test_plan_writes_features_before_the_first_case() -> None:
    specs = scenario.load(DATA / "table2-10ms.toml").resolve(2)
    plan = render_plan(specs, policies.feature_writes("slush"))
    first_case = plan.index("BWLAB-BEGIN")
    for feat in policies.feature_writes("slush"):
        assert plan.index(f"echo {feat} > {SCHED_FEATURES}") < first_case
    assert "BWLAB-FEATURES" in plan
    assert "sched/features ||" not in render_plan(specs)  # no policy: nothing written


def test_results_channel_carries_features() -> None:
    out = parse_records("BWLAB-FEATURES PLACE_LAG BW_SLUSH NO_BW_CLIP_SLICE\nBWLAB-DONE\n")
    assert policies.parse_features(out.features) == {"BW_SLUSH": True, "BW_CLIP_SLICE": False}


def test_leave_one_out_policies() -> None:
    for feat in policies.SERIES:
        (single,) = [p for p, f in policies.POLICIES.items() if f == (feat,)]
        rest = policies.POLICIES[f"no-{single}"]
        assert feat not in rest and len(rest) == len(policies.SERIES) - 1
    assert "no-slush" not in policies.POLICIES


def test_all_is_the_posted_series_and_all_slush_its_first_version() -> None:
    """`all` has every switch of the posted series and not the lab's slush fund; `all-slush` is
    series v1: the slush fund where v2 has the default burst."""
    assert set(policies.POLICIES["all"]) == set(policies.FEATURES) - {"BW_SLUSH"}
    assert set(policies.POLICIES["all-slush"]) == set(policies.FEATURES) - {"BW_DEFAULT_BURST"}
