"""What ``daskbatch info`` reports about the GPU stack: CuPy, RMM, dask-cuda and CUDA versions."""

from __future__ import annotations

import re
import warnings
from importlib.metadata import distributions

__all__ = ["GPU_FAMILIES", "gpu_stack", "matching_distributions"]

#: Report key -> pattern of the normalised distribution names that provide it.
GPU_FAMILIES: dict[str, re.Pattern[str]] = {
    "cupy": re.compile(r"cupy(-cuda\d+x?|-rocm-[\w-]+)?"),
    "rmm": re.compile(r"rmm(-cu\d+)?"),
    "dask-cuda": re.compile(r"dask-cuda"),
}


def _normalise(name: str) -> str:
    """PEP 503 normalised name: lower case, runs of ``-_.`` as one ``-``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def matching_distributions(pattern: re.Pattern[str], installed: dict[str, str]) -> str | None:
    """``"name version"`` of each installed distribution whose whole name matches; None if none."""
    found = [f"{name} {ver}" for name, ver in sorted(installed.items()) if pattern.fullmatch(name)]
    return ", ".join(found) or None


def _version_text(value: int) -> str:
    """CUDA's integer version (1000 * major + 10 * minor) as ``"major.minor"``."""
    return f"{value // 1000}.{value % 1000 // 10}"


def _cuda_versions() -> tuple[str | None, str | None]:
    """Read the CUDA runtime and driver versions as CuPy sees them."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. CuPy's warning that it found no CUDA path
            import cupy  # lazy: cupy
    except Exception:  # not installed, or installed but broken (wrong CUDA, missing libraries)
        return None, None
    versions: list[str | None] = []
    for query in (cupy.cuda.runtime.runtimeGetVersion, cupy.cuda.runtime.driverGetVersion):
        try:
            versions.append(_version_text(int(query())))
        except Exception:  # no driver, or no CUDA runtime library to load
            versions.append(None)
    return versions[0], versions[1]


def gpu_stack() -> dict[str, str | None]:
    """The installed GPU distributions and the CUDA runtime and driver versions (None: absent)."""
    installed = {_normalise(d.metadata["Name"] or ""): d.version for d in distributions()}
    facts = {key: matching_distributions(pattern, installed) for key, pattern in GPU_FAMILIES.items()}
    runtime, driver = _cuda_versions()  # also when CuPy imports without metadata (a source tree)
    return {**facts, "cuda_runtime": runtime, "cuda_driver": driver}
