"""The statistics that serve a pass rather than the summary: a label's class values, a content digest.

:class:`ClassValues` finds the distinct values of an integer label, so a (bin x class) table has one
column per class value. :class:`ContentDigest` CRC-32s the first pass's blocks as the content token
of a store without checksums: a guard against counting rows twice, not against forgery.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import google_crc32c
import numpy as np
from array_api_compat import is_cupy_array

from daskbatch._common import Array, Namespace, strict_int
from daskbatch.stats._base import State
from daskbatch.stats.declaration import Declaration
from daskbatch.stats.numerics import device, namespace

#: Most distinct class values accepted by default (``daskbatch.max-classes`` in daskbatch.yaml).
DEFAULT_MAX_CLASSES = 1000

#: The largest label value int64 holds (uint64 labels above it cannot be class values).
_INT64_MAX = 2**63 - 1


def as_int64_labels(xp: Namespace, label: Array) -> Array:
    """Cast ``label`` (integer or bool) to int64, refusing uint64 values that int64 cannot hold."""
    if label.dtype == xp.uint64 and label.shape[0] and int(xp.max(label)) > _INT64_MAX:
        raise ValueError(f"label value {int(xp.max(label))} does not fit in int64")
    return xp.astype(label, xp.int64)


#: Labels in ``[0, _COUNT_TABLE_LIMIT)`` are found with a count table (the usual class numbers), others by hashing.
_COUNT_TABLE_LIMIT = 1 << 16


def _distinct(xp: Namespace, codes: Array) -> Array:
    """The sorted distinct values of the int64 ``codes``."""
    # A count table is ~20x cheaper than np.unique's hash for small class numbers: the label-only
    # scan that precedes describe's first pass runs in series with everything else.
    if hasattr(xp, "bincount") and int(xp.min(codes)) >= 0 and int(xp.max(codes)) < _COUNT_TABLE_LIMIT:
        return xp.astype(xp.nonzero(xp.bincount(codes))[0], xp.int64)
    return xp.sort(xp.unique_values(codes))


def format_classes(values: Sequence[int], shown: int = 10) -> str:
    """Format class values for a message: ``[0, 1, 7]``, or the first ``shown`` and a count."""
    head = ", ".join(str(int(v)) for v in values[:shown])
    return f"[{head}]" if len(values) <= shown else f"[{head}, ... ({len(values):,} values)]"


def validate_classes(classes: Any, max_classes: int = DEFAULT_MAX_CLASSES) -> tuple[int, ...]:
    """Declared class values as a sorted tuple of distinct ints; a one-line ValueError otherwise."""
    values = list(classes) if not isinstance(classes, (str, bytes)) else [classes]
    out = []
    for v in values:
        # bool is an int subclass, and numpy integers are not ints: accept both as whole numbers.
        if isinstance(v, float) or not hasattr(v, "__index__"):
            raise ValueError(f"classes must be integers; got {v!r}")
        out.append(int(v.__index__()))
    if not out:
        raise ValueError("classes is empty; give at least one class value")
    if len(set(out)) != len(out):
        dup = next(v for v in out if out.count(v) > 1)
        raise ValueError(f"classes lists the value {dup} more than once")
    if len(out) > max_classes:
        raise ValueError(
            f"classes has {len(out):,} values, more than daskbatch.max-classes ({max_classes:,})"
        )
    if not all(-_INT64_MAX - 1 <= v <= _INT64_MAX for v in out):
        raise ValueError("class values must fit in int64")
    return tuple(sorted(out))


class UnknownClassError(ValueError):
    """A label value that is not one of the declared classes."""

    def __init__(
        self, value: int, row: int, count: int, classes: tuple[int, ...], rows: tuple[int, int] | None = None
    ) -> None:
        self.value, self.row, self.count, self.classes, self.rows = value, row, count, classes, rows
        where = f"row {row:,} of its block" if rows is None else f"row {rows[0] + row:,}"
        block = "" if rows is None else f" in rows {rows[0]:,}..{rows[1] - 1:,}"
        super().__init__(
            f"label value {value} at {where} is not one of the {len(classes):,} classes "
            f"{format_classes(classes)} ({count:,} such label{'s' if count != 1 else ''}{block})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt from its fields (the default would pass the message as `value`): it crosses process boundaries.
        return (type(self), (self.value, self.row, self.count, self.classes, self.rows))


#: Set by :func:`labels_checked` in the chunk tasks of a run whose labels were checked where they were read.
_CHECKED: contextvars.ContextVar[bool] = contextvars.ContextVar("daskbatch_labels_checked", default=False)


@contextlib.contextmanager
def labels_checked() -> Iterator[None]:
    """Let :func:`label_codes` trust that every CuPy label is a class value (they were checked where they were read)."""
    token = _CHECKED.set(True)
    try:
        yield
    finally:
        _CHECKED.reset(token)


def label_codes(xp: Namespace, label: Array, classes: tuple[int, ...]) -> Array:
    """Map every label to its column in a table over the sorted ``classes``."""
    k = len(classes)
    # On the host the check costs a scan of the labels, no synchronisation: it stays.
    trusted = _CHECKED.get() and is_cupy_array(label)
    labels = as_int64_labels(xp, label) if not trusted else xp.astype(label, xp.int64)
    first = classes[0]
    if classes[-1] - first == k - 1:
        # Contiguous values (the usual 0..K-1): an offset, no search.
        codes = labels - first if first else labels
        if trusted:
            return codes
        bad = (codes < 0) | (codes >= k)
    else:
        values = xp.asarray(classes, dtype=xp.int64, device=device(label))
        codes = xp.clip(xp.searchsorted(values, labels), 0, k - 1)
        if trusted:
            return codes
        bad = xp.take(values, codes) != labels
    if xp.any(bad):
        at = int(xp.argmax(xp.astype(bad, xp.int8)))
        raise UnknownClassError(int(labels[at]), at, int(xp.sum(xp.astype(bad, xp.int64))), classes)
    return codes


@dataclass(frozen=True, eq=False)
class ClassValuesState(State):
    """Sorted distinct label values (int64, shape (K,))."""

    values: Array


@dataclass(frozen=True)
class ClassValues:
    """The distinct values of an integer label (``label``, else the one column of ``x``), at most ``max_classes`` of them."""

    max_classes: int = DEFAULT_MAX_CLASSES
    name = "classes"
    #: In a pass's bundle it takes the label (alone, it takes the label as ``x``).
    needs_label = True
    #: Not a statistic the user asked for: pass names and titles leave it out.
    rides_along = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_classes", strict_int(self.max_classes, "max_classes", minimum=1))

    def empty(self, xp: Namespace, dev: object = None) -> ClassValuesState:
        """Build the identity of :meth:`merge`: no class values."""
        return ClassValuesState(values=xp.zeros((0,), dtype=xp.int64, device=dev))

    def chunk(self, x: Array, label: Array | None = None, /) -> ClassValuesState:
        """Find the distinct label values of one block."""
        labels = label if label is not None else x
        xp = namespace(labels)
        labels = xp.reshape(labels, (-1,))
        if labels.shape[0] == 0:
            return self.empty(xp, device(labels))
        return self._checked(ClassValuesState(values=_distinct(xp, as_int64_labels(xp, labels))))

    def merge(self, a: ClassValuesState, b: ClassValuesState, /) -> ClassValuesState:
        """Unite the values of two states."""
        xp = namespace(a.values, b.values)
        if b.values.shape[0] == 0:
            return a
        if a.values.shape[0] == 0:
            return b
        values = xp.sort(xp.unique_values(xp.concat([a.values, b.values])))
        return self._checked(ClassValuesState(values=values))

    def finalize(self, s: ClassValuesState, /) -> Array:
        """Return the sorted class values."""
        return s.values

    def _checked(self, s: ClassValuesState) -> ClassValuesState:
        n = int(s.values.shape[0])
        if n > self.max_classes:
            raise ValueError(
                f"the label has at least {n:,} distinct values, more than daskbatch.max-classes "
                f"({self.max_classes:,}); mutual information needs class labels (pass classes=[...] "
                "or raise daskbatch.max-classes)"
            )
        return s


#: The pass that finds the label's class values (its state only).
DECLARATION = Declaration(
    "class_values", None, states=(ClassValuesState,), selectable=False,
)



#: Bytes of one piece's digest (a BLAKE2b of its shape, dtype and CRC-32C).
DIGEST_BYTES = 32


@dataclass(frozen=True)
class DigestState(State):
    """The digests of the blocks of some consecutive rows, in row order."""

    digests: np.ndarray


@dataclass(frozen=True)
class ContentDigest:
    """Hash the blocks of a pass as they are read, ``piece_rows`` rows a digest (0: one a block): the input's content token."""

    piece_rows: int = 0

    #: Not a statistic the user asked for: pass names and titles leave it out (:func:`~daskbatch.stats._base.shown_names`).
    rides_along = True
    #: Weighted passes take it too; its weights are ignored.
    takes_weights = True
    #: A weighted pass hands it every row as read, not only those of positive weight
    #: (:class:`~daskbatch.stats.Bundle`): the token is the store's, whatever the weights.
    reads_every_row = True

    @property
    def name(self) -> str:
        """Name the statistic in task keys and checkpoints."""
        return "content_digest"

    def chunk(self, x: Any, label: Any = None, /, *, weights: Any = None) -> DigestState:
        """Hash one block (a GPU block is hashed from a host copy)."""
        block = x.get() if hasattr(x, "get") and not isinstance(x, np.ndarray) else np.asarray(x)
        rows = int(block.shape[0])
        step = self.piece_rows if self.piece_rows > 0 else max(rows, 1)
        digests = np.zeros((-(-rows // step), DIGEST_BYTES), dtype=np.uint8)
        for i, start in enumerate(range(0, rows, step)):
            piece = np.ascontiguousarray(block[start : start + step])
            digest = hashlib.blake2b(f"{piece.shape} {piece.dtype.str}".encode(), digest_size=DIGEST_BYTES)
            # CRC-32C, as Zarr's crc32c codec: google-crc32c's hardware loop (SSE 4.2) hashed a 64 MiB block in
            # less than half of zlib.crc32's time, off the GIL.
            digest.update(google_crc32c.value(piece).to_bytes(4, "little"))
            digests[i] = np.frombuffer(digest.digest(), dtype=np.uint8)
        return DigestState(digests)

    def merge(self, a: DigestState, b: DigestState, /) -> DigestState:
        """Put ``b``'s digests after ``a``'s."""
        return DigestState(np.concatenate([np.asarray(a.digests), np.asarray(b.digests)]))

    def finalize(self, state: DigestState, /) -> str:
        """Hash the blocks' digests into one token."""
        digests = np.ascontiguousarray(np.asarray(state.digests, dtype=np.uint8))
        whole = hashlib.blake2b(digests.tobytes(), digest_size=DIGEST_BYTES).hexdigest()
        return f"{digests.shape[0]} pieces, crc32c, blake2b {whole[:20]}"


#: The digest of the rows a checkpoint counted (its state only).
DIGEST_DECLARATION = Declaration("digest", None, states=(DigestState,), selectable=False)
