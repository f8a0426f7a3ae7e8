"""The contract every statistic follows, and the bundle that fuses several into one pass."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, ParamSpec, Protocol, TypeVar

import numpy as np

from daskbatch._typing import Array
from daskbatch.stats.backend import namespace
from daskbatch.stats.state_registry import _register

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
    ``footprint`` (:class:`~daskbatch.stats.footprint.Footprint`)
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
    """Several statistics run as one: states and results are tuples, one item per statistic.

    A :class:`Bundle`, or a bundle whose chunk step stages host blocks to the
    GPU (:class:`~daskbatch.engine.reduce.Staged`).
    """

    @property
    def stats(self) -> tuple[Statistic[Any, Any], ...]:
        """The fused statistics, in the order of the items of the states and results."""
        ...


class State:
    """Base of every statistic's state: a frozen dataclass holding arrays (and scalars).

    ``nbytes`` is what dask's memory accounting sees (registered for every
    subclass by :mod:`daskbatch.engine.sizeof`): without it a state of many
    megabytes would count as the ~56 bytes of ``sys.getsizeof``. Every
    subclass is registered (:mod:`daskbatch.stats.state_registry`) when it is
    defined, so checkpoints and saved summaries can rebuild it.
    """

    __slots__ = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Register every state class when it is defined, so checkpoints and summaries can rebuild it."""
        super().__init_subclass__(**kwargs)
        _register(cls)

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


def reads_label(stat: Any) -> bool:
    """Tell whether ``stat``'s ``chunk`` takes the rows' labels (``needs_label``, or the histogram's ``by_label``).

    Parameters
    ----------
    stat : Statistic
        Any statistic.

    Returns
    -------
    bool
        True when ``chunk`` should receive the label.
    """
    return bool(getattr(stat, "needs_label", False) or getattr(stat, "by_label", False))


def reads_weights(stat: Any) -> bool:
    """Tell whether ``stat``'s ``chunk`` takes sample weights (its ``takes_weights`` attribute).

    Parameters
    ----------
    stat : Statistic
        Any statistic.

    Returns
    -------
    bool
        True when ``chunk`` accepts ``weights=``.
    """
    return bool(getattr(stat, "takes_weights", False))


def shown_names(stats: Sequence[Any]) -> list[str]:
    """Name the statistics a user asked for, leaving out those that only ride along (``rides_along``).

    The content digest of a pass (:mod:`daskbatch.stats.content_digest`) is
    computed with the statistics but is none of them: pass names, checkpoint
    folders and progress titles stay those of the statistics asked for.

    Parameters
    ----------
    stats : sequence of Statistic
        The statistics of a pass.

    Returns
    -------
    list of str
        Their names, in order.
    """
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
            return tuple(s.chunk(x, label if reads_label(s) else None) for s in self.stats)
        for s in self.stats:
            if not reads_weights(s):
                raise ValueError(f"statistic {s.name!r} does not take sample weights (weights=)")
        # Rows of weight 0 are dropped once here, not once per statistic (each would copy the block).
        as_read = x
        x, label, weights = positive_rows(namespace(x), x, label, weights)
        weighted: tuple[Any, ...] = self.stats  # the protocol's chunk has no weights=; takes_weights says these do
        # A statistic of the rows themselves (the content digest) sees every row, whatever its weight.
        return tuple(s.chunk(as_read if getattr(s, "reads_every_row", False) else x,
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


def positive_rows(xp: Any, x: Array, label: Array | None, weights: Array) -> tuple[Array, Array | None, Array]:
    """Keep the rows of positive weight (a zero weight makes a row as if absent); weights as float64.

    Parameters
    ----------
    xp : namespace
        The array namespace of ``x``.
    x : array
        The block, (rows, features).
    label : array or None
        The label of each row.
    weights : array
        The weight of each row, (rows,), already checked non-negative and finite.

    Returns
    -------
    x : array
        The rows of positive weight.
    label : array or None
        Their labels.
    weights : array
        Their weights, float64.
    """
    if weights.shape[0] != x.shape[0]:
        raise ValueError(f"the chunk has {x.shape[0]:,} rows but {weights.shape[0]:,} weights")
    w = xp.astype(weights, xp.float64)
    keep = w > 0
    if bool(xp.all(keep)):
        return x, label, w
    rows = xp.nonzero(keep)[0]  # take, not a mask with a second index: the array API allows only a sole mask
    return xp.take(x, rows, axis=0), None if label is None else xp.take(label, rows), xp.take(w, rows)


def as_float64(x: Array) -> Array:
    """Copy ``x`` to float64: states accumulate in float64 whatever the input dtype.

    Parameters
    ----------
    x : array
        Any real array.

    Returns
    -------
    array
        ``x`` in float64.
    """
    xp = namespace(x)
    if x.dtype == xp.bool:
        x = xp.astype(x, xp.uint8)
    return xp.astype(x, xp.float64, copy=True)


_P = ParamSpec("_P")
_T = TypeVar("_T")


def handles_overflow(method: Callable[_P, _T]) -> Callable[_P, _T]:
    """Run ``method`` with NumPy's overflow and invalid-value warnings off: it handles those values itself.

    The moments' sums overflow float64 where values lie ~1e154 or more from
    their mean (a sentinel such as 1e300): :func:`central_moment` keeps such a
    moment +inf and the rest follows from it, and ``describe`` says so once
    (:class:`daskbatch.errors.OverflowWarning`) instead of NumPy once per line.

    Parameters
    ----------
    method : callable
        A statistic's ``chunk``, ``merge`` or ``finalize``.

    Returns
    -------
    callable
        ``method``, quiet.
    """

    @functools.wraps(method)
    def _quiet(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        """``method`` under ``np.errstate(over="ignore", invalid="ignore")``."""
        with np.errstate(over="ignore", invalid="ignore"):
            return method(*args, **kwargs)

    return _quiet


def central_moment(xp: Any, m: Array, power_sum: Array) -> Array:
    """Give a corrected central moment (``m2``, ``m4``) as states keep it: at least 0, +inf where its sum overflowed.

    ``m`` is ``power_sum`` less the corrected two-pass correction: rounding may
    leave it a little below 0 (the moment is then 0). Where the sum of the
    deviations' powers overflowed float64 (a value of 1e300 among ordinary ones),
    ``m`` is ``inf - inf``, NaN, and the moment is +inf, as NumPy's ``var`` says,
    not the 0 of a constant feature.

    Parameters
    ----------
    xp : namespace
        The array namespace of ``m``.
    m : array
        The corrected moment.
    power_sum : array
        The sum of the deviations' squares (for ``m2``) or fourth powers (for ``m4``) it was corrected from.

    Returns
    -------
    array
        The moment.
    """
    return xp.where(power_sum == xp.inf, xp.full_like(m, xp.inf), xp.where(m > 0, m, xp.zeros_like(m)))


def safe_divisor(xp: Any, n: Array) -> Array:
    """Replace zeros of ``n`` by one, so ``s / safe_divisor(n)`` is 0 where ``n`` is 0.

    Parameters
    ----------
    xp : namespace
        The array namespace of ``n``.
    n : array
        Counts.

    Returns
    -------
    array
        ``n`` with its zeros set to one.
    """
    return xp.where(n > 0, n, xp.ones_like(n))



def merge_shifted_means(
    xp: Any, na: Array, nb: Array, shift_a: Array, mean_a: Array, shift_b: Array, mean_b: Array
) -> tuple[Array, Array, Array]:
    """Merge two means held as ``shift + mean``: returns ``(shift, mean, delta)`` of the union.

    The union keeps a's reference value (b's when a is empty) and ``delta`` is
    b's mean minus a's. The difference of reference values is exact for nearby
    data (Sterbenz), so ``delta`` keeps almost double-length precision. Against
    an empty side ``delta`` is zero: the foreign reference would make it the
    whole mean, whose powers overflow for huge values (and ``inf * 0`` is NaN).

    Parameters
    ----------
    xp : namespace
        The array namespace.
    na, nb : array
        Per-feature counts of the two sides.
    shift_a, mean_a : array
        Side a's reference value and mean about it.
    shift_b, mean_b : array
        Side b's reference value and mean about it.

    Returns
    -------
    shift : array
        The union's reference value.
    mean : array
        The union's mean about ``shift``.
    delta : array
        The mean of b minus that of a.
    """
    shift = xp.where(na > 0, shift_a, shift_b)
    ma = (shift_a - shift) + mean_a
    mb = (shift_b - shift) + mean_b
    both = (na > 0) & (nb > 0)
    delta = xp.where(both, mb - ma, xp.zeros_like(ma))
    weight_b = nb / safe_divisor(xp, na + nb)
    mean = xp.where(na > 0, xp.where(nb > 0, ma + delta * weight_b, ma), mb)
    return shift, mean, delta
