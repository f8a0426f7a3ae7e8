"""ingest: many batch files -> one Zarr store; validation, resume, failures, bounded memory."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile

import numpy as np
import pytest
import zarr
from click.testing import CliRunner

from daskbatch.cli import main
from daskbatch.errors import DataError, IncompleteStoreWarning
from daskbatch.io.dataset import open_dataset
from daskbatch.io.ingest import ingest
from daskbatch.io.ingest.passes import pieces
from daskbatch.io.rowstore import CREATING_FILE, DONE_FILE, read_done

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
D = 5


def _batches(rng, sizes, dtype="f4"):
    xs = [rng.standard_normal((n, D)).astype(dtype) for n in sizes]
    ys = [rng.integers(0, 4, n).astype("i4") for n in sizes]
    return xs, ys


def _write_npz(folder, xs, ys, compressed=False):
    save = np.savez_compressed if compressed else np.savez
    for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
        save(folder / f"batch_{i}.npz", X=x, y=y)


def test_pieces_cover_every_row_once():
    offsets = np.array([0, 3, 3, 10, 11, 25])
    seen = []
    for c in range(-(-25 // 4)):
        for p in pieces(offsets, 4, c):
            seen.extend(range(offsets[p.index] + p.start, offsets[p.index] + p.stop))
            assert 0 <= p.dest < 4
    assert seen == list(range(25))


@pytest.mark.parametrize("compressed", [False, True])
def test_npz_roundtrip_misaligned_chunks(tmp_path, compressed):
    rng = np.random.default_rng(0)
    sizes = [0, 130, 7, 400, 1, 99, 250]  # includes an empty batch
    xs, ys = _batches(rng, sizes)
    src = tmp_path / "src"
    src.mkdir()
    _write_npz(src, xs, ys, compressed)
    out = tmp_path / "out.zarr"
    report = ingest(str(src / "batch_*.npz"), out, label_key="y", chunk_rows=64, workers=3)
    assert report.rows == sum(sizes) and report.files == len(sizes)
    assert report.chunks == report.chunks_written == -(-sum(sizes) // 64)
    assert report.bytes_written > 0 and report.ratio > 0
    assert "rows x 5 features" in report.summary()
    ds = open_dataset(out)
    # natural order: batch_2 before batch_10 does not arise here, but order must be batch_0..6
    np.testing.assert_array_equal(ds.x.compute(), np.concatenate(xs))
    np.testing.assert_array_equal(ds.label.compute(), np.concatenate(ys))
    assert ds.store_chunks == (64, D)
    attrs = zarr.open_group(str(out), mode="r").attrs
    assert attrs["daskbatch_output"] == "ingest" and attrs["complete"] is True


def test_mixed_formats_and_natural_order(tmp_path):
    h5py = pytest.importorskip("h5py")
    rng = np.random.default_rng(1)
    xs, ys = _batches(rng, [50, 60, 70, 80, 90])
    np.save(tmp_path / "b_2.npy", xs[0])
    np.save(tmp_path / "b_10.npy", np.asfortranarray(xs[1]))  # natural sort puts b_10 after b_2
    np.savez(tmp_path / "c.npz", X=xs[2])
    with h5py.File(tmp_path / "d.h5", "w") as f:
        f["X"] = xs[3]
    z = zarr.open_group(str(tmp_path / "e.zarr"), mode="w")
    z.create_array("X", shape=xs[4].shape, chunks=(32, D), dtype="f4")[:] = xs[4]
    sources = [
        str(tmp_path / "b_*.npy"),
        tmp_path / "c.npz",
        tmp_path / "d.h5",
        tmp_path / "e.zarr",
    ]
    ingest(sources, tmp_path / "out.zarr", chunk_rows=45)
    got = open_dataset(tmp_path / "out.zarr").x.compute()
    np.testing.assert_array_equal(got, np.concatenate(xs))


def test_dtype_rules(tmp_path):
    rng = np.random.default_rng(2)
    np.save(tmp_path / "a.npy", rng.standard_normal((10, D)).astype("f4"))
    np.save(tmp_path / "b.npy", rng.standard_normal((10, D)))  # float64
    np.save(tmp_path / "c.npy", rng.integers(0, 9, (10, D)))
    with pytest.raises(
        DataError, match=r"mixed dtypes: float32 .*a\.npy.*float64 .*b\.npy.*--dtype"
    ):
        ingest(str(tmp_path / "*.npy"), tmp_path / "o.zarr")
    assert not (tmp_path / "o.zarr").exists()
    report = ingest(str(tmp_path / "*.npy"), tmp_path / "o.zarr", dtype="float32")
    assert open_dataset(tmp_path / "o.zarr").x.dtype == np.float32 and report.rows == 30
    np.save(tmp_path / "d.npy", (rng.standard_normal((10, D)) * 1j))
    with pytest.raises(DataError, match=r"d\.npy: dtype complex128 cannot be cast to float32"):
        ingest(str(tmp_path / "*.npy"), tmp_path / "p.zarr", dtype="float32")


def test_every_bad_file_is_named_before_writing(tmp_path):
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((20, D)).astype("f4"), np.zeros(20, "i4")
    np.savez(tmp_path / "good.npz", X=x, y=y)
    np.savez(tmp_path / "wrong_features.npz", X=x[:, :3], y=y)
    np.savez(tmp_path / "missing_key.npz", data=x, y=y)
    np.savez(tmp_path / "short_label.npz", X=x, y=y[:-1])
    (tmp_path / "empty.npz").write_bytes(b"")
    (tmp_path / "garbage.npz").write_bytes(b"this is not a zip file at all")
    whole = (tmp_path / "good.npz").read_bytes()
    (tmp_path / "truncated_zip.npz").write_bytes(whole[: len(whole) // 2])
    np.save(tmp_path / "truncated.npy", x)
    raw = (tmp_path / "truncated.npy").read_bytes()
    (tmp_path / "truncated.npy").write_bytes(raw[:-40])
    np.save(tmp_path / "one_d.npy", np.zeros(5, "f4"))
    sources = [str(tmp_path / "*.npz"), str(tmp_path / "*.npy")]
    out = tmp_path / "out.zarr"
    with pytest.raises(DataError) as err:
        ingest(sources, out, x_key="X", label_key="y")
    msg = str(err.value)
    expect = {
        "wrong_features.npz": "has 3 features",
        "missing_key.npz": "missing x key 'X' (keys in file: data, y)",
        "short_label.npz": "label 'y' has shape (19,) but x has 20 rows",
        "empty.npz": "empty file",
        "garbage.npz": "not a zip file",
        "truncated_zip.npz": "",
        "truncated.npy": ".npy files hold one array",  # label_key given for .npy
    }
    for name, reason in expect.items():
        line = next((ln for ln in msg.splitlines() if name in ln), None)
        assert line is not None, f"{name} not reported in:\n{msg}"
        assert reason in line, line
    assert "good.npz" not in msg
    assert not out.exists()
    # Without labels, the .npy problems themselves show up.
    with pytest.raises(DataError) as err:
        ingest(str(tmp_path / "*.npy"), out)
    msg = str(err.value)
    assert (
        "truncated.npy: file is truncated: header says (20, 5) float32 = 400 bytes, found 360"
        in msg
    )
    assert "one_d.npy: x has shape (5,); expected 2-D" in msg


def test_zarr_source_whose_key_is_a_group_is_named(tmp_path):
    src = zarr.open_group(str(tmp_path / "src.zarr"), mode="w")
    src.create_array("X", data=np.zeros((10, D), "f4"))
    src.create_group("y")  # a group where the label array should be
    with pytest.raises(DataError) as err:
        ingest([tmp_path / "src.zarr"], tmp_path / "out.zarr", x_key="X", label_key="y")
    assert "src.zarr: label key 'y' is a Zarr group, not an array" in str(err.value)
    assert not (tmp_path / "out.zarr").exists()
    # A missing key is named as describe names a missing array: with the arrays there (one lookup serves both).
    with pytest.raises(DataError) as err:
        ingest([tmp_path / "src.zarr"], tmp_path / "out.zarr", x_key="X", label_key="z")
    assert "src.zarr: label key 'z' not found in " in str(err.value) and "arrays there: ['X']" in str(err.value)


def test_missing_sources(tmp_path):
    with pytest.raises(DataError, match=r"nomatch_\*\.npz: no files match"):
        ingest(str(tmp_path / "nomatch_*.npz"), tmp_path / "o.zarr")
    with pytest.raises(DataError, match=r"absent\.npy: no such file"):
        ingest([tmp_path / "absent.npy"], tmp_path / "o.zarr")


def test_existing_output_refused_unless_overwrite(tmp_path):
    np.save(tmp_path / "a.npy", np.ones((10, D), "f4"))
    out = tmp_path / "out.zarr"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    # Not daskbatch's: refused with and without overwrite (which never deletes other data).
    for overwrite in (False, True):
        with pytest.raises(FileExistsError, match=r"out\.zarr.*not a store daskbatch wrote.*remove it yourself"):
            ingest(str(tmp_path / "a.npy"), out, overwrite=overwrite)
        assert (out / "precious.txt").read_text() == "keep me"
    ingest(str(tmp_path / "a.npy"), tmp_path / "ours.zarr")
    np.save(tmp_path / "b.npy", np.zeros((7, D), "f4"))
    with pytest.raises(DataError, match=r"started by a different ingest \(differs in source \S*a\.npy, source \S*b\.npy\).*--overwrite"):
        ingest(str(tmp_path / "b.npy"), tmp_path / "ours.zarr")
    ingest(str(tmp_path / "b.npy"), tmp_path / "ours.zarr", overwrite=True)
    assert open_dataset(tmp_path / "ours.zarr").shape == (7, D)


def test_existing_group_with_odd_attributes_refused_in_one_line(tmp_path):
    # A Zarr group of someone else's whose attributes are no mapping: refused like any other data, not a traceback.
    np.save(tmp_path / "a.npy", np.ones((10, D), "f4"))
    out = tmp_path / "out.zarr"
    out.mkdir()
    (out / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "group", "attributes": ["x"]}))
    with pytest.raises(FileExistsError, match=r"out\.zarr.*not a store daskbatch wrote"):
        ingest(str(tmp_path / "a.npy"), out)
    assert json.loads((out / "zarr.json").read_text())["attributes"] == ["x"]


def test_rerun_is_noop_and_different_inputs_refused(tmp_path):
    rng = np.random.default_rng(4)
    xs, ys = _batches(rng, [30, 30, 30])
    _write_npz(tmp_path, xs, ys)
    out = tmp_path / "out.zarr"
    ingest(str(tmp_path / "*.npz"), out, chunk_rows=16)
    again = ingest(str(tmp_path / "*.npz"), out, chunk_rows=16)
    assert again.chunks_written == 0 and "already done" in again.summary()
    with pytest.raises(DataError, match=r"option chunk_rows: 16 then, 32 now"):
        ingest(str(tmp_path / "*.npz"), out, chunk_rows=32)
    np.savez(tmp_path / "batch_3.npz", X=xs[0], y=ys[0])
    with pytest.raises(DataError, match=r"differs in source /\S*batch_3\.npz\)"):
        ingest(str(tmp_path / "*.npz"), out, chunk_rows=16)
    os.remove(tmp_path / "batch_3.npz")
    np.savez(tmp_path / "batch_1.npz", X=xs[1] + 1, y=ys[1])
    os.utime(tmp_path / "batch_1.npz", ns=(1, 1))
    with pytest.raises(DataError, match=r"differs in source /\S*batch_1\.npz\.mtime_ns: \d+ then, 1 now\)"):
        ingest(str(tmp_path / "*.npz"), out, chunk_rows=16)


def test_symlinked_output_refused_and_overwrite_replaces_only_the_link(tmp_path):
    """A link at ``out`` is never written through: refused in one line; overwrite replaces the link, not its target."""
    np.save(tmp_path / "a.npy", np.arange(10 * D, dtype="f4").reshape(10, D))
    target = tmp_path / "target.zarr"
    ingest(str(tmp_path / "a.npy"), target)  # ours, and the same call: a link must still not resume into it
    before = {p: p.read_bytes() for p in target.rglob("*") if p.is_file()}
    link = tmp_path / "link.zarr"
    link.symlink_to(target)
    with pytest.raises(DataError, match=r"link\.zarr' is a symbolic link, not a daskbatch ingest output;.*overwrite"):
        ingest(str(tmp_path / "a.npy"), link)
    report = ingest(str(tmp_path / "a.npy"), link, overwrite=True)
    assert not link.is_symlink() and report.chunks_written == report.chunks
    assert {p: p.read_bytes() for p in target.rglob("*") if p.is_file()} == before


def test_resume_of_a_store_whose_array_was_removed_or_replaced(tmp_path):
    """Resuming a store whose X was deleted or made a group: one line naming the store and the array."""
    np.save(tmp_path / "a.npy", np.ones((10, D), "f4"))
    out = tmp_path / "out.zarr"
    ingest(str(tmp_path / "a.npy"), out, chunk_rows=4)
    zarr.open_group(str(out), mode="r+").attrs["complete"] = False
    shutil.rmtree(out / "X")
    with pytest.raises(DataError, match=r"out\.zarr' has no array 'X': it was changed after it was started; .*overwrite"):
        ingest(str(tmp_path / "a.npy"), out, chunk_rows=4)
    zarr.open_group(str(out / "X"), mode="w")
    with pytest.raises(DataError, match=r"out\.zarr' has a group, not an array 'X'"):
        ingest(str(tmp_path / "a.npy"), out, chunk_rows=4)


def test_unwritable_output(tmp_path):
    np.save(tmp_path / "a.npy", np.ones((10, D), "f4"))
    (tmp_path / "afile").write_text("x")
    with pytest.raises(OSError, match=r"cannot create .*afile/out\.zarr': .*afile' is not a directory$"):
        ingest(str(tmp_path / "a.npy"), tmp_path / "afile" / "out.zarr")
    with pytest.raises(FileNotFoundError, match=r"directory .*nodir.* does not exist"):
        ingest(str(tmp_path / "a.npy"), tmp_path / "nodir" / "out.zarr")


def _run_py(code: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": REPO}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=REPO,
    )


@pytest.mark.slow
def test_disk_full_leaves_store_incomplete_then_resumes(tmp_path):
    """RLIMIT_FSIZE makes large chunk writes fail with EFBIG, like a full disk."""
    src = tmp_path / "src"
    src.mkdir()
    rng = np.random.default_rng(5)
    # Zero batches compress to tiny chunks; random ones do not: some chunks fit the limit.
    for i in range(8):
        x = np.zeros((256, 64), "f4") if i % 2 else rng.standard_normal((256, 64)).astype("f4")
        np.save(src / f"b{i}.npy", x)
    out = tmp_path / "out.zarr"
    code = f"""
        import resource, signal, sys
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))
        from daskbatch.io.ingest import ingest
        try:
            ingest({str(src / "*.npy")!r}, {str(out)!r}, chunk_rows=256, workers=2)
        except OSError as exc:
            print("ERR", exc)
            sys.exit(3)
    """
    proc = _run_py(code)
    assert proc.returncode == 3, proc.stderr
    assert (
        "writing output chunk" in proc.stdout and "re-run the same command to resume" in proc.stdout
    )
    assert zarr.open_group(str(out), mode="r").attrs["complete"] is False
    done = read_done(str(out))
    assert done and len(done) < 8
    with (
        pytest.warns(IncompleteStoreWarning, match="did not finish"),
        pytest.raises(DataError, match=r"chunk\(s\) of array 'X'.*are missing.*re-run the same ingest"),
    ):
        open_dataset(out)
    report = ingest(str(src / "*.npy"), out, chunk_rows=256, workers=2)
    assert report.chunks_written == 8 - len(done)
    expected = np.concatenate([np.load(src / f"b{i}.npy") for i in range(8)])
    np.testing.assert_array_equal(open_dataset(out).x.compute(), expected)


def test_torn_done_log_line_is_ignored(tmp_path):
    (tmp_path / DONE_FILE).write_text("0\n1\n2\n1")
    assert read_done(str(tmp_path)) == {0, 1, 2}


def _peak_rss(src: str, out: str) -> int:
    code = f"""
        import resource
        from daskbatch.io.ingest import ingest
        ingest({src!r}, {out!r}, chunk_rows=4096, workers=2)
        print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    """
    proc = _run_py(code)
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.split()[-1]) * 1024


@pytest.mark.slow
def test_peak_memory_flat_in_number_of_files(tmp_path):
    rng = np.random.default_rng(6)
    batch = rng.standard_normal((2000, 32)).astype("f4")  # 250 KiB per file
    for n in (30, 200):
        d = tmp_path / f"s{n}"
        d.mkdir()
        for i in range(n):
            np.savez(d / f"b{i}.npz", X=batch)
    small = _peak_rss(str(tmp_path / "s30" / "*.npz"), str(tmp_path / "o30.zarr"))
    big = _peak_rss(str(tmp_path / "s200" / "*.npz"), str(tmp_path / "o200.zarr"))
    data_growth = 170 * batch.nbytes  # 42 MiB more input
    assert big - small < data_growth / 3, (small, big)


def test_cli_ingest(tmp_path):
    rng = np.random.default_rng(7)
    xs, ys = _batches(rng, [40, 41])
    _write_npz(tmp_path, xs, ys)
    runner = CliRunner()
    out = str(tmp_path / "o.zarr")
    res = runner.invoke(
        main,
        [
            "ingest",
            str(tmp_path / "*.npz"),
            out,
            "--label-key",
            "y",
            "--chunk-rows",
            "16",
            "--compressor",
            "lz4",
            "--workers",
            "2",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "ingested 81 rows x 5 features with 1 label (y) from 2 files" in res.output
    assert "compression ratio" in res.output and "MiB/s" in res.output
    res = runner.invoke(main, ["ingest", str(tmp_path / "*.npz"), out, "--dtype", "float64"])
    assert res.exit_code == 2 and "was started by a different ingest (differs in dtype:" in res.output
    res = runner.invoke(main, ["ingest", str(tmp_path / "nothing*.npy"), out])
    assert res.exit_code == 2 and "no files match" in res.output
    res = runner.invoke(main, ["inspect", out, "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["shape"] == [81, 5]


def test_zip_member_offset_is_exact(tmp_path):
    """Uncompressed .npz members are memory-mapped at their byte offset inside the zip."""
    x = np.arange(60, dtype="f8").reshape(12, D)
    np.savez(tmp_path / "a.npz", X=x, other=np.ones(3))
    with zipfile.ZipFile(tmp_path / "a.npz") as zf:
        assert zf.getinfo("X.npy").compress_type == zipfile.ZIP_STORED
    ingest(str(tmp_path / "a.npz"), tmp_path / "o.zarr", chunk_rows=5)
    np.testing.assert_array_equal(open_dataset(tmp_path / "o.zarr").x.compute(), x)


def test_interrupted_creation_is_restarted(tmp_path):
    """A store left with its creating marker (killed while being created) is ours to redo; without it, refused."""
    np.save(tmp_path / "a.npy", np.ones((10, D), "f4"))
    out = tmp_path / "out.zarr"
    zarr.open_group(str(out), mode="w", attributes={"daskbatch_output": "ingest", "complete": False})
    with pytest.raises(DataError, match=r"out\.zarr' is a daskbatch ingest output without its daskbatch-output\.json"):
        ingest(str(tmp_path / "a.npy"), out)
    (out / CREATING_FILE).write_text("ingest\n")
    report = ingest(str(tmp_path / "a.npy"), out)
    assert report.rows == 10 and open_dataset(out).complete and not (out / CREATING_FILE).exists()


@pytest.mark.slow
def test_sigkill_then_same_command_resumes(tmp_path):
    """A real kill -9 mid-ingest; the same command afterwards writes only what is missing."""
    import signal
    import time

    src = tmp_path / "src"
    src.mkdir()
    rng = np.random.default_rng(8)
    xs = [rng.standard_normal((300, 16)).astype("f4") for _ in range(40)]
    for i, x in enumerate(xs):
        np.save(src / f"b{i}.npy", x)
    out = tmp_path / "out.zarr"
    code = f"""
        from daskbatch.io.ingest import ingest
        ingest({str(src / "*.npy")!r}, {str(out)!r}, chunk_rows=40, workers=1)
    """
    env = {**os.environ, "PYTHONPATH": REPO}
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=env)
    try:
        deadline = time.monotonic() + 30
        while len(read_done(str(out))) < 5 and time.monotonic() < deadline:
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    done = read_done(str(out))
    n_chunks = 40 * 300 // 40
    assert 5 <= len(done) < n_chunks, "the run finished before it could be killed"
    assert zarr.open_group(str(out), mode="r").attrs["complete"] is False
    report = ingest(str(src / "*.npy"), out, chunk_rows=40, workers=1)
    assert report.chunks_written == n_chunks - len(done)
    np.testing.assert_array_equal(open_dataset(out).x.compute(), np.concatenate(xs))
