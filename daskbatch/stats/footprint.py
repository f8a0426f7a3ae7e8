"""What a statistic holds in memory, declared by the statistic for the planner's memory model.

Each statistic module declares a :class:`Footprint` next to its state (how big
the state is, which chunk-sized and row-sized temporaries its kernels make on
each kernel path, what one merge adds). :mod:`daskbatch.planning.memory` adds
them up; it keeps no table of its own. The numbers of the built-in statistics
are checked against ``tracemalloc`` in ``tests/test_plan_memory.py``
(projected between 1x and 2x of measured): tune them there when a kernel changes.

Pure (stdlib only), so the planning layer can read it without dask or NumPy. The kernel
paths its tables are keyed by are those of :data:`daskbatch.stats.kernels.path.KERNEL_PATHS`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

# The memory model's names of the kernel paths ("compiled", "array-api", "gpu-compiled"),
# defined with the one function that chooses a block's path.
from daskbatch.stats.kernels.path import KERNEL_PATHS

__all__ = ["KERNEL_PATHS", "Footprint", "StateSize", "generic_footprint"]

#: ``state(n_features, bins, n_classes, feature_tile) -> bytes`` of one state.
StateSize = Callable[[int, int, "int | None", "int | None"], int]


def _per_path(value: int) -> dict[str, int]:
    return dict.fromkeys(KERNEL_PATHS, value)


@dataclass(frozen=True, eq=False)  # compared by identity: its tables are dicts
class Footprint:  # numpydoc ignore=PR02
    """Memory a statistic needs, in terms of the sizes the planner knows.

    Parameters
    ----------
    name : str
        The statistic's name (``stats=`` and task names).
    state : callable
        ``state(n_features, bins, n_classes, feature_tile)``: bytes of one state.
    float64_copies : mapping of kernel path to int
        Float64 copies of the whole chunk the kernel makes.
    temporaries : mapping of kernel path to {dtype name: count}
        Further chunk-sized (rows x features) temporaries alive at the kernel's
        peak, by dtype (``"float64"``, ``"int64"``, ``"bool"``).
    row_bytes : mapping of kernel path to int
        Bytes per row of row-length temporaries (masks, label codes).
    state_copies : mapping of kernel path to int
        Transient state-sized arrays built next to the state.
    merge_temporaries : int
        State-sized temporaries of one pairwise merge.
    reads_label : bool
        ``chunk`` reads the class label (one int64 per row).
    needs_classes : bool
        The state grows with the number of classes (``n_classes`` is required).
    centring_rows : int or callable
        Compiled path only: rows centred into one float64 buffer at a time, or
        ``centring_rows(n_features)`` giving them.
    device_buffers : callable, optional
        ``device_buffers(rows, n_features, device_bytes)``: bytes of the GPU
        kernel's own buffers on the "gpu-compiled" path (launch partials,
        centring buffer) on a card of ``device_bytes`` total memory (None: unknown).
    compiled_scratch : callable, optional
        Compiled path only: ``compiled_scratch(n_features)``, bytes of working
        buffers that do not grow with the rows (the distinct values' hash tables).
    """

    name: str
    state: StateSize
    float64_copies: Mapping[str, int] = field(default_factory=lambda: _per_path(0))
    temporaries: Mapping[str, Mapping[str, int]] = field(default_factory=lambda: {p: {} for p in KERNEL_PATHS})
    row_bytes: Mapping[str, int] = field(default_factory=lambda: _per_path(0))
    state_copies: Mapping[str, int] = field(default_factory=lambda: _per_path(0))
    merge_temporaries: int = 0
    reads_label: bool = False
    needs_classes: bool = False
    centring_rows: int | Callable[[int], int] = 0
    device_buffers: Callable[[int, int, int | None], int] | None = None
    compiled_scratch: Callable[[int], int] | None = None


def generic_footprint(name: str) -> Footprint:
    """Build a cautious footprint for a user's statistic that declares none.

    Assumes a state of 16 float64 vectors per feature, four float64 and two
    bool chunk-sized temporaries plus a float64 copy (what an array-API
    ``chunk`` typically makes), and one state-sized temporary per merge.
    Declare a ``footprint`` attribute on the statistic to plan more tightly.

    Parameters
    ----------
    name : str
        The statistic's name.

    Returns
    -------
    Footprint
        The assumed footprint.
    """
    return Footprint(
        name=name,
        state=lambda d, bins, k, tile: 16 * d * 8,
        float64_copies=_per_path(1),
        temporaries={p: {"float64": 4, "bool": 2} for p in KERNEL_PATHS},
        row_bytes=_per_path(16),
        state_copies=_per_path(1),
        merge_temporaries=1,
    )
