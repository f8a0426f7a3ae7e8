"""A statistic named in a job file or on the command line never imports a module or calls a class.

Before, ``statistics: {stats: ["evil:X"]}`` imported ``evil.py`` from the
working directory and called ``X()``: a job file, "plain values that run no
code", ran whatever a module beside it did. Names now come only from the
built-in statistics and the ``daskbatch.statistics`` entry-point group of the
installed packages.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
import yaml

ROOT = pathlib.Path(__file__).parents[2]

EVIL = """
import pathlib
pathlib.Path("imported").touch()

class X:
    def __init__(self):
        pathlib.Path("called").touch()
"""

STATISTIC = """
from dataclasses import dataclass
import numpy as np
import daskbatch as db

@dataclass(frozen=True)
class Rows(db.State):
    n: np.ndarray

@dataclass(frozen=True)
class Count:
    name = "count_rows"
    def chunk(self, x, label=None):
        return Rows(np.asarray([len(x)], dtype=np.int64))
    def merge(self, a, b):
        return Rows(a.n + b.n)
    def finalize(self, s):
        return s.n
"""


def daskbatch_cli(cwd: pathlib.Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m daskbatch ARGS`` in ``cwd`` (which is on sys.path first, as for any ``python -m``)."""
    full = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), *env.pop("extra_path", "").split(os.pathsep)]),
        **env,
    }
    return subprocess.run(
        [sys.executable, "-m", "daskbatch", *args],
        cwd=cwd,
        env=full,
        capture_output=True,
        text=True,
        timeout=240,
    )


def job_file(folder: pathlib.Path, store: pathlib.Path, stats: object) -> pathlib.Path:
    job = {
        "input": {"store": str(store)},
        "statistics": {"stats": stats},
        "selection": {"score": "variance", "param": 2},
        "transform": {"steps": []},
        "cluster": {"kind": "threads", "threads": 1},
        "memory": "1GiB",
        "outputs": {"dir": str(folder / "out")},
    }
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump({"daskbatch": {"job": job}}))
    return path


def assert_refused(done: subprocess.CompletedProcess[str], name: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    err = done.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    assert (
        f"unknown statistic '{name}'" in err
        and "never imported" in err
        and "daskbatch.statistics" in err
    ), err


@pytest.mark.parametrize("stats", [["moments", "evil:X"], "moments,evil:X", "evil:X.__init__"])
def test_a_job_file_imports_nothing(
    tmp_path: pathlib.Path, store: pathlib.Path, stats: object
) -> None:
    (tmp_path / "evil.py").write_text(EVIL)
    job = job_file(tmp_path, store, stats)
    done = daskbatch_cli(tmp_path, "run", str(job))
    name = stats[-1] if isinstance(stats, list) else stats.split(",")[-1]
    assert_refused(done, name)
    assert not (tmp_path / "imported").exists() and not (tmp_path / "called").exists()
    assert "evil" not in done.stdout


@pytest.mark.parametrize("name", ["this:s", "tempfile:TemporaryDirectory", "evil:X"])
def test_describe_and_its_config_file_import_nothing(
    tmp_path: pathlib.Path, store: pathlib.Path, name: str
) -> None:
    (tmp_path / "evil.py").write_text(EVIL)
    fast = ["--cluster", "threads", "--no-progress", "-q"]
    done = daskbatch_cli(tmp_path, "describe", str(store), "--stats", f"moments,{name}", *fast)
    assert_refused(done, name)
    assert (
        "Beautiful is better than ugly" not in done.stdout + done.stderr
    )  # what importing `this` prints
    config = job_file(tmp_path, store, f"moments,{name}")
    done = daskbatch_cli(tmp_path, "describe", str(store), "--config", str(config), *fast)
    assert_refused(done, name)
    assert "Beautiful is better than ugly" not in done.stdout + done.stderr
    assert not (tmp_path / "imported").exists() and not (tmp_path / "called").exists()


def test_a_registered_name_still_works_in_a_job_file(
    tmp_path: pathlib.Path, store: pathlib.Path
) -> None:
    """A package installed with an entry point in ``daskbatch.statistics`` names its statistic."""
    lib = tmp_path / "lib"
    (lib / "rowstats-1.0.dist-info").mkdir(parents=True)
    (lib / "rowstats.py").write_text(STATISTIC)
    (lib / "rowstats-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: rowstats\nVersion: 1.0\n"
    )
    (lib / "rowstats-1.0.dist-info" / "entry_points.txt").write_text(
        "[daskbatch.statistics]\ncount_rows = rowstats:Count\n"
    )
    job = job_file(tmp_path, store, ["moments", "count_rows"])
    done = daskbatch_cli(tmp_path, "run", str(job), extra_path=str(lib))
    assert done.returncode == 0, done.stderr
    import daskbatch as db

    assert int(db.load_summary(tmp_path / "out" / "summary.zarr").extra["count_rows"][0]) == 600
