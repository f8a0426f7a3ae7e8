"""Incremental summaries: ``db.merge``, ``Summary.update``, saved states and ``describe --update``.

The reference is always ``describe`` of the concatenated rows: counts,
histograms, joint tables, MI and the quantile sketch must match bit for bit,
moments to rounding (the merge order differs from describe's tree).
"""

from __future__ import annotations

import contextlib
import json
import pathlib
import warnings
from collections.abc import Iterator

import dask
import dask.array as da
import numpy as np
import pytest
import zarr
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import daskbatch as db
from daskbatch.cli import main
from daskbatch.engine.passes import tree_reduce
from daskbatch.errors import DataError
from daskbatch.incremental import describe_settings
from daskbatch.stats import Moments
from daskbatch.stats.registry import statistic_params

ALL = ("moments", "cov", "hist", "mi", "class_moments", "sketch")

#: Fields that merge exactly: integer counts, extrema, and what is computed from counts alone.
EXACT = (
    "count", "nan_count", "posinf_count", "neginf_count", "min", "max", "cov_count",
    "hist_counts", "hist_edges", "underflow", "overflow", "joint_counts", "mi", "classes",
    "class_count", "sketch_counts", "sketch_extrema",
)


def _data(n: int = 240, d: int = 4, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """Features on different scales (one far from zero), a few NaN, and a 3-class label."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)) * np.array([1.0, 10.0, 0.5, 2.0])[:d] + np.array([0.0, -3.0, 1e6, 5.0])[:d]
    x[:, d - 1] = rng.lognormal(0.0, 1.0, n)  # skewed
    x[rng.random((n, d)) < 0.02] = np.nan
    return x, rng.integers(0, 3, n)


X, Y = _data()
#: The few NaN of _data leave out ~11 % of the rows from the complete-rows covariance, which describe
#: says (CompleteRowsWarning, tested in test_pairwise_cov.py): not what these tests are about.
pytestmark = pytest.mark.filterwarnings("ignore::daskbatch.errors.CompleteRowsWarning")
#: Given histogram ranges: one per feature, around all of its values.
GIVEN = np.column_stack([np.floor(np.nanmin(X, axis=0)) - 1.0, np.ceil(np.nanmax(X, axis=0)) + 1.0])


@pytest.fixture(autouse=True)
def _synchronous():
    """One thread: many small describes, on a shared two-core machine."""
    with dask.config.set(scheduler="synchronous"):
        yield


def _describe(x: np.ndarray, y: np.ndarray | None, chunk: int = 37, **kwargs: object) -> db.Summary:
    label = None if y is None else da.from_array(y, chunks=chunk)
    kwargs.setdefault("stats", ALL if y is not None else ("moments", "cov", "hist", "sketch"))
    kwargs.setdefault("bins", 16)
    run = db.RunOptions(plan=None, checkpoint=kwargs.pop("checkpoint", None),
                        feature_names=kwargs.pop("feature_names", None))
    if "ddof" in kwargs:
        kwargs["stats"] = [*kwargs["stats"], db.Moments(ddof=kwargs.pop("ddof"))]
    return db.describe(da.from_array(x, chunks=(chunk, x.shape[1])), label, run=run, **kwargs)


def _ranges(s: db.Summary) -> np.ndarray:
    assert s.hist_edges is not None
    return np.column_stack([s.arrays.hist_edges[:, 0], s.arrays.hist_edges[:, -1]])


def assert_same_statistics(got: db.Summary, want: db.Summary) -> None:
    """``got`` equals ``want``: bitwise where merging is exact, else within 2e-15 of each value's scale (README).

    Scales: a mean's is its magnitude plus the standard deviation, a
    (co)variance's the product of standard deviations, a correlation's 1;
    skewness and kurtosis are ratios of powers of the moments (M3 / M2^1.5,
    M4 / M2^2), so their rounding is up to ~2.5 times that of M2: 5e-15
    of ``1 + |skew|`` and of ``kurtosis + 3``.
    """
    assert got.feature_names == want.feature_names
    for name in EXACT:
        a, b = getattr(got, name), getattr(want, name)
        assert (a is None) == (b is None), name
        if a is not None:
            np.testing.assert_array_equal(a, b, err_msg=name, strict=True)
    std = want.std

    def close(name: str, scale: np.ndarray, tol: float = 2e-15) -> None:
        a, b = getattr(got, name), getattr(want, name)
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=name)
        err = np.abs(np.nan_to_num(a - b)) / np.where(scale > 0, scale, 1.0)
        assert float(np.max(err, initial=0.0)) <= tol, (name, float(np.max(err)))

    close("mean", np.abs(want.mean) + std)
    close("var", want.var)
    close("std", std)
    close("skew", 1.0 + np.abs(np.nan_to_num(want.skew)), 5e-15)
    close("kurtosis", 3.0 + np.nan_to_num(want.kurtosis), 5e-15)
    if want.cov is not None:
        close("cov", np.outer(std, std))
        close("corr", np.ones_like(want.corr))
    if want.class_mean is not None:
        class_sd = np.sqrt(np.nan_to_num(want.class_m2) / np.maximum(want.class_count, 1.0))
        close("class_mean", np.abs(np.nan_to_num(want.class_mean)) + class_sd)
        close("class_m2", want.class_m2)


# ------------------------------------------------------------------ merge == describe(concat)


@settings(max_examples=25)
@given(split=st.integers(1, len(X) - 1), chunk=st.integers(5, 80))
def test_merge_equals_describe_of_concat_given_range(split: int, chunk: int) -> None:
    """Labels, MI, per-class moments, co-moments, sketch; the range given (one pass each)."""
    kw = {"range": GIVEN, "chunk": chunk}
    a, b = _describe(X[:split], Y[:split], **kw), _describe(X[split:], Y[split:], **kw)
    merged = db.merge(a, b)
    assert_same_statistics(merged, _describe(X, Y, **kw))
    assert merged.provenance["rows"] == len(X)
    assert [s["rows"] for s in merged.provenance["sources"]] == [split, len(X) - split]


@settings(max_examples=20)
@given(split=st.integers(2, len(X) - 2), chunk=st.integers(5, 80))
def test_ranges_found_from_the_first_part_pass_to_the_second(split: int, chunk: int) -> None:
    """The second part is counted on the first part's ranges: compare with describe(concat, range=those)."""
    a = _describe(X[:split], Y[:split], chunk=chunk)
    assert a.provenance["range"] == "quantiles"
    ranges = _ranges(a)
    with _out_of_range_allowed():  # a few first rows leave most later ones outside their ranges
        b = _describe(X[split:], Y[split:], chunk=chunk, range=ranges)
        merged = db.merge(a, b)
        whole = _describe(X, Y, chunk=chunk, range=ranges)
    assert_same_statistics(merged, whole)
    assert merged.provenance["out_of_range"] == whole.provenance["out_of_range"]
    # ... and the sketch and moments equal describe(concat) with ranges found from all rows.
    found = _describe(X, Y, chunk=chunk)
    np.testing.assert_array_equal(merged.sketch_counts, found.sketch_counts)
    assert merged.provenance["sketch"] == found.provenance["sketch"]
    np.testing.assert_array_equal(merged.count, found.count)


@settings(max_examples=20)
@given(split=st.integers(1, len(X) - 1), chunk=st.integers(5, 80))
def test_update_equals_describe_of_concat(split: int, chunk: int) -> None:
    first = _describe(X[:split], Y[:split], chunk=chunk)
    y_new = da.from_array(Y[split:], chunks=chunk)
    with _out_of_range_allowed():
        updated = db.update(first, da.from_array(X[split:], chunks=(chunk, X.shape[1])), y_new, run=db.RunOptions(plan=None))
        whole = _describe(X, Y, chunk=chunk, range=_ranges(first))
    assert_same_statistics(updated, whole)
    assert updated.provenance["out_of_range"] == whole.provenance["out_of_range"]
    assert first.provenance["rows"] == split  # the first summary is unchanged
    assert updated.provenance["range"] == "quantiles"  # found from the first part's rows


def test_update_without_label_or_sketch_and_minmax_ranges() -> None:
    x = np.nan_to_num(X)
    first = _describe(x[:100], None, stats=("moments", "hist"), range="minmax")
    with pytest.warns(db.RangeWarning, match="outside the histogram range"):  # beyond the first rows' extrema
        updated = db.update(first, x[100:], run=db.RunOptions(plan=None))
    with pytest.warns(db.RangeWarning):
        whole = _describe(x, None, stats=("moments", "hist"), range=_ranges(first))
    assert_same_statistics(updated, whole)
    assert updated.sketch_counts is None and updated.cov is None


def test_merge_unions_class_values() -> None:
    """Class values {0, 1} and {1, 2, 7}: columns move to their place among {0, 1, 2, 7}, exactly."""
    rng = np.random.default_rng(5)
    ya, yb = rng.choice([0, 1], 90), rng.choice([1, 2, 7], 150)
    x = X[:240]
    a, b = _describe(x[:90], ya, range=GIVEN), _describe(x[90:], yb, range=GIVEN)
    np.testing.assert_array_equal(a.classes, [0, 1])
    merged = db.merge(a, b)
    np.testing.assert_array_equal(merged.classes, [0, 1, 2, 7])
    assert_same_statistics(merged, _describe(x, np.concatenate([ya, yb]), range=GIVEN))
    # The other order gives the same counts.
    np.testing.assert_array_equal(db.merge(b, a).joint_counts, merged.joint_counts)


def test_describe_results_unchanged_by_keeping_states() -> None:
    """describe finalizes the kept states: the same bits as a finalizing tree reduction."""
    x = da.from_array(X, chunks=(37, X.shape[1]))
    s = db.describe(x, stats="moments", run=db.RunOptions(plan=None, split_every=3))
    (result,) = dask.compute(tree_reduce(Moments(), x, split_every=3))
    for name in ("mean", "var", "std", "skew", "kurtosis", "min", "max", "count"):
        np.testing.assert_array_equal(getattr(s, name), getattr(result, name), strict=True)


def test_checkpointed_describe_keeps_the_same_states(tmp_path: pathlib.Path) -> None:
    plain = _describe(X, Y, range=GIVEN)
    ckpt = _describe(X, Y, range=GIVEN, checkpoint=tmp_path / "ckpt")
    assert plain.states is not None and ckpt.states is not None
    assert set(plain.states) == set(ckpt.states) == {"moments", "cov", "hist", "class_moments", "sketch"}
    for name, kept in plain.states.items():
        assert statistic_params(kept.statistic) == statistic_params(ckpt.states[name].statistic)
        _assert_states_equal(kept.state, ckpt.states[name].state)


def _assert_states_equal(a: object, b: object) -> None:
    import dataclasses

    assert type(a) is type(b)
    for f in dataclasses.fields(a):  # type: ignore[arg-type]
        np.testing.assert_array_equal(getattr(a, f.name), getattr(b, f.name), err_msg=f.name, strict=True)


@contextlib.contextmanager
def _out_of_range_allowed() -> Iterator[None]:
    """Values outside the first part's ranges are expected here (the provenance lists the features)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", db.RangeWarning)
        yield


# ------------------------------------------------------------------ saved states


def test_save_load_keeps_states_and_merges_the_same(tmp_path: pathlib.Path) -> None:
    a = _describe(X[:150], Y[:150])
    a.save(tmp_path / "a.zarr")
    loaded = db.load_summary(tmp_path / "a.zarr")
    assert loaded.states is not None and a.states is not None and set(loaded.states) == set(a.states)
    for name, kept in a.states.items():
        assert statistic_params(loaded.states[name].statistic) == statistic_params(kept.statistic)
        _assert_states_equal(loaded.states[name].state, kept.state)
    with _out_of_range_allowed():
        b = _describe(X[150:], Y[150:], range=_ranges(a))
        m1, m2 = db.merge(a, b), db.merge(loaded, b)
        assert_same_statistics(m2, m1)
        np.testing.assert_array_equal(m1.mean, m2.mean, strict=True)  # the same states: the same bits
        # A merged summary saves and loads with its states and sources.
        m1.save(tmp_path / "m.zarr")
        again = db.load_summary(tmp_path / "m.zarr")
        assert again.provenance["sources"] == m1.provenance["sources"]
        c = _describe(X[150:] + 0.5, Y[150:], range=_ranges(a))  # b again would count its rows twice
        np.testing.assert_array_equal(db.merge(again, c).mean, db.merge(m1, c).mean, strict=True)


@pytest.fixture()
def saved(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "s.zarr"
    _describe(X, Y, range=GIVEN).save(path)
    return path


def test_tampered_state_array_is_detected(saved: pathlib.Path) -> None:
    m2 = zarr.open_array(saved / "states" / "moments" / "m2", mode="r+")
    m2[0] = m2[0] * (1 + 1e-12)  # a valid chunk (its CRC rewritten by zarr), other numbers
    with pytest.raises(DataError, match=r"s\.zarr: state 'moments' fails its sha256 checksum"):
        db.load_summary(saved)


def test_tampered_state_parameters_are_detected(saved: pathlib.Path) -> None:
    group = zarr.open_group(saved / "states" / "hist", mode="r+")
    params = dict(group.attrs["params"])
    params["lo"] = [v - 1.0 for v in params["lo"]]
    group.attrs["params"] = params
    with pytest.raises(DataError, match=r"state 'hist' fails its sha256 checksum"):
        db.load_summary(saved)


def test_corrupt_state_chunk_is_detected(saved: pathlib.Path) -> None:
    chunk = next(p for p in (saved / "states" / "moments" / "mean").rglob("*") if p.is_file() and p.name != "zarr.json")
    raw = bytearray(chunk.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    chunk.write_bytes(bytes(raw))
    with pytest.raises(DataError, match=r"state 'moments' cannot be read"):
        db.load_summary(saved)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        # a summary saved before the sketch's windowed state (format 1) is refused, not misread
        (lambda attrs: attrs.update(format_version=1), r"state 'sketch' has format version 1, this daskbatch reads 3"),
        (lambda attrs: attrs.update(statistic="os.system"), r"state 'sketch': unknown statistic 'os.system'"),
        (lambda attrs: attrs.update(statistic="Moments", params={}), r"state 'sketch' holds a Moments"),
        (lambda attrs: attrs.update(fields=["counts"]), r"state 'sketch': fields \['counts'\] are not those"),
    ],
)
def test_state_metadata_is_checked(saved: pathlib.Path, change, message: str) -> None:
    group = zarr.open_group(saved / "states" / "sketch", mode="r+")
    attrs = dict(group.attrs)
    change(attrs)
    group.attrs.put(attrs)
    with pytest.raises(DataError, match=message):
        db.load_summary(saved)


def test_states_are_plain_arrays_and_json(saved: pathlib.Path) -> None:
    """Nothing pickled: every state field is a numeric Zarr array, every parameter JSON."""
    meta = json.loads((saved / "states" / "hist" / "zarr.json").read_text())["attributes"]
    assert meta["statistic"] == "Histogram" and meta["params"]["bins"] == 16 and meta["format_version"] == 3
    assert meta["params"]["classes"] == [0, 1, 2] and len(meta["sha256"]) == 64
    for name, _ in zarr.open_group(saved / "states", mode="r").groups():
        for _, arr in zarr.open_group(saved / "states" / name, mode="r").arrays():
            assert arr.dtype.kind in "fi", (name, arr.dtype)


# ------------------------------------------------------------------ refusals


@pytest.mark.parametrize(
    ("second", "message"),
    [
        ({"bins": 8}, r"'hist' statistics differ in bins: 16 vs 8"),
        ({"range": GIVEN + [[0.0, 0.0], [0.0, 0.0], [0.0, 1.0], [-2.0, 0.0]]},
         r"histogram ranges differ: 'f2' \[\S+, \S+\] vs \[\S+, \S+\] and 1 more feature\(s\); describe the second"),
        ({"ddof": 0}, r"'class_moments' statistics differ in ddof: 1 vs 0"),
        ({"stats": (*ALL, db.stats.Moments(nan_policy="propagate"))},
         r"'moments' statistics differ in nan_policy: 'omit' vs 'propagate'"),
        ({"stats": ("moments", "cov", "hist", "mi", "sketch")}, r"different statistics: .*class_moments.* vs"),
        ({"stats": (*ALL, db.stats.MutualInformation(base=2))}, r"differ in mi_units: 'nats' vs 'bits'"),
        ({"feature_names": ["f0", "f1", "g2", "f3"]}, r"feature names differ at 1 position\(s\), first at 2: 'f2' vs 'g2'"),
    ],
)
def test_mismatched_settings_are_one_line_errors(second: dict, message: str) -> None:
    a = _describe(X[:100], Y[:100], range=GIVEN)
    b = _describe(X[100:], Y[100:], **{"range": GIVEN, **second})
    with pytest.raises(ValueError, match=message) as info:
        db.merge(a, b)
    assert "\n" not in str(info.value)


def test_summaries_without_states_are_refused() -> None:
    acc = db.Accumulator(stats=("moments",)).update(np.nan_to_num(X))
    s = _describe(X, None, stats="moments")
    with pytest.raises(ValueError, match=r"the first summary holds no mergeable states \(it was made without"):
        db.merge(acc.summary(), s)
    with pytest.raises(ValueError, match="the summary holds no mergeable states"):
        db.update(acc.summary(), X)
    with pytest.raises(TypeError, match="update takes bins, range from the summary"):
        db.update(s, X, bins=3, range=(0, 1))
    with pytest.raises(TypeError, match="update takes feature_names from the summary"):
        db.update(s, X, run=db.RunOptions(feature_names=["a", "b", "c", "d"]))
    assert not hasattr(s, "update")  # db.update(summary, rows) is the one spelling
    labelled = _describe(X[:50], Y[:50], range=GIVEN)
    with pytest.raises(ValueError, match="holds mutual information and per-class moments: give the new rows' label"):
        db.update(labelled, X[50:])


def test_describe_settings_reproduce_the_summary() -> None:
    s = _describe(X, Y, stats=[*ALL, db.stats.Moments(ddof=0, bias=False), db.stats.MutualInformation(base=2, miller_madow=True)])
    got = describe_settings(s)
    names, objects = got["stats"][:-2], got["stats"][-2:]
    assert names == list(s.provenance["stats"]) and got["bins"] == 16
    assert objects == [db.Moments(ddof=0, bias=False), db.stats.MutualInformation(base=2, miller_madow=True)]
    np.testing.assert_array_equal(got["range"], _ranges(s))
    assert got["run"].feature_names == list(s.feature_names)
    again = db.describe(da.from_array(X, chunks=(37, X.shape[1])), da.from_array(Y, chunks=37), **got)
    np.testing.assert_allclose(again.var, s.var, rtol=1e-12)
    np.testing.assert_array_equal(again.mi, s.mi)


# ------------------------------------------------------------------ the CLI


def _store(path: pathlib.Path, x: np.ndarray, y: np.ndarray) -> str:
    root = zarr.open_group(str(path), mode="w")
    root.create_array("X", data=x, chunks=(64, x.shape[1]))
    root.create_array("y", data=y, chunks=(64,))
    return str(path)


def test_cli_update_replaces_stats(tmp_path: pathlib.Path) -> None:
    old, new = _store(tmp_path / "old.zarr", X[:140], Y[:140]), _store(tmp_path / "new.zarr", X[140:], Y[140:])
    stats = tmp_path / "stats.zarr"
    common = ["--no-progress", "--cluster", "threads", "--bins", "16"]
    r = CliRunner().invoke(main, ["describe", old, "--label", "y", "--stats", ",".join(ALL), "--out", str(stats), *common])
    assert r.exit_code == 0, r.output
    first = db.load_summary(stats)
    with _out_of_range_allowed():  # the new rows reach beyond the ranges found from the old ones
        r = CliRunner().invoke(main, ["describe", new, "--label", "y", "--update", str(stats), "--no-progress", "--cluster", "threads"])
    assert r.exit_code == 0, r.output
    assert f"updated summary written to {stats}" in r.output
    updated = db.load_summary(stats)
    assert updated.states is not None and updated.provenance["rows"] == len(X)
    assert [s["path"] for s in updated.provenance["sources"]] == [old, new]
    assert not list(tmp_path.glob(".stats.zarr*"))  # no temporary or old copy left beside it
    with _out_of_range_allowed():
        whole = db.describe(
            np.asarray(X), Y, stats=ALL, bins=16, range=_ranges(first),
            run=db.RunOptions(split_every=first.provenance["split_every"]),
        )
    assert_same_statistics(updated, whole)
    r = CliRunner().invoke(main, ["describe", new, "--update", str(stats), "--no-progress", "--cluster", "threads"])
    assert r.exit_code == 2 and "holds mutual information and per-class moments: give the new rows' --label" in r.output


def test_cli_update_finds_the_recorded_label(tmp_path: pathlib.Path) -> None:
    # A store that records its label (db.synth, db.ingest): --update finds it as describe does.
    old, new, stats = tmp_path / "old.zarr", tmp_path / "new.zarr", tmp_path / "stats.zarr"
    db.synth(str(old), rows=600, features=3, classes=3, chunk_rows=200, seed=1)
    db.synth(str(new), rows=400, features=3, classes=3, chunk_rows=200, seed=2)
    args = ["--no-progress", "--cluster", "threads"]
    r = CliRunner().invoke(main, ["describe", str(old), "--out", str(stats), *args])
    assert r.exit_code == 0, r.output
    assert db.load_summary(stats).class_count is not None  # labelled: mi and class moments
    with _out_of_range_allowed():
        r = CliRunner().invoke(main, ["describe", str(new), "--update", str(stats), *args])
    assert r.exit_code == 0, r.output
    updated = db.load_summary(stats)
    assert updated.provenance["rows"] == 1000
    assert np.asarray(updated.class_count).sum(axis=-1).tolist() == [1000.0] * 3  # every feature, all classes


def test_cli_update_to_out_and_refusals(tmp_path: pathlib.Path) -> None:
    old, new = _store(tmp_path / "old.zarr", X[:140], Y[:140]), _store(tmp_path / "new.zarr", X[140:], Y[140:])
    stats, out = tmp_path / "stats.zarr", tmp_path / "all.zarr"
    args = ["--no-progress", "--cluster", "threads"]
    assert CliRunner().invoke(main, ["describe", old, "--stats", "moments,hist", "--out", str(stats), *args]).exit_code == 0
    before = (stats / "states" / "hist" / "zarr.json").read_text()
    with _out_of_range_allowed():
        r = CliRunner().invoke(main, ["describe", new, "--update", str(stats), "--out", str(out), *args])
    assert r.exit_code == 0, r.output
    assert db.load_summary(out).provenance["rows"] == len(X)
    assert (stats / "states" / "hist" / "zarr.json").read_text() == before  # STATS left as it was
    # Settings that STATS decides cannot be given.
    r = CliRunner().invoke(main, ["describe", new, "--update", str(stats), "--bins", "8", *args])
    assert r.exit_code == 2 and "--bins cannot be combined with --update" in r.output
    # STATS must be a summary with states, and not the input store.
    r = CliRunner().invoke(main, ["describe", new, "--update", new, *args])
    assert r.exit_code != 0 and "--update" in r.output and "is the input store" in r.output
    r = CliRunner().invoke(main, ["describe", new, "--update", old, *args])
    assert r.exit_code != 0 and "is not a daskbatch summary" in r.output

