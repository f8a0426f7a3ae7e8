"""synth: bitwise determinism, ground truth, and the written store."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from daskbatch.io.synth import BLOCK_ROWS, synth


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint8)


@pytest.mark.parametrize("chunk_rows", [1, 333, BLOCK_ROWS, 5000, 12000])
def test_bitwise_identical_across_chunk_rows(chunk_rows):
    kw = dict(classes=3, informative=2, correlated=2, seed=7)
    ref = synth(12000, 6, chunk_rows=12000, **kw)
    rows = 12000 if chunk_rows > 1 else 700  # chunk_rows=1 is slow; a prefix suffices
    other = synth(rows, 6, chunk_rows=chunk_rows, **kw)
    np.testing.assert_array_equal(_bits(other.x.compute()), _bits(ref.x[:rows].compute()))
    np.testing.assert_array_equal(other.label.compute(), ref.label[:rows].compute())


def test_row_values_do_not_depend_on_row_count():
    short = synth(5000, 4, seed=3).x.compute()
    long = synth(9000, 4, seed=3).x.compute()
    np.testing.assert_array_equal(_bits(short), _bits(long[:5000]))


def test_seed_and_dtype():
    a = synth(1000, 3, seed=1).x.compute()
    b = synth(1000, 3, seed=2).x.compute()
    assert not np.array_equal(a, b)
    x64 = synth(1000, 3, seed=1, dtype="float64").x
    assert x64.dtype == np.float64
    with pytest.raises(ValueError, match="float32 or float64"):
        synth(10, 3, dtype="int8")


def test_ground_truth_matches_sample():
    n, d = 200_000, 8
    ds = synth(n, d, classes=3, informative=3, correlated=2, chunk_rows=50_000, seed=11)
    x = ds.x.compute().astype(np.float64)
    truth = ds.attrs["synth"]
    mean, cov = np.array(truth["true_mean"]), np.array(truth["true_cov"])
    std = np.sqrt(np.diag(cov))
    # Standard error of the mean is std / sqrt(n); allow 5 of them.
    assert np.all(np.abs(x.mean(axis=0) - mean) < 5 * std / np.sqrt(n))
    sample_cov = np.cov(x, rowvar=False)
    # Covariance: compare correlations, whose standard error is about 1/sqrt(n).
    corr_s = sample_cov / np.outer(std, std)
    corr_t = cov / np.outer(std, std)
    assert np.abs(corr_s - corr_t).max() < 6 / np.sqrt(n)
    assert np.allclose(np.sqrt(np.diag(sample_cov)), std, rtol=0.02)
    # correlated features really are correlated with their sources
    for i, (a, b) in zip(truth["correlated"], truth["correlated_sources"], strict=True):
        assert abs(corr_t[i, a]) + abs(corr_t[i, b]) > 0.05


def test_labels_and_informative_features():
    ds = synth(60_000, 6, classes=4, informative=2, seed=5, chunk_rows=20_000)
    x, y = ds.x.compute(), ds.label.compute()
    assert y.dtype == np.int32 and set(np.unique(y)) == {0, 1, 2, 3}
    truth = ds.attrs["synth"]
    priors = np.array(truth["class_priors"])
    np.testing.assert_allclose(np.bincount(y) / len(y), priors, atol=0.01)
    class_means = np.array(truth["class_means"])
    inf = truth["informative"]
    others = [j for j in range(6) if j not in inf]
    for k in range(4):
        np.testing.assert_allclose(
            x[y == k].mean(axis=0), class_means[k], atol=0.1 * np.abs(class_means).max() + 0.2
        )
    # Only the informative features have class-dependent means.
    assert np.ptp(class_means[:, others], axis=0).max() == 0
    assert np.ptp(class_means[:, inf], axis=0).min() > 0


def test_bad_parameters():
    with pytest.raises(ValueError, match="correlated"):
        synth(10, 3, correlated=3)
    with pytest.raises(ValueError, match="informative"):
        synth(10, 3, informative=2)
    with pytest.raises(ValueError, match="classes"):
        synth(10, 3, classes=1)


def test_written_store(tmp_path):
    path = tmp_path / "s.zarr"
    lazy = synth(10_000, 5, classes=2, chunk_rows=3000, seed=4)
    ds = synth(10_000, 5, classes=2, chunk_rows=3000, seed=4, path=path)
    np.testing.assert_array_equal(_bits(ds.x.compute()), _bits(lazy.x.compute()))
    np.testing.assert_array_equal(ds.label.compute(), lazy.label.compute())
    assert ds.store_chunks == (3000, 5) and ds.label_name == "y"
    assert ds.attrs["synth"]["true_mean"] == lazy.attrs["synth"]["true_mean"]
    g = zarr.open_group(str(path), mode="r")
    assert g.metadata.zarr_format == 3
    assert "zstd" in str(g["X"].compressors[0]).lower()
    with pytest.raises(FileExistsError, match="s.zarr.*overwrite"):
        synth(100, 5, path=path)
    again = synth(100, 5, path=path, overwrite=True)
    assert again.shape == (100, 5) and again.label is None


@pytest.mark.parametrize("what", ["file", "folder", "zarr group", "group of odd attributes"])
def test_foreign_data_at_the_path_is_refused_in_one_line_and_kept(tmp_path, what):
    """A user's file, folder or Zarr group at ``path``: one line naming it, no advice that cannot work, nothing lost."""
    path = tmp_path / "mine"
    if what == "file":
        path.write_text("mine")
    elif what == "folder":
        path.mkdir()
        (path / "notes.txt").write_text("mine")
    elif what == "zarr group":
        zarr.open_group(str(path), mode="w").create_array("a", shape=(2,), dtype="f8")
    else:  # zarr cannot open it (its attributes are no mapping): still someone's data
        path.mkdir()
        (path / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group", "attributes": "mine"}')
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    for overwrite in (False, True):
        with pytest.raises(FileExistsError) as info:
            synth(10, 2, path=path, overwrite=overwrite)
        message = str(info.value)
        assert str(path) in message and "\n" not in message
        assert "not a store daskbatch wrote" in message and "pass overwrite" not in message
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    if what == "file":
        assert path.read_text() == "mine"


def test_empty_and_tiny():
    ds = synth(0, 3)
    assert ds.x.shape == (0, 3)
    assert synth(1, 1).x.compute().shape == (1, 1)


def test_cli_synth(tmp_path):
    from click.testing import CliRunner

    from daskbatch.cli import main

    out = str(tmp_path / "s.zarr")
    runner = CliRunner()
    res = runner.invoke(
        main,
        [
            "synth",
            out,
            "--rows",
            "5000",
            "--features",
            "6",
            "--n-classes",
            "3",
            "--informative",
            "2",
            "--correlated",
            "1",
            "--chunk-rows",
            "1000",
            "--seed",
            "9",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "wrote 5,000 rows x 6 features" in res.output
    ref = synth(5000, 6, classes=3, informative=2, correlated=1, seed=9)
    from daskbatch.io.dataset import open_dataset

    np.testing.assert_array_equal(open_dataset(out).x.compute(), ref.x.compute())
    res = runner.invoke(main, ["synth", out, "--rows", "10", "--features", "6"])
    assert res.exit_code == 2 and res.output.count("\n") == 1 and "--overwrite" in res.output
    assert "was started by a different synth (differs in " in res.output and "rows: 5000 then, 10 now" in res.output
    res = runner.invoke(
        main, ["synth", out, "--rows", "10", "--features", "3", "--correlated", "3", "--overwrite"]
    )
    assert res.exit_code == 2 and res.output.count("\n") == 1 and "correlated" in res.output


def test_cli_synth_classes_are_values(tmp_path):
    from click.testing import CliRunner

    from daskbatch.cli import main
    from daskbatch.io.dataset import open_dataset

    runner = CliRunner()
    base = ["--rows", "3000", "--features", "3", "--chunk-rows", "1000"]
    by_number = runner.invoke(main, ["synth", str(tmp_path / "n.zarr"), *base, "--n-classes", "3"])
    by_values = runner.invoke(main, ["synth", str(tmp_path / "v.zarr"), *base, "--classes", "0,1,2"])
    assert by_number.exit_code == 0 and by_values.exit_code == 0, by_number.output + by_values.output
    y_n = open_dataset(str(tmp_path / "n.zarr"), label="y").label.compute()
    y_v = open_dataset(str(tmp_path / "v.zarr"), label="y").label.compute()
    np.testing.assert_array_equal(y_n, y_v)
    assert set(np.unique(y_n).tolist()) == {0, 1, 2}
    # synth labels 0..K-1: other values, or one integer (a count or a value?), are refused in one line.
    for given in ("3", "0,1,7"):
        res = runner.invoke(main, ["synth", str(tmp_path / "x.zarr"), *base, "--classes", given])
        assert res.exit_code == 2 and res.output.count("\n") == 1 and "--n-classes" in res.output, res.output
    assert not (tmp_path / "x.zarr").exists()


def test_write_under_distributed_client(tmp_path):
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster),
    ):
        ds = synth(20_000, 4, classes=2, chunk_rows=4000, path=tmp_path / "d.zarr")
        got = ds.x.compute()
    np.testing.assert_array_equal(got, synth(20_000, 4, classes=2).x.compute())


def test_memory_url():
    ds = synth(3000, 3, chunk_rows=1000, path="memory://daskbatch-synth-test.zarr", overwrite=True)
    np.testing.assert_array_equal(ds.x.compute(), synth(3000, 3).x.compute())


def test_synth_takes_the_path_first_like_the_cli(tmp_path) -> None:
    ds = synth(tmp_path / "p.zarr", rows=500, features=3, seed=2)
    np.testing.assert_array_equal(ds.x.compute(), synth(500, 3, seed=2).x.compute())
    with pytest.raises(TypeError, match="needs rows and features"):
        synth(tmp_path / "q.zarr", rows=10)
    with pytest.raises(TypeError, match="two paths"):
        synth(tmp_path / "q.zarr", rows=10, features=2, path=tmp_path / "r.zarr")


def test_a_killed_synth_is_finished_by_the_same_call_and_warns_until_then(tmp_path) -> None:
    """A real process killed while writing: the store says it is unfinished, and the same call completes it bitwise."""
    import subprocess
    import sys

    from daskbatch.errors import DataError, IncompleteStoreWarning
    from daskbatch.io.dataset import open_dataset

    path = tmp_path / "k.zarr"
    args = {"rows": 6000, "features": 4, "classes": 3, "chunk_rows": 500, "seed": 8}
    # os._exit in the progress callback: no cleanup runs, as with SIGKILL (the run lock stays behind).
    script = (f"import os, daskbatch as db\ndb.synth({str(path)!r}, **{args!r}, "
              "progress=lambda done, total, phase: done >= 3 and os._exit(9))")
    killed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240)
    assert killed.returncode == 9, killed.stderr
    with (pytest.warns(IncompleteStoreWarning, match="synth that did not finish"),
          pytest.raises(DataError, match="the synth that wrote them did not finish: re-run the same synth")):
        open_dataset(path)
    done = synth(path, **args)
    whole = synth(args.pop("rows"), args.pop("features"), **args)
    np.testing.assert_array_equal(_bits(done.x.compute()), _bits(whole.x.compute()))
    np.testing.assert_array_equal(done.label.compute(), whole.label.compute())
    assert done.attrs["complete"] is True and done.attrs["synth"]["true_mean"] == whole.attrs["synth"]["true_mean"]


def test_a_second_synth_of_the_same_path_is_refused_and_deletes_nothing(tmp_path) -> None:
    """While another process holds the path, synth is refused in one line before it looks at (or deletes) the store."""
    import subprocess
    import sys

    path = tmp_path / "busy.zarr"
    synth(path, rows=100, features=2)
    before = sorted(p.name for p in path.rglob("*"))
    script = ("import sys, time\nfrom daskbatch.runtime.runlock import RunLock, output_lock_path\n"
              f"RunLock(output_lock_path({str(path)!r}), 'output').acquire()\nprint('held', flush=True)\ntime.sleep(120)")
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(Exception) as refused:
            synth(path, rows=100, features=2, overwrite=True)
    finally:
        holder.kill()
        holder.wait()
    assert str(path) in str(refused.value) and "\n" not in str(refused.value)
    assert sorted(p.name for p in path.rglob("*")) == before


def test_an_unfinished_url_store_of_the_same_call_is_completed_and_another_refused() -> None:
    url = "memory://daskbatch-synth-resume.zarr"
    args = {"rows": 3000, "features": 3, "chunk_rows": 1000, "seed": 5}
    synth(url, **args, overwrite=True)
    zarr.open_group(url, mode="r+").update_attributes({"complete": False})  # as a killed run leaves it
    again = synth(url, **args)
    assert again.attrs["complete"] is True
    np.testing.assert_array_equal(again.x.compute(), synth(3000, 3, seed=5).x.compute())
    with pytest.raises(FileExistsError, match="daskbatch-synth-resume.zarr.*not a synth store of these parameters"):
        synth(url, **{**args, "seed": 6})


def test_a_zarr_group_at_a_url_that_daskbatch_did_not_write_is_kept_even_with_overwrite() -> None:
    url = "memory://daskbatch-synth-theirs.zarr"
    zarr.open_group(url, mode="w").create_array("a", data=np.arange(3.0))
    with pytest.raises(FileExistsError, match="theirs.zarr already exists and is not a store daskbatch wrote") as info:
        synth(url, rows=10, features=2, overwrite=True)
    assert "pass overwrite" not in str(info.value)
    np.testing.assert_array_equal(zarr.open_group(url, mode="r")["a"][:], np.arange(3.0))


def test_a_new_store_in_folders_not_made_yet(tmp_path) -> None:
    ds = synth(tmp_path / "a" / "b" / "s.zarr", rows=10, features=2)
    assert ds.shape == (10, 2)


@pytest.mark.parametrize("writer", ["synth", "ingest"])
def test_a_row_store_read_as_a_summary_is_one_line_naming_its_writer(tmp_path, writer: str) -> None:
    """Its manifest and done-log beside the arrays are the writer's own files, not zarr's warning about foreign objects."""
    import daskbatch as db

    path = tmp_path / "rows.zarr"
    if writer == "synth":
        synth(path, rows=20, features=2)
    else:
        np.save(tmp_path / "src.npy", np.ones((20, 2)))
        db.ingest(str(tmp_path / "src.npy"), path)
    with pytest.raises(db.DataError, match=rf"holds arrays X, it is a daskbatch {writer} output\)") as info:
        db.load_summary(path)
    assert "\n" not in str(info.value)
