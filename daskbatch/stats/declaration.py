"""What a built-in statistic declares: its memory footprint, its summary variables, what it needs.

Each statistic module ends with one :class:`Declaration`, listed in
:data:`daskbatch.stats.registry.STATISTICS`. Stdlib only, so the planner reads it without NumPy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

# The memory model's names of the kernel paths ("compiled", "array-api", "gpu-compiled"),
# defined with the one function that chooses a block's path.
from daskbatch.stats.kernels.path import KERNEL_PATHS as KERNEL_PATHS

#: ``state(n_features, bins, n_classes, feature_tile) -> bytes`` of one state.
StateSize = Callable[[int, int, "int | None", "int | None"], int]


def _per_path(value: int) -> dict[str, int]:
    """The same value for every kernel path."""
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
    temporaries: Mapping[str, Mapping[str, int]] = field(
        default_factory=lambda: {p: {} for p in KERNEL_PATHS}
    )
    row_bytes: Mapping[str, int] = field(default_factory=lambda: _per_path(0))
    state_copies: Mapping[str, int] = field(default_factory=lambda: _per_path(0))
    merge_temporaries: int = 0
    reads_label: bool = False
    needs_classes: bool = False
    centring_rows: int | Callable[[int], int] = 0
    device_buffers: Callable[[int, int, int | None], int] | None = None
    compiled_scratch: Callable[[int], int] | None = None


def generic_footprint(name: str) -> Footprint:  # numpydoc ignore=PR01,RT01
    """A cautious footprint for a statistic that declares none (16 float64 vectors, what array-API code makes)."""
    return Footprint(
        name=name,
        state=lambda d, bins, k, tile: 16 * d * 8,
        float64_copies=_per_path(1),
        temporaries={p: {"float64": 4, "bool": 2} for p in KERNEL_PATHS},
        row_bytes=_per_path(16),
        state_copies=_per_path(1),
        merge_temporaries=1,
    )


@dataclass(frozen=True)
class Variable:  # numpydoc ignore=PR02
    """One variable of a summary that a statistic's result becomes: its dimensions and CF-style labels.

    Parameters
    ----------
    dims : tuple of str or None
        Its dimensions in :meth:`~daskbatch.Summary.to_xarray`; None: no data
        variable (``classes`` is the ``class`` coordinate, ``cov_count`` an attribute).
    long_name : str
        The ``long_name`` attribute.
    units : str, optional
        The ``units`` attribute (``"1"`` for counts).
    count : {None, "int64", "float64"}
        A count stored as int64; ``"float64"``: held as float64 in the summary.
    state : bool, default False
        Internal state: in user outputs only when asked for (``states=True``).
    settings : callable, optional
        ``settings(provenance)``: attributes read from the provenance (``ddof``).
    """

    dims: tuple[str, ...] | None
    long_name: str = ""
    units: str | None = None
    count: str | None = None
    state: bool = False
    settings: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None


@dataclass
class Finished:
    """What the passes finished, by statistic name, that each declaration turns into summary variables."""

    results: dict[str, Any]
    provenance: dict[str, Any]  # the summary's: a declaration may add to it
    states: dict[str, Any] | None = None  # merged states (registry.Kept)
    statistics: dict[str, Any] = field(default_factory=dict)  # as configured ("mi": its base)


@dataclass(frozen=True, eq=False)
class Declaration:  # numpydoc ignore=PR02
    """Everything about one built-in statistic, in one place (as flox's ``Aggregation``).

    Parameters
    ----------
    name : str
        The name users type (``stats="moments,cov"``) and results are keyed by.
    statistic : type or None
        Its class: ``chunk``/``merge``/``finalize`` and its parameters (fields).
    states : tuple of type
        Its state classes, the first its own: the only ones checkpoints and
        saved summaries rebuild for it.
    footprint : Footprint, optional
        What it holds in memory, for the planner.
    variables : mapping of str to Variable
        The summary variables it serves (``s.mean``, ``s.corr``).
    summarize : callable, optional
        ``summarize(declaration, finished) -> {variable: value}``; None: the Summary
        takes the result's fields of the variables' names (one variable: the result itself).
    needs_label, needs_class_label : bool, default False
        Computed only with a label or a continuous target; only with a class label.
    needs_ranges, by_label : bool, default False
        Counts into bins whose ranges are given or found by a first pass; per class of the label.
    needs_sketch : bool, default False
        Built for the second pass from the first pass's merged sketch (``spearman``'s ranks).
    selectable : bool, default True
        Users may name it (``--stats``); else the engine adds it (``qhist``).
    fused : bool, default True
        The engine's passes build it; False: the first pass runs it as configured.
    kernels : tuple of str
        The compiled kernels' entry points (``module:function``), left where they are.
    """

    name: str
    statistic: type | None
    states: tuple[type, ...] = ()
    footprint: Footprint | None = None
    variables: Mapping[str, Variable] = field(default_factory=dict)
    summarize: Callable[[Declaration, Finished], dict[str, Any]] | None = None
    needs_label: bool = False
    needs_class_label: bool = False
    needs_ranges: bool = False
    by_label: bool = False
    needs_sketch: bool = False
    selectable: bool = True
    fused: bool = True
    kernels: tuple[str, ...] = ()


def bias_setting(summary: Any) -> dict[str, Any]:  # numpydoc ignore=PR01,RT01
    """The ``bias`` attribute of skew and kurtosis (an int: netCDF attributes have no bool)."""
    bias = summary.provenance.get("bias")
    if bias is None:
        return {}
    return {
        "bias": int(bool(bias)),
        "comment": "bias=1: biased estimator (scipy.stats default); 0: bias-corrected",
    }


def ddof_setting(summary: Any) -> dict[str, Any]:  # numpydoc ignore=PR01,RT01
    """The ``ddof`` attribute of a variance-like variable, from the summary's provenance."""
    ddof = summary.provenance.get("ddof")
    return {} if ddof is None else {"ddof": int(ddof)}


def count(dims: tuple[str, ...], long_name: str, held: str = "int64", **kw: Any) -> Variable:
    """A count variable: unit ``"1"``, stored as int64 (``held="float64"``: exact counts held as float64)."""  # numpydoc ignore=PR01,RT01
    return Variable(dims, long_name, "1", held, **kw)
