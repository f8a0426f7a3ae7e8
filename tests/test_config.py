"""daskbatch's settings live in dask.config: packaged defaults, overridable from a batch script's environment."""

from __future__ import annotations

import os
import subprocess
import sys

import dask

from daskbatch import config


def test_packaged_defaults_are_loaded() -> None:
    assert config.get("split-every") == 8 and config.get("memory-fraction") == 0.5
    with dask.config.set({"daskbatch.split-every": 3}):
        assert config.get("split-every") == 3


def test_environment_variable_overrides_a_default() -> None:
    env = {**os.environ, "DASK_DASKBATCH__SPLIT_EVERY": "16"}
    code = "from daskbatch import config; print(config.get('split-every'))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "16"
