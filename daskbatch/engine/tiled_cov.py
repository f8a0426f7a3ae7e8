"""The tiled covariance: a D x D co-moment state too large for one merge task, one tree per pair of feature tiles.

Each tile is reduced by :func:`daskbatch.engine.passes.tree_reduce` and written into Zarr by its own task;
:class:`TiledCov` reads the matrices back lazily.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import dask
import dask.array as da
import numpy as np

from daskbatch.config import STATISTIC_DEFAULTS
from daskbatch.engine.passes import tree_reduce
from daskbatch.errors import DataError
from daskbatch.io.outputs import MARKER, check_output, write_output
from daskbatch.runtime.capacity import rechunk_method
from daskbatch.stats.comoments import ROWS
from daskbatch.stats.numerics import rows_of
from daskbatch.stats.pairwise import PairwiseCoMomentsState, pairwise_means
from daskbatch.stats.tiled import CrossCoMoments, CrossCoMomentsState, finalize_tile

if TYPE_CHECKING:
    import zarr
    from dask.delayed import Delayed

__all__ = ["TiledCov", "open_tiled_cov", "tiled_covariance"]


@dataclass(frozen=True)
class TiledCov:
    """A covariance / correlation matrix stored as (tile, tile) chunks of a Zarr group.

    Attributes
    ----------
    path : str
        The Zarr group holding ``cov``, ``corr`` (D, D) and ``mean`` (D,).
    n : int
        Complete rows used (finite in every feature); pairwise, the fewest rows of any pair.
    tile : int
        Features per tile (the chunk width of ``cov`` and ``corr``).
    n_features : int
        D.
    ddof : int
        Delta degrees of freedom of ``cov``.
    feature_names : tuple of str
        Names used by :meth:`top_correlated`.
    weight_sum : float or None
        With sample weights, the weight sum of the complete rows (else None; pairwise None).
    rows : {"complete", "pairwise"}
        The rows of each covariance: the complete rows, or each pair's own.
    """

    path: str
    n: int
    tile: int
    n_features: int
    ddof: int
    feature_names: tuple[str, ...]
    weight_sum: float | None = None
    rows: str = STATISTIC_DEFAULTS["rows"]

    @property
    def pair_counts(self) -> da.Array | None:
        """Rows where both features of each pair are finite, (D, D), read lazily (None for complete rows)."""
        return da.from_zarr(self.path, component="pair_counts") if self.rows == "pairwise" else None

    @property
    def cov(self) -> da.Array:
        """The covariance, (D, D), read lazily from Zarr."""
        return da.from_zarr(self.path, component="cov")

    @property
    def corr(self) -> da.Array:
        """The Pearson correlation, (D, D), read lazily from Zarr."""
        return da.from_zarr(self.path, component="corr")

    @property
    def mean(self) -> np.ndarray:
        """The means, (D,), over the complete rows (pairwise: over each feature's finite values)."""
        import zarr  # lazy: zarr

        return np.asarray(zarr.open_array(self.path, path="mean", mode="r")[...])

    def top_correlated(self, k: int = 10) -> list[tuple[str, str, float]]:
        """The ``k`` pairs ``(a, b, r)`` of largest absolute correlation, read tile by tile (as Summary's)."""
        if k <= 0:
            return []
        n_tiles = math.ceil(self.n_features / self.tile)
        parts = [
            dask.delayed(_top_of_tile)(self.path, i, j, self.tile, k)
            for i in range(n_tiles) for j in range(i, n_tiles)
        ]
        rows, cols, r = (np.concatenate(v) for v in zip(*dask.compute(*parts), strict=True))
        order = np.lexsort((cols, rows, -np.abs(r)))[:k]
        names = self.feature_names
        return [(names[rows[o]], names[cols[o]], float(r[o])) for o in order]


def _top_of_tile(path: str, ti: int, tj: int, tile: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The k strongest finite pairs ``i < j`` of one tile of ``corr`` (global indices)."""
    import zarr  # lazy: zarr

    corr = zarr.open_array(path, path="corr", mode="r")
    i0, j0 = ti * tile, tj * tile
    block = np.asarray(corr[i0 : i0 + tile, j0 : j0 + tile])
    grid = np.indices(block.shape)
    ii, jj = grid[0], grid[1]  # numpy's stubs type unpacking an array as scalars
    keep = np.isfinite(block) & (ii + i0 < jj + j0)
    rows, cols, r = ii[keep] + i0, jj[keep] + j0, block[keep]
    order = np.lexsort((cols, rows, -np.abs(r)))[:k]
    return rows[order], cols[order], r[order]


def tiled_covariance(
    x: da.Array,
    *,
    tile: int,
    out: str | os.PathLike[str],
    ddof: int = STATISTIC_DEFAULTS["ddof"],
    split_every: int | None = None,
    feature_names: Any = None,
    protected: Mapping[str, str | os.PathLike[str] | None] | None = None,
    weights: da.Array | None = None,
    rows: str = STATISTIC_DEFAULTS["rows"],
) -> TiledCov:
    """Write the covariance and correlation of the columns of ``x`` into the Zarr group ``out``, tile by tile."""
    # tile: features per tile (Plan.feature_tile); an earlier tiled covariance at out is replaced once the new one
    # is complete, anything else refused. protected: paths out must not be, lie inside or hold. weights: frequency
    # weights (the covariance divides the weighted co-moments by W - ddof). rows: "complete" or "pairwise".
    if x.ndim != 2:
        raise ValueError(f"x has shape {x.shape}; expected 2-D (samples, features)")
    n_features = int(x.shape[1])
    if rows not in ROWS:
        raise ValueError(f"rows={rows!r}: rows must be one of {ROWS}")
    if int(tile) != tile or tile < 1:
        raise ValueError(f"tile must be a positive number of features, got {tile!r}")
    tile = min(int(tile), n_features)
    names = tuple(str(n) for n in feature_names) if feature_names is not None else tuple(
        f"f{i}" for i in range(n_features)
    )
    if len(names) != n_features:
        raise ValueError(f"{len(names)} feature names for {n_features} features")
    if weights is not None and (weights.ndim != 1 or weights.shape[0] != x.shape[0]):
        raise ValueError(f"weights has shape {weights.shape}; expected ({x.shape[0]},), one weight per row of x")
    # Checked before any compute; the tiles go to a temporary sibling renamed into place when all are written.
    target = check_output(out, kind="tiled_cov", what="cov_out", protected=protected)
    where = target.path
    found: list[tuple[int, float | None]] = []

    def fill(into: str) -> None:
        """Write every tile into the temporary group ``into``."""
        found.append(_fill_tiles(x, into, tile=tile, ddof=ddof, split_every=split_every, names=names, weights=weights,
                                 rows=rows))

    write_output(target, fill)
    n, weight_sum = found[0]
    return TiledCov(path=where, n=n, tile=tile, n_features=n_features, ddof=ddof, feature_names=names,
                    weight_sum=weight_sum, rows=rows)


def _fill_tiles(
    x: da.Array, where: str, *, tile: int, ddof: int, split_every: int | None, names: tuple[str, ...],
    weights: da.Array | None, rows: str,
) -> tuple[int, float | None]:
    """Create the group at ``where``, compute and write every tile; return the (fewest) rows and their weight sum."""
    import zarr  # lazy: zarr

    n_features = int(x.shape[1])
    pairwise = rows == "pairwise"
    attrs: dict[str, Any] = {MARKER: "tiled_cov", "daskbatch_tiled_cov": {"tile": tile, "ddof": ddof}}
    group = zarr.open_group(where, mode="w-", attributes=attrs)
    for name in ("cov", "corr", *(("pair_counts",) if pairwise else ())):
        group.create_array(name, shape=(n_features, n_features), chunks=(tile, tile), dtype="f8", fill_value=np.nan)
    group.create_array("mean", shape=(n_features,), chunks=(tile,), dtype="f8", fill_value=np.nan)

    # Complete rows: one pass over whole rows, shared by every tile; pairwise: each pair's own, in its tile.
    complete = None if pairwise else da.isfinite(x).all(axis=1)
    starts = list(range(0, n_features, tile))
    side = {i: x[:, a : a + tile] for i, a in enumerate(starts)}
    states: dict[tuple[int, int], Delayed] = {}
    for i in side:
        for j in range(i, len(starts)):
            block = side[i] if i == j else da.concatenate([side[i], side[j]], axis=1)
            stat = CrossCoMoments(split=None if i == j else int(side[i].shape[1]), rows=rows)
            states[i, j] = tree_reduce(
                stat, block.rechunk({1: -1}, method=rechunk_method()), complete=complete, weights=weights, split_every=split_every,
                finalize=False,
            )
    diag = {i: dask.delayed(_co_diagonal)(states[i, i]) for i in side}
    writes = [
        dask.delayed(_write_tile)(states[i, j], diag[i], diag[j], where, starts[i], starts[j], ddof, i == j)
        for i, j in states
    ]
    counts = set(dask.compute(*writes))
    if pairwise:  # each tile's fewest rows of a pair; the matrix's fewest
        n, weight_sum = int(min(c for c, _ in counts)), None
    else:  # every tile sees the same complete rows, and sums the same weights in the same order
        if len(counts) != 1:
            raise AssertionError(f"tiles disagree on the complete rows (count, weight sum): {sorted(counts)}")
        used, weight_sum = counts.pop()
        n = int(used)
    meta: dict[str, Any] = {"tile": tile, "ddof": ddof, "n": n, "feature_names": list(names), "rows": rows}
    if weights is not None and not pairwise:
        meta["weight_sum"] = weight_sum
    group.attrs.update({MARKER: "tiled_cov", "daskbatch_tiled_cov": meta})
    return n, weight_sum if weights is not None and not pairwise else None


def open_tiled_cov(path: str | os.PathLike[str]) -> TiledCov:
    """Reopen the result of :func:`tiled_covariance` from its Zarr group."""
    import zarr  # lazy: zarr

    where = os.fspath(path)
    group = zarr.open_group(where, mode="r")
    meta = _meta(group, where)
    return TiledCov(
        path=where, n=int(meta["n"]), tile=int(meta["tile"]),
        n_features=int(_array(group, "cov", where).shape[0]),
        ddof=int(meta["ddof"]), feature_names=tuple(meta["feature_names"]),
        weight_sum=None if meta.get("weight_sum") is None else float(meta["weight_sum"]),
        rows=str(meta.get("rows", "complete")),  # groups written before pairwise tiles: complete rows
    )


def _meta(group: zarr.Group, where: str) -> dict[str, Any]:
    """The ``daskbatch_tiled_cov`` attribute of the group (KeyError if absent)."""
    meta = group.attrs["daskbatch_tiled_cov"]
    if not isinstance(meta, dict):
        raise DataError(
            f"{where!r}: attribute 'daskbatch_tiled_cov' is a {type(meta).__name__}, not an object"
        )
    # Values are untyped JSON: tiled_covariance writes ints and a list of feature names.
    return meta


def _array(group: zarr.Group, name: str, where: str) -> zarr.Array:
    """Array ``name`` of the group, or a DataError naming what is there instead."""
    import zarr  # lazy: zarr

    node = group[name]
    if not isinstance(node, zarr.Array):
        raise DataError(f"{name!r} in {where!r} is a Zarr group, not an array")
    return node


def _co_diagonal(s: CrossCoMomentsState | PairwiseCoMomentsState) -> np.ndarray:
    """The co-moments of a diagonal tile's features with themselves (pairwise tiles do not read them)."""
    return np.diagonal(s.c).copy()


def _write_tile(
    s: CrossCoMomentsState, var_a: np.ndarray, var_b: np.ndarray, path: str,
    a: int, b: int, ddof: int, diagonal: bool,
) -> tuple[float, float]:
    """Finalize one tile and write it (and its mirror) into ``cov`` / ``corr``; return its (fewest) rows and weight sum."""
    import zarr  # lazy: zarr

    cov, corr = finalize_tile(s, var_a, var_b, ddof, diagonal)
    wa, wb = cov.shape
    rows = rows_of(s)
    pairwise = np.ndim(rows) == 2
    written = (("cov", cov), ("corr", corr), *((("pair_counts", rows),) if pairwise else ()))
    # Each (tile, tile) chunk has exactly one writer: tile (I, J) owns chunks (I, J) and (J, I).
    for name, values in written:
        arr = zarr.open_array(path, path=name, mode="r+")
        arr[a : a + wa, b : b + wb] = values
        if not diagonal:
            arr[b : b + wb, a : a + wa] = values.T
    if diagonal:
        mean = pairwise_means(s) if isinstance(s, PairwiseCoMomentsState) else np.where(s.n > 0, s.shift_a + s.mean_a, np.nan)
        zarr.open_array(path, path="mean", mode="r+")[a : a + wa] = mean
    if pairwise:
        return float(np.min(rows)) if rows.size else 0.0, 0.0
    return float(rows), float(s.n)  # without weights the weight sum is the row count
