"""What every command prints: one-line usage errors, ``-q`` on every verb, the table's length and titles, results-only JSON, the demo's data."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys
import tempfile

import numpy as np
import pytest
from click.testing import CliRunner

import daskbatch as db
from daskbatch.cli import main
from daskbatch.demo import DEMO_ROWS
from daskbatch.summary.views import QUANTILE_BUCKETS

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """A 32-feature store with a label, its summary, and a batch file: what the commands read."""
    here = tmp_path_factory.mktemp("cli-output")
    db.synth(str(here / "data.zarr"), rows=4_000, features=32, classes=3, informative=8, correlated=4, chunk_rows=1_000)
    db.describe(str(here / "data.zarr"), label="y").save(str(here / "stats.zarr"))
    rng = np.random.default_rng(0)
    np.savez(here / "batch.npz", x=rng.normal(size=(300, 4)).astype("f4"), y=rng.integers(0, 2, 300))
    return here


def _invoke(args: list[str], cwd: pathlib.Path) -> object:
    """Run ``daskbatch ARGS`` in ``cwd`` through click (stdout and stderr apart)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(cwd)
        return CliRunner().invoke(main, args, catch_exceptions=False)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["describe", "data.zarr", "--device", "tpu"], "Invalid value for '--device': 'tpu'"),
        (["transform", "data.zarr", "--out", "t.zarr"], "give at least one step"),
        (["ingest", "batch.npz"], "give at least one source and the output store"),
        (["select", "stats.zarr", "--k", "abc"], "--k: expected an integer or 'all', got 'abc'"),
        (["describe"], "Missing argument 'STORE'"),
        (["nosuch"], "No such command 'nosuch'"),
    ],
)
def test_usage_errors_are_one_line_with_exit_2(made: pathlib.Path, args: list[str], says: str) -> None:
    result = _invoke(args, made)
    assert result.exit_code == 2 and result.stdout == "", result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], result.stderr
    assert "--help" in lines[0]  # where the options are explained


def test_a_usage_error_in_a_real_process_is_one_line(made: pathlib.Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "daskbatch", "describe", "data.zarr", "--bins", "0"], cwd=made,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "error: Invalid value for '--bins': 0 is not in the range x>=1. (options: daskbatch describe --help)"
    ]


def test_no_args_still_shows_the_help() -> None:
    result = CliRunner().invoke(main, [])
    assert "Usage:" in result.output and "Commands:" in result.output


QUIET = [
    ["synth", "q.zarr", "--rows", "500", "--features", "3", "--overwrite"],
    ["ingest", "batch.npz", "i.zarr", "--x-key", "x", "--label-key", "y", "--overwrite"],
    ["inspect", "data.zarr"],
    ["verify", "data.zarr"],
    ["info"],
    ["config"],
    ["plan", "data.zarr"],
    ["describe", "data.zarr", "--label", "y", "--cluster", "threads", "--stats", "moments"],
    ["select", "stats.zarr", "--score", "mi", "--k", "3"],
    ["compare", "stats.zarr", "stats.zarr"],
    ["transform", "data.zarr", "--out", "t.zarr", "--standardize", "stats.zarr", "--overwrite"],
]


@pytest.mark.parametrize("args", QUIET, ids=[a[0] for a in QUIET])
def test_quiet_silences_every_verb(made: pathlib.Path, args: list[str]) -> None:
    assert {a[0] for a in QUIET} | {"demo", "run"} >= set(main.commands) - {"report"}  # every verb is here
    loud = _invoke(args, made)
    assert loud.exit_code == 0 and loud.stdout.strip(), loud.output  # it says something ...
    for quiet in (["-q", *args], [*args, "-q"]):
        result = _invoke(quiet, made)
        assert result.exit_code == 0, result.output
        assert result.stdout == "" and result.stderr == "", quiet  # ... and nothing with -q


def test_json_holds_results_and_the_buckets_only_when_asked(made: pathlib.Path) -> None:
    base = ["describe", "data.zarr", "--label", "y", "--cluster", "threads", "--no-progress"]
    assert _invoke([*base, "--json", "r.json"], made).exit_code == 0
    assert _invoke([*base, "--json", "s.json", "--json-states"], made).exit_code == 0
    results, states = (made / "r.json").read_bytes(), (made / "s.json").read_bytes()
    keys = set(json.loads(results))
    assert {"mean", "std", "cov", "corr", "hist_counts", "hist_edges", "mi", "quantiles", "provenance"} <= keys
    assert not keys & {*QUANTILE_BUCKETS, "sketch_counts", "sketch_extrema"}, keys
    assert {*QUANTILE_BUCKETS, "sketch_counts", "sketch_extrema"} <= set(json.loads(states))
    # 32 features: results are a few kB a feature; the buckets were 62 % of the file
    assert len(results) < 160_000 and len(results) < 0.5 * len(states), (len(results), len(states))
    refused = _invoke([*base, "--json-states"], made)
    assert refused.exit_code == 2 and "--json-states adds to --json" in refused.stderr


def test_the_table_shows_every_row_or_n_rows_and_says_how(made: pathlib.Path) -> None:
    base = ["describe", "data.zarr", "--label", "y", "--cluster", "threads", "--no-progress"]
    default = _invoke(base, made).stdout
    assert re.search(r"^showing 20 of 32 features \(all of them: --all, or --table-rows N\)$", default, re.M)
    assert ".to_dataframe()" not in default  # a CLI user cannot run it
    header = next(line for line in default.splitlines() if line.startswith("feature")).split()
    assert {"25%", "50%", "75%"} <= set(header) and not {"q25", "median", "q75", "notes"} & set(header)
    shown = _invoke([*base, "--all"], made).stdout
    assert len(re.findall(r"^f\d+ ", shown, re.M)) == 32 and "showing" not in shown
    three = _invoke([*base, "--table-rows", "3"], made).stdout
    assert len(re.findall(r"^f\d+ ", three, re.M)) == 3 and "showing 3 of 32 features" in three
    pairs = default[default.index("correlated pairs"):].splitlines()[1:11]
    assert len({line.index("~") for line in pairs}) == 1 and len({line.index("r =") for line in pairs}) == 1, pairs


def test_the_notebook_table_has_no_empty_notes_column(made: pathlib.Path) -> None:
    s = db.load_summary(str(made / "stats.zarr"))
    assert "<th>notes</th>" not in s._repr_html_() and "<th>50%</th>" in s._repr_html_()
    x = np.random.default_rng(0).normal(size=(500, 3))
    x[:, 1] = 2.0  # constant: a note
    assert "<th>notes</th>" in db.describe(x)._repr_html_()


def test_counts_of_one_are_singular(made: pathlib.Path) -> None:
    single = made / "single.zarr"
    db.synth(str(single), rows=100, features=2, classes=2)
    assert "dask 1 block of 100 rows" in _invoke(["inspect", str(single)], made).stdout
    plan = _invoke(["plan", str(single)], made).stdout
    assert "1 task" in plan and "1 tasks" not in plan


def test_the_demo_says_where_its_data_are_and_removes_them(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert DEMO_ROWS == 200_000  # seconds on a laptop; --rows 2000000 for the full-size run
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the demo's temporary directory goes
    result = CliRunner().invoke(main, ["demo", "--rows", "5000", "--features", "4", "--workers", "1"])
    assert result.exit_code == 0, result.output
    where = re.search(r"to (\S+)/data\.zarr \.\.\.", result.stdout)
    assert where is not None and re.search(r"written in [\d.]+ s: [\d.]+ [kMG]iB on disk", result.stdout)
    assert re.search(rf"Removed the demo's data \([\d.]+ [kMG]iB in {re.escape(where.group(1))}\); --keep keeps", result.stdout)
    assert not pathlib.Path(where.group(1)).exists() and not list(tmp_path.glob("daskbatch-demo-*"))
    assert "still alive" not in result.stderr and "Traceback" not in result.output
    kept = CliRunner().invoke(main, ["-q", "demo", "--rows", "5000", "--features", "4", "--workers", "1", "--keep"])
    assert kept.exit_code == 0 and kept.stdout == "", kept.output
    (left,) = tmp_path.glob("daskbatch-demo-*")
    assert db.load_summary(str(left / "summary.zarr")).n_features == 4 and (left / "summary.csv").exists()


def test_the_cluster_kind_can_come_from_the_environment(made: pathlib.Path) -> None:
    bogus = CliRunner(env={"DASKBATCH_CLUSTER": "bogus"}).invoke(main, ["describe", str(made / "data.zarr")])
    assert bogus.exit_code == 2 and "Invalid value for '--cluster'" in bogus.stderr, bogus.output
    threads = CliRunner(env={"DASKBATCH_CLUSTER": "threads"}).invoke(
        main, ["describe", str(made / "data.zarr"), "--stats", "moments", "--no-progress"]
    )
    assert threads.exit_code == 0 and "dashboard" not in threads.output, threads.output
