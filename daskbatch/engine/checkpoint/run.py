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

Every node file starts with a sha256 over the rest of it (a JSON header with
the digest of the pass it belongs to, then the ``.npz`` payload,
:mod:`daskbatch.checkpoint_files`); it is written to a temporary file, fsynced
and renamed, so a kill leaves either the whole file or none. A damaged,
truncated or edited file is detected, logged, deleted and its blocks computed
again; it is never merged. Payloads hold plain arrays (``allow_pickle=False``)
of state dataclasses from :mod:`daskbatch.stats`.

The manifest's fingerprint (:mod:`daskbatch.engine.checkpoint.fingerprint`) identifies
the data (real path or URL, array metadata, a content token from the store's
listing) and every setting that changes bits; a run on other data or settings
is refused with the differing items named. One run at a time holds
``DIR/daskbatch.lock`` (:mod:`daskbatch.runtime.runlock`) while it works on a pass.
Pass names in the manifest are plain names (``[A-Za-z0-9_-]+``), never paths,
and ``force`` deletes only the files this module writes, inside ``DIR``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import logging
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import numpy as np

from daskbatch.engine.checkpoint.files import (
    TMP_PREFIX,
    DamagedCheckpoint,
    decode_state,
    encode_state,
    read_header,
    write_atomic,
)
from daskbatch.engine.checkpoint.fingerprint import differences
from daskbatch.engine.checkpoint.fingerprint import input_items as _fingerprint_items
from daskbatch.errors import CheckpointMismatchError, Interrupted
from daskbatch.runtime.interrupts import sigterm_as_interrupt
from daskbatch.runtime.runlock import LOCK_NAME, RunLock
from daskbatch.stats._base import merge_all

__all__ = [
    "FORMAT_VERSION", "Interrupted", "read_runs", "run_checkpointed", "sigterm_as_interrupt",
]

log = logging.getLogger(__name__)

#: Bumped whenever the on-disk layout changes; part of the fingerprint.
#: 2: checksum over header and payload; the data's real path, metadata and content token.
FORMAT_VERSION = 2
MANIFEST = "daskbatch-checkpoint.json"
_SUFFIX = ".ckpt"
#: A pass name, and so the folder ``pass-<name>``: a plain name, never a path.
PASS_NAME = re.compile(r"[A-Za-z0-9_-]+")
_NODE_FILE = re.compile(r"L\d+-\d{6,}\.ckpt")


# --------------------------------------------------------------------------- fingerprint

def _short(value: Any) -> str:
    """Printable form of a spec value; long sequences become a length and digest."""
    if isinstance(value, (tuple, list, np.ndarray)) and len(value) > 8:
        digest = hashlib.sha256(repr(tuple(np.asarray(value).tolist())).encode()).hexdigest()
        return f"{len(value)} values, sha256 {digest[:16]}"
    return repr(value)


def input_items(data: Any, split_every: int) -> dict[str, str]:
    """What identifies the input of a pass (:func:`daskbatch.engine.checkpoint.fingerprint.input_items`)."""
    return _fingerprint_items(data, split_every, FORMAT_VERSION)


def spec_items(bundle: Any) -> dict[str, str]:
    """Every parameter of every statistic of ``bundle`` (ranges of a histogram included)."""
    items: dict[str, str] = {}
    for stat in bundle.stats:
        items[f"{stat.name}.type"] = type(stat).__qualname__
        for f in dataclasses.fields(stat):
            items[f"{stat.name}.{f.name}"] = _short(getattr(stat, f.name))
    items.update(getattr(bundle, "settings", {}))  # e.g. how a GPU run stages its blocks
    return items


def _digest(items: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(items, sort_keys=True).encode()).hexdigest()


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
            except DamagedCheckpoint as exc:  # read_header turns whatever is wrong into this
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
    manifest_path = directory / MANIFEST
    manifest: dict[str, Any] = {"input": items, "passes": {}}
    if manifest_path.exists():
        manifest = _read_manifest(manifest_path)
        diffs = differences(manifest["input"], items)
        if diffs:
            if not force:
                raise CheckpointMismatchError(
                    f"checkpoint {directory} was written for other data: {'; '.join(diffs)}; "
                    "use --force (force=True) to discard it, or choose another directory"
                )
            log.warning("checkpoint %s: %s; starting fresh (force)", directory, "; ".join(diffs))
            for name in manifest["passes"]:
                _remove_pass(directory, name)
            manifest = {"input": items, "passes": {}}
        old_spec = manifest["passes"].get(pass_name)
        if old_spec is not None and (diffs := differences(old_spec, spec)):
            if not force:
                raise CheckpointMismatchError(
                    f"checkpoint {directory} was written for other statistics: {'; '.join(diffs)}; "
                    "use --force (force=True) to discard it, or choose another directory"
                )
            log.warning("checkpoint %s: %s; starting this pass fresh (force)", directory, "; ".join(diffs))
            _remove_pass(directory, pass_name)
    manifest["input"] = items
    manifest["passes"][pass_name] = spec
    manifest["layout"] = layout
    write_atomic(manifest_path, json.dumps(manifest, indent=1, sort_keys=True).encode())
    folder = directory / _pass_folder(pass_name)
    if folder.is_symlink():
        raise CheckpointMismatchError(
            f"{folder} is a symbolic link; daskbatch writes only into folders it created there"
        )
    folder.mkdir(exist_ok=True)
    return folder


def _read_manifest(path: Path) -> dict[str, Any]:
    """The manifest, checked: string items, passes under plain names (never paths)."""
    def bad(why: str) -> CheckpointMismatchError:
        return CheckpointMismatchError(
            f"{path} is not a daskbatch checkpoint manifest ({why}); "
            "remove it or choose another --checkpoint directory"
        )

    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise bad(str(exc)) from exc
    if not isinstance(manifest, dict) or not _is_items(manifest.get("input")):
        raise bad("no 'input' fingerprint")
    passes = manifest.get("passes")
    if not isinstance(passes, dict):
        raise bad("no 'passes'")
    for name, spec in passes.items():
        if not PASS_NAME.fullmatch(name):
            raise bad(f"pass name {name!r} is not a plain name")
        if not _is_items(spec):
            raise bad(f"pass {name!r} has no parameters")
    return manifest


def _is_items(value: object) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


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
        try:
            return {k: int(layout[k]) for k in ("chunk_rows", "split_every")}
        except (TypeError, ValueError):
            return None
    return None


def _pass_folder(pass_name: str) -> str:
    if not PASS_NAME.fullmatch(pass_name):
        raise ValueError(f"checkpoint pass name {pass_name!r} is not a plain name ([A-Za-z0-9_-]+)")
    return f"pass-{pass_name}"


def _remove_pass(directory: Path, pass_name: str) -> None:
    """Delete only the files this module writes, in ``directory``'s own pass folder (never a user's other files).

    A pass folder that is a symbolic link is left alone: its files are not in ``directory``.
    """
    folder = directory / _pass_folder(pass_name)
    if folder.is_symlink() or not folder.is_dir():
        if folder.is_symlink():
            log.warning("checkpoint %s: %s is a symbolic link; not following it", directory, folder)
        return
    for p in folder.iterdir():
        ours = _NODE_FILE.fullmatch(p.name) or p.name.startswith(TMP_PREFIX) or p.name == "runs.jsonl"
        if ours and (p.is_symlink() or p.is_file()):
            p.unlink()  # a link itself, never what it points to
    with contextlib.suppress(OSError):
        folder.rmdir()


def read_runs(directory: str | os.PathLike[str], pass_name: str) -> list[dict[str, Any]]:
    """The run log of one pass (``pass_name`` is the bundle's name, e.g. ``"moments-cov"``).

    Each entry has ``blocks``, ``reused_blocks``, ``computed_blocks``,
    ``computed_units``, ``damaged`` (file names recomputed) and ``pid``.
    Lines that are not JSON objects (a torn last line, garbage) are skipped
    with a warning that says how many.
    """
    path = Path(directory) / _pass_folder(pass_name) / "runs.jsonl"
    if not path.exists():
        return []
    runs, skipped = [], 0
    for line in path.read_text(errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            entry = None
        if isinstance(entry, dict):
            runs.append(entry)
        else:
            skipped += 1
    if skipped:
        log.warning("%s: skipped %d unreadable line(s) of %d", path, skipped, skipped + len(runs))
    return runs


def _append_run(path: Path, run: dict[str, Any]) -> None:
    """Append one line to the run log, on a line of its own even after a torn last line."""
    with open(path, "ab+") as f:
        f.seek(0, os.SEEK_END)
        torn = False
        if f.tell():
            f.seek(-1, os.SEEK_END)
            torn = f.read(1) != b"\n"
        f.write((b"\n" if torn else b"") + json.dumps(run).encode() + b"\n")


# --------------------------------------------------------------------------- one run at a time

def checkpoint_lock(directory: str | os.PathLike[str]) -> RunLock:
    """The run lock of a checkpoint directory (created if missing); re-entrant in one thread."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    return RunLock(Path(directory) / LOCK_NAME, f"checkpoint directory {os.fspath(directory)}")


P = ParamSpec("P")
R = TypeVar("R")


def holding_checkpoint_lock(func: Callable[P, R]) -> Callable[P, R]:
    """Hold the lock of ``func``'s ``checkpoint=`` directory for the whole call (all its passes).

    Each pass takes the lock too; holding it across them keeps another run from
    slipping in between two passes and failing this one halfway.
    """

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        directory = kwargs.get("checkpoint")
        if not isinstance(directory, (str, os.PathLike)):
            return func(*args, **kwargs)
        with checkpoint_lock(directory):
            return func(*args, **kwargs)

    return wrapper


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
        The directory belongs to other data, settings or statistics (every differing item is named).
    LockHeldError
        Another live run works on the same directory (the lock file and its holder are named).
    Interrupted
        SIGTERM under :func:`sigterm_as_interrupt`; finished units are on disk.
    """
    from daskbatch.engine.reduce import resolve_split_every, to_host

    s = resolve_split_every(split_every)
    x = data.x
    n_blocks = int(x.numblocks[0])
    items = input_items(data, s)
    spec = spec_items(bundle)
    _pass_folder(bundle.name)  # a plain name, before anything is written
    folder_root = Path(directory)
    with checkpoint_lock(folder_root):
        folder = _open_pass(folder_root, items, bundle.name, spec, force,
                            {"chunk_rows": int(x.chunks[0][0]), "split_every": s})
        state = _run_pass(_PassStore(folder, bundle, _digest({**items, **spec}), n_blocks, s),
                          bundle, x, label, progress, directory)
    return to_host(bundle.finalize(state))


def _run_pass(
    store: _PassStore, bundle: Any, x: Any, label: Any, progress: bool, directory: str | os.PathLike[str],
) -> tuple[Any, ...]:
    """Compute what ``store`` lacks (the caller holds the lock); the root state."""
    s, n_blocks = store.s, store.n_blocks
    store.scan()
    reused = store.covered_blocks()
    todo = [j for j in range(store.sizes[0]) if not store.covered(j)]
    computed = sum(node_blocks(0, j, n_blocks, s)[1] - node_blocks(0, j, n_blocks, s)[0] for j in todo)
    log.info("checkpoint %s: %d of %d blocks on disk, computing %d units (%d blocks)",
             store.folder, reused, n_blocks, len(todo), computed)
    run = {"pid": os.getpid(), "started": time.time(), "blocks": n_blocks, "reused_blocks": reused,
           "computed_blocks": computed, "computed_units": len(todo), "damaged": store.damaged}
    _append_run(store.folder / "runs.jsonl", run)

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
    return store.root()


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
