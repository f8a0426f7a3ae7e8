"""CPU counts respect the process's CPU affinity (dask.system.CPU_COUNT), not the machine's cores."""

from __future__ import annotations

import ast
import json
import os
import pathlib
import subprocess
import sys

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "daskbatch"

_PROBE = """
import json, os
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # before dask reads it at import
from daskbatch.runtime.capacity import resources_from_machine
print(json.dumps([os.cpu_count(), resources_from_machine(n_workers=1, memory="1GiB").threads_per_worker]))
"""


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this platform")
def test_threads_follow_the_cpu_affinity():
    if os.cpu_count() is None or os.cpu_count() < 2:
        pytest.skip("one CPU: an affinity of one changes nothing")
    proc = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    cores, threads = json.loads(proc.stdout)
    assert cores >= 2 and threads == 1


def test_no_os_cpu_count_in_the_package():
    calls = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "cpu_count":
                calls.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert calls == [], f"use dask.system.CPU_COUNT (affinity and cgroup quotas), not cpu_count: {calls}"
