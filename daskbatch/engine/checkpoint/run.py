"""Checkpoint / resume of one pass of :func:`daskbatch.describe`.

A pass is a ``split_every``-ary tree reduction (:func:`daskbatch.engine.reduce.tree_reduce`).
Its level-0 groups (blocks ``[j*s, (j+1)*s)``) are the checkpoint *units*: each
is computed as a tree reduction of its own, with ``finalize=False``, and its
merged state is written to disk as soon as it arrives. Whenever all ``s``
siblings of a group are on disk they are merged, in-process and in the same
order as ``tree_reduce`` would, into their parent node, which is written
before the children are deleted. The tree's shape and merge order therefore
never change, and a resumed run is bitwise identical to an uninterrupted one
(on the same machine and backend), while the directory holds at most about
``s - 1`` states per tree level.

Layout of a checkpoint directory::

    DIR/daskbatch-checkpoint.json      fingerprint of the input, spec of every pass
    DIR/pass-<stats>/L<level>-<index>.ckpt   merged states (JSON header line + .npz)
    DIR/pass-<stats>/runs.jsonl        one line per run: blocks reused / computed

Every node file starts with a one-line JSON header carrying the sha256 and
length of its ``.npz`` payload and the digest of the pass it belongs to; it is
written to a temporary file, fsynced and renamed, so a kill leaves either the
whole file or none. A damaged or truncated file is detected, deleted and its
blocks computed again; it is never merged. Payloads hold plain arrays
(``allow_pickle=False``) of state dataclasses from :mod:`daskbatch.stats`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from daskbatch.engine.checkpoint.files import (
    TMP_PREFIX,
    DamagedCheckpoint,
    decode_state,
    encode_state,
    read_header,
    write_atomic,
)
from daskbatch.errors import CheckpointMismatchError, Interrupted
from daskbatch.runtime.interrupts import sigterm_as_interrupt
from daskbatch.stats._base import merge_all

__all__ = [
    "FORMAT_VERSION", "Interrupted", "read_runs", "run_checkpointed", "sigterm_as_interrupt",
]

log = logging.getLogger(__name__)

#: Bumped whenever the on-disk layout changes; part of the fingerprint.
FORMAT_VERSION = 1
MANIFEST = "daskbatch-checkpoint.json"
_SUFFIX = ".ckpt"


# --------------------------------------------------------------------------- fingerprint

def _short(value: Any) -> str:
    """Printable form of a spec value; long sequences become a length and digest."""
    if isinstance(value, (tuple, list, np.ndarray)) and len(value) > 8:
        digest = hashlib.sha256(repr(tuple(np.asarray(value).tolist())).encode()).hexdigest()
        return f"{len(value)} values, sha256 {digest[:16]}"
    return repr(value)


def input_items(data: Any, split_every: int) -> dict[str, str]:
    """What identifies the input of a pass: store, array metadata, chunk grid, version."""
    from daskbatch._version import __version__

    x, prov = data.x, data.provenance
    path = prov.get("path")
    source = str(path) if path else f"in-memory dask array {x.name}"
    label = prov.get("label") or (None if data.label is None else getattr(data.label, "name", "?"))
    rows = tuple(int(c) for c in x.chunks[0])
    grid = f"{len(rows)} blocks of {rows[0]:,} rows" + (f" (last {rows[-1]:,})" if rows[-1] != rows[0] else "")
    if len(set(rows[:-1])) > 1:
        grid += ", irregular sha256 " + hashlib.sha256(repr(rows).encode()).hexdigest()[:16]
    return {
        "format": str(FORMAT_VERSION),
        "source": source,
        "array": str(prov.get("array")),
        "label": str(label),
        "shape": str(tuple(int(n) for n in x.shape)),
        "dtype": str(x.dtype),
        "store chunks": str(prov.get("store_chunks")),
        "zarr format": str(prov.get("zarr_format")),
        "chunk grid": grid,
        "split_every": str(split_every),
        "daskbatch version": str(__version__),
    }


def spec_items(bundle: Any) -> dict[str, str]:
    """Every parameter of every statistic of ``bundle`` (ranges of a histogram included)."""
    items: dict[str, str] = {}
    for stat in bundle.stats:
        items[f"{stat.name}.type"] = type(stat).__qualname__
        for f in dataclasses.fields(stat):
            items[f"{stat.name}.{f.name}"] = _short(getattr(stat, f.name))
    return items


def _digest(items: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(items, sort_keys=True).encode()).hexdigest()


def _first_difference(old: dict[str, str], new: dict[str, str]) -> str | None:
    for key in list(new) + [k for k in old if k not in new]:
        if old.get(key) != new.get(key):
            return f"{key} ({old.get(key, 'absent')} in the checkpoint, {new.get(key, 'absent')} now)"
    return None


# --------------------------------------------------------------------------- the tree

def level_sizes(n_blocks: int, split_every: int) -> list[int]:
    """Nodes per level of the merge tree: level 0 = groups of blocks, the last level = 1 (root)."""
    sizes = [-(-n_blocks // split_every)]
    while sizes[-1] > 1:
        sizes.append(-(-sizes[-1] // split_every))
    return sizes


def node_blocks(level: int, index: int, n_blocks: int, split_every: int) -> tuple[int, int]:
    """Blocks ``[start, stop)`` merged into node ``(level, index)``."""
    span = split_every ** (level + 1)
    return index * span, min((index + 1) * span, n_blocks)


class _PassStore:
    """Node files of one pass, with the merge-up of complete sibling groups."""

    def __init__(self, folder: Path, bundle: Any, digest: str, n_blocks: int, split_every: int) -> None:
        self.folder, self.bundle, self.digest = folder, bundle, digest
        self.n_blocks, self.s = n_blocks, split_every
        self.sizes = level_sizes(n_blocks, split_every)
        self.nodes: dict[tuple[int, int], tuple[Any, ...] | None] = {}  # None: on disk only
        self.damaged: list[str] = []

    def path(self, level: int, index: int) -> Path:
        return self.folder / f"L{level}-{index:06d}{_SUFFIX}"

    def scan(self) -> None:
        """Find valid node files; delete damaged, foreign, superseded and temporary ones."""
        for p in self.folder.glob(f"{TMP_PREFIX}*"):
            p.unlink(missing_ok=True)
        found: set[tuple[int, int]] = set()
        for p in sorted(self.folder.glob(f"L*{_SUFFIX}")):
            try:
                header, _ = read_header(p)
                key = (int(header["level"]), int(header["index"]))
                if header.get("pass") != self.digest or p.name != self.path(*key).name:
                    raise DamagedCheckpoint(f"{p}: belongs to another checkpoint")
                if key[0] >= len(self.sizes) or key[1] >= self.sizes[key[0]]:
                    raise DamagedCheckpoint(f"{p}: outside this merge tree")
            except (DamagedCheckpoint, KeyError, TypeError, ValueError, OSError) as exc:
                log.warning("checkpoint file %s is damaged (%s); its blocks are computed again", p, exc)
                self.damaged.append(p.name)
                p.unlink(missing_ok=True)
                continue
            found.add(key)
        for level, index in sorted(found):
            if any((lv, index // self.s ** (lv - level)) in found for lv in range(level + 1, len(self.sizes))):
                self.path(level, index).unlink(missing_ok=True)  # a parent already holds it
            else:
                self.nodes[(level, index)] = None
        for level in range(len(self.sizes) - 1):  # killed between last child and parent write
            for parent in range(self.sizes[level + 1]):
                self._merge_up(level, parent)

    def covered(self, unit: int) -> bool:
        """Whether level-0 group ``unit`` is inside some node already on disk."""
        return any((lv, unit // self.s**lv) in self.nodes for lv in range(len(self.sizes)))

    def covered_blocks(self) -> int:
        return sum(b - a for a, b in (node_blocks(lv, i, self.n_blocks, self.s) for lv, i in self.nodes))

    def put(self, level: int, index: int, state: tuple[Any, ...]) -> None:
        """Write node ``(level, index)`` and merge its sibling group up when it is complete."""
        start, stop = node_blocks(level, index, self.n_blocks, self.s)
        meta = {"format": FORMAT_VERSION, "pass": self.digest, "level": level, "index": index,
                "blocks": [start, stop], "written": time.time()}
        write_atomic(self.path(level, index), encode_state(state, meta))
        self.nodes[(level, index)] = state
        if level + 1 < len(self.sizes):
            self._merge_up(level, index // self.s)

    def get(self, level: int, index: int) -> tuple[Any, ...]:
        state = self.nodes[(level, index)]
        if state is None:
            state = decode_state(*read_header(self.path(level, index)))
        return state

    def _merge_up(self, level: int, parent: int) -> None:
        children = range(parent * self.s, min((parent + 1) * self.s, self.sizes[level]))
        if not all((level, c) in self.nodes for c in children):
            return
        # Same grouping and left-to-right order as tree_reduce's merge at this level.
        merged = merge_all(self.bundle, [self.get(level, c) for c in children])
        self.put(level + 1, parent, merged)  # written before the children go
        for c in children:
            del self.nodes[(level, c)]
            self.path(level, c).unlink(missing_ok=True)

    def root(self) -> tuple[Any, ...]:
        return self.get(len(self.sizes) - 1, 0)


# --------------------------------------------------------------------------- manifest

def _open_pass(
    directory: Path, items: dict[str, str], pass_name: str, spec: dict[str, str], force: bool,
    layout: dict[str, int],
) -> Path:
    """Check (or create) the manifest; return the folder of this pass."""
    directory.mkdir(parents=True, exist_ok=True)
    manifest_path = directory / MANIFEST
    manifest: dict[str, Any] = {"input": items, "passes": {}}
    if manifest_path.exists():
        try:
            manifest = json.loads(manifest_path.read_text())
            old_items, passes = manifest["input"], manifest["passes"]
        except (ValueError, KeyError, TypeError) as exc:
            raise CheckpointMismatchError(
                f"{manifest_path} is not a daskbatch checkpoint manifest ({exc}); "
                "remove it or choose another --checkpoint directory"
            ) from exc
        differs = _first_difference(old_items, items)
        if differs is not None:
            if not force:
                raise CheckpointMismatchError(
                    f"checkpoint {directory} belongs to another input: {differs}; "
                    "pass force=True (--force) to start fresh or choose another directory"
                )
            log.warning("checkpoint %s: %s; starting fresh (force)", directory, differs)
            for name in passes:
                _remove_pass(directory / _pass_folder(name))
            manifest = {"input": items, "passes": {}}
        old_spec = manifest["passes"].get(pass_name)
        if old_spec is not None and (differs := _first_difference(old_spec, spec)) is not None:
            if not force:
                raise CheckpointMismatchError(
                    f"checkpoint {directory} was written for other statistics: {differs}; "
                    "pass force=True (--force) to start fresh or choose another directory"
                )
            log.warning("checkpoint %s: %s; starting this pass fresh (force)", directory, differs)
            _remove_pass(directory / _pass_folder(pass_name))
    manifest["input"] = items
    manifest["passes"][pass_name] = spec
    manifest["layout"] = layout
    write_atomic(manifest_path, json.dumps(manifest, indent=1, sort_keys=True).encode())
    folder = directory / _pass_folder(pass_name)
    folder.mkdir(exist_ok=True)
    return folder


def recorded_layout(directory: str | os.PathLike[str]) -> dict[str, int] | None:
    """``{"chunk_rows", "split_every"}`` of the run that wrote the checkpoint in ``directory``, if any.

    A resumed run reuses them, so a checkpoint stays valid when the cluster
    (and with it the automatic plan) differs from the first run's.
    """
    try:
        layout = json.loads((Path(directory) / MANIFEST).read_text()).get("layout")
    except (OSError, ValueError, AttributeError):
        return None
    if isinstance(layout, dict) and {"chunk_rows", "split_every"} <= set(layout):
        return {k: int(layout[k]) for k in ("chunk_rows", "split_every")}
    return None


def _pass_folder(pass_name: str) -> str:
    return f"pass-{pass_name}"


def _remove_pass(folder: Path) -> None:
    """Delete only the files this module writes (never a user's other files)."""
    if not folder.is_dir():
        return
    for p in folder.iterdir():
        if p.suffix == _SUFFIX or p.name.startswith(TMP_PREFIX) or p.name == "runs.jsonl":
            p.unlink()
    with contextlib.suppress(OSError):
        folder.rmdir()


def read_runs(directory: str | os.PathLike[str], pass_name: str) -> list[dict[str, Any]]:
    """The run log of one pass (``pass_name`` is the bundle's name, e.g. ``"moments-cov"``).

    Each entry has ``blocks``, ``reused_blocks``, ``computed_blocks``,
    ``computed_units``, ``damaged`` (file names recomputed) and ``pid``.
    """
    path = Path(directory) / _pass_folder(pass_name) / "runs.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# --------------------------------------------------------------------------- running

def run_checkpointed(
    bundle: Any,
    data: Any,
    label: Any,
    *,
    split_every: int | None,
    progress: bool,
    directory: str | os.PathLike[str],
    force: bool,
) -> tuple[Any, ...]:
    """One pass of ``bundle`` over ``data.x`` through the checkpoint ``directory``.

    Parameters
    ----------
    bundle : Bundle
        The statistics of the pass; their parameters are part of the fingerprint.
    data : FeatureMatrix
        ``x`` (rows chunked, one column block), ``label``, ``provenance``.
    label : dask.array.Array or None
        Passed to ``chunk`` with each block (histograms by label).
    split_every : int, optional
        Fan-in of the merge tree (``daskbatch.split-every`` by default).
    progress : bool
        Report units as they complete.
    directory : path
        Checkpoint directory (created if missing).
    force : bool
        Discard a checkpoint written for another input or statistics instead of refusing.

    Returns
    -------
    tuple
        Finalized results with host NumPy arrays, bitwise identical to
        ``dask.compute(tree_reduce(bundle, data.x, label, split_every=split_every))[0]``.

    Raises
    ------
    CheckpointMismatchError
        The directory belongs to another input or statistics spec (the item is named).
    Interrupted
        SIGTERM under :func:`sigterm_as_interrupt`; finished units are on disk.
    """
    from daskbatch.engine.reduce import resolve_split_every, to_host

    s = resolve_split_every(split_every)
    x = data.x
    n_blocks = int(x.numblocks[0])
    items = input_items(data, s)
    spec = spec_items(bundle)
    layout = {"chunk_rows": int(x.chunks[0][0]), "split_every": s}
    folder = _open_pass(Path(directory), items, bundle.name, spec, force, layout)
    store = _PassStore(folder, bundle, _digest({**items, **spec}), n_blocks, s)
    store.scan()
    reused = store.covered_blocks()
    todo = [j for j in range(store.sizes[0]) if not store.covered(j)]
    computed = sum(node_blocks(0, j, n_blocks, s)[1] - node_blocks(0, j, n_blocks, s)[0] for j in todo)
    log.info("checkpoint %s: %d of %d blocks on disk, computing %d units (%d blocks)",
             folder, reused, n_blocks, len(todo), computed)
    run = {"pid": os.getpid(), "started": time.time(), "blocks": n_blocks, "reused_blocks": reused,
           "computed_blocks": computed, "computed_units": len(todo), "damaged": store.damaged}
    with open(folder / "runs.jsonl", "a") as f:
        f.write(json.dumps(run) + "\n")

    if label is not None:
        label = label.rechunk((x.chunks[0],))
    make = _unit_graph(bundle, x, label, s, n_blocks)
    done = 0

    def on_unit(unit: int, state: tuple[Any, ...]) -> None:
        nonlocal done
        store.put(0, unit, state)
        done += 1
        if progress:
            print(f"\rcheckpointed {done}/{len(todo)} units", end="", file=sys.stderr, flush=True)

    try:
        _compute_units(todo, make, on_unit)
    except Interrupted as exc:
        raise Interrupted(
            f"{exc}: {store.covered_blocks()} of {n_blocks} blocks of pass '{bundle.name}' are "
            f"checkpointed in {directory}; run the same command again to resume"
        ) from exc
    finally:
        if progress and todo:
            print(file=sys.stderr)
    return to_host(bundle.finalize(store.root()))


def _unit_graph(bundle: Any, x: Any, label: Any, s: int, n_blocks: int) -> Callable[[int], Any]:
    from daskbatch.engine.reduce import tree_reduce

    def make(unit: int) -> Any:
        a, b = node_blocks(0, unit, n_blocks, s)
        y = None if label is None else label.blocks[a:b]
        return tree_reduce(bundle, x.blocks[a:b], y, split_every=s, finalize=False)

    return make


def _compute_units(units: list[int], make: Callable[[int], Any], on_unit: Callable[[int, Any], None]) -> None:
    """Compute the units, handing each state to ``on_unit`` (in this thread) as soon as it exists."""
    if not units:
        return
    from daskbatch.runtime.cluster import active_client

    client = active_client()
    if client is not None:
        from distributed import as_completed

        futures = client.compute([make(j) for j in units])
        which = {f.key: j for f, j in zip(futures, units, strict=True)}
        try:
            for future in as_completed(futures):
                on_unit(which[future.key], future.result())
                future.release()
        except BaseException:
            client.cancel(futures)
            raise
        return

    import dask
    from dask.callbacks import Callback

    class _OnUnit(Callback):
        def __init__(self, keys: dict[Any, int]) -> None:
            super().__init__()
            self.keys = keys

        def _posttask(self, key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
            if key in self.keys:  # runs in the scheduling (calling) thread
                on_unit(self.keys[key], result)

    # Waves of a few units: the local schedulers keep every output in memory until the end.
    wave = max(2, int(dask.config.get("num_workers", None) or os.cpu_count() or 2))
    for i in range(0, len(units), wave):
        graphs = [make(j) for j in units[i : i + wave]]
        with _OnUnit({g.key: j for g, j in zip(graphs, units[i : i + wave], strict=True)}):
            dask.compute(*graphs)
