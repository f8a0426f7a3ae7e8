"""Will daskbatch's GPU kernels run here? One check for ``daskbatch info --gpu``, ``describe`` and the tests."""

from __future__ import annotations

import dataclasses
import functools
import warnings
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import numpy as np

from daskbatch.errors import GPUKernelsWarning
from daskbatch.stats import kernels
from daskbatch.stats.kernels import _gpu

__all__ = ["GPUCheck", "check_gpu", "install_hint", "warn_unless_gpu_kernels"]


@dataclasses.dataclass(frozen=True)
class GPUCheck:
    """What :func:`check_gpu` found."""

    ok: bool
    problem: str | None
    versions: dict[str, str | None]
    simulated: bool = False

    def verdict(self) -> str:
        """Say in one line whether daskbatch's GPU kernels will be used, and if not, why."""
        if not self.ok:
            return f"daskbatch's GPU kernels will NOT be used (CuPy chunks take the slower array-API path): {self.problem}"
        if self.simulated:
            return "daskbatch's GPU kernels ran under numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1): no GPU was used"
        return "daskbatch's GPU kernels will be used for CuPy chunks"


def install_hint(driver: str | None = None) -> str:
    """Name the extra that installs the GPU stack, for the CUDA major version of ``driver`` when known."""
    major = driver.split(".")[0] if driver else None
    if major in ("12", "13"):
        return f"pip install 'daskbatch[gpu-cu{major}]'"
    return "pip install 'daskbatch[gpu-cu12]' (CUDA 12) or 'daskbatch[gpu-cu13]' (CUDA 13)"


def _first_line(error: BaseException) -> str:
    """``Type: message`` of an exception on one line (its lines joined, at most 200 characters)."""
    text = " ".join(line.strip().rstrip(":") for line in str(error).splitlines() if line.strip().rstrip(":"))
    return f"{type(error).__name__}: {text[:200]}".rstrip(": ")


def _stack(versions: dict[str, str | None]) -> tuple[Any, bool, str | None]:
    """Import numba.cuda and read the driver and NVVM versions: (module, simulated, problem)."""
    try:
        import numba  # noqa: F401  # lazy: numba
    except ImportError:
        return None, False, f"numba is not installed: {install_hint()}"
    try:
        from numba import cuda  # lazy: numba
    except Exception as error:  # a broken numba-cuda install raises anything at import
        return None, False, f"numba.cuda does not import ({_first_line(error)}): {install_hint()}"
    from numba.core import config  # lazy: numba

    if getattr(config, "ENABLE_CUDASIM", False):
        return cuda, True, None
    if getattr(cuda, "implementation", None) != "NVIDIA":
        if versions["numba-cuda"] is not None:
            return cuda, False, (
                f"numba-cuda {versions['numba-cuda']} is installed but numba.cuda is numba's deprecated built-in "
                "target (numba-cuda's _numba_cuda_redirector.pth did not run: install numba-cuda into a "
                "site-packages directory, not a PYTHONPATH folder)"
            )
        return cuda, False, f"numba-cuda is not installed (numba.cuda is numba's deprecated built-in target): {install_hint()}"
    try:
        from numba.cuda.cudadrv import driver  # lazy: numba

        versions["driver"] = ".".join(map(str, driver.driver.get_version()))
    except Exception as error:  # no driver library, no device, a driver too old: numba-cuda raises its own types
        return cuda, False, f"no CUDA driver or device that numba-cuda can use ({_first_line(error)})"
    try:
        from numba.cuda.cudadrv import nvvm  # lazy: numba

        versions["nvvm"] = ".".join(map(str, nvvm.NVVM().get_version()))
    except Exception as error:  # libnvvm missing or of the wrong CUDA version
        return cuda, False, (
            f"numba-cuda cannot load NVVM, its compiler ({_first_line(error)}): {install_hint(versions['driver'])}"
        )
    return cuda, False, None


def _launch(cuda: Any, simulated: bool, versions: dict[str, str | None]) -> str | None:
    """Compile and launch the moments kernels on a small chunk; None when they agree with NumPy."""
    x = np.arange(32, dtype=np.float32).reshape(8, 4) ** 1.5
    try:
        if simulated:
            fields = _gpu.moments(cuda.to_device(x))
        else:
            try:
                import cupy  # lazy: cupy
            except Exception as error:  # not installed, or built for another CUDA
                return f"CuPy does not import ({_first_line(error)}): {install_hint(versions['driver'])}"
            chunk = cupy.asarray(x)
            if kernels.kernel_path(chunk).kind != "numba-cuda":
                return "the kernels are switched off: daskbatch.kernels is false in dask.config (DASK_DASKBATCH__KERNELS)"
            fields = tuple(cupy.asnumpy(f) for f in kernels.moments(chunk))
    except Exception as error:  # a compile or launch failure of any kind is what this check reports
        return f"the GPU kernels failed to compile or run ({_first_line(error)})"
    mean = fields[1] + fields[2]  # a state's mean is shift + mean
    if not np.allclose(mean, x.astype(np.float64).mean(axis=0), rtol=1e-12, atol=0.0):
        return "the GPU kernels ran but returned a wrong mean: report this with `daskbatch info --gpu --json`"
    return None


@functools.cache
def check_gpu() -> GPUCheck:
    """Check that CuPy chunks will go to daskbatch's GPU kernels: import, find the driver and NVVM, compile, launch."""
    try:
        numba_cuda: str | None = version("numba-cuda")
    except PackageNotFoundError:
        numba_cuda = None
    versions: dict[str, str | None] = {"numba-cuda": numba_cuda, "nvvm": None, "driver": None}
    cuda, simulated, problem = _stack(versions)
    if problem is None:
        problem = _launch(cuda, simulated, versions)
    return GPUCheck(ok=problem is None, problem=problem, versions=versions, simulated=simulated)


_warned: set[str] = set()


def warn_unless_gpu_kernels(check: GPUCheck, stacklevel: int = 2) -> None:
    """Warn, once per problem and process, that GPU work will take the array-API path."""
    if check.ok or check.problem in _warned:
        return
    _warned.add(str(check.problem))
    warnings.warn(GPUKernelsWarning(f"device='gpu': {check.verdict()}; `daskbatch info --gpu` shows the GPU stack"),
                  stacklevel=stacklevel + 1)
