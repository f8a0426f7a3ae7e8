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
    if any(item.get_closest_marker("gpu") for item in items) and not has_cuda():
        skip = pytest.mark.skip(reason="needs CuPy and a CUDA device")
        for item in items:
            if item.get_closest_marker("gpu"):
                item.add_marker(skip)


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
