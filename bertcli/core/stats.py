"""Statistics over repeated runs (seeds): the summary of one arm, and Welch's t-test between two.

Pure Python (no numpy, scipy or torch), so that `bertcli compare` starts fast and reads
summaries on any machine; the tests check every figure against `statistics`, numpy and
`scipy.stats.ttest_ind(equal_var=False)`.

The conventions, chosen so that the figures mean what the papers' do:
- sd is the sample standard deviation (ddof = 1); it is None for n < 2 (undefined, not 0).
- The median of an even n is the mean of the middle two.
- Nothing here returns NaN or an infinity: JSON cannot hold them. An undefined figure is None,
  and a test that cannot be run says why.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


def summarize(values: Sequence[float]) -> dict:
    """n, mean, sd (ddof 1), median, min, max and the values themselves, in their order."""
    xs = [float(v) for v in values]
    if not xs:
        return {"n": 0, "mean": None, "sd": None, "median": None, "min": None, "max": None, "values": []}
    return {"n": len(xs), "mean": statistics.fmean(xs), "sd": statistics.stdev(xs) if len(xs) > 1 else None,
            "median": statistics.median(xs), "min": min(xs), "max": max(xs), "values": xs}


@dataclass(frozen=True)
class Welch:
    """Welch's two-sided t-test of mean(a) - mean(b). `p` is None when the test cannot be run,
    and `reason` says why (fewer than two values in an arm, or no variance in either)."""

    diff: float | None
    t: float | None = None
    df: float | None = None
    p: float | None = None
    reason: str | None = None


def welch(a: Sequence[float], b: Sequence[float]) -> Welch:
    """Welch's unequal-variance t-test, two-sided, with Welch-Satterthwaite degrees of freedom."""
    a, b = [float(v) for v in a], [float(v) for v in b]
    diff = statistics.fmean(a) - statistics.fmean(b) if a and b else None
    if len(a) < 2 or len(b) < 2:
        return Welch(diff, reason=f"n = {len(a)} and {len(b)}: a test needs at least 2 values per arm")
    # variance of each mean: s^2 / n
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    if va + vb == 0.0:
        return Welch(diff, reason="no variance in either arm (every run gave the same figure)")
    assert diff is not None
    t = diff / math.sqrt(va + vb)
    # Welch-Satterthwaite (va + vb)^2 / (va^2 / (na - 1) + vb^2 / (nb - 1)), written with each
    # arm's share of the variance so that squaring tiny variances cannot underflow to 0 / 0
    wa, wb = va / (va + vb), vb / (va + vb)
    df = 1.0 / (wa ** 2 / (len(a) - 1) + wb ** 2 / (len(b) - 1))
    return Welch(diff, t=t, df=df, p=t_two_sided_p(t, df))


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with `df` (real, > 0) degrees of freedom:
    I_x(df/2, 1/2) with x = df / (df + t^2), the regularized incomplete beta function."""
    if not math.isfinite(t):
        return 0.0
    return regularized_beta(df / (df + t * t), df / 2.0, 0.5)


def regularized_beta(x: float, a: float, b: float) -> float:
    """I_x(a, b) for a, b > 0 and 0 <= x <= 1, by its continued fraction (modified Lentz),
    evaluated on the side of the symmetry I_x(a, b) = 1 - I_{1-x}(b, a) where it converges fast."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    # x^a (1-x)^b / (a B(a, b)), through log-gamma so that large a, b do not overflow
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_fraction(x, a, b) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(1.0 - x, b, a) / b


def _beta_fraction(x: float, a: float, b: float, tolerance: float = 1e-15, max_terms: int = 10_000) -> float:
    """The continued fraction 1 / (1 + d1 / (1 + d2 / (1 + ...))) of the incomplete beta
    function, with d_{2m+1} = -(a+m)(a+b+m) x / ((a+2m)(a+2m+1)) and
    d_{2m} = m (b-m) x / ((a+2m-1)(a+2m)), evaluated by the modified Lentz method."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, max_terms + 1):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= c * d
        if abs(c * d - 1.0) < tolerance:
            return result
    return result


def holm(ps: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given. With the m p-values sorted
    ascending, the i-th (i from 1) becomes (m - i + 1) p_(i), kept non-decreasing along that
    order and at most 1: rejecting where the adjusted p < alpha holds the family-wise error rate
    at alpha, whatever the dependence between the tests."""
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    adjusted = [0.0] * len(ps)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(ps) - rank) * float(ps[i])))
        adjusted[i] = running
    return adjusted
