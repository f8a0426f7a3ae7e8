"""A summary's saved states belong to it: a ``states/`` group copied in from another summary is refused.

Each state had its own checksum, but nothing tied the states to the results
beside them: with another summary's ``states/`` copied in, the displayed means
were right while merges and updates used the other summary's data.
"""

from __future__ import annotations

import dataclasses
import pathlib
import shutil

import numpy as np
import pytest

import daskbatch as db
from daskbatch.errors import DataError


def test_states_copied_from_another_summary_are_refused(tmp_path: pathlib.Path) -> None:
    rng = np.random.default_rng(4)
    a, b = tmp_path / "a.zarr", tmp_path / "b.zarr"
    db.describe(rng.normal(size=(300, 3)), stats=["moments", "hist"]).save(a)
    db.describe(rng.normal(loc=5.0, size=(200, 3)), stats=["moments", "hist"]).save(b)
    shutil.rmtree(a / "states")
    shutil.copytree(b / "states", a / "states")
    with pytest.raises(DataError, match=r"a\.zarr: its states/ group does not belong to its results") as info:
        db.load_summary(a)
    assert "\n" not in str(info.value)


def test_states_copied_into_a_summary_without_states_are_refused(tmp_path: pathlib.Path) -> None:
    rng = np.random.default_rng(5)
    a, b = tmp_path / "a.zarr", tmp_path / "b.zarr"
    summary = db.describe(rng.normal(size=(100, 2)), stats="moments")
    dataclasses.replace(summary, states=None).save(a)
    db.describe(rng.normal(size=(100, 2)), stats="moments").save(b)
    assert db.load_summary(a).states is None
    shutil.copytree(b / "states", a / "states")
    with pytest.raises(DataError, match="does not belong to its results"):
        db.load_summary(a)


def test_its_own_states_load_and_merge_exactly(tmp_path: pathlib.Path) -> None:
    rng = np.random.default_rng(6)
    x0, x1 = rng.normal(size=(300, 3)), rng.normal(size=(150, 3))
    a = tmp_path / "a.zarr"
    given = np.array([[-10.0, 10.0]] * 3)
    db.describe(x0, stats=["moments", "hist", "cov"], range=given).save(a)
    merged = db.merge(db.load_summary(a), db.describe(x1, stats=["moments", "hist", "cov"], range=given))
    rows = np.concatenate([x0, x1])
    np.testing.assert_allclose(merged.mean, rows.mean(axis=0), rtol=1e-13)
    np.testing.assert_allclose(merged.cov, np.cov(rows, rowvar=False), rtol=1e-12, atol=1e-14)
    expected = np.stack([np.histogram(rows[:, j], bins=merged.provenance["bins"], range=(-10, 10))[0]
                         for j in range(3)])
    np.testing.assert_array_equal(np.asarray(merged.hist_counts), expected)
