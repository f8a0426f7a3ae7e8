"""Merging moments whose weight sums are so large that their products overflow float64.

Sample weights up to ``2**960`` (the limit :mod:`daskbatch.engine.inputs`
checks) sum to far more than ``2**341``, whose cube the merge formulas of
:class:`~daskbatch.stats.moments.Moments` form. Past :data:`RATIO_FORM_FROM`
the merges take the same terms with the weight sums as shares of their total.
"""

from __future__ import annotations

from typing import Any

from daskbatch._typing import Array

#: Weight sums from here on merge by ratios ``nb / n``: their products and cubes (``na * nb``,
#: ``n ** 3``) would overflow float64 by 2**341. Below it the product forms stay, bitwise as ever
#: (counts without weights never get here).
RATIO_FORM_FROM = 2.0**300


def merged_by_ratios(a: Any, b: Any, n: Array, delta: Array) -> tuple[Array, Array, Array]:
    """Merge ``m2``, ``m3`` and ``m4`` of two moments states with every weight sum as a share of ``n``.

    Parameters
    ----------
    a, b : MomentsState
        The states (their ``n``, ``m2``, ``m3``, ``m4``).
    n : array
        Their summed weight, zeros replaced by one.
    delta : array
        The mean of ``b`` minus that of ``a``.

    Returns
    -------
    m2 : array
        The union's weighted sum of squared deviations.
    m3 : array
        Its sum of cubed deviations.
    m4 : array
        Its sum of fourth powers of deviations.
    """
    fa, fb = a.n / n, b.n / n
    d2 = delta * delta
    m2 = a.m2 + b.m2 + d2 * a.n * fb
    m3 = a.m3 + b.m3 + d2 * delta * a.n * fb * (fa - fb) + 3.0 * delta * (fa * b.m2 - fb * a.m2)
    m4 = (
        a.m4
        + b.m4
        + d2 * d2 * a.n * fb * (fa * fa - fa * fb + fb * fb)
        + 6.0 * d2 * (fa * fa * b.m2 + fb * fb * a.m2)
        + 4.0 * delta * (fa * b.m3 - fb * a.m3)
    )
    return m2, m3, m4
