"""The counter-based synthetic stream (the GPU's): Philox4x32-10 known answers, chunk invariance, distributions."""

from __future__ import annotations

import array_api_compat.numpy as xp
import numpy as np
import pytest
import scipy.stats

import daskbatch as db
from daskbatch.errors import DeviceUnavailableError
from daskbatch.io.synth_model import normals, philox4x32


# Known-answer vectors of Random123's philox4x32_10 (kat_vectors): counter, key -> output.
@pytest.mark.parametrize(("counter", "key", "expected"), [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
])
def test_philox_known_answers(counter, key, expected) -> None:
    out = philox4x32(xp, tuple(np.array([c], dtype=np.uint64) for c in counter), key)
    assert tuple(int(o[0]) for o in out) == expected


def test_normals_are_standard_normal_and_independent_of_the_rows_asked() -> None:
    z = normals(xp, 7, 0, 40_000, 5)
    assert z.dtype == np.float64 and np.isfinite(z).all()
    for j in range(5):
        assert scipy.stats.kstest(z[:, j], "norm").pvalue > 1e-4
    assert abs(np.corrcoef(z[:, 0], z[:, 1])[0, 1]) < 4 / np.sqrt(len(z))  # the two of a Box-Muller pair
    np.testing.assert_array_equal(normals(xp, 7, 12_345, 12_400, 5), z[12_345:12_400])
    assert not np.array_equal(normals(xp, 8, 0, 10, 5), z[:10])


@pytest.mark.parametrize("chunk_rows", [1000, 777, 65536])
def test_counter_stream_is_chunk_and_rank_invariant(chunk_rows: int) -> None:
    whole = db.synth(9_001, 6, classes=3, correlated=2, seed=4, generator="counter", chunk_rows=4096)
    x, y = whole.x.compute(), whole.label.compute()
    again = db.synth(9_001, 6, classes=3, correlated=2, seed=4, generator="counter", chunk_rows=chunk_rows)
    np.testing.assert_array_equal(again.x.compute(), x)
    np.testing.assert_array_equal(again.label.compute(), y)
    share = db.rank_rows(9_001, 1, 3)
    part = db.synth(9_001, 6, classes=3, correlated=2, seed=4, generator="counter", chunk_rows=chunk_rows,
                    rank=1, world_size=3)
    np.testing.assert_array_equal(part.x.compute(), x[share.start:share.stop])
    assert "counter" in whole.attrs["synth"]["generator"]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_counter_stream_follows_the_model(dtype: str) -> None:
    n = 60_000
    data = db.synth(n, 7, classes=3, correlated=2, seed=11, generator="counter", dtype=dtype)
    truth = data.attrs["synth"]
    x = data.x.compute()
    assert x.dtype == np.dtype(dtype)
    x = x.astype(np.float64)
    mean, std = np.array(truth["true_mean"]), np.array(truth["true_std"])
    assert np.all(np.abs(x.mean(0) - mean) <= 5 * std / np.sqrt(n))
    assert np.all(np.abs(x.std(0) / std - 1) <= 5 / np.sqrt(2 * n) + 0.01)
    np.testing.assert_allclose(np.cov(x, rowvar=False), np.array(truth["true_cov"]), atol=0.03 * std.max() ** 2)
    counts = np.bincount(data.label.compute(), minlength=3) / n
    assert np.all(np.abs(counts - truth["class_priors"]) <= 5 * np.sqrt(0.25 / n))


def test_gpu_generation_without_a_gpu_is_a_one_line_error() -> None:
    try:
        import cupy

        gpus = cupy.cuda.runtime.getDeviceCount()
    except Exception:  # no CuPy or no driver: no GPU
        gpus = 0
    if gpus:
        pytest.skip("a GPU is present")
    with pytest.raises(DeviceUnavailableError, match=r"needs CuPy and a CUDA device: pip install 'daskbatch\[gpu-cu12\]'"):
        db.synth(100, 3, device="gpu")
    assert db.synth(100, 3, device="auto").x.compute().shape == (100, 3)  # auto: the CPU here
    with pytest.raises(ValueError, match="generator must be 'default' or 'counter'"):
        db.synth(100, 3, generator="mt")


@pytest.mark.gpu
def test_gpu_generation_equals_the_counter_stream_on_the_cpu(tmp_path) -> None:
    cupy = pytest.importorskip("cupy")
    gpu = db.synth(50_000, 9, classes=4, correlated=3, seed=2, device="gpu", chunk_rows=8192)
    block = gpu.x.blocks[0].compute()
    assert isinstance(block, cupy.ndarray)
    cpu = db.synth(50_000, 9, classes=4, correlated=3, seed=2, generator="counter", chunk_rows=5000)
    np.testing.assert_array_equal(cupy.asnumpy(gpu.label.compute()), cpu.label.compute())
    # Integer arithmetic is bitwise; log/sqrt/cos/sin may differ in their last bits on the device.
    np.testing.assert_allclose(cupy.asnumpy(gpu.x.compute()), cpu.x.compute(), rtol=1e-6, atol=1e-5)
    stored = db.synth(tmp_path / "g.zarr", rows=20_000, features=5, seed=2, device="gpu")
    np.testing.assert_allclose(stored.x.compute(), db.synth(20_000, 5, seed=2, generator="counter").x.compute(),
                               rtol=1e-6, atol=1e-5)
