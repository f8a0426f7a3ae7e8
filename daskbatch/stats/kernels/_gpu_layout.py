"""Launch shapes and buffer sizes of the GPU kernels: arithmetic on rows, features and card memory."""

from __future__ import annotations

import math

__all__ = [
    "CENTRE_SHARE", "FEATURE_THREADS", "HIST_MIN_BLOCK_ROWS", "HIST_TARGET_BLOCKS", "HIST_THREADS", "MAX_GRID_Y",
    "MIN_GROUP_ROWS", "SHARED_BYTES", "TARGET_THREADS", "centring_blocks", "centring_rows", "comoments_buffer_bytes",
    "group_features_bound", "histogram_layout", "moments_buffer_bytes", "row_groups",
]

#: Threads a first-pass launch aims at: enough to fill an H100/H200 a few times over.
TARGET_THREADS = 2**19
#: Fewest rows a thread of a first-pass kernel walks (fewer: the fold costs more than it saves).
MIN_GROUP_ROWS = 32
#: Largest grid y dimension CUDA allows.
MAX_GRID_Y = 65_535
#: Threads per block along the features.
FEATURE_THREADS = 128
#: The co-moments centre a chunk into a float64 buffer and add its ``devᵀ dev`` to the result
#: with one SYRK per buffer-full. The buffer holds the whole chunk (one SYRK) when that is at
#: most 1/CENTRE_SHARE of the card's memory, else as many rows as that share holds
#: (:func:`centring_rows`). The share is of the card's total memory, which the planner is
#: given as ``Resources.device_memory_bytes``: model and kernel size the buffer alike, and
#: the split of a chunk (hence its rounding) does not depend on what else the card holds
#: at the time. 1 GB on a 16 GB card, 5 GB on an 80 GB H100, 8.8 GB on an H200 (a
#: 100,000 x 5,000 float32 chunk in one SYRK).
CENTRE_SHARE = 16
#: Shared memory a histogram block may use for its private counters (the default per-block limit).
SHARED_BYTES = 48 * 2**10
#: Threads of a histogram block, and the blocks a histogram launch aims at.
HIST_THREADS = 256
HIST_TARGET_BLOCKS = 1024
#: Fewest rows a histogram block counts (its flush of private counters must pay off).
HIST_MIN_BLOCK_ROWS = 256


def group_features_bound(rows: int, n_features: int) -> int:
    """Bound ``groups x D`` of a first-pass launch (:func:`row_groups`), for the planner."""
    return min(
        -(-rows // MIN_GROUP_ROWS) * n_features,
        max(n_features, TARGET_THREADS),
        MAX_GRID_Y * n_features,
    )


def moments_buffer_bytes(rows: int, n_features: int, device_bytes: int | None = None) -> int:
    """Size the moments kernel's own device buffers: float64 partials (4 x groups x D), int64 counts (3 x)."""
    return 7 * 8 * group_features_bound(rows, n_features)


def centring_rows(rows: int, n_features: int, device_bytes: int | None = None) -> int:
    """Count the rows the co-moments centre into their float64 buffer at a time (one SYRK each)."""
    if device_bytes is None:
        return max(1, rows)
    return max(1, min(rows, device_bytes // CENTRE_SHARE // (8 * max(n_features, 1))))


def comoments_buffer_bytes(rows: int, n_features: int, device_bytes: int | None = None) -> int:
    """Size the co-moments kernel's device buffers: partials, row counts, the float64 centring buffer."""
    centre = centring_rows(rows, n_features, device_bytes) * n_features * 8
    return 8 * group_features_bound(rows, n_features) + 8 * -(-rows // MIN_GROUP_ROWS) + centre


def row_groups(rows: int, n_features: int, rows_per_group: int | None = None) -> tuple[int, int]:
    """Split the rows of an (R, D) chunk (R > 0) into groups for a first-pass kernel."""
    if rows_per_group is None:
        target = max(1, TARGET_THREADS // max(n_features, 1))
        rows_per_group = max(MIN_GROUP_ROWS, math.ceil(rows / target))
    rows_per_group = max(int(rows_per_group), math.ceil(rows / MAX_GRID_Y), 1)
    return rows_per_group, math.ceil(rows / rows_per_group)


def centring_blocks(
    rows: int,
    n_features: int,
    rows_per_group: int | None = None,
    block_rows: int | None = None,
    device_bytes: int | None = None,
) -> tuple[int, int]:
    """Choose the rows the co-moments centre at a time; give the most row groups one block splits into."""
    if block_rows is None:
        block_rows = centring_rows(rows, n_features, device_bytes)
    block_rows = max(1, min(rows, block_rows))
    last = rows % block_rows or block_rows
    groups = max(row_groups(kb, n_features, rows_per_group)[1] for kb in {block_rows, last})
    return block_rows, groups


def histogram_layout(
    rows: int, n_features: int, bins: int, n_classes: int, shared_bytes: int = SHARED_BYTES, counter_bytes: int = 4
) -> tuple[int, int, int] | None:
    """Lay out the privatised histogram kernel, or None when a tile does not fit."""
    per_feature = (bins + 3) * n_classes * counter_bytes
    tile = min(32, n_features, shared_bytes // per_feature)
    if tile < min(4, n_features):
        return None
    lanes = max(1, min(HIST_THREADS // tile, rows))
    n_tiles = math.ceil(n_features / tile)
    row_blocks = max(1, min(math.ceil(HIST_TARGET_BLOCKS / n_tiles), math.ceil(rows / HIST_MIN_BLOCK_ROWS)))
    row_blocks = min(row_blocks, MAX_GRID_Y)
    return tile, lanes, math.ceil(rows / row_blocks)
