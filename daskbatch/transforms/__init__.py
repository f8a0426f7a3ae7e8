"""From a decision to new data: :func:`transform` writes steps applied to a dataset into a Zarr store.

Here the step protocol and the steps that choose columns (select, clip); the steps that rescale are
:mod:`daskbatch.transforms.steps` (which lists them all), PCA and its projection :mod:`daskbatch.transforms.pca`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal, Protocol

import numpy as np

from daskbatch._common import Array, checked_device, gpu_module
from daskbatch._version import __version__
from daskbatch.engine.blockrun import merged_ranges, run_blocks
from daskbatch.engine.fingerprint import output_items
from daskbatch.engine.inputs import FeatureMatrix, as_feature_matrix
from daskbatch.engine.run_options import on_device
from daskbatch.io.rowstore import (
    ArraySpec,
    OutputReport,
    RegionWriter,
    RowStore,
    created_now,
    input_fingerprint,
    layout,
    local_path,
    output_chunk_rows,
    rechunk_rows,
)
from daskbatch.runtime.capacity import rechunk_method
from daskbatch.runtime.progress import ProgressCallback
from daskbatch.runtime.runlock import no_interrupt
from daskbatch.stats.numerics import as_float64, device, namespace, to_numpy

__all__ = ["transform"]

KIND = "transform"

#: Most output chunks one task writes: each is a file (about a millisecond, whatever its size), and a stop
#: (SIGTERM, Ctrl-C, ``cancel``) waits for the running tasks, about a second at most.
CHUNKS_PER_TASK = 1024


class Step(Protocol):
    """What :func:`daskbatch.transform` needs of a step."""

    def bind(self, names: tuple[str, ...]) -> Step:  # numpydoc ignore=PR01,RT01
        """Fit the step to input columns ``names``, or raise a one-line error naming the mismatch."""
        ...

    def apply(self, block: Array) -> Array:  # numpydoc ignore=PR01,RT01
        """Transform one block of rows."""
        ...

    def output_features(self, names: tuple[str, ...]) -> tuple[str, ...]:  # numpydoc ignore=PR01,RT01
        """Name the output columns."""
        ...

    def describe(self) -> dict[str, Any]:  # numpydoc ignore=RT01
        """Describe the step for the output's provenance."""
        ...


def digest(*arrays: np.ndarray) -> str:  # numpydoc ignore=PR01,RT01
    """Hash the arrays' float64 bytes: a step's parameters in a few characters of provenance."""
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
    return h.hexdigest()


def origin_of(summary: Any) -> dict[str, Any]:  # numpydoc ignore=PR01,RT01
    """Say where a summary came from (its provenance ``source``, ``created``, ``ddof``, ``rows``)."""
    prov = dict(getattr(summary, "provenance", {}) or {})
    return {k: prov.get(k) for k in ("source", "created", "ddof", "rows")}


def names_differ(expected: tuple[str, ...], got: tuple[str, ...]) -> str:  # numpydoc ignore=PR01,RT01
    """Name the first difference between two lists of feature names, for a one-line error."""
    if len(expected) != len(got):
        return f"{len(expected)} features ({short(expected)}), the input has {len(got)} ({short(got)})"
    i = next(i for i, (a, b) in enumerate(zip(expected, got, strict=True)) if a != b)
    return f"feature {i} named {expected[i]!r}, the input's is {got[i]!r}"


def short(names: Sequence[str], n: int = 4) -> str:  # numpydoc ignore=PR01,RT01
    """Join the first ``n`` names, with ``...`` when there are more."""
    return ", ".join(names[:n]) + (", ..." if len(names) > n else "")


class ValueWise:
    """Base of the steps that work value by value: they take any columns and keep their names."""

    def bind(self, names: tuple[str, ...]) -> Any:  # numpydoc ignore=PR01,RT01
        """Accept any columns."""
        return self

    def output_features(self, names: tuple[str, ...]) -> tuple[str, ...]:  # numpydoc ignore=PR01,RT01
        """Name the output columns: those of the input."""
        return tuple(names)


class PerFeature:
    """Base of the steps holding one value per feature of a summary: they bind to input columns by name."""

    per_feature: ClassVar[tuple[str, ...]] = ()
    step_name: ClassVar[str] = "step"
    feature_names: tuple[str, ...]

    def bind(self, names: tuple[str, ...]) -> Any:  # numpydoc ignore=PR01,RT01
        """Pick the per-feature values of the input's columns, by name."""
        names = tuple(names)
        if names == self.feature_names:
            return self
        where = {n: i for i, n in enumerate(self.feature_names)}
        missing = [n for n in names if n not in where]
        if missing:
            raise ValueError(
                f"{self.step_name}: the summary has no statistics for {len(missing)} input feature(s): {short(missing)}"
            )
        idx = np.array([where[n] for n in names], dtype=np.int64)
        picked = {f: getattr(self, f)[idx] for f in self.per_feature}
        return replace(self, feature_names=names, **picked)  # type: ignore[type-var]

    def output_features(self, names: tuple[str, ...]) -> tuple[str, ...]:  # numpydoc ignore=PR01,RT01
        """Name the output columns: those of the input, once the step binds to them."""
        return tuple(self.bind(names).feature_names)


def bind_all(steps: Sequence[Step], names: Sequence[str]) -> tuple[list[Step], tuple[str, ...]]:  # numpydoc ignore=PR01,RT01
    """Fit each step to the columns the previous ones produce."""
    bound: list[Step] = []
    current = tuple(str(n) for n in names)
    for k, step in enumerate(steps):
        if not all(hasattr(step, a) for a in ("bind", "apply", "output_features", "describe")):
            raise TypeError(f"step {k} ({step!r}) is not a transform step (see daskbatch.transforms.steps)")
        b = step.bind(current)
        current = b.output_features(current)
        bound.append(b)
    return bound, current


def apply_all(steps: Sequence[Step], block: Array) -> Array:  # numpydoc ignore=PR01,RT01
    """Pass ``block`` through every step, in order."""
    for step in steps:
        block = step.apply(block)
    return block


@dataclass(frozen=True, eq=False)
class Select:
    """Keep columns ``indices`` (in that order)."""

    indices: tuple[int, ...]
    feature_names: tuple[str, ...] | None = None

    def bind(self, names: tuple[str, ...]) -> Select:  # numpydoc ignore=PR01,RT01
        """Check the selection against the input columns."""
        if self.feature_names is not None and tuple(names) != self.feature_names:
            raise ValueError(f"select: the selection was made on {names_differ(self.feature_names, tuple(names))}")
        if max(self.indices) >= len(names):
            raise ValueError(f"select: column {max(self.indices)} asked for, the input has {len(names)} features")
        return self

    def apply(self, block: Array) -> Array:  # numpydoc ignore=PR01,RT01
        """Keep the selected columns of ``block``."""
        xp, dev = namespace(block), device(block)
        return xp.take(block, xp.asarray(self.indices, dtype=xp.int64, device=dev), axis=1)

    def output_features(self, names: tuple[str, ...]) -> tuple[str, ...]:  # numpydoc ignore=PR01,RT01
        """Name the selected columns."""
        self.bind(names)
        return tuple(names[i] for i in self.indices)

    def describe(self) -> dict[str, Any]:  # numpydoc ignore=RT01
        """Describe the step for the output's provenance."""
        return {
            "step": "select", "indices": list(self.indices),
            "n_in": None if self.feature_names is None else len(self.feature_names),
        }


def select(selection: Any) -> Select:
    """Make a step keeping the selected features.

    Parameters
    ----------
    selection : Selection, sequence of int or bool mask
        A :class:`~daskbatch.Selection` (its selected features, checked against
        the input's names), column indices, or one bool per input column.

    Returns
    -------
    Select
        The step.
    """
    names = None
    if hasattr(selection, "indices") and hasattr(selection, "feature_names"):
        names = tuple(str(n) for n in selection.feature_names)
        idx = np.asarray(selection.indices)
    else:
        idx = np.asarray(selection)
        if idx.dtype == bool:
            idx = np.flatnonzero(idx)
    if idx.ndim != 1 or (idx.size and idx.dtype.kind not in "iu"):
        raise TypeError(f"select needs a Selection, integer column indices or a boolean mask, got {selection!r}")
    if idx.size == 0:
        raise ValueError("select: the selection keeps no features")
    if idx.min() < 0:
        raise ValueError(f"select: column indices must be >= 0, got {int(idx.min())}")
    return Select(tuple(int(i) for i in idx), names)


@dataclass(frozen=True)
class Clip(ValueWise):
    """Values limited to ``[lo, hi]`` (either may be None); NaN stays NaN.

    Floating blocks keep their dtype; others are clipped in float64.
    """

    lo: float | None = None
    hi: float | None = None

    def __post_init__(self) -> None:
        if self.lo is None and self.hi is None:
            raise ValueError("clip needs lo, hi or both")
        for v in (self.lo, self.hi):
            if v is not None and np.isnan(v):
                raise ValueError("clip bounds must not be NaN")
        if self.lo is not None and self.hi is not None and self.lo > self.hi:
            raise ValueError(f"clip: lo {self.lo} is above hi {self.hi}")

    def apply(self, block: Array) -> Array:  # numpydoc ignore=PR01,RT01
        """Clip one block (integers become float64 first)."""
        xp = namespace(block)
        if not xp.isdtype(block.dtype, "real floating"):
            block = as_float64(block)
        return xp.clip(block, min=self.lo, max=self.hi)

    def describe(self) -> dict[str, Any]:  # numpydoc ignore=RT01
        """Describe the step for the output's provenance."""
        return {"step": "clip", "lo": self.lo, "hi": self.hi}


def clip(lo: float | None = None, hi: float | None = None) -> Clip:
    """Make a step limiting values to ``[lo, hi]``.

    Parameters
    ----------
    lo, hi : float, optional
        The bounds; None leaves that side open.

    Returns
    -------
    Clip
        The step.
    """
    return Clip(None if lo is None else float(lo), None if hi is None else float(hi))


def _steps_items(steps: Sequence[Step]) -> dict[str, str]:
    """Identify steps by what changes their output: their parameters and array values, not their summary's origin."""
    # A summary's provenance (when it was made, from which path) is in the output's provenance but not here:
    # the same numbers computed again in another process give the same steps, so the output resumes.
    out = {}
    for i, step in enumerate(steps):
        described = {k: v for k, v in step.describe().items() if k != "summary"}
        out[f"step {i + 1}"] = json.dumps(described, sort_keys=True, default=str)
    return out


def _transform_region(
    region: int, xb: Any, yb: Any, runs: tuple[tuple[int, int], ...], *, per: int, per_task: int, steps: list[Step],
    writer: RegionWriter, device: str, dtype: np.dtype,
) -> tuple[int, ...]:
    """Run the steps on task ``region``'s rows and write its unfinished output chunks ``runs``; give those chunks."""
    first = region * per_task  # its first output chunk
    result = np.asarray(to_numpy(apply_all(steps, on_device(xb, device))), dtype=dtype)
    labels = to_numpy(yb) if yb is not None else None
    written: list[int] = []
    for a, b in runs:
        lo, hi = (a - first) * per, (b - first) * per  # the slice stops at the end of the last, shorter chunk
        values = {"X": result[lo:hi]}
        if labels is not None:
            values["y"] = labels[lo:hi]
        writer.write_blocks(a, b, values)
        written.extend(range(a, b))
    return tuple(written)


def _task_rows(data: FeatureMatrix, per: int, out_features: int, out_dtype: np.dtype, device: str) -> int:
    """Plan the rows of one task: whole output chunks of ``per`` rows, as many as memory and parallelism allow."""
    from daskbatch.planning.search import plan_task_rows  # lazy: dask (through its settings)
    from daskbatch.runtime.capacity import resources_auto  # lazy: distributed

    x = data.x
    in_features = int(x.shape[1])
    on_gpu = device == "gpu" or (device == "auto" and type(getattr(x, "_meta", None)).__module__.startswith("cupy"))
    input_row = in_features * x.dtype.itemsize + (data.label.dtype.itemsize if data.label is not None else 0)
    # The input, the steps' float64 temporaries (a centred copy and its result) and the cast output.
    task_row = input_row + 2 * 8 * max(in_features, out_features) + out_features * out_dtype.itemsize
    blocks = [int(c) for c in x.chunks[0]]
    read_rows = blocks[0] if len(set(blocks[:-1])) <= 1 and blocks[-1] <= blocks[0] else None
    resources = resources_auto(device="gpu" if on_gpu else "cpu")
    return plan_task_rows(int(x.shape[0]), per, input_row, task_row, resources, read_rows=read_rows,
                          max_units=CHUNKS_PER_TASK)


def _regions(todo: list[int], per_task: int) -> dict[int, tuple[tuple[int, int], ...]]:
    """Group unfinished output chunks by the task that writes them, as runs ``[first, stop)`` of chunks."""
    grouped: dict[int, list[tuple[int, int]]] = {}
    for block in todo:
        grouped.setdefault(block // per_task, []).append((block, block + 1))
    return {region: tuple(merged_ranges(chunks)) for region, chunks in grouped.items()}


def transform(
    dataset: Any,
    steps: Sequence[Step],
    out: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    chunk_rows: int | None = None,
    dtype: str | np.dtype | None = None,
    device: Literal["auto", "cpu", "gpu"] = "auto",
    progress: bool | ProgressCallback = False,
    cancel: threading.Event | None = None,
) -> OutputReport:
    """Run ``steps`` over every row of ``dataset`` and write the result to a Zarr store ``out``.

    Parameters
    ----------
    dataset : path, Dataset, dask or NumPy array
        The (samples x features) input; a store's label array is carried through.
    steps : sequence of steps
        From :mod:`daskbatch.transforms.steps` (``select``, ``standardize``, ``clip``,
        ``project``), applied in order.
    out : str or os.PathLike
        Local path of the output store: ``X`` (rows x output features), ``y``
        when the input has a label, ``feature_names`` and ``provenance``
        attributes, ``daskbatch_output="transform"`` and ``complete``.
    overwrite : bool, default False
        Start again over an existing daskbatch output.  Without it an unfinished
        run of the same job is resumed, a different job refused.  Never
        replaces the input or a path daskbatch did not write.
    chunk_rows : int, optional
        Rows per block and output chunk (default: the input's dask blocks).
    dtype : str or numpy.dtype, optional
        Output dtype (default: what the steps give, float64 after any arithmetic).
    device : {"auto", "cpu", "gpu"}, default "auto"
        ``"auto"`` runs each block where it is (a CuPy block stays on the GPU);
        ``"gpu"`` copies each block to the GPU once; ``"cpu"`` to the host.
        Results are copied to the host for writing.
    progress : bool or callable, default False
        True draws a progress bar (a widget in Jupyter, a line on stderr); a
        callable is called as ``progress(done, total, "transform")`` after every task (a region of output chunks).
    cancel : threading.Event, optional
        Set it to stop at the next block boundary (SIGINT and SIGTERM do the same).

    Returns
    -------
    OutputReport
        ``written`` lists the blocks this run computed.

    Raises
    ------
    ValueError
        A step does not fit the input's features, or ``out`` overlaps the input.
    FileExistsError
        ``out`` exists and is not a daskbatch output.
    DataError
        ``out`` holds a different job's unfinished output.
    Cancelled
        Stopped by ``cancel``; the finished blocks are kept.
    Interrupted
        Stopped by a signal (SIGINT, SIGTERM); the finished blocks are kept.
    """
    t0 = time.perf_counter()
    if checked_device(device) == "gpu":
        gpu_module("transform")
    if hasattr(steps, "apply") or not isinstance(steps, Iterable):  # one step where a list was meant, or no list
        raise TypeError(f"steps must be a list of steps, got {type(steps).__name__}: pass [step, ...]")
    steps = list(steps)
    data = as_feature_matrix(dataset)
    if not steps:
        raise ValueError("transform needs at least one step (see daskbatch.transforms.steps)")
    bound, names = bind_all(steps, data.feature_names)
    # The steps on an empty host block: output width and dtype without touching the data.
    probe = apply_all(bound, np.zeros((1, len(data.feature_names)), dtype=data.x.dtype))
    if probe.ndim != 2 or probe.shape[1] != len(names):
        raise ValueError(f"the steps give blocks of shape {tuple(probe.shape)}, expected (rows, {len(names)})")
    out_dtype = np.dtype(dtype) if dtype is not None else np.dtype(str(probe.dtype))

    per = output_chunk_rows(data, chunk_rows)
    rows = int(data.x.shape[0])
    fingerprint = input_fingerprint(data)
    described = [s.describe() for s in bound]
    # What must match to resume: the data (content token), the steps by their values, the bit-changing settings.
    # Output chunks are the user's; the task sizes are planned and change no bit, so they are not in it.
    doc = {"kind": KIND, "items": output_items(
        data, _steps_items(bound), {"chunk_rows": per, "dtype": str(out_dtype), "device": device})}
    arrays = [ArraySpec("X", out_dtype, len(names))]
    if data.label is not None:
        arrays.append(ArraySpec("y", np.dtype(data.label.dtype), None, ("sample",)))
    attrs = {
        **layout(data.label is not None),
        "feature_names": list(names),
        "provenance": {
            "input": fingerprint, "steps": described,
            "summaries": [d["summary"] for d in described if d.get("summary")],
            "chunk_rows": per, "dtype": str(out_dtype),
            "daskbatch_version": __version__, "created": created_now(),
        },
    }
    store = RowStore.open(out, kind=KIND, rows=rows, chunk_rows=per, arrays=arrays, attrs=attrs, doc=doc,
                          overwrite=overwrite, protect=local_path(data))
    todo = store.todo
    written: list[int] = []

    def _done(region: int, chunks: tuple[int, ...]) -> None:
        """Record the output chunks task ``region`` wrote."""
        for block in chunks:
            store.mark_done(block)
        written.extend(chunks)

    try:
        if todo:
            # One task writes many output chunks: tiny chunks (the user's Zarr layout) make no tiny tasks,
            # whose graph would take longer to build than the data to write.
            task_rows = _task_rows(data, per, len(names), out_dtype, device)
            per_task = task_rows // per
            x = rechunk_rows(data.x, task_rows)
            y = data.label.rechunk((x.chunks[0],), method=rechunk_method()) if data.label is not None else None
            xb = x.to_delayed().ravel()
            yb = y.to_delayed().ravel() if y is not None else [None] * len(xb)
            regions = _regions(todo, per_task)
            fn = functools.partial(_transform_region, per=per, per_task=per_task, steps=bound, writer=store.writer,
                                   device=device, dtype=out_dtype)
            run_blocks(
                fn, {r: (xb[r], yb[r], runs) for r, runs in regions.items()}, name="db-transform", on_done=_done,
                cancel=cancel, progress=progress, label="transform", total=len(xb), rows=rows,
            )
        if not store.complete:
            with no_interrupt():  # the complete flag is written whole
                store.finish()
    finally:
        store.close()
    return OutputReport(
        path=store.path, rows=rows, features=len(names), feature_names=names, blocks=store.blocks,
        written=tuple(sorted(written)), seconds=time.perf_counter() - t0,
    )
