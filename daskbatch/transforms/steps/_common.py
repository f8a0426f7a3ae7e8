"""What every step shares: the :class:`Step` protocol and the helpers that bind steps to columns by name."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from typing import Any, ClassVar, Protocol

import numpy as np

from daskbatch._typing import Array
from daskbatch.stats.backend import device, namespace

__all__ = ["PerFeature", "Step", "ValueWise", "block_namespace", "digest", "names_differ", "origin_of", "short"]


class Step(Protocol):
    """What :func:`daskbatch.transform` needs of a step."""

    def bind(self, names: tuple[str, ...]) -> Step:
        """Fit the step to input columns ``names``, or raise a one-line error naming the mismatch.

        Parameters
        ----------
        names : tuple of str
            The input's feature names.

        Returns
        -------
        Step
            The step for those columns.
        """
        ...

    def apply(self, block: Array) -> Array:
        """Transform one block of rows.

        Parameters
        ----------
        block : array
            NumPy or CuPy, (rows, input features).

        Returns
        -------
        array
            (rows, output features), on the block's device.
        """
        ...

    def output_features(self, names: tuple[str, ...]) -> tuple[str, ...]:
        """Name the output columns.

        Parameters
        ----------
        names : tuple of str
            The input's feature names.

        Returns
        -------
        tuple of str
            The output's feature names.
        """
        ...

    def describe(self) -> dict[str, Any]:
        """Describe the step for the output's provenance.

        Returns
        -------
        dict
            JSON-able: ``"step"`` and its settings.
        """
        ...


def digest(*arrays: np.ndarray) -> str:
    """Hash the arrays' float64 bytes: a step's parameters in a few characters of provenance.

    Parameters
    ----------
    *arrays : ndarray
        The step's parameters.

    Returns
    -------
    str
        The hex sha256.
    """
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
    return h.hexdigest()


def origin_of(summary: Any) -> dict[str, Any]:
    """Say where a summary came from (its provenance ``source``, ``created``, ``ddof``, ``rows``).

    Parameters
    ----------
    summary : Summary
        The summary a step was made from.

    Returns
    -------
    dict
        For the output's provenance.
    """
    prov = dict(getattr(summary, "provenance", {}) or {})
    return {k: prov.get(k) for k in ("source", "created", "ddof", "rows")}


def names_differ(expected: tuple[str, ...], got: tuple[str, ...]) -> str:
    """Name the first difference between two lists of feature names, for a one-line error.

    Parameters
    ----------
    expected, got : tuple of str
        The names a step was made for, and the input's.

    Returns
    -------
    str
        The difference, in words.
    """
    if len(expected) != len(got):
        return f"{len(expected)} features ({short(expected)}), the input has {len(got)} ({short(got)})"
    i = next(i for i, (a, b) in enumerate(zip(expected, got, strict=True)) if a != b)
    return f"feature {i} named {expected[i]!r}, the input's is {got[i]!r}"


def short(names: Sequence[str], n: int = 4) -> str:
    """Join the first ``n`` names, with ``...`` when there are more.

    Parameters
    ----------
    names : sequence of str
        The names.
    n : int, default 4
        How many to show.

    Returns
    -------
    str
        The joined names.
    """
    return ", ".join(names[:n]) + (", ..." if len(names) > n else "")


class ValueWise:
    """Base of the steps that work value by value: they take any columns and keep their names."""

    def bind(self, names: tuple[str, ...]) -> Any:
        """Accept any columns.

        Parameters
        ----------
        names : tuple of str
            The input's feature names.

        Returns
        -------
        Step
            This step.
        """
        return self

    def output_features(self, names: tuple[str, ...]) -> tuple[str, ...]:
        """Name the output columns: those of the input.

        Parameters
        ----------
        names : tuple of str
            The input's feature names.

        Returns
        -------
        tuple of str
            The same names.
        """
        return tuple(names)


class PerFeature:
    """Base of the steps holding one value per feature of a summary: they bind to input columns by name.

    A subclass is a dataclass with ``feature_names`` and the per-feature array
    fields named in ``per_feature``; ``step_name`` names it in messages.
    """

    per_feature: ClassVar[tuple[str, ...]] = ()
    step_name: ClassVar[str] = "step"
    feature_names: tuple[str, ...]

    def bind(self, names: tuple[str, ...]) -> Any:
        """Pick the per-feature values of the input's columns, by name.

        Parameters
        ----------
        names : tuple of str
            The input's feature names, all among ``feature_names``.

        Returns
        -------
        Step
            The step for those columns (this one when they are its own).
        """
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
        """Name the output columns: those of the input, once the step binds to them.

        Parameters
        ----------
        names : tuple of str
            The input's feature names.

        Returns
        -------
        tuple of str
            The same names.
        """
        return tuple(self.bind(names).feature_names)


def block_namespace(block: Array) -> tuple[Any, Any]:
    """Give a block's array namespace and device (NumPy's or CuPy's).

    Parameters
    ----------
    block : array
        A block of rows.

    Returns
    -------
    tuple
        ``(namespace, device)``.
    """
    return namespace(block), device(block)
