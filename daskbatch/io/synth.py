"""Deterministic synthetic (samples x features) data with known ground truth: the ``synth`` verb."""

from __future__ import annotations

import importlib
import json
import os
import threading
import uuid
from typing import Any, Literal

import dask
import dask.array as da
import numpy as np
import zarr
from dask.utils import format_bytes
from zarr.codecs import ZstdCodec

from daskbatch.errors import DataError, GPUUnavailableError
from daskbatch.io.chunk_grid import max_chunks
from daskbatch.io.dataset import Dataset, open_dataset
from daskbatch.io.outputs import MARKER, OutputExistsError, check_url, checksummed
from daskbatch.io.rowstore import ArraySpec, RegionWriter, RowStore, create_arrays, layout
from daskbatch.io.synth_model import (
    BLOCK_ROWS,
    MAX_COV_FEATURES,
    SynthModel,
    counter_rows,
    ground_truth,
    make_model,
    numpy_rows,
    truth_attrs,
)
from daskbatch.runtime.progress import Progress, ProgressCallback, compute
from daskbatch.stats.numerics import to_numpy

__all__ = ["BLOCK_ROWS", "MAX_COV_FEATURES", "SynthModel", "ground_truth", "rank_rows", "synth"]


def rank_rows(rows: int, rank: int, world_size: int) -> range:
    """Give rank ``rank`` of ``world_size`` its contiguous share of ``rows`` rows.

    The shares are consecutive, cover every row once, and differ in size by at
    most one row (the first ``rows % world_size`` ranks take one more).

    Parameters
    ----------
    rows : int
        Rows of the whole dataset.
    rank : int
        This process's rank, ``0 <= rank < world_size`` (e.g. MPI's
        ``COMM_WORLD.Get_rank()`` or ``SLURM_PROCID``).
    world_size : int
        Number of ranks.

    Returns
    -------
    range
        The rank's rows, ``range(start, stop)``.

    Examples
    --------
    >>> [rank_rows(10, r, 3) for r in range(3)]
    [range(0, 4), range(4, 7), range(7, 10)]
    """
    for name, value in (("rows", rows), ("rank", rank), ("world_size", world_size)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise TypeError(f"{name} must be an integer, got {value!r}")
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size - 1}] for world_size {world_size}, got {rank}")
    if rows < 0:
        raise ValueError(f"rows must be >= 0, got {rows}")
    base, extra = divmod(int(rows), int(world_size))
    start = rank * base + min(rank, extra)
    return range(start, start + base + (1 if rank < extra else 0))


def _wants_gpu(device: str) -> bool:
    """Whether to generate on the GPU; a GPU asked for but absent is a one-line error naming the extra."""
    if device not in ("auto", "cpu", "gpu"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'gpu', got {device!r}")
    if device == "cpu":
        return False
    try:
        import cupy  # lazy: cupy

        present = cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no CuPy, no driver or no device: all mean "no GPU here"
        present = False
    if device == "gpu" and not present:
        raise GPUUnavailableError("synth(device='gpu') needs CuPy and a CUDA device: pip install 'daskbatch[gpu-cu12]' "
                                  "(or [gpu-cu13]); generator='counter' makes the same data on the CPU")
    return present


def _lazy(rows: int, chunk_rows: int, model: SynthModel, dtype: np.dtype, seed: int, first_row: int = 0,
          stream: str = "default") -> tuple[da.Array, da.Array | None]:
    """Lazy X (and y) of ``rows`` rows from ``first_row`` on, one dask block per ``chunk_rows``."""
    row_chunks = tuple(min(chunk_rows, rows - s) for s in range(0, rows, chunk_rows)) or (0,)
    starts = np.cumsum((0,) + row_chunks[:-1]) + first_row
    token = dask.base.tokenize(seed, stream, first_row, rows, chunk_rows, str(dtype), model.features, model.classes,
                               model.informative, model.sources)

    def part(what: str, block_id: tuple[int, ...] | None = None) -> Any:
        i = block_id[0]  # type: ignore[index]
        start, stop = int(starts[i]), int(starts[i]) + row_chunks[i]
        if stream == "default":
            return numpy_rows(seed, start, stop, model, dtype, what)
        # The array namespace the counter stream runs in: CuPy's for the GPU, NumPy's otherwise.
        xp = importlib.import_module(f"array_api_compat.{'cupy' if stream == 'gpu' else 'numpy'}")
        x_rows, y_rows = counter_rows(xp, seed, start, stop, model, dtype)
        return x_rows if what == "x" else y_rows

    xp: Any = importlib.import_module("cupy") if stream == "gpu" else np  # the blocks' array type
    meta_x, meta_y = xp.empty((0, 0), dtype=dtype), xp.empty((0,), dtype=np.int32)
    x = da.map_blocks(part, "x", chunks=(row_chunks, (model.features,)), dtype=dtype, meta=meta_x,
                      name=f"daskbatch-synth-x-{token}")
    if not model.classes:
        return x, None
    return x, da.map_blocks(part, "y", chunks=(row_chunks,), dtype=np.int32, meta=meta_y,
                            name=f"daskbatch-synth-y-{token}")


def synth(
    rows_or_path: int | str | os.PathLike[str] | None = None,
    n_features: int | None = None,
    /,
    *,
    rows: int | None = None,
    features: int | None = None,
    classes: int | None = None,
    informative: int | None = None,
    correlated: int = 0,
    chunk_rows: int = 65536,
    dtype: str | np.dtype = "float32",
    seed: int = 0,
    path: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    rank: int | None = None,
    world_size: int | None = None,
    device: Literal["auto", "cpu", "gpu"] = "cpu",
    generator: Literal["default", "counter"] = "default",
    progress: bool | ProgressCallback = False,
    cancel: threading.Event | None = None,
) -> Dataset:
    """Make a deterministic synthetic dataset with known ground truth.

    Called as ``synth(rows, features, ...)``, or like the CLI with the store's
    path first: ``synth("data.zarr", rows=1000, features=8, ...)``.

    Parameters
    ----------
    rows_or_path : int, str or os.PathLike
        ``rows``, or the store's ``path`` (then give ``rows=`` and ``features=``).
    n_features : int, optional
        ``features``, given by position.
    rows, features : int
        Shape of ``X``.
    classes : int, optional
        Number of classes K; adds an int32 label ``y`` in ``0..K-1``.
    informative : int, optional
        Base features whose mean depends on the class (default: a quarter of them
        when ``classes`` is given, else none).
    correlated : int, default 0
        Features (the last ones) that are linear mixes of two base features plus noise.
    chunk_rows : int, default 65536
        Rows per storage chunk and per dask block.  Does not change the values.
    dtype : {"float32", "float64"}
        Data type of ``X``; generated directly in this type.
    seed : int, default 0
        Seed; data depend on ``(seed, row index)`` only.
    path : str or os.PathLike, optional
        Write a Zarr v3 group with arrays ``X`` (and ``y``), zstd-compressed with a
        CRC-32C checksum per chunk and every chunk stored, and open it back.  ``None`` returns lazy dask arrays.
    overwrite : bool, default False
        Replace an existing store at ``path`` that daskbatch wrote (never other
        data: a directory not written by daskbatch is refused; a symbolic link is
        replaced, not its target). Without it, an unfinished store of the same
        parameters is completed, a finished one is opened as it is, and anything
        else at ``path`` is refused (:class:`FileExistsError`).
    rank, world_size : int, optional
        Make only this rank's contiguous share of the ``rows``
        (:func:`rank_rows`): bitwise the same rows as the whole dataset's, so
        that the ranks' stores together are the dataset (``db.merge`` of their
        summaries equals the summary of the whole).
    device : {"cpu", "gpu", "auto"}, default "cpu"
        Where the rows are made: ``"gpu"`` generates each block on the GPU
        (CuPy blocks; copied to the host only to be written to ``path``) with
        the counter-based stream; ``"auto"`` is ``"gpu"`` when CuPy sees a device.
    generator : {"default", "counter"}, default "default"
        ``"default"``: numpy's Philox generator, block by block (the CPU's
        stream, unchanged across releases); ``"counter"``: the counter-based
        stream of :mod:`daskbatch.io.synth_model`, the one a GPU uses, so
        that a CPU can reproduce GPU-made data (to about 1e-16 relative).
    progress : bool or callable, default False
        While writing ``path``: a progress bar, or ``progress(done, total,
        "synth")`` after every chunk written.
    cancel : threading.Event, optional
        Set from another thread while writing ``path``, it stops after the
        chunks in flight: :class:`~daskbatch.Cancelled`. The same call again
        resumes: it writes only the chunks that are absent or do not decode (a URL's store: all of them).

    Returns
    -------
    Dataset
        Ground truth (``true_mean``, ``true_cov``, ``informative``, ``class_priors``,
        ``class_means``, ...) is in ``attrs["synth"]``; a rank's share also
        records its ``row_range`` there.
    """
    if isinstance(rows_or_path, (str, os.PathLike)):
        if path is not None:
            raise TypeError(f"synth() got two paths: {os.fspath(rows_or_path)!r} and path={os.fspath(path)!r}")
        path = rows_or_path
    elif rows_or_path is not None:
        if rows is not None:
            raise TypeError("synth() got rows both by position and as rows=")
        rows = int(rows_or_path)
    if n_features is not None:
        if features is not None:
            raise TypeError("synth() got features both by position and as features=")
        features = n_features
    if rows is None or features is None:
        raise TypeError("synth() needs rows and features, e.g. synth('data.zarr', rows=1000, features=8)")
    dtype = np.dtype(dtype)
    if dtype not in (np.dtype("float32"), np.dtype("float64")):
        raise ValueError(f"dtype must be float32 or float64, got {dtype}")
    if rows < 0:
        raise ValueError(f"rows must be >= 0, got {rows}")
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    _check_sizes(int(rows), int(features), int(chunk_rows), dtype)
    on_gpu = _wants_gpu(device)
    if generator not in ("default", "counter"):
        raise ValueError(f"generator must be 'default' or 'counter', got {generator!r}")
    counter = on_gpu or generator == "counter"
    if (rank is None) != (world_size is None):
        raise TypeError("synth() needs rank and world_size together")
    share = range(rows) if rank is None or world_size is None else rank_rows(rows, rank, world_size)
    first, stop = share.start, share.stop
    model = make_model(features, classes, informative, correlated, seed)
    x, y = _lazy(stop - first, chunk_rows, model, dtype, seed, first_row=first,
                 stream="gpu" if on_gpu else "counter" if counter else "default")
    names = [f"f{i}" for i in range(features)]
    truth = truth_attrs(model, seed, rows, dtype)
    if counter:
        truth["generator"] = "counter: Philox4x32-10 of (column pair, row, stream), Box-Muller (daskbatch.io.synth_model)"
    if (first, stop) != (0, rows):
        truth.update(row_range=[first, stop], rank=rank, world_size=world_size)
    attrs: dict[str, Any] = {"synth": truth, "feature_names": names, **layout(y is not None)}
    if path is None:
        return Dataset(x=x, label=y, feature_names=names, store_chunks=(chunk_rows, features), attrs=attrs)
    _write(path, x, y, attrs, chunk_rows, overwrite, progress, cancel)
    return open_dataset(path, chunks="auto")


#: Largest one chunk of X that synth makes in memory before writing it.
MAX_CHUNK_BYTES = 2 << 30
#: The ground truth's covariance is features x features float64, made in memory (4 GiB here).
MAX_FEATURES = 23_170


def _check_sizes(rows: int, features: int, chunk_rows: int, dtype: np.dtype) -> None:
    """Refuse sizes whose chunks, one chunk or ground truth would not fit, before anything is allocated."""
    if features > MAX_FEATURES:
        raise DataError(f"synth: {features:,} features need a {format_bytes(8 * features * features)} ground-truth "
                        f"covariance; use at most {MAX_FEATURES:,} features")
    chunks = -(-rows // chunk_rows)
    if chunks > max_chunks():
        raise DataError(f"synth: {rows:,} rows in chunks of {chunk_rows:,} make {chunks:,} chunks > daskbatch.max-chunks "
                        f"{max_chunks():,}; use chunk_rows >= {-(-rows // max_chunks()):,} or fewer rows")
    one = min(chunk_rows, rows) * features * dtype.itemsize
    if one > MAX_CHUNK_BYTES:
        raise DataError(f"synth: one chunk of {min(chunk_rows, rows):,} rows x {features:,} features is "
                        f"{format_bytes(one)} > {format_bytes(MAX_CHUNK_BYTES)}; use chunk_rows <= "
                        f"{MAX_CHUNK_BYTES // (features * dtype.itemsize):,}")


def _write(
    path: str | os.PathLike[str], x: da.Array, y: da.Array | None, attrs: dict[str, Any], chunk_rows: int,
    overwrite: bool, progress: bool | ProgressCallback = False, cancel: threading.Event | None = None,
) -> None:
    """Write X (and y) as a row store (resumable: chunks that decode are kept), or whole to a URL."""
    where = os.fspath(path)
    check_url(where, "output")
    rows, per = int(x.shape[0]), min(chunk_rows, int(x.shape[0]))
    # Fill value 0, as synth stores always had: what missing='fill' reads in place of a lost chunk.
    arrays = [ArraySpec("X", x.dtype, int(x.shape[1]), fill=0)] + ([ArraySpec("y", np.dtype(np.int32))] if y is not None else [])
    if "://" in where:  # an object store cannot hold the run's log: its store is written whole
        group = _url_group(where, arrays, attrs, rows, per, overwrite)
        if group is not None:
            writer = RegionWriter({a.name: group[a.name] for a in arrays}, rows, per)
            _write_blocks(writer, range(-(-rows // per) if rows else 0), x, y, progress, cancel)
            group.update_attributes({"complete": True})
        return
    parent = os.path.dirname(os.path.abspath(where))
    if not os.path.lexists(parent):  # as zarr did: a new store's folders (a file there is named by RowStore)
        os.makedirs(parent)
    truth = attrs["synth"]
    # What decides the bytes: the model's parameters (drawn from the seed), the rows and their chunks.
    items = {k: truth.get(k) for k in ("seed", "rows", "features", "dtype", "classes", "informative", "correlated",
                                       "correlated_sources", "generator", "row_range")}
    store = RowStore.open(where, kind=KIND, rows=rows, chunk_rows=per, arrays=arrays, attrs=attrs,
                          doc={"kind": KIND, "items": {**items, "chunk_rows": per}}, overwrite=overwrite,
                          check_chunks=True)
    try:
        if not store.complete:
            todo = store.todo
            _write_blocks(store.writer, todo, x, y, progress, cancel, skip=store.blocks - len(todo))
            for block in todo:  # reached only when every one was written: a cancel or failure raised above
                store.mark_done(block)
            store.finish()
    finally:
        store.close()


#: The ``daskbatch_output`` kind of a synth store.
KIND = "synth"


def _url_group(where: str, arrays: list[ArraySpec], attrs: dict[str, Any], rows: int, per: int,
               overwrite: bool) -> zarr.Group | None:
    """A new store at URL ``where`` (this request's unfinished one made again); None when it is finished already."""
    try:
        found = dict(zarr.open_group(where, mode="r").attrs)
    except (FileNotFoundError, zarr.errors.GroupNotFoundError, ValueError, TypeError):  # nothing zarr can open
        found = None
    ours = found is not None and found.get("synth") == json.loads(json.dumps(attrs["synth"]))
    if ours and found.get("complete") and not overwrite:  # type: ignore[union-attr]
        return None
    theirs = found is not None and MARKER not in found and "synth" not in found  # as check_replaceable decides
    if found is not None and not ours and (theirs or not overwrite):
        raise OutputExistsError(f"{where} already exists and is not " + (
            "a store daskbatch wrote; daskbatch does not replace other data, even with --overwrite (overwrite=True): "
            "choose another path or remove it yourself" if theirs else
            "a synth store of these parameters; pass overwrite=True (--overwrite) to replace it"))
    group = zarr.open_group(where, mode="w" if found is not None else "w-", zarr_format=3,
                            attributes={MARKER: KIND, "complete": False, **attrs})
    create_arrays(group, rows, per, arrays, checksummed(ZstdCodec(level=1)))  # as RowStore creates them
    return group


def _write_blocks(writer: RegionWriter, todo: Any, x: da.Array, y: da.Array | None, progress: bool | ProgressCallback,
                  cancel: threading.Event | None, skip: int = 0) -> None:
    """Compute and write blocks ``todo`` of X (and y), one task each: a dask block is one storage chunk."""
    # Keys unique to this write: a distributed scheduler would otherwise take one run's tasks for another's.
    name = f"synth-write-{uuid.uuid4().hex}"
    writes = [dask.delayed(_write_block, pure=False)(writer, i, x.blocks[i], None if y is None else y.blocks[i],
                                                     dask_key_name=(name, i)) for i in todo]
    with Progress("synth", int(x.numblocks[0]) if x.shape[0] else 0, unit="chunks", rows=int(x.shape[0]),
                  nbytes=int(x.nbytes), cancel=cancel, progress=progress) as bar:
        bar.skip(skip)
        if writes:
            compute(dask.delayed(len)(writes), bar, prefix="synth-write")


def _write_block(writer: RegionWriter, block: int, x: np.ndarray, y: np.ndarray | None) -> None:
    """Write one computed block of X (and y) as chunk ``block`` (a GPU's copied to the host once, here)."""
    writer.write(block, {"X": to_numpy(x)} if y is None else {"X": to_numpy(x), "y": to_numpy(y)})
