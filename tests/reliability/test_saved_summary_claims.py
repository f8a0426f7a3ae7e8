"""Issue "Every door locked" item 13: a saved summary no longer allocates what its metadata claims.

Before, a state array's shape set to ``[400000000]`` made ``select`` reach
3.2 GB and fail with a MemoryError before the record's checksum was checked,
and 200,000-deep JSON in a state's ``params`` ended in a RecursionError
traceback.  Now the arrays' claims are bounded and checked against the state's
record before anything is read, and whatever a damaged file makes the readers
raise is one line naming the summary.  The commands run as real subprocesses,
their peak memory measured by the kernel (``wait4``).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import dask
import numpy as np
import pytest

import daskbatch as db

ROOT = pathlib.Path(__file__).parents[2]
#: Peak resident memory of a refusing ``select`` (its interpreter and modules, a few hundred MB).
PEAK_RSS_BYTES = 1 << 30


@pytest.fixture()
def summary(tmp_path: pathlib.Path) -> pathlib.Path:
    """A saved summary with labelled states (what ``select --score f`` reads), kernels off: no compiling."""
    x = np.random.default_rng(13).normal(size=(120, 3))
    with dask.config.set({"daskbatch.kernels": False, "scheduler": "sync"}):
        result = db.describe(x, label=(x[:, 0] > 0).astype(np.int64), stats=["moments", "class_moments"])
    path = tmp_path / "s.zarr"
    result.save(path)
    return path


def _select(summary: pathlib.Path, tmp_path: pathlib.Path, planned: int | None = None) -> tuple[int, str, int]:
    """Run ``daskbatch select``: exit status, stderr, peak resident bytes.

    ``planned``: the memory the child plans with (its ``RLIMIT_RSS``, which Dask reads), else the machine's.
    """
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    limit = f"resource.setrlimit(resource.RLIMIT_RSS, ({planned}, {planned})); " if planned else ""
    # The child's own peak (VmHWM), written as it exits: the rusage of a child forked from a large
    # test process counts the parent's pages it shared before exec, whatever the child did.
    peak_file = tmp_path / "peak.txt"
    record = (
        "atexit.register(lambda: open(" + repr(str(peak_file)) + ", 'w').write(next("
        "line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM'))))"
    )
    script = (
        f"import atexit, resource, runpy, sys; {limit}{record}; "
        "sys.argv = ['daskbatch', *sys.argv[1:]]; runpy.run_module('daskbatch', run_name='__main__')"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, "select", str(summary), "--k", "2", "--out", str(tmp_path / "sel.csv")],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    assert proc.stderr is not None
    err = proc.stderr.read()
    proc.wait()
    return proc.returncode, err, int(peak_file.read_text()) * 1024  # VmHWM is in kB


def _edit(path: pathlib.Path, change: dict) -> None:
    doc = json.loads(path.read_text())
    doc.update(change)
    path.write_text(json.dumps(doc))


def test_the_summary_selects(summary: pathlib.Path, tmp_path: pathlib.Path) -> None:
    code, err, _ = _select(summary, tmp_path)
    assert code == 0, err


@pytest.mark.parametrize("record_too", [False, True], ids=["array", "array-and-record"])
def test_a_state_array_claiming_400_million_values_is_refused_unread(
    summary: pathlib.Path, tmp_path: pathlib.Path, record_too: bool
) -> None:
    array = summary / "states" / "moments" / "mean" / "zarr.json"
    _edit(array, {"shape": [400_000_000]})
    if record_too:  # the record agrees: the claim is refused by its size (the child has 2 GiB to plan with)
        group = summary / "states" / "moments" / "zarr.json"
        doc = json.loads(group.read_text())
        for field in doc["attributes"]["fields"]:
            if field[0] == "mean":
                field[2] = [400_000_000]
        group.write_text(json.dumps(doc))
    code, err, peak = _select(summary, tmp_path, planned=2 << 30)
    assert code == 2, err[-3000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: summary ") and str(summary) in lines[0], err[-3000:]
    assert ("'mean'" in lines[0] and "[400000000]" in lines[0]) or "claim" in lines[0], lines[0]
    assert peak < PEAK_RSS_BYTES, peak  # before: 3.2 GB


def test_200000_deep_params_are_one_line(summary: pathlib.Path, tmp_path: pathlib.Path) -> None:
    group = summary / "states" / "moments" / "zarr.json"
    doc = json.loads(group.read_text())
    doc["attributes"]["params"] = "MARK"
    group.write_text(json.dumps(doc).replace('"MARK"', "[" * 200_000 + "]" * 200_000))
    code, err, _ = _select(summary, tmp_path)
    assert code == 2, err[-3000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and str(summary) in lines[0] and "Traceback" not in err, err[-3000:]


def test_a_state_of_another_dtype_than_its_record_is_refused(summary: pathlib.Path, tmp_path: pathlib.Path) -> None:
    _edit(summary / "states" / "moments" / "m2" / "zarr.json", {"data_type": "float32"})
    code, err, _ = _select(summary, tmp_path)
    assert code == 2, err[-3000:]
    assert "field 'm2' is stored as <f4 [3], its record says <f8 [3]" in err, err


def test_two_damaged_zarr_json_are_one_line_without_zarrs_tracebacks(summary: pathlib.Path, tmp_path: pathlib.Path) -> None:
    # zarr reads a group's members at once and raises the first failure; the other failed reads, left
    # unawaited, were logged by asyncio as "Task exception was never retrieved" with their tracebacks.
    moments = summary / "states" / "moments"
    (moments / "mean" / "zarr.json").write_text('{"zarr_format": 3, [[[')
    (moments / "n" / "zarr.json").write_text("garbage")
    code, err, _ = _select(summary, tmp_path)
    assert code == 2, err[-3000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: summary {summary}") and "damaged" in lines[0], err[-3000:]


def test_a_removed_zarr_json_is_named_in_one_line(summary: pathlib.Path, tmp_path: pathlib.Path) -> None:
    # zarr passed over a folder without its zarr.json with a ZarrUserWarning on stderr, and the summary was
    # then refused as "copied from another summary or changed".
    (summary / "mean" / "zarr.json").unlink()
    (summary / "states" / "moments" / "n" / "zarr.json").unlink()
    code, err, _ = _select(summary, tmp_path)
    assert code == 2, err[-3000:]
    assert err.strip().splitlines() == [
        f"error: summary {summary}: mean, states/moments/n have no zarr.json (its metadata was removed): "
        "it was damaged; describe the data again"
    ], err[-3000:]


def test_a_tools_hidden_folder_in_a_summary_is_left_alone(summary: pathlib.Path) -> None:
    (summary / ".ipynb_checkpoints").mkdir()  # JupyterLab's, after a file there was opened
    loaded = db.load_summary(summary)
    assert loaded.n_features == 3
