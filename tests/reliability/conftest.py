"""Fixtures for the reliability tests: a small real Zarr store and a snapshot of a directory tree."""

from __future__ import annotations

import hashlib
import pathlib
from collections.abc import Callable

import numpy as np
import pytest
import zarr


@pytest.fixture()
def data() -> np.ndarray:
    return np.random.default_rng(3).normal(size=(600, 3))


@pytest.fixture()
def store(tmp_path: pathlib.Path, data: np.ndarray) -> pathlib.Path:
    """A Zarr v3 group ``d.zarr`` with ``X`` (600 x 3, 100-row chunks) and a label ``y``."""
    path = tmp_path / "d.zarr"
    root = zarr.open_group(str(path), mode="w")
    root.create_array("X", data=data, chunks=(100, 3))
    root.create_array("y", data=(data[:, 0] > 0).astype(np.int8), chunks=(100,))
    return path


def tree_state(root: pathlib.Path) -> dict[str, str]:
    """Every file under ``root`` (relative path) with the SHA-256 of its bytes."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*")) if p.is_file()
    }


@pytest.fixture()
def snapshot() -> Callable[[pathlib.Path], dict[str, str]]:
    """``snapshot(dir)``: its files and their hashes, to show that a refused run changed nothing."""
    return tree_state
