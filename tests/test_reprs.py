"""What users see: the reprs, the labelled xarray form, labelled results and pandas input."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr

import daskbatch as db
from daskbatch.errors import MissingChunksWarning
from daskbatch.summary.dataset import decode_provenance, encode_provenance
from daskbatch.summary.reprs import NAN_HEAVY, format_column

ROWS, D = 600, 120


@pytest.fixture(scope="module")
def wide() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    x = rng.normal(size=(ROWS, D))
    x[:, 7] = 2.5  # constant
    x[: int(0.10 * ROWS), 11] = np.nan  # NaN-heavy (10 %)
    x[: int(0.02 * ROWS), 12] = np.nan  # a few NaN (2 %): not flagged
    y = (x[:, 3] > 0).astype(np.int64) + (x[:, 4] > 1)
    return x, y


@pytest.fixture(scope="module")
def summary(wide) -> db.Summary:
    x, y = wide
    return db.describe(x, y, bins=16, stats=("moments", "cov", "hist", "mi", "class_moments", "sketch"))


def header_of(html: str) -> list[str]:
    return re.findall(r"<th>([^<]*)</th>", html.split("<thead>")[1].split("</thead>")[0])


def row_of(html: str, feature: str) -> str:
    match = re.search(rf"<tr( class='[^']*')?><th>{feature}</th>.*?</tr>", html)
    assert match, feature
    return match.group(0)


# ------------------------------------------------------------------- HTML
def test_html_shows_50_of_120_hides_zero_columns_and_flags_features(summary: db.Summary) -> None:
    html = summary._repr_html_()
    assert "showing 50 of 120 features" in html
    # the feature table (header + 50), the top pairs and top MI (header + 5 each), the provenance
    assert html.count("<tr") == (1 + 50) + (1 + 5) * 2 + len(summary.provenance)
    header = header_of(html)
    assert header[:4] == ["count", "nan_count", "mean", "std"] and "notes" in header
    # No infinities anywhere: their count columns are left out, and said so.
    assert "posinf_count" not in header and "neginf_count" not in header
    assert "not shown: posinf_count, neginf_count" in html
    # f50 and later are not in the table.
    assert "<th>f49</th>" in html and "<th>f50</th>" not in html
    # The constant feature: its row and its std cell highlighted, a note, and a warning on top.
    constant = row_of(html, "f7")
    assert constant.startswith("<tr class='db-warn'>") and "<td class='num db-warn'>0</td>" in constant
    assert ">constant<" in constant and "1 constant feature (std 0): f7" in html
    # 10 % NaN is flagged (limit 5 %), 2 % is not.
    assert NAN_HEAVY == 0.05
    assert "10.0% NaN" in row_of(html, "f11") and "more than 5% NaN: f11 (10.0%)" in html
    assert row_of(html, "f12").startswith("<tr><th>")
    assert "<th>f0</th><td class='num'>600</td>" in html  # counts are integers
    assert "Top correlated pairs" in html and "Top features by mutual information" in html


def test_html_counts_with_separators_and_shown_infinities() -> None:
    x = np.ones((1500, 3))
    x[:, 1] = np.arange(1500.0)
    x[0, 2] = np.inf
    s = db.describe(x, stats=("moments",))
    html = s._repr_html_()
    header = header_of(html)
    assert "posinf_count" in header and "neginf_count" not in header and "nan_count" not in header
    assert "<th>f1</th><td class='num'>1,500</td>" in html
    assert "showing" not in html  # all 3 shown


def test_html_flags_values_outside_the_histogram_range() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2000, 3))
    x[:, 2] *= 10.0
    with pytest.warns(db.RangeWarning):
        s = db.describe(x, stats=("moments", "hist"), range=(-3.0, 3.0), bins=8)
    assert s.provenance["out_of_range"] == ["f2"]
    html = s._repr_html_()
    assert "outside range" in row_of(html, "f2") and row_of(html, "f2").startswith("<tr class='db-warn'>")
    assert "outside range" not in row_of(html, "f0")
    assert "values outside the histogram range: f2" in html


def test_feature_names_are_escaped() -> None:
    s = db.describe(np.eye(3), stats=("moments",), run=db.RunOptions(feature_names=["<b>", "a&b", "c"]))
    html = s._repr_html_()
    assert "<th>&lt;b&gt;</th>" in html and "a&amp;b" in html and "<b>&lt;" not in html


def test_text_repr(summary: db.Summary) -> None:
    text = repr(summary)
    lines = text.splitlines()
    assert lines[0] == "<daskbatch.Summary: 600 rows × 120 features>"
    assert "! 1 constant feature (std 0): f7" in text
    assert "showing 20 of 120 features" in text and "posinf_count" not in lines[5]
    table_head = next(line for line in lines if line.startswith("feature"))
    assert table_head.split()[:4] == ["feature", "count", "nan_count", "mean"]
    # every table row has the same width up to the notes column: the digits line up
    rows = [line for line in lines if re.match(r"f\d+ ", line)]
    assert len(rows) == 20
    # report.py still uses the first line as its header
    from daskbatch.summary.reprs import format_report

    report = format_report(summary, k=3)
    assert report.splitlines()[0] == lines[0] and "Top 3 features by mutual information" in report


def test_format_column_keeps_one_notation_and_four_digits() -> None:
    assert format_column(np.array([0.000342493, -6.04963e-05, 1.5, 0.0])) == ["0.0003425", "-0.00006050", "1.500", "0"]
    # a value that rounds up into the next power of ten keeps four digits too
    assert format_column(np.array([999.97, 1000.03, 9.99996])) == ["1,000", "1,000", "10.00"]
    assert format_column(np.array([3.4e-5, -6.0e-6, np.nan])) == ["3.400e-05", "-6.000e-06", "nan"]
    assert format_column(np.array([1234567.25, -12.5, np.inf, -np.inf])) == ["1,234,567", "-12.50", "inf", "-inf"]
    assert format_column(np.array([2.0e6, 3.0]), integer=True) == ["2,000,000", "3"]
    assert format_column(np.array([-1e-12, 0.5])) == ["0", "0.5000"]  # rounds to zero: no "-0"


# ------------------------------------------------------------------ xarray
def test_to_xarray_labels(summary: db.Summary) -> None:
    ds = summary.to_xarray(states=True)
    for name in ("count", "nan_count", "posinf_count", "neginf_count", "hist_counts", "underflow", "overflow",
                 "joint_counts", "class_count", "sketch_counts"):
        assert ds[name].dtype == np.int64, name
        assert ds[name].attrs["units"] == "1", name
    np.testing.assert_array_equal(ds["count"].values, summary.count)
    assert ds["kurtosis"].attrs["long_name"] == "excess kurtosis (Fisher)" and ds["kurtosis"].attrs["bias"] == 1
    assert ds["skew"].attrs["bias"] == 1 and "units" not in ds["mean"].attrs
    for name in ("var", "std", "cov"):
        assert ds[name].attrs["ddof"] == 1, name
    assert ds["cov"].attrs["complete_rows"] == summary.cov_count
    assert ds["mi"].attrs["units"] == "nat" and ds["corr"].attrs["units"] == "1"
    assert all("long_name" in ds[v].attrs for v in ds.data_vars)
    # coordinates
    assert list(ds["feature"].values) == list(summary.feature_names)
    np.testing.assert_array_equal(ds["bin"].values, np.arange(16))
    np.testing.assert_array_equal(ds["edge"].values, np.arange(17))
    edges = summary.arrays.hist_edges
    np.testing.assert_allclose(ds["bin_centre"].values, (edges[:, :-1] + edges[:, 1:]) / 2, rtol=1e-15)
    assert ds["bin_centre"].dims == ("feature", "bin")
    np.testing.assert_array_equal(ds["slot"].values, np.arange(-1, 17))
    np.testing.assert_array_equal(ds["class"].values, [0, 1, 2])
    assert list(ds["extreme"].values) == ["min", "max"]
    assert int(ds["sketch_slot"].values[0]) == summary.provenance["sketch"]["first_slot"]
    # provenance: one attribute per key, nested dicts flattened
    assert ds.attrs["rows"] == ROWS and ds.attrs["stats"] == list(summary.provenance["stats"])
    assert ds.attrs["plan.budget_bytes"] == summary.provenance["plan"]["budget_bytes"]
    assert ds.attrs["sketch.alpha"] == summary.provenance["sketch"]["alpha"]
    assert "provenance" not in ds.attrs
    # selecting by label works on the coordinates
    assert float(ds["mean"].sel(feature="f7")) == 2.5


def test_mi_in_bits_says_so() -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(size=(500, 2))
    s = db.describe(x, (x[:, 0] > 0).astype(int), stats=("moments", db.stats.MutualInformation(base=2)), bins=8)
    assert s.to_xarray()["mi"].attrs["units"] == "bit"


def test_save_load_round_trip(tmp_path, summary: db.Summary) -> None:
    back = db.load_summary(summary.save(tmp_path / "s.zarr"))
    assert back.provenance == json.loads(json.dumps(summary.provenance, default=str))
    for name in ("count", "nan_count", "class_count"):
        assert getattr(back.arrays, name).dtype == np.float64  # held as float64, like describe's
        np.testing.assert_array_equal(getattr(back.arrays, name), getattr(summary.arrays, name))
    for name in ("hist_counts", "joint_counts", "sketch_counts", "mean", "cov", "mi", "classes"):
        np.testing.assert_array_equal(getattr(back, name), getattr(summary, name), err_msg=name)
    pd.testing.assert_frame_equal(back.quantile([0.1, 0.9]), summary.quantile([0.1, 0.9]))
    reopened = xr.open_zarr(tmp_path / "s.zarr", consolidated=False)
    assert reopened["kurtosis"].attrs["long_name"] == "excess kurtosis (Fisher)"
    assert reopened.attrs["plan.limited_by"] == summary.provenance["plan"]["limited_by"]


def test_a_summary_saved_in_the_former_layout_is_refused_and_one_written_by_xarray_loads(tmp_path, summary: db.Summary) -> None:
    """The former layout (one JSON provenance attribute, no version) is refused in one line; to_xarray().to_zarr() loads."""
    new = summary.to_xarray()
    old = xr.Dataset(
        {name: (v.dims, v.values.astype(np.float64) if name in ("count", "nan_count") else v.values)
         for name, v in new.data_vars.items()},
        coords={"feature": new["feature"].values, "feature2": new["feature2"].values},
        attrs={"provenance": json.dumps(summary.provenance, default=str), "cov_count": summary.cov_count},
    )
    old.to_zarr(tmp_path / "old.zarr", mode="w", consolidated=False)
    with pytest.raises(db.DataError, match=r"^summary \S*old.zarr: it has format version None, this daskbatch reads 2; "
                       r"describe the data again \(or use the daskbatch that wrote it\)$"):
        db.load_summary(tmp_path / "old.zarr")
    new.attrs["daskbatch_summary_format"] = 3
    new.to_zarr(tmp_path / "later.zarr", mode="w", consolidated=False)
    with pytest.raises(db.DataError, match=r"it has format version 3, this daskbatch reads 2"):
        db.load_summary(tmp_path / "later.zarr")
    summary.to_xarray().to_zarr(tmp_path / "xr.zarr", mode="w", consolidated=False)
    back = db.load_summary(tmp_path / "xr.zarr")
    np.testing.assert_array_equal(back.count, summary.count)
    np.testing.assert_array_equal(back.classes, summary.classes)


def test_provenance_attributes_round_trip_awkward_values() -> None:
    provenance = {
        "source": "x", "rows": 3, "flag": True, "nothing": None, "empty": {}, "names": ["a", "b"],
        "pairs": [[0, 1], [2, 3]], "mixed": [1, "a"], "nested": {"a": {"b": 1, "c": [1.5, 2.5]}, "d": None},
        "dotted.key": 1, "inner": {"x.y": 2}, "records": [{"k": 1}],
    }
    attrs = encode_provenance(provenance)
    assert attrs["nested.a.b"] == 1 and attrs["nested.a.c"] == [1.5, 2.5] and attrs["names"] == ["a", "b"]
    assert set(attrs["provenance_json_keys"]) == {"empty", "pairs", "mixed", "inner", "records"}
    assert decode_provenance(attrs) == provenance


# ---------------------------------------------------------------- results
def test_quantile_is_labelled(summary: db.Summary) -> None:
    one = summary.quantile(0.5)
    assert isinstance(one, pd.Series) and one.name == 0.5 and one.index.name == "feature"
    assert list(one.index) == list(summary.feature_names)
    many = summary.quantile([0.25, 0.75])
    assert isinstance(many, pd.DataFrame) and list(many.columns) == [0.25, 0.75]
    assert many.shape == (D, 2) and list(many.index) == list(summary.feature_names)
    x = np.random.default_rng(7).normal(size=(ROWS, D))  # f0 is untouched by the fixture's edits
    exact = np.quantile(x[:, 0], 0.5, method="inverted_cdf")
    assert one["f0"] == pytest.approx(exact, rel=0.01)
    pd.testing.assert_series_equal(many[0.25], summary.quantile(0.25), check_names=False)


def test_top_mi_and_top_correlated_are_labelled(summary: db.Summary) -> None:
    top = summary.top_mi(5)
    assert isinstance(top, pd.Series) and top.name == "mi" and len(top) == 5
    assert top.is_monotonic_decreasing and top.index[0] == "f3"
    names = list(summary.feature_names)
    np.testing.assert_array_equal(top.to_numpy(), summary.arrays.mi[[names.index(n) for n in top.index]])
    pairs = summary.top_correlated(4)
    assert list(pairs.columns) == ["feature_a", "feature_b", "r"] and len(pairs) == 4
    assert pairs["r"].abs().is_monotonic_decreasing
    for a, b, r in pairs.itertuples(index=False):
        assert r == summary.arrays.corr[names.index(a), names.index(b)]
    # the strongest pair is the strongest of the matrix
    c = np.where(np.isfinite(summary.corr), np.abs(summary.corr), 0.0)
    np.fill_diagonal(c, 0.0)
    assert abs(pairs["r"].iloc[0]) == c.max()


def test_results_without_the_statistic_are_empty() -> None:
    s = db.describe(np.random.default_rng(0).normal(size=(50, 3)), stats=("moments",))
    assert s.top_mi(3).empty and s.top_mi(3).name == "mi"
    top = s.top_correlated(3)
    assert top.empty and list(top.columns) == ["feature_a", "feature_b", "r"]


# ------------------------------------------------------------------ pandas
def test_pandas_dataframe_keeps_column_names() -> None:
    rng = np.random.default_rng(3)
    values = rng.normal(size=(400, 3))
    df = pd.DataFrame(values, columns=["height", "weight", "age"])
    df["group"] = (df["height"] > 0).astype(np.int32)
    s = db.describe(df, "group", bins=8, stats=("moments", "mi"))
    assert s.feature_names == ("height", "weight", "age") and s.provenance["source"] == "DataFrame"
    np.testing.assert_allclose(s.mean, values.mean(axis=0), rtol=1e-13)
    assert s.top_mi(1).index[0] == "height"
    by_series = db.describe(df.drop(columns="group"), df["group"], bins=8, stats=("moments", "mi"))
    np.testing.assert_array_equal(by_series.mi, s.mi)
    assert list(s.to_dataframe().index) == ["height", "weight", "age"]


def test_pandas_input_problems_are_named() -> None:
    df = pd.DataFrame({"a": [1.0, 2.0, 3.0], "b": ["x", "y", "z"]})
    assert db.describe(df, stats=("moments",)).categorical.loc["b", "distinct"] == 3  # profiled, not refused
    with pytest.raises(KeyError, match="'y' is not a column"):
        db.describe(df[["a"]], "y")
    shuffled = pd.Series([0, 1, 0], index=[2, 1, 0])
    with pytest.raises(ValueError, match="index does not match"):
        db.describe(df[["a"]], shuffled)
    with pytest.raises(ValueError, match="1 missing"):
        db.describe(df[["a"]], pd.Series([0, None, 1], dtype="Int64"))


def test_pandas_nullable_columns_count_missing_as_nan() -> None:
    df = pd.DataFrame({"a": pd.array([1.0, None, 3.0, 4.0], dtype="Float64"), "b": [1, 2, 3, 4]})
    s = db.describe(df, pd.Series([0, 1, 0, 1], dtype="Int64"), stats=("moments", "class_moments"))
    np.testing.assert_array_equal(s.nan_count, [1, 0])
    assert s.arrays.mean[0] == pytest.approx(8.0 / 3.0, rel=1e-15)


def test_dask_dataframe_keeps_column_names() -> None:
    dd = pytest.importorskip("dask.dataframe")
    df = pd.DataFrame({"a": np.arange(100.0), "b": np.arange(100.0) ** 2, "y": np.arange(100) % 2})
    s = db.describe(dd.from_pandas(df, npartitions=3), "y", stats=("moments", "mi"), bins=4)
    assert s.feature_names == ("a", "b")
    np.testing.assert_allclose(s.mean, [49.5, (np.arange(100.0) ** 2).mean()], rtol=1e-13)


# --------------------------------------------------------- Plan, Dataset
def test_plan_html_marks_fit_and_notes() -> None:
    from daskbatch.planning.plan import Resources
    from daskbatch.planning.search import plan_chunks

    gib = 2**30
    fits = plan_chunks((10_000, 8), 2, (1000, 8), Resources(4 * gib, 2), stats=("moments",), dtype="float32")
    html = fits._repr_html_()
    assert "daskbatch.Plan: 10,000 × 8 float32" in html and "<th>largest task</th><td class='txt db-ok'>" in html
    tiled = plan_chunks((10_000_000, 100_000), 4, (1000, 1000), Resources(64 * gib), stats=("moments", "cov"))
    html = tiled._repr_html_()
    assert tiled.notes and html.count("<th>note</th><td class='txt db-warn'>") == len(tiled.notes)
    assert "co-moments in feature tiles of" in html
    assert "<pre>" not in html


def test_dataset_html_highlights_missing_chunks(tmp_path) -> None:
    path = tmp_path / "g.zarr"
    g = zarr.open_group(str(path), mode="w")
    g.create_array("X", shape=(400, 3), chunks=(100, 3), dtype="f4")[:] = np.ones((400, 3), dtype=np.float32)
    ds = db.open_dataset(path)
    html = ds._repr_html_()
    assert "daskbatch.Dataset: 400 × 3 float32" in html and "db-warn" not in html.split("</style>")[1]
    os.remove(path / "X" / "c" / "1" / "0")
    # zarr's writer leaves out chunks of fill values: listed, not flagged.
    html = db.open_dataset(path)._repr_html_()
    assert "<th>missing chunks</th><td class='txt'>1: X/c/1/0 (absent (fill value)" in html
    # In a store daskbatch wrote the same absence is a loss: flagged.
    zarr.open_array(str(path / "X"), mode="r+").update_attributes({"daskbatch:writes_every_chunk": True})
    with pytest.warns(MissingChunksWarning):
        holed = db.open_dataset(path, missing="fill")
    html = holed._repr_html_()
    assert "<th>missing chunks</th><td class='txt db-warn'>1: X/c/1/0" in html
