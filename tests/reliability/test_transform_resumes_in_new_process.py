"""Issue 16 item 5: a transform killed in one process resumes when the same script runs again in another.

Before, the steps' fingerprint held the summary's ``created`` timestamp: the
re-run script described the data again (the same numbers, a new timestamp)
and was refused as "a different transform (differs in steps)".
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import zarr

import daskbatch as db
from daskbatch.io.rowstore import DONE_FILE

ROOT = pathlib.Path(__file__).parents[2]

SCRIPT = """
import sys, time
import daskbatch as db
src, out, slow = sys.argv[1], sys.argv[2], sys.argv[3] == "slow"
if slow:  # slow blocks, so that the test can kill the process half way
    import daskbatch.transforms.steps as s
    apply = s.Clip.apply
    s.Clip.apply = lambda self, b: (time.sleep(0.05), apply(self, b))[1]
summary = db.describe(src, stats=["moments"])
report = db.transform(src, [db.steps.standardize(summary), db.steps.clip(-2, 2)], out, chunk_rows=20)
print(len(report.written), report.blocks)
"""


def test_killed_transform_resumes_in_a_new_process(tmp_path: pathlib.Path) -> None:
    x = np.random.default_rng(1).normal(size=(1200, 4)) * [1, 2, 3, 4] + 10
    src = tmp_path / "in.zarr"
    zarr.open_group(str(src), mode="w").create_array("X", data=x, chunks=(20, 4))
    out = tmp_path / "z.zarr"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DASK_NUM_WORKERS": "1"}
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(src), str(out), "slow"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    log = out / DONE_FILE
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if log.exists() and log.read_text().count("\n") >= 5:
            break
        time.sleep(0.02)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = {int(b) for b in log.read_text().split()}
    assert 5 <= len(done) < 60
    time.sleep(1.1)  # the new summary is made in another second than the first
    again = subprocess.run([sys.executable, "-c", SCRIPT, str(src), str(out), "fast"], env=env,
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert again.stdout.split() == [str(60 - len(done)), "60"]
    z = (x - x.mean(axis=0)) / x.std(axis=0)  # the population std, as StandardScaler
    got = db.open_dataset(out).x.compute()
    np.testing.assert_allclose(got, np.clip(z, -2, 2), rtol=1e-12, atol=1e-12)
    assert zarr.open_group(str(out)).attrs["complete"] is True
