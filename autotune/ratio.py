"""The figure of a run of steps, tokens over time (the ratio estimator), and its 95% interval:
what a command trial's window measures (command/window.py) and what the search's pruner bounds
(search/prune.py). Standard library only."""

from __future__ import annotations

import math
import statistics

Step = tuple[float, float]  # (seconds, tokens)


def rate(steps: list[Step]) -> float:
    """All the tokens over all the time."""
    seconds = sum(s for s, _ in steps)
    return sum(t for _, t in steps) / seconds if seconds > 0 else 0.0


def _residuals(steps: list[Step]) -> list[float]:
    r = rate(steps)
    return [t - r * s for s, t in steps]


def _t975(dof: int) -> float:
    """Student's 97.5% quantile (Cornish-Fisher's first two terms around the normal's: 1% at 3
    dof)."""
    z = statistics.NormalDist().inv_cdf(0.975)
    return z + (z**3 + z) / (4 * dof) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * dof**2)


def half_width_pct(steps: list[Step]) -> float | None:
    """The figure's 95% interval half-width in percent: var(R) = sum(e^2) / (n (n-1) mean(s)^2)."""
    n = len(steps)
    r = rate(steps)
    if n < 3 or r <= 0:
        return None
    mean_s = statistics.fmean(s for s, _ in steps)
    se = math.sqrt(sum(e * e for e in _residuals(steps)) / (n * (n - 1))) / mean_s
    return 100.0 * _t975(n - 1) * se / r
