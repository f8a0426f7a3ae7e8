"""What every step shares: the :class:`Step` protocol and the helpers that bind steps to columns by name."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from daskbatch._typing import Array

__all__ = ["Step", "block_namespace", "digest", "names_differ", "origin_of", "pick", "short"]


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


def pick(step: Any, names: tuple[str, ...], fields: tuple[str, ...], what: str) -> Any:
    """Pick a step's per-feature arrays for the input columns ``names``, by name.

    Parameters
    ----------
    step : dataclass
        A step with ``feature_names`` and per-feature array fields.
    names : tuple of str
        The input's feature names, all among the step's.
    fields : tuple of str
        The step's per-feature array fields.
    what : str
        The step's name, for the error.

    Returns
    -------
    dataclass
        The step for those columns (``step`` itself when they are its own).
    """
    names = tuple(names)
    if names == step.feature_names:
        return step
    where = {n: i for i, n in enumerate(step.feature_names)}
    missing = [n for n in names if n not in where]
    if missing:
        raise ValueError(f"{what}: the summary has no statistics for {len(missing)} input feature(s): {short(missing)}")
    idx = np.array([where[n] for n in names], dtype=np.int64)
    return dataclasses.replace(step, feature_names=names, **{f: getattr(step, f)[idx] for f in fields})


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
    from daskbatch.stats.backend import device, namespace

    return namespace(block), device(block)
