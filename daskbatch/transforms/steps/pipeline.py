"""Running a list of steps: bind each to the columns the previous ones produce, then apply them in order."""

from __future__ import annotations

from collections.abc import Sequence

from daskbatch._typing import Array
from daskbatch.transforms.steps._common import Step

__all__ = ["apply_all", "bind_all"]


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
