"""Running every law of :class:`~daskbatch.testing.StatisticLaws` on one statistic, from one call in a test."""

from __future__ import annotations

from typing import Any

import numpy as np

from daskbatch.stats._base import reads_label
from daskbatch.stats.registry import is_statistic
from daskbatch.testing.assertions import result_fields
from daskbatch.testing.laws import LAWS, StatisticLaws

__all__ = ["check_statistic"]


def check_statistic(
    statistic: Any,
    reference: Any = None,
    *,
    xp: Any = None,
    uses_label: bool | None = None,
    exact: bool = False,
    nonfinite: bool = True,
    rtol: float = 1e-10,
    atol: float = 1e-9,
    ill_conditioned_offset: float | None = 1e8,
) -> None:
    """Run every law of :class:`StatisticLaws` on your own statistic; an AssertionError names the law broken.

    Parameters
    ----------
    statistic : Statistic or callable
        The statistic, or a function of the number of features that makes it.
    reference : callable, optional
        ``reference(x, label=None)``: the expected result for the whole of a
        float64 NumPy ``x`` (an array, or a dict of arrays by result field).
        Default: the statistic's own ``finalize(chunk(x))``, so the laws then
        check that chunking and merging change nothing beyond rounding.
    xp : namespace, optional
        The array namespace of the blocks (default NumPy).
    uses_label : bool, optional
        Give ``chunk`` integer labels; default: the statistic's ``needs_label``.
    exact : bool, default False
        Results must agree bitwise across chunkings and merge orders (counts).
    nonfinite : bool, default True
        Mix NaN and ±inf into the data.
    rtol, atol : float
        Tolerances of inexact results.
    ill_conditioned_offset : float or None, default 1e8
        Added to the data of the ill-conditioning law (None skips it).

    Raises
    ------
    AssertionError
        A law does not hold; the message names it and hypothesis prints the smallest data that breaks it.
    """
    def _make(n_features: int) -> Any:
        """The statistic for ``n_features`` columns."""
        return statistic if is_statistic(statistic) else statistic(n_features)

    def _expected(x: np.ndarray, label: np.ndarray | None = None) -> Any:
        """The expected result for all of ``x``: ``reference``'s, else one chunk's."""
        if reference is not None:
            return reference(x, label) if label is not None else reference(x)
        stat = _make(x.shape[1])
        return stat.finalize(stat.chunk(x, label))

    class UserStatisticLaws(StatisticLaws):
        """The laws, for the statistic given."""

        def make(self, n_features: int) -> Any:  # numpydoc ignore=GL08
            return _make(n_features)

        def reference(self, x: np.ndarray, label: np.ndarray | None = None) -> dict[str, Any]:  # numpydoc ignore=GL08
            return result_fields(_expected(x, label))

    UserStatisticLaws.uses_label = reads_label(_make(1)) if uses_label is None else uses_label
    UserStatisticLaws.exact, UserStatisticLaws.nonfinite = exact, nonfinite
    UserStatisticLaws.rtol, UserStatisticLaws.atol = rtol, atol
    UserStatisticLaws.ill_conditioned_offset = ill_conditioned_offset
    laws = UserStatisticLaws()
    for law in LAWS:
        try:
            getattr(laws, law)(xp=np if xp is None else xp)
        except (AssertionError, ExceptionGroup) as exc:  # hypothesis groups distinct failures
            raise AssertionError(f"{law}: {exc}") from exc
