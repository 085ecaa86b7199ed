"""Success rates with their uncertainty: the Wilson interval, and pass@k's unbiased estimator.

A success rate measured on n held-out episodes is a binomial proportion: the Wilson score
interval (Wilson 1927) is the one to report at the sizes lmgym evaluates (tens to hundreds),
where the normal approximation is off near 0% and 100%. pass@k is the chance that at least one
of k samples succeeds, estimated without bias from n >= k samples with c successes as
1 - C(n - c, k) / C(n, k) (Chen et al. 2021, "Evaluating Large Language Models Trained on Code").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

Z95 = 1.959963984540054
"""The standard normal quantile of a two-sided 95% interval."""


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval (95% by default) of ``successes`` out of ``n``.

    Example:
        >>> [round(x, 3) for x in wilson(45, 100)]
        [0.356, 0.548]
        >>> wilson(0, 20)[0], round(wilson(0, 20)[1], 3), wilson(0, 0)
        (0.0, 0.161, (0.0, 1.0))
    """
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def mean_interval(values: Sequence[float], z: float = Z95) -> tuple[float, float]:
    """The normal 95% interval of a mean (a score, a return): mean -+ z * sample std / sqrt(n).

    Example:
        >>> [round(x, 3) for x in mean_interval([0.0, 1.0, 0.5, 0.5])]
        [0.1, 0.9]
        >>> mean_interval([0.25]), mean_interval([])
        ((0.25, 0.25), (0.0, 0.0))
    """
    if not values:
        return 0.0, 0.0
    mean = statistics.fmean(values)
    half = z * statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
    return mean - half, mean + half


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate of pass@k from ``n`` samples with ``c`` successes (``k <= n``).

    Example:
        >>> pass_at_k(4, 0, 2), pass_at_k(4, 1, 1), round(pass_at_k(4, 1, 2), 4), pass_at_k(4, 3, 2)
        (0.0, 0.25, 0.5, 1.0)
    """
    if not 0 < k <= n:
        raise ValueError(f"pass@k needs 0 < k <= n, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def mean_pass_at_k(counts: Sequence[tuple[int, int]], k: int) -> float:
    """pass@k over tasks, from each task's ``(n, c)``: the mean of ``pass_at_k``."""
    return sum(pass_at_k(n, c, k) for n, c in counts) / max(1, len(counts))


__all__ = ["Z95", "mean_interval", "mean_pass_at_k", "pass_at_k", "wilson"]
