"""The GPU extras resolve against the package index: every name and version in them exists.

A resolution takes about a minute (pip fetches metadata for the CUDA wheels),
so the test is marked slow; it is skipped when the index cannot be reached.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
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


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    ("extra", "expected"),
    [("gpu-cu13", {"cupy-cuda13x", "dask-cuda", "rmm-cu13"}), ("gpu-cu12", {"cupy-cuda12x", "dask-cuda", "rmm-cu12"})],
)
def test_gpu_extra_resolves(extra, expected, tmp_path):
    if not _index_reachable():
        pytest.skip("the package index is not reachable")
    # A copy of the project, so that building its metadata leaves no egg-info in the checkout.
    project = tmp_path / "project"
    project.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, project / name)
    shutil.copytree(REPO / "daskbatch", project / "daskbatch", ignore=shutil.ignore_patterns("__pycache__"))
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed",
         "--report", str(report), f".[{extra}]"],
        cwd=project, capture_output=True, text=True, timeout=840,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    chosen = {item["metadata"]["name"].lower() for item in json.loads(report.read_text())["install"]}
    assert expected <= chosen, sorted(chosen)
