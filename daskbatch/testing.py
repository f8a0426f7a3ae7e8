"""Conformance laws for mergeable statistics, and the hypothesis strategies they draw from."""

from __future__ import annotations

try:  # the law suite runs under pytest with hypothesis: test tools, not dependencies of daskbatch
    import hypothesis  # noqa: F401
    import pytest
except ImportError:
    raise ImportError("daskbatch.testing needs pytest and hypothesis: pip install 'daskbatch[test]'") from None

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from daskbatch.stats._base import merge_all, reads_label, reads_weights
from daskbatch.stats.numerics import as_float64, is_exact, to_numpy
from daskbatch.stats.registry import is_statistic

__all__ = [
    "LAWS",
    "StatisticLaws",
    "check_statistic",
    "assert_results_close",
    "assert_states_equal",
    "chunk_sizes",
    "labels_for",
    "merge_tree",
    "sample_arrays",
    "split_points",
]


#: Column shapes: (scale, offset) of ``k * scale + offset`` for integer ``k``.
#: Small integer multiples keep higher moments well conditioned while the
#: offsets exercise cancellation (1e8) and huge magnitudes (1e200 absorbs ``k``).
_SCALES = (0.125, 1.0, 2.0**-20)
_OFFSETS = (0.0, 1e6, -1e8, 1e200)
_SPECIAL = (math.nan, math.inf, -math.inf)


@st.composite
def sample_arrays(
    draw: st.DrawFn,
    *,
    min_rows: int = 0,
    max_rows: int = 32,
    min_features: int = 1,
    max_features: int = 4,
    nonfinite: bool = False,
) -> np.ndarray:
    """Draw a float64 (rows, features) array; axis 0 holds samples."""
    rows = draw(st.integers(min_rows, max_rows))
    features = draw(st.integers(min_features, max_features))
    shape = (rows, features)
    ks = draw(hnp.arrays(np.int16, shape, elements=st.integers(-1000, 1000)))
    scale = np.asarray(draw(st.lists(st.sampled_from(_SCALES), min_size=features, max_size=features)))
    offset = np.asarray(draw(st.lists(st.sampled_from(_OFFSETS), min_size=features, max_size=features)))
    x = ks.astype(np.float64) * scale + offset
    if nonfinite:
        # 0 keeps the value; 1, 2, 3 pick NaN, +inf, -inf. Mostly zeros (fill).
        kind = draw(hnp.arrays(np.int8, shape, elements=st.integers(0, 3), fill=st.just(0)))
        for code, value in enumerate(_SPECIAL, start=1):
            x[kind == code] = value
    return x


def split_points(n: int, *, max_pieces: int = 6) -> st.SearchStrategy[list[int]]:
    """Draw sorted cut positions in ``[0, n]`` for ``numpy.split``; repeats and ends give empty pieces."""
    return st.lists(st.integers(0, n), max_size=max_pieces - 1).map(sorted)


def chunk_sizes(n: int, *, max_chunks: int = 6) -> st.SearchStrategy[tuple[int, ...]]:
    """Draw dask-style chunk sizes summing to ``n`` (may include 0 and 1-row chunks)."""
    return split_points(n, max_pieces=max_chunks).map(
        lambda cuts: tuple(int(b - a) for a, b in zip([0, *cuts], [*cuts, n], strict=True))
    )


def labels_for(n: int, *, max_classes: int = 4) -> st.SearchStrategy[np.ndarray]:
    """Draw integer class labels ``0..K-1`` (int64) for ``n`` samples."""
    return st.lists(st.integers(0, max_classes - 1), min_size=n, max_size=n).map(
        lambda v: np.asarray(v, dtype=np.int64)
    )


def merge_tree(stat: Any, states: Sequence[Any], data: st.DataObject) -> Any:
    """Merge ``states`` (in order) along a randomly bracketed binary tree drawn from ``data``."""
    if len(states) == 1:
        return states[0]
    cut = data.draw(st.integers(1, len(states) - 1))
    return stat.merge(merge_tree(stat, states[:cut], data), merge_tree(stat, states[cut:], data))


def result_fields(value: Any) -> dict[str, Any]:
    """Give a result's fields by name: a dataclass's, a dict's or a named tuple's; one value as ``result``."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, tuple) and hasattr(value, "_asdict"):
        return dict(value._asdict())
    return {"result": value}  # a result that is one array or number


def _host(a: Any) -> Any:
    return None if a is None else np.asarray(to_numpy(a))


def assert_results_close(
    actual: Any,
    expected: Any,
    *,
    rtol: float = 1e-10,
    atol: float = 1e-9,
    exact: Sequence[str] = (),
    fields: Sequence[str] | None = None,
) -> None:
    """Compare two results (dataclasses or dicts of arrays) field by field; NaN equals NaN."""
    got, want = result_fields(actual), result_fields(expected)
    for name in fields if fields is not None else want:
        a, b = _host(got[name]), _host(want[name])
        if a is None or b is None:
            assert a is None and b is None, f"{name}: {a!r} vs {b!r}"
            continue
        assert a.shape == b.shape, f"{name}: shape {a.shape} != expected {b.shape}"
        if name in exact or a.dtype.kind in "biu":
            np.testing.assert_array_equal(a, b, err_msg=name)
        else:
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, equal_nan=True, err_msg=name)


def assert_states_equal(a: Any, b: Any) -> None:
    """Assert bitwise equality of two states (or results), field by field, NaN equal to NaN."""
    fa, fb = result_fields(a), result_fields(b)
    assert fa.keys() == fb.keys()
    for name in fa:
        x, y = _host(fa[name]), _host(fb[name])
        if x is None or y is None:
            assert x is None and y is None, name
            continue
        assert x.shape == y.shape and x.dtype == y.dtype, f"{name}: {x.shape}/{x.dtype} vs {y.shape}/{y.dtype}"
        np.testing.assert_array_equal(x, y, err_msg=name, strict=True)


class StatisticLaws:
    """Laws every mergeable statistic obeys; subclass and implement :meth:`make` and :meth:`reference`."""

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
        """Make the statistic under test for data with ``n_features`` columns."""
        raise NotImplementedError

    def reference(self, x: np.ndarray, label: np.ndarray | None = None) -> dict[str, Any]:
        """Compute the expected finalized fields for the whole of ``x`` (host NumPy oracle)."""
        raise NotImplementedError

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

    @given(data=st.data())
    def test_matches_reference_under_any_chunking(self, xp: Any, data: st.DataObject) -> None:
        """Check that chunks merged in order finalize to the oracle's result, however the rows are cut."""
        x, label = self._draw(data)
        cuts = data.draw(split_points(x.shape[0]), label="cuts")
        stat = self.make(x.shape[1])
        result = stat.finalize(merge_all(stat, self._states(xp, stat, x, label, cuts)))
        self._compare(result, self.reference(x, label))

    @given(data=st.data())
    def test_merge_order_does_not_matter(self, xp: Any, data: st.DataObject) -> None:
        """Check that merging along any tree gives the result of merging in order."""
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
        """Check that the state of an empty chunk is the identity of ``merge``, on either side."""
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
        """Check that ``(a + b) + c`` and ``a + (b + c)`` finalize alike."""
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

    @settings(max_examples=12)  # one law more for every weighted statistic and backend: kept short for CI
    @given(data=st.data())
    def test_integer_weights_equal_repeated_rows(self, xp: Any, data: st.DataObject) -> None:
        """Check that integer weights (0 included) give the result of each row repeated that many times."""
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

    def test_integer_and_bool_input_match_float64(self, xp: Any) -> None:
        """Check that every integer dtype and bool give bitwise the result of the same values in float64."""
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

    def test_ill_conditioned(self, xp: Any) -> None:
        """Check the result against the oracle on data shifted by ``ill_conditioned_offset``."""
        if self.ill_conditioned_offset is None:
            return
        rng = np.random.default_rng(42)
        x = self.ill_conditioned_offset + rng.standard_normal((3000, 3))
        label = rng.integers(0, 3, 3000) if self.uses_label else None
        stat = self.make(3)
        states = self._states(xp, stat, x, label, [1, 700, 701, 2048])
        self._compare(stat.finalize(merge_all(stat, states)), self.reference(x, label))


#: The laws of :class:`StatisticLaws`, in the order :func:`check_statistic` runs them.
LAWS = tuple(name for name in vars(StatisticLaws) if name.startswith("test_"))


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
    oracle = reference

    class UserStatisticLaws(StatisticLaws):
        """The laws, for the statistic given."""

        def make(self, n_features: int) -> Any:  # numpydoc ignore=GL08
            return statistic if is_statistic(statistic) else statistic(n_features)

        def reference(self, x: np.ndarray, label: np.ndarray | None = None) -> dict[str, Any]:  # numpydoc ignore=GL08
            if oracle is not None:  # the user's expected result, else that of one chunk of all of x
                return result_fields(oracle(x, label) if label is not None else oracle(x))
            stat = self.make(x.shape[1])
            return result_fields(stat.finalize(stat.chunk(x, label)))

    laws = UserStatisticLaws()
    vars(laws).update(
        uses_label=reads_label(laws.make(1)) if uses_label is None else uses_label, exact=exact, nonfinite=nonfinite,
        rtol=rtol, atol=atol, ill_conditioned_offset=ill_conditioned_offset,
    )
    for law in LAWS:
        try:
            getattr(laws, law)(xp=np if xp is None else xp)
        except (AssertionError, ExceptionGroup) as exc:  # hypothesis groups distinct failures
            raise AssertionError(f"{law}: {exc}") from exc
