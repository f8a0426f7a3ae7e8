"""The quantile transform: each feature through its own CDF, read from a summary's quantiles."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np

from daskbatch._typing import Array
from daskbatch.stats.numerics import as_float64
from daskbatch.transforms.steps._common import PerFeature, block_namespace, digest, origin_of

__all__ = ["QuantileTransform", "quantile_transform"]


# ------------------------------------------------------------------ quantile transform


@dataclass(frozen=True, eq=False)
class QuantileTransform(PerFeature):
    """Each feature mapped through its own CDF onto a uniform or a normal distribution.

    Attributes
    ----------
    quantiles : ndarray of float64, shape (D, Q)
        Each feature's values at the probabilities ``references``.
    references : ndarray of float64, shape (Q,)
        Evenly spaced probabilities from 0 to 1.
    feature_names : tuple of str
    output : {"uniform", "normal"}
    origin : dict
        The summary's provenance (source, created, ddof, rows).
    """

    quantiles: np.ndarray
    references: np.ndarray
    feature_names: tuple[str, ...]
    output: str = "uniform"
    origin: dict[str, Any] = field(default_factory=dict)
    per_feature: ClassVar[tuple[str, ...]] = ("quantiles",)
    step_name: ClassVar[str] = "quantile_transform"

    #: Probabilities this close to 0 or 1 are clipped before the normal's inverse CDF (scikit-learn's bound).
    BOUND = 1e-7

    def apply(self, block: Array) -> Array:
        """Map one block through the features' CDFs.

        Parameters
        ----------
        block : array
            (rows, features).

        Returns
        -------
        array
            The float64 values in [0, 1] (``"uniform"``) or normal scores; NaN stays NaN.
        """
        xp, dev = block_namespace(block)
        x = as_float64(block)
        refs = xp.asarray(self.references, dtype=xp.float64, device=dev)
        columns = []
        for j in range(x.shape[1]):
            q = xp.asarray(self.quantiles[j], dtype=xp.float64, device=dev)
            col = x[:, j]
            # As scikit-learn: interpolate up and down through the quantiles and average, so
            # that a run of equal quantiles (a spike of one value) maps to the middle of its run.
            up = _interp(xp, col, q, refs)
            down = -_interp(xp, -col, xp.flip(-q), xp.flip(-refs))
            u = 0.5 * (up + down)
            u = xp.where(col <= q[0], xp.zeros_like(u), u)
            u = xp.where(col >= q[-1], xp.ones_like(u), u)
            columns.append(xp.where(xp.isnan(col), col, u))
        u = xp.stack(columns, axis=1)
        if self.output == "uniform":
            return u
        return _normal_scores(xp, xp.clip(u, min=self.BOUND - np.spacing(1.0), max=1 - (self.BOUND - np.spacing(1.0))))

    def describe(self) -> dict[str, Any]:
        """Describe the step for the output's provenance.

        Returns
        -------
        dict
            The output distribution, the number of quantiles and their digest.
        """
        return {
            "step": "quantile_transform", "output": self.output, "n_quantiles": len(self.references),
            "features": len(self.feature_names), "sha256": digest(self.quantiles), "summary": self.origin,
        }


def _interp(xp: Any, x: Array, xq: Array, yq: Array) -> Array:
    """``numpy.interp`` in the array API: ``xq`` increasing, values outside take the end values."""
    n = xq.shape[0]
    right = xp.clip(xp.searchsorted(xq, x, side="right"), min=1, max=n - 1)
    left = right - 1
    x0, x1 = xp.take(xq, left), xp.take(xq, right)
    y0, y1 = xp.take(yq, left), xp.take(yq, right)
    width = x1 - x0
    frac = xp.where(width > 0, (x - x0) / xp.where(width > 0, width, xp.ones_like(width)), xp.ones_like(width))
    out = y0 + xp.clip(frac, min=0.0, max=1.0) * (y1 - y0)
    return xp.where(x < xq[0], yq[0], xp.where(x > xq[-1], yq[-1], out))


def _normal_scores(xp: Any, u: Array) -> Array:
    """The standard normal's inverse CDF of probabilities ``u``, on ``u``'s device."""
    if type(u).__module__.startswith("cupy"):
        from cupyx.scipy.special import ndtri
    else:
        try:
            from scipy.special import ndtri  # lazy: scipy
        except ImportError:
            raise ImportError(
                "quantile_transform(output='normal') needs scipy: pip install scipy (or daskbatch[bench])"
            ) from None
    return ndtri(u)


def quantile_transform(
    summary: Any, *, output: Literal["uniform", "normal"] = "uniform", n_quantiles: int = 1000
) -> QuantileTransform:
    """Make a step mapping each feature onto a uniform or normal distribution through its quantiles.

    scikit-learn's ``QuantileTransformer(n_quantiles, output_distribution)``,
    with the quantiles read from the summary (:meth:`Summary.quantile`, within
    its stated rank accuracy) instead of from a subsample of the data.

    Parameters
    ----------
    summary : Summary
        From :func:`daskbatch.describe`, with quantiles (the default statistics).
    output : {"uniform", "normal"}, default "uniform"
        The distribution of the outputs.
    n_quantiles : int, default 1000
        Points of each feature's CDF kept in the step.

    Returns
    -------
    QuantileTransform
        The step.
    """
    if output not in ("uniform", "normal"):
        raise ValueError(f"quantile_transform: output must be 'uniform' or 'normal', got {output!r}")
    if isinstance(n_quantiles, bool) or int(n_quantiles) != n_quantiles or n_quantiles < 2:
        raise ValueError(f"quantile_transform: n_quantiles must be an integer >= 2, got {n_quantiles!r}")
    refs = np.linspace(0.0, 1.0, int(n_quantiles))
    q = np.asarray(summary.quantile(refs), dtype=np.float64)
    # Monotone by construction, made strictly so against rounding as scikit-learn does (np.maximum.accumulate).
    q = np.maximum.accumulate(q, axis=1)
    return QuantileTransform(quantiles=q, references=refs, feature_names=tuple(str(n) for n in summary.feature_names),
                             output=output, origin=origin_of(summary))
