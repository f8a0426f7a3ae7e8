"""The sketches ``describe`` plans for wide data, and the memory each takes.

Sizes :class:`~daskbatch.stats.sketch.Sketch`'s state for the planner (:func:`footprint_for`) and lists
the windowed sketches tried, widest first (:data:`WINDOWS`, :func:`window_of`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from daskbatch.stats.declaration import Declaration, Finished, Footprint, Variable, count
from daskbatch.stats.sketch import BLOCK_VALUES, WINDOW, Sketch, SketchState
from daskbatch.stats.sketch_distinct import distinct_scratch_bytes
from daskbatch.stats.sketch_tails import tails_scratch_bytes

#: Bytes per value of the array-API chunk's block: its float64 copy, and the magnitudes, logs, keys,
#: columns and masks (3 float64, 3 int64, 3 bool) alive at its peak.
_BLOCK_BYTES_PER_VALUE = 8 + 3 * 8 + 3 * 8 + 3


def state_bytes_per_feature(window: int | None, count_dtype: str = "int64") -> int:
    """Give the bytes a :class:`Sketch` state takes per feature: counts, offsets, finite extrema, distinct values, grid, tails."""
    sketch = Sketch(window=window)
    # float64 values and counts, and how many are held (daskbatch.stats.sketch_distinct)
    distinct = sketch.values_kept * 2 * 8 + 8
    tails = 2 * sketch.tail_values * 8  # the smallest and largest values, float64 (daskbatch.stats.sketch_tails)
    # counts and dyadic grid in count_dtype, two offsets, two extrema, the grid's step and first bin
    return (sketch.width + sketch.grid_bins) * (4 if count_dtype == "int32" else 8) + 2 * 8 + 2 * 8 + 2 * 8 + distinct + tails


def _gpu_block_bytes(rows: int, n_features: int, device_bytes: int | None) -> int:
    """Device bytes of the array-API chunk on a CuPy block: one block of :data:`BLOCK_VALUES` values at most."""
    return min(rows, max(1, BLOCK_VALUES // max(1, n_features))) * n_features * _BLOCK_BYTES_PER_VALUE


def footprint_for(window: int | None, count_dtype: str = "int64") -> Footprint:
    """Give the planner's footprint of a :class:`~daskbatch.stats.sketch.Sketch` with ``window`` buckets per sign (None: all)."""
    per_feature = state_bytes_per_feature(window, count_dtype)
    layout = Sketch(window=window)
    int64_counts = 1 if count_dtype == "int64" else 2  # the bincount output, in state units
    return Footprint(
        name="sketch",
        state=lambda d, bins, k, tile: d * per_feature,
        float64_copies={"compiled": 0, "array-api": 1, "gpu-compiled": 0},
        temporaries={
            "compiled": {"bool": 1},  # one byte a value: the exact tails' block minima (sketch_tails)
            "array-api": {"float64": 3, "int64": 3, "bool": 3},
            "gpu-compiled": {},
        },
        state_copies={"compiled": 0, "array-api": int64_counts, "gpu-compiled": int64_counts + 2},
        merge_temporaries=0,  # a merge writes into its result, MERGE_ROWS features at a time
        device_buffers=_gpu_block_bytes,
        compiled_scratch=lambda d: (
            distinct_scratch_bytes(d, layout.values_kept) + tails_scratch_bytes(d, layout.tail_values)
        ),
    )


#: The default sketch's footprint (every bucket kept: 221 kB a feature).
FOOTPRINT = footprint_for(None)
#: The relative accuracy of the default sketch's buckets merged in pairs (UDDSketch's uniform collapse,
#: Epicoco et al. 2020): ``gamma`` squared, so ``alpha' = 2 alpha / (1 + alpha**2)``, just under 1 %.
#: A window of these buckets spans as many decades as one of twice as many default buckets.
PAIRED_ALPHA = 2 * Sketch.alpha / (1 + Sketch.alpha**2)
#: Sketches ``describe`` tries, widest first, where the sketch of every bucket does not fit a worker:
#: (window, count dtype, alpha), 33, 16, 8 and 4 kB a feature. A window spans ``gamma**window`` in
#: magnitude per sign before it collapses its smallest magnitudes: 10**8.9 for the first three (0.5 %,
#: 0.5 % and 1 % relative accuracy), 10**4.4 for the last (1 %).
WINDOWS: tuple[tuple[int, str, float], ...] = (
    (WINDOW, "int64", Sketch.alpha), (WINDOW, "int32", Sketch.alpha), (WINDOW // 2, "int32", PAIRED_ALPHA),
    (WINDOW // 4, "int32", PAIRED_ALPHA),
)
#: Their footprints, in that order (each named ``"sketch"``; :func:`window_of` tells them apart).
WINDOWED_FOOTPRINTS: tuple[Footprint, ...] = tuple(footprint_for(w, c) for w, c, _ in WINDOWS)


def window_of(stat: object) -> tuple[int, str, float] | None:
    """Give the (window, count dtype, alpha) of one of :data:`WINDOWED_FOOTPRINTS`, None for anything else."""
    return next((chosen for footprint, chosen in zip(WINDOWED_FOOTPRINTS, WINDOWS, strict=True) if stat is footprint), None)


def _sketch_variables(declaration: Declaration, done: Finished) -> dict[str, Any]:
    """The window of sketch slots that hold counts, and the finite extrema (its layout in the provenance)."""
    if "sketch" not in done.results:
        return {}
    r = done.results["sketch"]
    # The full layout holds ~27,600 slots per feature; data rarely span more than a few decades, so the
    # summary keeps only the columns from the first to the last non-empty slot over all features (and records
    # where they start).
    counts, slots = r.runs()  # the other columns are empty
    held = counts > 0
    first, stop = (int(slots[held].min()), int(slots[held].max()) + 1) if held.any() else (0, 0)
    window = np.zeros((counts.shape[0], stop - first), dtype=counts.dtype)  # float64 sums of weights when weighted
    rows = np.nonzero(held)[0]
    window[rows, slots[held] - first] = counts[held]  # a feature's held slots are distinct
    done.provenance["sketch"] = {
        "alpha": r.alpha, "min_magnitude": r.min_magnitude, "max_magnitude": r.max_magnitude,
        "first_slot": first, "window": r.window,
    }
    extrema = np.stack([np.asarray(r.finite_min), np.asarray(r.finite_max)], axis=1)
    return {"sketch_counts": window, "sketch_extrema": extrema}


def _accuracy(summary: Any) -> dict[str, Any]:
    """The sketch's relative accuracy, from the provenance."""
    spec = summary.provenance.get("sketch")
    return {"relative_accuracy": float(spec.get("alpha", float("nan")))} if isinstance(spec, dict) else {}


DECLARATION = Declaration(
    "sketch", Sketch, states=(SketchState,), footprint=FOOTPRINT,
    variables={
        "sketch_counts": count(("feature", "sketch_slot"), "quantile sketch counts", state=True, settings=_accuracy),
        "sketch_extrema": Variable(("feature", "extreme"), "finite minimum and maximum seen by the quantile sketch",
                                   state=True),
    },
    summarize=_sketch_variables,
    kernels=("daskbatch.stats.kernels:sketch", "daskbatch.stats.kernels:sketch_merge"),
)
