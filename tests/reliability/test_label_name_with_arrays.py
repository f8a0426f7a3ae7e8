"""A label *name* with in-memory arrays says that names need a store, not "label has shape ()"."""

from __future__ import annotations

import pathlib

import dask.array as da
import numpy as np
import pytest

import daskbatch as db
from daskbatch.engine.planner import plan_describe


@pytest.mark.parametrize("wrap", [np.asarray, lambda a: da.from_array(a, chunks=(100, 3))], ids=["numpy", "dask"])
def test_label_name_needs_a_store(data: np.ndarray, wrap: object) -> None:
    with pytest.raises(TypeError, match=r"label 'y' is a name.*store path or a Dataset.*pass the label array") as err:
        db.describe(wrap(data), "y")  # type: ignore[operator]
    assert "\n" not in str(err.value)


def test_label_name_with_a_store_and_label_array_with_arrays(store: pathlib.Path, data: np.ndarray) -> None:
    by_name = db.describe(str(store), "y", stats=("moments", "mi"), run=db.RunOptions(plan=None))
    by_array = db.describe(data, (data[:, 0] > 0).astype(np.int8), stats=("moments", "mi"), run=db.RunOptions(plan=None))
    np.testing.assert_allclose(by_name.mi, by_array.mi, rtol=1e-12)
    with pytest.raises(TypeError, match="label 'y' is a name"):
        plan_describe(data, "y")
