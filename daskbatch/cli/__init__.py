"""The ``daskbatch`` command line: a thin click shell over the public API."""

from __future__ import annotations

# Command modules register themselves on ``main`` when imported.
from daskbatch.cli import data_cmd as _data_cmd  # noqa: F401
from daskbatch.cli import describe_cmd as _describe_cmd  # noqa: F401
from daskbatch.cli import summary_cmd as _summary_cmd  # noqa: F401
from daskbatch.cli._common import main

__all__ = ["main"]
