"""The GPU extras resolve against the package index: every name and version in them exists.

A resolution takes about a minute (pip fetches metadata for the CUDA wheels), so the
tests are marked slow, and the two resolutions run at once (they mostly wait on the
index). They are skipped when the index cannot be reached.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from urllib.parse import urlparse

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]


def _index_reachable(timeout: float = 3.0) -> bool:
    """Whether pip's index answers a TCP connection within ``timeout`` seconds."""
    url = urlparse(os.environ.get("PIP_INDEX_URL") or "https://pypi.org/simple")
    if url.scheme == "file":
        return True
    try:
        with socket.create_connection((url.hostname, url.port or 443), timeout=timeout):
            return True
    except OSError:
        return False


EXTRAS = {"gpu-cu13": {"cupy-cuda13x", "dask-cuda", "rmm-cu13"}, "gpu-cu12": {"cupy-cuda12x", "dask-cuda", "rmm-cu12"}}


@pytest.fixture(scope="module")
def resolutions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[subprocess.Popen[str], pathlib.Path]]]:
    """Both extras' resolutions, started together: each waits on the index, so they overlap (one minute, not two)."""
    if not _index_reachable():
        pytest.skip("the package index is not reachable")
    tmp = tmp_path_factory.mktemp("packaging")
    started = {}
    for extra in EXTRAS:
        # A copy of the project for each (two metadata builds in one folder would race), so
        # that building its metadata leaves no egg-info in the checkout.
        project = tmp / f"project-{extra}"
        project.mkdir()
        for name in ("pyproject.toml", "README.md"):
            shutil.copy(REPO / name, project / name)
        shutil.copytree(REPO / "daskbatch", project / "daskbatch", ignore=shutil.ignore_patterns("__pycache__"))
        report = tmp / f"report-{extra}.json"
        started[extra] = (subprocess.Popen(
            [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed",
             "--report", str(report), f".[{extra}]"],
            cwd=project, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        ), report)
    yield started
    for proc, _ in started.values():
        if proc.returncode is None:  # its test did not wait for it (deselected, or failed before)
            proc.kill()
            proc.communicate()


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize(("extra", "expected"), list(EXTRAS.items()))
def test_gpu_extra_resolves(extra, expected, resolutions):
    proc, report = resolutions[extra]
    _, stderr = proc.communicate(timeout=840)
    assert proc.returncode == 0, stderr[-3000:]
    chosen = {item["metadata"]["name"].lower() for item in json.loads(report.read_text())["install"]}
    assert expected <= chosen, sorted(chosen)
