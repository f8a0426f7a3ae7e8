"""The GPU check that ``daskbatch info --gpu``, ``describe(device="gpu")`` and the gpu tests share.

On a CPU machine two of its paths run for real: the one that names what is
missing (here numba-cuda's target not active, or no CUDA driver) and the
one under numba's CUDA simulator, which compiles nothing but launches the
kernels; both in subprocesses, so that the simulator and numba-cuda's
redirection are chosen before ``numba.cuda`` is first imported.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

from daskbatch.cli import main
from daskbatch.errors import GPUKernelsWarning
from daskbatch.stats.kernels.preflight import (
    GPUCheck,
    check_gpu,
    install_hint,
    warn_unless_gpu_kernels,
)

ROOT = Path(__file__).resolve().parents[1]
VERSION_KEYS = ["numba-cuda", "nvvm", "driver", "cupy", "rmm", "dask-cuda", "cuda_runtime"]


def _info_gpu(*prelude: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``daskbatch info --gpu --json`` in a fresh interpreter, after the statements ``prelude``."""
    code = "; ".join([*prelude, "from daskbatch.cli import main", "main(['info', '--gpu', '--json'])"])
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, **(env or {})), timeout=300)



def test_info_gpu_prints_the_versions_and_one_verdict_line() -> None:
    check = check_gpu()
    result = CliRunner().invoke(main, ["info", "--gpu"])
    assert result.exit_code == (0 if check.ok else 1), result.output
    lines = result.output.splitlines()
    assert [line.split()[0] for line in lines[:-2]] == VERSION_KEYS
    assert lines[-2].startswith("device='auto': " + ("gpu" if check.ok and not check.simulated else "cpu"))
    assert lines[-1] == check.verdict()
    if not check.ok:
        assert "will NOT be used" in lines[-1] and check.problem and "\n" not in check.problem


@pytest.mark.skipif(importlib.util.find_spec("_numba_cuda_redirector") is None, reason="numba-cuda not installed")
def test_info_gpu_names_a_missing_driver() -> None:
    """With numba-cuda's target active and no CUDA driver: one line naming the driver, exit status 1."""
    result = _info_gpu("import _numba_cuda_redirector")
    report = json.loads(result.stdout)
    if report["ok"]:
        pytest.skip("this machine has a working GPU stack")
    assert result.returncode == 1
    assert report["versions"]["numba-cuda"] is not None
    if report["versions"]["driver"] is None:
        assert report["problem"].startswith("no CUDA driver or device that numba-cuda can use (")
    assert report["verdict"].startswith("daskbatch's GPU kernels will NOT be used")


def test_info_gpu_under_the_simulator_launches_the_kernels() -> None:
    pytest.importorskip("numba")
    result = _info_gpu(env={"NUMBA_ENABLE_CUDASIM": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] and report["simulated"] and report["problem"] is None
    assert "simulator" in report["verdict"] and "no GPU was used" in report["verdict"]


def test_a_failed_check_warns_once_per_problem() -> None:
    bad = GPUCheck(ok=False, problem="CuPy does not import (ImportError: libcudart.so.12): "
                   + install_hint("12.8"), versions={})
    with pytest.warns(GPUKernelsWarning, match=r"will NOT be used .*daskbatch\[gpu-cu12\]"):
        warn_unless_gpu_kernels(bad)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_unless_gpu_kernels(bad)  # the same problem again: silent
        warn_unless_gpu_kernels(GPUCheck(ok=True, problem=None, versions={}))


def test_install_hint_follows_the_drivers_cuda_major() -> None:
    assert install_hint("13.0") == "pip install 'daskbatch[gpu-cu13]'"
    assert install_hint("12.4") == "pip install 'daskbatch[gpu-cu12]'"
    assert "gpu-cu12" in install_hint(None) and "gpu-cu13" in install_hint(None)


@pytest.mark.gpu
def test_describe_on_gpu_uses_the_kernels() -> None:
    """On a CUDA machine the check passes and describe(device="gpu") does not warn (warnings are errors here)."""
    import dask.array as da
    import numpy as np

    import daskbatch as db

    assert check_gpu().ok, check_gpu().verdict()
    x = np.random.default_rng(0).normal(size=(10_000, 8)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", GPUKernelsWarning)
        summary = db.describe(da.from_array(x, chunks=(2_500, -1)), run=db.RunOptions(device="gpu"))
    np.testing.assert_allclose(summary.mean, x.astype(np.float64).mean(axis=0), rtol=1e-12, atol=1e-15)
