"""Hybrid GPU/CPU batches: device="auto"'s choice, the fallback to the CPU, flagging bisected to rows, Python items."""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
from pathlib import Path

import dask
import dask.bag
import numpy as np
import pytest
import zarr

import daskbatch as db
from daskbatch.batches import FlaggedRowsWarning
from daskbatch.engine.pipeline import Computed, run_statistics
from daskbatch.engine.run_options import (
    auto_device,
    configured_min_batch_bytes,
    gpu_failure,
    gpu_problem,
)
from daskbatch.errors import GPUFallbackWarning
from daskbatch.planning.plan import Resources
from daskbatch.planning.search import (
    CPU_BYTES_PER_S,
    GPU_BATCH_OVERHEAD_S,
    HOST_TO_DEVICE_BYTES_PER_S,
    DeviceChoice,
    choose_device,
    gpu_min_batch_bytes,
)
from daskbatch.stats.spec import configured

HAS_CUPY = importlib.util.find_spec("cupy") is not None
ROWS, BAD = 20_000, 13_579


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """20,000 x 3 on disk in chunks of 1,000 rows; column 0 is the row index (a function can tell its rows)."""
    rng = np.random.default_rng(20)
    x = rng.normal(size=(ROWS, 3))
    x[:, 0] = np.arange(ROWS)
    path = str(tmp_path_factory.mktemp("hybrid") / "in.zarr")
    group = zarr.open_group(path, mode="w", zarr_format=3, attributes={"daskbatch": {"x": "X"}})
    group.create_array("X", data=x, chunks=(1000, 3))
    return path


def scores(batch: np.ndarray) -> np.ndarray:
    """Row-wise: two columns from three."""
    return np.stack([np.hypot(batch[:, 1], batch[:, 2]), batch[:, 0]], axis=1)


def poisoned(batch: np.ndarray) -> np.ndarray:
    """``scores``, failing on any batch that holds row ``BAD``."""
    if np.any(batch[:, 0] == BAD):
        raise ValueError(f"row {BAD} is poisoned")
    return scores(batch)


def expected(path: str) -> np.ndarray:
    return scores(zarr.open_group(path)["X"][:])


# -- the choice


def test_the_planned_threshold_follows_the_cost_model() -> None:
    for threads in (1, 2, 4):
        saved = 1 / CPU_BYTES_PER_S - 2 * threads / HOST_TO_DEVICE_BYTES_PER_S
        got = gpu_min_batch_bytes(Resources(2**30, threads_per_worker=threads))
        assert got == pytest.approx(GPU_BATCH_OVERHEAD_S / saved, rel=1e-9)
    assert gpu_min_batch_bytes(Resources(2**30, threads_per_worker=1)) == 2_400_000
    # more threads share the link: a larger batch is needed, until the round trip alone is slower than the CPU
    assert gpu_min_batch_bytes(Resources(2**30, threads_per_worker=16)) is None

    one = Resources(2**30, threads_per_worker=1)
    assert choose_device(2_400_000, one, gpu_problem=None).device == "gpu"
    small = choose_device(2_399_999, one, gpu_problem=None)
    assert small.device == "cpu" and "below the planned threshold of 2.29 MiB" in small.reason
    assert choose_device(10**6, one, gpu_problem=None, min_bytes=10**6).device == "gpu"  # the override wins
    assert "never pays" in choose_device(10**12, Resources(2**30, threads_per_worker=16), gpu_problem=None).reason
    no_gpu = choose_device(10**12, one, gpu_problem="no CUDA driver")
    assert no_gpu.device == "cpu" and no_gpu.reason == "the GPU preflight failed: no CUDA driver"


def test_the_threshold_setting_is_read_and_checked() -> None:
    assert configured_min_batch_bytes() is None  # "auto" in daskbatch.yaml: the planner's
    with dask.config.set({"daskbatch.gpu-min-batch-bytes": "8MiB"}):
        assert configured_min_batch_bytes() == 8 * 2**20
    with dask.config.set({"daskbatch.gpu-min-batch-bytes": 4096}):
        assert configured_min_batch_bytes() == 4096
    for bad in ("lots", -1, True, 1.5, "AUTO", None):  # what `daskbatch config` refuses, refused alike
        with dask.config.set({"daskbatch.gpu-min-batch-bytes": bad}), pytest.raises(
            ValueError, match=r"^daskbatch.gpu-min-batch-bytes must be auto or a byte size such as 16MiB, got"
        ):
            auto_device(10**9)


@pytest.mark.skipif(HAS_CUPY, reason="checks the machines without CUDA")
def test_auto_runs_on_the_cpu_when_the_preflight_fails_and_says_so(
    store: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    problem = gpu_problem()  # the real preflight: no CuPy, no driver here
    assert problem is not None
    with caplog.at_level(logging.INFO, logger="daskbatch.devices"), \
            dask.config.set({"daskbatch.gpu-min-batch-bytes": "1B"}):  # large enough: the preflight decides
        report = db.map_batches(scores, store, out=tmp_path / "auto.zarr", device="auto")
    assert f"device='auto' runs batches on the CPU: the GPU preflight failed: {problem}" in caplog.text
    prov = zarr.open_group(report.path).attrs["provenance"]
    assert prov["device"] == "cpu" and prov["device_reason"] == f"the GPU preflight failed: {problem}"
    assert prov["cpu_rows"] == []  # nothing fell back: nothing was meant for the GPU
    np.testing.assert_array_equal(zarr.open_group(report.path)["X"][:], expected(store))


@pytest.mark.skipif(HAS_CUPY, reason="checks the machines without CUDA")
@pytest.mark.filterwarnings("ignore::daskbatch.errors.GPUFallbackWarning")  # said once per process: see below
def test_describe_auto_runs_on_the_cpu_and_records_why(store: str) -> None:
    auto = db.describe(store, stats=("moments",), run=db.RunOptions(device="auto"))
    assert auto.provenance["device"] == "cpu"
    assert auto.provenance["device_reason"] == f"the GPU preflight failed: {gpu_problem()}"
    assert db.describe(store, stats=("moments",)).provenance["device"] == "cpu"
    x = zarr.open_group(store)["X"][:]
    np.testing.assert_allclose(auto.mean, x.mean(axis=0), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(auto.var, x.var(axis=0, ddof=1), rtol=1e-12)


_NO_GPU_SCRIPT = """
import warnings, numpy as np, daskbatch as db
x = np.arange(20.0).reshape(10, 2)
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    db.describe(x, stats="moments")  # device not given: quiet
    quiet = len(seen)
    db.describe(x, stats="moments", run=db.RunOptions(device="auto"))
    db.describe(x, stats="moments", run=db.RunOptions(device="auto"))  # once per process
try:
    db.describe(x, stats="moments", run=db.RunOptions(device="gpu"))
    raised = "nothing"
except db.GPUUnavailableError:
    raised = "GPUUnavailableError"
print(quiet, [type(w.message).__name__ for w in seen], raised)
print(seen[0].message)
"""


@pytest.mark.skipif(gpu_problem() is None, reason="checks the machines without a working GPU")
def test_explicit_auto_without_a_gpu_warns_once_per_process(tmp_path: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _NO_GPU_SCRIPT], capture_output=True, text=True, check=True,
                          cwd=tmp_path)
    counts, message = done.stdout.splitlines()[:2]
    assert counts == "0 ['GPUFallbackWarning'] GPUUnavailableError", done.stdout + done.stderr
    assert message.startswith("device='auto' runs on the CPU: ") and "pip install 'daskbatch[gpu-cu12]'" in message


# -- falling back to the CPU


@pytest.mark.skipif(HAS_CUPY, reason="needs a machine without CuPy")
def test_gpu_without_cupy_raises_one_error_everywhere(store: str, tmp_path: Path) -> None:
    # device="gpu" is the user's explicit choice: every function refuses it the same way, fallback or not.
    calls = {
        "map_batches": lambda: db.map_batches(scores, store, device="gpu"),
        "map_batches(on_error='fallback')": lambda: db.map_batches(scores, store, device="gpu", on_error="fallback"),
        "describe": lambda: db.describe(store, stats=("moments",), run=db.RunOptions(device="gpu")),
        "Accumulator": lambda: db.Accumulator(device="gpu"),
        "transform": lambda: db.transform(store, [], tmp_path / "t.zarr", device="gpu"),
        "synth": lambda: db.synth(10, 2, device="gpu"),
    }
    for what, call in calls.items():
        with pytest.raises(db.GPUUnavailableError, match=r"gpu-cu12") as info:
            call()
        assert isinstance(info.value, ImportError) and isinstance(info.value, db.DeviceUnavailableError), what
        assert "\n" not in str(info.value), what
    assert not (tmp_path / "t.zarr").exists()


def _describe_on(where: DeviceChoice, device: str, store: str, checkpoint: str | None = None) -> Computed:
    """describe's own seam, given the device that a (stale) preflight chose for ``device``."""
    wanted = configured(("moments", db.stats.Histogram(bins=16)), target_bins=10)
    run = db.RunOptions(device=device, plan=None, checkpoint=checkpoint)
    return run_statistics(store, None, wanted, run, where=where)


@pytest.mark.skipif(HAS_CUPY, reason="needs a machine without CuPy (the GPU run must fail for real)")
def test_describe_falls_back_to_the_cpu_when_auto_chose_a_gpu_that_fails(store: str) -> None:
    # A preflight that said yes, then no CuPy when the blocks move: the GPU fails for real, mid-run.
    stale = DeviceChoice("gpu", "the GPU preflight passed (stale)")
    with pytest.warns(GPUFallbackWarning, match="the run on the GPU failed, CuPy does not import") as record:
        done = _describe_on(stale, "auto", store)
    assert len([w for w in record if issubclass(w.category, GPUFallbackWarning)]) == 1
    assert done.provenance["device"] == "cpu"
    assert "CuPy does not import" in done.provenance["device_fallback"]
    assert done.provenance["device_reason"].startswith("device='auto' fell back from the GPU: ")
    cpu = _describe_on(DeviceChoice("cpu", "device='cpu'"), "cpu", store)
    for name, value in cpu.results.items():  # the same run as on the CPU, bit for bit
        for a, b in zip(dataclasses.astuple(value), dataclasses.astuple(done.results[name]), strict=True):
            np.testing.assert_array_equal(a, b)
    with pytest.raises(db.GPUUnavailableError, match="CuPy does not import"):  # the user's choice: raised, not hidden
        _describe_on(DeviceChoice("gpu", "device='gpu'"), "gpu", store)


@pytest.mark.skipif(HAS_CUPY, reason="needs a machine without CuPy (the GPU run must fail for real)")
def test_no_fallback_with_a_checkpoint_whose_states_are_the_gpus(store: str, tmp_path: Path) -> None:
    stale = DeviceChoice("gpu", "the GPU preflight passed (stale)")
    with pytest.raises(db.GPUUnavailableError, match="CuPy does not import"):  # a CPU run would meet the GPU's fingerprint
        _describe_on(stale, "auto", store, checkpoint=str(tmp_path / "ckpt"))


def test_only_the_gpu_failing_counts_as_a_gpu_failure() -> None:
    assert gpu_failure(MemoryError("Out of memory allocating 8 bytes")).startswith("out of memory")
    assert gpu_failure(ImportError("device='gpu' needs CuPy")).startswith("CuPy does not import")
    assert gpu_failure(RuntimeError("cuBLAS: CUDA out of memory")).startswith("out of memory")
    assert gpu_failure(ValueError("a NaN in feature 3")) is None
    assert gpu_failure(db.errors.Interrupted("cancelled")) is None


@pytest.mark.gpu
def test_describe_auto_falls_back_when_the_gpu_runs_out_of_memory(store: str) -> None:
    import cupy

    pool = cupy.get_default_memory_pool()
    pool.free_all_blocks()
    pool.set_limit(size=1024)  # a real cupy.cuda.memory.OutOfMemoryError at the first block moved
    try:
        with dask.config.set({"daskbatch.gpu-min-batch-bytes": 0}), pytest.warns(GPUFallbackWarning, match="out of memory"):
            auto = db.describe(store, stats=("moments",), run=db.RunOptions(device="auto"))
    finally:
        pool.set_limit(size=0)
    assert auto.provenance["device"] == "cpu" and "OutOfMemoryError" in auto.provenance["device_fallback"]
    cpu = db.describe(store, stats=("moments",), run=db.RunOptions(device="cpu"))
    np.testing.assert_array_equal(auto.mean, cpu.mean)
    pool.set_limit(size=1024)
    try:
        with pytest.raises(MemoryError):
            db.describe(store, stats=("moments",), run=db.RunOptions(device="gpu"))
    finally:
        pool.set_limit(size=0)


def test_one_bad_row_among_20000_is_the_only_row_flagged(store: str, tmp_path: Path) -> None:
    # Retried on the CPU (where the GPU fails), then bisected down to the row.
    with pytest.warns(FlaggedRowsWarning, match=r"^poisoned failed on 1 row \(1 range\(s\)\), flagged: row 13,579$"):
        report = db.map_batches(poisoned, store, batch_rows=1000, device="auto",
                                on_error=("fallback", "flag"), out=tmp_path / "flagged.zarr")
    group = zarr.open_group(report.path)
    assert report.failed_rows == ((BAD, BAD + 1),) and group.attrs["provenance"]["failed_rows"] == [[BAD, BAD + 1]]
    assert group.attrs["provenance"]["on_error"] == "fallback+flag"
    failed = group["failed"][:]
    assert failed.sum() == 1 and failed[BAD]
    want = expected(store)
    got = group["X"][:]
    assert np.isnan(got[BAD]).all()
    np.testing.assert_array_equal(np.delete(got, BAD, axis=0), np.delete(want, BAD, axis=0))

    with pytest.raises(db.BatchError, match=r"^poisoned failed on row 13,579: ValueError: row 13579 is poisoned$"):
        db.map_batches(poisoned, store, device="cpu", on_error="fallback")
    with pytest.raises(ValueError, match=r"on_error must be one of .* or \('fallback', 'flag'\), got \('raise', 'flag'\)"):
        db.map_batches(poisoned, store, on_error=("raise", "flag"))  # type: ignore[arg-type]


# -- Python items


def grids(n: int) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """The seed's task tuples: a name and two small grids of different shapes."""
    rng = np.random.default_rng(7)
    return [(f"task{i}", rng.normal(size=(3, 4)), rng.normal(size=(4, 2))) for i in range(n)]


def solve(batch: list[tuple[str, np.ndarray, np.ndarray]]) -> list[tuple[str, float]]:
    """One result per task: its name and the sum of the grids' product."""
    return [(name, float((a @ b).sum())) for name, a, b in batch]


def test_python_items_through_a_bag_equal_a_plain_loop() -> None:
    tasks = grids(50)
    plain = [solve([t])[0] for t in tasks]
    assert db.map_batches(solve, tasks, batch_rows=8) == plain
    assert db.map_batches(solve, tuple(tasks)) == plain
    assert db.map_batches(solve, dask.bag.from_sequence(tasks, npartitions=6)) == plain
    assert db.map_batches(solve, []) == []

    def fragile(batch: list[tuple[str, np.ndarray, np.ndarray]]) -> list[tuple[str, float]]:
        if any(name == "task17" for name, _, _ in batch):
            raise ArithmeticError("task17 diverged")
        return solve(batch)

    with pytest.warns(FlaggedRowsWarning, match=r"fragile failed on 1 item \(1 range\(s\)\), flagged: item 17$"):
        got = db.map_batches(fragile, tasks, batch_rows=16, on_error="flag")
    assert got == [None if i == 17 else r for i, r in enumerate(plain)]
    with pytest.raises(db.BatchError, match=r"^fragile failed on items 0-15 of batch 1: ArithmeticError: task17"):
        db.map_batches(fragile, tasks, batch_rows=16)
    with pytest.raises(ValueError, match=r"^<lambda> returned 1 results for 8 items \(batch [01]\)$"):
        db.map_batches(lambda batch: batch[:1], tasks[:16], batch_rows=8, on_error="flag")  # a misuse: never flagged
    with pytest.raises(ValueError, match="a dask.bag's partitions are its batches"):
        db.map_batches(solve, dask.bag.from_sequence(tasks), batch_rows=8)


def test_cancellation_is_an_exception_and_a_signal_is_not() -> None:
    assert issubclass(db.Cancelled, Exception)  # a caller's `except Exception` handles a cancelled run
    # a signal must get through libraries' `except Exception` fallbacks, like KeyboardInterrupt
    assert issubclass(db.Interrupted, BaseException) and not issubclass(db.Interrupted, Exception)


# -- on a CUDA machine


@pytest.mark.gpu
def test_auto_chooses_the_gpu_for_large_batches(store: str, tmp_path: Path) -> None:
    import cupy

    seen: list[str] = []

    def where(batch: object) -> object:
        seen.append(type(batch).__module__.split(".")[0])
        xp = cupy.get_array_module(batch)
        return xp.stack([xp.hypot(batch[:, 1], batch[:, 2]), batch[:, 0]], axis=1)

    with dask.config.set({"daskbatch.gpu-min-batch-bytes": "1KiB"}):
        report = db.map_batches(where, store, device="auto", out=tmp_path / "gpu.zarr")
    prov = zarr.open_group(report.path).attrs["provenance"]
    assert prov["device"] == "gpu" and "reach the daskbatch.gpu-min-batch-bytes threshold" in prov["device_reason"]
    assert set(seen) == {"cupy"}
    np.testing.assert_allclose(zarr.open_group(report.path)["X"][:], expected(store), rtol=1e-14)

    with dask.config.set({"daskbatch.gpu-min-batch-bytes": "1GiB"}):
        report = db.map_batches(where, store, device="auto", out=tmp_path / "cpu.zarr")
    assert zarr.open_group(report.path).attrs["provenance"]["device"] == "cpu"
    # the planner's threshold (2.3 MiB with one thread per GPU worker) against batches of at most 469 KiB
    report = db.map_batches(where, store, device="auto", out=tmp_path / "planned.zarr")
    prov = zarr.open_group(report.path).attrs["provenance"]
    assert prov["device"] == "cpu" and "below the planned threshold" in prov["device_reason"]

    def gpu_fails_on_bad(batch: object) -> object:
        if isinstance(batch, cupy.ndarray):
            raise RuntimeError("kernel failed")
        return poisoned(batch)  # type: ignore[arg-type]

    with dask.config.set({"daskbatch.gpu-min-batch-bytes": "1KiB"}), pytest.warns(GPUFallbackWarning), \
            pytest.warns(FlaggedRowsWarning, match="row 13,579$"):
        got = db.map_batches(gpu_fails_on_bad, store, device="auto", on_error="flag")
    assert got.mask.any(axis=1).sum() == 1 and got.mask[BAD].all()
