"""What the command line writes where: log lines in a batch log, a bar on a terminal only, JSON alone on stdout.

Runs are real processes (``python -m daskbatch``), their output redirected to
files or a pseudo-terminal as a batch system or a shell would; pytest's own
warning filters and streams stay out of the way.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest
import zarr
from click.testing import CliRunner

from daskbatch.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d (DEBUG|INFO|WARNING|ERROR) ")
FAST = ["--cluster", "threads", "--stats", "moments,hist"]


@pytest.fixture()
def store(tmp_path: pathlib.Path) -> str:
    """4,000 x 4 values around 100 (unscaled data), in 8 chunks of 500 rows, with a label."""
    rng = np.random.default_rng(11)
    x = (100 + 10 * rng.normal(size=(4000, 4))).astype(np.float32)
    root = zarr.open_group(str(tmp_path / "d.zarr"), mode="w")
    root.create_array("X", data=x, chunks=(500, 4))
    root.create_array("y", data=(x[:, 0] > 100).astype(np.int8), chunks=(500,))
    return str(tmp_path / "d.zarr")


def run_cli(args: list[str], log: pathlib.Path, stdout: pathlib.Path | None = None) -> tuple[int, str]:
    """Run ``daskbatch ARGS`` with stderr (and stdout unless given) appended to the file ``log``."""
    with open(log, "ab") as err, open(stdout or log, "ab") as out:
        proc = subprocess.run([sys.executable, "-m", "daskbatch", *args], stdout=out, stderr=err,
                              stdin=subprocess.DEVNULL, env=ENV, timeout=240)
    return proc.returncode, log.read_text()


def test_a_batch_log_records_plan_passes_reuse_warnings_and_a_summary(store: str, tmp_path: pathlib.Path) -> None:
    log, ck = tmp_path / "job.log", tmp_path / "ck"
    # The third case (no checkpoint) runs beside the first two, into its own log.
    ranged = tmp_path / "range.log"
    with open(ranged, "ab") as out:
        beside = subprocess.Popen([sys.executable, "-m", "daskbatch", "describe", store, *FAST, "--range=-5:5"],
                                  stdout=out, stderr=out, stdin=subprocess.DEVNULL, env=ENV)
    args = ["describe", store, "--cluster", "threads", "--checkpoint", str(ck), "--label", "y"]
    rc, text = run_cli(args, log)
    assert rc == 0, text
    lines = [ln for ln in text.splitlines() if STAMP.match(ln)]
    assert lines and "\r" not in text and "\x1b" not in text  # --progress is on, but this is no terminal
    assert any("INFO Plan for a 4,000 x 4 float32 array" in ln for ln in lines)
    assert any("INFO   budget per task:" in ln for ln in lines)  # every line of the plan
    assert any(re.search(r"INFO pass 1/2: moments\+cov\+class_moments\+sketch: done, \d+/\d+ blocks in [\d.]+ s \([\d,]+ rows/s, "
                         r"[\d.]+ \w+/s\)", ln) for ln in lines)
    assert any("INFO pass 2/2: hist+qhist: started" in ln for ln in lines)  # the histograms and the quantile one
    summary = [ln for ln in lines if " INFO describe: " in ln]
    assert len(summary) == 1 and re.search(
        r"describe: 4,000 rows x 4 features in [\d.]+ s \([\d,]+ rows/s\), 2 passes, peak [\d.]+ \wiB", summary[0])

    # The same command again: everything is on disk, and the log says so.
    log.write_text("")
    rc, text = run_cli(args, log)
    assert rc == 0, text
    assert re.search(r"INFO checkpoint \S+pass-moments-cov-class_moments-sketch: (\d+) of \1 blocks on disk", text)
    assert re.search(r"INFO pass 1/2: moments\+cov\+class_moments\+sketch: done, (\d+)/\1 blocks \(\1 reused, 0 computed\)", text)

    # A range that misses the data: one warning line in the log, naming its category.
    rc, text = beside.wait(timeout=240), ranged.read_text()
    assert rc == 0, text
    warned = [ln for ln in text.splitlines() if "RangeWarning" in ln]
    assert len(warned) == 1 and STAMP.match(warned[0]) and " WARNING RangeWarning: 4 of 4 feature(s)" in warned[0]
    assert "pass 1/1: moments+hist: done" in text


def test_json_to_stdout_is_only_json(store: str, tmp_path: pathlib.Path) -> None:
    out = tmp_path / "stdout.json"
    rc, err = run_cli(["describe", store, *FAST, "--json", "-"], tmp_path / "err.log", stdout=out)
    assert rc == 0, err
    payload = json.loads(out.read_text())  # the report table and the log went to stderr
    assert payload["feature_names"] == ["f0", "f1", "f2", "f3"]
    assert "Top" not in out.read_text() and "features>" in err and " INFO describe: " in err


def test_quiet_leaves_errors_and_the_json(store: str, tmp_path: pathlib.Path) -> None:
    out, err = tmp_path / "stdout.json", tmp_path / "err.log"
    rc, text = run_cli(["describe", store, *FAST, "--range=-5:5", "--json", "-", "--quiet"], err, stdout=out)
    assert rc == 0, text
    assert text == ""  # not even the RangeWarning: errors only
    assert json.loads(out.read_text())["provenance"]["passes"] == 1
    rc, text = run_cli(["-q", "describe", store, *FAST, "--x", "nope"], tmp_path / "bad.log")
    assert rc == 2 and text.startswith("error: ") and "nope" in text and text.count("\n") == 1


def test_the_bar_is_drawn_on_a_terminal_only(store: str, tmp_path: pathlib.Path) -> None:
    if not hasattr(os, "openpty"):
        pytest.skip("no pseudo-terminals here")
    primary, secondary = os.openpty()
    out = tmp_path / "stdout.json"
    with open(out, "wb") as stdout:
        proc = subprocess.Popen(
            [sys.executable, "-m", "daskbatch", "describe", store, "--cluster", "threads", "--json", "-"],
            stdout=stdout, stderr=secondary, stdin=subprocess.DEVNULL, env=dict(ENV, COLUMNS="160"),
        )
        os.close(secondary)
        chunks = []
        while True:  # read until the child closes the terminal (EIO on Linux, b"" elsewhere)
            try:
                data = os.read(primary, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        os.close(primary)
        assert proc.wait(timeout=240) == 0
    err = b"".join(chunks).decode()
    started = re.search(r"\r\x1b\[2Kpass 1/2: moments\+cov\+sketch  0/(\d+) blocks", err)  # labelled, in place
    assert started is not None, err
    n = started.group(1)
    assert re.search(rf"\r\x1b\[2Kpass 2/2: hist\+qhist  {n}/{n} blocks  [\d.]+\w? rows/s  in 0:\d\d\r?\n", err), err
    json.loads(out.read_text())  # the bar never reaches stdout


@pytest.mark.parametrize(
    ("options", "info", "debug"),
    [
        ([], True, False),
        (["-v"], True, True),
        (["--log-level", "warning"], False, False),
        (["-q"], False, False),
    ],
)
@pytest.mark.parametrize("where", ["group", "command"])
def test_log_options_work_before_and_after_the_command(
    store: str, options: list[str], info: bool, debug: bool, where: str
) -> None:
    command = ["describe", store, "--cluster", "threads", "--stats", "moments", "--no-progress"]
    args = [*options, *command] if where == "group" else [*command, *options]
    showwarning = warnings.showwarning
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    # -v names the logger of each line: "INFO daskbatch.runtime.capacity: describe: ..."
    assert bool(re.search(r" INFO (daskbatch\S*: )?describe: 4,000 rows x 4 features", result.stderr)) is info
    assert (" INFO daskbatch." in result.stderr) is debug
    # In-process, the command gives the caller's logging back as it found it.
    assert logging.getLogger("daskbatch").handlers == [] and warnings.showwarning is showwarning
    assert ("features>" in result.stdout) is ("-q" not in options)  # --quiet: no report either


def test_verbose_adds_the_layout_and_time_of_each_pass_and_the_ranges(store: str) -> None:
    result = CliRunner().invoke(main, ["-v", "describe", store, "--cluster", "threads", "--no-progress"])
    assert result.exit_code == 0, result.output
    debug = [ln for ln in result.stderr.splitlines() if " DEBUG " in ln]
    for i in (1, 2):
        assert any(re.search(rf"pass {i}/2: \S+: \d+ blocks of up to [\d,]+ rows x 4 features, merge fan-in \d+, "
                             r"computed directly; [\d.]+ s", ln) for ln in debug), debug
    assert any("histogram ranges of 4 features from the sketch's 0.1-99.9 % quantiles" in ln for ln in debug), debug
    # without -v none of it, and the plan once
    plain = CliRunner().invoke(main, ["describe", store, "--cluster", "threads", "--no-progress"])
    assert " DEBUG " not in plain.stderr and plain.stderr.count("Plan for a") == 1


def test_warnings_reach_the_log_through_capture_warnings(store: str, caplog: pytest.LogCaptureFixture) -> None:
    # The command turns on logging.captureWarnings: a warning is a record of the py.warnings logger.
    showwarning = warnings.showwarning
    with warnings.catch_warnings(), caplog.at_level(logging.WARNING, logger="py.warnings"):
        warnings.simplefilter("always")  # this suite makes warnings errors; the command must see this one
        result = CliRunner().invoke(main, ["describe", store, *FAST, "--range=-5:5", "--no-progress"])
    assert result.exit_code == 0, result.output
    captured = [r for r in caplog.records if r.name == "py.warnings"]
    assert len(captured) == 1 and "RangeWarning: 4 of 4 feature(s)" in captured[0].getMessage()
    warned = [ln for ln in result.stderr.splitlines() if "RangeWarning" in ln]
    assert len(warned) == 1 and STAMP.match(warned[0]) and " WARNING RangeWarning: 4 of 4 feature(s)" in warned[0]
    assert warnings.showwarning is showwarning  # captureWarnings undone when the command ends
