"""db.transform and its steps: exact against NumPy/sklearn, resumable after SIGKILL, never over the input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import array_api_strict
import numpy as np
import pytest
import zarr
from click.testing import CliRunner
from sklearn.decomposition import PCA as SkPCA

import daskbatch as db
from daskbatch.cli import main
from daskbatch.errors import DataError
from daskbatch.io.rowstore import DONE_FILE, OUTPUT_ATTR

ROOT = Path(__file__).parents[1]


def data(rows: int = 900, d: int = 7, seed: int = 0) -> np.ndarray:
    """Correlated features with different scales and offsets, and one constant column."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, d)) @ (rng.normal(size=(d, d)) * np.linspace(3, 0.3, d)) + rng.uniform(-40, 40, d)
    x[:, 5] = 2.5
    return x


def store(tmp_path: Path, x: np.ndarray, y: np.ndarray | None = None, chunk_rows: int = 100) -> str:
    path = str(tmp_path / "in.zarr")
    group = zarr.open_group(path, mode="w", zarr_format=3,
                            attributes={"daskbatch": {"x": "X", "label": "y" if y is not None else None}})
    group.create_array("X", data=x, chunks=(chunk_rows, x.shape[1]))
    if y is not None:
        group.create_array("y", data=y, chunks=(chunk_rows,))
    return path


def chunk_bytes(path: str) -> dict[str, bytes]:
    """Every chunk file of every array, by relative path: what 'bitwise identical store' compares."""
    out = {}
    for root, _, files in os.walk(path):
        for f in files:
            rel = os.path.relpath(os.path.join(root, f), path)
            if os.sep + "c" + os.sep in os.sep + rel:
                out[rel] = Path(root, f).read_bytes()
    return out


def test_select_then_standardize_equals_numpy(tmp_path: Path) -> None:
    x = data()
    y = (np.arange(len(x)) % 3).astype(np.int32)
    src = store(tmp_path, x, y)
    s = db.describe(src, stats=["moments"])
    sel = db.select(s, score="variance", mode="k", param=4)
    idx = sel.indices
    report = db.transform(src, [db.steps.select(sel), db.steps.standardize(s)], tmp_path / "z.zarr", chunk_rows=128)
    assert report.blocks == 8 and report.written == tuple(range(8)) and report.features == 4

    out = db.open_dataset(report.path)
    expected = (x[:, idx] - s.arrays.mean[idx]) / x[:, idx].std(axis=0)  # the population std, as StandardScaler
    np.testing.assert_allclose(out.x.compute(), expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(out.label.compute(), y)  # the label is carried through unchanged
    assert out.feature_names == [s.feature_names[i] for i in idx]
    attrs = dict(zarr.open_group(report.path).attrs)
    assert attrs[OUTPUT_ATTR] == "transform" and attrs["complete"] is True
    prov = attrs["provenance"]
    assert prov["input"]["path"] == os.path.abspath(src) and prov["input"]["shape"] == [900, 7]
    assert prov["input"]["dtype"] == "float64" and prov["input"]["store_chunks"] == [100, 7]
    assert [st["step"] for st in prov["steps"]] == ["select", "standardize"]
    assert prov["steps"][0]["indices"] == idx.tolist()
    assert prov["summaries"] == [{k: s.provenance[k] for k in ("source", "created", "ddof", "rows")}]
    assert prov["daskbatch_version"] == db.__version__
    arr = zarr.open_array(report.path, path="X")
    assert [type(c).__name__ for c in arr.compressors] == ["ZstdCodec", "Crc32cCodec"]


def test_project_equals_sklearn_up_to_sign(tmp_path: Path) -> None:
    x = data(rows=600, d=6, seed=2)
    s = db.describe(x, stats=["moments", "cov"], run=db.RunOptions(plan=None))
    report = db.transform(x, [db.steps.project(s, 3)], tmp_path / "p.zarr", chunk_rows=97)
    got = db.open_dataset(report.path).x.compute()
    ref = SkPCA(3, svd_solver="full").fit(x).transform(x)
    signs = np.sign(np.sum(got * ref, axis=0))
    assert np.all(signs != 0)
    np.testing.assert_allclose(got * signs, ref, rtol=0, atol=1e-8 * np.abs(ref).max())
    assert report.feature_names == ("pc1", "pc2", "pc3")


def test_clip_and_constant_features(tmp_path: Path) -> None:
    x = data(rows=300)
    s = db.describe(x, stats=["moments"], run=db.RunOptions(plan=None))
    report = db.transform(x, [db.steps.standardize(s), db.steps.clip(-1.5, None)], tmp_path / "c.zarr",
                          dtype="float32")
    got = db.open_dataset(report.path).x.compute()
    assert got.dtype == np.float32
    std0 = x.std(axis=0)  # standardize divides by the population std
    z = np.where(std0 == 0, 0.0, (x - s.arrays.mean) / np.where(std0 == 0, 1.0, std0))
    np.testing.assert_allclose(got, np.maximum(z, -1.5).astype(np.float32), rtol=1e-6)
    assert np.all(got[:, 5] == 0)  # the constant feature
    with pytest.raises(ValueError, match=r"1 constant feature\(s\) \(std 0\): f5"):
        db.steps.standardize(s, constant="error")
    with pytest.raises(ValueError, match="lo 2.0 is above hi 1.0"):
        db.steps.clip(2, 1)


def test_steps_take_any_array_api_block() -> None:
    """The steps use the array API only: an array_api_strict block (as a CuPy one) stays in its namespace."""
    x = data(rows=50)
    s = db.describe(x, stats=["moments", "cov"], run=db.RunOptions(plan=None))
    steps = [db.steps.select([0, 2, 3]), db.steps.standardize(s), db.steps.clip(-1, 1)]
    bound, names = db.steps.bind_all(steps, s.feature_names)
    assert names == ("f0", "f2", "f3")
    got = db.steps.apply_all(bound, array_api_strict.asarray(x))
    assert type(got) is type(array_api_strict.asarray(x))
    ref = np.clip((x[:, [0, 2, 3]] - s.arrays.mean[[0, 2, 3]]) / x[:, [0, 2, 3]].std(axis=0), -1, 1)
    np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-13)
    with pytest.raises(ValueError, match="project: the PCA was fitted on 7 features"):
        db.steps.bind_all([db.steps.select([0, 1]), db.steps.project(s, 2)], s.feature_names)


def test_refuses_the_input_and_foreign_paths(tmp_path: Path) -> None:
    x = data(rows=200)
    src = store(tmp_path, x)
    s = db.describe(src, stats=["moments"])
    steps = [db.steps.standardize(s)]
    before = chunk_bytes(src)
    for target in (src, os.path.join(src, "X"), str(tmp_path)):
        with pytest.raises(ValueError, match=r"the output .* (is|is inside|holds) the input .*; choose another path$"):
            db.transform(src, steps, target, overwrite=True)
    foreign = tmp_path / "notes"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not a store daskbatch wrote"):
        db.transform(src, steps, foreign, overwrite=True)
    assert (foreign / "keep.txt").read_text() == "mine" and chunk_bytes(src) == before

    out = tmp_path / "z.zarr"
    db.transform(src, steps, out)
    with pytest.raises(DataError, match="different transform .*step 1"):
        db.transform(src, [db.steps.clip(0, 1)], out)
    assert db.transform(src, [db.steps.clip(0, 1)], out, overwrite=True).written == (0,)


def _cli_args(tmp_path: Path, src: str, out: Path) -> list[str]:
    return ["transform", src, "--select", str(tmp_path / "sel.csv"), "--standardize", str(tmp_path / "stats.zarr"),
            "--clip", "-2.5:2.5", "--out", str(out), "--chunk-rows", "50"]


#: The CLI with every Clip.apply slowed down, so that a kill lands mid-run.
SLOW_CLI = (
    "import sys, time\n"
    "import daskbatch.transforms.steps as s\n"
    "apply = s.Clip.apply\n"
    "s.Clip.apply = lambda self, b: (time.sleep(0.15), apply(self, b))[1]\n"
    "from daskbatch.cli import main\n"
    "main(sys.argv[1:])\n"
)


def test_cli_resumes_after_sigkill_bitwise(tmp_path: Path) -> None:
    x = data(rows=3000, d=6, seed=5)
    y = (np.arange(len(x)) % 4).astype(np.int32)
    src = store(tmp_path, x, y, chunk_rows=50)
    s = db.describe(src, stats=["moments"])
    s.save(tmp_path / "stats.zarr")
    db.select(s, score="variance", mode="k", param=4).save(tmp_path / "sel.csv")

    clean = tmp_path / "clean.zarr"
    result = CliRunner().invoke(main, _cli_args(tmp_path, src, clean))
    assert result.exit_code == 0, result.output
    assert "60 of 60 row blocks" in result.output

    killed = tmp_path / "killed.zarr"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DASK_NUM_WORKERS": "2"}
    proc = subprocess.Popen([sys.executable, "-c", SLOW_CLI, *_cli_args(tmp_path, src, killed)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    log = killed / DONE_FILE
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if log.exists() and log.read_text().count("\n") >= 8:
            break
        time.sleep(0.02)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = {int(v) for v in log.read_text().split()}
    assert 8 <= len(done) < 60
    assert zarr.open_group(str(killed)).attrs["complete"] is False

    # The same job again (as the CLI builds it): only the blocks missing from the log are computed.
    steps = [db.steps.select(db.load_selection(tmp_path / "sel.csv")),
             db.steps.standardize(db.load_summary(tmp_path / "stats.zarr")), db.steps.clip(-2.5, 2.5)]
    report = db.transform(src, steps, killed, chunk_rows=50)
    assert set(report.written) == set(range(60)) - done
    assert chunk_bytes(str(killed)) == chunk_bytes(str(clean))
    assert zarr.open_group(str(killed)).attrs["complete"] is True
    again = CliRunner().invoke(main, _cli_args(tmp_path, src, killed))
    assert again.exit_code == 0 and "0 of 60 row blocks" in again.output and "(60 already done)" in again.output


#: A transform killed (SIGKILL) at the instant zarr renames its temporary copy of label chunk ``y/c/3`` into place:
#: an audit hook on ``os.rename``, so the real LocalStore writes and the real kill land where the flaky run's did.
KILL_AT_LABEL_CHUNK = (
    "import os, signal, sys\n"
    "def hook(event, args):\n"
    "    if event == 'os.rename' and str(args[1]).endswith(os.path.join('', 'y', 'c', '3')):\n"
    "        os.kill(os.getpid(), signal.SIGKILL)\n"
    "sys.addaudithook(hook)\n"
    "import daskbatch as db\n"
    "db.transform(sys.argv[1], [db.steps.clip(-1, 1)], sys.argv[2], chunk_rows=50)\n"
)


def test_resume_after_a_kill_mid_chunk_write_leaves_the_store_bitwise_clean(tmp_path: Path) -> None:
    """The flaky sigkill test's cause: a kill inside zarr's atomic chunk write leaves ``<chunk>.<uuid>.partial``."""
    x = data(rows=200, d=6, seed=1)
    y = (np.arange(len(x)) % 4).astype(np.int32)
    src = store(tmp_path, x, y, chunk_rows=50)
    clean = tmp_path / "clean.zarr"
    db.transform(src, [db.steps.clip(-1, 1)], clean, chunk_rows=50)

    killed = tmp_path / "killed.zarr"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", KILL_AT_LABEL_CHUNK, src, str(killed)], env=env,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    # What the kill left: label chunk 3 written whole but not renamed, and no block logged as done.
    assert [f for f in os.listdir(killed / "y" / "c") if f.startswith("3.") and f.endswith(".partial")]
    assert not (killed / DONE_FILE).exists() or 3 not in {int(v) for v in (killed / DONE_FILE).read_text().split()}

    report = db.transform(src, [db.steps.clip(-1, 1)], killed, chunk_rows=50)
    assert 3 in report.written
    assert chunk_bytes(str(killed)) == chunk_bytes(str(clean))  # no stray temporary beside the chunks
    assert not [f for _, _, files in os.walk(killed) for f in files if f.endswith(".partial")]
    np.testing.assert_array_equal(db.open_dataset(str(killed)).label.compute(), y)


def test_cli_names_bad_options(tmp_path: Path) -> None:
    src = store(tmp_path, data(rows=100))
    runner = CliRunner()
    bad = runner.invoke(main, ["transform", src, "--clip", "3", "--out", str(tmp_path / "o.zarr")])
    assert bad.exit_code == 2 and "expected LO:HI" in bad.output
    none = runner.invoke(main, ["transform", src, "--out", str(tmp_path / "o.zarr")])
    assert none.exit_code == 2 and "give at least one step" in none.output
    over = runner.invoke(main, ["transform", src, "--clip", "0:1", "--out", src])
    assert over.exit_code == 2 and "is the input" in over.output


@pytest.mark.parametrize("steps", [db.steps.clip(-1, 1), 3])
def test_steps_that_are_not_a_list_of_steps_are_named(tmp_path: Path, steps) -> None:  # noqa: ANN001
    out = tmp_path / "o.zarr"
    with pytest.raises(TypeError, match="steps must be a list of steps") as info:
        db.transform(data(rows=20), steps, out)
    assert type(steps).__name__ in str(info.value) and not out.exists()


def test_json_provenance_round_trips(tmp_path: Path) -> None:
    x = data(rows=100)
    s = db.describe(x, stats=["moments", "cov"], run=db.RunOptions(plan=None))
    steps = [db.steps.standardize(s), db.steps.clip(-3, 3), db.steps.project(db.pca(s, 2))]
    bound, _ = db.steps.bind_all(steps[:2], s.feature_names)
    for step in bound:
        assert json.loads(json.dumps(step.describe())) == step.describe()


@pytest.mark.gpu
def test_gpu_blocks_match_cpu(tmp_path: Path) -> None:
    import cupy
    import dask.array as da

    x = data(rows=500)
    s = db.describe(x, stats=["moments", "cov"], run=db.RunOptions(plan=None))
    steps = [db.steps.standardize(s), db.steps.clip(-2, 2)]
    cpu = db.transform(x, steps, tmp_path / "cpu.zarr", chunk_rows=64, device="cpu").open().x.compute()
    gpu = db.transform(x, steps, tmp_path / "gpu.zarr", chunk_rows=64, device="gpu").open().x.compute()
    np.testing.assert_allclose(gpu, cpu, rtol=1e-12, atol=1e-12)
    on_device = da.from_array(x, chunks=(64, -1)).map_blocks(cupy.asarray)
    auto = db.transform(on_device, [db.steps.project(s, 2)], tmp_path / "auto.zarr", chunk_rows=64)
    np.testing.assert_allclose(auto.open().x.compute(), db.pca(s, 2).transform(x), rtol=1e-10, atol=1e-10)


def test_runs_on_a_distributed_client(tmp_path: Path) -> None:
    """With a Client as the scheduler the blocks run as its futures, and the store is the same."""
    from distributed import Client

    x = data(rows=400)
    s = db.describe(x, stats=["moments"], run=db.RunOptions(plan=None))
    local = db.transform(x, [db.steps.standardize(s)], tmp_path / "local.zarr", chunk_rows=64)
    with Client(processes=False, n_workers=1, threads_per_worker=2, dashboard_address=":0"):
        remote = db.transform(x, [db.steps.standardize(s)], tmp_path / "remote.zarr", chunk_rows=64)
    assert remote.written == local.written == tuple(range(7))
    assert chunk_bytes(remote.path) == chunk_bytes(local.path)


def test_interrupted_transform_output_warns_when_opened(tmp_path: Path) -> None:
    """A cancelled transform leaves its store marked incomplete: opening it says so (as for an unfinished ingest)."""
    import threading

    from daskbatch.errors import IncompleteStoreWarning

    src = store(tmp_path, data(rows=900), chunk_rows=100)
    cancel = threading.Event()

    def stop_after_one(done: int, total: int | None, phase: str) -> None:
        cancel.set()

    out = tmp_path / "t.zarr"
    with pytest.raises(db.Cancelled):
        db.transform(src, [db.steps.clip(0, 1)], out, chunk_rows=100, progress=stop_after_one, cancel=cancel)
    with (
        pytest.warns(IncompleteStoreWarning, match=r"t\.zarr' was written by a daskbatch transform that did not finish"),
        pytest.raises(DataError, match=r"the transform that wrote them did not finish: re-run the same transform"),
    ):
        db.open_dataset(out)
    db.transform(src, [db.steps.clip(0, 1)], out, chunk_rows=100)
    assert db.open_dataset(out).complete


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="names a flushed file from /proc/self/fd")
def test_each_block_reaches_the_disk_before_the_done_log_names_it(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """A resume trusts the done-log, so after a power loss or a node's crash a logged block must have its chunk.

    Each block's chunk file, and the folders that name it, are flushed (fsync) before its line is appended.
    """
    x = data()
    src = store(tmp_path, x)
    summary = db.describe(src, stats=["moments"])
    out = tmp_path / "z.zarr"
    log = out / DONE_FILE
    flushed: dict[str, set[int]] = {}  # path -> the blocks the done-log named when it was flushed
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        logged = {int(line) for line in log.read_text().split()} if log.exists() else set()
        flushed.setdefault(os.readlink(f"/proc/self/fd/{fd}"), set()).update(logged)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    report = db.transform(src, [db.steps.standardize(summary)], out, chunk_rows=128)
    assert report.blocks == 8
    root = os.path.realpath(out)
    for block in range(8):
        chunk = os.path.join(root, "X", "c", str(block), "0")
        assert chunk in flushed, f"block {block}'s chunk was never flushed"
        assert block not in flushed[chunk], f"block {block} was logged before its chunk was flushed"
        assert os.path.join(root, "X", "c", str(block)) in flushed  # the folder that names the chunk file
    assert os.path.join(root, "X", "c") in flushed
