"""The laws every mergeable statistic obeys, as a test class to inherit (the pattern of zarr's ``StoreTests``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daskbatch.stats._base import merge_all, reads_weights
from daskbatch.stats.numerics import as_float64, is_exact
from daskbatch.testing.assertions import assert_results_close, assert_states_equal, result_fields
from daskbatch.testing.strategies import labels_for, merge_tree, sample_arrays, split_points

__all__ = ["LAWS", "StatisticLaws"]


class StatisticLaws:
    """Laws every mergeable statistic obeys; subclass and implement :meth:`make` and :meth:`reference`.

    Class attributes declare what the statistic does, and the laws that do not
    apply skip with that reason: ``uses_label`` passes a class label to
    ``chunk``; ``exact`` demands bitwise equality across chunkings and merge
    orders (integer counts); ``nonfinite`` mixes NaN/±inf into the data;
    ``rtol``/``atol`` bound rounding; ``ill_conditioned_offset`` (None to
    skip) is added to data in the ill-conditioning law; ``options_only``
    marks a variant whose options change ``finalize`` only: the oracle laws
    run, while the merge and input-dtype laws are left to the sibling class
    with default options (they skip, saying so). ``row_count_fields`` names
    the result fields that count rows, not weights (skipped by the weighted
    law, which runs for statistics with ``takes_weights``).
    """

    uses_label: bool = False
    exact: bool = False
    nonfinite: bool = True
    rtol: float = 1e-10
    atol: float = 1e-9
    ill_conditioned_offset: float | None = 1e8
    options_only: bool = False
    row_count_fields: tuple[str, ...] = ("count", "n", "weight_sum", "nan_count", "posinf_count", "neginf_count")

    def _skip_if_options_only(self) -> None:
        if self.options_only:
            pytest.skip(f"{type(self).__name__} varies options of finalize only; its sibling checks this law")

    def make(self, n_features: int) -> Any:
        """Make the statistic under test for data with ``n_features`` columns.

        Parameters
        ----------
        n_features : int
            Columns of the data.

        Returns
        -------
        Statistic
            The statistic.
        """
        raise NotImplementedError

    def reference(self, x: np.ndarray, label: np.ndarray | None = None) -> dict[str, Any]:
        """Compute the expected finalized fields for the whole of ``x`` (host NumPy oracle).

        Parameters
        ----------
        x : numpy.ndarray
            The data, (rows, features).
        label : numpy.ndarray, optional
            Its labels, with ``uses_label``.

        Returns
        -------
        dict
            Field name to expected value.
        """
        raise NotImplementedError

    # ----------------------------------------------------------- helpers
    def _draw(self, data: st.DataObject, min_rows: int = 1) -> tuple[np.ndarray, np.ndarray | None]:
        x = data.draw(sample_arrays(min_rows=min_rows, nonfinite=self.nonfinite), label="x")
        label = data.draw(labels_for(x.shape[0]), label="label") if self.uses_label else None
        return x, label

    def _states(self, xp: Any, stat: Any, x: np.ndarray, label: np.ndarray | None, cuts: list[int]) -> list[Any]:
        xs = np.split(x, cuts)
        labels = np.split(label, cuts) if label is not None else [None] * len(xs)
        return [stat.chunk(xp.asarray(a), None if b is None else xp.asarray(b)) for a, b in zip(xs, labels, strict=True)]

    def _compare(self, actual: Any, expected: Any) -> None:
        if self.exact:
            assert_results_close(actual, expected, rtol=0, atol=0, exact=tuple(result_fields(expected)))
        else:
            assert_results_close(actual, expected, rtol=self.rtol, atol=self.atol)

    # -------------------------------------------------------------- laws
    @given(data=st.data())
    def test_matches_reference_under_any_chunking(self, xp: Any, data: st.DataObject) -> None:
        """Check that chunks merged in order finalize to the oracle's result, however the rows are cut.

        Parameters
        ----------
        xp : namespace
            The array namespace (a fixture of the test module).
        data : hypothesis.strategies.DataObject
            Draws the data and the cuts.
        """
        x, label = self._draw(data)
        cuts = data.draw(split_points(x.shape[0]), label="cuts")
        stat = self.make(x.shape[1])
        result = stat.finalize(merge_all(stat, self._states(xp, stat, x, label, cuts)))
        self._compare(result, self.reference(x, label))

    @given(data=st.data())
    def test_merge_order_does_not_matter(self, xp: Any, data: st.DataObject) -> None:
        """Check that merging along any tree gives the result of merging in order.

        Parameters
        ----------
        xp : namespace
            The array namespace (a fixture of the test module).
        data : hypothesis.strategies.DataObject
            Draws the data, the cuts and the tree.
        """
        self._skip_if_options_only()
        x, label = self._draw(data)
        cuts = data.draw(split_points(x.shape[0], max_pieces=8), label="cuts")
        stat = self.make(x.shape[1])
        states = self._states(xp, stat, x, label, cuts)
        left = stat.finalize(merge_all(stat, states))
        tree = stat.finalize(merge_tree(stat, states, data))
        if self.exact:
            assert_states_equal(left, tree)
        else:
            assert_results_close(tree, left, rtol=self.rtol, atol=self.atol)

    @given(data=st.data())
    def test_empty_chunk_is_identity(self, xp: Any, data: st.DataObject) -> None:
        """Check that the state of an empty chunk is the identity of ``merge``, on either side.

        Parameters
        ----------
        xp : namespace
            The array namespace (a fixture of the test module).
        data : hypothesis.strategies.DataObject
            Draws the data.
        """
        self._skip_if_options_only()
        x, label = self._draw(data)
        stat = self.make(x.shape[1])
        (state,) = self._states(xp, stat, x, label, [])
        (empty,) = self._states(xp, stat, x[:0], None if label is None else label[:0], [])
        assert_states_equal(stat.merge(empty, state), state)
        assert_states_equal(stat.merge(state, empty), state)
        assert_states_equal(stat.merge(empty, empty), empty)

    @given(data=st.data())
    def test_merge_is_associative(self, xp: Any, data: st.DataObject) -> None:
        """Check that ``(a + b) + c`` and ``a + (b + c)`` finalize alike.

        Parameters
        ----------
        xp : namespace
            The array namespace (a fixture of the test module).
        data : hypothesis.strategies.DataObject
            Draws the data and the cuts.
        """
        self._skip_if_options_only()
        x, label = self._draw(data, min_rows=3)
        cuts = sorted(data.draw(st.lists(st.integers(1, x.shape[0] - 1), min_size=2, max_size=2), label="cuts"))
        stat = self.make(x.shape[1])
        a, b, c = self._states(xp, stat, x, label, cuts)
        one = stat.finalize(stat.merge(stat.merge(a, b), c))
        two = stat.finalize(stat.merge(a, stat.merge(b, c)))
        if self.exact:
            assert_states_equal(one, two)
        else:
            assert_results_close(one, two, rtol=self.rtol, atol=self.atol)

    def test_integer_and_bool_input_match_float64(self, xp: Any) -> None:
        """Check that every integer dtype and bool give bitwise the result of the same values in float64.

        Parameters
        ----------
        xp : namespace
            The array namespace (a fixture of the test module).
        """
        self._skip_if_options_only()
        rng = np.random.default_rng(7)
        ints = rng.integers(-100, 101, size=(37, 2))
        label = rng.integers(0, 3, 37) if self.uses_label else None
        label_xp = None if label is None else xp.asarray(label)
        stat = self.make(2)
        want = stat.finalize(stat.chunk(xp.asarray(ints.astype(np.float64)), label_xp))
        for dtype in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64):
            cast = np.abs(ints) if np.dtype(dtype).kind == "u" else ints
            ref = want if cast is ints else stat.finalize(stat.chunk(xp.asarray(cast.astype(np.float64)), label_xp))
            got = stat.finalize(stat.chunk(xp.asarray(cast.astype(dtype)), label_xp))
            assert_states_equal(_float64_where_reference_is(got, ref), ref)
        flags = ints > 0
        want = stat.finalize(stat.chunk(xp.asarray(flags.astype(np.float64)), label_xp))
        assert_states_equal(stat.finalize(stat.chunk(xp.asarray(flags), label_xp)), want)

    @settings(max_examples=12)  # one law more for every weighted statistic and backend: kept short for CI
    @given(data=st.data())
    def test_integer_weights_equal_repeated_rows(self, xp: Any, data: st.DataObject) -> None:
        """Check that integer weights (0 included) give the result of each row repeated that many times.

        The weighted chunks are merged along a random tree and in reverse
        order (associativity and commutativity with weights). Skipped for a
        statistic without ``takes_weights``.

        Parameters
        ----------
        xp : namespace
            The array namespace (a fixture of the test module).
        data : hypothesis.strategies.DataObject
            Draws the data, the weights, the cuts and the tree.
        """
        self._skip_if_options_only()
        x, label = self._draw(data)
        stat = self.make(x.shape[1])
        if not reads_weights(stat):
            pytest.skip(f"{type(stat).__name__} does not take sample weights")
        w = np.asarray(data.draw(st.lists(st.integers(0, 3), min_size=x.shape[0], max_size=x.shape[0]),
                                 label="weights"), dtype=np.float64)
        cuts = data.draw(split_points(x.shape[0], max_pieces=6), label="cuts")
        pieces = zip(np.split(x, cuts), np.split(w, cuts),
                     np.split(label, cuts) if label is not None else [None] * (len(cuts) + 1), strict=True)
        states = [stat.chunk(xp.asarray(a), None if b is None else xp.asarray(b), weights=xp.asarray(c))
                  for a, c, b in pieces]
        repeat = w.astype(np.int64)
        expected = stat.finalize(stat.chunk(xp.asarray(np.repeat(x, repeat, axis=0)),
                                            None if label is None else xp.asarray(np.repeat(label, repeat))))
        compared = [name for name in result_fields(expected) if name not in self.row_count_fields]
        for merged in (merge_tree(stat, states, data), merge_all(stat, states[::-1])):
            assert_results_close(stat.finalize(merged), expected, rtol=max(self.rtol, 1e-9), atol=self.atol,
                                 fields=compared)

    def test_ill_conditioned(self, xp: Any) -> None:
        """Check the result against the oracle on data shifted by ``ill_conditioned_offset``.

        Parameters
        ----------
        xp : namespace
            The array namespace (a fixture of the test module).
        """
        if self.ill_conditioned_offset is None:
            return
        rng = np.random.default_rng(42)
        x = self.ill_conditioned_offset + rng.standard_normal((3000, 3))
        label = rng.integers(0, 3, 3000) if self.uses_label else None
        stat = self.make(3)
        states = self._states(xp, stat, x, label, [1, 700, 701, 2048])
        self._compare(stat.finalize(merge_all(stat, states)), self.reference(x, label))


#: The laws of :class:`StatisticLaws`, in the order :func:`check_statistic` runs them.
LAWS = (
    "test_matches_reference_under_any_chunking",
    "test_merge_order_does_not_matter",
    "test_empty_chunk_is_identity",
    "test_merge_is_associative",
    "test_integer_weights_equal_repeated_rows",
    "test_integer_and_bool_input_match_float64",
    "test_ill_conditioned",
)


def _float64_where_reference_is(result: Any, reference: Any) -> dict[str, Any]:
    """``result``'s fields, its int64/uint64 ones (exact extremes of such input) in float64 where ``reference``'s are."""
    ref = result_fields(reference)
    out = {}
    for name, value in result_fields(result).items():
        want = ref.get(name)
        if hasattr(value, "dtype") and is_exact(value) and want is not None and not is_exact(want):
            value = as_float64(value)
        out[name] = value
    return out
