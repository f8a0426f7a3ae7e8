"""Incremental summaries neither double-count nor lose rows.

The same ``--update`` run twice counted the new store twice, and two concurrent
``--update`` runs both exited 0 with one update lost (no lock). Now a summary
records the content tokens of its inputs and refuses one it already holds, and
an update holds the summary's run lock from reading it to writing it back.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import zarr
from click.testing import CliRunner

import daskbatch as db
from daskbatch.cli import main
from daskbatch.runtime.runlock import RunLock, output_lock_path

FAST = ["--cluster", "threads", "--no-progress", "--stats", "moments"]


def make_store(path: pathlib.Path, x: np.ndarray) -> pathlib.Path:
    zarr.open_group(str(path), mode="w").create_array("X", data=x, chunks=(50, x.shape[1]))
    return path


@pytest.fixture()
def parts(tmp_path: pathlib.Path) -> list[tuple[pathlib.Path, np.ndarray]]:
    rng = np.random.default_rng(7)
    out = []
    for i, n in enumerate((200, 150, 120)):
        x = rng.normal(loc=i, size=(n, 3))
        out.append((make_store(tmp_path / f"d{i}.zarr", x), x))
    return out


def describe_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "daskbatch", "describe", *args, "--cluster", "threads",
                           "--no-progress"], capture_output=True, text=True, timeout=120)


def check(summary: pathlib.Path, *xs: np.ndarray) -> None:
    s = db.load_summary(summary)
    rows = np.concatenate(xs)
    np.testing.assert_array_equal(s.count, np.full(rows.shape[1], rows.shape[0]))
    np.testing.assert_allclose(s.mean, rows.mean(axis=0), rtol=1e-13)
    np.testing.assert_allclose(s.std, rows.std(axis=0, ddof=1), rtol=1e-12)


def test_the_same_update_twice_is_refused(tmp_path: pathlib.Path, parts: list) -> None:
    (d0, x0), (d1, x1) = parts[:2]
    s = tmp_path / "s.zarr"
    assert CliRunner().invoke(main, ["describe", str(d0), *FAST, "--out", str(s)]).exit_code == 0
    first = CliRunner().invoke(main, ["describe", str(d1), "--update", str(s), "--cluster", "threads", "--no-progress"])
    assert first.exit_code == 0, first.output
    again = CliRunner().invoke(main, ["describe", str(d1), "--update", str(s), "--cluster", "threads", "--no-progress"])
    assert again.exit_code == 2, again.output
    # These stores carry no chunk checksums: their token is known once describe has read them,
    # so the run's log lines come first; the refusal is the one error line, last.
    errors = [line for line in again.stderr.splitlines() if line.startswith("error:")]
    err = again.stderr.strip().splitlines()[-1]
    assert errors == [err] and str(d1) in err and "already in the summary" in err, err
    check(s, x0, x1)
    # The first store again, too.
    base = CliRunner().invoke(main, ["describe", str(d0), "--update", str(s), "--cluster", "threads", "--no-progress"])
    assert base.exit_code == 2 and "already in the summary" in base.stderr, base.output
    check(s, x0, x1)


def test_the_api_refuses_the_same_rows_twice(parts: list) -> None:
    (d0, x0), (d1, x1) = parts[:2]
    a = db.describe(str(d0), stats="moments")
    b = db.update(a, str(d1))
    with pytest.raises(ValueError, match="count its rows twice"):
        db.update(b, str(d1))
    with pytest.raises(ValueError, match="count its rows twice"):
        db.merge(a, a)
    with pytest.raises(ValueError, match="count its rows twice"):
        db.merge(b, db.describe(str(d0), stats="moments"))
    with pytest.raises(ValueError, match="count its rows twice"):  # in-memory rows too
        db.merge(db.describe(x1, stats="moments"), db.describe(x1, stats="moments"))
    other = db.describe(x0 + 1.0, stats="moments")  # different rows merge as before
    np.testing.assert_allclose(db.merge(b, other).mean, np.concatenate([x0, x1, x0 + 1.0]).mean(axis=0),
                               rtol=1e-13)


def test_an_update_of_a_summary_being_updated_fails_naming_the_holder(
    tmp_path: pathlib.Path, parts: list
) -> None:
    (d0, x0), (d1, _) = parts[:2]
    s = tmp_path / "s.zarr"
    db.describe(str(d0), stats="moments").save(s)
    with RunLock(output_lock_path(s), "test"):  # another update, in this process
        proc = describe_cli(str(d1), "--update", str(s))
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr.strip()
    assert "\n" not in err and f"pid {os.getpid()}" in err and "in use" in err, err
    check(s, x0)


def test_two_concurrent_updates_lose_nothing(tmp_path: pathlib.Path, parts: list) -> None:
    (d0, x0), (d1, x1), (d2, x2) = parts
    s = tmp_path / "s.zarr"
    db.describe(str(d0), stats="moments").save(s)
    cmd = [sys.executable, "-m", "daskbatch", "describe", "--update", str(s), "--cluster", "threads", "--no-progress"]
    procs = [subprocess.Popen([*cmd, str(d)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for d in (d1, d2)]
    results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]  # type: ignore[union-attr]
    for p in procs:
        p.stdout.close()  # type: ignore[union-attr]
        p.stderr.close()  # type: ignore[union-attr]
    kept = [x for (rc, err), x in zip(results, (x1, x2), strict=True) if rc == 0]
    for rc, err in results:
        assert rc == 0 or (rc == 2 and "in use" in err), err
    assert kept  # at least one went through
    check(s, x0, *kept)  # every update that said ok is in the summary
