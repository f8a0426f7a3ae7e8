"""Where the class values of a label come from before mutual information is counted.

:func:`resolve_classes` decides them once per run, before the plan is made and
before any (feature, bin, class) table is allocated, in this order:

1. declared: ``describe(..., classes=[...])`` / ``daskbatch describe --classes``;
2. recorded by the store the label came from (a synthetic store's
   ``attrs["synth"]["classes"] = K`` means ``0..K-1``);
3. found by a scan of the label array alone (:class:`~daskbatch.stats.classes.ClassValues`
   over its own chunks): one integer per row, so a small fraction of reading
   ``x``, and it gives the planner the exact number of classes whether the
   histogram range is given (one pass over ``x``) or found (two passes).

Every count of classes is checked against ``daskbatch.max-classes``. Declared
and recorded values are checked while counting (:func:`checked_label`): a
label outside them stops the run naming the value and its rows.

Found classes must be non-negative: a negative label often marks an unlabeled
row (``-1`` in scikit-learn's semi-supervised estimators), and counting it as
a class would change the mutual information without a word. Declared classes
may be any integers (``classes=[-1, 1]``). Float labels never get here: they
are refused by dtype (:func:`daskbatch.engine.inputs.check_label`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import dask.array as da
import numpy as np

from daskbatch import config
from daskbatch.engine.reduce import tree_reduce
from daskbatch.planning.search import recorded_n_classes
from daskbatch.stats.backend import namespace
from daskbatch.stats.classes import (
    ClassValues,
    UnknownClassError,
    as_int64_labels,
    label_codes,
    validate_classes,
)

if TYPE_CHECKING:
    from dask.delayed import Delayed

    from daskbatch.engine.inputs import FeatureMatrix

__all__ = ["checked_label", "max_classes", "recorded_classes", "resolve_classes"]


def max_classes() -> int:
    """Read the most class values a label may have (``daskbatch.max-classes``).

    Returns
    -------
    int
        The limit.
    """
    value = int(config.get("max-classes"))
    if value < 1:
        raise ValueError(f"daskbatch.max-classes must be >= 1, got {value}")
    return value


def recorded_classes(data: FeatureMatrix) -> tuple[int, ...] | None:
    """Read the class values the store records for ``data.label``.

    Only a label read from the store itself counts: a label passed alongside a
    Dataset may have other classes than the store's.

    Parameters
    ----------
    data : FeatureMatrix
        The inputs.

    Returns
    -------
    tuple of int or None
        The recorded classes, or None.
    """
    source = data.source
    if source is None or data.label is None or getattr(source, "label", None) is not data.label:
        return None
    n = recorded_n_classes(source)
    return tuple(range(n)) if n else None


def resolve_classes(
    data: FeatureMatrix,
    classes: Any,
    *,
    split_every: int,
    compute: Callable[[Delayed], Any],
    negative: bool = False,
) -> tuple[tuple[int, ...], str]:
    """The sorted class values of ``data.label`` and where they came from.

    Parameters
    ----------
    data : FeatureMatrix
        Holds the label (a dask array).
    classes : sequence of int or None
        Declared class values.
    split_every : int
        Fan-in of the scan's merge tree.
    compute : callable
        Computes a delayed object (the caller's scheduler and progress bar).
    negative : bool, default False
        Accept negative values found by the scan (group keys: no value marks
        an unlabeled row).

    Returns
    -------
    (tuple of int, str)
        The values, and ``"given"``, ``"store"`` or ``"label scan"``.
    """
    limit = max_classes()
    if classes is not None:
        return validate_classes(classes, limit), "given"
    recorded = recorded_classes(data)
    if recorded is not None:
        if len(recorded) > limit:
            raise ValueError(
                f"the store records {len(recorded):,} classes, more than daskbatch.max-classes ({limit:,})"
            )
        return recorded, "store"
    if data.label is None:
        raise ValueError("the class values of the label were asked for, but the data has no label")
    # negative values stop the scan of a label
    label = data.label if negative else checked_label(data.label, data.label.chunks[0], None)
    found = compute(tree_reduce(ClassValues(max_classes=limit), label[:, None], split_every=split_every))
    return tuple(int(v) for v in np.asarray(found)), "label scan"


def checked_label(label: da.Array, rows: tuple[int, ...], classes: tuple[int, ...] | None) -> da.Array:
    """Rechunk ``label`` to blocks of ``rows``, each block checked against ``classes`` when it is read.

    A value outside them raises :class:`~daskbatch.stats.classes.UnknownClassError`
    naming the value, its row and the block's rows; with ``classes=None`` a
    negative value raises a ValueError naming the same.

    Parameters
    ----------
    label : dask.array.Array
        The 1-D label.
    rows : tuple of int
        Rows of each block (those of ``x``).
    classes : tuple of int or None
        The declared classes.

    Returns
    -------
    dask.array.Array
        The checked label.
    """
    label = label.rechunk((rows,))
    # The function, not the method: typeshed's functools.wraps does not bind self.
    return da.map_blocks(_check_block, label, classes=classes, dtype=label.dtype, meta=label._meta)


def _check_block(block: Any, *, classes: tuple[int, ...] | None, block_info: dict[Any, Any] | None = None) -> Any:
    xp = namespace(block)
    start, stop = block_info[0]["array-location"][0] if block_info else (0, block.shape[0])
    if classes is None:
        negative = as_int64_labels(xp, block) < 0
        if xp.any(negative):
            at = int(xp.argmax(xp.astype(negative, xp.int8)))
            count = int(xp.sum(xp.astype(negative, xp.int64)))
            raise ValueError(
                f"label value {int(block[at])} at row {start + at:,} is negative ({count:,} such "
                f"label{'s' if count != 1 else ''} in rows {start:,}..{stop - 1:,}); found classes are "
                "class numbers >= 0 (negative labels often mark unlabeled rows): drop those rows, "
                "or declare the class values with classes=[...]"
            )
        return block
    try:
        label_codes(xp, block, classes)
    except UnknownClassError as exc:
        raise UnknownClassError(exc.value, exc.row, exc.count, exc.classes, (start, stop)) from None
    return block
