"""Checkpoint / resume of one pass of :func:`daskbatch.describe`."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import math
import os
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from daskbatch.config import resolve_split_every
from daskbatch.engine.checkpoint_files import (
    _SUFFIX,
    FORMAT_VERSION,
    MANIFEST,
    TMP_PREFIX,
    DamagedCheckpoint,
    _digest,
    append_run,
    checkpoint_lock,
    decode_state,
    encode_state,
    open_pass,
    pass_folder,
    read_header,
    read_runs,
    recorded_layout,
    remove_stale_temps,
    spec_items,
    write_atomic,
)
from daskbatch.engine.fingerprint import input_items
from daskbatch.errors import Cancelled, Interrupted
from daskbatch.runtime.capacity import active_client, rechunk_method
from daskbatch.runtime.progress import Progress
from daskbatch.runtime.runlock import sigterm_as_interrupt
from daskbatch.stats._base import BundleLike, merge_all
from daskbatch.stats.categorical import (
    CategoricalProfile,
    CategoricalState,
    block_states,
    decode_profile,
    encode_profile,
)
from daskbatch.stats.numerics import namespace
from daskbatch.stats.registry import built_in_states

if TYPE_CHECKING:
    import dask.array as da
    from dask.delayed import Delayed

    from daskbatch.engine.inputs import FeatureMatrix

__all__ = [
    "FORMAT_VERSION", "MANIFEST", "Interrupted", "checkpoint_lock", "read_runs",
    "recorded_layout", "run_checkpointed", "sigterm_as_interrupt",
]

log = logging.getLogger(__name__)


def level_sizes(n_blocks: int, split_every: int) -> list[int]:
    """Count the nodes per level of the merge tree: level 0 = groups of blocks, the last level = 1 (root)."""
    sizes = [-(-n_blocks // split_every)]
    while sizes[-1] > 1:
        sizes.append(-(-sizes[-1] // split_every))
    return sizes


def node_blocks(level: int, index: int, n_blocks: int, split_every: int) -> tuple[int, int]:
    """Find the blocks merged into node ``(level, index)``."""
    span = split_every ** (level + 1)
    return index * span, min((index + 1) * span, n_blocks)


class _PassStore:
    """Node files of one pass, with the merge-up of complete sibling groups."""

    def __init__(self, folder: Path, bundle: BundleLike, digest: str, n_blocks: int, split_every: int) -> None:
        self.folder, self.bundle, self.digest = folder, bundle, digest
        self.n_blocks, self.s = n_blocks, split_every
        self.sizes = level_sizes(n_blocks, split_every)
        self.nodes: dict[tuple[int, int], tuple[Any, ...] | None] = {}  # None: on disk only
        self.damaged: list[str] = []
        #: The pass's state of zero rows: what every node's state must look like (None: records only).
        self.reference: tuple[Any, ...] | None = None

    def path(self, level: int, index: int) -> Path:
        return self.folder / f"L{level}-{index:06d}{_SUFFIX}"

    def scan(self) -> None:
        """Find valid node files; delete damaged, foreign, superseded and temporary ones."""
        for p in self.folder.glob(f"{TMP_PREFIX}*"):
            p.unlink(missing_ok=True)
        found: set[tuple[int, int]] = set()
        for p in sorted(self.folder.glob(f"L*{_SUFFIX}")):
            try:
                header, payload = read_header(p)
                key = (int(header["level"]), int(header["index"]))
                if header.get("pass") != self.digest or p.name != self.path(*key).name:
                    raise DamagedCheckpoint(f"{p}: belongs to another checkpoint")
                if key[0] >= len(self.sizes) or key[1] >= self.sizes[key[0]]:
                    raise DamagedCheckpoint(f"{p}: outside this merge tree")
                self._check_content(p, header, payload)
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

    def _check_content(self, path: Path, header: dict[str, Any], payload: bytes) -> None:
        """Raise :class:`DamagedCheckpoint` unless the node's states decode within its bytes and fit the pass."""
        _check_claimed_sizes(path, header, payload)
        try:
            state = decode_state(header, payload)
        except DamagedCheckpoint:
            raise
        except (ValueError, TypeError, OSError, MemoryError, zipfile.BadZipFile) as exc:
            raise DamagedCheckpoint(f"{path}: states do not decode ({type(exc).__name__}: {exc})") from None
        if self.reference is not None:
            unlike = _unlike(self.reference, state)
            if unlike is not None:
                raise DamagedCheckpoint(f"{path}: {unlike}")

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


def _check_claimed_sizes(path: Path, header: dict[str, Any], payload: bytes) -> None:
    """Refuse (DamagedCheckpoint) a node whose records claim more bytes than its ``.npz`` stores for them."""
    # np.load allocates the shape an array's header claims before reading its bytes: a forged
    # claim of 10**11 values would ask for 745 GiB. encode_state stores (never compresses) the
    # arrays, so each must fit in its member's stored bytes, and those in the payload.
    try:
        with zipfile.ZipFile(io.BytesIO(payload)) as z:
            members = {i.filename.removesuffix(".npy"): i for i in z.infolist()}
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise DamagedCheckpoint(f"{path}: payload is not an .npz ({exc})") from None
    for i, record in enumerate(header["states"]):
        for name, dtype, shape, _ in record["fields"]:
            member = members.get(f"s{i}.{name}")
            claimed = math.prod(int(n) for n in shape) * np.dtype(dtype).itemsize
            stored = 0 if member is None or member.compress_type != zipfile.ZIP_STORED else member.compress_size
            if claimed > min(stored, len(payload)):
                raise DamagedCheckpoint(
                    f"{path}: state {i} field {name!r} claims {claimed:,} bytes, the file holds {stored:,}"
                )


def _reference_state(bundle: BundleLike, x: da.Array, label: da.Array | None,
                     weights: da.Array | None) -> tuple[Any, ...] | None:
    """The pass's state of zero rows on the host (None when a statistic cannot make one)."""
    from daskbatch.engine.reduce import to_host  # lazy: dask

    try:
        xp = namespace(x._meta)
        rows = None if label is None else xp.zeros((0,), dtype=label.dtype)
        masks = {} if weights is None else {"weights": xp.zeros((0,), dtype=xp.float64)}
        return tuple(to_host(bundle.chunk(xp.zeros((0, int(x.shape[1])), dtype=x.dtype), rows, **masks)))
    except Exception as exc:  # noqa: BLE001 - a user's statistic may refuse zero rows: then records only
        log.debug("no zero-row state of pass %s (%s): nodes are checked by their records only", bundle.name, exc)
        return None


def _unlike(reference: tuple[Any, ...], state: tuple[Any, ...]) -> str | None:
    """What makes a node's ``state`` unlike the pass's zero-row ``reference`` (None: alike)."""
    if len(state) != len(reference):
        return f"{len(state)} states, the pass has {len(reference)}"
    for i, (ref, got) in enumerate(zip(reference, state, strict=True)):
        if type(got) is not type(ref):
            return f"state {i} is a {type(got).__name__}, the pass's a {type(ref).__name__}"
        if type(ref) not in built_in_states() or not dataclasses.is_dataclass(ref):
            continue  # a user's state may change shape with its rows: its class is all we know
        for field in dataclasses.fields(ref):
            want, have = np.asarray(getattr(ref, field.name)), np.asarray(getattr(got, field.name))
            # An axis of 0 in the zero-row state grows with the rows (a digest per block).
            if want.dtype != have.dtype or want.ndim != have.ndim or any(
                w not in (0, h) for w, h in zip(want.shape, have.shape, strict=True)
            ):
                return (f"state {i} ({type(ref).__name__}) field {field.name!r} is {have.dtype} {have.shape}, "
                        f"the pass's {want.dtype} {want.shape}")
    return None


def run_checkpointed(
    bundle: BundleLike,
    data: FeatureMatrix,
    label: da.Array | None,
    *,
    split_every: int | None,
    progress: Progress,
    directory: str | os.PathLike[str],
    force: bool,
    tree: Callable[..., Delayed],
    finalize: bool = True,
) -> tuple[Any, ...]:
    """One pass of ``bundle`` over ``data.x`` through the checkpoint ``directory``, advancing the caller's ``progress``.

    ``tree``: the pass's graph builder (:func:`daskbatch.engine.passes.tree_reduce`), for each node's blocks.
    """
    from daskbatch.engine.reduce import to_host  # lazy: dask

    s = resolve_split_every(split_every)
    x, weights = data.x, data.weights
    n_blocks = int(x.numblocks[0])
    with _locked_store(directory, data, bundle, s, n_blocks, force) as store:
        store.reference = _reference_state(bundle, x, label, weights)
        label = None if label is None else label.rechunk((x.chunks[0],), method=rechunk_method())
        weights = None if weights is None else weights.rechunk((x.chunks[0],), method=rechunk_method())
        checked = data.label_checked and label is not None

        def make(unit: int) -> Delayed:
            """The merged state of the blocks of level-0 node ``unit``."""
            a, b = node_blocks(0, unit, n_blocks, s)
            return tree(bundle, x.blocks[a:b], None if label is None else label.blocks[a:b],
                               weights=None if weights is None else weights.blocks[a:b], split_every=s,
                               finalize=False, labels_checked=checked)

        state = _fill(store, make, progress, directory)
    return to_host(bundle.finalize(state)) if finalize else to_host(state)


@contextlib.contextmanager
def _locked_store(
    directory: str | os.PathLike[str], data: FeatureMatrix, bundle: BundleLike, s: int, n_blocks: int, force: bool,
) -> Iterator[_PassStore]:
    """The node files of ``bundle``'s pass over ``data`` in ``directory``, while holding the checkpoint's lock."""
    items, spec = input_items(data, s, FORMAT_VERSION), spec_items(bundle)
    pass_folder(bundle.name)  # a plain name, before anything is written
    with checkpoint_lock(directory):
        remove_stale_temps(Path(directory))  # before any write: a killed run's partial file may hold the space it needs
        folder = open_pass(Path(directory), items, bundle.name, spec, force,
                           {"chunk_rows": int(data.x.chunks[0][0]), "split_every": s})
        yield _PassStore(folder, bundle, _digest({**items, **spec}), n_blocks, s)


def _fill(store: _PassStore, make: Callable[[int], Delayed], progress: Progress,
          directory: str | os.PathLike[str]) -> tuple[Any, ...]:
    """Compute the units ``store`` lacks with ``make`` (the caller holds the lock); the root state."""
    s, n_blocks = store.s, store.n_blocks
    store.scan()
    reused = store.covered_blocks()
    todo = [j for j in range(store.sizes[0]) if not store.covered(j)]
    computed = sum(node_blocks(0, j, n_blocks, s)[1] - node_blocks(0, j, n_blocks, s)[0] for j in todo)
    log.info("checkpoint %s: %d of %d blocks on disk, computing %d units (%d blocks)",
             store.folder, reused, n_blocks, len(todo), computed)
    run = {"pid": os.getpid(), "started": time.time(), "blocks": n_blocks, "reused_blocks": reused,
           "computed_blocks": computed, "computed_units": len(todo), "damaged": store.damaged}
    append_run(store.folder / "runs.jsonl", run)
    progress.skip(reused)

    def on_unit(unit: int, state: tuple[Any, ...]) -> None:
        store.put(0, unit, state)
        start, stop = node_blocks(0, unit, n_blocks, s)
        progress.advance(stop - start)

    try:
        _compute_units(todo, make, on_unit)
    except (Interrupted, Cancelled) as exc:  # the block runner's, its text kept: no chain to show
        raise type(exc)(
            f"{exc}: {store.covered_blocks()} of {n_blocks} blocks of pass '{store.bundle.name}' are "
            f"checkpointed in {directory}; run the same command again to resume"
        ) from None
    return store.root()


@dataclasses.dataclass(frozen=True)
class _ProfilePass:
    """The non-numeric columns' profile as a pass of its own: a node's state is one CategoricalState."""

    profile: CategoricalProfile
    settings: dict[str, str]
    name: str = "categorical"

    @property
    def stats(self) -> tuple[CategoricalProfile]:
        """The one statistic of the pass (its parameters go into the checkpoint's fingerprint)."""
        return (self.profile,)

    def merge(self, a: tuple[Any, ...], b: tuple[Any, ...]) -> tuple[Any, ...]:
        """Two nodes' states merged, as the uncheckpointed profile merges them."""
        return (encode_profile(self.profile.merge(decode_profile(a[0]), decode_profile(b[0]))),)


def run_checkpointed_profile(
    profile: CategoricalProfile, data: FeatureMatrix, label: da.Array | None, *, split_every: int,
    progress: Progress, directory: str | os.PathLike[str], force: bool,
) -> dict[str, Any]:
    """The merged state of the profile of ``data.frames`` (by ``label``'s classes if given), through ``directory``."""
    # A pass named "categorical" on the frames' own blocks, merged in profile_blocks' tree: a resumed run gives
    # the state an uninterrupted one gives (the top values' counters too, pruned or not).
    import dask  # lazy: dask
    from dask.base import tokenize  # lazy: dask

    s, frames = resolve_split_every(split_every), list(data.frames)
    rows = [int(r) for r, _ in frames]
    starts = np.cumsum([0, *rows]).tolist()
    # Merged and named as a bundle is (never chunked here: make() below builds each unit's states).
    spec_of = cast("BundleLike", _ProfilePass(profile, {
        "categorical.blocks": f"{len(rows)} blocks, sha256 {_digest({'rows': str(rows)})[:16]}",
        "categorical.frames": tokenize(*(f.key for _, f in frames)),  # the columns and where they are read
        "categorical.by_class": str(label is not None),
    }))
    with _locked_store(directory, data, spec_of, s, len(frames), force) as store:
        store.reference = (encode_profile({}),)

        def make(unit: int) -> Delayed:
            """The encoded state of one unit of blocks, merged left to right."""
            a, b = node_blocks(0, unit, len(frames), s)
            part = None if label is None else label[starts[a] : starts[b]]
            states = block_states(frames[a:b], profile, part)
            return dask.delayed(_unit_state, pure=True)(profile, *states)

        return decode_profile(_fill(store, make, progress, directory)[0])


def _unit_state(profile: CategoricalProfile, *states: Any) -> tuple[CategoricalState]:
    """One unit's block states merged left to right, encoded as a node holds it."""
    return (encode_profile(merge_all(profile, states)),)


def _compute_units(
    units: list[int], make: Callable[[int], Delayed], on_unit: Callable[[int, tuple[Any, ...]], None]
) -> None:
    """Compute the units, handing each state to ``on_unit`` (in this thread) as soon as it exists."""
    if not units:
        return
    client = active_client()
    if client is not None:
        from daskbatch.engine.blockrun import compute_each  # lazy: dask

        compute_each(client, [make(j) for j in units], units, on_unit)
        return

    import dask  # lazy: dask
    from dask.callbacks import Callback  # lazy: dask

    # CPU_COUNT: the cores this process may use (affinity, cgroup quota)
    from dask.system import CPU_COUNT  # lazy: dask

    keys: dict[Any, int] = {}

    def posttask(key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
        if key in keys:  # runs in the scheduling (calling) thread
            on_unit(keys[key], result)

    # Waves of a few units: the local schedulers keep every output in memory until the end.
    wave = max(2, int(dask.config.get("num_workers", None) or CPU_COUNT or 2))
    for i in range(0, len(units), wave):
        graphs = [make(j) for j in units[i : i + wave]]
        keys = {g.key: j for g, j in zip(graphs, units[i : i + wave], strict=True)}
        with Callback(posttask=posttask):
            dask.compute(*graphs)
