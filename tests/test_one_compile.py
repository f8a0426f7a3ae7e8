"""Whole processes: the CLI runs where the API runs, and a machine compiles the kernels once (issue 33).

- ``daskbatch describe`` without GPUs runs on dask's threaded scheduler in its own
  process (no LocalCluster whose worker processes each load the kernels again);
- processes that start together on a cold numba cache compile once, under a lock on
  the cache directory, and only the one that compiles says so;
- the demo says nothing about compiling on a warm cache, and prints no
  ``distributed.core`` connection lines.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

import daskbatch as db

ROOT = pathlib.Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))

#: A child that prepares the moments kernels and prints how many numba compiled (cache misses only).
PREPARE = r"""
import json
from numba.core import event

compiled = []

class Record(event.Listener):
    def on_start(self, ev):
        compiled.append(ev.data["dispatcher"].py_func.__qualname__)

    def on_end(self, ev):
        pass

event.register("numba:compile", Record())
from daskbatch.precompile import prepare_kernels

prepare_kernels("float64", None, "moments", echo=print)
print(json.dumps({"compiled": len(compiled)}))
"""


def _has_gpu_cluster() -> bool:
    """Whether ``--cluster auto`` would start dask-cuda workers here."""
    from daskbatch.runtime.cluster import resolve_kind

    return resolve_kind("auto") == "cuda"


def test_describe_without_gpus_runs_in_this_process(tmp_path: pathlib.Path) -> None:
    if _has_gpu_cluster():
        pytest.skip("with GPUs the default starts dask-cuda workers")
    path = str(tmp_path / "d.zarr")
    db.synth(3000, 3, path=path)
    done = subprocess.run(
        [sys.executable, "-m", "daskbatch", "describe", path, "--stats", "moments", "--no-progress", "--json", "-"],
        env=ENV, capture_output=True, text=True, timeout=250,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "started a local cluster" not in done.stderr and "dashboard" not in done.stderr, done.stderr
    assert json.loads(done.stdout)["count"][0] == 3000


@pytest.mark.slow
def test_processes_on_a_cold_cache_compile_once(tmp_path: pathlib.Path) -> None:
    env = dict(ENV, NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    started = [
        subprocess.Popen([sys.executable, "-c", PREPARE], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=280) for p in started]
    assert [p.returncode for p in started] == [0, 0], [err[-2000:] for _, err in outs]
    compiled = sorted(json.loads(out.strip().splitlines()[-1])["compiled"] for out, _ in outs)
    assert compiled[0] == 0 < compiled[1], compiled  # one compiled, the other waited and loaded
    said = [out.count("Compiling the CPU kernels once") for out, _ in outs]
    assert sorted(said) == [0, 1], outs
    again = subprocess.run([sys.executable, "-c", PREPARE], env=env, capture_output=True, text=True, timeout=280)
    assert again.returncode == 0 and "Compiling" not in again.stdout, again.stdout
    assert json.loads(again.stdout.strip().splitlines()[-1])["compiled"] == 0


@pytest.mark.slow
def test_the_demo_on_a_warm_cache_says_nothing_about_compiling() -> None:
    demo = [sys.executable, "-m", "daskbatch", "demo", "--rows", "20000", "--features", "6", "--workers", "1"]
    first = subprocess.run(demo, env=ENV, capture_output=True, text=True, timeout=280)  # fills the cache if cold
    assert first.returncode == 0, first.stderr[-2000:]
    second = subprocess.run(demo, env=ENV, capture_output=True, text=True, timeout=280)
    assert second.returncode == 0, second.stderr[-2000:]
    output = second.stdout + second.stderr
    # Neither "Compiling the CPU kernels once" nor main's old line ("compiled once per machine, about a minute").
    assert "Compiling" not in output and "compiled once" not in output, output[:2000]
    assert "has been closed" not in output and "summary computed in" in output, output[-3000:]
