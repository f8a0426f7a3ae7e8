"""``daskbatch run`` writes only paths it may: one output guard, checked for all outputs before any compute.

Each of these exited 0 and destroyed or misplaced a file: a report or selection
path replacing any existing file; ``summary`` and ``transform`` (or ``report``
and ``selection``) on one path; a job refused for overlapping its input still
writing ``report.json`` into the input store; a checkpoint inside the input store.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Callable

import pytest
import yaml
from click.testing import CliRunner

from daskbatch.cli import main

Snapshot = Callable[[pathlib.Path], dict[str, str]]


def job_file(tmp_path: pathlib.Path, store: pathlib.Path, outputs: dict, **sections: object) -> pathlib.Path:
    job = {"input": {"store": str(store), "label": "y"}, "statistics": {"stats": "moments"},
           "selection": {"score": "variance", "param": 2}, "transform": {"steps": ["select", "standardize"]},
           "cluster": {"kind": "threads", "threads": 1}, "memory": "1GiB",
           "outputs": {"dir": str(tmp_path / "out"), **outputs}, **sections}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"daskbatch": {"job": job}}))
    return path


def refused(job: pathlib.Path, *words: str) -> None:
    result = CliRunner().invoke(main, ["run", str(job)])
    assert result.exit_code == 2, result.output
    err = result.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in result.output, err
    for w in words:
        assert w in err, err


@pytest.mark.parametrize("key", ["report", "selection"])
def test_an_existing_file_is_not_replaced(
    tmp_path: pathlib.Path, store: pathlib.Path, snapshot: Snapshot, key: str
) -> None:
    precious = tmp_path / "precious" / "passwd"
    precious.parent.mkdir()
    precious.write_text("root:x:0:0\n")
    job = job_file(tmp_path, store, {key: str(precious)})
    before = snapshot(tmp_path)
    refused(job, f"outputs.{key}", str(precious), "--overwrite")
    assert snapshot(tmp_path) == before  # nothing written: not the file, not the report, not outputs.dir
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("a", "b"), [("summary", "transform"), ("report", "selection"), ("transform", "report")])
def test_two_outputs_on_one_path_are_refused(
    tmp_path: pathlib.Path, store: pathlib.Path, a: str, b: str
) -> None:
    same = "one.zarr" if "transform" in (a, b) or "summary" in (a, b) else "one.json"
    refused(job_file(tmp_path, store, {a: same, b: same}), f"outputs.{b}", f"outputs.{a}")
    assert not (tmp_path / "out").exists()


def test_a_missing_folder_other_than_outputs_dir_is_refused_before_compute(
    tmp_path: pathlib.Path, store: pathlib.Path
) -> None:
    refused(job_file(tmp_path, store, {"report": str(tmp_path / "nowhere" / "r.json")}), "does not exist")
    assert not (tmp_path / "out").exists() and not (tmp_path / "nowhere").exists()


def test_an_output_inside_another_is_refused(tmp_path: pathlib.Path, store: pathlib.Path) -> None:
    refused(job_file(tmp_path, store, {"summary": "s.zarr", "report": "s.zarr/report.json"}), "is inside")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("outputs", "sections"), [
    ({"dir": "{store}", "report": "report.json"}, {}),
    ({"summary": "{store}/s.zarr"}, {}),
    ({}, {"checkpoint": "{store}/ck"}),
])
def test_nothing_is_written_into_the_input(
    tmp_path: pathlib.Path, store: pathlib.Path, snapshot: Snapshot, outputs: dict, sections: dict
) -> None:
    fill = {k: v.format(store=store) for k, v in outputs.items()}
    more = {k: v.format(store=store) for k, v in sections.items()}
    job = job_file(tmp_path, store, fill, **more)
    before = snapshot(store)
    refused(job, "input store")
    assert snapshot(store) == before
    assert not (store / "report.json").exists()


@pytest.mark.parametrize("how", ["run", "describe"])
def test_a_checkpoint_never_goes_into_a_folder_of_other_files(
    tmp_path: pathlib.Path, store: pathlib.Path, snapshot: Snapshot, how: str
) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "pass-notes").mkdir()  # what --force would delete as a pass folder
    (folder / "pass-notes" / "a.txt").write_text("keep\n")
    job = job_file(tmp_path, store, {}, checkpoint=str(folder))
    before = snapshot(tmp_path)
    if how == "run":
        refused(job, "checkpoint", "no daskbatch checkpoint")
    else:
        result = CliRunner().invoke(main, ["describe", str(store), "--cluster", "threads", "--no-progress",
                                           "--checkpoint", str(folder), "--force"])
        assert result.exit_code == 2 and "no daskbatch checkpoint" in result.stderr, result.output
    assert snapshot(tmp_path) == before


def test_own_outputs_are_replaced_and_a_foreign_one_never(
    tmp_path: pathlib.Path, store: pathlib.Path
) -> None:
    job = job_file(tmp_path, store, {})
    first = CliRunner().invoke(main, ["run", str(job)])
    assert first.exit_code == 0, first.output
    report = tmp_path / "out" / "report.json"
    assert json.loads(report.read_text())["status"] == "ok"
    again = CliRunner().invoke(main, ["run", str(job)])  # its own report, selection, summary: replaced or resumed
    assert again.exit_code == 0, again.output
    report.write_text("not ours\n")
    refused(job, "outputs.report")
    assert report.read_text() == "not ours\n"
    forced = CliRunner().invoke(main, ["run", str(job), "--overwrite"])  # not even with --overwrite
    assert forced.exit_code == 2 and "daskbatch did not write it" in forced.output, forced.output
    assert report.read_text() == "not ours\n"
