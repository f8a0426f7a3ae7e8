"""Stores that daskbatch did not write read as their writers meant them: describe, verify, inspect, transform.

Before: zarr, xarray and dask leave out chunks that hold only the fill value,
and daskbatch refused every such store ("2 chunk(s) of label 'y' are
missing ... pass missing='skip'"), ``verify`` called it FAILED, and following
the advice dropped valid rows.  Xarray's CF packing was read as raw integers.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest
import zarr
from click.testing import CliRunner

import daskbatch as db
from daskbatch.cli import main
from daskbatch.io.verify import verify_store
from tests.foreign.conftest import CHUNK, CORPUS, Foreign

# Stores other tools wrote hold NaN holes and fill values read at the edges: the trust warnings
# (complete rows, piled values) are true of them and not what these tests compare.
pytestmark = [
    pytest.mark.filterwarnings("ignore::daskbatch.errors.CompleteRowsWarning"),
    pytest.mark.filterwarnings("ignore::daskbatch.errors.SuspectValueWarning"),
]


@pytest.fixture(params=CORPUS)
def foreign(request: pytest.FixtureRequest) -> Foreign:
    return request.getfixturevalue(request.param)


def test_describe_equals_numpy_on_the_decoded_values(foreign: Foreign) -> None:
    stats = ("moments", "class_moments") if foreign.y is not None else ("moments",)
    s = db.describe(foreign.path, label=foreign.label, stats=stats, run=db.RunOptions(plan=None))
    x = foreign.x
    np.testing.assert_array_equal(s.count, np.sum(np.isfinite(x), axis=0))
    np.testing.assert_array_equal(s.nan_count, np.sum(np.isnan(x), axis=0))
    np.testing.assert_allclose(s.mean, np.nanmean(x, axis=0), rtol=1e-12)
    np.testing.assert_allclose(s.std, np.nanstd(x, axis=0, ddof=1), rtol=1e-10)
    np.testing.assert_array_equal(s.min, np.nanmin(x, axis=0))
    np.testing.assert_array_equal(s.max, np.nanmax(x, axis=0))
    if foreign.y is not None:
        assert s.class_count.shape == (x.shape[1], 3)  # labels 0, 1, 2: class k is label k
        for k in range(3):
            rows = x[foreign.y == k]
            np.testing.assert_array_equal(s.arrays.class_count[:, k], np.sum(np.isfinite(rows), axis=0))
            np.testing.assert_allclose(s.arrays.class_mean[:, k], np.nanmean(rows, axis=0), rtol=1e-12, atol=1e-12)
    p = s.provenance
    assert p["absent_chunks"] == p["absent_fill_chunks"] == foreign.absent
    assert p["absent_lost_chunks"] == 0 and p["complete"] is True and p["rows_skipped"] == 0


def test_verify_passes_and_lists_absent_chunks_as_fill_values(foreign: Foreign) -> None:
    report = verify_store(foreign.path)
    assert report.ok, report.summary()
    assert len(report.absent) == foreign.absent and not report.problems
    result = CliRunner().invoke(main, ["verify", foreign.path])
    assert result.exit_code == 0, result.output
    assert result.output.count("absent (fill value)") >= foreign.absent
    assert "OK:" in result.output and "FAILED" not in result.output


def test_inspect_counts_absent_chunks_without_alarm(foreign: Foreign) -> None:
    args = ["inspect", foreign.path] + (["--label", foreign.label] if foreign.label else [])
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if x.strip().startswith("missing chunks"))
    assert line.split()[2] == f"{foreign.absent}:" and "absent (fill value)" in line
    assert "warning" not in result.output
    facts = json.loads(CliRunner().invoke(main, [*args, "--json"]).output)
    assert facts["absent_fill_chunks"] == foreign.absent and facts["complete"] is True


def test_transform_reads_the_decoded_values(foreign: Foreign, tmp_path: pathlib.Path) -> None:
    report = db.transform(foreign.path, [db.steps.clip(8.0, 12.0)], out=tmp_path / "t.zarr")
    assert report.written
    out = zarr.open_group(str(tmp_path / "t.zarr"), mode="r")
    np.testing.assert_array_equal(out["X"][:], np.clip(foreign.x, 8.0, 12.0))


@pytest.mark.parametrize("name", ["xarray_cf", "zip_store", "zarr_v3_sharded"])
def test_worker_processes_read_them_alike(name: str, request: pytest.FixtureRequest) -> None:
    """The CF decoding, the zip store and the shards travel to worker processes (``memory://`` cannot)."""
    distributed = pytest.importorskip("distributed")
    foreign: Foreign = request.getfixturevalue(name)
    with (
        distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        distributed.Client(cluster),
    ):
        s = db.describe(foreign.path, label=foreign.label, stats=("moments",), run=db.RunOptions(plan=None))
    np.testing.assert_allclose(s.mean, np.nanmean(foreign.x, axis=0), rtol=1e-12)
    np.testing.assert_array_equal(s.nan_count, np.sum(np.isnan(foreign.x), axis=0))


#: Every statistic daskbatch ships.
EVERY_STATISTIC = ("moments", "cov", "hist", "sketch", "class_moments", "mi")


def test_every_statistic_equals_the_same_on_the_decoded_values_in_memory(foreign: Foreign) -> None:
    """The store gives what the values as its writer meant them give, held in memory, statistic by statistic."""
    stats = EVERY_STATISTIC if foreign.y is not None else EVERY_STATISTIC[:4]
    run = db.RunOptions(plan=None)
    stored = db.describe(foreign.path, label=foreign.label, stats=stats, run=run)
    held = db.describe(foreign.x, label=foreign.y, stats=stats, run=run)
    for name in ("count", "nan_count", "min", "max", "cov_count", "hist_counts", "hist_edges"):
        np.testing.assert_array_equal(getattr(stored, name), getattr(held, name), err_msg=name)
    for name in ("mean", "std", "skew", "kurtosis", "cov", "corr"):
        np.testing.assert_allclose(getattr(stored, name), getattr(held, name), rtol=1e-9, atol=1e-12, err_msg=name)
    np.testing.assert_allclose(stored.quantile([0.1, 0.5, 0.9]), held.quantile([0.1, 0.5, 0.9]), rtol=1e-9)
    np.testing.assert_allclose(
        stored.quantile([0.1, 0.5, 0.9]), np.nanquantile(foreign.x, [0.1, 0.5, 0.9], axis=0).T, rtol=0.02
    )
    if foreign.y is not None:
        np.testing.assert_array_equal(stored.class_count, held.class_count)
        np.testing.assert_allclose(stored.class_mean, held.class_mean, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(stored.mi, held.mi, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name", ["zarr_v2_blosc", "xarray_fill_v3", "zarr_v3_sharded"])
def test_an_opened_group_or_array_reads_as_its_path(name: str, request: pytest.FixtureRequest) -> None:
    """Issue round 2, item 12: ``describe(zarr.open_group(...))`` failed with ``x has dtype <U1``."""
    foreign: Foreign = request.getfixturevalue(name)
    group = zarr.open_group(foreign.path, mode="r")
    by_path = db.describe(foreign.path, label="y", stats=("moments", "class_moments"))
    by_group = db.describe(group, label="y", stats=("moments", "class_moments"))
    by_array = db.describe(group["X"], stats=("moments",))
    for s in (by_group, by_array):
        np.testing.assert_array_equal(s.nan_count, np.sum(np.isnan(foreign.x), axis=0))
        np.testing.assert_allclose(s.mean, by_path.mean, rtol=1e-15)
        np.testing.assert_array_equal(s.max, by_path.max)
        assert s.provenance["absent_fill_chunks"] >= 1
    np.testing.assert_array_equal(by_group.class_count, by_path.class_count)


def test_the_summary_says_in_one_line_how_many_chunks_were_absent_and_read_as_what(foreign: Foreign) -> None:
    """Issue round 2, item 13: only a provenance key in the HTML said that absent chunks were read as fill values."""
    s = db.describe(foreign.path, label=foreign.label, stats=("moments",), run=db.RunOptions(plan=None))
    first = s.provenance["missing_chunks"][0]  # X's first absent chunk: what the writer meant there
    value = foreign.x[first[0] * CHUNK, 0]  # every store of the corpus has chunks of CHUNK rows
    read_as = f"X: {float(value)!r}" + ("; y: 0" if foreign.y is not None else "")
    line = (
        f"{foreign.absent} chunk{'s' if foreign.absent != 1 else ''} absent from the store, read as their fill value ({read_as}) as zarr reads them; "
        "missing='raise' (--missing raise) refuses them"
    )
    assert [x for x in repr(s).splitlines() if "absent" in x] == [line]
    assert _html_text(line) in s._repr_html_()


def _html_text(text: str) -> str:
    """``text`` as the HTML view escapes it."""
    import html

    return html.escape(text)
