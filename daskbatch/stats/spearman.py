"""Spearman rank correlation out of core: ranks from the first pass's sketch, their co-moments in the second.

Midranks are exact where the sketch kept all distinct values, else within ``count(bin) / (2 n)``;
:attr:`SpearmanResult.spearman_bound` bounds the effect. ``merge``/``update`` leave it out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from daskbatch._common import Array
from daskbatch.stats._base import State
from daskbatch.stats.comoments import _PAIR, CoMoments, CoMomentsState, _comoment_state_bytes
from daskbatch.stats.declaration import KERNEL_PATHS, Declaration, Footprint, Variable
from daskbatch.stats.numerics import device, namespace, to_numpy
from daskbatch.stats.sketch_distinct import grid_index


@dataclass(frozen=True, eq=False)
class RankMap:
    """Every feature's normalized midranks from the first pass's sketch: its grid, its exact distinct values, its buckets."""

    grid_step: np.ndarray
    grid_first: np.ndarray
    grid_upto: np.ndarray
    values: np.ndarray
    value_ranks: np.ndarray
    exact: np.ndarray
    layout: Any
    bucket_slots: np.ndarray
    bucket_upto: np.ndarray

    @classmethod
    def from_sketch(cls, sketch: Any, state: Any) -> RankMap:
        """Read the midranks of every feature from a merged sketch state (``Sketch``, ``SketchState``)."""
        cells = sketch.fine_grid(state)[0].astype(np.float64)  # -inf, the grid's bins, +inf
        n = cells.sum(axis=1, keepdims=True)
        total = np.where(n > 0, n, 1.0)
        grid_upto = _upto(cells) / total

        counts, slots = sketch.finalize(state).runs()
        held_slots = np.count_nonzero(counts, axis=1)
        bucket_upto = _upto(counts.astype(np.float64)) / total
        bucket_upto[np.arange(len(held_slots)), held_slots] = 1.0  # past the last held slot: everything

        held = to_numpy(state.distinct_held)
        k = state.distinct.shape[1]
        exact = held <= k
        values = np.full((len(held), k), np.nan)
        value_ranks = np.full((len(held), k), np.nan)
        distinct, distinct_counts = to_numpy(state.distinct), to_numpy(state.distinct_counts)
        for d in np.flatnonzero(exact):
            m = int(held[d])
            values[d, :m] = distinct[d, :m]
            value_ranks[d, :m] = (cells[d, 0] + np.cumsum(distinct_counts[d, :m]) - distinct_counts[d, :m] * 0.5)
            value_ranks[d, :m] /= total[d, 0]
        return cls(
            grid_step=to_numpy(state.grid_step).astype(np.int64), grid_first=to_numpy(state.grid_first).astype(np.int64),
            grid_upto=grid_upto, values=values, value_ranks=value_ranks, exact=exact, layout=sketch,
            bucket_slots=slots, bucket_upto=bucket_upto,
        )

    def ranks(self, x: Array) -> tuple[Array, Array]:
        """Give every value of the block ``x`` (rows, D) its feature's midrank, and how far it may be from it."""
        xp, dev = namespace(x), device(x)
        x = xp.astype(x, xp.float64)
        # The value's bin of the grid, then its bucket of the sketch: each brackets [F(v-), F(v)];
        # the midrank is the middle of where the two brackets meet.
        bins = self.grid_upto.shape[1] - 3
        cell = grid_index(x, self.grid_step, self.grid_first, bins) + 1
        cell = xp.where(x == -xp.inf, xp.zeros_like(cell), xp.where(x == xp.inf, xp.full_like(cell, bins + 1), cell))
        lo, hi = _bracket(self.grid_upto, cell, cell + 1)
        slot = self.layout.slots(x)
        columns = []
        for d in range(x.shape[1]):
            held = xp.asarray(self.bucket_slots[d], device=dev)
            at = xp.searchsorted(held, slot[:, d])
            found = xp.take(held, xp.clip(at, 0, held.shape[0] - 1)) == slot[:, d]
            # A slot the sketch does not hold was counted in a neighbour (a collapsed window): span both.
            columns.append((xp.where(found, at, at - 1), at + 1))
        first = xp.clip(xp.stack([c[0] for c in columns], axis=1), 0, None)
        last = xp.stack([c[1] for c in columns], axis=1)
        b_lo, b_hi = _bracket(self.bucket_upto, first, last)
        lo, hi = xp.maximum(lo, b_lo), xp.minimum(hi, b_hi)
        ranks, errors = (lo + hi) * 0.5, xp.maximum(hi - lo, 0.0) * 0.5
        if self.exact.any():
            ranks, errors = self._exact_ranks(x, ranks, errors)
        nan = xp.isnan(x)
        return xp.where(nan, xp.asarray(xp.nan, device=dev), ranks), xp.where(nan, 0.0, errors)

    def _exact_ranks(self, x: Array, ranks: Array, errors: Array) -> tuple[Array, Array]:
        """``ranks`` and ``errors`` with the exact features' finite values read from their distinct values."""
        xp, dev = namespace(x), device(x)
        rank_columns, error_columns = [], []
        for d in range(x.shape[1]):
            held = int(np.count_nonzero(~np.isnan(self.values[d])))
            if not self.exact[d] or not held:
                rank_columns.append(ranks[:, d])
                error_columns.append(errors[:, d])
                continue
            values = xp.asarray(self.values[d, :held], device=dev)
            at = xp.clip(xp.searchsorted(values, x[:, d]), 0, held - 1)
            exact = xp.take(xp.asarray(self.value_ranks[d, :held], device=dev), at)
            finite = xp.isfinite(x[:, d])  # ±inf: the grid's end cells, exact too
            rank_columns.append(xp.where(finite, exact, ranks[:, d]))
            error_columns.append(xp.where(finite, 0.0, errors[:, d]))
        return xp.stack(rank_columns, axis=1), xp.stack(error_columns, axis=1)


def _upto(cells: np.ndarray) -> np.ndarray:
    """The count below every cell of each row, then the row's total: (D, L + 1)."""
    return np.concatenate([np.zeros((cells.shape[0], 1)), np.cumsum(cells, axis=1)], axis=1)


def _bracket(upto: np.ndarray, first: Array, stop: Array) -> tuple[Array, Array]:
    """The shares below cell ``first`` and below cell ``stop`` of every value's feature (rows, D)."""
    xp = namespace(first)
    width = upto.shape[1]
    table = xp.reshape(xp.asarray(upto, device=device(first)), (-1,))
    base = xp.arange(first.shape[1], dtype=xp.int64, device=device(first))[None, :] * width
    lo = xp.take(table, xp.reshape(xp.clip(first, 0, width - 1) + base, (-1,)))
    hi = xp.take(table, xp.reshape(xp.clip(stop, 0, width - 1) + base, (-1,)))
    return xp.reshape(lo, first.shape), xp.reshape(hi, first.shape)


@dataclass(frozen=True, eq=False)
class SpearmanState(State):
    """The co-moments of the ranks of the complete rows seen, and the sum of their squared rank errors (D,)."""

    comoments: CoMomentsState
    error_squares: Array


@dataclass(frozen=True)
class SpearmanResult:
    """The Spearman correlation (D, D) of the complete rows, its bound, and the rows counted (``n``)."""

    n: Array
    spearman: Array
    spearman_bound: Array


@dataclass(frozen=True, eq=False)
class Spearman:  # numpydoc ignore=PR02
    """Spearman rank correlation of every pair of features, from midranks the first pass's sketch gives.

    ``describe(x, stats=("spearman",))`` builds it for the second pass; the result's
    ``spearman_bound`` (D, D) bounds ``|spearman - exact|`` (module notes).

    Parameters
    ----------
    ranks : RankMap, optional
        The midranks of every feature; None until the first pass has run.
    """

    ranks: RankMap | None = field(default=None, repr=False)
    name = "spearman"

    def chunk(self, x: Array, label: Array | None = None, /) -> SpearmanState:
        """Reduce one block to the co-moments of its midranks."""
        if self.ranks is None:
            raise ValueError("Spearman needs the first pass's ranks: describe(x, stats=('spearman',)) builds them")
        ranks, errors = self.ranks.ranks(x)
        xp = namespace(errors)
        complete = xp.all(~xp.isnan(ranks), axis=1)[:, None]
        squares = xp.sum(xp.where(complete, errors * errors, 0.0), axis=0)
        return SpearmanState(CoMoments(ddof=0).chunk(ranks), squares)

    def merge(self, a: SpearmanState, b: SpearmanState, /) -> SpearmanState:
        """Combine the states of two disjoint sets of rows ranked by the same map."""
        return SpearmanState(CoMoments(ddof=0).merge(a.comoments, b.comoments), a.error_squares + b.error_squares)

    def finalize(self, s: SpearmanState, /) -> SpearmanResult:
        """Compute the correlation of the ranks and its bound."""
        result = CoMoments(ddof=0).finalize(s.comoments)
        xp = namespace(result.cov)
        cov, corr = to_numpy(result.cov), to_numpy(result.corr)
        spread = np.sqrt(np.maximum(np.diagonal(cov), 0.0))
        rows = max(float(to_numpy(result.n)), 1.0)
        bound = _bound(cov, corr, spread, np.sqrt(to_numpy(s.error_squares) / rows))
        return SpearmanResult(n=result.n, spearman=result.corr, spearman_bound=xp.asarray(bound))


def _bound(cov: np.ndarray, corr: np.ndarray, spread: np.ndarray, eps: np.ndarray) -> np.ndarray:
    """The widest change of each correlation that ranks within ``eps`` of their own allow (module notes)."""
    e_i, e_j = eps[:, None], eps[None, :]
    s_i, s_j = spread[:, None], spread[None, :]
    slack = e_i * (s_j + e_j) + e_j * (s_i + e_i) + e_i * e_j
    low, high = (s_i - e_i) * (s_j - e_j), (s_i + e_i) * (s_j + e_j)
    with np.errstate(divide="ignore", invalid="ignore"):
        corners = np.stack([(cov + a) / b for a in (-slack, slack) for b in (low, high)])
        bound = np.max(np.abs(np.clip(corners, -1.0, 1.0) - corr), axis=0)
    bound = np.where((low > 0) | (slack == 0), bound, 2.0)  # spreads that may vanish: nothing is known
    bound = np.where(slack == 0, 0.0, np.where(np.isnan(corr), np.nan, bound))
    np.fill_diagonal(bound, np.where(np.isnan(np.diagonal(corr)), np.nan, 0.0))  # a feature with itself: 1
    return bound


FOOTPRINT = Footprint(
    name="spearman",
    state=lambda d, bins, k, tile: _comoment_state_bytes(d, bins, k, None),  # never tiled: ranks of all pairs
    float64_copies=dict.fromkeys(KERNEL_PATHS, 2),  # the ranks, and the co-moments' centred copy
    temporaries={p: {"int64": 2, "bool": 2} for p in KERNEL_PATHS},  # grid cells and their flat index; masks
    row_bytes=dict.fromkeys(KERNEL_PATHS, 16),
    state_copies=dict.fromkeys(KERNEL_PATHS, 2),
    merge_temporaries=3,
)

DECLARATION = Declaration(
    "spearman", Spearman, footprint=FOOTPRINT, needs_sketch=True,
    variables={
        "spearman": Variable(_PAIR, "Spearman rank correlation over the complete rows", "1"),
        "spearman_bound": Variable(_PAIR, "bound on |spearman - exact| from the ranks' resolution", "1"),
    },
)
