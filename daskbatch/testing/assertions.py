"""Comparing the states and results of statistics, field by field, on the host; NaN equals NaN."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from daskbatch.stats.backend import to_numpy

__all__ = ["assert_results_close", "assert_states_equal", "result_fields"]


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
