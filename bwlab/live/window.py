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
    cpus: int | None = None  # the CPUs the group can run on: caps its throttled time (None: no cap)

    @property
    def throttled_pct(self) -> float | None:
        return 100.0 * self.throttled / self.periods if self.periods else None

    @property
    def cpus_used(self) -> float:
        return self.usage_us / (self.seconds * 1e6) if self.seconds > 0 else 0.0

    @property
    def demand_per_capacity(self) -> float | None:
        """What the group ran plus what it was stopped from running, over its periods' quota
        and burst. With `cpus`, the throttled time counts at most what those CPUs could have
        run in the periods besides the usage: it runs from a throttle to the unthrottle, past
        a period's end (periods.py: at demand == quota, two threads on two CPUs, 6.18's
        counters added up to 1.15 quotas a period)."""
        if self.limit.quota_us is None or not self.periods:
            return None
        stopped = self.throttled_us
        if self.cpus is not None:
            stopped = min(stopped, max(0.0, self.cpus * self.periods * self.limit.period_us - self.usage_us))
        return (self.usage_us + stopped) / (self.periods * self.limit.quota_us + self.limit.burst_us)

    @property
    def likely_below(self) -> int:
        """Throttled periods counted as below quota: all of them if the window's demand fits."""
        ratio = self.demand_per_capacity
        return self.throttled if ratio is not None and ratio <= 1 + SLACK else 0


def window(a: Sample, b: Sample, limit: Limit) -> Window:
    return Window(b.t - a.t, b.nr_periods - a.nr_periods, b.nr_throttled - a.nr_throttled,
                  b.usage_us - a.usage_us, b.throttled_us - a.throttled_us, limit)  # fmt: skip
