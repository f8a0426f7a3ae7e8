"""Per-feature fixed-width histograms, optionally split by an integer class label.

Bins follow ``numpy.histogram`` (the last bin includes ``hi``); underflow, overflow and NaN are
counted apart. Counts are exact int64 (float64 sums of weights when weighted), so any chunking
gives bitwise identical results. ``by_label=True`` counts (bin × class) tables, the input of
mutual information, with one column per class value of ``classes`` (else labels ``0..K-1``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from daskbatch._common import Array, Namespace, strict_int
from daskbatch.config import STATISTIC_DEFAULTS
from daskbatch.stats import kernels
from daskbatch.stats._base import Bundle, State
from daskbatch.stats.classes import DEFAULT_MAX_CLASSES, label_codes, validate_classes
from daskbatch.stats.declaration import Declaration, Finished, Footprint, Variable, count
from daskbatch.stats.numerics import (
    as_float64,
    bincount,
    device,
    namespace,
    positive_rows,
    weighted_bincount,
    with_classes,
)

#: Slot layout of the counts along axis 1: underflow, the bins, overflow, NaN.
UNDERFLOW = 0


@dataclass(frozen=True, eq=False)
class HistogramState(State):
    """Counts (D, bins + 3, K): slots ``[underflow, bin_0 … bin_{bins-1}, overflow, nan]``, K classes (1 without label)."""

    counts: Array


@dataclass(frozen=True, eq=False)
class HistogramResult:
    """Finalized histogram: in-range ``counts`` (D, bins), ``edges`` (D, bins + 1), out-of-range and NaN counts (D,).

    ``joint`` (D, bins + 2, K) holds the class split of underflow, bins and
    overflow when a label was given, else None; ``classes`` (K,) the class
    value of each of its columns.
    """

    counts: Array
    edges: Array
    underflow: Array
    overflow: Array
    nan_count: Array
    joint: Array | None
    classes: Array | None = None


class _Counting(NamedTuple):
    """What counting a checked block takes: its rows (of positive weight), class codes, K, weights, kernels."""

    x: Array
    labels: Array | None
    n_classes: int
    weights: Array | None
    path: kernels.KernelPath


@dataclass(frozen=True)
class Histogram:  # numpydoc ignore=PR02
    """Per-feature histogram with ``bins`` fixed-width bins on ``[lo[d], hi[d]]``.

    Parameters
    ----------
    bins : int, default 64
        Number of equal-width bins per feature.
    lo, hi : tuple of float, default ()
        Lower and upper edge of each feature's range (``lo[d] < hi[d]``, finite);
        left empty in ``describe(stats=[Histogram(...)])``, which finds them from ``range``.
    by_label : bool, default False
        Count (bin × class) joint tables from the integer label passed to ``chunk``.
    classes : sequence of int, optional
        The distinct class values (kept sorted): one table column each, a
        label outside them is an error. Without it labels must be ``0..K-1``.
    max_classes : int, default 1000
        Without ``classes``: the largest K a chunk may ask for (a stray huge
        label would otherwise allocate a table of that many columns).
    target_cuts : sequence of float, optional
        With ``by_label``: the label is a continuous target, cut at these
        increasing values into ``len(target_cuts) + 1`` classes (a row's class
        is the number of cuts at or below its value, as
        ``numpy.searchsorted(cuts, y, side="right")``). Excludes ``classes``.
    range : (lo, hi), array of shape (D, 2), "minmax" or None, default None
        What :func:`daskbatch.describe` counts on when ``lo``/``hi`` are empty
        (not saved with the counts, which keep ``lo``/``hi``). Given, everything
        takes one pass. None: a first pass fills a quantile sketch and the
        second counts over each feature's ``[0.1 %, 99.9 %]`` quantiles widened
        by the sketch's error bound and by 5 % of their span on each side
        (clipped to its min and max), values detached beyond robust fences left
        out (sentinels, 1e12, ±inf; :mod:`daskbatch.stats.ranges`); it also
        counts the fine histogram that makes :meth:`daskbatch.Summary.quantile`
        exact to one of its bins. ``"minmax"``: each feature's min and max, also
        the last resort when not even the windowed sketch fits a worker (with a
        :class:`~daskbatch.RangeWarning`). Values outside are kept in the
        underflow and overflow counts; more than 1 % of a feature's outside its
        range raises a :class:`~daskbatch.RangeWarning`.
    """

    bins: int = STATISTIC_DEFAULTS["bins"]
    lo: tuple[float, ...] = ()
    hi: tuple[float, ...] = ()
    by_label: bool = False
    classes: tuple[int, ...] | None = None
    max_classes: int = DEFAULT_MAX_CLASSES
    target_cuts: tuple[float, ...] | None = None
    # A request's field, resolved into lo/hi before counting: not compared, not saved.
    range: Any = field(default=None, compare=False, metadata={"request": True})  # noqa: A003 - numpy.histogram's name
    name = "hist"
    #: The compiled kernels it has (read by :func:`~daskbatch.stats.kernels.path.kernel_path`).
    compiled_kernels = frozenset({"numba-cpu", "numba-cuda"})
    #: Its state is the same for a block and the block's float32 copy (``Bundle.chunk`` gives 1- and 2-byte values so).
    takes_float32_copy = True
    #: ``chunk`` takes sample weights (``weights=``): float64 weighted counts.
    takes_weights = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "bins", strict_int(self.bins, "bins", minimum=1))  # True is not one bin
        object.__setattr__(self, "max_classes", strict_int(self.max_classes, "max_classes", minimum=1))
        if len(self.lo) != len(self.hi):
            raise ValueError(f"lo and hi differ in length: {len(self.lo)} != {len(self.hi)}")
        for d, (lo, hi) in enumerate(zip(self.lo, self.hi, strict=True)):
            if not (lo < hi) or lo in (float("inf"), float("-inf")) or hi in (float("inf"), float("-inf")):
                raise ValueError(
                    f"feature {d}: histogram range must be finite with lo < hi, got ({lo}, {hi})"
                )
        if self.target_cuts is not None:
            cuts = tuple(float(c) for c in self.target_cuts)
            if not self.by_label or self.classes is not None:
                raise ValueError("target_cuts bin a continuous label: they need by_label=True and no classes")
            if not all(a < b for a, b in zip(cuts, cuts[1:], strict=False)) or not all(map(math.isfinite, cuts)):
                raise ValueError(f"target_cuts must be finite and strictly increasing, got {cuts[:10]}")
            object.__setattr__(self, "target_cuts", cuts)
        if self.classes is not None:
            if not self.by_label:
                raise ValueError("classes are only used with by_label=True")
            # Stored sorted, as a tuple of ints: labels are mapped by their rank among them.
            object.__setattr__(self, "classes", validate_classes(self.classes, max(self.max_classes, len(self.classes))))

    @property
    def n_slots(self) -> int:
        """Count the slots of a feature's counts, ``bins + 3``: underflow, the bins, overflow and NaN."""  # numpydoc ignore=RT01
        return self.bins + 3

    def edges(self, xp: Namespace, dev: object = None) -> Array:
        """Compute the bin edges in float64, as ``numpy.linspace`` does.

        Parameters
        ----------
        xp : namespace
            The array namespace to allocate in.
        dev : device, optional
            The device to allocate on.

        Returns
        -------
        array
            The edges, (D, bins + 1).
        """
        lo = xp.asarray(self.lo, dtype=xp.float64, device=dev)
        hi = xp.asarray(self.hi, dtype=xp.float64, device=dev)
        step = (hi - lo) / self.bins
        i = xp.astype(xp.arange(self.bins + 1, device=dev), xp.float64)
        edges = i[None, :] * step[:, None] + lo[:, None]
        last = xp.arange(self.bins + 1, device=dev) == self.bins
        return xp.where(last[None, :], hi[:, None], edges)

    def empty(self, xp: Namespace, dev: object = None, n_classes: int = 1) -> HistogramState:
        """Build the identity of :meth:`merge`: the state of a chunk with no rows.

        Parameters
        ----------
        xp : namespace
            The array namespace to allocate in.
        dev : device, optional
            The device to allocate on.
        n_classes : int, default 1
            Number of class columns of the counts.

        Returns
        -------
        HistogramState
            The all-zero state.
        """
        shape = (len(self.lo), self.n_slots, n_classes)
        return HistogramState(counts=xp.zeros(shape, dtype=xp.int64, device=dev))

    def slots(self, x: Array) -> Array:
        """Find the slot (R, D) of every value of ``x``: 0 underflow, 1..bins the bins, bins+1 overflow, bins+2 NaN."""  # numpydoc ignore=PR01,RT01
        xp = namespace(x)
        rows, n_features = x.shape
        dev = device(x)
        x = as_float64(x)
        edges = self.edges(xp, dev)
        lo, hi = edges[:, 0], edges[:, -1]
        nan = xp.isnan(x)
        under = x < lo
        over = x > hi
        outside = nan | under | over
        scaled = (xp.where(outside, lo, x) - lo) * (self.bins / (hi - lo))
        idx = xp.astype(xp.clip(xp.floor(scaled), 0.0, float(self.bins - 1)), xp.int64)
        del scaled
        # The scaled index can be one off at a bin edge: settle it against the
        # edges themselves, as numpy.histogram does.
        flat_edges = xp.reshape(edges, (-1,))
        base = xp.arange(n_features, dtype=xp.int64, device=dev) * (self.bins + 1)

        def _edge_at(i: Array) -> Array:
            """Look up edge ``i`` (R, D) of each value's feature."""
            return xp.reshape(xp.take(flat_edges, xp.reshape(i + base, (-1,))), (rows, n_features))

        idx = xp.where(x < _edge_at(idx), idx - 1, idx)
        idx = xp.where((x >= _edge_at(idx + 1)) & (idx < self.bins - 1), idx + 1, idx)
        slot = idx + 1
        slot = xp.where(under, xp.zeros_like(slot), slot)
        slot = xp.where(over, xp.full_like(slot, self.bins + 1), slot)
        return xp.where(nan, xp.full_like(slot, self.bins + 2), slot)

    def chunk(self, x: Array, label: Array | None = None, /, *, weights: Array | None = None) -> HistogramState:
        """Count one block's values into the bins (by class with ``by_label``).

        Parameters
        ----------
        x : array
            The block, (rows, features).
        label : array or None
            The integer class label of each row; required with ``by_label``.
        weights : array, optional
            Non-negative finite weight of each row: the counts become float64 sums of weights.

        Returns
        -------
        HistogramState
            The block's counts.
        """
        counting = self._counting(x, label, weights)
        if isinstance(counting, HistogramState):
            return counting
        x, labels, n_classes, weights, path = counting
        xp = namespace(x)
        n_features = x.shape[1]
        if weights is not None and path.compiled:  # compiled CPU or GPU loop (daskbatch/stats/kernels)
            return HistogramState(counts=kernels.weighted_histogram(x, self.lo, self.hi, self.bins, labels,
                                                                    n_classes, weights))
        if weights is None and path.compiled:  # compiled loop, same counts bit for bit (daskbatch/stats/kernels)
            counts = kernels.histogram(x, self.lo, self.hi, self.bins, labels, n_classes, path)
            return HistogramState(counts=counts)
        flat = self.slots(x) + xp.arange(n_features, dtype=xp.int64, device=device(x)) * self.n_slots
        if labels is not None:
            flat = flat * n_classes + labels[:, None]
        size = n_features * self.n_slots * n_classes
        if weights is not None:
            each = xp.broadcast_to(weights[:, None], flat.shape)  # a row's weight for each of its values
            counts = weighted_bincount(xp, xp.reshape(flat, (-1,)), xp.reshape(each, (-1,)), minlength=size)
            return HistogramState(counts=xp.reshape(counts, (n_features, self.n_slots, n_classes)))
        counts = bincount(xp, xp.reshape(flat, (-1,)), minlength=size)
        return HistogramState(counts=xp.reshape(counts, (n_features, self.n_slots, n_classes)))

    def _counting(self, x: Array, label: Array | None, weights: Array | None) -> _Counting | HistogramState:
        """Check a block and its labels: what counting it takes, or the state of a block with no rows."""
        xp = namespace(x)
        if weights is not None:
            x, label, weights = positive_rows(xp, x, label if self.by_label else None, weights)
        rows, n_features = x.shape
        if n_features != len(self.lo):
            raise ValueError(f"histogram has {len(self.lo)} ranges but the chunk has {n_features} features")
        n_classes = (len(self.target_cuts) + 1 if self.target_cuts is not None
                     else 1 if self.classes is None else len(self.classes))
        if rows == 0:
            empty = self.empty(xp, device(x), n_classes)
            return empty if weights is None else HistogramState(counts=xp.astype(empty.counts, xp.float64))
        labels = None
        if self.by_label:
            if label is None:
                raise ValueError("a histogram by label needs the label of every chunk")
            if label.shape[0] != rows:
                raise ValueError(f"the chunk has {rows:,} rows but {label.shape[0]:,} labels")
            if self.target_cuts is not None:
                cuts = xp.asarray(self.target_cuts, dtype=xp.float64, device=device(x))
                labels = xp.astype(xp.searchsorted(cuts, as_float64(label), side="right"), xp.int64)
            elif self.classes is not None:
                labels = label_codes(xp, label, self.classes)
            else:
                labels = xp.astype(label, xp.int64)
                if xp.any(labels < 0):
                    raise ValueError(f"labels must be class numbers 0..K-1; found {int(xp.min(labels))}")
                n_classes = int(xp.max(labels)) + 1
                if n_classes > self.max_classes:
                    raise ValueError(
                        f"label value {n_classes - 1} asks for {n_classes:,} classes 0..{n_classes - 1}, "
                        f"more than max_classes ({self.max_classes:,}); give the class values (classes=[...])"
                    )
        path = kernels.kernel_path(x, self, weighted=weights is not None)
        return _Counting(x, labels, n_classes, weights, path)

    def merge(self, a: HistogramState, b: HistogramState, /) -> HistogramState:
        """Add the counts of two states (the one with fewer classes is padded).

        Parameters
        ----------
        a, b : HistogramState
            The states to combine.

        Returns
        -------
        HistogramState
            The state of the union.
        """
        xp = namespace(a.counts, b.counts)
        k = max(a.counts.shape[2], b.counts.shape[2])
        return HistogramState(counts=with_classes(xp, a.counts, k) + with_classes(xp, b.counts, k))

    def finalize(self, s: HistogramState, /) -> HistogramResult:
        """Split a state into bin counts, out-of-range and NaN counts (and joint tables).

        Parameters
        ----------
        s : HistogramState
            The state of all the rows.

        Returns
        -------
        HistogramResult
            The histogram of every feature.
        """
        xp = namespace(s.counts)
        total = xp.sum(s.counts, axis=2)
        joint = s.counts[:, : self.bins + 2, :] if self.by_label else None
        classes = None
        if self.by_label:
            dev = device(s.counts)
            classes = (
                xp.arange(s.counts.shape[2], dtype=xp.int64, device=dev) if self.classes is None
                else xp.asarray(self.classes, dtype=xp.int64, device=dev)
            )
        return HistogramResult(
            counts=total[:, 1 : self.bins + 1],
            edges=self.edges(xp, device(s.counts)),
            underflow=total[:, UNDERFLOW],
            overflow=total[:, self.bins + 1],
            nan_count=total[:, self.bins + 2],
            joint=joint,
            classes=classes,
        )


#: Memory of :class:`Histogram` for the planner: the array API makes a float64 copy, scaled
#: values, slot and flat indices and masks; the bincount output and its cast sit next to the
#: state. The state is ``bins`` + under/overflow and NaN counts per feature.
FOOTPRINT = Footprint(
    name="hist",
    state=lambda d, bins, k, tile: d * (bins + 3) * 8,
    float64_copies={"compiled": 0, "array-api": 1, "gpu-compiled": 0},
    temporaries={"compiled": {}, "array-api": {"float64": 2, "int64": 3, "bool": 3}, "gpu-compiled": {}},
    state_copies={"compiled": 0, "array-api": 1, "gpu-compiled": 0},  # the GPU kernel counts into the state
)


def _joint_state_bytes(d: int, bins: int, k: int | None, tile: int | None) -> int:
    if k is None:
        raise ValueError("statistic 'mi' needs n_classes (the number of label classes)")
    return d * (bins + 3) * k * 8


#: :class:`Histogram` by label (``"mi"``): as ``hist``, per class, plus the label's row
#: temporaries (its int64 copy, searchsorted and clipped class columns, the class values
#: taken back and the bool mask that checks them).
MI_FOOTPRINT = Footprint(
    name="mi",
    state=_joint_state_bytes,
    float64_copies={"compiled": 0, "array-api": 1, "gpu-compiled": 0},
    temporaries={"compiled": {}, "array-api": {"float64": 2, "int64": 3, "bool": 3}, "gpu-compiled": {}},
    # gpu: the label codes as on the array-API path, plus the label block itself (int32)
    row_bytes={"compiled": 25, "array-api": 32, "gpu-compiled": 40},
    state_copies={"compiled": 0, "array-api": 1, "gpu-compiled": 0},
    reads_label=True,
    needs_classes=True,
)


#: Bins of the quantile histogram: value error at most (hi - lo) / 2047 (the width is rounded up to a power of two).
QUANTILE_BINS = 2048


@dataclass(frozen=True)
class QuantileHistogram(Histogram):
    """A fine histogram without label, counted in the second pass for :meth:`daskbatch.Summary.quantile`."""

    name = "qhist"

    def __post_init__(self) -> None:
        if self.by_label:
            raise ValueError("the quantile histogram is not split by label")
        super().__post_init__()


@dataclass(frozen=True)
class SweptBundle(Bundle):  # numpydoc ignore=PR02
    """A :class:`~daskbatch.stats.Bundle` whose histograms count each host block in one sweep of its values.

    The second pass of :func:`daskbatch.describe` holds a histogram by label and the fine
    :class:`QuantileHistogram`: one compiled loop reads each value once and counts both.
    States, names and results are the plain bundle's, bit for bit.

    Parameters
    ----------
    stats : tuple of Statistic
        The statistics; their states travel together as a tuple.
    """

    def chunk(self, x: Array, label: Array | None = None, /, *, weights: Array | None = None) -> tuple[Any, ...]:  # numpydoc ignore=PR01,RT01
        """Reduce one block with every statistic, as :meth:`Bundle.chunk` does, the histograms in one sweep."""
        histograms = [s for s in self.stats if isinstance(s, Histogram)]
        if len(histograms) < 2 or kernels.route(x) != "numba-cpu":
            return super().chunk(x, label, weights=weights)
        rest = [s for s in self.stats if not isinstance(s, Histogram)]
        states = dict(zip(map(id, rest), Bundle(tuple(rest)).chunk(x, label, weights=weights) if rest else (),
                          strict=True))
        states.update(zip(map(id, histograms), _one_sweep(histograms, x, label, weights), strict=True))
        return tuple(states[id(s)] for s in self.stats)


def _one_sweep(histograms: list[Histogram], x: Array, label: Array | None, weights: Array | None) -> list[Any]:
    """Each histogram's state of a host block, those on the compiled CPU loop counted in one sweep."""
    if weights is not None:  # the rows of zero weight dropped once, for every histogram
        x, label, weights = positive_rows(namespace(x), x, label, weights)
    counting = [h._counting(x, label if h.by_label else None, weights) for h in histograms]
    swept: list[int] = []
    grids: list[tuple[Any, ...]] = []
    labels = None
    for i, (h, c) in enumerate(zip(histograms, counting, strict=True)):
        # On the CPU's compiled loop, and at most one by label: the sweep reads one class code a row.
        if isinstance(c, _Counting) and c.path.kind == "numba-cpu" and (c.labels is None or labels is None):
            swept.append(i)
            grids.append((h.lo, h.hi, h.bins, c.n_classes, c.labels is not None))
            labels = c.labels if c.labels is not None else labels
    states: list[Any] = [c if isinstance(c, HistogramState) else None for c in counting]
    for i, counts in zip(swept, kernels.histograms(x, grids, labels, weights) if swept else (), strict=True):
        states[i] = HistogramState(counts=counts)
    # Any other (no compiled loop for it): its own count.
    return [h.chunk(x, label if h.by_label else None, weights=weights) if s is None else s
            for h, s in zip(histograms, states, strict=True)]


def _hist_variables(declaration: Declaration, done: Finished) -> dict[str, Any]:
    """The histograms (counts, edges, below and above the range); the joint tables are ``mi``'s."""
    if "hist" not in done.results:
        return {}
    h = done.results["hist"]
    return {"hist_counts": h.counts, "hist_edges": h.edges, "underflow": h.underflow, "overflow": h.overflow}


DECLARATION = Declaration(
    "hist", Histogram, states=(HistogramState,), footprint=FOOTPRINT, needs_ranges=True,
    variables={
        "hist_counts": count(("feature", "bin"), "histogram counts"),
        "hist_edges": Variable(("feature", "edge"), "histogram bin edges"),
        "underflow": count(("feature",), "number of values below the histogram range"),
        "overflow": count(("feature",), "number of values above the histogram range"),
    },
    summarize=_hist_variables,
    kernels=("daskbatch.stats.kernels:histogram", "daskbatch.stats.kernels:weighted_histogram"),
)


def _quantile_variables(declaration: Declaration, done: Finished) -> dict[str, Any]:
    """The fine quantile histogram as one table (below the range, the bins, above) and its ranges."""
    if "qhist" not in done.results:
        return {}
    f = done.results["qhist"]
    cells = [np.asarray(f.underflow)[:, None], np.asarray(f.counts), np.asarray(f.overflow)[:, None]]
    edges = np.asarray(f.edges)
    return {"quantile_counts": np.concatenate(cells, axis=1), "quantile_range": edges[:, [0, -1]]}


#: The second pass's fine histogram that narrows the sketch's quantiles (added by the engine, not asked for).
QUANTILE_DECLARATION = Declaration(
    "qhist", QuantileHistogram, needs_ranges=True, selectable=False,
    variables={
        "quantile_counts": count(("feature", "quantile_cell"),
                                 "quantile histogram counts: below the range, the bins, above"),
        "quantile_range": Variable(("feature", "end"), "range of the quantile histogram"),
    },
    summarize=_quantile_variables,
)
