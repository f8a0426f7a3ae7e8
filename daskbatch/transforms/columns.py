"""The step protocol and its helpers, and the steps that choose or combine columns: select, clip, project."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Protocol

import numpy as np

from daskbatch._common import Array
from daskbatch.stats.numerics import as_float64, device, namespace

__all__ = [
    "apply_all", "bind_all", "block_namespace", "Clip", "clip", "digest", "names_differ", "origin_of",
    "PerFeature", "Project", "project", "Select", "select", "short", "Step", "ValueWise",
]


class Step(Protocol):
    """What :func:`daskbatch.transform` needs of a step."""

    def bind(self, names: tuple[str, ...]) -> Step:
        """Fit the step to input columns ``names``, or raise a one-line error naming the mismatch."""
        ...

    def apply(self, block: Array) -> Array:
        """Transform one block of rows."""
        ...

    def output_features(self, names: tuple[str, ...]) -> tuple[str, ...]:
        """Name the output columns."""
        ...

    def describe(self) -> dict[str, Any]:
        """Describe the step for the output's provenance."""
        ...


def digest(*arrays: np.ndarray) -> str:
    """Hash the arrays' float64 bytes: a step's parameters in a few characters of provenance."""
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
    return h.hexdigest()


def origin_of(summary: Any) -> dict[str, Any]:
    """Say where a summary came from (its provenance ``source``, ``created``, ``ddof``, ``rows``)."""
    prov = dict(getattr(summary, "provenance", {}) or {})
    return {k: prov.get(k) for k in ("source", "created", "ddof", "rows")}


def names_differ(expected: tuple[str, ...], got: tuple[str, ...]) -> str:
    """Name the first difference between two lists of feature names, for a one-line error."""
    if len(expected) != len(got):
        return f"{len(expected)} features ({short(expected)}), the input has {len(got)} ({short(got)})"
    i = next(i for i, (a, b) in enumerate(zip(expected, got, strict=True)) if a != b)
    return f"feature {i} named {expected[i]!r}, the input's is {got[i]!r}"


def short(names: Sequence[str], n: int = 4) -> str:
    """Join the first ``n`` names, with ``...`` when there are more."""
    return ", ".join(names[:n]) + (", ..." if len(names) > n else "")


class ValueWise:
    """Base of the steps that work value by value: they take any columns and keep their names."""

    def bind(self, names: tuple[str, ...]) -> Any:
        """Accept any columns."""
        return self

    def output_features(self, names: tuple[str, ...]) -> tuple[str, ...]:
        """Name the output columns: those of the input."""
        return tuple(names)


class PerFeature:
    """Base of the steps holding one value per feature of a summary: they bind to input columns by name."""

    per_feature: ClassVar[tuple[str, ...]] = ()
    step_name: ClassVar[str] = "step"
    feature_names: tuple[str, ...]

    def bind(self, names: tuple[str, ...]) -> Any:
        """Pick the per-feature values of the input's columns, by name."""
        names = tuple(names)
        if names == self.feature_names:
            return self
        where = {n: i for i, n in enumerate(self.feature_names)}
        missing = [n for n in names if n not in where]
        if missing:
            raise ValueError(
                f"{self.step_name}: the summary has no statistics for {len(missing)} input feature(s): {short(missing)}"
            )
        idx = np.array([where[n] for n in names], dtype=np.int64)
        picked = {f: getattr(self, f)[idx] for f in self.per_feature}
        return replace(self, feature_names=names, **picked)  # type: ignore[type-var]

    def output_features(self, names: tuple[str, ...]) -> tuple[str, ...]:
        """Name the output columns: those of the input, once the step binds to them."""
        return tuple(self.bind(names).feature_names)


def block_namespace(block: Array) -> tuple[Any, Any]:
    """Give a block's array namespace and device (NumPy's or CuPy's)."""
    return namespace(block), device(block)


def bind_all(steps: Sequence[Step], names: Sequence[str]) -> tuple[list[Step], tuple[str, ...]]:
    """Fit each step to the columns the previous ones produce."""
    bound: list[Step] = []
    current = tuple(str(n) for n in names)
    for k, step in enumerate(steps):
        if not all(hasattr(step, a) for a in ("bind", "apply", "output_features", "describe")):
            raise TypeError(f"step {k} ({step!r}) is not a transform step (see daskbatch.transforms.steps)")
        b = step.bind(current)
        current = b.output_features(current)
        bound.append(b)
    return bound, current


def apply_all(steps: Sequence[Step], block: Array) -> Array:
    """Pass ``block`` through every step, in order."""
    for step in steps:
        block = step.apply(block)
    return block


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
        """Check the selection against the input columns."""
        if self.feature_names is not None and tuple(names) != self.feature_names:
            raise ValueError(f"select: the selection was made on {names_differ(self.feature_names, tuple(names))}")
        if max(self.indices) >= len(names):
            raise ValueError(f"select: column {max(self.indices)} asked for, the input has {len(names)} features")
        return self

    def apply(self, block: Array) -> Array:
        """Keep the selected columns of ``block``."""
        xp, dev = block_namespace(block)
        return xp.take(block, xp.asarray(self.indices, dtype=xp.int64, device=dev), axis=1)

    def output_features(self, names: tuple[str, ...]) -> tuple[str, ...]:
        """Name the selected columns."""
        self.bind(names)
        return tuple(names[i] for i in self.indices)

    def describe(self) -> dict[str, Any]:
        """Describe the step for the output's provenance."""
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


@dataclass(frozen=True)
class Clip(ValueWise):
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

    def apply(self, block: Array) -> Array:
        """Clip one block (integers become float64 first)."""
        xp, _ = block_namespace(block)
        if not xp.isdtype(block.dtype, "real floating"):
            block = as_float64(block)
        return xp.clip(block, min=self.lo, max=self.hi)

    def describe(self) -> dict[str, Any]:
        """Describe the step for the output's provenance."""
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


@dataclass(frozen=True, eq=False)
class Project:
    """Centred projection onto principal components: ``(x - pca.mean_) @ pca.components_.T`` in float64.

    Output columns are named ``pc1``, ``pc2``, ...
    """

    pca: Any
    origin: dict[str, Any] = field(default_factory=dict)

    def bind(self, names: tuple[str, ...]) -> Project:
        """Check that the input has the features the PCA was fitted on."""
        expected = tuple(self.pca.feature_names)
        if tuple(names) != expected:
            raise ValueError(
                f"project: the PCA was fitted on {names_differ(expected, tuple(names))}; "
                "project the features it was fitted on (a select step first, or a PCA of the selected features)"
            )
        return self

    def apply(self, block: Array) -> Array:
        """Project one block onto the components."""
        return self.pca.transform(block)

    def output_features(self, names: tuple[str, ...]) -> tuple[str, ...]:
        """Name the components ``pc1``, ``pc2``, ..."""
        self.bind(names)
        return tuple(f"pc{i + 1}" for i in range(self.pca.n_components_))

    def describe(self) -> dict[str, Any]:
        """Describe the step for the output's provenance."""
        return {
            "step": "project", "n_components": self.pca.n_components_, "features": len(self.pca.feature_names),
            "method": self.pca.method, "whiten": self.pca.whiten, "correlation": self.pca.scale_ is not None,
            "sha256": digest(self.pca.mean_, self.pca.components_, self.pca.explained_variance_, np.array([self.pca.whiten]),
                              *(() if self.pca.scale_ is None else (self.pca.scale_,))),
            "summary": self.origin,
        }


def project(pca_or_summary: Any, n_components: int | None = None) -> Project:
    """Make a step projecting onto principal components.

    Parameters
    ----------
    pca_or_summary : PCA or Summary
        A fitted :class:`~daskbatch.PCA`, or a summary with a covariance (then
        ``n_components`` is required and :func:`daskbatch.transforms.pca` fits it).
    n_components : int, optional
        Components to keep; required with a summary.

    Returns
    -------
    Project
        The step.
    """
    if hasattr(pca_or_summary, "components_"):
        if n_components is not None and n_components != pca_or_summary.n_components_:
            raise ValueError(f"the PCA has {pca_or_summary.n_components_} components, not {n_components}")
        return Project(pca_or_summary)
    if n_components is None:
        raise TypeError("project(summary, n_components): give the number of components")
    from daskbatch.transforms.pca import pca  # lazy: dask, zarr

    return Project(pca(pca_or_summary, n_components), origin=origin_of(pca_or_summary))
