"""Shared fixtures: the array-backend ``xp`` fixture, hypothesis profiles, the GPU skip and reference data."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Law-suite methods run once per backend on a fresh class instance, which
# hypothesis would flag as "differing executors"; the runs are independent.
_SUPPRESSED = [HealthCheck.differing_executors, HealthCheck.too_slow]
settings.register_profile(
    "ci", deadline=None, max_examples=40, derandomize=True, database=None,
    suppress_health_check=_SUPPRESSED,
)
settings.register_profile("dev", deadline=None, max_examples=300, suppress_health_check=_SUPPRESSED)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

BACKENDS = [
    pytest.param("numpy", id="numpy"),
    pytest.param("array_api_strict", id="strict"),
    pytest.param("cupy", id="cupy", marks=pytest.mark.gpu),
]

#: Where the team's shared reference data live: ``shared/`` sits beside the repository.
REFERENCE_DIR = Path(__file__).parents[2] / "shared" / "reference" / "stats"


def has_cuda() -> bool:
    """True when CuPy imports and sees at least one CUDA device."""
    if importlib.util.find_spec("cupy") is None:
        return False
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount()) > 0
    except Exception:  # no driver, no device, broken install: all mean "no GPU here"
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    if not has_cuda():
        skip = pytest.mark.skip(reason="needs CuPy and a CUDA device")
        for item in gpu_items:
            item.add_marker(skip)
        return
    # CUDA is here: every gpu test starts from the check users run (`daskbatch info --gpu`)
    # and fails, naming what is missing, when daskbatch's GPU kernels cannot run.
    for item in gpu_items:
        item.add_marker(pytest.mark.usefixtures("gpu_kernels_ready"))


def pytest_report_header(config: pytest.Config) -> str | None:
    """The GPU check's verdict at the top of a run on a CUDA machine."""
    if not has_cuda():
        return None
    from daskbatch.stats.kernels.preflight import check_gpu

    check = check_gpu()
    return f"{check.verdict()}; versions: {check.versions}"


@pytest.fixture(scope="session")
def gpu_kernels_ready() -> None:
    """Fail (not skip) a gpu test when CUDA is present but daskbatch's GPU kernels cannot run."""
    from daskbatch.stats.kernels.preflight import check_gpu

    check = check_gpu()
    if not check.ok:
        pytest.fail(check.verdict(), pytrace=False)


@pytest.fixture(scope="session", params=BACKENDS)
def xp(request: pytest.FixtureRequest):
    """The array-API namespace of one backend (session-scoped so hypothesis tests may use it)."""
    from array_api_compat import array_namespace

    mod = pytest.importorskip(request.param)
    return array_namespace(mod.empty(0))


@pytest.fixture(scope="session")
def reference_dir() -> Path:
    """The shared reference-data folder; tests that need it skip when it is absent."""
    if not (REFERENCE_DIR / "README.md").is_file():
        pytest.skip(f"shared reference data not found at {REFERENCE_DIR}")
    return REFERENCE_DIR
