"""A dask array with unknown chunk sizes (after boolean indexing) gets a one-line error saying what to call.

It failed with "cannot convert float NaN to integer" from deep inside the planner.
"""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest

import daskbatch as db


@pytest.fixture()
def x() -> da.Array:
    return da.from_array(np.random.default_rng(1).normal(size=(400, 3)), chunks=(50, 3))


@pytest.mark.parametrize("plan", ["auto", None])
def test_unknown_chunks_are_named_with_the_fix(x: da.Array, plan: object) -> None:
    kept = x[x[:, 0] > 0]
    with pytest.raises(ValueError, match=r"x has unknown chunk sizes .*call x\.compute_chunk_sizes\(\)") as err:
        db.describe(kept, run=db.RunOptions(plan=plan))
    assert "\n" not in str(err.value)
    kept.compute_chunk_sizes()  # the advice works
    s = db.describe(kept, stats="moments", run=db.RunOptions(plan=plan))
    np.testing.assert_allclose(s.mean, kept.compute().mean(axis=0), rtol=1e-12)


def test_unknown_label_chunks_are_named(x: da.Array) -> None:
    y = (x[:, 0] > 0).astype(int)
    unknown = y[y >= 0]  # same values, unknown chunk sizes
    with pytest.raises(ValueError, match=r"label has unknown chunk sizes .*compute_chunk_sizes\(\)"):
        db.describe(x, unknown)
