"""The compiled loop of the sketch's distinct values: exact counts of each feature's few finite values."""

from __future__ import annotations

import numpy as np

from daskbatch.stats.kernels._numba import _finite, _jit, _load, _weight
from daskbatch.stats.kernels._numba_sketch import _as_bits

#: Fibonacci hashing's multiplier (2**64 / golden ratio, as a wrapped int64): spreads nearby bit patterns.
_SPREAD = -7046029254386353131


@_jit
def _count_distinct(x, lut, weights, k, first, table, table_counts, values, counts, held):  # noqa: ANN001, ANN202
    """The compiled loop of :func:`distinct_counts`: the values in hash-table order."""
    rows = x.shape[0]
    d = table.shape[0]
    size = table.shape[1]
    mask = size - 1
    bits = 0
    while (1 << bits) < size:
        bits += 1
    shift = 64 - bits  # the hash's top bits index the table
    live = d
    for i in range(rows):
        if live == 0:
            break
        wi = _weight(weights, i)
        for j in range(d):
            if held[j] > k:
                continue
            v = _load(x[i, first + j], lut)
            if not _finite(v):
                continue  # ±inf have slots of the sketch's own; NaN is left out
            v = v + 0.0  # -0.0 and 0.0 are one value
            h = ((_as_bits(v) * _SPREAD) >> shift) & mask
            t = table[j, h]
            while t != v and t == t:  # an empty entry holds NaN, which no stored value is
                h = (h + 1) & mask
                t = table[j, h]
            if t == v:
                table_counts[j, h] += wi
            elif held[j] == k:
                held[j] = k + 1  # too many: from here the sketch's buckets answer
                live -= 1
            else:
                table[j, h] = v
                table_counts[j, h] = wi
                held[j] += 1
    for j in range(d):  # each feature's held values, in the table's order
        if held[j] > k:
            continue
        m = 0
        for h in range(size):
            if table[j, h] == table[j, h]:
                values[j, m] = table[j, h]
                counts[j, m] = table_counts[j, h]
                m += 1


def distinct_counts(
    x: np.ndarray, lut: np.ndarray | None, weights: np.ndarray | None, k: int, first: int, table: np.ndarray,
    table_counts: np.ndarray, values: np.ndarray, counts: np.ndarray, held: np.ndarray,
) -> None:
    """Count the distinct finite values of the features ``first ..`` while each has at most ``k`` of them."""
    _count_distinct(x, lut, weights, k, first, table, table_counts, values, counts, held)
    # Sorted by NumPy, not in the compiled loop: numba's argsort took a second of the first call's compile.
    # The values are distinct, so any sort gives the one order.
    for j in np.flatnonzero(held <= k):
        order = np.argsort(values[j, : held[j]])
        values[j, : held[j]] = values[j, : held[j]][order]
        counts[j, : held[j]] = counts[j, : held[j]][order]
