"""Bandwidth policies: which of the kernel series' sched_feat switches a guest runs with.

The posted series has no switches. The lab builds kernel/lab/series: the series, LAGS, the
paper's slush fund (kernel/slush/, the alternative the series' default burst replaced), the
lock-free pool RFC and a lab-only patch that puts every fix behind a `sched_feat` switch, so one
image can be measured as mainline (all off), each fix alone, the posted series (`all`), or the
paper's Baseline / Slush / All (`mainline`, `slush`, `all-slush`). A policy is applied by
writing the switches to /sys/kernel/debug/sched/features before the scenario's first case; an
image run without a policy has every switch on but the slush fund's.
"""

from __future__ import annotations

from bwlab.errors import BwlabError

# The switches, in patch order: the posted series', then the lab's slush fund.
FEATURES = (
    "BW_UNTHROTTLE_RETRY",  # 0001: an unthrottle that finds its grant used up asks the pool again
    "BW_NOOP_UPDATE",  # 0002: identical cpu.max / cpu.max.burst writes change nothing
    "BW_CLIP_SLICE",  # 0003: grant no more than the time left in the period
    "BW_DEFAULT_BURST",  # 0004: no burst set: carry over a tick per CPU the quota buys
    "BW_EARLY_REFILL",  # 0005: refill an overdue period instead of throttling
    "BW_SLUSH",  # the paper's slush fund: pay carried-over debt from last period's unused runtime
)
SERIES = tuple(f for f in FEATURES if f != "BW_SLUSH")

POLICIES: dict[str, tuple[str, ...]] = {
    "mainline": (),
    "unthrottle-retry": ("BW_UNTHROTTLE_RETRY",),
    "noop-update": ("BW_NOOP_UPDATE",),
    "clip-slice": ("BW_CLIP_SLICE",),
    "default-burst": ("BW_DEFAULT_BURST",),
    "early-refill": ("BW_EARLY_REFILL",),
    "slush": ("BW_SLUSH",),
    "burst-clip": ("BW_DEFAULT_BURST", "BW_CLIP_SLICE"),  # the series' pair against the debt
    "slush-clip": ("BW_SLUSH", "BW_CLIP_SLICE"),  # v1's pair, the default burst's rival
    "all": SERIES,  # the posted series
    "all-slush": tuple(f if f != "BW_DEFAULT_BURST" else "BW_SLUSH" for f in SERIES),  # series v1
}
# Leave-one-out: the posted series but one switch, to show what each fix adds to the others.
POLICIES.update({f"no-{name}": tuple(f for f in SERIES if f not in feats)
                 for name, feats in list(POLICIES.items()) if len(feats) == 1 and feats[0] in SERIES})  # fmt: skip


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
