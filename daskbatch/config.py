"""Defaults of daskbatch, loaded into ``dask.config`` under the ``daskbatch`` key.

Override with ``dask.config.set({"daskbatch.split-every": 16})`` or, in a batch
script, ``DASK_DASKBATCH__SPLIT_EVERY=16``. Nothing is written to home directories.
"""

from __future__ import annotations

import pathlib
from typing import Any

import dask.config
import yaml

_DEFAULTS_FILE = pathlib.Path(__file__).with_name("daskbatch.yaml")


def _load_defaults() -> None:
    with _DEFAULTS_FILE.open() as f:
        defaults = yaml.safe_load(f)
    dask.config.update_defaults(defaults)


def get(key: str) -> Any:
    """Read the effective value of ``daskbatch.<key>`` (e.g. ``get("split-every")``).

    Parameters
    ----------
    key : str
        The key below ``daskbatch.``.

    Returns
    -------
    object
        The value.
    """
    return dask.config.get(f"daskbatch.{key}")


_load_defaults()
