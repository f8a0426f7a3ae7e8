"""cluster("cuda") options: an RMM pool when rmm imports, CuPy's own allocator (and a note) when not.

Only the option building is tested here (no CUDA device on CPU machines): the
cluster itself is started by ``tests/test_cluster.py::test_cuda_cluster`` on GPUs.
"""

from __future__ import annotations

import subprocess
import sys
import types

import numpy as np
import pytest

from daskbatch.engine.planner import plan
from daskbatch.planning.plan import Resources
from daskbatch.runtime.capacity import machine_memory_bytes
from daskbatch.runtime.cluster import cuda_cluster_options

GiB = 2**30


@pytest.fixture()
def gpu_plan():
    gpu = Resources(8 * GiB, 1, 1, device_memory_bytes=16 * GiB, device="gpu")
    return plan(np.zeros((10_000, 8), dtype=np.float32), stats=("moments", "cov"), resources=gpu)


def test_without_rmm_no_pool_no_allocator_and_a_note(monkeypatch, capsys, gpu_plan):
    monkeypatch.setitem(sys.modules, "rmm", None)  # `import rmm` raises ImportError
    kwargs = {"n_workers": 2, "dashboard_address": ":0"}
    opts = cuda_cluster_options(kwargs, gpu_plan)
    assert opts == kwargs and opts is not kwargs
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "rmm is not installed, so the GPU workers have no RMM pool" in err[0]
    assert "daskbatch[gpu-cu12]" in err[0]


def test_without_rmm_an_explicit_pool_is_an_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "rmm", None)
    with pytest.raises(ImportError, match=r"^rmm_pool_size needs rmm, which cannot be imported"):
        cuda_cluster_options({"rmm_pool_size": "4GiB"})


def test_with_rmm_the_plan_sizes_the_pool(monkeypatch, capsys, gpu_plan):
    # Only whether `import rmm` succeeds matters to the option building.
    monkeypatch.setitem(sys.modules, "rmm", types.ModuleType("rmm"))
    opts = cuda_cluster_options({"n_workers": 1}, gpu_plan)
    assert opts == {
        "n_workers": 1,
        "rmm_pool_size": gpu_plan.rmm_pool_bytes,
        "rmm_allocator_external_lib_list": ["cupy"],
    }
    assert gpu_plan.rmm_pool_bytes % (256 * 2**20) == 0
    # The caller's own pool size and allocator list win.
    mine = cuda_cluster_options({"rmm_pool_size": "1GiB", "rmm_allocator_external_lib_list": []}, gpu_plan)
    assert mine == {"rmm_pool_size": "1GiB", "rmm_allocator_external_lib_list": []}
    assert capsys.readouterr().err == ""


def test_machine_memory_is_dasks_cgroup_aware_limit():
    import psutil
    from distributed.system import MEMORY_LIMIT

    assert machine_memory_bytes() == MEMORY_LIMIT
    assert 0 < machine_memory_bytes() <= psutil.virtual_memory().total


def test_every_rechunk_in_daskbatch_names_its_method() -> None:
    """Each ``.rechunk(`` passes ``method=rechunk_method()``: without it dask imports distributed to choose one.

    The test above runs the describe path; this one covers the rechunks of transforms, row stores and checkpoints.
    """
    import ast
    import pathlib

    import daskbatch

    root = pathlib.Path(daskbatch.__file__).parent
    missing = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "rechunk"
                    and "method" not in {k.arg for k in node.keywords}):
                missing.append(f"{path.relative_to(root)}:{node.lineno}")
    assert not missing, missing


def test_an_in_process_describe_does_not_import_distributed(tmp_path) -> None:
    """Without a client nothing needs distributed (importing it is ~0.3 s of every fresh process); the memory is its.

    A store's blocks and label are rechunked to the plan's rows, and dask's rechunk would import distributed
    to look for a client.
    """
    code = (
        "import sys, numpy as np, daskbatch as db\n"
        "from daskbatch.runtime.capacity import machine_memory_bytes\n"
        "s = db.describe(np.arange(4000.0).reshape(1000, 4), label=np.arange(1000) % 3)\n"
        "import zarr\n"
        "g = zarr.open_group('data.zarr', mode='w')\n"
        "g.create_array('X', data=np.arange(15000.0).reshape(3000, 5), chunks=(1000, 5))\n"
        "g.create_array('y', data=np.arange(3000) % 3, chunks=(700,))  # read in X's blocks\n"
        "s = db.describe(db.open_dataset('data.zarr', x='X', label='y'))\n"
        "assert 'distributed' not in sys.modules, 'distributed imported'\n"
        "memory = machine_memory_bytes()\n"
        "from distributed.system import MEMORY_LIMIT\n"
        "assert memory == MEMORY_LIMIT, (memory, MEMORY_LIMIT)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=250)
    assert done.returncode == 0, done.stderr[-2000:]
