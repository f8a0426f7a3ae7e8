"""The GPU path equals the CPU path: moments/cov to 1e-12 relative, histograms and MI bitwise.

Runs with ``pytest -m gpu`` on a CUDA machine; skipped elsewhere.
"""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest

import daskbatch as db

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    x = (rng.normal(size=(200_000, 16)) * 3 + 1e4).astype(np.float32)
    x[17, 3] = np.nan
    x[99, 5] = np.inf
    y = rng.integers(0, 4, size=200_000).astype(np.int32)
    return x, y


def _compare(cpu: db.Summary, gpu: db.Summary) -> None:
    for name in ("count", "nan_count", "posinf_count", "min", "max", "hist_counts", "underflow", "overflow", "joint_counts"):
        np.testing.assert_array_equal(getattr(gpu, name), getattr(cpu, name), err_msg=name)
    for name in ("mean", "var", "skew", "kurtosis", "cov", "corr"):
        np.testing.assert_allclose(getattr(gpu, name), getattr(cpu, name), rtol=1e-12, atol=1e-12, err_msg=name)
    np.testing.assert_allclose(gpu.mi, cpu.mi, rtol=1e-12, atol=1e-15)
    assert gpu.cov_count == cpu.cov_count


def test_describe_on_gpu_equals_cpu(data: tuple[np.ndarray, np.ndarray]) -> None:
    pytest.importorskip("cupy")
    x, y = data
    dx, dy = da.from_array(x, chunks=(25_000, -1)), da.from_array(y, chunks=25_000)
    cpu = db.describe(dx, dy)
    gpu = db.describe(dx, dy, run=db.RunOptions(device="gpu"))
    assert gpu.provenance["device"] == "gpu"
    _compare(cpu, gpu)


def test_cupy_blocks_stay_on_device(data: tuple[np.ndarray, np.ndarray]) -> None:
    cupy = pytest.importorskip("cupy")
    x, y = data
    dx = da.from_array(x, chunks=(50_000, -1)).map_blocks(cupy.asarray)
    dy = da.from_array(y, chunks=50_000).map_blocks(cupy.asarray)
    state = db.Moments().chunk(cupy.asarray(x[:1000]))
    assert isinstance(state.mean, cupy.ndarray)
    _compare(db.describe(da.from_array(x, chunks=(50_000, -1)), y), db.describe(dx, dy))


def test_accumulator_on_gpu(data: tuple[np.ndarray, np.ndarray]) -> None:
    cupy = pytest.importorskip("cupy")
    x, y = data
    cpu, gpu = db.Accumulator(range=(9_980, 10_020)), db.Accumulator(range=(9_980, 10_020))
    for start in range(0, len(x), 60_000):
        cpu.update(x[start : start + 60_000], y[start : start + 60_000])
        gpu.update(cupy.asarray(x[start : start + 60_000]), cupy.asarray(y[start : start + 60_000]))
    _compare(cpu.summary(), gpu.summary())


@pytest.fixture()
def store(tmp_path, data: tuple[np.ndarray, np.ndarray]) -> str:
    """``data`` as a Zarr store (X, y) in 25,000-row chunks."""
    import zarr

    x, y = data
    root = zarr.open_group(str(tmp_path / "d.zarr"), mode="w")
    root.create_array("X", data=x, chunks=(25_000, x.shape[1]))
    root.create_array("y", data=y, chunks=(25_000,))
    return str(tmp_path / "d.zarr")


def test_describe_on_a_cuda_cluster_from_a_store_equals_cpu(store: str) -> None:
    """The whole GPU route: Zarr store -> dask-cuda workers (RMM pool from the plan) -> CuPy states."""
    pytest.importorskip("cupy")
    pytest.importorskip("dask_cuda")
    from daskbatch.engine.planner import plan_describe
    from daskbatch.runtime.capacity import cuda_device_count, resources_from_machine
    from daskbatch.runtime.cluster import cluster

    ds = db.open_dataset(store, label="y")
    cpu = db.describe(ds)
    gpus = resources_from_machine(n_workers=cuda_device_count(), device="gpu")
    p = plan_describe(ds, resources=gpus)
    with cluster("cuda", plan=p, dashboard_address=":0") as client:

        def pool_in_use() -> str:
            import rmm

            return type(rmm.mr.get_current_device_resource()).__name__

        assert all("Pool" in name for name in client.run(pool_in_use).values())
        gpu = db.describe(ds, run=db.RunOptions(device="gpu"))
    assert gpu.provenance["device"] == "gpu"
    _compare(cpu, gpu)


def test_describe_cli_picks_the_gpu_on_dask_cuda_workers(tmp_path, store: str) -> None:
    pytest.importorskip("cupy")
    pytest.importorskip("dask_cuda")
    import json
    import subprocess
    import sys

    out = tmp_path / "s.json"
    result = subprocess.run(
        [sys.executable, "-m", "daskbatch", "describe", store, "--label", "y",
         "--cluster", "cuda", "--no-progress", "--json", str(out)],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads(out.read_text())
    assert summary["provenance"]["device"] == "gpu"
    cpu = db.describe(db.open_dataset(store, label="y"))
    mean = np.array([np.nan if v is None else float(v) for v in summary["mean"]])  # JSON: null, "inf"
    np.testing.assert_allclose(mean, cpu.mean, rtol=1e-12)
    np.testing.assert_array_equal(np.asarray(summary["hist_counts"]), cpu.hist_counts)
