"""Summary statistics for repeated measurements and latency samples, and the intervals
`bwlab compare` draws its conclusions from."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def summarize(values: Sequence[float]) -> dict[str, float | int | None]:
    """n, mean, min, max and sample stdev (None for fewer than two values)."""
    vals = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if not vals:
        return {"n": 0, "mean": None, "min": None, "max": None, "stdev": None}
    return {
        "n": len(vals),
        "mean": statistics.fmean(vals),
        "min": min(vals),
        "max": max(vals),
        "stdev": statistics.stdev(vals) if len(vals) > 1 else None,
    }


def percentile(samples: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of unsorted samples."""
    if not samples:
        raise ValueError("percentile of no samples")
    if not 0 <= p <= 100:
        raise ValueError(f"percentile {p} outside 0..100")
    ordered = sorted(samples)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return float(ordered[min(rank, len(ordered)) - 1])


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
            last = d * c
        if abs(last - 1.0) < 1e-14:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with df (> 0, not necessarily whole) degrees of freedom."""
    tail = 0.5 * betainc(df / 2, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The p-quantile (0 < p < 1) of Student's t, by bisection on t_cdf."""
    if not 0 < p < 1 or df <= 0:
        raise ValueError(f"t quantile needs 0 < p < 1 and df > 0, got p={p}, df={df}")
    lo, hi = -1e6, 1e6
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def welch_df(va: float, na: int, vb: float, nb: int) -> float:
    """Welch-Satterthwaite degrees of freedom of a difference of two means, from the squared
    standard errors va = sa^2/na and vb = sb^2/nb."""
    den = (va * va / (na - 1) if na > 1 else 0.0) + (vb * vb / (nb - 1) if nb > 1 else 0.0)
    return (va + vb) ** 2 / den if den > 0 else math.inf


def ratio_interval(a: Sequence[float], b: Sequence[float],
                   level: float = 0.95) -> tuple[float, float, float]:  # fmt: skip
    """mean(b) / mean(a) and its confidence interval by Fieller's theorem for two independent
    samples (Welch's degrees of freedom). The interval is (-inf, inf) when mean(a) cannot be
    told from 0 at this level: no ratio can then be claimed. Needs two values in each sample."""
    if len(a) < 2 or len(b) < 2:
        raise ValueError("a ratio interval needs at least two values in each sample")
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    if ma == 0:
        raise ValueError("the reference mean is 0: compare differences, not ratios")
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    rho = mb / ma
    df = welch_df(va, len(a), vb, len(b))
    t = 0.0 if df == math.inf and va + vb == 0 else t_quantile(0.5 + level / 2, min(df, 1e7))
    g = t * t * va / (ma * ma)
    if g >= 1:
        return rho, -math.inf, math.inf
    half = (t / abs(ma)) * math.sqrt(vb * (1 - g) + rho * rho * va)
    return rho, (rho - half) / (1 - g), (rho + half) / (1 - g)


def diff_interval(a: Sequence[float], b: Sequence[float],
                  level: float = 0.95) -> tuple[float, float, float]:  # fmt: skip
    """mean(b) - mean(a) and its Welch confidence interval. Needs two values in each sample."""
    if len(a) < 2 or len(b) < 2:
        raise ValueError("a difference interval needs at least two values in each sample")
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    diff = statistics.fmean(b) - statistics.fmean(a)
    if va + vb == 0:
        return diff, diff, diff
    t = t_quantile(0.5 + level / 2, min(welch_df(va, len(a), vb, len(b)), 1e7))
    half = t * math.sqrt(va + vb)
    return diff, diff - half, diff + half


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """Mean and population stdev (nan, nan for no values): a simulated point's seeds."""
    if not values:
        return float("nan"), float("nan")
    return statistics.fmean(values), statistics.pstdev(values) if len(values) > 1 else 0.0
