"""One answer to "which kernels read this block": the planner, the fingerprint, the staging and the chunk task agree.

Each of them asks :func:`daskbatch.stats.kernels.path.kernel_path`; a spy on that
function records every answer given for a block, and the answers must name one
path (the planner's in its memory-model name).
"""

from __future__ import annotations

from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest

import daskbatch as db
from daskbatch.engine import fingerprint, reduce
from daskbatch.engine.fingerprint import setting_items
from daskbatch.engine.reduce import Staged
from daskbatch.stats import ClassMoments, CoMoments, Histogram, Moments, Sketch, kernels
from daskbatch.stats.kernels import path
from daskbatch.stats.kernels.path import KernelPath, kernel_path


def memory_path(answer: KernelPath) -> str:
    """The name the planner's memory model gives the path ``answer`` (Plan.kernel_path)."""
    return {"numba-cpu": "compiled", "numba-cuda": "gpu-compiled"}.get(answer.kind, "array-api")


@pytest.fixture
def answers(monkeypatch: pytest.MonkeyPatch) -> list[KernelPath]:
    """Every path kernel_path gives, wherever it is called from."""
    seen: list[KernelPath] = []

    def spy(*args: Any, **kwargs: Any) -> KernelPath:
        got = kernel_path(*args, **kwargs)
        seen.append(got)
        return got

    for owner in (path, kernels, reduce, fingerprint):  # the planner asks path.kernel_path
        monkeypatch.setattr(owner, "kernel_path", spy)
    return seen


@pytest.mark.parametrize("switch", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "int16", "bool", ">f8"])
def test_planner_fingerprint_and_chunk_task_take_one_path(answers: list[KernelPath], switch: bool, dtype: str) -> None:
    block = (np.random.default_rng(0).standard_normal((64, 5)) * 10).astype(dtype)
    x = da.from_array(block, chunks=(32, 5))
    with dask.config.set({"daskbatch.kernels": switch}):
        expected = kernel_path(block)
        plan = db.plan(x, stats=("moments",), resources=db.Resources(2**30))
        assert answers and {memory_path(a) for a in answers} == {memory_path(expected)} == {plan.kernel_path}
        answers.clear()
        fingerprint = setting_items(x)["kernels"]
        assert answers == [expected]
        assert (", used" in fingerprint) is (expected.kind == "numba-cpu")
        answers.clear()
        for stat in (Moments(), CoMoments(), Histogram(lo=[-50.0] * 5, hi=[50.0] * 5, bins=8)):
            stat.chunk(block)
        assert answers and set(answers) == {expected}
    assert expected.compiled is (switch and np.dtype(dtype).isnative)


def test_a_statistic_without_a_gpu_kernel_takes_the_array_api_code_on_the_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(path, "gpu_available", lambda: True)
    assert kernel_path("cupy", Moments()).kind == ("numba-cuda" if kernels.enabled() else "array-api-cupy")
    assert kernel_path("cupy", Sketch()).kind == "array-api-cupy"
    assert kernel_path("cupy", dtype="float16").kind == "array-api-cupy"
    assert kernel_path("numpy", Sketch(), weighted=True).kind == ("numba-cpu" if kernels.enabled() else "array-api-numpy")


@pytest.mark.parametrize("switch", [True, False])
def test_weighted_gpu_blocks_take_the_kernels_the_plan_counts(monkeypatch: pytest.MonkeyPatch, switch: bool) -> None:
    """Weighted device blocks take the numba-cuda kernels, as unweighted ones do and as the GPU plan counts them."""
    monkeypatch.setattr(path, "gpu_available", lambda: True)
    block = np.zeros((16, 3), dtype=np.float32)
    with dask.config.set({"daskbatch.kernels": switch}):
        plan = db.plan(da.from_array(block), stats=("moments",),
                       resources=db.Resources(2**30, device="gpu", device_memory_bytes=2**30))
        for stat in (Moments(), CoMoments(), Histogram(lo=[0.0] * 3, hi=[1.0] * 3, bins=4), ClassMoments()):
            weighted = kernel_path("cupy", stat, dtype=block.dtype, weighted=True)
            assert weighted == kernel_path("cupy", stat, dtype=block.dtype)
            assert weighted.kind == ("numba-cuda" if switch and kernels.available() else "array-api-cupy")
            assert memory_path(weighted) == plan.kernel_path


def test_weighted_kernels_narrow_the_compiled_ones() -> None:
    """A statistic whose compiled kernels do not all take weights says so in ``weighted_kernels``."""

    class CpuWeightsOnly:
        compiled_kernels = frozenset({"numba-cpu", "numba-cuda"})
        weighted_kernels = frozenset({"numba-cpu"})

    assert kernel_path("cupy", CpuWeightsOnly(), weighted=True, gpu_kernels=True).kind == "array-api-cupy"
    assert kernel_path("cupy", CpuWeightsOnly(), gpu_kernels=True).kind == (
        "numba-cuda" if kernels.enabled() else "array-api-cupy")
    assert kernel_path("numpy", CpuWeightsOnly(), weighted=True).kind == (
        "numba-cpu" if kernels.enabled() else "array-api-numpy")


@pytest.mark.parametrize("switch", [True, False])
def test_staging_and_planner_take_the_device_path(monkeypatch: pytest.MonkeyPatch, switch: bool) -> None:
    """A host block staged to the GPU is reduced on the path the GPU plan counts (CPU: CUDA stubbed in)."""
    monkeypatch.setattr(path, "gpu_available", lambda: True)
    block = np.zeros((16, 3), dtype=np.float32)
    with dask.config.set({"daskbatch.kernels": switch}):
        got = Staged(Moments(), part_rows=8).kernel_path(block)
        plan = db.plan(da.from_array(block), stats=("moments",),
                       resources=db.Resources(2**30, device="gpu", device_memory_bytes=2**30))
    assert got.kind == ("numba-cuda" if switch and kernels.available() else "array-api-cupy")
    assert plan.kernel_path == memory_path(got)


def test_other_arrays_take_the_array_api_code() -> None:
    block = np.zeros((4, 2))
    assert kernel_path(block[:, 0]).kind == "array-api-numpy"
    assert kernel_path(block.astype(np.complex64)).kind == "array-api-numpy"
    assert kernel_path(np.ma.masked_array(block)).kind == "array-api"
