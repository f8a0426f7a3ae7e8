"""The planner's memory model, what it reads (:class:`Resources`) and what it returns (:class:`Plan`).

Pure (no dask, zarr or cupy). Each statistic declares its :class:`~daskbatch.stats.declaration.Footprint` and the
model adds them up: a chunk task holds the raw block, its read buffers, one float64 copy (and the CPU kernels'
float32 copy of 1- and 2-byte values), labels and weights, the hungriest statistic's temporaries and all states; a
merge task ``split_every`` input states, the old and new results and the largest merge temporaries (checked against
``tracemalloc`` in ``tests/test_plan_memory.py``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any

from daskbatch import _common as _html
from daskbatch import config
from daskbatch._common import plural as _plural
from daskbatch.config import STATISTIC_DEFAULTS
from daskbatch.stats.declaration import KERNEL_PATHS, Footprint
from daskbatch.stats.kernels.path import FLOAT32_COPY_ITEMSIZE
from daskbatch.stats.registry import STATISTICS as DECLARED

__all__ = [
    "DEFAULT_STATISTICS", "READ_BUFFERS", "STATISTICS", "TASK_OVERHEAD_BYTES",
    "WEIGHT_ROW_BYTES", "Plan", "Resources", "StatLike", "budget_bytes", "budget_formula", "chunk_task_terms",
    "footprint", "format_bytes", "merge_task_bytes", "merge_terms", "projected_task_bytes", "stat_name",
    "state_bytes",
]

#: Statistics the engine knows, in the order they are reported.
STATISTICS: tuple[str, ...] = tuple(name for name, d in DECLARED.items() if d.footprint is not None and d.selectable)

#: What is planned when no statistics are named (``describe``'s default).
DEFAULT_STATISTICS: tuple[str, ...] = ("moments", "cov", "hist", "mi")

#: Buffers of reading one block from a compressed Zarr store, beyond the block itself, in
#: units of the raw block: the compressed bytes and the decoded chunk (tracemalloc: ~3x raw
#: at the read's peak). Usually they are freed when the read returns, but now and then zarr
#: still holds them while the kernels run (seen with tracemalloc, garbage collector on or off),
#: so the model counts them alongside the kernels' arrays.
READ_BUFFERS = 2

#: Small arrays (length-D vectors) and Python objects every task allocates besides the above.
TASK_OVERHEAD_BYTES = 128 * 2**10

#: Bytes per row of a weighted chunk task (``describe(weights=)``): the weight block as read
#: (float64, 8) and the float64 copy the statistics take of it (8), the weight check's and the
#: positive-weight masks (3 x 1), and with zero weights the indices of the rows kept (8) and their
#: weights (8); rounded up for the row-sized weight temporaries of the kernels.
WEIGHT_ROW_BYTES = 40

_ITEMSIZE = {"float64": 8, "int64": 8, "bool": 1}
_LABEL_ITEMSIZE = 8  # class labels arrive as int64, one per row (read once for all statistics)

#: A statistic named by its name (built in) or by its own :class:`Footprint` (a user's).
StatLike = str | Footprint


def footprint(stat: StatLike) -> Footprint:  # numpydoc ignore=PR01,RT01
    """Get the footprint of ``stat``: a built-in statistic's, as its declaration says, or ``stat`` itself."""
    if isinstance(stat, Footprint):
        return stat
    declared = DECLARED.get(stat)
    if declared is None or declared.footprint is None:
        raise ValueError(f"unknown statistic {stat!r}; expected one of {', '.join(STATISTICS)}")
    return declared.footprint


def stat_name(stat: StatLike) -> str:  # numpydoc ignore=PR01,RT01
    """Name ``stat`` (for messages and ``Plan.explain``)."""
    return stat.name if isinstance(stat, Footprint) else stat


def state_bytes(  # numpydoc ignore=PR01,RT01
    stat: StatLike,
    n_features: int,
    *,
    bins: int = STATISTIC_DEFAULTS["bins"],
    n_classes: int | None = None,
    feature_tile: int | None = None,
) -> int:
    """Size one state of ``stat`` over ``n_features`` features (with ``feature_tile``: the state of one tile pair)."""
    return int(_state_size(footprint(stat), n_features, bins, n_classes, feature_tile))


@functools.lru_cache(maxsize=256, typed=True)
def _state_size(
    print_: Footprint, n_features: int, bins: int, n_classes: int | None, feature_tile: int | None
) -> Any:
    """One state's bytes as a footprint says, asked once: the search sizes many chunks with the same states."""
    # Keyed by the footprint (hashed by identity), not the statistic: a statistic may hold arrays.
    return print_.state(n_features, bins, n_classes, feature_tile)


def chunk_task_terms(  # numpydoc ignore=PR01,RT01
    rows: int,
    n_features: int,
    itemsize: int,
    stats: tuple[StatLike, ...],
    *,
    bins: int = STATISTIC_DEFAULTS["bins"],
    n_classes: int | None = None,
    feature_tile: int | None = None,
    path: str = "compiled",
    device_bytes: int | None = None,
    weighted: bool = False,
) -> dict[str, int]:
    """The terms of :func:`projected_task_bytes`, by name (for ``Plan.explain``)."""
    # path: the kernels that run the chunk (KERNEL_PATHS); device_bytes: the card's memory on "gpu-compiled";
    # weighted: the weight column (WEIGHT_ROW_BYTES a row) and the copy of the rows of positive weight.
    if path not in KERNEL_PATHS:
        raise ValueError(f"unknown kernel path {path!r}; expected one of {KERNEL_PATHS}")
    elems = rows * n_features
    prints = [footprint(s) for s in stats]
    states = [_state_size(f, n_features, bins, n_classes, feature_tile) for f in prints]
    transient = []
    for f, state in zip(prints, states, strict=True):
        temps = elems * sum(_ITEMSIZE[k] * n for k, n in f.temporaries[path].items())
        centring = f.centring_rows(n_features) if callable(f.centring_rows) else f.centring_rows
        extra = min(rows, centring) * n_features * 8 if path == "compiled" else 0  # centring buffer
        if path == "compiled" and f.compiled_scratch is not None:
            extra += f.compiled_scratch(n_features)
        if path == "gpu-compiled" and f.device_buffers is not None:
            extra += f.device_buffers(rows, n_features, device_bytes)
        transient.append(temps + rows * f.row_bytes[path] + f.state_copies[path] * state + extra)
    # Statistics run one after another, so one float64 copy is alive at a time at most.
    copies = max((f.float64_copies[path] for f in prints), default=0)
    labels = rows * _LABEL_ITEMSIZE if any(f.reads_label for f in prints) else 0
    weights = {
        "weights": rows * WEIGHT_ROW_BYTES,
        # Rows of weight 0 are dropped once per block (Bundle.chunk): a copy of the others and their labels.
        "positive rows": elems * itemsize + labels,
    } if weighted else {}
    return {
        "raw": elems * itemsize,
        # A GPU task gets its block decoded (on the host): device memory holds no read buffers.
        "read buffers": 0 if path == "gpu-compiled" else READ_BUFFERS * elems * itemsize,
        # The CPU kernels read 1- and 2-byte values from one float32 copy of the block (a bundle makes it once).
        **({"float32 copy": elems * 4} if path == "compiled" and itemsize <= FLOAT32_COPY_ITEMSIZE else {}),
        "float64 copy": copies * elems * 8,
        "labels": labels,
        **weights,
        "temporaries": max(transient, default=0),
        "states": sum(states),
        "overhead": TASK_OVERHEAD_BYTES,
    }


def projected_task_bytes(  # numpydoc ignore=PR01,RT01
    rows: int, n_features: int, itemsize: int, stats: tuple[StatLike, ...], **options: Any
) -> int:
    """Project the peak bytes of one fused chunk task over ``rows x n_features`` input (the module's model)."""
    return sum(chunk_task_terms(rows, n_features, itemsize, stats, **options).values())


def merge_terms(  # numpydoc ignore=PR01,RT01
    stats: tuple[StatLike, ...],
    n_features: int,
    split_every: int,
    *,
    bins: int = STATISTIC_DEFAULTS["bins"],
    n_classes: int | None = None,
    feature_tile: int | None = None,
) -> dict[str, int]:
    """The terms of :func:`merge_task_bytes`, by name (for ``Plan.explain``)."""
    prints = [footprint(s) for s in stats]
    states = [_state_size(f, n_features, bins, n_classes, feature_tile) for f in prints]
    total = sum(states)
    return {
        "input states": split_every * total,
        # the old running result stays alive until the new one is complete
        "running results": 2 * total,
        "temporaries": max((f.merge_temporaries * b for f, b in zip(prints, states, strict=True)), default=0),
        "overhead": TASK_OVERHEAD_BYTES,
    }


def merge_task_bytes(  # numpydoc ignore=PR01,RT01
    stats: tuple[StatLike, ...], n_features: int, split_every: int, **options: Any
) -> int:
    """Project the peak bytes of one merge task folding ``split_every`` fused states: inputs, old and new results, temporaries."""
    return sum(merge_terms(stats, n_features, split_every, **options).values())


_DEVICES = ("cpu", "gpu")


@dataclass(frozen=True)
class Resources:  # numpydoc ignore=PR02
    """Memory and threads of one worker, and how many workers there are.

    Parameters
    ----------
    memory_bytes : int
        Host memory of one worker in bytes (its ``memory_limit``).
    threads_per_worker : int, default 1
        Tasks one worker runs at the same time; they share its memory.
    n_workers : int, default 1
        Number of workers (only the degree of parallelism depends on it).
    device_memory_bytes : int or None, default None
        GPU memory of one worker in bytes; when set, it is what tasks are planned against.
    device : {"cpu", "gpu"}, default "cpu"
        Where the chunk kernels run.
    """

    memory_bytes: int
    threads_per_worker: int = 1
    n_workers: int = 1
    device_memory_bytes: int | None = None
    device: str = "cpu"

    def __post_init__(self) -> None:
        # Validate only; a frozen dataclass is never rewritten after construction.
        for name in ("memory_bytes", "threads_per_worker", "n_workers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Resources.{name} must be a positive int, got {value!r}")
        dev_mem = self.device_memory_bytes
        if dev_mem is not None and (isinstance(dev_mem, bool) or not isinstance(dev_mem, int) or dev_mem < 1):
            raise ValueError(f"Resources.device_memory_bytes must be a positive int or None, got {dev_mem!r}")
        if self.device not in _DEVICES:
            raise ValueError(f"Resources.device must be one of {_DEVICES}, got {self.device!r}")

    @property
    def planning_memory_bytes(self) -> int:
        """Give the memory that tasks are planned against: device memory when known, else host memory.

        Returns
        -------
        int
            Bytes.
        """
        return self.device_memory_bytes or self.memory_bytes

    @property
    def total_threads(self) -> int:
        """Count the tasks the whole cluster runs at once.

        Returns
        -------
        int
            Workers times threads per worker.
        """
        return self.threads_per_worker * self.n_workers

    def describe(self) -> str:
        """Describe the resources in one line.

        Returns
        -------
        str
            Such as ``2 workers x 4 threads, 16.00 GiB host memory per worker``.
        """
        workers = f"{self.n_workers} worker{'s' if self.n_workers != 1 else ''}"
        threads = f"{self.threads_per_worker} thread{'s' if self.threads_per_worker != 1 else ''}"
        text = f"{workers} x {threads}, {format_bytes(self.memory_bytes)} host memory per worker"
        if self.device_memory_bytes is not None:
            text += f", {format_bytes(self.device_memory_bytes)} GPU memory per worker"
        return f"{text} ({self.device})"


def format_bytes(n: int | float) -> str:  # numpydoc ignore=PR01,RT01
    """Format bytes with ``dask.utils.format_bytes``, imported on use so this layer stays free of dask."""
    from dask.utils import format_bytes as dask_format_bytes  # lazy: dask

    return dask_format_bytes(int(n))


@dataclass(frozen=True)
class Plan:
    """A chunking and reduction plan that fits every task in a worker's memory budget.

    Build it with :func:`daskbatch.plan` or :func:`~daskbatch.planning.search.plan_chunks`; ``print(plan.explain())``
    shows the arithmetic. All byte quantities are ints.
    """

    shape: tuple[int, int]
    itemsize: int
    dtype: str | None
    storage_chunks: tuple[int, int]
    stats: tuple[StatLike, ...]
    bins: int
    n_classes: int | None
    resources: Resources
    memory_fraction: float
    reserved_bytes: int
    target_chunk_bytes: int
    budget_bytes: int
    chunk_rows: int
    n_chunks: int
    split_every: int
    feature_tile: int | None
    n_tile_pairs: int
    states_bytes: int
    chunk_task_bytes: int
    merge_task_bytes: int
    n_tasks: int
    limited_by: str
    notes: tuple[str, ...] = ()
    kernel_path: str = "compiled"
    #: The rows carry sample weights (their column is in the chunk task).
    weighted: bool = False
    read_ahead_bytes: int = 0  # a chunk task's share of the blocks fetched ahead from an object store

    @property
    def chunks(self) -> tuple[int, int]:
        """Give the dask chunk shape to rechunk the input to.

        Returns
        -------
        tuple of int
            ``(chunk_rows, n_features)``.
        """
        return (self.chunk_rows, self.shape[1])

    @property
    def task_bytes(self) -> int:
        """Give the projected peak of the largest task (chunk or merge).

        Returns
        -------
        int
            Bytes.
        """
        return max(self.chunk_task_bytes, self.merge_task_bytes)

    @property
    def rmm_pool_bytes(self) -> int:
        """Initial RMM pool for one GPU worker: every thread's largest task plus the reserve.

        Rounded up to a multiple of 256 MiB (what ``cluster("cuda", plan=...)``
        passes as dask-cuda's ``rmm_pool_size``; the pool may still grow).

        Returns
        -------
        int
            Bytes.
        """
        step = 256 * 2**20
        need = (self.task_bytes + self.reserved_bytes) * self.resources.threads_per_worker
        return -(-need // step) * step

    def to_dict(self) -> dict[str, Any]:
        """Convert the plan to a plain dict (JSON-ready).

        Returns
        -------
        dict
            Every field plus ``chunks``, ``task_bytes`` and ``rmm_pool_bytes``.
        """
        out = dataclasses.asdict(self)
        out["stats"] = [stat_name(s) for s in self.stats]  # a user's statistic by its name
        out["chunks"] = list(self.chunks)
        out["task_bytes"] = self.task_bytes
        out["rmm_pool_bytes"] = self.rmm_pool_bytes
        return out

    def explain(self) -> str:
        """Explain the plan's arithmetic in words and numbers (what ``daskbatch plan`` prints).

        Returns
        -------
        str
            The explanation, several lines.
        """
        title, rows = _plan_rows(self)
        return "\n".join([title, *(f"  {k}: {v}" if k else f"  {v}" for k, v in rows)])

    def _repr_html_(self) -> str:
        """The plan's terms as a table: the largest task green when it fits the budget, notes highlighted."""
        title, rows = _plan_rows(self)
        styled = []
        for key, value in rows:
            cls = ""
            if key == "largest task":
                cls = "db-ok" if self.task_bytes <= self.budget_bytes else "db-bad"
            elif key == "note":
                cls = "db-warn"
            styled.append((key or "tasks", value, cls))
        n_rows, d = self.shape
        head = (
            f"daskbatch.Plan: {n_rows:,} × {d:,} {self.dtype or ''} → {_plural(self.n_chunks, 'chunk')}"
            f" of {self.chunk_rows:,} rows, {_plural(self.n_tasks, 'task')}"
        )
        return _html.repr_block(
            _html.escape(head), _html.key_value_table(styled), subtitle=_html.escape(title)
        )


def budget_formula(resources: Resources, memory_fraction: float, reserved_bytes: int) -> str:  # numpydoc ignore=PR01,RT01
    """Write out how the per-task budget is computed."""
    mem = format_bytes(resources.planning_memory_bytes)
    which = "GPU " if resources.device_memory_bytes else ""
    threads = resources.threads_per_worker
    return (
        f"{mem} {which}x {memory_fraction:g} / {threads} thread{'s' if threads != 1 else ''}"
        f" - {format_bytes(reserved_bytes)}"
    )


def budget_bytes(resources: Resources, memory_fraction: float, reserved_bytes: int) -> int:  # numpydoc ignore=PR01,RT01
    """Compute the bytes one task may use: memory x fraction / threads per worker - reserved."""
    share = resources.planning_memory_bytes * memory_fraction / resources.threads_per_worker
    return int(share) - reserved_bytes


def _plan_rows(p: Plan) -> tuple[str, list[tuple[str, str]]]:
    """Build the title line and the (term, words and numbers) rows of :meth:`Plan.explain`."""
    # A row whose term is empty is a sentence of its own.
    n_rows, d = p.shape
    kw: dict[str, Any] = {"bins": p.bins, "n_classes": p.n_classes}
    dtype = p.dtype or f"{p.itemsize}-byte-element"
    stat_text = ", ".join(stat_name(s) for s in p.stats)
    if {"hist", "mi"} & set(p.stats):
        # Planned for daskbatch.max-classes: the classes are found as the first pass reads the label (or as many given).
        most = p.n_classes is not None and p.n_classes == config.get("max-classes")
        stat_text += f" ({p.bins} bins" + (f", {'up to ' * most}{p.n_classes} classes)" if "mi" in p.stats else ")")
    fits = "<=" if p.task_bytes <= p.budget_bytes else ">"
    title = (
        f"Plan for a {n_rows:,} x {d:,} {dtype} array (storage chunks "
        f"{p.storage_chunks[0]:,} x {p.storage_chunks[1]:,}); statistics: {stat_text}"
    )
    lines: list[tuple[str, str]] = [
        ("resources", f"{p.resources.describe()}; kernels: "
         + {"compiled": "compiled CPU (numba)", "gpu-compiled": "compiled GPU (numba-cuda)"}.get(p.kernel_path, "array API")),
        ("budget per task", f"{budget_formula(p.resources, p.memory_fraction, p.reserved_bytes)}"
         f" = {format_bytes(p.budget_bytes)}"),
    ]
    if p.chunk_rows:
        per_storage = p.chunk_rows / min(p.storage_chunks[0], n_rows)
        lines.append((
            "chunk", f"{p.chunk_rows:,} rows ({_plural(per_storage, 'storage chunk')}) x {d:,} features = "
            f"{format_bytes(p.chunk_rows * d * p.itemsize)} of input; limited by {p.limited_by}"
        ))
    terms = {**chunk_task_terms(
        p.chunk_rows, d, p.itemsize, p.stats, feature_tile=p.feature_tile, path=p.kernel_path,
        device_bytes=p.resources.device_memory_bytes, weighted=p.weighted, **kw
    ), "read-ahead": p.read_ahead_bytes}
    lines.append((
        "chunk task",
        " + ".join(f"{format_bytes(v)} {k}" for k, v in terms.items() if v)
        + f" = {format_bytes(p.chunk_task_bytes)}",
    ))
    per_state = ", ".join(
        f"{stat_name(s)} {format_bytes(state_bytes(s, d, feature_tile=p.feature_tile, **kw))}" for s in p.stats
    )
    lines.append(("states", f"{per_state} (together {format_bytes(p.states_bytes)})"))
    mterms = merge_terms(p.stats, d, p.split_every, feature_tile=p.feature_tile, **kw)
    lines.append((
        f"merge task ({p.split_every} states in)",
        " + ".join(f"{format_bytes(v)} {k}" for k, v in mterms.items() if v)
        + f" = {format_bytes(p.merge_task_bytes)}",
    ))
    lines.append(("largest task", f"{format_bytes(p.task_bytes)} {fits} budget {format_bytes(p.budget_bytes)}"))
    threads = p.resources.total_threads
    lines.append((
        "",
        f"{_plural(p.n_chunks, 'chunk')} for {_plural(threads, 'thread')} "
        f"(aim: >= {2 * threads} when the data allow), split_every {p.split_every} -> "
        f"{_plural(p.n_tasks, 'task')}",
    ))
    if p.feature_tile:
        n_tiles = math.ceil(d / p.feature_tile)
        lines.append((
            f"co-moments in feature tiles of {p.feature_tile:,}",
            f"{n_tiles} x {n_tiles} tiles, {p.n_tile_pairs:,} tile pairs, each a reduction of its own",
        ))
    if p.resources.device == "gpu":
        lines.append((
            "RMM pool per GPU worker",
            f"{p.resources.threads_per_worker} x ({format_bytes(p.task_bytes)} "
            f"largest task + {format_bytes(p.reserved_bytes)} reserved), rounded up = "
            f"{format_bytes(p.rmm_pool_bytes)} (rmm_pool_size of cluster('cuda', plan=...))",
        ))
    lines.extend(("note", n) for n in p.notes)
    return title, lines


