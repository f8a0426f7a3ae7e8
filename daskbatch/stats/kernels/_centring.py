"""How many rows the compiled CPU co-moments centre at a time (read by the kernel and the planner)."""

from __future__ import annotations

#: Bytes of the float64 centring buffer aimed at: with the float32 block it is read from,
#: it stays in one core's L2 cache (1-2 MiB on current x86 server cores), so the block is
#: read from memory once and centred, then multiplied, from cache.
CENTRING_BUFFER_BYTES = 512 * 2**10

#: Fewest rows per block: each block costs a BLAS call and a few small NumPy operations,
#: and OpenBLAS's syrk slows down on short blocks of many features.
MIN_CENTRING_ROWS = 1024

#: Most rows per block: on few features more rows only add memory.
MAX_CENTRING_ROWS = 4096


def centring_rows(n_features: int) -> int:
    """Count the rows centred into the float64 buffer at a time for a chunk of ``n_features`` features."""
    rows = CENTRING_BUFFER_BYTES // (8 * max(n_features, 1))
    return max(MIN_CENTRING_ROWS, min(MAX_CENTRING_ROWS, rows))
