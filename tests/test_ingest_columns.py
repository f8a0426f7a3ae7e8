"""ingest with several labels and masks: aligned with X, checksummed, validated, resumed together."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest
import zarr
from click.testing import CliRunner

import daskbatch as db
from daskbatch.cli import main
from daskbatch.errors import DataError
from daskbatch.io.rowstore import DONE_FILE, read_done
from daskbatch.io.verify import verify_store

D = 4
HEADS = 7
SIZES = (23, 0, 41, 17, 30)  # an empty batch, and batch edges that fall inside output chunks


def _batch(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    """One batch as the seed writes it: X, seven label heads h0..h6 and seven masks m0..m6."""
    arrays = {"X": rng.standard_normal((n, D)).astype("f4")}
    for k in range(HEADS):
        arrays[f"h{k}"] = rng.integers(0, k + 2, n).astype("i4" if k % 2 else "i8")
        arrays[f"m{k}"] = rng.random(n) < 0.7
    return arrays


@pytest.fixture(scope="module")
def batches(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, np.ndarray]]]:
    """Five batch files, compressed and not (one member inflated for all arrays of a file)."""
    folder = tmp_path_factory.mktemp("batches")
    rng = np.random.default_rng(20)
    data = [_batch(rng, n) for n in SIZES]
    for i, arrays in enumerate(data):
        save = np.savez_compressed if i % 2 else np.savez
        save(folder / f"b{i}.npz", **arrays)
    return folder, data


LABELS = {f"head{k}": f"h{k}" for k in range(HEADS)}  # renamed: output name -> key in the files
MASKS = {f"mask{k}": f"m{k}" for k in range(HEADS)}


def _ingest(folder: Path, out: Path, **kw: object) -> db.io.ingest.IngestReport:  # type: ignore[name-defined]
    return db.ingest(str(folder / "b*.npz"), out, labels=LABELS, masks=MASKS, chunk_rows=16, workers=2, **kw)


def _bits(store: Path) -> dict[str, bytes]:
    """Every file of a store but the done log (its line order follows the threads), by path."""
    return {
        os.path.relpath(os.path.join(d, f), store): Path(d, f).read_bytes()
        for d, _, files in os.walk(store)
        for f in files
        if f != DONE_FILE
    }


@pytest.fixture(scope="module")
def whole(batches: tuple[Path, list[dict[str, np.ndarray]]], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted ingest of the batches."""
    out = tmp_path_factory.mktemp("whole") / "whole.zarr"
    _ingest(batches[0], out)
    return out


def test_every_label_and_mask_is_aligned_chunked_and_checksummed(batches, whole) -> None:
    _, data = batches
    group = zarr.open_group(str(whole), mode="r")
    assert group.attrs["daskbatch"] == {"x": "X", "label": None, "labels": list(LABELS), "masks": list(MASKS)}
    for name, key in {**LABELS, **MASKS}.items():
        arr = group[name]
        expected = np.concatenate([b[key] for b in data])
        assert arr.dtype == expected.dtype and arr.chunks == (16,), name
        np.testing.assert_array_equal(arr[:], expected, err_msg=name)
    np.testing.assert_array_equal(group["X"][:], np.concatenate([b["X"] for b in data]))
    report = verify_store(whole)
    assert report.ok and {a.name for a in report.arrays} == {"X", *LABELS, *MASKS}
    assert all(a.checksum for a in report.arrays)
    # With several labels none is the default; describe picks one by name.
    ds = db.open_dataset(whole)
    assert ds.label is None
    shown = repr(ds)
    assert "  labels          head0, head1, head2, head3, head4, head5, head6 (label=NAME picks one)" in shown
    assert "  masks           mask0, mask1, mask2, mask3, mask4, mask5, mask6 (stored, not applied)" in shown
    s = db.describe(str(whole), label="head3", stats=("moments", "class_moments"))
    x = np.concatenate([b["X"] for b in data]).astype(np.float64)
    y = np.concatenate([b["h3"] for b in data])
    assert s.provenance["label"] == "head3"
    classes = np.unique(y)  # all of 0..4 occur: the found classes, in order
    assert s.class_count.shape == (D, len(classes)) and list(classes) == list(range(5))
    for j, k in enumerate(classes):
        rows = x[y == k]
        np.testing.assert_array_equal(s.arrays.class_count[:, j], len(rows))
        np.testing.assert_allclose(s.arrays.class_mean[:, j], rows.mean(axis=0), rtol=1e-12, atol=1e-14)


def test_cancel_bad_file_then_resume_is_bitwise_the_uninterrupted_ingest(batches, tmp_path) -> None:
    folder = tmp_path / "src"
    folder.mkdir()
    for f in batches[0].iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    cancel = threading.Event()

    def stop_after_two(done: int, total: int | None, phase: str) -> None:
        if done >= 2:
            cancel.set()

    out = tmp_path / "out.zarr"
    with pytest.raises(db.Cancelled):
        db.ingest(str(folder / "b*.npz"), out, labels=LABELS, masks=MASKS, chunk_rows=16, workers=1,
                  progress=stop_after_two, cancel=cancel)
    done, kept = read_done(str(out)), _bits(out)
    assert 2 <= len(done) < 7
    # A file that lost one mask: refused in one line naming the file and the key, nothing written lost.
    victim = folder / "b3.npz"
    original, st = victim.read_bytes(), victim.stat()
    arrays = dict(np.load(victim))
    del arrays["m5"]
    np.savez(victim, **arrays)
    with pytest.raises(DataError) as err:
        _ingest(folder, out)
    assert "\n" not in str(err.value)
    assert f"{victim}: missing mask key 'm5' (keys in file: X, h0" in str(err.value)
    # ... and one whose label is a row short.
    arrays["m5"], arrays["h2"] = np.ones(17, bool), arrays["h2"][:-1]
    np.savez(victim, **arrays)
    with pytest.raises(DataError, match=r"b3\.npz: label 'h2' has shape \(16,\) but x has 17 rows; expected \(17,\)$"):
        _ingest(folder, out)
    assert read_done(str(out)) == done and _bits(out) == kept
    victim.write_bytes(original)
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
    # Other labels than the first run's are refused, naming the difference.
    with pytest.raises(DataError, match=r"differs in mask mask6\)"):
        db.ingest(str(folder / "b*.npz"), out, labels=LABELS, masks=dict(list(MASKS.items())[:6]), chunk_rows=16)
    report = _ingest(folder, out)
    assert report.chunks_written == report.chunks - len(done)
    assert report.labels == tuple(LABELS) and report.masks == tuple(MASKS)
    assert "with 7 labels (head0, " in report.summary() and "7 masks (mask0, " in report.summary()
    # Bitwise: every chunk of every array, the metadata and the manifest, as an uninterrupted run writes them.
    _ingest(folder, tmp_path / "whole.zarr")
    got, want = _bits(out), _bits(tmp_path / "whole.zarr")
    assert len(got) > 15 * 7 and got == want


def test_hdf5_and_zarr_sources_carry_labels_and_masks(tmp_path) -> None:
    h5py = pytest.importorskip("h5py")
    rng = np.random.default_rng(21)
    a, b = _batch(rng, 9), _batch(rng, 12)
    with h5py.File(tmp_path / "a.h5", "w") as f:
        for key, value in a.items():
            f[key] = value
    group = zarr.open_group(str(tmp_path / "b.zarr"), mode="w")
    for key, value in b.items():
        group.create_array(key, data=value, chunks=(5,) + value.shape[1:])
    out = tmp_path / "o.zarr"
    db.ingest([tmp_path / "a.h5", tmp_path / "b.zarr"], out, labels=["h4"], masks={"keep": "m4"}, chunk_rows=8)
    written = zarr.open_group(str(out), mode="r")
    np.testing.assert_array_equal(written["h4"][:], np.concatenate([a["h4"], b["h4"]]))
    np.testing.assert_array_equal(written["keep"][:], np.concatenate([a["m4"], b["m4"]]))
    group.create_array("m9", data=np.zeros(11, bool))
    with pytest.raises(DataError, match=r"b\.zarr: mask 'm9' has shape \(11,\) but x has 12 rows"):
        db.ingest([tmp_path / "a.h5", tmp_path / "b.zarr"], tmp_path / "p.zarr", masks=["m9"])


def test_label_and_mask_arguments_are_checked(batches, tmp_path) -> None:
    folder, _ = batches
    src = str(folder / "b*.npz")
    with pytest.raises(ValueError, match=r"output array 'y' is named twice: by label_key='h0' and by labels\['y'\]"):
        db.ingest(src, tmp_path / "o.zarr", label_key="h0", labels={"y": "h1"})
    with pytest.raises(ValueError, match=r"output array 'X' is named twice"):
        db.ingest(src, tmp_path / "o.zarr", masks=["X"])
    with pytest.raises(ValueError, match=r"mask name 'a/b' is not a plain array name"):
        db.ingest(src, tmp_path / "o.zarr", masks={"a/b": "m0"})
    with pytest.raises(DataError, match=r"b0\.npz: mask 'X' has shape \(23, 4\) but x has 23 rows"):
        db.ingest(src, tmp_path / "o.zarr", masks={"mx": "X"})
    np.savez(tmp_path / "f.npz", X=np.zeros((3, D), "f4"), m=np.zeros(3, "f4"))
    with pytest.raises(DataError, match=r"f\.npz: mask 'm' has dtype float32; a mask must be boolean or integer"):
        db.ingest(str(tmp_path / "f.npz"), tmp_path / "o.zarr", masks=["m"])
    assert not (tmp_path / "o.zarr").exists()
    # One label alone is the default label, as label_key's y is.
    db.ingest(src, tmp_path / "one.zarr", labels="h1", chunk_rows=16)
    assert db.open_dataset(tmp_path / "one.zarr").label_name == "h1"


def test_cli_ingest_repeated_labels_and_masks_then_verify(batches, tmp_path) -> None:
    folder, data = batches
    out = tmp_path / "o.zarr"
    runner = CliRunner()
    res = runner.invoke(main, ["ingest", str(folder / "b*.npz"), str(out), "--label-key", "h0", "--label", "h1",
                               "--label", "second=h2", "--mask", "m1", "--chunk-rows", "16"])
    assert res.exit_code == 0, res.output
    assert "with 3 labels (y, h1, second) and 1 mask (m1)" in res.output
    group = zarr.open_group(str(out), mode="r")
    np.testing.assert_array_equal(group["second"][:], np.concatenate([b["h2"] for b in data]))
    assert db.open_dataset(out).label_name == "y"  # label_key's y stays the default
    res = runner.invoke(main, ["ingest", str(folder / "b*.npz"), str(tmp_path / "p.zarr"), "--mask", "=m1"])
    assert res.exit_code == 2 and "'=m1': an empty name" in res.output
    # verify decodes the labels and masks too: a flipped byte in a mask chunk is found there.
    chunk = out / "m1" / "c" / "2"
    raw = bytearray(chunk.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    chunk.write_bytes(bytes(raw))
    res = runner.invoke(main, ["verify", str(out)])
    assert res.exit_code == 1
    assert "  m1: 7 chunks of (16,), 6 decoded" in res.output
    assert "corrupt   m1/c/2 (grid position (2,)): ValueError: Stored and computed checksum do not match" in res.output
    assert "FAILED: 1 corrupt" in res.output
