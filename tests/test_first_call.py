"""The first call's compile: what a fresh numba cache compiles, and that the demo's workers find it all cached.

Run in a subprocess with an empty ``NUMBA_CACHE_DIR`` (a new install), recording
numba's compile events: each kernel compiles one specialisation for the demo's
dtypes, finite data compiles none of the loops for NaN and infinity, none compiles
numba's array-shape error message or its sort, and a
``describe`` of a store after the demo's warm-up compiles nothing more.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

CHILD = r"""
import collections, json, sys
from numba.core import event

compiled = collections.Counter()

class Record(event.Listener):
    def on_start(self, ev):
        compiled[ev.data["dispatcher"].py_func.__qualname__] += 1

    def on_end(self, ev):
        pass

event.register("numba:compile", Record())
import daskbatch as db
from daskbatch.precompile import prepare_kernels

prepare_kernels("float32", "int32", echo=print)
warm_up = dict(compiled)
compiled.clear()
db.describe(db.synth(4000, 6, classes=3, path=sys.argv[1], chunk_rows=1000))
print(json.dumps({"warm_up": warm_up, "describe": dict(compiled)}))
"""


@pytest.mark.slow
def test_a_new_install_compiles_each_kernel_once_and_the_demo_workers_nothing(tmp_path: pathlib.Path) -> None:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"),
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "data.zarr")], env=env,
                          capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    warm_up = found["warm_up"]
    # One specialisation each: a literal 0 once made a second (Literal[int](0)) of the masked loops.
    for kernel in ("_moments_pass1_clean", "_moments_pass2_clean", "_class_pass1_clean", "_class_pass2_clean",
                   "_count_rows"):
        assert warm_up.get(kernel) == 1, (kernel, warm_up)
    # Finite data compiles no loop with the finite test, nor the histogram's loop for degenerate ranges.
    masked = ("_moments_pass1", "_moments_pass2", "_moments_block_masked", "_class_pass1", "_class_pass2",
              "_class_block_masked")
    assert not [name for name in masked if name in warm_up], warm_up
    # Nor the scans for the first finite values, when the first row (each class's) is finite: its values are the shift.
    assert not [name for name in ("_moments_shift", "_first_complete_row", "_class_shift") if name in warm_up], warm_up
    # Whole-array copies compiled numba's shape-mismatch message (3-4 s); np.argsort its quicksort (1 s).
    assert not [name for name in warm_up if "raise_with_shape" in name or "quicksort" in name], warm_up
    # The kernels' small helpers are copied into their callers: none is a compile of its own (each was a whole
    # compile: the helpers took ~12 % of the first call's compile time).
    helpers = _inlined_helpers()  # every one, so that a new helper is checked too; at least these:
    assert {"_filled", "_copy_sums", "_tail_row", "_tail_block_end", "_tail_start", "_grid_scales", "_grid_slot",
            "_code_folded", "_sketch_key", "_clamped_key", "_heap_replace", "_slot_any_range",
            "_slot_in_range"} <= helpers, helpers
    assert not [name for name in warm_up if name.split(".")[0] in helpers], warm_up
    # Nor is the element load, the row weight, the fourth power or the finite test: intrinsics, emitted into their
    # callers (as overloads, each signature was a compile of its own lambda; tests/test_kernel_intrinsics.py has the
    # others that stand for numba's own overloads).
    assert not [name for name in warm_up if "<lambda>" in name], warm_up
    # The demo's warm-up left nothing for its workers to compile.
    assert found["describe"] == {}, found["describe"]


def _inlined_helpers() -> set[str]:
    """The names of the CPU kernels' helpers that numba copies into their callers (``inline="always"``)."""
    import importlib

    from daskbatch.stats import kernels

    where = pathlib.Path(kernels.__file__).parent
    modules = [importlib.import_module(f"daskbatch.stats.kernels.{path.stem}")
               for pattern in ("_numba*.py", "_sketch_table.py") for path in where.glob(pattern)]
    return {name for module in modules for name, f in vars(module).items()
            if getattr(f, "targetoptions", {}).get("inline") == "always"}
