"""Steps of :func:`daskbatch.transform`: small frozen dataclasses that turn a block of rows into another.

>>> import daskbatch as db
>>> steps = [db.steps.select(selection), db.steps.standardize(summary),      # doctest: +SKIP
...          db.steps.clip(-5, 5)]
>>> db.transform("data.zarr", steps, out="z.zarr")                         # doctest: +SKIP

Each step has

``apply(block)``
    the (rows, features) block transformed, written against the array API
    standard, so NumPy and CuPy blocks both work (and stay where they are);
``output_features(names)``
    the names of the output columns for input columns ``names``;
``bind(names)``
    the step fitted to input columns ``names`` (``standardize`` picks the
    mean and std of the columns a ``select`` kept); it raises ``ValueError``
    naming the mismatch when the step cannot apply to those columns;
``describe()``
    a JSON-able description, stored as provenance (and compared on resume).

The constructors (:func:`select`, :func:`standardize`, :func:`minmax`,
:func:`robust`, :func:`quantile_transform`, :func:`log1p`, :func:`impute`,
:func:`clip`, :func:`project`) live in this module, ``db.steps``, and not at the top level:
``db.select`` already names feature *selection* from a summary.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from daskbatch._typing import Array

__all__ = [
    "Clip", "Impute", "Log1p", "Project", "QuantileTransform", "Rescale", "Select", "Standardize", "Step",
    "apply_all", "bind_all", "clip", "impute", "log1p", "minmax", "project", "quantile_transform", "robust",
    "select", "standardize",
]


class Step(Protocol):
    """What :func:`daskbatch.transform` needs of a step."""

    def bind(self, names: tuple[str, ...]) -> Step:
        """Fit the step to input columns ``names``, or raise a one-line error naming the mismatch.

        Parameters
        ----------
        names : tuple of str
            The input's feature names.

        Returns
        -------
        Step
            The step for those columns.
        """
        ...

    def apply(self, block: Array) -> Array:
        """Transform one block of rows.

        Parameters
        ----------
        block : array
            NumPy or CuPy, (rows, input features).

        Returns
        -------
        array
            (rows, output features), on the block's device.
        """
        ...

    def output_features(self, names: tuple[str, ...]) -> tuple[str, ...]:
        """Name the output columns.

        Parameters
        ----------
        names : tuple of str
            The input's feature names.

        Returns
        -------
        tuple of str
            The output's feature names.
        """
        ...

    def describe(self) -> dict[str, Any]:
        """Describe the step for the output's provenance.

        Returns
        -------
        dict
            JSON-able: ``"step"`` and its settings.
        """
        ...


def _digest(*arrays: np.ndarray) -> str:
    """sha256 of the arrays' float64 bytes: a step's parameters in a few characters of provenance."""
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
    return h.hexdigest()


def _origin(summary: Any) -> dict[str, Any]:
    """Where a summary came from (its provenance ``source`` and ``created``), for the output's provenance."""
    prov = dict(getattr(summary, "provenance", {}) or {})
    return {k: prov.get(k) for k in ("source", "created", "ddof", "rows")}


def _names_differ(expected: tuple[str, ...], got: tuple[str, ...]) -> str:
    if len(expected) != len(got):
        return f"{len(expected)} features ({_short(expected)}), the input has {len(got)} ({_short(got)})"
    i = next(i for i, (a, b) in enumerate(zip(expected, got, strict=True)) if a != b)
    return f"feature {i} named {expected[i]!r}, the input's is {got[i]!r}"


def _short(names: Sequence[str], n: int = 4) -> str:
    return ", ".join(names[:n]) + (", ..." if len(names) > n else "")


def _pick(step: Any, names: tuple[str, ...], fields: tuple[str, ...], what: str) -> Any:
    """``step`` with its per-feature arrays ``fields`` picked for input columns ``names`` (by name)."""
    names = tuple(names)
    if names == step.feature_names:
        return step
    where = {n: i for i, n in enumerate(step.feature_names)}
    missing = [n for n in names if n not in where]
    if missing:
        raise ValueError(f"{what}: the summary has no statistics for {len(missing)} input feature(s): {_short(missing)}")
    idx = np.array([where[n] for n in names], dtype=np.int64)
    return dataclasses.replace(step, feature_names=names, **{f: getattr(step, f)[idx] for f in fields})


def _xp(block: Array) -> tuple[Any, Any]:
    from daskbatch.stats.backend import device, namespace

    return namespace(block), device(block)


# ------------------------------------------------------------------ select


@dataclass(frozen=True, eq=False)
class Select:
    """Keep columns ``indices`` (in that order).

    Attributes
    ----------
    indices : tuple of int
    feature_names : tuple of str or None
        The features the selection was made on; the input must have exactly these.
    """

    indices: tuple[int, ...]
    feature_names: tuple[str, ...] | None = None

    def bind(self, names: tuple[str, ...]) -> Select:
        """Check the selection against the input columns.

        Parameters
        ----------
        names : tuple of str
            The input's feature names.

        Returns
        -------
        Select
            This step.
        """
        if self.feature_names is not None and tuple(names) != self.feature_names:
            raise ValueError(f"select: the selection was made on {_names_differ(self.feature_names, tuple(names))}")
        if max(self.indices) >= len(names):
            raise ValueError(f"select: column {max(self.indices)} asked for, the input has {len(names)} features")
        return self

    def apply(self, block: Array) -> Array:
        """Keep the selected columns of ``block``.

        Parameters
        ----------
        block : array
            (rows, input features).

        Returns
        -------
        array
            (rows, selected features).
        """
        xp, dev = _xp(block)
        return xp.take(block, xp.asarray(self.indices, dtype=xp.int64, device=dev), axis=1)

    def output_features(self, names: tuple[str, ...]) -> tuple[str, ...]:
        """Name the selected columns.

        Parameters
        ----------
        names : tuple of str
            The input's feature names.

        Returns
        -------
        tuple of str
            The selected names.
        """
        self.bind(names)
        return tuple(names[i] for i in self.indices)

    def describe(self) -> dict[str, Any]:
        """Describe the step for the output's provenance.

        Returns
        -------
        dict
            The indices and the input's width.
        """
        return {
            "step": "select", "indices": list(self.indices),
            "n_in": None if self.feature_names is None else len(self.feature_names),
        }


def select(selection: Any) -> Select:
    """Make a step keeping the selected features.

    Parameters
    ----------
    selection : Selection, sequence of int or bool mask
        A :class:`~daskbatch.Selection` (its selected features, checked against
        the input's names), column indices, or one bool per input column.

    Returns
    -------
    Select
        The step.
    """
    names = None
    if hasattr(selection, "indices") and hasattr(selection, "feature_names"):
        names = tuple(str(n) for n in selection.feature_names)
        idx = np.asarray(selection.indices)
    else:
        idx = np.asarray(selection)
        if idx.dtype == bool:
            idx = np.flatnonzero(idx)
    if idx.ndim != 1 or (idx.size and idx.dtype.kind not in "iu"):
        raise TypeError(f"select needs a Selection, integer column indices or a boolean mask, got {selection!r}")
    if idx.size == 0:
        raise ValueError("select: the selection keeps no features")
    if idx.min() < 0:
        raise ValueError(f"select: column indices must be >= 0, got {int(idx.min())}")
    return Select(tuple(int(i) for i in idx), names)


# ------------------------------------------------------------------ standardize


@dataclass(frozen=True, eq=False)
class Standardize:
    """A step making z-scores ``(x - mean) / std`` in float64.

    Attributes
    ----------
    mean, std : ndarray of float64, shape (D,)
    feature_names : tuple of str
        The features ``mean`` and ``std`` belong to; :meth:`bind` picks those of the input.
    constant : {"zero", "error"}
        Features with ``std == 0``: output 0 (NaN stays NaN), or refuse.
    origin : dict
        The summary's provenance (source, created, ddof, rows).
    """

    mean: np.ndarray
    std: np.ndarray
    feature_names: tuple[str, ...]
    constant: str = "zero"
    origin: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.constant not in ("zero", "error"):
            raise ValueError(f"constant must be 'zero' or 'error', got {self.constant!r}")
        bad = [n for n, m, s in zip(self.feature_names, self.mean, self.std, strict=True)
               if not (np.isfinite(m) and np.isfinite(s))]
        if bad:
            raise ValueError(f"standardize: no finite mean/std for {len(bad)} feature(s): {_short(bad)}")
        if self.constant == "error":
            flat = [n for n, s in zip(self.feature_names, self.std, strict=True) if s == 0]
            if flat:
                raise ValueError(
                    f"standardize: {len(flat)} constant feature(s) (std 0): {_short(flat)}; "
                    "drop them with a select step, or use constant='zero'"
                )

    def bind(self, names: tuple[str, ...]) -> Standardize:
        """Pick the means and stds of the input's columns.

        Parameters
        ----------
        names : tuple of str
            The input's feature names, all among ``feature_names``.

        Returns
        -------
        Standardize
            The step for those columns.
        """
        return _pick(self, names, ("mean", "std"), "standardize")

    def apply(self, block: Array) -> Array:
        """Standardize one block.

        Parameters
        ----------
        block : array
            (rows, features).

        Returns
        -------
        array
            The float64 z-scores.
        """
        from daskbatch.stats._base import as_float64

        xp, dev = _xp(block)
        if block.shape[1] != self.mean.shape[0]:
            raise ValueError(f"standardize: block has {block.shape[1]} columns, expected {self.mean.shape[0]}")
        mean = xp.asarray(self.mean, dtype=xp.float64, device=dev)
        std = xp.asarray(self.std, dtype=xp.float64, device=dev)
        flat = std == 0
        z = (as_float64(block) - mean) / xp.where(flat, xp.ones_like(std), std)
        if self.constant == "zero" and bool(xp.any(flat)):
            # z - z is +0.0 for finite z and NaN for NaN or inf: constant features become 0, missing stays missing.
            z = xp.where(flat, z - z, z)
        return z

    def output_features(self, names: tuple[str, ...]) -> tuple[str, ...]:
        """Name the output columns: those of the input.

        Parameters
        ----------
        names : tuple of str
            The input's feature names.

        Returns
        -------
        tuple of str
            The same names.
        """
        return self.bind(names).feature_names

    def describe(self) -> dict[str, Any]:
        """Describe the step for the output's provenance.

        Returns
        -------
        dict
            Feature count, constant handling, a digest of mean and std, and the summary's origin.
        """
        return {
            "step": "standardize", "features": len(self.feature_names), "constant": self.constant,
            "constant_features": int(np.sum(self.std == 0)), "sha256": _digest(self.mean, self.std),
            "summary": self.origin,
        }


def standardize(
    summary: Any, *, constant: Literal["zero", "error"] = "zero", ddof: int | None = 0
) -> Standardize:
    """Make a step making z-scores from a summary's mean and standard deviation.

    Parameters
    ----------
    summary : Summary
        From :func:`daskbatch.describe`.
    constant : {"zero", "error"}, default "zero"
        Constant features (std 0): their z-score is 0 (like scikit-learn's
        ``StandardScaler``, whose scale 1 gives 0 on the data it was fitted
        on), or a ``ValueError`` naming them.
    ddof : int or None, default 0
        The standard deviation divides by ``n - ddof``: 0, the population
        std, is what scikit-learn's ``StandardScaler`` uses, whatever ddof the
        summary was described with; None takes the summary's own ``std``
        (``summary.provenance["ddof"]``).

    Returns
    -------
    Standardize
        The step.
    """
    std = np.asarray(summary.std, dtype=np.float64)
    if ddof is not None:
        ddof = int(ddof)
        own = int(summary.provenance.get("ddof", 1))
        n = np.asarray(summary.count, dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            # var_ddof = M2 / (n - ddof): rescale the summary's variance to the asked divisor.
            std = np.sqrt(std * std * (n - own) / (n - ddof))
    return Standardize(
        mean=np.asarray(summary.mean, dtype=np.float64), std=std,
        feature_names=tuple(str(n) for n in summary.feature_names), constant=constant,
        origin=_origin(summary),
    )


# ------------------------------------------------------------------ clip


@dataclass(frozen=True)
class Clip:
    """Values limited to ``[lo, hi]`` (either may be None); NaN stays NaN.

    Floating blocks keep their dtype; others are clipped in float64.
    """

    lo: float | None = None
    hi: float | None = None

    def __post_init__(self) -> None:
        if self.lo is None and self.hi is None:
            raise ValueError("clip needs lo, hi or both")
        for v in (self.lo, self.hi):
            if v is not None and np.isnan(v):
                raise ValueError("clip bounds must not be NaN")
        if self.lo is not None and self.hi is not None and self.lo > self.hi:
            raise ValueError(f"clip: lo {self.lo} is above hi {self.hi}")

    def bind(self, names: tuple[str, ...]) -> Clip:
        """Accept any columns.

        Parameters
        ----------
        names : tuple of str
            The input's feature names.

        Returns
        -------
        Clip
            This step.
        """
        return self

    def apply(self, block: Array) -> Array:
        """Clip one block (integers become float64 first).

        Parameters
        ----------
        block : array
            (rows, features).

        Returns
        -------
        array
            The clipped block.
        """
        from daskbatch.stats._base import as_float64

        xp, _ = _xp(block)
        if not xp.isdtype(block.dtype, "real floating"):
            block = as_float64(block)
        return xp.clip(block, min=self.lo, max=self.hi)

    def output_features(self, names: tuple[str, ...]) -> tuple[str, ...]:
        """Name the output columns: those of the input.

        Parameters
        ----------
        names : tuple of str
            The input's feature names.

        Returns
        -------
        tuple of str
            The same names.
        """
        return tuple(names)

    def describe(self) -> dict[str, Any]:
        """Describe the step for the output's provenance.

        Returns
        -------
        dict
            The bounds.
        """
        return {"step": "clip", "lo": self.lo, "hi": self.hi}


def clip(lo: float | None = None, hi: float | None = None) -> Clip:
    """Make a step limiting values to ``[lo, hi]``.

    Parameters
    ----------
    lo, hi : float, optional
        The bounds; None leaves that side open.

    Returns
    -------
    Clip
        The step.
    """
    return Clip(None if lo is None else float(lo), None if hi is None else float(hi))


# ------------------------------------------------------------------ project


@dataclass(frozen=True, eq=False)
class Project:
    """Centred projection onto principal components: ``(x - pca.mean) @ pca.components.T`` in float64.

    Output columns are named ``pc1``, ``pc2``, ...
    """

    pca: Any
    origin: dict[str, Any] = field(default_factory=dict)

    def bind(self, names: tuple[str, ...]) -> Project:
        """Check that the input has the features the PCA was fitted on.

        Parameters
        ----------
        names : tuple of str
            The input's feature names.

        Returns
        -------
        Project
            This step.
        """
        expected = tuple(self.pca.feature_names)
        if tuple(names) != expected:
            raise ValueError(
                f"project: the PCA was fitted on {_names_differ(expected, tuple(names))}; "
                "project the features it was fitted on (a select step first, or a PCA of the selected features)"
            )
        return self

    def apply(self, block: Array) -> Array:
        """Project one block onto the components.

        Parameters
        ----------
        block : array
            (rows, features).

        Returns
        -------
        array
            (rows, n_components).
        """
        return self.pca.transform(block)

    def output_features(self, names: tuple[str, ...]) -> tuple[str, ...]:
        """Name the components ``pc1``, ``pc2``, ...

        Parameters
        ----------
        names : tuple of str
            The input's feature names.

        Returns
        -------
        tuple of str
            The component names.
        """
        self.bind(names)
        return tuple(f"pc{i + 1}" for i in range(self.pca.n_components))

    def describe(self) -> dict[str, Any]:
        """Describe the step for the output's provenance.

        Returns
        -------
        dict
            Components, features, method, a digest of the PCA and the summary's origin.
        """
        return {
            "step": "project", "n_components": self.pca.n_components, "features": len(self.pca.feature_names),
            "method": self.pca.method, "whiten": self.pca.whiten, "correlation": self.pca.scale is not None,
            "sha256": _digest(self.pca.mean, self.pca.components, self.pca.explained_variance, np.array([self.pca.whiten]),
                              *(() if self.pca.scale is None else (self.pca.scale,))),
            "summary": self.origin,
        }


def project(pca_or_summary: Any, n_components: int | None = None) -> Project:
    """Make a step projecting onto principal components.

    Parameters
    ----------
    pca_or_summary : PCA or Summary
        A fitted :class:`~daskbatch.PCA`, or a summary with a covariance (then
        ``n_components`` is required and :func:`daskbatch.pca` fits it).
    n_components : int, optional
        Components to keep; required with a summary.

    Returns
    -------
    Project
        The step.
    """
    if hasattr(pca_or_summary, "components"):
        if n_components is not None and n_components != pca_or_summary.n_components:
            raise ValueError(f"the PCA has {pca_or_summary.n_components} components, not {n_components}")
        return Project(pca_or_summary)
    if n_components is None:
        raise TypeError("project(summary, n_components): give the number of components")
    from daskbatch.pca import pca

    return Project(pca(pca_or_summary, n_components), origin=_origin(pca_or_summary))


# ------------------------------------------------------------------ rescale (min-max, robust)


@dataclass(frozen=True, eq=False)
class Rescale:
    """Per-feature affine scaling ``(x - center) / scale`` in float64 (min-max and robust scaling).

    Attributes
    ----------
    center, scale : ndarray of float64, shape (D,)
        A zero scale is taken as 1, as scikit-learn's scalers do.
    feature_names : tuple of str
        The features ``center`` and ``scale`` belong to; :meth:`bind` picks those of the input.
    kind : str
        ``"minmax"`` or ``"robust"``, for the provenance.
    origin : dict
        The summary's provenance (source, created, ddof, rows).
    """

    center: np.ndarray
    scale: np.ndarray
    feature_names: tuple[str, ...]
    kind: str
    origin: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        bad = [n for n, c, w in zip(self.feature_names, self.center, self.scale, strict=True)
               if not (np.isfinite(c) and np.isfinite(w))]
        if bad:
            raise ValueError(f"{self.kind}: no finite statistics for {len(bad)} feature(s): {_short(bad)}")

    def bind(self, names: tuple[str, ...]) -> Rescale:
        """Pick the centres and scales of the input's columns.

        Parameters
        ----------
        names : tuple of str
            The input's feature names, all among ``feature_names``.

        Returns
        -------
        Rescale
            The step for those columns.
        """
        return _pick(self, names, ("center", "scale"), self.kind)

    def apply(self, block: Array) -> Array:
        """Scale one block.

        Parameters
        ----------
        block : array
            (rows, features).

        Returns
        -------
        array
            The float64 scaled values.
        """
        from daskbatch.stats._base import as_float64

        xp, dev = _xp(block)
        if block.shape[1] != self.center.shape[0]:
            raise ValueError(f"{self.kind}: block has {block.shape[1]} columns, expected {self.center.shape[0]}")
        scale = np.where(self.scale == 0, 1.0, self.scale)
        center = xp.asarray(self.center, dtype=xp.float64, device=dev)
        return (as_float64(block) - center) / xp.asarray(scale, dtype=xp.float64, device=dev)

    def output_features(self, names: tuple[str, ...]) -> tuple[str, ...]:
        """Name the output columns: those of the input.

        Parameters
        ----------
        names : tuple of str
            The input's feature names.

        Returns
        -------
        tuple of str
            The same names.
        """
        return self.bind(names).feature_names

    def describe(self) -> dict[str, Any]:
        """Describe the step for the output's provenance.

        Returns
        -------
        dict
            The kind, feature count, a digest of centre and scale, and the summary's origin.
        """
        return {
            "step": self.kind, "features": len(self.feature_names), "sha256": _digest(self.center, self.scale),
            "summary": self.origin,
        }


def minmax(summary: Any, feature_range: tuple[float, float] = (0.0, 1.0)) -> Rescale:
    """Make a step scaling each feature's ``[min, max]`` onto ``feature_range``.

    Equal to scikit-learn's ``MinMaxScaler(feature_range)`` fitted on the
    summarised data (min and max are exact); a constant feature maps to the
    range's lower end.

    Parameters
    ----------
    summary : Summary
        From :func:`daskbatch.describe`.
    feature_range : (float, float), default (0, 1)
        The output range.

    Returns
    -------
    Rescale
        The step.
    """
    a, b = (float(v) for v in feature_range)
    if not a < b:
        raise ValueError(f"minmax: feature_range must be (low, high) with low < high, got {feature_range!r}")
    lo, hi = np.asarray(summary.min, dtype=np.float64), np.asarray(summary.max, dtype=np.float64)
    span = np.where(hi - lo == 0, 1.0, hi - lo)
    # (x - lo) / span * (b - a) + a, written as one centre and one scale.
    return Rescale(center=lo - a * span / (b - a), scale=span / (b - a), kind="minmax",
                   feature_names=tuple(str(n) for n in summary.feature_names), origin=_origin(summary))


def robust(summary: Any, quantile_range: tuple[float, float] = (25.0, 75.0)) -> Rescale:
    """Make a step centring on the median and dividing by the interquartile range.

    scikit-learn's ``RobustScaler(quantile_range)``, with the median and the
    quartiles read from the summary's quantiles (:meth:`Summary.quantile`,
    within its stated accuracy, not exact); a zero range is taken as 1.

    Parameters
    ----------
    summary : Summary
        From :func:`daskbatch.describe`, with quantiles (the default statistics).
    quantile_range : (float, float), default (25, 75)
        Percentiles whose difference is the scale.

    Returns
    -------
    Rescale
        The step.
    """
    q_lo, q_hi = (float(v) for v in quantile_range)
    if not 0 <= q_lo < q_hi <= 100:
        raise ValueError(f"robust: quantile_range must be percentiles 0 <= low < high <= 100, got {quantile_range!r}")
    q = np.asarray(summary.quantile([q_lo / 100, 0.5, q_hi / 100]), dtype=np.float64)
    return Rescale(center=q[:, 1], scale=q[:, 2] - q[:, 0], kind="robust",
                   feature_names=tuple(str(n) for n in summary.feature_names), origin=_origin(summary))


# ------------------------------------------------------------------ quantile transform


@dataclass(frozen=True, eq=False)
class QuantileTransform:
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

    #: Probabilities this close to 0 or 1 are clipped before the normal's inverse CDF (scikit-learn's bound).
    BOUND = 1e-7

    def bind(self, names: tuple[str, ...]) -> QuantileTransform:
        """Pick the quantiles of the input's columns.

        Parameters
        ----------
        names : tuple of str
            The input's feature names, all among ``feature_names``.

        Returns
        -------
        QuantileTransform
            The step for those columns.
        """
        return _pick(self, names, ("quantiles",), "quantile_transform")

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
        from daskbatch.stats._base import as_float64

        xp, dev = _xp(block)
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

    def output_features(self, names: tuple[str, ...]) -> tuple[str, ...]:
        """Name the output columns: those of the input.

        Parameters
        ----------
        names : tuple of str
            The input's feature names.

        Returns
        -------
        tuple of str
            The same names.
        """
        return self.bind(names).feature_names

    def describe(self) -> dict[str, Any]:
        """Describe the step for the output's provenance.

        Returns
        -------
        dict
            The output distribution, the number of quantiles and their digest.
        """
        return {
            "step": "quantile_transform", "output": self.output, "n_quantiles": len(self.references),
            "features": len(self.feature_names), "sha256": _digest(self.quantiles), "summary": self.origin,
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
            from scipy.special import ndtri
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
                             output=output, origin=_origin(summary))


# ------------------------------------------------------------------ log1p and impute


@dataclass(frozen=True)
class Log1p:
    """``log(1 + x)`` in float64, value by value (values below -1 give NaN, as numpy's)."""

    def bind(self, names: tuple[str, ...]) -> Log1p:
        """Accept any columns.

        Parameters
        ----------
        names : tuple of str
            The input's feature names.

        Returns
        -------
        Log1p
            This step.
        """
        return self

    def apply(self, block: Array) -> Array:
        """Take ``log1p`` of one block.

        Parameters
        ----------
        block : array
            (rows, features).

        Returns
        -------
        array
            The float64 values.
        """
        from daskbatch.stats._base import as_float64

        xp, _ = _xp(block)
        return xp.log1p(as_float64(block))

    def output_features(self, names: tuple[str, ...]) -> tuple[str, ...]:
        """Name the output columns: those of the input.

        Parameters
        ----------
        names : tuple of str
            The input's feature names.

        Returns
        -------
        tuple of str
            The same names.
        """
        return tuple(names)

    def describe(self) -> dict[str, Any]:
        """Describe the step for the output's provenance.

        Returns
        -------
        dict
            Its name.
        """
        return {"step": "log1p"}


def log1p() -> Log1p:
    """Make a step taking ``log(1 + x)`` of every value (scikit-learn's ``FunctionTransformer(np.log1p)``).

    Returns
    -------
    Log1p
        The step.
    """
    return Log1p()


@dataclass(frozen=True, eq=False)
class Impute:
    """NaN replaced by a per-feature value (scikit-learn's ``SimpleImputer``).

    Attributes
    ----------
    values : ndarray of float64, shape (D,)
    feature_names : tuple of str
    strategy : {"mean", "median"}
    origin : dict
        The summary's provenance (source, created, ddof, rows).
    """

    values: np.ndarray
    feature_names: tuple[str, ...]
    strategy: str
    origin: dict[str, Any] = field(default_factory=dict)

    def bind(self, names: tuple[str, ...]) -> Impute:
        """Pick the fill values of the input's columns.

        Parameters
        ----------
        names : tuple of str
            The input's feature names, all among ``feature_names``.

        Returns
        -------
        Impute
            The step for those columns.
        """
        return _pick(self, names, ("values",), "impute")

    def apply(self, block: Array) -> Array:
        """Fill the NaN of one block.

        Parameters
        ----------
        block : array
            (rows, features).

        Returns
        -------
        array
            The float64 values, without NaN.
        """
        from daskbatch.stats._base import as_float64

        xp, dev = _xp(block)
        x = as_float64(block)
        fill = xp.asarray(self.values, dtype=xp.float64, device=dev)
        return xp.where(xp.isnan(x), xp.broadcast_to(fill, x.shape), x)

    def output_features(self, names: tuple[str, ...]) -> tuple[str, ...]:
        """Name the output columns: those of the input.

        Parameters
        ----------
        names : tuple of str
            The input's feature names.

        Returns
        -------
        tuple of str
            The same names.
        """
        return self.bind(names).feature_names

    def describe(self) -> dict[str, Any]:
        """Describe the step for the output's provenance.

        Returns
        -------
        dict
            The strategy and a digest of the fill values.
        """
        return {"step": "impute", "strategy": self.strategy, "sha256": _digest(self.values), "summary": self.origin}


def impute(summary: Any, strategy: Literal["mean", "median"] = "mean") -> Impute:
    """Make a step replacing NaN by each feature's mean or median.

    Parameters
    ----------
    summary : Summary
        From :func:`daskbatch.describe` (NaN are left out of its statistics).
    strategy : {"mean", "median"}, default "mean"
        The mean is exact; the median comes from :meth:`Summary.quantile`
        (within its stated accuracy).

    Returns
    -------
    Impute
        The step.
    """
    if strategy not in ("mean", "median"):
        raise ValueError(f"impute: strategy must be 'mean' or 'median', got {strategy!r}")
    values = summary.mean if strategy == "mean" else summary.quantile(0.5)
    values = np.asarray(values, dtype=np.float64)
    names = tuple(str(n) for n in summary.feature_names)
    bad = [n for n, v in zip(names, values, strict=True) if not np.isfinite(v)]
    if bad:
        raise ValueError(f"impute: no finite {strategy} for {len(bad)} feature(s): {_short(bad)}")
    return Impute(values=values, feature_names=names, strategy=strategy, origin=_origin(summary))


# ------------------------------------------------------------------ pipeline


def bind_all(steps: Sequence[Step], names: Sequence[str]) -> tuple[list[Step], tuple[str, ...]]:
    """Fit each step to the columns the previous ones produce.

    Parameters
    ----------
    steps : sequence of Step
        The steps, in order.
    names : sequence of str
        The input's feature names.

    Returns
    -------
    steps : list of Step
        The bound steps.
    names : tuple of str
        The output's feature names.
    """
    bound: list[Step] = []
    current = tuple(str(n) for n in names)
    for k, step in enumerate(steps):
        if not all(hasattr(step, a) for a in ("bind", "apply", "output_features", "describe")):
            raise TypeError(f"step {k} ({step!r}) is not a transform step (see daskbatch.steps)")
        b = step.bind(current)
        current = b.output_features(current)
        bound.append(b)
    return bound, current


def apply_all(steps: Sequence[Step], block: Array) -> Array:
    """Pass ``block`` through every step, in order.

    Parameters
    ----------
    steps : sequence of Step
        Bound steps.
    block : array
        (rows, input features).

    Returns
    -------
    array
        The transformed block.
    """
    for step in steps:
        block = step.apply(block)
    return block
