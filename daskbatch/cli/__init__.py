"""The ``daskbatch`` command line: a thin click shell over the public API.

Each sub-module registers its commands on :data:`main`; importing them here
makes them part of the group.
"""

from __future__ import annotations

# Command modules register themselves on ``main`` when imported.
from daskbatch.cli import compare_cmd as _compare_cmd  # noqa: E402,F401
from daskbatch.cli import data_cmd as _data_cmd  # noqa: E402,F401
from daskbatch.cli import demo_cmd as _demo_cmd  # noqa: E402,F401
from daskbatch.cli import describe_cmd as _describe_cmd  # noqa: E402,F401
from daskbatch.cli import info_cmd as _info_cmd  # noqa: E402,F401
from daskbatch.cli import plan_cmd as _plan_cmd  # noqa: E402,F401
from daskbatch.cli import run_cmd as _run_cmd  # noqa: E402,F401
from daskbatch.cli import select_cmd as _select_cmd  # noqa: E402,F401
from daskbatch.cli import transform_cmd as _transform_cmd  # noqa: E402,F401
from daskbatch.cli._group import main

__all__ = ["main"]
