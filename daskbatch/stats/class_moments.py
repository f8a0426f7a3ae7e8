"""Per-class moments: count, mean and M2 of every feature within every class of a label, (D, K).

The inputs of ANOVA F and chi2: a chunk sorts its rows by class and reduces each slice by the
corrected two-pass of :mod:`daskbatch.stats.moments`; states merge with Chan's update in float64.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from daskbatch._common import Array, Namespace, strict_int
from daskbatch.config import STATISTIC_DEFAULTS
from daskbatch.stats import kernels
from daskbatch.stats._base import State
from daskbatch.stats.classes import label_codes
from daskbatch.stats.declaration import (
    KERNEL_PATHS,
    Declaration,
    Finished,
    Footprint,
    Variable,
    count,
)
from daskbatch.stats.moments import first_finite
from daskbatch.stats.numerics import (
    RATIO_FORM_FROM,
    as_float64,
    bincount,
    central_moment,
    device,
    handles_overflow,
    merge_shifted_means,
    namespace,
    positive_rows,
    safe_divisor,
    to_numpy,
    with_classes,
)


@dataclass(frozen=True, eq=False)
class ClassMomentsState(State):
    """Mergeable state; every field is float64 of shape (D, K).

    ``n`` counts the finite values of feature d in class k, ``shift + mean``
    is their mean and ``m2`` the sum of squared deviations from it. Classes
    with ``n == 0`` hold zeros in every field.
    """

    n: Array
    shift: Array
    mean: Array
    m2: Array


@dataclass(frozen=True, eq=False)
class ClassMomentsResult:
    """Finalized per-(feature, class) moments, each of shape (D, K).

    ``mean`` and ``var`` are NaN where a class has no finite value of a
    feature (``var`` also where ``count <= ddof``); ``sum`` is
    ``count * mean`` (0 for empty classes), the observed total chi2 uses.
    """

    count: Array
    mean: Array
    m2: Array
    var: Array
    sum: Array


def _empty_class_moments(xp: Namespace, n_features: int, n_classes: int, dev: object = None) -> ClassMomentsState:
    """Build the identity of :meth:`ClassMoments.merge`: the state of a chunk with no rows."""
    zeros = xp.zeros((n_features, n_classes), dtype=xp.float64, device=dev)
    return ClassMomentsState(n=zeros, shift=zeros, mean=zeros, m2=zeros)


def _one_class(xp: Namespace, x: Array, w: Array | None = None) -> tuple[Array, Array, Array, Array]:
    """``(n, shift, mean, m2)`` (each (D,)) of the finite values of each column of ``x``."""
    # Corrected two-pass about the column's first finite value, as in
    # :meth:`daskbatch.stats.moments.Moments.chunk`; temporaries are released
    # as soon as possible (the planner's memory model counts them). With row
    # weights ``w`` the sums are weighted and ``n`` is the weight sum.
    if w is not None:
        return _one_class_weighted(xp, x, w)
    x = as_float64(x)
    finite = xp.isfinite(x)
    count = xp.sum(xp.astype(finite, xp.float64), axis=0)
    shift = first_finite(xp, x, finite)
    dev = xp.where(finite, x - shift, 0.0)
    del x
    n_safe = safe_divisor(xp, count)
    approx_mean = xp.sum(dev, axis=0) / n_safe
    dev = xp.where(finite, dev - approx_mean, 0.0)
    del finite
    # The residual mean `e` of the deviations corrects the rounding of `approx_mean`.
    e = xp.sum(dev, axis=0) / n_safe
    s2 = xp.sum(dev * dev, axis=0)
    return count, shift, approx_mean + e, central_moment(xp, s2 - count * e * e, s2)


def _one_class_weighted(xp: Namespace, x: Array, w: Array) -> tuple[Array, Array, Array, Array]:
    """:func:`_one_class` with frequency weights: weighted sums, ``n`` the weight sum of the finite values."""
    # Deviations are exact zeros at non-finite entries, so every weighted column
    # sum is one matrix-vector product ``w @ a`` (BLAS), without a weighted copy.
    x = as_float64(x)
    finite = xp.isfinite(x)
    total = xp.matmul(w, xp.astype(finite, xp.float64))
    shift = first_finite(xp, x, finite)
    dev = xp.where(finite, x - shift, 0.0)
    del x
    w_safe = safe_divisor(xp, total)
    approx_mean = xp.matmul(w, dev) / w_safe
    dev = xp.where(finite, dev - approx_mean, 0.0)
    del finite
    e = xp.matmul(w, dev) / w_safe
    s2 = xp.matmul(w, dev * dev)
    return total, shift, approx_mean + e, central_moment(xp, s2 - total * e * e, s2)


@dataclass(frozen=True)
class ClassMoments:  # numpydoc ignore=PR02
    """Count, mean and variance of every feature within every class of an integer label.

    Parameters
    ----------
    ddof : int, default 1
        Delta degrees of freedom of the per-class variance.
    n_classes : int, optional
        Number of classes K. When given, every state has K classes and a
        label ``>= K`` is an error; when not, K is found from the data.
    classes : tuple of int, optional
        The sorted class values (e.g. ``(0, 1, 7)``): labels map to columns by
        value, as in :class:`~daskbatch.stats.histogram.Histogram`; a label that
        is not one of them is an error naming it. Sets K to ``len(classes)``.
    """

    ddof: int = STATISTIC_DEFAULTS["ddof"]
    n_classes: int | None = None
    classes: tuple[int, ...] | None = None
    name = "class_moments"
    #: The compiled kernels it has (read by :func:`~daskbatch.stats.kernels.path.kernel_path`).
    compiled_kernels = frozenset({"numba-cpu", "numba-cuda"})
    #: Its state is the same for a block and the block's float32 copy (``Bundle.chunk`` gives 1- and 2-byte values so).
    takes_float32_copy = True
    #: ``chunk`` needs the label (describe's runner passes it to statistics that say so).
    by_label = True
    #: ``chunk`` takes sample weights (``weights=``).
    takes_weights = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "ddof", strict_int(self.ddof, "ddof"))  # True is not a ddof of 1
        if self.n_classes is not None and (
            isinstance(self.n_classes, bool) or int(self.n_classes) != self.n_classes or self.n_classes < 1
        ):
            raise ValueError(f"n_classes must be a positive integer, got {self.n_classes!r}")
        if self.classes is not None:
            object.__setattr__(self, "classes", tuple(int(c) for c in self.classes))
            if self.n_classes is None:
                object.__setattr__(self, "n_classes", len(self.classes))
            elif self.n_classes != len(self.classes):
                raise ValueError(f"n_classes={self.n_classes} but {len(self.classes)} class values were given")

    @handles_overflow
    def chunk(self, x: Array, label: Array | None = None, /, *, weights: Array | None = None) -> ClassMomentsState:
        """Reduce one block to per-class moments.

        Parameters
        ----------
        x : array
            The block, (rows, features).
        label : array
            The integer class label of each row (required).
        weights : array, optional
            Non-negative finite frequency weight of each row (see Notes).

        Returns
        -------
        ClassMomentsState
            The block's state.
        """
        xp = namespace(x)
        if weights is not None:
            if label is None:
                raise ValueError("per-class moments need the label of every chunk")
            x, label, weights = positive_rows(xp, x, label, weights)
        rows, n_features = x.shape
        if rows == 0:
            return _empty_class_moments(xp, n_features, self.n_classes or 1, device(x))
        if label is None:
            raise ValueError("per-class moments need the label of every chunk")
        labels = label_codes(xp, label, self.classes) if self.classes is not None else xp.astype(label, xp.int64)
        if labels.shape != (rows,):
            raise ValueError(f"the label has shape {tuple(labels.shape)}; expected ({rows},) for this chunk")
        lowest, highest = int(xp.min(labels)), int(xp.max(labels))
        if lowest < 0:
            raise ValueError(f"labels must be class numbers 0..K-1; found {lowest}")
        n_classes = highest + 1 if self.n_classes is None else int(self.n_classes)
        if highest >= n_classes:
            raise ValueError(f"label {highest} is out of range for n_classes={n_classes}")
        # Compiled CPU loop (daskbatch/stats/kernels): the same state bit for bit, except on one
        # feature, where NumPy sums the single column pairwise (equal to rounding there), and
        # with weights, where the array-API code's weighted sums are BLAS products. On a GPU the
        # numba-cuda loops, equal to rounding.
        if kernels.kernel_path(x, self).compiled:
            return ClassMomentsState(*kernels.class_moments(x, labels, n_classes, weights))
        # Rows grouped by class (in the input dtype: each slice is cast on its own, so
        # the float64 temporaries are those of one class at a time).
        order = xp.argsort(labels, stable=True)
        x = xp.take(x, order, axis=0)
        if weights is not None:
            weights = xp.take(weights, order)
        del order
        sizes = to_numpy(bincount(xp, labels, minlength=n_classes))
        parts: list[tuple[Array, Array, Array, Array]] = []
        start = 0
        empty = xp.zeros((n_features,), dtype=xp.float64, device=device(x))
        for size in (int(s) for s in sizes):
            if size == 0:
                parts.append((empty, empty, empty, empty))
            else:
                w = None if weights is None else weights[start : start + size]
                parts.append(_one_class(xp, x[start : start + size, :], w))
            start += size
        n, shift, mean, m2 = (xp.stack([p[i] for p in parts], axis=1) for i in range(4))
        return ClassMomentsState(n=n, shift=shift, mean=mean, m2=m2)

    @handles_overflow
    def merge(self, a: ClassMomentsState, b: ClassMomentsState, /) -> ClassMomentsState:
        """Combine the states of two disjoint sets of rows, class by class.

        Parameters
        ----------
        a, b : ClassMomentsState
            The states to combine (the one with fewer classes is padded).

        Returns
        -------
        ClassMomentsState
            The state of the union.
        """
        xp = namespace(a.n, b.n)
        k = max(a.n.shape[1], b.n.shape[1])
        a, b = (
            ClassMomentsState(*(with_classes(xp, v, k) for v in (s.n, s.shift, s.mean, s.m2))) for s in (a, b)
        )
        na, nb = a.n, b.n
        n = na + nb
        shift, mean, delta = merge_shifted_means(xp, na, nb, a.shift, a.mean, b.shift, b.mean)
        n_safe = safe_divisor(xp, n)
        # Weight sums whose product overflows: the same term as a share of n (RATIO_FORM_FROM).
        spread = xp.where(n < RATIO_FORM_FROM, delta * delta * (na * nb) / n_safe, delta * delta * na * (nb / n_safe))
        m2 = a.m2 + b.m2 + spread
        return ClassMomentsState(n=n, shift=shift, mean=mean, m2=m2)

    @handles_overflow
    def finalize(self, s: ClassMomentsState, /) -> ClassMomentsResult:
        """Compute the per-class count, mean and variance from a state.

        Parameters
        ----------
        s : ClassMomentsState
            The state of all the rows.

        Returns
        -------
        ClassMomentsResult
            The per-class moments.
        """
        xp = namespace(s.n)
        nan = xp.full_like(s.mean, xp.nan)
        has = s.n > 0
        mean = xp.where(has, s.shift + s.mean, nan)
        dof = s.n - self.ddof
        var = xp.where(dof > 0, s.m2 / safe_divisor(xp, dof), nan)
        total = xp.where(has, s.n * (s.shift + s.mean), xp.zeros_like(s.mean))
        return ClassMomentsResult(count=s.n, mean=mean, m2=s.m2, var=var, sum=total)


def _class_state_bytes(d: int, bins: int, k: int | None, tile: int | None) -> int:
    if k is None:
        raise ValueError("statistic 'class_moments' needs n_classes (the number of label classes)")
    return 4 * d * k * 8  # n, shift, mean, m2 per (feature, class)


#: Memory of :class:`ClassMoments` for the planner. Array-API path: the class-sorted copy of
#: the block, then one class's float64 cast, deviations and squares and its finite mask, for
#: the worst case of a block holding a single class. Compiled path: only (K, D) arrays and the
#: rows' labels and class codes.
FOOTPRINT = Footprint(
    name="class_moments",
    state=_class_state_bytes,
    float64_copies={"compiled": 0, "array-api": 1, "gpu-compiled": 1},
    temporaries={"compiled": {}, "array-api": {"float64": 3, "bool": 2}, "gpu-compiled": {"float64": 3, "bool": 2}},
    row_bytes=dict.fromkeys(KERNEL_PATHS, 24),
    state_copies=dict.fromkeys(KERNEL_PATHS, 1),
    merge_temporaries=2,
    reads_label=True,
    needs_classes=True,
)


def _class_variables(declaration: Declaration, done: Finished) -> dict[str, Any]:
    """The per-(feature, class) count, mean and M2; the class values when no joint table gave them."""
    if "class_moments" not in done.results:
        return {}
    cm = done.results["class_moments"]
    out: dict[str, Any] = {"class_count": cm.count, "class_mean": cm.mean, "class_m2": cm.m2}
    keyed = getattr(getattr((done.states or {}).get("class_moments"), "statistic", None), "classes", None)
    if getattr(done.results.get("hist"), "joint", None) is None and keyed is not None:
        # Without joint histograms the class values come from the statistic that keyed the moments.
        out["classes"] = np.asarray(keyed, dtype=np.int64)
    done.provenance.setdefault("n_classes", int(cm.count.shape[1]))
    return out


_BY_CLASS = ("feature", "class")
DECLARATION = Declaration(
    "class_moments", ClassMoments, states=(ClassMomentsState,), footprint=FOOTPRINT,
    needs_label=True, needs_class_label=True,
    variables={
        "class_count": count(_BY_CLASS, "number of finite values per class", "float64"),
        "class_mean": Variable(_BY_CLASS, "mean of the finite values per class"),
        "class_m2": Variable(_BY_CLASS, "sum of squared deviations from the class mean"),
        "classes": Variable(None, "label value"),
    },
    summarize=_class_variables,
    kernels=("daskbatch.stats.kernels:class_moments",),
)
