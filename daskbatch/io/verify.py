"""Decode every chunk of every array in a Zarr store and report the missing, corrupt and truncated ones."""

from __future__ import annotations

import math
import threading
from collections import Counter, deque
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import zarr

from daskbatch._common import plural
from daskbatch.io.chunk_decode import zstd_frame_header
from daskbatch.io.chunk_grid import (
    absent_name,
    check_chunk_count,
    chunk_count,
    chunk_key,
    chunk_positions,
    storage_chunks,
    stored_keys,
    writes_every_chunk,
)
from daskbatch.io.object_store import verifies_chunks
from daskbatch.io.zarr_store import ZarrStore, group_arrays
from daskbatch.runtime.progress import Progress, ProgressCallback

__all__ = ["ArrayCheck", "ChunkProblem", "VerifyReport", "verify_store"]

Kind = Literal["missing", "corrupt", "truncated", "absent"]
#: Problems listed by :meth:`VerifyReport.summary` before "... and N more".
LISTED = 20
#: An absent chunk's kind and words, by whether its writer (daskbatch) stored every chunk.
_ABSENT: dict[bool, tuple[Kind, str]] = {
    True: ("missing", "absent from the store; daskbatch wrote every chunk of this array, so it was lost"),
    False: ("absent", "absent (fill value): its writer leaves out chunks that hold only the fill value"),
}


@dataclass(frozen=True)
class ChunkProblem:
    """One chunk that is absent or does not decode."""

    array: str
    key: str
    position: tuple[int, ...]
    kind: Kind
    detail: str

    def line(self) -> str:
        """Format the problem for a report."""
        return f"{self.kind:<9} {self.key} (grid position {self.position}): {self.detail}"


@dataclass(frozen=True)
class ArrayCheck:
    """What was checked in one array."""

    name: str
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    n_chunks: int
    decoded: int
    checksum: bool
    absent: int = 0
    writes_every_chunk: bool = False
    inner_chunks: tuple[int, ...] | None = None


@dataclass
class VerifyReport:
    """Result of :func:`verify_store`."""

    path: str
    arrays: list[ArrayCheck] = field(default_factory=list)
    problems: list[ChunkProblem] = field(default_factory=list)
    absent: list[ChunkProblem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Tell whether every chunk of every array is present and decodes."""
        return not self.problems

    def counts(self) -> dict[str, int]:
        """Count the problems by kind (``missing``, ``corrupt``, ``truncated``), zeros included."""
        found = Counter(p.kind for p in self.problems)
        return {kind: found.get(kind, 0) for kind in ("missing", "corrupt", "truncated")}

    def to_dict(self) -> dict[str, Any]:
        """Convert the report to a JSON-able form."""
        return {
            "path": self.path,
            "ok": self.ok,
            "counts": self.counts(),
            "arrays": [asdict(a) for a in self.arrays],
            "problems": [asdict(p) for p in self.problems],
            "absent": [asdict(p) for p in self.absent],
        }

    def summary(self, listed: int = LISTED) -> str:
        """Write the report for a terminal: one line per array, the first ``listed`` problems, then the verdict."""
        lines = [f"verify {self.path}"]
        for a in self.arrays:
            lines.append(
                f"  {a.name}: {a.n_chunks:,} "
                + (f"shards of {a.chunks} (inner chunks {a.inner_chunks})" if a.inner_chunks else f"chunks of {a.chunks}")
                + f", {a.decoded:,} decoded"
                + (f", {a.absent:,} absent (fill value)" if a.absent and not a.writes_every_chunk else "")
                + ("" if a.checksum else "  (no checksum: flipped bytes that still decode go unseen)")
            )
        for found, more in ((self.absent, " absent (fill value)"), (self.problems, "")):
            lines += [f"  {p.line()}" for p in found[:listed]]
            if len(found) > listed:
                lines.append(f"  ... and {len(found) - listed:,} more{more}")
        total = sum(a.n_chunks for a in self.arrays)
        if self.ok and self.absent:
            lines.append(
                f"OK: {plural(total, 'chunk')} of {plural(len(self.arrays), 'array')} decoded or absent (fill value): "
                f"{len(self.absent):,} absent, as their writer leaves out chunks that hold only the fill value"
            )
        elif self.ok:
            lines.append(f"OK: {plural(total, 'chunk')} of {plural(len(self.arrays), 'array')}, all present and decoded")
        else:
            counts = ", ".join(f"{n:,} {kind}" for kind, n in self.counts().items() if n)
            lines.append(f"FAILED: {counts} of {plural(total, 'chunk')}")
        return "\n".join(lines)


def _zstd_needs(buf: bytes) -> int | None:
    """Bytes a zstd frame at the start of ``buf`` says it spans; None if ``buf`` is no zstd frame."""
    # Walks the frame header and block headers (RFC 8878, section 3.1.1). When ``buf`` ends early the result
    # is larger than ``len(buf)``: the frame was cut.
    frame = zstd_frame_header(buf)
    if frame is None:
        return None
    pos, descriptor = frame[0], buf[4]
    while True:
        if pos + 3 > len(buf):
            return pos + 3
        header = int.from_bytes(buf[pos : pos + 3], "little")
        block_type = (header >> 1) & 3
        if block_type == 3:  # reserved: not a frame any encoder writes
            return None
        pos += 3 + (1 if block_type == 1 else header >> 3)  # RLE blocks store one byte
        if header & 1:  # last block
            return pos + (4 if (descriptor >> 2) & 1 else 0)
        if pos > len(buf):
            return pos


def _expected_size(arr: zarr.Array, raw: bytes) -> int | None:
    """Smallest size the stored object of one chunk must have, when its encoding tells."""
    from zarr.codecs import BytesCodec, Crc32cCodec, ZstdCodec  # lazy: zarr

    codecs = getattr(arr.metadata, "codecs", None)
    if codecs is None:
        return None
    trailer = 4 if any(isinstance(c, Crc32cCodec) for c in codecs) else 0
    rest = [c for c in codecs if not isinstance(c, Crc32cCodec)]
    if len(rest) == 1 and isinstance(rest[0], BytesCodec):
        itemsize = arr.dtype.itemsize  # type: ignore[union-attr]
        return math.prod(storage_chunks(arr)) * itemsize + trailer
    if len(rest) == 2 and isinstance(rest[1], ZstdCodec):
        needs = _zstd_needs(raw)
        return None if needs is None else needs + trailer
    return None


def _classify(arr: zarr.Array, raw: bytes | None, exc: BaseException) -> tuple[Kind, str]:
    reason = f"{type(exc).__name__}: {exc}"
    if raw is None:  # vanished between the listing and the read
        return "missing", "absent from the store"
    if not raw:
        return "truncated", f"the stored object is empty ({reason})"
    need = _expected_size(arr, raw)
    if need is not None and len(raw) < need:
        return "truncated", f"{len(raw):,} bytes stored, its encoding needs at least {need:,} ({reason})"
    return "corrupt", reason


def _raw(arr: zarr.Array, key: str) -> bytes | None:
    from zarr.core.buffer import default_buffer_prototype  # lazy: zarr
    from zarr.core.sync import sync  # lazy: zarr

    buf = sync(arr.store_path.store.get(key, prototype=default_buffer_prototype()))
    return None if buf is None else buf.to_bytes()


def _check_chunk(arr: zarr.Array, coords: tuple[int, ...]) -> ChunkProblem | None:
    """Decode the chunk at ``coords``; None when it decodes."""
    chunks = storage_chunks(arr)
    region = tuple(
        slice(i * c, min((i + 1) * c, n)) for i, c, n in zip(coords, chunks, arr.shape, strict=True)
    )
    try:
        arr[region]  # decoded and dropped: only whether it decodes matters here
        return None
    except Exception as exc:  # noqa: BLE001 - any codec or store failure is the finding
        key = chunk_key(arr, coords)
        kind, detail = _classify(arr, _raw(arr, key), exc)
        return ChunkProblem(arr.path, key, coords, kind, detail)


def _bounded_map(pool: ThreadPoolExecutor, fn: Any, items: Iterator[Any], window: int) -> Iterator[Any]:
    """``pool.map`` with at most ``window`` tasks in flight, so memory stays at a few chunks."""
    pending: deque[Future[Any]] = deque()
    for item in items:
        pending.append(pool.submit(fn, item))
        if len(pending) >= window:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


def verify_store(
    path_or_url: Any,
    *,
    storage_options: Mapping[str, Any] | None = None,
    threads: int | None = None,
    progress: bool | ProgressCallback = False,
    cancel: threading.Event | None = None,
) -> VerifyReport:
    """Decode every chunk of every array in a Zarr store and report the ones that fail."""
    store = ZarrStore(path_or_url, storage_options)
    root, where, group_attrs = store.root, store.where, store.attrs
    arrays = [root] if isinstance(root, zarr.Array) else sorted((a for _, a in group_arrays(root)), key=lambda a: a.path)
    for arr in arrays:
        check_chunk_count(arr)
    # CPU_COUNT: the cores this process may use (affinity, cgroup quota)
    from dask.system import CPU_COUNT  # lazy: dask

    n_threads = threads or min(8, CPU_COUNT)
    if n_threads < 1:
        raise ValueError(f"threads must be at least 1, got {threads}")
    report = VerifyReport(path=str(where))
    with ThreadPoolExecutor(n_threads, thread_name_prefix="daskbatch-verify") as pool:
        for arr in arrays:
            present = stored_keys(arr)
            own = writes_every_chunk(arr, group_attrs)
            # Absent: the chunks zarr fills (inner chunks when sharded: each shard's index is read).
            to_decode, absent = chunk_positions(arr, present)
            kind, detail = _ABSENT[own]
            (report.problems if own else report.absent).extend(
                ChunkProblem(arr.path, absent_name(arr, pos), pos, kind, detail) for pos in absent)
            found = []
            with Progress(f"verify {arr.path or '/'}", len(to_decode), unit="chunks", cancel=cancel,
                          progress=progress) as bar:
                for p in _bounded_map(pool, lambda c, a=arr: _check_chunk(a, c), iter(to_decode), 2 * n_threads):
                    bar.advance()
                    if p is not None:
                        found.append(p)
            report.problems.extend(found)
            report.arrays.append(
                ArrayCheck(
                    name=arr.path,
                    shape=tuple(int(s) for s in arr.shape),
                    chunks=storage_chunks(arr),
                    n_chunks=chunk_count(arr),
                    decoded=len(to_decode) - len(found),
                    checksum=verifies_chunks(arr),
                    absent=len(absent),
                    writes_every_chunk=own,
                    inner_chunks=tuple(int(c) for c in arr.chunks) if arr.shards else None,
                )
            )
    report.problems.sort(key=lambda p: (p.array, p.position))
    report.absent.sort(key=lambda p: (p.array, p.position))
    return report
