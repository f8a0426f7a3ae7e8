"""Finding 10: SIGTERM on a store of many chunks ends with one line, exit 75, within seconds.

Before, it exited 75 but wrote thousands of ``Task was destroyed but it is
pending!`` lines and tracebacks (the store's reads still in flight on zarr's
event loop when the interpreter tore down), and took 39 s at 190,000 chunks.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import zarr
from zarr.codecs import GzipCodec

ROOT = pathlib.Path(__file__).parents[2]


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("many") / "many.zarr"
    # 12,500 chunks: the first pass reads them for about 6 s on 2 cores, so reads are in flight
    # when the signal comes 1 s after it starts (writing them is most of this test's time). Gzip,
    # so that zarr reads them on its event loop (zstd chunks of a local store are decoded directly).
    x = np.random.default_rng(0).normal(size=(25_000, 2))
    zarr.open_group(str(path), mode="w").create_array("X", data=x, chunks=(2, 2), compressors=[GzipCodec()])
    return path


def test_sigterm_mid_describe_is_one_line(many: pathlib.Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        # --no-cache: the reads are in flight during pass 1 (a cache reads the blocks before it).
            [sys.executable, "-m", "daskbatch", "describe", str(many), "--cluster", "threads", "--no-progress", "--no-cache"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    assert proc.stderr is not None
    before = []
    for line in proc.stderr:  # the log says when the pass (the reads) started
        before.append(line)
        if "pass 1/" in line and "started" in line:
            break
    else:
        pytest.fail("".join(before))
    time.sleep(1.0)  # reads in flight
    proc.send_signal(signal.SIGTERM)
    t0 = time.monotonic()
    after = proc.stderr.read()
    code = proc.wait(timeout=60)
    seconds = time.monotonic() - t0
    assert code == 75, after[-3000:]
    lines = after.strip().splitlines()
    assert lines[-1] == "interrupted by SIGTERM; nothing was kept (no --checkpoint): run the same command to start again", after[-3000:]
    assert len(lines) <= 3, f"{len(lines)} lines: {after[:3000]}"
    assert "Traceback" not in after and "Task was destroyed" not in after
    assert seconds < 10, seconds
