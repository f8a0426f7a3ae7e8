"""Per-feature quantile sketches with a relative-error bound (logarithmic buckets, as DDSketch).

Bucket ``k = ceil(log_gamma |v|)``, ``gamma = (1 + alpha) / (1 - alpha)``, answers within ``alpha``
of every value in it (Masson et al., VLDB 2019). A state keeps a window of buckets per feature and
sign, collapsing the lowest magnitudes when wider; merges align windows and add counts, bitwise the
same for any chunking. Side-cars: :mod:`~daskbatch.stats.sketch_distinct`,
:mod:`~daskbatch.stats.sketch_tails`; layout: :mod:`~daskbatch.stats.sketch_layout`.
"""


from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from daskbatch._common import Array, Namespace
from daskbatch.stats import kernels
from daskbatch.stats._base import State
from daskbatch.stats.kernels.path import float32_block
from daskbatch.stats.numerics import (
    as_float64,
    device,
    namespace,
    positive_rows,
    to_numpy,
)
from daskbatch.stats.quantile import SketchResult
from daskbatch.stats.sketch_distinct import (
    compiled_distinct,
    distinct_quantile,
    empty_distinct,
    empty_grid,
    grid_bins,
    grid_chunk,
    grid_fine,
    grid_merge,
    kept_values,
    merge_distinct,
    xp_distinct,
)
from daskbatch.stats.sketch_layout import SketchLayout
from daskbatch.stats.sketch_tails import (
    empty_tails,
    merge_tails,
    tail_layout,
    tail_values,
    tails_chunk,
    tails_quantile,
)

#: Buckets per feature and sign that ``describe`` keeps where a sketch of every bucket does not fit.
WINDOW = 2048
#: Values the array-API chunk keys at a time (its temporaries, ~60 bytes a value, stay near 1 GiB).
BLOCK_VALUES = 2**24
_COUNT_DTYPES = ("int64", "int32")


#: The side-cars' fields of :class:`SketchState`, a group each: what their modules' functions take and give as a tuple.
_DISTINCT = ("distinct", "distinct_counts", "distinct_held")
_GRID = ("grid", "grid_step", "grid_first")
_TAILS = ("tail_low", "tail_high")


def _named(group: tuple[str, ...], parts: tuple[Array, ...]) -> dict[str, Array]:
    """The keyword arguments of :class:`SketchState` for one group of its fields."""
    return dict(zip(group, parts, strict=True))


def _group(s: SketchState, group: tuple[str, ...]) -> tuple[Any, ...]:
    """One group of the fields of ``s``, as its side-car module's functions take it."""
    return tuple(getattr(s, name) for name in group)


@dataclass(frozen=True, eq=False)
class SketchState(State):
    """Mergeable per-feature sketch: a window of buckets per sign, and the special slots.

    ``counts`` (D, 2 W + 4) int64 holds the negative window (W buckets of
    increasing magnitude), the positive window (likewise), then the counts of
    ``-inf``, zero (and magnitudes below ``min_magnitude``), ``+inf`` and NaN
    (float64 sums of the rows' weights when weighted).
    ``offset`` (D, 2) int64 is the bucket key (counted from the smallest key,
    0 based) of the first bucket of the negative and the positive window,
    ``n_buckets`` for an empty window. ``fmin``/``fmax`` (D,) float64 are the
    finite extrema (``+inf``/``-inf`` when a feature has none).
    ``distinct``/``distinct_counts`` (D, k) float64 and ``distinct_held`` (D,)
    int64 are the feature's distinct finite values while it has at most ``k``
    (:mod:`daskbatch.stats.sketch_distinct`).
    ``grid`` (D, K) counts of the finite values on the dyadic grid of
    width ``2**grid_step`` from ``grid_first * 2**grid_step`` (D,) int64
    (:func:`~daskbatch.stats.sketch_distinct.grid_merge`): merged quantiles are read in it.
    ``tail_low``/``tail_high`` (D, k) float64 are the ``k`` smallest and largest finite values
    (:mod:`daskbatch.stats.sketch_tails`); (D, 0) when weighted.
    """

    counts: Array
    offset: Array
    fmin: Array
    fmax: Array
    distinct: Array
    distinct_counts: Array
    distinct_held: Array
    grid: Array
    grid_step: Array
    grid_first: Array
    tail_low: Array
    tail_high: Array


@dataclass(frozen=True)
class Sketch(SketchLayout):  # numpydoc ignore=PR02
    """Relative-error quantile sketch of every feature, mergeable by aligning windows and adding counts.

    Parameters
    ----------
    alpha : float, default 0.005
        Relative accuracy: every quantile of a value with magnitude in
        ``[min_magnitude, max_magnitude]`` is within ``alpha`` of the exact one
        (unless its bucket was collapsed: see the module notes).
    min_magnitude, max_magnitude : float, default 1e-30 and 1e30
        The magnitudes that get buckets; :mod:`daskbatch.stats.sketch_layout` says what becomes of the rest.
    window : int, optional
        Buckets kept per feature and sign; the state takes ``2 * window + 6``
        int64 and float64 per feature. A sign whose populated buckets span a
        factor beyond ``gamma**window`` collapses its smallest magnitudes.
        Default: all ``n_buckets`` (nothing ever collapses, 221 kB a feature);
        ``describe`` takes the widest of :data:`~daskbatch.stats.sketch_windows.WINDOWS` that fits a worker.
    count_dtype : {"int64", "int32"}, default "int64"
        The dtype of unweighted counts. ``"int32"`` halves the state; a merge
        whose counts could pass ``2**31 - 1`` (more rows than that in all)
        promotes both states to int64 first, so no count ever wraps.
    """

    count_dtype: str = "int64"
    name = "sketch"
    #: The compiled kernels it has (read by :func:`~daskbatch.stats.kernels.path.kernel_path`).
    compiled_kernels = frozenset({"numba-cpu"})
    #: Its state is the same for a block and the block's float32 copy (``Bundle.chunk`` gives 1- and 2-byte values so).
    takes_float32_copy = True
    #: ``chunk`` takes sample weights (``weights=``): float64 weighted counts.
    takes_weights = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.count_dtype not in _COUNT_DTYPES:
            raise ValueError(f"count_dtype must be 'int64' or 'int32', got {self.count_dtype!r}")

    def empty(self, xp: Namespace, n_features: int, dev: object = None) -> SketchState:
        """Build the identity of :meth:`merge`: the state of a chunk with no rows.

        Parameters
        ----------
        xp : namespace
            The array namespace to allocate in.
        n_features : int
            Number of features.
        dev : device, optional
            The device to allocate on.

        Returns
        -------
        SketchState
            The empty state.
        """
        return SketchState(
            counts=xp.zeros((n_features, self.width), dtype=getattr(xp, self.count_dtype), device=dev),
            offset=xp.full((n_features, 2), self.n_buckets, dtype=xp.int64, device=dev),
            fmin=xp.full((n_features,), xp.inf, dtype=xp.float64, device=dev),
            fmax=xp.full((n_features,), -xp.inf, dtype=xp.float64, device=dev),
            **_named(_DISTINCT, empty_distinct(xp, n_features, self.values_kept, dev)),
            **_named(_GRID, empty_grid(xp, n_features, self.grid_bins, getattr(xp, self.count_dtype), dev)),
            **_named(_TAILS, empty_tails(xp, n_features, self.tail_values, dev)),
        )

    # ------------------------------------------------------- the contract
    def chunk(self, x: Array, label: Array | None = None, /, *, weights: Array | None = None) -> SketchState:
        """Count one block's values into the buckets.

        Parameters
        ----------
        x : array
            The block, (rows, features).
        label : array or None
            Ignored: the sketch does not read labels.
        weights : array, optional
            Non-negative finite weight of each row: the counts become float64
            sums of weights (the numba loop on the CPU, the array-API path on GPUs).

        Returns
        -------
        SketchState
            The block's counts and finite extrema.
        """
        xp = namespace(x)
        if weights is not None:
            x, _, weights = positive_rows(xp, x, None, weights)
        rows, n_features = x.shape
        dev = device(x)
        if rows == 0:
            empty = self.empty(xp, n_features, dev)
            if weights is None:
                return empty
            return dataclasses.replace(empty, counts=xp.astype(empty.counts, xp.float64),
                                       grid=xp.astype(empty.grid, xp.float64),
                                       **_named(_TAILS, empty_tails(xp, n_features, 0, dev)))
        if kernels.kernel_path(x, self).compiled:  # compiled CPU loop (daskbatch/stats/kernels), same state
            x = float32_block(x)  # once for the four loops below, where the values are 1 or 2 bytes
            k_min, k_max = self.key_range
            counts, offset, fmin, fmax = kernels.sketch(
                x, self.ln_gamma, self.min_magnitude, k_min, k_max, self.n_buckets, self.buckets_kept, weights,
                count_dtype=self._chunk_dtype(rows),
            )
            k = 0 if weights is not None else self.tail_values
            blocks = tail_layout(rows, n_features, k) if k else None  # filled in the grid's read of the chunk
            return SketchState(counts=counts, offset=offset, fmin=fmin, fmax=fmax,
                               **_named(_DISTINCT, compiled_distinct(x, self.values_kept, weights)),
                               **_named(_GRID, grid_chunk(x, fmin, fmax, self.grid_bins, weights, counts.dtype, blocks)),
                               **self._tails_for(x, weights, blocks))
        if rows > self._block_rows(n_features):
            # The array-API path (CuPy chunks) makes ~60 bytes of temporaries per value: rows a block
            # at a time keep them bounded, and merged windows are the same whatever the chunking.
            step = self._block_rows(n_features)
            state = None
            for start in range(0, rows, step):
                part = self.chunk(x[start : start + step], weights=None if weights is None else weights[start : start + step])
                state = part if state is None else self.merge(state, part)
            assert state is not None
            return state
        x = as_float64(x)
        counts, offset, fmin, fmax = self._xp_counts(x, weights, self._chunk_dtype(rows))
        return SketchState(
            counts=counts, offset=offset, fmin=fmin, fmax=fmax,
            **_named(_DISTINCT, xp_distinct(x, self.values_kept, weights)),
            **_named(_GRID, grid_chunk(x, fmin, fmax, self.grid_bins, weights, counts.dtype)),
            **self._tails_for(x, weights),
        )

    def merge(self, a: SketchState, b: SketchState, /) -> SketchState:
        """Align the windows of two states, add their counts and combine their extrema.

        Parameters
        ----------
        a, b : SketchState
            The states to combine.

        Returns
        -------
        SketchState
            The state of the union.
        """
        xp = namespace(a.counts, b.counts)
        a, b = _promoted(xp, a, b)
        fmin, fmax = xp.minimum(a.fmin, b.fmin), xp.maximum(a.fmax, b.fmax)
        distinct = self._merged_extras(a, b, fmin, fmax, xp.result_type(a.counts, b.counts))
        if self.buckets_kept == self.n_buckets:  # every bucket kept: every window starts at 0 (or is empty)
            return SketchState(counts=a.counts + b.counts, offset=xp.minimum(a.offset, b.offset), fmin=fmin, fmax=fmax,
                               **distinct)
        if kernels.kernel_path(a.counts, self).compiled and kernels.kernel_path(b.counts, self).compiled:
            counts, offset = kernels.sketch_merge(a.counts, a.offset, b.counts, b.offset, self.n_buckets, self.buckets_kept)
            return SketchState(counts=counts, offset=offset, fmin=fmin, fmax=fmax, **distinct)
        counts, offset = self._xp_merge(a.counts, a.offset, b.counts, b.offset)
        return SketchState(counts=counts, offset=offset, fmin=fmin, fmax=fmax, **distinct)

    def merge_many(self, states: Sequence[SketchState], /) -> SketchState:
        """Merge states left to right: :meth:`merge` in turn, bitwise, with one result array where every bucket is kept.

        Parameters
        ----------
        states : sequence of SketchState
            The states, at least one.

        Returns
        -------
        SketchState
            The state of the union.
        """
        dtypes = {str(s.counts.dtype) for s in states}
        integer = dtypes <= {"int32", "int64"}
        # Every bucket kept, integer counts or all weighted: merging is adding, so the sum is built
        # in one array (a merge per pair allocates and writes the whole state each time: at 256
        # features 28-57 MB, 2-3x the time of the additions).
        if len(states) < 3 or self.buckets_kept != self.n_buckets or not (integer or dtypes == {"float64"}):
            return functools.reduce(self.merge, states)
        xp = namespace(*(s.counts for s in states))
        if integer:  # the dtype the merges in turn end with: int32 only while no sum can pass it
            small = dtypes == {"int32"} and sum(_rows_counted(xp, s) for s in states) <= kernels.INT32_ROWS
            dtype = xp.int32 if small else xp.int64
        else:
            dtype = xp.float64
        counts = xp.astype(states[0].counts, dtype, copy=True)
        merged = dataclasses.replace(states[0], counts=counts)
        for s in states[1:]:  # in order: float64 sums of weights round as the merges in turn do
            counts += s.counts
            offset = xp.minimum(merged.offset, s.offset)
            fmin, fmax = xp.minimum(merged.fmin, s.fmin), xp.maximum(merged.fmax, s.fmax)
            merged = SketchState(counts=counts, offset=offset, fmin=fmin, fmax=fmax,
                                 **self._merged_extras(merged, s, fmin, fmax, dtype))
        return merged

    def _merged_extras(self, a: SketchState, b: SketchState, fmin: Array, fmax: Array, dtype: Any) -> dict[str, Array]:
        """The merged distinct values, grid and tails of two states, as keyword arguments of :class:`SketchState`."""
        return {**_named(_DISTINCT, merge_distinct(_group(a, _DISTINCT), _group(b, _DISTINCT), self.values_kept)),
                **_named(_GRID, grid_merge(_group(a, _GRID), _group(b, _GRID), fmin, fmax, dtype)),
                **_named(_TAILS, merge_tails(_group(a, _TAILS), _group(b, _TAILS)))}

    @property
    def values_kept(self) -> int:
        """Count the distinct values a state keeps per feature (:func:`~daskbatch.stats.sketch_distinct.kept_values`)."""  # numpydoc ignore=RT01
        return kept_values(self.buckets_kept)

    def exact_quantile(self, s: SketchState, q: float | Any) -> np.ndarray:
        """Give a state's exact ``inverted_cdf`` quantiles where distinct values or kept tails decide them (NaN elsewhere)."""  # numpydoc ignore=PR01,RT01
        w = self.buckets_kept
        counts = to_numpy(s.counts[:, 2 * w : 2 * w + 3])  # -inf, zero, +inf
        exact = distinct_quantile(to_numpy(s.distinct), to_numpy(s.distinct_counts), to_numpy(s.distinct_held),
                                  counts[:, 0], counts[:, 2], q, weighted=counts.dtype.kind == "f")
        if counts.dtype.kind != "f":  # the ranks among the kept tails: their values
            finite = to_numpy(s.counts[:, : 2 * w]).sum(axis=1, dtype=np.int64) + counts[:, 1]
            exact = np.where(np.isnan(exact), tails_quantile(s.tail_low, s.tail_high, finite, counts[:, 0], counts[:, 2], q),
                             exact)
        return exact[:, 0] if np.ndim(q) == 0 else exact

    def fine_grid(self, s: SketchState) -> tuple[np.ndarray, np.ndarray]:
        """Give a state's dyadic grid as the fine histogram of :func:`~daskbatch.stats.quantile.fine_quantile`: (D, bins + 2) counts, (D, 2) ranges."""  # numpydoc ignore=PR01,RT01
        w = self.buckets_kept
        ends = to_numpy(s.counts[:, 2 * w : 2 * w + 3])  # -inf, zero, +inf
        counts, step, first = (to_numpy(a) for a in _group(s, _GRID))
        return grid_fine(counts, step, first, ends[:, 0], ends[:, 2])

    @property
    def grid_bins(self) -> int:
        """Count the bins of the dyadic grid a state keeps per feature (:func:`~daskbatch.stats.sketch_distinct.grid_bins`)."""  # numpydoc ignore=RT01
        return grid_bins(self.buckets_kept)

    def _tails_for(self, x: Array, weights: Array | None, blocks: Any = None) -> dict[str, Array]:
        """The fields of a block's kept tails (``blocks``: their minima, counted already): (D, 0) when weighted."""
        return _named(_TAILS, tails_chunk(x, 0 if weights is not None else self.tail_values, blocks))

    @property
    def tail_values(self) -> int:
        """Count the smallest and largest values a state keeps per feature (:func:`~daskbatch.stats.sketch_tails.tail_values`)."""  # numpydoc ignore=RT01
        return tail_values(self.buckets_kept)

    def _chunk_dtype(self, rows: int) -> str:
        """Dtype of a chunk's unweighted counts: ``count_dtype``, int64 where ``rows`` alone could overflow int32."""
        return "int64" if rows > kernels.INT32_ROWS else self.count_dtype

    def _block_rows(self, n_features: int) -> int:
        """Rows the array-API chunk keys at a time: :data:`BLOCK_VALUES` values, at least one row."""
        return max(1, BLOCK_VALUES // max(1, n_features))

    def finalize(self, s: SketchState, /) -> SketchResult:
        """Put a state's slots in value order and split off the NaN counts and the finite extrema.

        Parameters
        ----------
        s : SketchState
            The state of all the rows.

        Returns
        -------
        SketchResult
            The sketch of every feature.
        """
        xp = namespace(s.counts)
        w = self.buckets_kept
        some = s.fmin <= s.fmax
        nan = xp.full_like(s.fmin, xp.nan)
        c = s.counts
        counts = xp.concat(
            [c[:, 2 * w : 2 * w + 1], xp.flip(c[:, :w], axis=1), c[:, 2 * w + 1 : 2 * w + 2], c[:, w : 2 * w],
             c[:, 2 * w + 2 : 2 * w + 3]],
            axis=1,
        )
        return SketchResult(
            counts=counts,
            offset=s.offset,
            nan_count=c[:, 2 * w + 3],
            finite_min=xp.where(some, s.fmin, nan),
            finite_max=xp.where(some, s.fmax, nan),
            alpha=float(self.alpha),
            min_magnitude=float(self.min_magnitude),
            max_magnitude=float(self.max_magnitude),
            window=int(self.buckets_kept),
            **_named(_DISTINCT, _group(s, _DISTINCT)),
        )


def _rows_counted(xp: Namespace, s: SketchState) -> int:
    """Rows an unweighted state counted: every value of a feature has a slot (NaN too), so feature 0's total."""
    if s.counts.shape[0] == 0:
        return 0
    return int(xp.sum(xp.astype(s.counts[0, :], xp.int64)))


def _promoted(xp: Namespace, a: SketchState, b: SketchState) -> tuple[SketchState, SketchState]:
    """Both states with int64 counts where int32 counts could overflow in their merge, else as they are."""
    small = [s.counts.dtype == xp.int32 for s in (a, b)]
    if not any(small) or _rows_counted(xp, a) + _rows_counted(xp, b) <= kernels.INT32_ROWS:
        return a, b
    return tuple(  # type: ignore[return-value]
        dataclasses.replace(s, counts=xp.astype(s.counts, xp.int64)) if int32 else s
        for s, int32 in zip((a, b), small, strict=True)
    )
