"""What every step shares: the :class:`Step` protocol and the helpers that bind steps to columns by name."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from typing import Any, ClassVar, Protocol

import numpy as np

from daskbatch._typing import Array
from daskbatch.stats.backend import device, namespace

__all__ = ["PerFeature", "Step", "apply_all", "bind_all", "ValueWise", "block_namespace", "digest", "names_differ", "origin_of", "short"]


class Step(Protocol):
    """What :func:`daskbatch.transform` needs of a step."""

    def bind(self, names: tuple[str, ...]) -> Step:
        """Fit the step to input columns ``names``, or raise a one-line error naming the mismatch."""
        ...

    def apply(self, block: Array) -> Array:
        """Transform one block of rows."""
        ...

    def output_features(self, names: tuple[str, ...]) -> tuple[str, ...]:
        """Name the output columns."""
        ...

    def describe(self) -> dict[str, Any]:
        """Describe the step for the output's provenance."""
        ...


def digest(*arrays: np.ndarray) -> str:
    """Hash the arrays' float64 bytes: a step's parameters in a few characters of provenance."""
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
    return h.hexdigest()


def origin_of(summary: Any) -> dict[str, Any]:
    """Say where a summary came from (its provenance ``source``, ``created``, ``ddof``, ``rows``)."""
    prov = dict(getattr(summary, "provenance", {}) or {})
    return {k: prov.get(k) for k in ("source", "created", "ddof", "rows")}


def names_differ(expected: tuple[str, ...], got: tuple[str, ...]) -> str:
    """Name the first difference between two lists of feature names, for a one-line error."""
    if len(expected) != len(got):
        return f"{len(expected)} features ({short(expected)}), the input has {len(got)} ({short(got)})"
    i = next(i for i, (a, b) in enumerate(zip(expected, got, strict=True)) if a != b)
    return f"feature {i} named {expected[i]!r}, the input's is {got[i]!r}"


def short(names: Sequence[str], n: int = 4) -> str:
    """Join the first ``n`` names, with ``...`` when there are more."""
    return ", ".join(names[:n]) + (", ..." if len(names) > n else "")


class ValueWise:
    """Base of the steps that work value by value: they take any columns and keep their names."""

    def bind(self, names: tuple[str, ...]) -> Any:
        """Accept any columns."""
        return self

    def output_features(self, names: tuple[str, ...]) -> tuple[str, ...]:
        """Name the output columns: those of the input."""
        return tuple(names)


class PerFeature:
    """Base of the steps holding one value per feature of a summary: they bind to input columns by name."""

    per_feature: ClassVar[tuple[str, ...]] = ()
    step_name: ClassVar[str] = "step"
    feature_names: tuple[str, ...]

    def bind(self, names: tuple[str, ...]) -> Any:
        """Pick the per-feature values of the input's columns, by name."""
        names = tuple(names)
        if names == self.feature_names:
            return self
        where = {n: i for i, n in enumerate(self.feature_names)}
        missing = [n for n in names if n not in where]
        if missing:
            raise ValueError(
                f"{self.step_name}: the summary has no statistics for {len(missing)} input feature(s): {short(missing)}"
            )
        idx = np.array([where[n] for n in names], dtype=np.int64)
        picked = {f: getattr(self, f)[idx] for f in self.per_feature}
        return dataclasses.replace(self, feature_names=names, **picked)  # type: ignore[type-var]

    def output_features(self, names: tuple[str, ...]) -> tuple[str, ...]:
        """Name the output columns: those of the input, once the step binds to them."""
        return tuple(self.bind(names).feature_names)


def block_namespace(block: Array) -> tuple[Any, Any]:
    """Give a block's array namespace and device (NumPy's or CuPy's)."""
    return namespace(block), device(block)


def bind_all(steps: Sequence[Step], names: Sequence[str]) -> tuple[list[Step], tuple[str, ...]]:
    """Fit each step to the columns the previous ones produce."""
    bound: list[Step] = []
    current = tuple(str(n) for n in names)
    for k, step in enumerate(steps):
        if not all(hasattr(step, a) for a in ("bind", "apply", "output_features", "describe")):
            raise TypeError(f"step {k} ({step!r}) is not a transform step (see daskbatch.transforms.steps)")
        b = step.bind(current)
        current = b.output_features(current)
        bound.append(b)
    return bound, current


def apply_all(steps: Sequence[Step], block: Array) -> Array:
    """Pass ``block`` through every step, in order."""
    for step in steps:
        block = step.apply(block)
    return block
