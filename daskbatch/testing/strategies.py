"""Hypothesis strategies for the law suite: ill-conditioned sample arrays, chunkings, labels and merge trees."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

__all__ = ["chunk_sizes", "labels_for", "merge_tree", "sample_arrays", "split_points"]

#: Column shapes: (scale, offset) of ``k * scale + offset`` for integer ``k``.
#: Small integer multiples keep higher moments well conditioned while the
#: offsets exercise cancellation (1e8) and huge magnitudes (1e200 absorbs ``k``).
_SCALES = (0.125, 1.0, 2.0**-20)
_OFFSETS = (0.0, 1e6, -1e8, 1e200)
_SPECIAL = (math.nan, math.inf, -math.inf)


@st.composite
def sample_arrays(
    draw: st.DrawFn,
    *,
    min_rows: int = 0,
    max_rows: int = 32,
    min_features: int = 1,
    max_features: int = 4,
    nonfinite: bool = False,
) -> np.ndarray:
    """Draw a float64 (rows, features) array; axis 0 holds samples."""
    rows = draw(st.integers(min_rows, max_rows))
    features = draw(st.integers(min_features, max_features))
    shape = (rows, features)
    ks = draw(hnp.arrays(np.int16, shape, elements=st.integers(-1000, 1000)))
    scale = np.asarray(draw(st.lists(st.sampled_from(_SCALES), min_size=features, max_size=features)))
    offset = np.asarray(draw(st.lists(st.sampled_from(_OFFSETS), min_size=features, max_size=features)))
    x = ks.astype(np.float64) * scale + offset
    if nonfinite:
        # 0 keeps the value; 1, 2, 3 pick NaN, +inf, -inf. Mostly zeros (fill).
        kind = draw(hnp.arrays(np.int8, shape, elements=st.integers(0, 3), fill=st.just(0)))
        for code, value in enumerate(_SPECIAL, start=1):
            x[kind == code] = value
    return x


def split_points(n: int, *, max_pieces: int = 6) -> st.SearchStrategy[list[int]]:
    """Draw sorted cut positions in ``[0, n]`` for ``numpy.split``; repeats and ends give empty pieces."""
    return st.lists(st.integers(0, n), max_size=max_pieces - 1).map(sorted)


def chunk_sizes(n: int, *, max_chunks: int = 6) -> st.SearchStrategy[tuple[int, ...]]:
    """Draw dask-style chunk sizes summing to ``n`` (may include 0 and 1-row chunks)."""
    return split_points(n, max_pieces=max_chunks).map(
        lambda cuts: tuple(int(b - a) for a, b in zip([0, *cuts], [*cuts, n], strict=True))
    )


def labels_for(n: int, *, max_classes: int = 4) -> st.SearchStrategy[np.ndarray]:
    """Draw integer class labels ``0..K-1`` (int64) for ``n`` samples."""
    return st.lists(st.integers(0, max_classes - 1), min_size=n, max_size=n).map(
        lambda v: np.asarray(v, dtype=np.int64)
    )


def merge_tree(stat: Any, states: Sequence[Any], data: st.DataObject) -> Any:
    """Merge ``states`` (in order) along a randomly bracketed binary tree drawn from ``data``."""
    if len(states) == 1:
        return states[0]
    cut = data.draw(st.integers(1, len(states) - 1))
    return stat.merge(merge_tree(stat, states[:cut], data), merge_tree(stat, states[cut:], data))
