"""db.map_batches: fallback by halving, flagged rows, named failures, batch-size invariance, cancel and resume."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import zarr

import daskbatch as db
from daskbatch.batches import FlaggedRowsWarning
from daskbatch.errors import DataError
from daskbatch.io.rowstore import DONE_FILE


def data(rows: int = 1000, d: int = 3) -> np.ndarray:
    """Column 0 is the row index, so a function can tell which rows it was given."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(rows, d)) * 10
    x[:, 0] = np.arange(rows)
    return x


def features(batch: np.ndarray) -> np.ndarray:
    """A row-wise function that changes the number of columns."""
    return np.stack([np.sin(batch[:, 1]) * batch[:, 2], batch.sum(axis=1), np.hypot(batch[:, 1], batch[:, 2]),
                     batch[:, 0]], axis=1)


def test_fallback_halves_batches_that_run_out_of_memory() -> None:
    x = data()
    sizes: list[int] = []

    def picky(batch: np.ndarray) -> np.ndarray:
        sizes.append(len(batch))
        if len(batch) > 60:
            raise MemoryError(f"cannot allocate for {len(batch)} rows")
        return features(batch)

    got = db.map_batches(picky, x, batch_rows=400, on_error="fallback", min_batch_rows=10)
    np.testing.assert_array_equal(got, features(x))
    assert max(s for s in sizes if s <= 60) == 50 and 400 in sizes  # 400 -> 200 -> 100 -> 50
    with pytest.raises(db.BatchError, match=r"picky failed on rows (0-399|400-799|800-999): MemoryError: cannot allocate"):
        db.map_batches(picky, x, batch_rows=400, on_error="raise")


def test_fallback_narrows_a_bad_row_down_and_names_it() -> None:
    def bad_row(batch: np.ndarray) -> np.ndarray:
        if np.any(batch[:, 0] == 613):
            raise ValueError("row 613 is poisoned")
        return features(batch)

    with pytest.raises(db.BatchError, match=r"bad_row failed on rows 608-615: ValueError: row 613 is poisoned"):
        db.map_batches(bad_row, data(), batch_rows=128, on_error="fallback", min_batch_rows=8)


def test_raise_names_the_batch_rows() -> None:
    x = data(rows=50_000, d=2)

    def fails_late(batch: np.ndarray) -> np.ndarray:
        if batch[0, 0] >= 40_000:
            raise ValueError("bad values")
        return batch * 2

    with pytest.raises(db.BatchError, match=r"^fails_late failed on rows 40,000-49,999: ValueError: bad values$") as e:
        db.map_batches(fails_late, x, batch_rows=10_000)
    assert isinstance(e.value.__cause__, ValueError)


def test_flag_masks_exactly_the_failed_rows(tmp_path: Path) -> None:
    x = data()
    poisoned = {123, 777, 778}

    def fussy(batch: np.ndarray) -> np.ndarray:
        if poisoned & set(batch[:, 0].astype(int).tolist()):
            raise RuntimeError("no")
        return features(batch)

    expected_mask = np.isin(np.arange(len(x)), sorted(poisoned))  # bisected down to single rows (batches <= 1,024)
    with pytest.warns(FlaggedRowsWarning, match=r"3 rows \(2 range\(s\)\), flagged: row 123, rows 777-778$"):
        got = db.map_batches(fussy, x, batch_rows=100, on_error="flag")
    assert isinstance(got, np.ma.MaskedArray)
    np.testing.assert_array_equal(got.mask.any(axis=1), expected_mask)
    assert np.all(np.isnan(got.data[expected_mask]))
    np.testing.assert_array_equal(got.data[~expected_mask], features(x)[~expected_mask])

    # min_batch_rows bounds the bisection: here whole batches are flagged, in the store and its provenance
    batch_mask = np.zeros(len(x), dtype=bool)
    batch_mask[100:200] = batch_mask[700:800] = True
    with pytest.warns(FlaggedRowsWarning, match=r"200 rows \(2 range\(s\)\), flagged: rows 100-199, rows 700-799"):
        report = db.map_batches(fussy, x, batch_rows=100, on_error="flag", min_batch_rows=100,
                                out=tmp_path / "f.zarr")
    assert report.failed_rows == ((100, 200), (700, 800))
    group = zarr.open_group(report.path)
    np.testing.assert_array_equal(group["failed"][:], batch_mask)
    assert group.attrs["provenance"]["failed_rows"] == [[100, 200], [700, 800]]
    assert group.attrs["daskbatch_output"] == "map_batches" and group.attrs["complete"] is True
    np.testing.assert_array_equal(np.isnan(group["X"][:]).all(axis=1), batch_mask)


@pytest.mark.parametrize("batch_rows", [7, 64, 333, 1000, "plan"])
def test_output_does_not_depend_on_batch_size(batch_rows: int | str) -> None:
    x = data()
    got = db.map_batches(features, x, batch_rows=batch_rows)
    assert got.dtype == np.float64 and got.shape == (1000, 4)
    np.testing.assert_array_equal(got, features(x))


def test_cancel_then_resume_equals_an_uninterrupted_run(tmp_path: Path) -> None:
    x = data(rows=2000)
    src = str(tmp_path / "in.zarr")
    group = zarr.open_group(src, mode="w", zarr_format=3, attributes={"daskbatch": {"x": "X", "label": "y"}})
    group.create_array("X", data=x, chunks=(100, 3))
    group.create_array("y", data=(np.arange(2000) % 2).astype(np.int8), chunks=(100,))
    clean = db.map_batches(features, src, batch_rows=100, out=tmp_path / "clean.zarr")
    assert clean.written == tuple(range(20))

    class StopsSoon:
        """``features``, setting ``cancel`` after a few batches (one object: the same job when resumed)."""

        def __init__(self) -> None:
            self.cancel = threading.Event()
            self.calls = 0

        def __call__(self, batch: np.ndarray) -> np.ndarray:
            self.calls += 1
            if self.calls > 5:  # the probe, then a few batches
                self.cancel.set()
            return features(batch)

    stops_soon = StopsSoon()
    out = tmp_path / "resumed.zarr"
    with pytest.raises(Exception, match="cancelled at a block boundary") as stopped:  # noqa: PT011 - the point
        db.map_batches(stops_soon, src, batch_rows=100, out=out, cancel=stops_soon.cancel)
    assert isinstance(stopped.value, db.Cancelled)  # an Exception: a caller's `except Exception` sees it
    done = {int(v) for v in (out / DONE_FILE).read_text().split()}
    assert 4 <= len(done) < 20
    assert zarr.open_group(str(out)).attrs["complete"] is False
    with pytest.raises(DataError, match="function"):  # another function: refused, nothing mixed
        db.map_batches(features, src, batch_rows=100, out=out)

    report = db.map_batches(stops_soon, src, batch_rows=100, out=out)
    assert set(report.written) == set(range(20)) - done
    a, b = zarr.open_group(str(out)), zarr.open_group(clean.path)
    for name in ("X", "y"):
        np.testing.assert_array_equal(a[name][:], b[name][:])
    np.testing.assert_array_equal(report.open().x.compute(), features(x))
    assert report.open().feature_names == ["out0", "out1", "out2", "out3"]


def test_bad_requests_are_named(tmp_path: Path) -> None:
    x = data(rows=20)
    with pytest.raises(ValueError, match="on_error must be one of"):
        db.map_batches(features, x, on_error="ignore")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="batch_rows must be a positive number"):
        db.map_batches(features, x, batch_rows=0)
    with pytest.raises(ValueError, match="returned shape"):
        db.map_batches(lambda b: b[:-1], x)
    with pytest.raises(ValueError, match="device must be one of"):
        db.map_batches(features, x, device="tpu")  # type: ignore[arg-type]


@pytest.mark.gpu
def test_gpu_fallback_after_out_of_memory() -> None:
    import cupy

    x = data()
    seen: list[str] = []

    def greedy(batch: object) -> object:
        seen.append(type(batch).__module__.split(".")[0])
        if isinstance(batch, cupy.ndarray) and len(batch) > 100:
            raise cupy.cuda.memory.OutOfMemoryError(len(batch) * 8, 0, 0)
        xp = cupy.get_array_module(batch)
        return xp.stack([batch[:, 1] * 2, batch[:, 0]], axis=1)

    got = db.map_batches(greedy, x, batch_rows=400, device="gpu", on_error="fallback", min_batch_rows=10)
    np.testing.assert_allclose(got, np.stack([x[:, 1] * 2, x[:, 0]], axis=1), rtol=1e-15)
    assert set(seen) == {"cupy"}  # halving was enough: no batch went to the CPU

    def gpu_only_fails(batch: object) -> object:
        if isinstance(batch, cupy.ndarray):
            raise TypeError("not on this device")
        return np.asarray(batch) * 3

    got = db.map_batches(gpu_only_fails, x, batch_rows=250, device="gpu", on_error="fallback")
    np.testing.assert_array_equal(got, x * 3)
