"""Every numba-cuda kernel compiles to PTX with the argument types its launch sites pass (tools/compile_cuda_kernels.py).

The simulator tests (tests/test_cuda_kernels.py) run the kernels as Python and
never type them; this compiles them for real, with no GPU or driver, but it
needs NVVM. The tool runs under ``$DASKBATCH_NVVM_PYTHON`` when set (a Python
whose environment has NVVM and NVRTC, e.g. the ``nvidia-nvvm`` and
``nvidia-cuda-nvrtc`` wheels), else under this
interpreter; the tests skip, saying so, where NVVM cannot be loaded (CI has none).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "compile_cuda_kernels.py"
PYTHON = os.environ.get("DASKBATCH_NVVM_PYTHON", sys.executable)
pytestmark = pytest.mark.slow

#: Asks the tool's own probe whether NVVM works under PYTHON (exit 0 if it does, else prints why).
_PROBE = ("import sys; sys.path.insert(0, sys.argv[1]); import compile_cuda_kernels as t; "
          "t.use_numba_cuda(); why = t.nvvm_missing(); print(why or ''); sys.exit(1 if why else 0)")


def _env() -> dict[str, str]:
    """This checkout first on the path of the tool's interpreter."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}


@pytest.fixture(scope="module")
def nvvm() -> None:
    """Skip unless NVVM compiles under PYTHON."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        pytest.skip("compiling needs numba's real CUDA target, not the simulator (NUMBA_ENABLE_CUDASIM=1)")
    done = subprocess.run([PYTHON, "-c", _PROBE, str(TOOL.parent)], capture_output=True, text=True,
                          env=_env(), check=False)
    if done.returncode != 0:
        why = (done.stdout.strip() or done.stderr.strip()).splitlines()
        pytest.skip(f"NVVM (or NVRTC) not usable under {PYTHON} (set DASKBATCH_NVVM_PYTHON to a Python with NVVM): "
                    f"{why[-1] if why else 'no reason given'}")


@pytest.mark.usefixtures("nvvm")
def test_every_kernel_compiles_for_every_launch_signature() -> None:
    # Every dtype the GPU path reads, for cc 9.0 (H100/H200); the tool's default adds 8.0.
    done = subprocess.run([PYTHON, str(TOOL), "--cc", "9.0"], capture_output=True, text=True, env=_env(),
                          check=False, timeout=1800)
    lines = done.stdout.splitlines()
    failed = [line for line in lines if line.startswith("FAIL")]
    assert done.returncode == 0 and not failed, "\n".join(failed) or done.stdout + done.stderr
    compiled = [line for line in lines if line.startswith("OK")]
    # 18 kernels, the x-reading ones once per dtype (histograms also per counts dtype): not a partial run.
    assert len({line.split()[1] for line in compiled}) == 18, lines
    assert len(compiled) >= 100, lines


@pytest.mark.usefixtures("nvvm")
def test_a_kernel_that_does_not_type_is_reported() -> None:
    # first_complete indexes its second argument: as a scalar it cannot be typed.
    recorded = {"launches": {"daskbatch.stats.kernels._cuda_moments:first_complete": [
        '[["array", "uint8", 1, "C"], ["scalar", "int64"]]']}, "device": []}
    code = ("import sys, json; sys.path.insert(0, sys.argv[1]); import compile_cuda_kernels as t; "
            "t.use_numba_cuda(); lines = []; "
            "n = t.compile_all(json.loads(sys.argv[2]), [(9, 0)], [], lines.append); "
            "print(n); print('\\n'.join(l for l in lines if 'first_complete' in l))")
    done = subprocess.run([PYTHON, "-c", code, str(TOOL.parent), json.dumps(recorded)], capture_output=True,
                          text=True, env=_env(), check=False)
    assert done.returncode == 0, done.stderr
    count, *lines = done.stdout.splitlines()
    # Every other kernel is reported as never launched, and this one as failing to compile.
    assert int(count) >= 2, done.stdout
    typed = [line for line in lines if line.startswith("FAIL first_complete")]
    assert len(typed) == 1 and "Error" in typed[0], done.stdout
