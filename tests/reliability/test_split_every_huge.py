"""Finding 7: ``split_every=10**9`` (API, CLI, config) used to make the planner count down one at a time (a hang).

A fan-in above the number of blocks merges them all at once; the planner now
starts its search there and bisects, so any fan-in plans at once, and the
result equals the default's.  Nonsense fan-ins are one-line errors.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import daskbatch as db

ROOT = pathlib.Path(__file__).parents[2]
HUGE = 10**9

DESCRIBE = """
import sys, numpy as np, daskbatch as db
kw = {"run": db.RunOptions(split_every=int(sys.argv[2]))} if len(sys.argv) > 2 else {}
s = db.describe(sys.argv[1], stats=["moments"], **kw)
np.save(sys.argv[1] + ".mean.npy", np.asarray(s.mean))
"""


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """A fresh process (a hang fails the test after 60 s instead of stalling the suite)."""
    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, *args], env=full, capture_output=True, text=True, timeout=60)


def test_api_and_config(store: pathlib.Path, data: np.ndarray) -> None:
    api = run("-c", DESCRIBE, str(store), str(HUGE))
    assert api.returncode == 0, api.stderr
    np.testing.assert_allclose(np.load(f"{store}.mean.npy"), data.mean(axis=0), rtol=1e-13)
    config = run("-c", DESCRIBE, str(store), env={"DASK_DASKBATCH__SPLIT_EVERY": str(HUGE)})
    assert config.returncode == 0, config.stderr


def test_cli_plan(store: pathlib.Path) -> None:
    done = run("-m", "daskbatch", "plan", str(store), "--x", "X", "--split-every", str(HUGE), "--memory", "4GiB",
               "--stats", "moments")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("bad", [1, 0, -5, 2.5, "8", True, None])
def test_nonsense_is_a_one_line_error(store: pathlib.Path, bad: object) -> None:
    if bad is None:  # the same through the config
        import dask

        with dask.config.set({"daskbatch.split-every": "many"}), pytest.raises((ValueError, TypeError)) as err:
            db.describe(str(store), stats=["moments"])
    else:
        with pytest.raises((ValueError, TypeError)) as err:
            db.describe(str(store), stats=["moments"], run=db.RunOptions(split_every=bad))  # type: ignore[arg-type]
    assert "split" in str(err.value) and "\n" not in str(err.value)
