"""One configuration file for ``daskbatch run`` and ``describe --config``; other shapes are one-line refusals.

A configuration file is dask config: the job under ``daskbatch: job:``, dask settings beside it.
Both commands read it. A job's sections at the top, or option names at the top, are refused by
either command in one line that says where they go (exit 2).
"""

from __future__ import annotations

import pathlib

import pytest
from click.testing import CliRunner

import daskbatch as db
from daskbatch.cli import main

CONFIG = ("daskbatch:\n  job:\n    input: {store: data.zarr, label: y}\n    statistics: {bins: 16}\n"
          "    selection: {score: f, param: 2}\n    cluster: {kind: threads}\n    outputs: {dir: results}\n")
JOB = "input: {store: data.zarr}\nselection: {score: f, param: 2}\ncluster: {kind: threads}\noutputs: {dir: results}\n"
OPTIONS = "label: y\nbins: 16\nnan-policy: omit\n"


@pytest.fixture()
def here(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    db.synth(str(tmp_path / "data.zarr"), rows=600, features=3, classes=2, chunk_rows=200)
    (tmp_path / "config.yaml").write_text(CONFIG)
    (tmp_path / "job.yaml").write_text(JOB)
    (tmp_path / "describe-options.yaml").write_text(OPTIONS)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_one_file_for_both_commands(here: pathlib.Path) -> None:
    r = CliRunner().invoke(main, ["describe", "data.zarr", "--no-progress", "--config", "config.yaml",
                                  "--out", "stats.zarr"])
    assert r.exit_code == 0, r.output
    s = db.load_summary("stats.zarr")
    assert s.hist_counts.shape[-1] == 16 and s.class_count is not None  # bins and label from the file
    r = CliRunner().invoke(main, ["run", "config.yaml"])
    assert r.exit_code == 0, r.output
    assert (here / "results" / "selection.csv").is_file()


def test_sections_at_the_top_are_refused_by_both_commands(here: pathlib.Path) -> None:
    r = CliRunner().invoke(main, ["describe", "data.zarr", "--cluster", "threads", "--config", "job.yaml"])
    assert r.exit_code == 2
    assert r.output.strip().splitlines() == [
        "error: job.yaml has a job's sections at its top (cluster:, input:, outputs:, selection:): put them "
        "under 'daskbatch: job:', with dask settings at the top beside 'daskbatch' (docs/jobs.md)"
    ]
    r = CliRunner().invoke(main, ["run", "job.yaml"])
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and "job.yaml: a job's sections go under 'daskbatch: job:'" in lines[0]
    assert not (here / "results").exists()


def test_an_options_file_given_to_run(here: pathlib.Path) -> None:
    r = CliRunner().invoke(main, ["run", "describe-options.yaml"])
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: describe-options.yaml holds describe options "
                                                   "(bins, label, nan_policy), as a 'daskbatch describe --config'")


def test_option_values_at_the_top_are_refused_in_one_line(here: pathlib.Path) -> None:
    r = CliRunner().invoke(main, ["describe", "data.zarr", "--cluster", "threads", "--no-progress",
                                  "--config", "describe-options.yaml", "--out", "stats.zarr"])
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "error: describe-options.yaml: option values at the top (bins, label, nan-policy) are no --config shape")
    assert not (here / "stats.zarr").exists()


def test_input_weights_in_one_file_for_both_commands(here: pathlib.Path) -> None:
    """``input.weights`` of a configuration file reaches ``describe --config`` and ``run`` alike (bit for bit)."""
    import numpy as np
    import zarr

    w = np.random.default_rng(2).integers(0, 4, size=600).astype(np.float64)
    zarr.open_group("data.zarr", mode="a").create_array("w", data=w, chunks=(200,))
    (here / "weighted.yaml").write_text(
        "daskbatch:\n  job:\n    input: {store: data.zarr, weights: w}\n    statistics: {stats: [moments], bins: 16}\n"
        "    selection: {score: variance}\n    transform: {steps: []}\n    cluster: {kind: threads}\n"
        "    outputs: {dir: results}\n")
    r = CliRunner().invoke(main, ["describe", "data.zarr", "--no-progress", "--config", "weighted.yaml",
                                  "--out", "stats.zarr"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["run", "weighted.yaml"])
    assert r.exit_code == 0, r.output
    by_describe, by_run = db.load_summary("stats.zarr"), db.load_summary(here / "results" / "summary.zarr")
    np.testing.assert_array_equal(by_describe.weight_sum, np.full(3, w.sum()))
    for name in ("mean", "var", "weight_sum"):
        np.testing.assert_array_equal(getattr(by_describe, name), getattr(by_run, name), err_msg=name)
