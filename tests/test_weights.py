"""Sample weights (``describe(x, label, weights=w)``) against NumPy float64 on scikit-learn's bundled datasets.

Weights are frequency weights: mean and variance match ``numpy.average`` and
``numpy.cov(fweights=...)`` (integer weights) or ``numpy.cov(aweights=w, ddof=0)``
rescaled by ``W / (W - ddof)`` (float weights); histograms match
``numpy.histogram(weights=...)``; quantiles ``numpy.quantile(weights=...,
method="inverted_cdf")``; integer weights give what repeating the rows gives.
The data are read from real Zarr stores with the threaded scheduler.
"""

from __future__ import annotations

import dataclasses

import dask
import dask.array as da
import numpy as np
import pytest
import zarr
from sklearn.datasets import load_breast_cancer, load_wine

import daskbatch as db
from daskbatch.stats import Histogram, Moments

ALL = ("moments", "cov", "hist", "mi", "class_moments")


@pytest.fixture(scope="module", autouse=True)
def _threads():
    with dask.config.set(scheduler="threads"):
        yield


@pytest.fixture(scope="module", params=["wine", "breast_cancer"])
def dataset(request, tmp_path_factory):
    """The data, its label, float and integer weights (with zeros), in a Zarr store of 40-row chunks."""
    x, y = (load_wine if request.param == "wine" else load_breast_cancer)(return_X_y=True)
    rng = np.random.default_rng(3)
    w = rng.gamma(2.0, 1.5, size=len(x))
    w[rng.random(len(x)) < 0.1] = 0.0
    k = rng.integers(0, 4, size=len(x)).astype(np.float64)
    path = str(tmp_path_factory.mktemp("weights") / f"{request.param}.zarr")
    root = zarr.open_group(path, mode="w")
    root.create_array("X", data=x, chunks=(40, x.shape[1]))
    root.create_array("y", data=y.astype(np.int64), chunks=(40,))
    root.create_array("w", data=w, chunks=(40,))
    return path, x, y, w, k


def _weighted_moments(x, w, ddof):
    """Frequency-weighted mean, variance, biased skewness and excess kurtosis, in float64."""
    total = w.sum()
    mean = np.average(x, weights=w, axis=0)
    dev = x - mean
    m2, m3, m4 = (np.average(dev**p, weights=w, axis=0) for p in (2, 3, 4))
    return mean, m2 * total / (total - ddof), m3 / m2**1.5, m4 / m2**2 - 3.0


def _assert_matches_numpy(s: db.Summary, x: np.ndarray, y: np.ndarray, w: np.ndarray) -> None:
    """``s`` (stats ALL, range (0, 4000), 64 bins, ddof 1) against NumPy's weighted float64 statistics."""
    mean, var, skew, kurt = _weighted_moments(x, w, ddof=1)
    np.testing.assert_allclose(s.mean, mean, rtol=1e-13)
    np.testing.assert_allclose(s.var, var, rtol=1e-12)
    np.testing.assert_allclose(s.skew, skew, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(s.kurtosis, kurt, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(s.count, np.full(x.shape[1], (w > 0).sum()))  # values, not weights
    np.testing.assert_allclose(s.weight_sum, np.full(x.shape[1], w.sum()), rtol=1e-14)
    # Frequency weights: numpy's aweights with ddof=0, rescaled; aweights with ddof=1 are reliability weights.
    total = w.sum()
    cov = np.cov(x, rowvar=False, aweights=w, ddof=0) * total / (total - 1)
    np.testing.assert_allclose(s.cov, cov, rtol=1e-11, atol=1e-12 * np.abs(cov).max())
    assert s.cov_count == (w > 0).sum() and s.provenance["cov_weight_sum"] == pytest.approx(total, rel=1e-14)
    for j in range(x.shape[1]):
        counts, edges = np.histogram(x[:, j], bins=64, range=(0.0, 4000.0), weights=w)
        np.testing.assert_allclose(s.arrays.hist_counts[j], counts, rtol=1e-12, atol=1e-12)
        for c, k in enumerate(s.classes):
            in_class = np.histogram(x[:, j], bins=64, range=(0.0, 4000.0), weights=w * (y == k))[0]
            np.testing.assert_allclose(s.arrays.joint_counts[j, 1:-1, c], in_class, rtol=1e-12, atol=1e-12)
    for c, k in enumerate(s.classes):
        np.testing.assert_allclose(s.arrays.class_mean[:, c], np.average(x[y == k], weights=w[y == k], axis=0), rtol=1e-12)
        np.testing.assert_allclose(s.arrays.class_count[:, c], w[y == k].sum(), rtol=1e-13)


@pytest.mark.parametrize("chunk_rows", [17, 64, 10_000])
def test_float_weights_match_numpy(dataset, chunk_rows) -> None:
    path, x, y, w, _ = dataset
    s = db.describe(da.from_array(x, chunks=(chunk_rows, -1)), y, weights=w, stats=ALL, range=(0.0, 4000.0),
                    run=db.RunOptions(plan=None))
    _assert_matches_numpy(s, x, y, w)


def test_mi_from_weighted_joint_counts(dataset) -> None:
    """MI of the weighted joint table, computed here in float64 from numpy's weighted 2-D histogram."""
    path, x, y, w, _ = dataset
    s = db.describe(path, "y", weights="w", stats=("moments", "mi"), range=(0.0, 4000.0), bins=16)
    classes = np.unique(y)
    for j in range(x.shape[1]):
        joint = np.histogram2d(x[:, j], y, bins=[16, np.append(classes, classes[-1] + 1) - 0.5],
                               range=[(0.0, 4000.0), (classes[0] - 0.5, classes[-1] + 0.5)], weights=w)[0]
        p = joint / joint.sum()
        outer = p.sum(axis=1, keepdims=True) * p.sum(axis=0, keepdims=True)
        nz = p > 0
        assert s.arrays.mi[j] == pytest.approx(float(np.sum(p[nz] * np.log(p[nz] / outer[nz]))), rel=1e-10, abs=1e-13)


def test_integer_weights_equal_repeated_rows(dataset) -> None:
    """Every statistic, quantiles included, as if each row were there ``k`` times (0: absent)."""
    path, x, y, _, k = dataset
    reps = k.astype(np.int64)
    weighted = db.describe(path, "y", weights=k)
    repeated = db.describe(np.repeat(x, reps, axis=0), np.repeat(y, reps))
    for name in ("mean", "var", "skew", "kurtosis", "min", "max", "cov", "mi", "class_mean", "class_m2"):
        np.testing.assert_allclose(getattr(weighted, name), getattr(repeated, name), rtol=1e-10, atol=1e-12,
                                   err_msg=name)
    for name in ("hist_counts", "class_count", "joint_counts"):
        np.testing.assert_array_equal(getattr(weighted, name), getattr(repeated, name), err_msg=name)
    np.testing.assert_array_equal(weighted.weight_sum, repeated.count)
    np.testing.assert_allclose(weighted.cov, np.cov(x, rowvar=False, fweights=reps, ddof=1), rtol=1e-11)
    q = [0.0, 0.1, 0.5, 0.9, 1.0]
    np.testing.assert_array_equal(weighted.quantile(q).to_numpy(), repeated.quantile(q).to_numpy())


def test_weighted_quantiles_are_close_to_numpy(dataset) -> None:
    path, x, _, w, _ = dataset
    s = db.describe(path, weights="w", stats=("moments", "hist"))
    q = [0.05, 0.25, 0.5, 0.75, 0.95]
    want = np.quantile(x, q, axis=0, weights=w, method="inverted_cdf").T
    got = s.quantile(q).to_numpy()
    # Within a bin of the fine quantile histogram (2048 bins over the 0.1-99.9 % range), or the sketch's 0.5 %.
    width = (np.quantile(x, 0.999, axis=0) - np.quantile(x, 0.001, axis=0)) / 1024
    assert np.all(np.abs(got - want) <= np.maximum(width[:, None], 0.005 * np.abs(want)))


def test_zero_weights_are_absent_rows(dataset) -> None:
    path, x, y, w, _ = dataset
    s = db.describe(path, "y", weights="w", stats=ALL, range=(0.0, 4000.0))
    keep = w > 0
    t = db.describe(x[keep], y[keep], weights=w[keep], stats=ALL, range=(0.0, 4000.0))
    for name in ("count", "mean", "var", "min", "max", "cov", "hist_counts", "mi", "class_mean", "weight_sum"):
        np.testing.assert_allclose(getattr(s, name), getattr(t, name), rtol=1e-12, atol=1e-12, err_msg=name)


def test_compiled_and_array_api_paths_agree(dataset) -> None:
    """The numba loops (CPU) and the array-API code (the CuPy path) give the same weighted states."""
    _, x, y, w, _ = dataset
    x32 = x.astype(np.float32)
    hist = Histogram(bins=32, lo=tuple(x.min(axis=0)), hi=tuple(x.max(axis=0) + 1.0), by_label=True)
    results = []
    for compiled in (True, False):
        with dask.config.set({"daskbatch.kernels": compiled}):
            results.append((Moments().finalize(Moments().chunk(x32, weights=w)),
                            hist.finalize(hist.chunk(x32, y, weights=w))))
    (m1, h1), (m2, h2) = results
    for name in ("mean", "var", "skew", "kurtosis", "count", "weight_sum", "min", "max"):
        np.testing.assert_allclose(getattr(m1, name), getattr(m2, name), rtol=1e-12, err_msg=name)
    np.testing.assert_allclose(h1.joint, h2.joint, rtol=1e-13)


@pytest.mark.parametrize(("bad", "message"), [(-1.0, "weight -1.0 at row 45"), (np.nan, "weight nan at row 45"),
                                              (np.inf, "weight inf at row 45")])
def test_bad_weight_names_its_chunk_and_row(bad, message) -> None:
    x = np.arange(200.0).reshape(100, 2)
    w = np.ones(100)
    w[45] = bad
    with pytest.raises(ValueError, match=rf"^weights: chunk 1 \(rows 40..79\) has {message}; weights must be finite"):
        db.describe(da.from_array(x, chunks=(40, 2)), weights=w, stats=("moments",))


def test_weights_of_the_wrong_length_are_refused() -> None:
    x = np.arange(20.0).reshape(10, 2)
    with pytest.raises(ValueError, match=r"weights has shape \(9,\); expected \(10,\): one weight per row of x"):
        db.describe(x, weights=np.ones(9))
    with pytest.raises(TypeError, match="a weights name needs x to be a store path"):
        db.describe(x, weights="w")


def test_a_statistic_without_weights_is_refused() -> None:
    class Total:
        name = "total"

        def chunk(self, x, label=None):
            return x.sum(axis=0)

        def merge(self, a, b):
            return a + b

        def finalize(self, s):
            return s

    with pytest.raises(ValueError, match="statistic 'total' does not take sample weights"):
        db.describe(np.ones((4, 2)), weights=np.ones(4), stats=("moments", Total()))


def test_cli_describe_weights_roundtrip(dataset, tmp_path) -> None:
    """``daskbatch describe STORE --weights w --out``: the saved summary holds the weighted results and weight sums."""
    from click.testing import CliRunner

    from daskbatch.cli import main

    path, x, _, w, _ = dataset
    out = tmp_path / "s.zarr"
    result = CliRunner().invoke(main, ["describe", path, "--label", "y", "--weights", "w", "--stats", "moments,cov",
                                       "--out", str(out), "--no-progress", "--cluster", "threads"])
    assert result.exit_code == 0, result.output
    s = db.load_summary(out)
    np.testing.assert_allclose(s.mean, np.average(x, weights=w, axis=0), rtol=1e-13)
    np.testing.assert_allclose(s.weight_sum, np.full(x.shape[1], w.sum()), rtol=1e-14)
    assert s.provenance["weights"].startswith("weights array 'w' in ")


@pytest.mark.parametrize("window", [None, 8, 64])
def test_windowed_sketch_with_integer_weights_equals_repeated_rows(window) -> None:
    """The sketch's windows take weights: float64 counts and offsets as repeating the rows gives, merged either way."""
    from daskbatch.stats import Sketch
    from daskbatch.stats.sketch import SketchState

    rng = np.random.default_rng(5)
    sk = Sketch(window=window)
    x = rng.standard_normal((400, 3)) * np.exp(rng.uniform(-20.0, 20.0, (400, 1)))  # windows of 8 and 64 collapse
    x[::13, 1], x[5, 2], x[7, 0] = 0.0, np.nan, -np.inf
    w = rng.integers(0, 4, 400).astype(np.float64)
    parts = [slice(i, i + 50) for i in range(0, 400, 50)]

    def folded(states: list[SketchState]) -> SketchState:
        out = states[0]
        for s in states[1:]:
            out = sk.merge(out, s)
        return out

    repeated = folded([sk.chunk(np.repeat(x[p], w[p].astype(int), axis=0)) for p in parts])
    for kernels in (True, False):
        with dask.config.set({"daskbatch.kernels": kernels}):
            weighted = folded([sk.chunk(x[p], weights=w[p]) for p in parts])
        assert weighted.counts.dtype == np.float64 and repeated.counts.dtype == np.int64
        np.testing.assert_array_equal(weighted.counts, repeated.counts.astype(np.float64))
        np.testing.assert_array_equal(weighted.offset, repeated.offset)
        q = [0.0, 0.1, 0.5, 0.9, 1.0]
        np.testing.assert_array_equal(sk.finalize(weighted).quantile(q), sk.finalize(repeated).quantile(q))


def test_weights_with_a_target_are_refused() -> None:
    x = np.random.default_rng(0).standard_normal((50, 2))
    with pytest.raises(ValueError, match="weights= with target= is not supported"):
        db.describe(x, target=x[:, 0], weights=np.ones(50))


def test_accumulator_with_weights_equals_describe(dataset) -> None:
    """Streamed batch by batch with ``update(xb, yb, w=wb)``: describe's results on the same 40-row chunks, bit for bit."""
    path, x, y, w, _ = dataset
    stats, rng = ("moments", "cov", "hist", "mi"), (0.0, 4000.0)
    s = db.describe(da.from_array(x, chunks=(40, -1)), y, weights=w, stats=stats, run=db.RunOptions(plan=None, split_every=64), range=rng)
    acc = db.Accumulator(stats=stats, range=rng)
    for lo in range(0, len(x), 40):
        acc.update(x[lo:lo + 40], y[lo:lo + 40], w=w[lo:lo + 40])
    many = db.Accumulator(stats=stats, range=rng).update_many(
        (x[lo:lo + 40], y[lo:lo + 40], w[lo:lo + 40]) for lo in range(0, len(x), 40))
    for a in (acc.summary(), many.summary()):
        for name in ("mean", "var", "skew", "kurtosis", "weight_sum", "cov", "hist_counts", "joint_counts", "mi"):
            np.testing.assert_array_equal(getattr(a, name), getattr(s, name), err_msg=name)
    assert acc.summary().provenance["weights"] == "w"
    with pytest.raises(ValueError, match="lacks weights"):
        acc.update(x[:5], y[:5])
    with pytest.raises(ValueError, match="finite and non-negative"):
        db.Accumulator(stats=("moments",)).update(x[:3], w=[1.0, -1.0, 2.0])


def test_weights_with_a_checkpoint_resume_bitwise(dataset, tmp_path) -> None:
    """A weighted run that fails midway resumes from its checkpoint, computing only the missing blocks, bit for bit."""

    from daskbatch.engine.checkpoint import read_runs
    from daskbatch.errors import CheckpointMismatchError

    path, x, y, w, _ = dataset
    ds = db.open_dataset(path, label="y", chunks=40)
    kw = {"weights": "w", "stats": ("moments", "cov", "mi"), "range": (0.0, 4000.0), "run": db.RunOptions(plan=None, split_every=2)}
    plain = db.describe(ds, **kw)

    def fail_at_the_last_block(block, block_info=None):
        if block_info[0]["chunk-location"][0] == ds.x.numblocks[0] - 1:
            raise RuntimeError("injected")
        return block

    failing = dataclasses.replace(ds, x=ds.x.map_blocks(fail_at_the_last_block, dtype=ds.x.dtype,
                                                          meta=np.empty((0, 0), ds.x.dtype)))
    with dask.config.set(scheduler="sync"), pytest.raises(RuntimeError, match="injected"):
        db.describe(failing, **{**kw, "run": dataclasses.replace(kw["run"], checkpoint=tmp_path)})
    resumed = db.describe(ds, **{**kw, "run": dataclasses.replace(kw["run"], checkpoint=tmp_path)})
    computed = read_runs(tmp_path, "moments-cov-hist")[-1]["computed_blocks"]
    assert 0 < computed < ds.x.numblocks[0]  # the blocks before the failure came from the checkpoint
    for name in ("mean", "var", "skew", "kurtosis", "weight_sum", "cov", "hist_counts", "joint_counts", "mi"):
        np.testing.assert_array_equal(getattr(resumed, name), getattr(plain, name), err_msg=name)
    with pytest.raises(CheckpointMismatchError, match="weights content"):  # other weights: another run
        db.describe(ds, **{**kw, "weights": w * 2.0, "run": dataclasses.replace(kw["run"], checkpoint=tmp_path)})


# ------------------------------------------------------------------ merge and update


def _ranges(s: db.Summary) -> np.ndarray:
    """The histogram ranges of ``s``, as ``range=`` takes them."""
    return np.column_stack([s.arrays.hist_edges[:, 0], s.arrays.hist_edges[:, -1]])


@pytest.mark.parametrize(("split", "chunk_rows"), [(1, 40), (40, 40), (97, 17)])
def test_weighted_update_and_merge_match_numpy(dataset, split, chunk_rows) -> None:
    """update/merge of weighted summaries: numpy's weighted statistics of all the rows, as describe of them gives."""
    _, x, y, w, _ = dataset
    kw = {"stats": ALL, "range": (0.0, 4000.0), "run": db.RunOptions(plan=None)}
    first = db.describe(da.from_array(x[:split], chunks=(chunk_rows, -1)), y[:split], weights=w[:split], **kw)
    new = da.from_array(x[split:], chunks=(chunk_rows, -1)), y[split:]
    updated = db.update(first, *new, weights=w[split:], run=db.RunOptions(plan=None))
    merged = db.merge(first, db.describe(*new, weights=w[split:], **kw))
    whole = db.describe(da.from_array(x, chunks=(chunk_rows, -1)), y, weights=w, **kw)
    for s in (updated, merged, whole):
        _assert_matches_numpy(s, x, y, w)
    np.testing.assert_allclose(updated.mi, whole.mi, rtol=1e-12, atol=1e-15)
    assert updated.provenance["weights"] == "weights" and updated.provenance["rows"] == len(x)


def test_integer_weights_update_equals_repeated_rows(dataset, tmp_path) -> None:
    """Saved, loaded and updated with integer weights: every count as repeating the rows gives, bit for bit."""
    path, x, y, _, k = dataset
    reps = k.astype(np.int64)
    first = db.describe(x[:100], y[:100], weights=k[:100], stats=(*ALL, "sketch"))  # ranges from the sketch
    first.save(tmp_path / "first.zarr")
    loaded = db.load_summary(tmp_path / "first.zarr")
    assert type(loaded.states["moments"].state).__name__ == "WeightedMomentsState"
    assert type(loaded.states["cov"].state).__name__ == "WeightedCoMomentsState"
    with pytest.warns(db.RangeWarning):  # later rows reach beyond the first 100's ranges
        updated = db.update(loaded, x[100:], y[100:], weights=k[100:])
        again = db.update(first, x[100:], y[100:], weights=k[100:])
        repeated = db.describe(np.repeat(x, reps, axis=0), np.repeat(y, reps), stats=(*ALL, "sketch"),
                               range=_ranges(first))
    for name in ("hist_counts", "underflow", "overflow", "joint_counts", "class_count", "sketch_counts", "mi", "min",
                 "max"):
        np.testing.assert_array_equal(getattr(updated, name), getattr(repeated, name), err_msg=name)
    for name in ("mean", "var", "skew", "kurtosis", "cov", "class_mean", "class_m2"):
        np.testing.assert_allclose(getattr(updated, name), getattr(repeated, name), rtol=1e-10, atol=1e-12,
                                   err_msg=name)
    np.testing.assert_array_equal(updated.weight_sum, repeated.count)
    for name in ("mean", "cov", "hist_counts", "sketch_counts"):  # the loaded states are the saved ones
        np.testing.assert_array_equal(getattr(updated, name), getattr(again, name), err_msg=name)


def test_weighted_and_unweighted_summaries_merge_as_weight_one(dataset) -> None:
    """An unweighted summary weighs 1 per row, exactly: merging it with a weighted one, in either order."""
    _, x, y, w, _ = dataset
    kw = {"stats": ALL, "range": (0.0, 4000.0)}
    weighted, plain = db.describe(x[:90], y[:90], weights=w[:90], **kw), db.describe(x[90:], y[90:], **kw)
    ones = np.concatenate([w[:90], np.ones(len(x) - 90)])
    for s in (db.merge(weighted, plain), db.merge(plain, weighted)):
        _assert_matches_numpy(s, x, y, ones)
        assert s.provenance["weights"] == "1 of 2 parts weighted (weights), the others 1 per row"
    both = db.update(weighted, x[90:], y[90:])  # new rows without weights= weigh 1 each
    np.testing.assert_allclose(both.weight_sum, ones.sum(), rtol=1e-14)
    # Ranges found from each part's data differ: refused as for unweighted summaries.
    a, b = db.describe(x[:90], weights=w[:90], stats=("moments", "hist")), db.describe(x[90:], stats=("moments", "hist"))
    with pytest.raises(ValueError, match="histogram ranges differ: .*db.update does"):
        db.merge(a, b)


def test_cli_describe_update_with_weights(dataset, tmp_path) -> None:
    """``daskbatch describe NEW --weights w --update STATS``: the saved weighted summary continued with weighted rows."""
    from click.testing import CliRunner

    from daskbatch.cli import main

    _, x, y, w, _ = dataset
    parts = []
    for name, rows in (("old", slice(0, 100)), ("new", slice(100, None))):
        root = zarr.open_group(str(tmp_path / f"{name}.zarr"), mode="w")
        root.create_array("X", data=x[rows], chunks=(40, x.shape[1]))
        root.create_array("y", data=y[rows].astype(np.int64), chunks=(40,))
        root.create_array("w", data=w[rows], chunks=(40,))
        parts.append(str(tmp_path / f"{name}.zarr"))
    stats, common = str(tmp_path / "s.zarr"), ["--no-progress", "--cluster", "threads", "--label", "y", "--weights", "w"]
    r = CliRunner().invoke(main, ["describe", parts[0], "--stats", ",".join(ALL), "--range", "0:4000", "--out", stats,
                                  *common])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["describe", parts[1], "--update", stats, *common])
    assert r.exit_code == 0, r.output
    s = db.load_summary(stats)
    _assert_matches_numpy(s, x, y, w)
    assert [p["weights"].split(" in ")[0] for p in s.provenance["sources"]] == ["weights array 'w'"] * 2
