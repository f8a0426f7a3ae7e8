"""Labelled results (issue 34): every per-feature attribute of a Summary is a Series, every feature x feature
one a DataFrame with the names both ways, feature x bin/class a DataFrame indexed by feature, as the README says;
the arrays stay one ``np.asarray`` (or ``s.arrays``) away and internal code reads them by position."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import daskbatch as db
from daskbatch.stats.registry import summary_variables

README = Path(__file__).resolve().parents[1] / "README.md"
NAMES = ["alpha", "beta", "gamma"]


@pytest.fixture(scope="module")
def labelled() -> tuple[db.Summary, pd.DataFrame, np.ndarray]:
    """A summary of a DataFrame with named columns and a class label, every built-in statistic computed."""
    rng = np.random.default_rng(7)
    x = pd.DataFrame(rng.normal(size=(2_000, 3)) * [1.0, 2.0, 3.0], columns=NAMES)
    y = rng.choice([0, 1, 7], 2_000)
    s = db.describe(x, y, stats=("moments", "cov", "hist", "mi", "sketch", "class_moments"))
    return s, x, y


def _kind(value: object) -> str:
    """The README's word for a value's type."""
    if isinstance(value, pd.Series):
        return "Series"
    if isinstance(value, pd.DataFrame):
        return "DataFrame"
    if isinstance(value, xr.DataArray):
        return "DataArray"
    if isinstance(value, np.ndarray):
        return "NumPy array"
    return type(value).__name__


def test_every_variable_is_labelled_by_feature(labelled) -> None:
    s, x, _ = labelled
    checked = 0
    for name, declared in summary_variables().items():
        value, raw = getattr(s, name), getattr(s.arrays, name)
        if value is None:
            continue
        checked += 1
        if declared.dims is None:  # classes, cov_count: no feature dimension
            assert value is raw
            continue
        assert isinstance(raw, np.ndarray) and np.asarray(value).shape == raw.shape
        np.testing.assert_array_equal(np.asarray(value), raw)
        if len(declared.dims) == 1:
            assert isinstance(value, pd.Series) and value.name == name
            assert list(value.index) == NAMES and value.index.name == "feature"
        elif len(declared.dims) == 2:
            assert isinstance(value, pd.DataFrame), name
            assert list(value.index) == NAMES and value.index.name == "feature"
            assert value.columns.name == declared.dims[1]
        else:
            assert isinstance(value, xr.DataArray) and value.dims == declared.dims
            assert list(value["feature"].values) == NAMES
    assert checked >= 25
    assert list(s.cov.columns) == NAMES and s.cov.loc["gamma", "gamma"] == pytest.approx(x["gamma"].var())
    assert s.corr.loc["alpha", "beta"] == pytest.approx(x.corr().loc["alpha", "beta"])
    assert list(s.class_mean.columns) == [0, 1, 7]  # the label values, not column numbers
    assert s.mean["beta"] == pytest.approx(x["beta"].mean())
    assert s.std.to_numpy().dtype == np.float64


def test_derived_attributes_are_labelled_too() -> None:
    rng = np.random.default_rng(3)
    x = pd.DataFrame(rng.normal(size=(1_000, 2)), columns=["u", "v"])
    site = rng.choice([-1, 3, 8], 1_000)
    s = db.describe(x, groups=site)
    for name in ("group_count", "group_mean", "group_var"):
        table = getattr(s, name)
        assert isinstance(table, pd.DataFrame) and list(table.index) == ["u", "v"]
        assert list(table.columns) == [-1, 3, 8] and table.columns.name == "group"
        np.testing.assert_array_equal(table.to_numpy(), getattr(s.arrays, name))
    assert s.group_mean.loc["v", 8] == pytest.approx(x["v"][site == 8].mean())
    assert isinstance(s.group_hist, xr.DataArray) and s.group_hist.dims == ("feature", "bin", "group")
    assert isinstance(s.out_of_range_fraction, pd.Series) and list(s.out_of_range_fraction.index) == ["u", "v"]
    assert isinstance(s.groups, np.ndarray)


def test_unnamed_data_keep_the_names_the_summary_stores() -> None:
    # An ndarray's features are f0, f1, ... in feature_names, the table, to_xarray and --json: so in the labels.
    s = db.describe(np.arange(12.0).reshape(6, 2), stats=("moments", "cov"))
    assert list(s.mean.index) == ["f0", "f1"] == list(s.to_dataframe().index)
    assert list(s.to_xarray()["feature"].values) == ["f0", "f1"]
    assert list(s.cov.columns) == ["f0", "f1"]
    np.testing.assert_array_equal(np.asarray(s.mean), [5.0, 6.0])


def test_the_views_and_steps_still_work_on_named_features(labelled) -> None:
    # Internal code indexed the attributes by position: with labels, a feature named like a number or a
    # feature order unlike the index would give wrong numbers or FutureWarnings (errors under pytest).
    s, x, _ = labelled
    assert s.top_correlated(1).iloc[0]["r"] == pytest.approx(float(np.asarray(s.corr)[np.triu_indices(3, 1)][
        np.argmax(np.abs(np.asarray(s.corr)[np.triu_indices(3, 1)]))]))
    assert list(s.top_mi(3).index) == list(s.mi.sort_values(ascending=False).index)
    assert "alpha" in repr(s) and "alpha" in s._repr_html_()
    assert s.to_dataframe().loc["gamma", "mean"] == s.mean["gamma"]
    assert db.select(s, score="mi", mode="k", param=2).selected_names == tuple(s.top_mi(2).index)
    assert len(db.compare(s, s).to_dataframe()) == 3
    assert db.pca(s, 2).mean_ == pytest.approx(np.asarray(s.mean))
    ds = s.to_xarray()
    assert db.Summary.from_xarray(ds).cov.equals(s.cov)


def test_the_readme_says_what_each_attribute_returns(labelled) -> None:
    """Every ``s.<attr>  # comment`` line of the README names the type the attribute has."""
    s, _, _ = labelled
    grouped = db.describe(np.random.default_rng(0).normal(size=(500, 2)), groups=np.arange(500) % 3)
    weighted = db.describe(np.random.default_rng(0).normal(size=(500, 2)), weights=np.ones(500), stats=("moments",))
    lines = re.findall(r"^((?:s\.\w+(?:\(\d*\))?(?:, )?)+)\s+# (.*)$", README.read_text(), flags=re.M)
    checked = set()
    for attrs, comment in lines:
        for attr in re.findall(r"s\.(\w+)(?![\w(])", attrs):  # attributes, not method calls
            value = getattr(grouped if attr.startswith("group") else weighted if attr == "weight_sum" else s, attr)
            kind = _kind(value)
            assert kind in comment or (kind == "int" and "int" in comment), (attr, kind, comment)
            checked.add(attr)
    assert {"mean", "std", "min", "max", "cov", "corr", "cov_count", "hist_counts", "hist_edges", "mi",
            "groups", "group_mean", "group_var", "group_count", "group_hist", "weight_sum", "count"} <= checked
