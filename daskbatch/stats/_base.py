"""The contract every statistic follows, and the bundle that fuses several into one pass."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, fields, is_dataclass
from typing import Any, Protocol, TypeVar

import numpy as np

from daskbatch._common import Array
from daskbatch.stats.numerics import namespace, positive_rows

S = TypeVar("S")
R = TypeVar("R", covariant=True)


class Statistic(Protocol[S, R]):
    """A mergeable statistic over axis 0 (the sample axis).

    Laws (checked by the test suite for every statistic, and for yours by
    :func:`daskbatch.testing.check_statistic`):
    ``finalize(merge(chunk(a), chunk(b))) ≈ finalize(chunk(concat(a, b)))``,
    ``merge`` is associative up to rounding, and ``chunk(x[:0])`` is its identity.

    Besides ``name``, ``chunk``, ``merge`` and ``finalize``, a statistic may set:

    ``needs_label`` (bool, default False)
        ``chunk`` receives the class label of each row (an integer array);
        without it ``label`` is None. The built-in histogram spells this
        ``by_label``, which is honoured too.
    ``takes_weights`` (bool, default False)
        ``chunk`` also accepts ``weights=`` (one non-negative float64 weight
        per row, rows of weight 0 already dropped), for ``describe(weights=...)``;
        without it a weighted run refuses the statistic.
    ``footprint`` (:class:`~daskbatch.stats.declaration.Footprint`)
        The bytes of its state and of its temporaries per block, from which
        the planner sizes tasks; without one a cautious default is used.

    A state that is a frozen dataclass of arrays (subclass
    :class:`State`) is sized for dask's memory accounting and can be saved
    with a summary; the result may be an array (per feature: shape (D, ...)),
    a scalar, or a dataclass or dict of those.
    """

    @property
    def name(self) -> str:
        """Short name used in task keys and the CLI (``"moments"``, ``"cov"``, ...)."""
        ...

    def chunk(self, x: Array, label: Array | None = None, /) -> S:
        """Reduce one block of rows to a state.

        Parameters
        ----------
        x : array
            The block, (rows, features).
        label : array or None
            The class label of each row, for statistics that read labels.

        Returns
        -------
        S
            The block's state.
        """
        ...

    def merge(self, a: S, b: S, /) -> S:
        """Combine the states of two disjoint sets of rows.

        Parameters
        ----------
        a, b : S
            The states to combine.

        Returns
        -------
        S
            The state of the union of their rows.
        """
        ...

    def finalize(self, state: S, /) -> R:
        """Turn a state into the statistic's result.

        Parameters
        ----------
        state : S
            The state of all the rows.

        Returns
        -------
        R
            The result.
        """
        ...


class BundleLike(Statistic[tuple[Any, ...], tuple[Any, ...]], Protocol):
    """Several statistics run as one (a :class:`Bundle`, or the engine's ``Staged``): tuples, one item per statistic."""

    @property
    def stats(self) -> tuple[Statistic[Any, Any], ...]:
        """The fused statistics, in the order of the items of the states and results."""
        ...


class State:
    """Base of every statistic's state: a frozen dataclass holding arrays (and scalars).

    ``nbytes`` is what dask's memory accounting sees (registered for every
    subclass by :mod:`daskbatch._dask_setup`): without it a state of many
    megabytes would count as the ~56 bytes of ``sys.getsizeof``. Every
    subclass is registered (:mod:`daskbatch.stats.declaration`) when it is
    defined, so checkpoints and saved summaries can rebuild it.
    """

    __slots__ = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Register every state class when it is defined, so checkpoints and summaries can rebuild it."""
        super().__init_subclass__(**kwargs)
        _REGISTRY[state_key(cls)] = cls

    @property
    def nbytes(self) -> int:
        """Count the bytes held by the state's arrays (8 for each scalar field).

        Returns
        -------
        int
            The total size in bytes.
        """
        total = 0
        for field in fields(self):  # type: ignore[arg-type]  # subclasses are dataclasses
            total += int(getattr(getattr(self, field.name), "nbytes", 8))
        return total


def reads_label(stat: Any) -> bool:  # numpydoc ignore=PR01,RT01
    """Tell whether ``stat``'s ``chunk`` takes the rows' labels (``needs_label``, or the histogram's ``by_label``)."""
    return bool(getattr(stat, "needs_label", False) or getattr(stat, "by_label", False))


def reads_weights(stat: Any) -> bool:  # numpydoc ignore=PR01,RT01
    """Tell whether ``stat``'s ``chunk`` takes sample weights (its ``takes_weights`` attribute)."""
    return bool(getattr(stat, "takes_weights", False))


def shown_names(stats: Sequence[Any]) -> list[str]:  # numpydoc ignore=PR01,RT01
    """Name the statistics a user asked for, leaving out those that only ride along (``rides_along``)."""
    return [s.name for s in stats if not getattr(s, "rides_along", False)]


def merge_all(stat: Statistic[S, Any], states: Sequence[S]) -> S:
    """Merge ``states`` left to right: a fixed order, so results are bitwise reproducible.

    Parameters
    ----------
    stat : Statistic
        The statistic whose ``merge`` combines the states.
    states : sequence of S
        The states to merge, at least one.

    Returns
    -------
    S
        The merged state: ``stat.merge_many(states)`` where the statistic has
        it (the same state as merging left to right, with fewer temporaries).
    """
    many = getattr(stat, "merge_many", None)
    return many(states) if many is not None else functools.reduce(stat.merge, states)


def _float32_copy(stats: Sequence[Any], x: Array) -> Array | None:
    """The float32 copy of a host block of 1- or 2-byte values that the CPU kernels read, made once; None: not needed."""
    from daskbatch.stats.kernels.path import (  # lazy: the kernels' package
        FLOAT32_COPY_ITEMSIZE,
        float32_block,
        kernel_path,
    )

    if not isinstance(x, np.ndarray) or x.dtype.itemsize > FLOAT32_COPY_ITEMSIZE or not any(map(_takes_copy, stats)):
        return None
    if kernel_path(x).kind != "numba-cpu":  # the array-API code casts to float64 itself
        return None
    copy = float32_block(x)
    return None if copy is x else copy


def _takes_copy(stat: Any) -> bool:
    """Whether ``stat``'s state is the same for a block and its float32 copy, which its kernels read anyway."""
    return bool(getattr(stat, "takes_float32_copy", False))


def _block_for(stat: Any, x: Array, copy: Array | None) -> Array:
    """The block ``stat`` reads: the bundle's float32 copy where it takes one, else ``x`` as given."""
    return copy if copy is not None and _takes_copy(stat) else x


@dataclass(frozen=True)
class Bundle:  # numpydoc ignore=PR02
    """Several statistics computed in one pass: each chunk is read and cast once.

    A :class:`BundleLike`: a statistic whose states and results are tuples,
    one item per statistic of ``stats``.

    Parameters
    ----------
    stats : tuple of Statistic
        The statistics; their states travel together as a tuple.
    """

    stats: tuple[Statistic[Any, Any], ...]

    @property
    def name(self) -> str:
        """Name the bundle after its statistics, joined by ``-``.

        Returns
        -------
        str
            The joined names.
        """
        return "-".join(shown_names(self.stats))

    @property
    def takes_weights(self) -> bool:
        """Tell whether every statistic of the bundle takes sample weights.

        Returns
        -------
        bool
            True when ``chunk`` accepts ``weights=``.
        """
        return all(reads_weights(s) for s in self.stats)

    def chunk(self, x: Array, label: Array | None = None, /, *, weights: Array | None = None) -> tuple[Any, ...]:
        """Reduce one block with every statistic.

        Parameters
        ----------
        x : array
            The block, (rows, features).
        label : array or None
            The class label of each row.
        weights : array or None
            The non-negative weight of each row (float64), for statistics that take weights.

        Returns
        -------
        tuple
            One state per statistic.
        """
        # Only the statistics that read labels get them: the others' chunk sees label=None, as documented.
        if weights is None:
            copy = _float32_copy(self.stats, x)
            return tuple(s.chunk(_block_for(s, x, copy), label if reads_label(s) else None) for s in self.stats)
        for s in self.stats:
            if not reads_weights(s):
                raise ValueError(f"statistic {s.name!r} does not take sample weights (weights=)")
        # Rows of weight 0 are dropped once here, not once per statistic (each would copy the block).
        as_read = x
        x, label, weights = positive_rows(namespace(x), x, label, weights)
        copy = _float32_copy(self.stats, x)
        weighted: tuple[Any, ...] = self.stats  # the protocol's chunk has no weights=; takes_weights says these do
        # A statistic of the rows themselves (the content digest) sees every row, whatever its weight.
        return tuple(s.chunk(as_read if getattr(s, "reads_every_row", False) else _block_for(s, x, copy),
                             label if reads_label(s) else None, weights=weights) for s in weighted)

    def merge(self, a: tuple[Any, ...], b: tuple[Any, ...]) -> tuple[Any, ...]:
        """Merge two bundle states item by item.

        Parameters
        ----------
        a, b : tuple
            Bundle states, one item per statistic.

        Returns
        -------
        tuple
            The merged states.
        """
        return tuple(s.merge(sa, sb) for s, sa, sb in zip(self.stats, a, b, strict=True))

    def merge_many(self, states: Sequence[tuple[Any, ...]]) -> tuple[Any, ...]:
        """Merge bundle states left to right, item by item (each statistic's ``merge_many`` where it has one).

        Parameters
        ----------
        states : sequence of tuple
            Bundle states, at least one.

        Returns
        -------
        tuple
            The merged states.
        """
        return tuple(merge_all(s, [state[i] for state in states]) for i, s in enumerate(self.stats))

    def finalize(self, state: tuple[Any, ...]) -> tuple[Any, ...]:
        """Finalize each statistic's item of a bundle state.

        Parameters
        ----------
        state : tuple
            A bundle state, one item per statistic.

        Returns
        -------
        tuple
            One result per statistic.
        """
        return tuple(s.finalize(st) for s, st in zip(self.stats, state, strict=True))


# The closed registry of state classes, the only classes a checkpoint or a saved summary may rebuild:
# a file names a class by its key, "module:qualname", and reading looks it up here, never importing
# anything. Every State subclass is registered when its class statement runs (a user's too); a class
# defined again under the same key (a notebook cell run twice) replaces the earlier one.
T = TypeVar("T", bound=type)

_REGISTRY: dict[str, type] = {}


def state_key(cls: type) -> str:
    """Name a state class as files record it: ``"module:qualname"``."""  # numpydoc ignore=PR01,RT01
    return f"{cls.__module__}:{cls.__qualname__}"


def register_state(cls: T) -> T:
    """Register a state class, so that checkpoints and saved summaries can rebuild it.

    Subclasses of :class:`daskbatch.State` need not call it: they are
    registered when defined. Usable as a class decorator (above ``@dataclass``).

    Parameters
    ----------
    cls : type
        A dataclass whose fields are arrays or scalars.

    Returns
    -------
    type
        ``cls`` itself.

    Raises
    ------
    TypeError
        ``cls`` is not a dataclass.
    """
    if not (isinstance(cls, type) and is_dataclass(cls)):
        raise TypeError(f"register_state takes a dataclass, not {cls!r}")
    _REGISTRY[state_key(cls)] = cls
    return cls


def registered_state(key: str) -> type | None:
    """Look up the state class registered under ``key``; nothing is imported."""  # numpydoc ignore=PR01,RT01
    return _REGISTRY.get(key)


def registered_states() -> tuple[type, ...]:
    """Every registered state class, in the order registered."""  # numpydoc ignore=RT01
    return tuple(_REGISTRY.values())
