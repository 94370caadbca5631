"""Bandwidth policies: which of the kernel series' sched_feat switches a guest runs with.

The posted series has no switches. The lab builds kernel/lab/series: the series, LAGS and a
lab-only patch that puts every fix behind a `sched_feat` switch (default on), so one image can
be measured as mainline (all off), slush fund only, each fix alone, or everything, as in the
paper's Baseline / Slush / All. A policy is applied by writing the switches to
/sys/kernel/debug/sched/features before the scenario's first case.
"""

from __future__ import annotations

from bwlab.errors import BwlabError

# The series' switches, in patch order.
FEATURES = (
    "BW_UNTHROTTLE_RETRY",  # an unthrottle that finds its grant used up asks the pool again
    "BW_SLUSH",  # slush fund: pay carried-over debt from last period's unused runtime
    "BW_CLIP_SLICE",  # (a) grant no more than the time left in the period
    "BW_EARLY_REFILL",  # (c) refill an overdue period instead of throttling
    "BW_NOOP_UPDATE",  # identical cpu.max / cpu.max.burst writes change nothing
)

POLICIES: dict[str, tuple[str, ...]] = {
    "mainline": (),
    "slush": ("BW_SLUSH",),
    "slush-clip": ("BW_SLUSH", "BW_CLIP_SLICE"),  # the series' RFC pair, set against cpu.max.burst
    "unthrottle-retry": ("BW_UNTHROTTLE_RETRY",),
    "clip-slice": ("BW_CLIP_SLICE",),
    "early-refill": ("BW_EARLY_REFILL",),
    "noop-update": ("BW_NOOP_UPDATE",),
    "all": FEATURES,
}
# Leave-one-out: every switch but one, to show what each fix adds to the others.
POLICIES.update({f"no-{name}": tuple(f for f in FEATURES if f not in feats)
                 for name, feats in list(POLICIES.items()) if len(feats) == 1})  # fmt: skip


def names() -> list[str]:
    return list(POLICIES)


def feature_writes(policy: str) -> list[str]:
    """The strings to write to sched/features, one per switch: 'BW_SLUSH' or 'NO_BW_SLUSH'."""
    if policy not in POLICIES:
        raise BwlabError(f"unknown policy '{policy}' (known: {', '.join(POLICIES)})")
    on = set(POLICIES[policy])
    return [name if name in on else f"NO_{name}" for name in FEATURES]


def parse_features(text: str) -> dict[str, bool]:
    """The BW_* switches a sched/features file shows ('BW_X' on, 'NO_BW_X' off)."""
    state: dict[str, bool] = {}
    for word in text.split():
        name = word.removeprefix("NO_")
        if name in FEATURES:
            state[name] = not word.startswith("NO_")
    return state
