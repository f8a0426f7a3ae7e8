"""The contract every statistic follows, and the bundle that fuses several into one pass."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, Protocol, TypeVar

from daskbatch._typing import Array

S = TypeVar("S")
R = TypeVar("R", covariant=True)


class Statistic(Protocol[S, R]):
    """A mergeable statistic over axis 0 (the sample axis).

    Laws (checked by the test suite for every statistic):
    ``finalize(merge(chunk(a), chunk(b))) ≈ finalize(chunk(concat(a, b)))``,
    ``merge`` is associative up to rounding, and ``chunk(x[:0])`` is its identity.
    """

    @property
    def name(self) -> str:
        """Short name used in task keys and the CLI (``"moments"``, ``"cov"``, ...)."""
        ...

    def chunk(self, x: Array, label: Array | None = None, /) -> S: ...

    def merge(self, a: S, b: S, /) -> S: ...

    def finalize(self, state: S, /) -> R: ...


class BundleLike(Statistic[tuple[Any, ...], tuple[Any, ...]], Protocol):
    """Several statistics run as one: states and results are tuples, one item per statistic.

    A :class:`Bundle`, or a bundle whose chunk step stages host blocks to the
    GPU (:class:`~daskbatch.engine.staged.Staged`).
    """

    @property
    def stats(self) -> tuple[Statistic[Any, Any], ...]:
        """The fused statistics, in the order of the items of the states and results."""
        ...


class State:
    """Base of every statistic's state: a frozen dataclass holding arrays (and scalars).

    ``nbytes`` is what dask's memory accounting sees (registered for every
    subclass by :mod:`daskbatch.engine.sizeof`): without it a state of many
    megabytes would count as the ~56 bytes of ``sys.getsizeof``.
    """

    __slots__ = ()

    @property
    def nbytes(self) -> int:
        """Bytes held by the state's arrays (8 for each scalar field)."""
        total = 0
        for field in fields(self):  # type: ignore[arg-type]  # subclasses are dataclasses
            total += int(getattr(getattr(self, field.name), "nbytes", 8))
        return total


def merge_all(stat: Statistic[S, Any], states: Sequence[S]) -> S:
    """Merge ``states`` left to right: a fixed order, so results are bitwise reproducible."""
    return functools.reduce(stat.merge, states)


@dataclass(frozen=True)
class Bundle:
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
        return "-".join(s.name for s in self.stats)

    def chunk(self, x: Array, label: Array | None = None, /) -> tuple[Any, ...]:
        return tuple(s.chunk(x, label) for s in self.stats)

    def merge(self, a: tuple[Any, ...], b: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(s.merge(sa, sb) for s, sa, sb in zip(self.stats, a, b, strict=True))

    def finalize(self, state: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(s.finalize(st) for s, st in zip(self.stats, state, strict=True))


def as_float64(x: Array) -> Array:
    """``x`` as a float64 copy: states accumulate in float64 whatever the input dtype."""
    from daskbatch.stats.backend import namespace

    xp = namespace(x)
    if x.dtype == xp.bool:
        x = xp.astype(x, xp.uint8)
    return xp.astype(x, xp.float64, copy=True)


def safe_divisor(xp: Any, n: Array) -> Array:
    """``n`` with zeros replaced by one, so ``s / safe_divisor(n)`` is 0 where ``n`` is 0."""
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
    """
    shift = xp.where(na > 0, shift_a, shift_b)
    ma = (shift_a - shift) + mean_a
    mb = (shift_b - shift) + mean_b
    both = (na > 0) & (nb > 0)
    delta = xp.where(both, mb - ma, xp.zeros_like(ma))
    weight_b = nb / safe_divisor(xp, na + nb)
    mean = xp.where(na > 0, xp.where(nb > 0, ma + delta * weight_b, ma), mb)
    return shift, mean, delta
