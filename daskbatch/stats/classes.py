"""Class values of an integer label: the mergeable set of distinct values, and the map to table columns.

Mutual information needs a (feature-bin × class) table per feature, and that
table needs one column per *class value*, not per integer up to the largest
label: labels ``{0, 1, 7}`` are three classes, and one stray label ``2**40``
must not ask for 2**40 columns. So the class values are known before any table
is allocated (found by :class:`ClassValues`, declared by the user or recorded
in the store), and every label is mapped to its column with
:func:`label_codes`: the index of its value among the sorted class values.

Here any integer is a class value, negative ones included (as in
``sklearn.metrics.mutual_info_score``); :mod:`daskbatch.engine.planner` decides
which labels ``describe`` accepts. Float labels are refused by dtype before
anything is read (:func:`daskbatch.engine.inputs.check_label`), so NaN and fractions
cannot occur.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

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
class ClassValues:  # numpydoc ignore=PR02
    """The distinct values of an integer label, merged by set union (a mergeable statistic).

    The labels are ``label`` when given (fused with other statistics in a
    :class:`~daskbatch.stats.Bundle`), else the single column of ``x`` (a scan
    of the label alone, passed as an (N, 1) array). The state holds at most
    ``max_classes`` values: a chunk or a merge that finds more raises, naming
    the count found and the limit, so a continuous or ID-like label cannot grow
    the state without bound.

    Parameters
    ----------
    max_classes : int, default 1000
        The most distinct values accepted.
    """

    max_classes: int = DEFAULT_MAX_CLASSES
    name = "classes"

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
