"""Refusals that point the way (issue 34): the statistic meant, the feature counts, parameters of the right type."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import daskbatch as db
from daskbatch import stats
from daskbatch.stats.registry import STATISTICS


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m daskbatch ARGS`` in ``cwd``, as a user types it."""
    return subprocess.run(
        [sys.executable, "-m", "daskbatch", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=240,
    )


@pytest.mark.parametrize(
    ("stats", "hint"),
    [
        ("covv", "did you mean 'cov'?"),
        (("Moments",), "did you mean 'moments'?"),
        ("moments,hst", "did you mean 'hist'?"),
        ("mean,std", "'mean' is a result of the statistic 'moments'"),
        (["skew"], "'skew' is a result of the statistic 'moments'"),
        ("corr", "'corr' is a result of the statistic 'cov'"),
    ],
)
def test_a_statistic_name_points_to_the_one_meant(stats: object, hint: str) -> None:
    with pytest.raises(ValueError, match="unknown statistic") as info:
        db.describe(np.ones((4, 2)), stats=stats)  # type: ignore[arg-type]
    assert hint in str(info.value) and "\n" not in str(info.value), info.value


def test_result_names_are_read_from_the_declarations() -> None:
    """Every result a selectable statistic declares points to it (a new statistic's too, with no list to edit)."""
    for name, declared in STATISTICS.items():
        for variable in declared.variables if declared.selectable else ():
            if variable in STATISTICS:
                continue  # 'cov' is a statistic and its result
            with pytest.raises(ValueError) as info:
                db.describe(np.ones((4, 2)), stats=["moments", variable])
            assert f"{variable!r} is a result of the statistic" in str(info.value) and repr(
                name
            ) in str(info.value)


def test_the_cli_says_did_you_mean_before_starting_anything(tmp_path: Path) -> None:
    db.synth(tmp_path / "x.zarr", rows=100, features=3)
    done = _cli(tmp_path, "describe", "x.zarr", "--stats", "covv")  # the default cluster: never started
    assert done.returncode == 2 and done.stderr.strip().splitlines()[-1].startswith(
        "error: unknown statistic 'covv'; did you mean 'cov'?"
    ), done.stderr
    assert "cluster" not in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: stats.Moments(ddof=True), "ddof must be an integer, got True (a bool)"),
        (lambda: stats.CoMoments(ddof=False), "ddof must be an integer, got False (a bool)"),
        (lambda: stats.ClassMoments(ddof=True), "ddof must be an integer, got True"),
        (
            lambda: stats.ClassMoments(n_classes=True),
            "n_classes must be a positive integer, got True",
        ),
        (lambda: stats.Histogram(bins=True), "bins must be an integer, got True"),
        (lambda: stats.Histogram(max_classes=True), "max_classes must be an integer, got True"),
        (lambda: stats.MutualInformation(bins=True), "bins must be an integer, got True"),
        (
            lambda: stats.MutualInformation(target_bins=True),
            "target_bins must be an integer, got True",
        ),
        (
            lambda: stats.Sketch(min_magnitude=True),
            "min_magnitude must be a number, got True (a bool)",
        ),
    ],
)
def test_a_bool_is_not_taken_for_a_number(make: object, message: str) -> None:
    """``Moments(ddof=True)`` was a ddof of 1; every statistic's numeric parameter refuses a bool as it is made."""
    with pytest.raises((TypeError, ValueError), match=re.escape(message)) as info:
        make()  # type: ignore[operator]
    assert "\n" not in str(info.value)


def test_integral_parameters_of_any_integer_type_are_kept() -> None:
    assert db.Moments(ddof=np.int64(0)).ddof == 0 and type(db.Moments(ddof=np.int64(0)).ddof) is int
    assert (
        stats.Histogram(bins=np.int32(8)).bins == 8 and stats.MutualInformation(bins=4.0).bins == 4
    )
    s = db.describe(np.arange(12.0).reshape(6, 2), stats=["moments", db.Moments(ddof=0)])
    np.testing.assert_allclose(s.var, np.arange(12.0).reshape(6, 2).var(axis=0))


@pytest.mark.parametrize("url", ["zz://x.zarr", "zz::file:///tmp/x.zarr"])
def test_an_unknown_url_protocol_is_named_with_its_path(url: str, tmp_path: Path) -> None:
    """fsspec's own "Protocol not known: zz" named no path."""
    with pytest.raises(ValueError, match=re.escape(f"output {url}: unknown URL protocol 'zz'")):
        db.synth(url, rows=10, features=2)
    s = db.describe(np.ones((4, 2)), stats="moments")
    with pytest.raises(ValueError, match=re.escape(f"path {url}: unknown URL protocol 'zz'")):
        s.save(url)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("suffix", ["csv", "json"])
def test_saves_never_replace_a_file_daskbatch_did_not_write(tmp_path: Path, suffix: str) -> None:
    """``Selection.save``/``Drift.save(overwrite=True)`` replaced a user's file; daskbatch's own outputs still are."""
    x = np.random.default_rng(0).normal(size=(200, 4))
    s = db.describe(x, np.arange(200) % 2, stats=["moments", "hist", "mi", "class_moments"])
    selection, drift = db.select(s), db.compare(s, s)
    for save, name in ((selection.save, f"sel.{suffix}"), (drift.save, f"drift.{suffix}")):
        theirs = tmp_path / name
        theirs.write_text("a user's notes\n")
        with pytest.raises(FileExistsError, match="daskbatch did not write it") as info:
            save(theirs, overwrite=True)
        assert theirs.read_text() == "a user's notes\n" and "\n" not in str(info.value)
        theirs.unlink()
        save(theirs)
        save(theirs)  # its own output, replaced without overwrite
        ours = tmp_path / f"other.{suffix}"
        selection.save(ours) if save == drift.save else drift.save(
            ours
        )  # another kind of daskbatch output
        with pytest.raises(FileExistsError, match="overwrite=True to replace it"):
            save(ours)
        save(ours, overwrite=True)
        ours.unlink()
    assert db.load_selection(tmp_path / f"sel.{suffix}").selected_names == selection.selected_names


@pytest.fixture()
def corrupt_narrow_store(tmp_path: Path) -> Path:
    """A store of 8 features whose every X chunk fails its checksum: any read of its data is refused."""
    path = tmp_path / "feb.zarr"
    db.synth(path, rows=400, features=8, classes=2, chunk_rows=100)
    chunks = [p for p in (path / "X").rglob("*") if p.is_file() and p.name != "zarr.json"]
    assert chunks
    for chunk in chunks:
        chunk.write_bytes(b"\0" * chunk.stat().st_size)
    return path


def test_a_feature_count_mismatch_is_named_before_any_data_is_read(
    tmp_path: Path, corrupt_narrow_store: Path
) -> None:
    """It said "range must be (lo, hi) ... shape (8, 2); got shape (32, 2)"; the chunks prove nothing was read."""
    db.synth(tmp_path / "jan.zarr", rows=400, features=32, classes=2, chunk_rows=100)
    wide = db.describe(str(tmp_path / "jan.zarr"), "y")
    counts = "the summary has 32 features and the new rows 8"
    for new_rows in (str(corrupt_narrow_store), db.open_dataset(corrupt_narrow_store, label="y")):
        with pytest.raises(db.DataError, match=counts):
            db.update(wide, new_rows, label="y" if isinstance(new_rows, str) else None)
    with pytest.raises(db.DataError, match=counts):
        db.update(wide, np.ones((10, 8)), label=np.zeros(10, dtype=int))
    with pytest.raises(
        db.DataError, match="the reference summary \\(like\\) has 32 features and the data 8"
    ):
        db.describe(corrupt_narrow_store, "y", run=db.RunOptions(like=wide))
    with pytest.raises(
        db.DataError, match="it gives 32 and the data has 8 features"
    ):
        db.describe(corrupt_narrow_store, stats="hist", range=np.tile([-5.0, 5.0], (32, 1)))
    with pytest.raises(ValueError, match="the summaries have 32 and 8 features"):
        db.merge(wide, db.describe(np.ones((10, 8)), stats="moments"))


def test_the_cli_names_the_feature_counts_of_update_and_like(
    tmp_path: Path, corrupt_narrow_store: Path
) -> None:
    db.synth(tmp_path / "jan.zarr", rows=400, features=32, classes=2, chunk_rows=100)
    db.describe(str(tmp_path / "jan.zarr"), "y").save(tmp_path / "stats.zarr")
    before = sorted(p.stat().st_mtime_ns for p in (tmp_path / "stats.zarr").rglob("*"))
    for option in ("--update", "--like"):
        done = _cli(
            tmp_path,
            "describe",
            "feb.zarr",
            "--label",
            "y",
            option,
            "stats.zarr",
            "--cluster",
            "threads",
        )
        lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert done.returncode == 2 and lines == [
            f"error: {option} stats.zarr has 32 features and feb.zarr 8: give a store of the same features"
        ], done.stderr
    assert sorted(p.stat().st_mtime_ns for p in (tmp_path / "stats.zarr").rglob("*")) == before


def _chain(exc: BaseException) -> list[str]:
    """The exceptions a traceback would show below ``exc`` (its cause, or its context unless suppressed)."""
    found = []
    while exc.__cause__ is not None or (
        exc.__context__ is not None and not exc.__suppress_context__
    ):
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
        found.append(type(exc).__name__)
    return found


def test_refusals_of_ours_are_not_chained(tmp_path: Path) -> None:
    """A missing array was DataError <- KeyError <- FileNotFoundError: three tracebacks for one line of news."""
    from daskbatch.runtime.capacity import parse_memory

    db.synth(tmp_path / "s.zarr", rows=100, features=3, classes=2)
    refusals = [
        lambda: db.open_dataset(tmp_path / "s.zarr", x="Z"),
        lambda: db.describe(str(tmp_path / "s.zarr"), "nolabel"),
        lambda: parse_memory("lots", total_bytes=2**30),
        lambda: db.describe(np.ones((4, 2)), stats="covv"),
    ]
    for refuse in refusals:
        with pytest.raises(ValueError) as info:
            refuse()
        assert _chain(info.value) == [], (info.value, _chain(info.value))
    with pytest.raises(db.DataError, match="arrays there: \\['X', 'y'\\]"):
        db.open_dataset(tmp_path / "s.zarr", x="Z")
