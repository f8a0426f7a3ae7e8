"""Chunk tasks run with one BLAS thread when the scheduler runs several threads, and untouched otherwise.

Each case runs in a fresh Python process: BLAS thread counts are process-wide
state (see daskbatch/runtime/capacity.py), which earlier tests would leave behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import json, sys
import dask, dask.array as da, numpy as np, numba
from threadpoolctl import threadpool_info
from daskbatch.engine.passes import tree_reduce
from daskbatch.stats import Moments

def blas():
    return max((l["num_threads"] for l in threadpool_info() if l["user_api"] == "blas"), default=0)

class Probe(Moments):
    name = "probe"
    def chunk(self, x, label=None):
        # reported through a module that cloudpickle keeps by reference
        sys.modules["json"].seen.append((blas(), numba.get_num_threads()))
        return super().chunk(x, label)

json.seen = []
before = blas()
x = da.from_array(np.random.default_rng(0).normal(size=(4000, 3)), chunks=(500, -1))
scheduler, workers = sys.argv[1], int(sys.argv[2])
if scheduler == "distributed":  # workers as threads of this process, so that json.seen is this one's
    from distributed import Client, LocalCluster
    with LocalCluster(n_workers=1, threads_per_worker=workers, processes=False, dashboard_address=None) as cluster:
        with Client(cluster):
            tree_reduce(Probe(), x).compute()
else:
    with dask.config.set(scheduler=scheduler, num_workers=workers):
        tree_reduce(Probe(), x).compute()
print(json.dumps({"before": before, "seen": json.seen}))
"""


def run(scheduler: str, workers: int) -> dict:
    # A fresh process with BLAS's own default: distributed's workers set these for their process, and
    # a test that ran one in-process beside this one leaves them in os.environ.
    pinned = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
    env = {k: v for k, v in os.environ.items() if k not in pinned}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    result = subprocess.run([sys.executable, "-c", SCRIPT, scheduler, str(workers)],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    if out["before"] < 2:
        pytest.skip("BLAS runs one thread here already: nothing to limit")
    assert len(out["seen"]) == 8
    return out


def test_threaded_scheduler_limits_blas_and_numba_to_one_thread() -> None:
    out = run("threads", 2)
    assert {blas for blas, _ in out["seen"]} == {1}
    assert {nb for _, nb in out["seen"]} == {1}


def test_a_distributed_worker_of_two_threads_limits_blas_and_numba_to_one_thread() -> None:
    # A worker's thread count is Worker.state.nthreads: Worker.nthreads was deprecated, then removed
    # (where it was gone, every worker counted as one thread and nothing was limited).
    out = run("distributed", 2)
    assert {blas for blas, _ in out["seen"]} == {1}
    assert {nb for _, nb in out["seen"]} == {1}


def test_sync_scheduler_leaves_blas_alone() -> None:
    out = run("sync", 1)
    assert {blas for blas, _ in out["seen"]} == {out["before"]}


def test_a_one_thread_pool_leaves_blas_alone() -> None:
    out = run("threads", 1)
    assert {blas for blas, _ in out["seen"]} == {out["before"]}
