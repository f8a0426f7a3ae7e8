"""Finding 4: map_batches knows its function by its code, not its name.

Before, the output store recorded ``module.qualname`` only: a different lambda
on the same output got the old results back, and a fixed function resumed
over a half-written output mixed rows of the old and the new version.
"""

from __future__ import annotations

import importlib
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import zarr

import daskbatch as db
from daskbatch.errors import DataError
from daskbatch.io.rowstore import DONE_FILE

ROOT = pathlib.Path(__file__).parents[2]


def as_if_killed(out: pathlib.Path, keep: int) -> None:
    """What a kill leaves: the first ``keep`` blocks logged, ``complete`` false."""
    log = out / DONE_FILE
    log.write_text("".join(f"{b}\n" for b in log.read_text().split()[:keep]))
    zarr.open_group(str(out), mode="r+").attrs["complete"] = False


def test_another_lambda_is_refused(store: pathlib.Path, tmp_path: pathlib.Path, data: np.ndarray) -> None:
    out = tmp_path / "m.zarr"
    db.map_batches(lambda b: b * 2, str(store), out=out, batch_rows=100)
    with pytest.raises(DataError, match="function"):
        db.map_batches(lambda b: b * 3, str(store), out=out, batch_rows=100)
    np.testing.assert_array_equal(db.open_dataset(out).x.compute(), data * 2)
    db.map_batches(lambda b: b * 3, str(store), out=out, batch_rows=100, overwrite=True)
    np.testing.assert_array_equal(db.open_dataset(out).x.compute(), data * 3)


def test_closure_values_and_defaults_count(store: pathlib.Path, tmp_path: pathlib.Path) -> None:
    def scaled(k: float):
        return lambda b: b * k

    def shifted(b: np.ndarray, by: float = 1.0) -> np.ndarray:
        return b + by

    out = tmp_path / "m.zarr"
    db.map_batches(scaled(2.0), str(store), out=out, batch_rows=100)
    db.map_batches(scaled(2.0), str(store), out=out, batch_rows=100)  # equal closure: the same job
    with pytest.raises(DataError, match="function"):
        db.map_batches(scaled(2.5), str(store), out=out, batch_rows=100)
    other = tmp_path / "s.zarr"
    db.map_batches(shifted, str(store), out=other, batch_rows=100)
    shifted.__defaults__ = (2.0,)
    with pytest.raises(DataError, match="function"):
        db.map_batches(shifted, str(store), out=other, batch_rows=100)


FIRST = "import numpy as np\n\n\ndef helper(b):\n    return b * 2\n\n\ndef work(b):\n    return np.abs(helper(b))\n"
FIXED = FIRST.replace("return b * 2", "return b * 2.5")


def test_a_fixed_function_is_not_resumed(store: pathlib.Path, tmp_path: pathlib.Path, data: np.ndarray,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The bug is in a helper the function calls: the fix changes the token, not the name."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    module = tmp_path / "userwork.py"
    module.write_text(FIRST)
    userwork = importlib.import_module("userwork")
    out = tmp_path / "m.zarr"
    db.map_batches(userwork.work, str(store), out=out, batch_rows=100)
    as_if_killed(out, keep=2)
    module.write_text(FIXED)
    userwork = importlib.reload(userwork)
    with pytest.raises(DataError, match="function"):
        db.map_batches(userwork.work, str(store), out=out, batch_rows=100)
    db.map_batches(userwork.work, str(store), out=out, batch_rows=100, overwrite=True)
    np.testing.assert_array_equal(db.open_dataset(out).x.compute(), np.abs(data * 2.5))
    sys.modules.pop("userwork", None)


RUN = """
import sys
sys.path.insert(0, sys.argv[3])
import daskbatch as db, userwork
report = db.map_batches(userwork.work, sys.argv[1], out=sys.argv[2], batch_rows=100)
print(len(report.written))
"""


def test_the_same_function_resumes_in_another_process(store: pathlib.Path, tmp_path: pathlib.Path,
                                                      data: np.ndarray) -> None:
    (tmp_path / "userwork.py").write_text(FIRST)
    out = tmp_path / "m.zarr"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "random"}
    args = [sys.executable, "-c", RUN, str(store), str(out), str(tmp_path)]
    first = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0 and first.stdout.split() == ["6"], first.stderr
    as_if_killed(out, keep=2)
    again = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and again.stdout.split() == ["4"], again.stderr
    np.testing.assert_array_equal(db.open_dataset(out).x.compute(), np.abs(data * 2))
