"""``ingest(..., workers=0)`` is refused in one line, as the CLI's ``--workers 0`` is; None is the CPU count.

Before: ``workers or CPU_COUNT`` took 0 (and False) for the CPU count, silently.
"""

from __future__ import annotations

import numpy as np
import pytest

import daskbatch as db


@pytest.mark.parametrize(("workers", "error"), [(0, ValueError), (-2, ValueError), (False, TypeError), (1.5, ValueError)])
def test_a_count_of_no_writers_is_refused_and_writes_nothing(tmp_path, workers, error) -> None:
    source = tmp_path / "a.npy"
    np.save(source, np.arange(40.0).reshape(20, 2))
    out = tmp_path / "out.zarr"
    with pytest.raises(error, match=r"^workers must be") as refused:
        db.ingest(str(source), out, chunk_rows=8, workers=workers)
    assert "\n" not in str(refused.value) and repr(workers) in str(refused.value)
    assert not out.exists()


def test_no_count_is_the_cpu_count_and_one_is_one(tmp_path) -> None:
    source = tmp_path / "a.npy"
    np.save(source, np.arange(40.0).reshape(20, 2))
    for workers in (None, 1):
        out = tmp_path / f"out-{workers}.zarr"
        report = db.ingest(str(source), out, chunk_rows=8, workers=workers)
        assert report.rows == 20
