"""Covariance and Pearson correlation matrices from mergeable co-moments.

Rows with any non-finite value are left out (complete cases), and the number
of rows used is reported. Each chunk forms its co-moment matrix as one GEMM
on centred float64 data (BLAS on the CPU, cuBLAS on the GPU), about a
per-chunk reference row as in :mod:`daskbatch.stats.moments`; states merge
with the co-moment update ``C = C_a + C_b + n_a n_b / n · δδᵀ``.
"""

from __future__ import annotations

from dataclasses import dataclass

from daskbatch import kernels
from daskbatch._typing import Array, Namespace
from daskbatch.backend import device, namespace
from daskbatch.stats._base import as_float64, safe_divisor


@dataclass(frozen=True, eq=False)
class CoMomentsState:
    """``n`` complete rows (0-d), their mean ``shift + mean`` (D,) and co-moment matrix ``c`` (D, D)."""

    n: Array
    shift: Array
    mean: Array
    c: Array


@dataclass(frozen=True, eq=False)
class CoMomentsResult:
    """Covariance and correlation (D, D) from ``n`` complete rows, and their means (D,)."""

    n: Array
    mean: Array
    cov: Array
    corr: Array


def empty_comoments(xp: Namespace, n_features: int, dev: object = None) -> CoMomentsState:
    """The identity of :meth:`CoMoments.merge`."""
    zeros = xp.zeros((n_features,), dtype=xp.float64, device=dev)
    return CoMomentsState(
        n=xp.zeros((), dtype=xp.float64, device=dev),
        shift=zeros,
        mean=zeros,
        c=xp.zeros((n_features, n_features), dtype=xp.float64, device=dev),
    )


def _outer(xp: Namespace, a: Array, b: Array) -> Array:
    return a[:, None] * b[None, :]


@dataclass(frozen=True)
class CoMoments:
    """Sample covariance and Pearson correlation over axis 0, complete cases only.

    Parameters
    ----------
    ddof : int, default 1
        Delta degrees of freedom of the covariance.
    """

    ddof: int = 1
    name = "cov"
    #: Couples all features: a chunk must span every column.
    joint = True

    def chunk(self, x: Array, y: Array | None = None, /) -> CoMomentsState:
        xp = namespace(x)
        rows, n_features = x.shape
        if rows == 0:
            return empty_comoments(xp, n_features, device(x))
        if kernels.supports(x):  # compiled CPU centring + one GEMM, same state (daskbatch/kernels)
            return CoMomentsState(*kernels.comoments(x))
        x = as_float64(x)
        complete = xp.all(xp.isfinite(x), axis=1)
        n = xp.sum(xp.astype(complete, xp.float64))
        first = xp.argmax(xp.astype(complete, xp.int8), keepdims=True)
        shift = xp.where(n > 0, xp.take(x, first, axis=0)[0, :], xp.zeros_like(x[0, :]))
        keep = complete[:, None]
        zero = xp.zeros_like(x)
        y_shift = xp.where(keep, x - shift, zero)
        n_safe = safe_divisor(xp, n)
        approx_mean = xp.sum(y_shift, axis=0) / n_safe
        dev = xp.where(keep, y_shift - approx_mean, zero)
        del y_shift, zero
        # Corrected two-pass: the residual mean of the deviations removes the
        # rounding of `approx_mean` from the co-moments.
        e = xp.sum(dev, axis=0) / n_safe
        c = xp.matmul(xp.matrix_transpose(dev), dev) - n * _outer(xp, e, e)
        return CoMomentsState(n=n, shift=shift, mean=approx_mean + e, c=c)

    def merge(self, a: CoMomentsState, b: CoMomentsState, /) -> CoMomentsState:
        xp = namespace(a.c, b.c)
        n = a.n + b.n
        n_safe = safe_divisor(xp, n)
        shift = xp.where(a.n > 0, a.shift, b.shift)
        mean_a = (a.shift - shift) + a.mean
        mean_b = (b.shift - shift) + b.mean
        # Zero against an empty side, whose foreign shift would make delta the whole
        # mean: its square overflows for |mean| above ~1e154 and inf * 0 gives NaN.
        delta = xp.where((a.n > 0) & (b.n > 0), mean_b - mean_a, xp.zeros_like(mean_a))
        mean = xp.where(a.n > 0, xp.where(b.n > 0, mean_a + delta * (b.n / n_safe), mean_a), mean_b)
        c = a.c + b.c + (a.n * b.n / n_safe) * _outer(xp, delta, delta)
        return CoMomentsState(n=n, shift=shift, mean=mean, c=c)

    def finalize(self, s: CoMomentsState, /) -> CoMomentsResult:
        xp = namespace(s.c)
        dof = s.n - self.ddof
        nan = xp.full_like(s.c, xp.nan)
        cov = xp.where(dof > 0, s.c / safe_divisor(xp, dof), nan)
        diag = xp.linalg.diagonal(s.c) if hasattr(xp, "linalg") else xp.diagonal(s.c)
        varies = diag > 0
        scale = xp.where(varies, 1.0 / xp.sqrt(xp.where(varies, diag, xp.ones_like(diag))), xp.nan)
        corr = xp.clip(s.c * _outer(xp, scale, scale), -1.0, 1.0)
        eye = xp.eye(diag.shape[0], dtype=xp.bool, device=device(s.c))
        corr = xp.where(eye & varies[:, None], xp.ones_like(corr), corr)
        corr = xp.where(s.n > 1, corr, nan)
        mean = xp.where(s.n > 0, s.shift + s.mean, xp.full_like(s.mean, xp.nan))
        return CoMomentsResult(n=s.n, mean=mean, cov=cov, corr=corr)
