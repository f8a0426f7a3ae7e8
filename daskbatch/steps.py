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

The constructors (:func:`select`, :func:`standardize`, :func:`clip`,
:func:`project`) live in this module, ``db.steps``, and not at the top level:
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
    "Clip", "Project", "Select", "Standardize", "Step", "apply_all", "bind_all", "clip", "project", "select",
    "standardize",
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
        names = tuple(names)
        if names == self.feature_names:
            return self
        where = {n: i for i, n in enumerate(self.feature_names)}
        missing = [n for n in names if n not in where]
        if missing:
            raise ValueError(f"standardize: the summary has no statistics for {len(missing)} input feature(s): {_short(missing)}")
        idx = np.array([where[n] for n in names], dtype=np.int64)
        return dataclasses.replace(self, mean=self.mean[idx], std=self.std[idx], feature_names=names)

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


def standardize(summary: Any, *, constant: Literal["zero", "error"] = "zero") -> Standardize:
    """Make a step making z-scores from a summary's mean and std.

    Parameters
    ----------
    summary : Summary
        From :func:`daskbatch.describe`; its ``std`` uses the summary's ``ddof``
        (``summary.provenance["ddof"]``).
    constant : {"zero", "error"}, default "zero"
        Constant features (std 0): their z-score is 0 (like scikit-learn's
        ``StandardScaler``, whose scale 1 gives 0 on the data it was fitted
        on), or a ``ValueError`` naming them.

    Returns
    -------
    Standardize
        The step.
    """
    return Standardize(
        mean=np.asarray(summary.mean, dtype=np.float64), std=np.asarray(summary.std, dtype=np.float64),
        feature_names=tuple(str(n) for n in summary.feature_names), constant=constant, origin=_origin(summary),
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
