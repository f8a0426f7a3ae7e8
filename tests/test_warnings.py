"""daskbatch's warnings point at the caller's line, not at a line inside daskbatch."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

import daskbatch as db
from daskbatch.batches import FlaggedRowsWarning
from daskbatch.errors import MissingChunksWarning, RangeWarning


def _only(record: pytest.WarningsRecorder, category: type[Warning]) -> warnings.WarningMessage:
    found = [w for w in record if issubclass(w.category, category)]
    assert len(found) == 1, [str(w.message) for w in record]
    return found[0]


def test_range_warning_names_the_callers_line(tmp_path):
    db.synth(str(tmp_path / "data.zarr"), rows=2000, features=3, classes=2, chunk_rows=500)
    with pytest.warns(RangeWarning) as record:
        db.describe(str(tmp_path / "data.zarr"), label="y", range=(-0.1, 0.1))
    found = _only(record, RangeWarning)
    assert found.filename == __file__, found.filename
    assert "outside the histogram range" in str(found.message)


def test_missing_chunks_warning_names_the_callers_line(tmp_path):
    path = tmp_path / "data.zarr"
    db.synth(str(path), rows=2000, features=3, classes=2, chunk_rows=500)
    x_chunks = [p for p in (path / "X").rglob("*") if p.is_file() and p.name != "zarr.json"]
    os.remove(sorted(x_chunks)[0])
    with pytest.warns(MissingChunksWarning) as record:
        s = db.describe(str(path), label="y", stats=["moments"], run=db.RunOptions(missing="skip"))
    assert _only(record, MissingChunksWarning).filename == __file__
    assert s.arrays.count[0] == 1500


def test_flagged_rows_warning_names_the_callers_line():
    def fails_on_negative_first(block):
        if block[0, 0] < 0:
            raise ValueError("negative")
        return block

    x = np.arange(40.0).reshape(20, 2)
    x[10:, :] *= -1
    with pytest.warns(FlaggedRowsWarning) as record:
        db.map_batches(fails_on_negative_first, x, batch_rows=10, on_error="flag")
    assert record[0].filename == __file__
