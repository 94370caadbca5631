"""Throttling of many groups over windows of seconds (bwlab top): a window's demand is its usage
plus its throttled time, its capacity its periods times the quota (plus burst). Throttled
periods in a window whose demand fits in its capacity are counted as *likely below quota*:
coarser than doctor's per-period verdict (a window mixes periods), cheap enough for a node.
"""

from __future__ import annotations

from dataclasses import dataclass

from bwlab.periods import SLACK, Limit, Sample


@dataclass(frozen=True)
class Window:
    seconds: float
    periods: int
    throttled: int
    usage_us: float
    throttled_us: float
    limit: Limit

    @property
    def throttled_pct(self) -> float | None:
        return 100.0 * self.throttled / self.periods if self.periods else None

    @property
    def cpus_used(self) -> float:
        return self.usage_us / (self.seconds * 1e6) if self.seconds > 0 else 0.0

    @property
    def demand_per_capacity(self) -> float | None:
        if self.limit.quota_us is None or not self.periods:
            return None
        return (self.usage_us + self.throttled_us) / (self.periods * self.limit.quota_us + self.limit.burst_us)

    @property
    def likely_below(self) -> int:
        """Throttled periods counted as below quota: all of them if the window's demand fits."""
        ratio = self.demand_per_capacity
        return self.throttled if ratio is not None and ratio <= 1 + SLACK else 0


def window(a: Sample, b: Sample, limit: Limit) -> Window:
    return Window(b.t - a.t, b.nr_periods - a.nr_periods, b.nr_throttled - a.nr_throttled,
                  b.usage_us - a.usage_us, b.throttled_us - a.throttled_us, limit)  # fmt: skip
