"""The contract every statistic follows, and the bundle that fuses several into one pass."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
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

    #: Short name used in task keys and the CLI (``"moments"``, ``"cov"``, ...).
    name: str

    def chunk(self, x: Array, y: Array | None = None, /) -> S: ...

    def merge(self, a: S, b: S, /) -> S: ...

    def finalize(self, state: S, /) -> R: ...


def merge_all(stat: Statistic[S, Any], states: Sequence[S]) -> S:
    """Merge ``states`` left to right: a fixed order, so results are bitwise reproducible."""
    return functools.reduce(stat.merge, states)


@dataclass(frozen=True)
class Bundle:
    """Several statistics computed in one pass: each chunk is read and cast once.

    Parameters
    ----------
    stats : tuple of Statistic
        The statistics; their states travel together as a tuple.
    """

    stats: tuple[Any, ...]

    @property
    def name(self) -> str:
        return "-".join(s.name for s in self.stats)

    def chunk(self, x: Array, y: Array | None = None) -> tuple[Any, ...]:
        return tuple(s.chunk(x, y) for s in self.stats)

    def merge(self, a: tuple[Any, ...], b: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(s.merge(sa, sb) for s, sa, sb in zip(self.stats, a, b, strict=True))

    def finalize(self, state: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(s.finalize(st) for s, st in zip(self.stats, state, strict=True))


def as_float64(x: Array) -> Array:
    """``x`` as a float64 copy: states accumulate in float64 whatever the input dtype."""
    from daskbatch.backend import namespace

    xp = namespace(x)
    if x.dtype == xp.bool:
        x = xp.astype(x, xp.uint8)
    return xp.astype(x, xp.float64, copy=True)


def safe_divisor(xp: Any, n: Array) -> Array:
    """``n`` with zeros replaced by one, so ``s / safe_divisor(n)`` is 0 where ``n`` is 0."""
    return xp.where(n > 0, n, xp.ones_like(n))

