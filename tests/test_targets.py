"""Continuous targets: f_regression / r_regression equal to scikit-learn's, binned MI against the
target's quantile bins, selection with the same modes, from real Zarr stores on disk."""

from __future__ import annotations

import warnings
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
import zarr
from click.testing import CliRunner
from scipy import stats as sps
from sklearn import feature_selection as fs
from sklearn.datasets import load_diabetes, make_regression
from sklearn.metrics import mutual_info_score

import daskbatch as db
from daskbatch import selection
from daskbatch.cli import main

pytestmark = [
    pytest.mark.filterwarnings("ignore::daskbatch.RangeWarning"),
    # diabetes's s4 (f7) holds 28 of its 442 values at its minimum: named (SuspectValueWarning, tested in
    # test_pairwise_cov.py), counted as data; not what these tests are about.
    pytest.mark.filterwarnings("ignore::daskbatch.errors.SuspectValueWarning"),
]


def _write(path: Path, x: np.ndarray, y: np.ndarray) -> str:
    root = zarr.open_group(str(path), mode="w")
    root.create_array("X", data=x, chunks=(128, x.shape[1]))
    root.create_array("y", data=y, chunks=(128,))
    return str(path)


@pytest.fixture(scope="module")
def diabetes_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, np.ndarray, np.ndarray]:
    x, y = load_diabetes(return_X_y=True)
    return _write(tmp_path_factory.mktemp("targets") / "diabetes.zarr", x, y), x, y


@pytest.fixture(scope="module")
def regression_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, np.ndarray, np.ndarray, np.ndarray]:
    """California-housing-sized features: 8 features (4 informative, one weak), 3,000 rows, offsets."""
    x, y, coef = make_regression(n_samples=3000, n_features=8, n_informative=4, noise=10.0, coef=True,
                                 random_state=3)
    x = x * np.arange(1.0, 9.0) + np.linspace(-50.0, 1e4, 8)  # scales and offsets far from zero
    y = y + 200.0
    return _write(tmp_path_factory.mktemp("targets") / "regression.zarr", x, y), x, y, coef


def _open(store: str, rows: int) -> tuple[da.Array, da.Array]:
    """The store's arrays in blocks of ``rows``."""
    return (da.from_zarr(store, component="X").rechunk((rows, -1)), da.from_zarr(store, component="y").rechunk(rows))


def _describe(x: da.Array, y: da.Array, **kw: object) -> db.Summary:
    with dask.config.set(scheduler="threads", num_workers=2):
        return db.describe(x, target=y, run=db.RunOptions(plan=None), **kw)


@pytest.mark.parametrize("rows", [442, 97, 16])
def test_f_and_r_regression_equal_sklearn_on_diabetes(diabetes_store, rows: int) -> None:
    store, x, y = diabetes_store
    s = _describe(*_open(store, rows), stats=("moments",))
    f, p = selection._f_regression(s)
    f_ref, p_ref = fs.f_regression(x, y)
    np.testing.assert_allclose(selection._r_regression(s), fs.r_regression(x, y), rtol=1e-10, atol=0)
    np.testing.assert_allclose(f, f_ref, rtol=1e-10, atol=0)
    np.testing.assert_allclose(p, p_ref, rtol=1e-9, atol=1e-300)
    np.testing.assert_array_equal(s.target_count, np.full(x.shape[1], len(y), dtype=np.float64))


@pytest.mark.parametrize("rows", [3000, 211])
def test_f_regression_on_offset_data_equals_a_centred_reference(regression_store, rows: int) -> None:
    """Features offset by up to 1e4: sklearn's power sums lose digits there, a centred float64 reference does not."""
    store, x, y, _ = regression_store
    s = _describe(*_open(store, rows), stats=("moments",))
    dx, dy = x - x.mean(axis=0), y - y.mean()
    r_ref = (dx * dy[:, None]).sum(axis=0) / np.sqrt((dx**2).sum(axis=0) * (dy**2).sum())
    np.testing.assert_allclose(selection._r_regression(s), r_ref, rtol=1e-10, atol=0)
    f_ref = r_ref**2 / (1 - r_ref**2) * (len(y) - 2)
    f, p = selection._f_regression(s)
    np.testing.assert_allclose(f, f_ref, rtol=1e-9, atol=0)
    np.testing.assert_allclose(p, sps.f.sf(f_ref, 1, len(y) - 2), rtol=1e-6, atol=1e-300)
    # and sklearn agrees where its sums of squares still hold enough digits
    np.testing.assert_allclose(f, fs.f_regression(x, y)[0], rtol=1e-6)


def test_nan_in_a_feature_leaves_that_feature_s_rows_out(diabetes_store) -> None:
    _, x, y = diabetes_store
    x = x.copy()
    x[::7, 2] = np.nan
    s = _describe(da.from_array(x, chunks=(50, -1)), da.from_array(y, chunks=50), stats=("moments",))
    keep = ~np.isnan(x[:, 2])
    assert s.arrays.target_count[2] == keep.sum()
    f_ref = fs.f_regression(x[keep][:, [2]], y[keep])[0][0]
    np.testing.assert_allclose(selection._f_regression(s)[0][2], f_ref, rtol=1e-10)
    np.testing.assert_allclose(selection._f_regression(s)[0][[0, 1]], fs.f_regression(x[:, :2], y)[0], rtol=1e-10)


def _reference_mi(x: np.ndarray, y: np.ndarray, edges: np.ndarray, cuts: np.ndarray) -> np.ndarray:
    """Plug-in MI (sklearn's mutual_info_score) of each feature's in-range bins with the target's bins."""
    y_code = np.searchsorted(cuts, y, side="right")
    out = []
    for d in range(x.shape[1]):
        e = edges[d]
        inside = (x[:, d] >= e[0]) & (x[:, d] <= e[-1])
        x_code = np.clip(np.searchsorted(e, x[inside, d], side="right") - 1, 0, len(e) - 2)
        out.append(mutual_info_score(x_code, y_code[inside]))
    return np.asarray(out)


def test_mi_with_a_target_equals_a_numpy_reference_on_the_same_bins(diabetes_store) -> None:
    store, x, y = diabetes_store
    s = _describe(*_open(store, 60), stats=("moments", "hist", db.stats.MutualInformation(target_bins=12)), bins=16)
    cuts = np.asarray(s.provenance["target"]["cuts"])
    assert s.provenance["target"]["bins"] == len(cuts) + 1 == len(s.classes) and len(cuts) >= 10
    # the bins are the target's quantile bins: about equally populated
    sizes = np.bincount(np.searchsorted(cuts, y, side="right"))
    assert sizes.min() >= 0.5 * len(y) / len(sizes)
    np.testing.assert_allclose(s.mi, _reference_mi(x, y, s.arrays.hist_edges, cuts), rtol=1e-12, atol=1e-15)


def _top(values: np.ndarray, k: int) -> set[int]:
    return {int(i) for i in np.argsort(values)[-k:]}


def test_mi_with_a_target_ranks_features_as_mutual_info_regression(diabetes_store, regression_store) -> None:
    store, x, y = diabetes_store
    s = _describe(*_open(store, 100), stats=("moments", "hist", db.stats.MutualInformation(target_bins=16)), bins=16)
    ref = fs.mutual_info_regression(x, y, random_state=0)
    assert sps.spearmanr(s.mi, ref)[0] >= 0.85
    assert len(_top(s.mi, 3) & _top(ref, 3)) >= 2
    store, x, y, coef = regression_store
    s = _describe(*_open(store, 500), stats=("moments", "hist", db.stats.MutualInformation(target_bins=16)), bins=16)
    ref = fs.mutual_info_regression(x, y, random_state=0)
    strong = np.flatnonzero(np.abs(coef) > 0)
    # the informative features, and their order, as sklearn's k-NN estimate finds them
    assert _top(s.mi, len(strong)) == _top(ref, len(strong)) == {int(i) for i in strong}
    assert sps.spearmanr(s.arrays.mi[strong], ref[strong])[0] >= 0.8


def test_the_readmes_mi_guidance_on_diabetes_holds(diabetes_store) -> None:
    # The README: with bins=16 and Miller-Madow, diabetes ranks as mutual_info_regression (Spearman 0.93,
    # the same top 3); at the default 64 bins the plug-in bias decides the order (Spearman about 0).
    store, x, y = diabetes_store
    ref = fs.mutual_info_regression(x, y, random_state=0)
    guided = _describe(*_open(store, 100), stats=("moments", "hist", db.stats.MutualInformation(miller_madow=True)),
                       bins=16)
    assert sps.spearmanr(guided.mi, ref)[0] >= 0.9
    assert _top(guided.mi, 3) == _top(ref, 3)
    default = _describe(*_open(store, 100), stats=("moments", "hist", "mi"))
    assert abs(sps.spearmanr(default.mi, ref)[0]) < 0.2
    assert len(x) / 64 < 8  # about 7 rows per bin, as the README says


def _sk(func, *args):  # noqa: ANN001, ANN202 - sklearn warns on ties; we compare masks
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return func(*args)


@pytest.mark.parametrize(("score", "mode", "param", "selector"), [
    ("f_regression", "k", 4, lambda: fs.SelectKBest(fs.f_regression, k=4)),
    ("f_regression", "percentile", 30, lambda: fs.SelectPercentile(fs.f_regression, percentile=30)),
    ("f_regression", "fpr", 1e-6, lambda: fs.SelectFpr(fs.f_regression, alpha=1e-6)),
    ("f_regression", "fdr", 1e-6, lambda: fs.SelectFdr(fs.f_regression, alpha=1e-6)),
    ("f_regression", "fwe", 1e-6, lambda: fs.SelectFwe(fs.f_regression, alpha=1e-6)),
    ("r_regression", "k", 3, lambda: fs.SelectKBest(fs.r_regression, k=3)),
])
def test_select_with_a_target_matches_sklearn_selectors(diabetes_store, score, mode, param, selector) -> None:
    store, x, y = diabetes_store
    s = _describe(*_open(store, 128), stats=("moments",))
    sel = db.select(s, score=score, mode=mode, param=param)
    np.testing.assert_array_equal(sel.selected, _sk(lambda: selector().fit(x, y).get_support()))


def test_select_mi_with_a_target_keeps_the_best_binned_mi(diabetes_store) -> None:
    store, _, _ = diabetes_store
    s = _describe(*_open(store, 128), bins=16)
    assert s.class_count is None and s.target_comoment is not None  # no class moments from a target
    sel = db.select(s, score="mi", mode="k", param=3)
    assert set(np.flatnonzero(sel.selected)) == _top(s.mi, 3)
    with pytest.raises(ValueError, match="^score 'f' needs per-class moments"):
        db.select(s, score="f")


def test_target_summary_saves_and_merges(tmp_path: Path, regression_store) -> None:
    store, x, y, _ = regression_store
    xs, ys = _open(store, 250)
    whole = _describe(xs, ys, stats=("moments",))
    first = _describe(xs[:1250], ys[:1250], stats=("moments",))
    second = _describe(xs[1250:], ys[1250:], stats=("moments",))
    merged = db.merge(first, second)
    for name in ("target_count", "target_mean", "target_m2", "target_x_m2", "target_comoment"):
        np.testing.assert_allclose(getattr(merged, name), getattr(whole, name), rtol=1e-12, err_msg=name)
    s = _describe(xs, ys, bins=16, stats=("moments", "hist", "mi"))
    loaded = db.load_summary(s.save(tmp_path / "s.zarr"))
    np.testing.assert_array_equal(loaded.target_comoment, s.target_comoment)
    np.testing.assert_array_equal(loaded.target_count, s.target_count)
    assert loaded.provenance["target"]["cuts"] == s.provenance["target"]["cuts"]
    np.testing.assert_array_equal(db.select(loaded, score="f_regression", param=3).selected,
                                  db.select(s, score="f_regression", param=3).selected)


def test_target_refusals(diabetes_store) -> None:
    store, x, y = diabetes_store
    xs, ys = _open(store, 128)
    with pytest.raises(TypeError, match="continuous target goes in target="):
        db.describe(xs, ys, run=db.RunOptions(plan=None))
    with pytest.raises(ValueError, match=r"^label= with target= is not supported .*: describe the classes and the target in two runs, [^\n]*\)$"):
        db.describe(xs, (ys > 150).astype(int), target=ys, run=db.RunOptions(plan=None))
    with pytest.raises(ValueError, match=r"^target has shape \(441,\); expected \(442,\)"):
        db.describe(xs, target=ys[:-1], run=db.RunOptions(plan=None))
    with pytest.raises(ValueError, match="^statistic 'class_moments' needs a class label"):
        db.describe(xs, target=ys, stats=("moments", "class_moments"), run=db.RunOptions(plan=None))
    bad = y.copy()
    bad[300] = np.nan
    # xs is in the store's own 128-row chunks, so it is read in the store path's blocks (all 442 rows in one).
    with pytest.raises(ValueError, match=r"target holds 1 non-finite value\(s\) in a chunk of 442 rows .* at its row 300\)"):
        _describe(xs, da.from_array(bad, chunks=128), stats=("moments",))
    s = db.describe(xs, (ys > 150).astype(int), run=db.RunOptions(plan=None))
    with pytest.raises(ValueError, match=r"^score 'f_regression' needs a continuous target: describe\(x, target=y\)$"):
        db.select(s, score="f_regression")


def test_cli_describe_target_then_select_f_regression(tmp_path: Path, diabetes_store) -> None:
    store, x, y = diabetes_store
    out = tmp_path / "s.zarr"
    runner = CliRunner()
    done = runner.invoke(main, ["describe", store, "--target", "y", "--stats", "moments", "--cluster", "threads",
                                "--out", str(out)])
    assert done.exit_code == 0, done.output
    picked = runner.invoke(main, ["select", str(out), "--score", "f_regression", "--k", "4"])
    assert picked.exit_code == 0, picked.output
    expected = fs.SelectKBest(fs.f_regression, k=4).fit(x, y).get_support()
    assert "4 of 10 features selected by f_regression" in picked.output
    names = [f"f{i}" for i in np.flatnonzero(expected)]
    assert all(name in picked.output for name in names)


def test_update_counts_the_new_rows_in_the_summary_s_target_bins(regression_store) -> None:
    store, x, y, _ = regression_store
    xs, ys = _open(store, 500)
    s = _describe(xs[:2000], ys[:2000], bins=16, stats=("moments", "hist", "mi"))
    with dask.config.set(scheduler="threads", num_workers=2):
        updated = db.update(s, xs[2000:], target=ys[2000:], run=db.RunOptions(plan=None))
    cuts = s.provenance["target"]["cuts"]
    ranges = np.column_stack([s.arrays.hist_edges[:, 0], s.arrays.hist_edges[:, -1]])
    # the same bins given: one pass over all the rows
    whole = _describe(xs, ys, bins=16, stats=("moments", "hist", db.stats.MutualInformation(target_bins=cuts)), range=ranges)
    assert whole.provenance["passes"] == 1 and whole.provenance["target"]["cuts"] == cuts
    np.testing.assert_array_equal(updated.joint_counts, whole.joint_counts)
    np.testing.assert_allclose(updated.mi, whole.mi, rtol=1e-13)
    np.testing.assert_allclose(updated.target_comoment, whole.target_comoment, rtol=1e-12)
    with pytest.raises(ValueError, match="strictly increasing"):
        _describe(xs, ys, stats=("moments", "hist", db.stats.MutualInformation(target_bins=[1.0, 1.0])))


def test_target_by_name_in_the_store(diabetes_store) -> None:
    """``target="y"`` reads the store's array, as ``label=`` and ``weights=`` do; with arrays a name is refused."""
    store, x, y = diabetes_store
    with dask.config.set(scheduler="threads", num_workers=2):
        by_name = db.describe(store, target="y", stats=("moments",), run=db.RunOptions(plan=None))
    np.testing.assert_allclose(selection._f_regression(by_name)[0], fs.f_regression(x, y)[0], rtol=1e-10, atol=0)
    assert by_name.provenance["target"]["dtype"] == "float64"
    with pytest.raises(TypeError, match="target 'y' is a name, and a target name needs x to be a store path"):
        db.describe(x, target="y", stats=("moments",))
    with pytest.raises(db.DataError, match="target array .nope. not found"):  # an array the store lacks is named
        db.describe(store, target="nope", stats=("moments",))


def test_accumulator_with_a_target_equals_describe() -> None:
    """``Accumulator(target=True)`` streams a continuous target as each batch's label: describe(target=...)'s bits."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 4))
    t = 2.0 * x[:, 0] + rng.normal(size=300)
    s = db.describe(da.from_array(x, chunks=(50, -1)), target=da.from_array(t, chunks=50), stats=("moments",),
                    run=db.RunOptions(plan=None, split_every=64))
    acc = db.Accumulator(stats=("moments",), target=True)
    for lo in range(0, 300, 50):
        acc.update(x[lo:lo + 50], t[lo:lo + 50])
    a = acc.summary()
    assert a.provenance["target"] == s.provenance["target"]
    for name in ("mean", "var", "target_count", "target_mean", "target_m2", "target_x_m2", "target_comoment"):
        np.testing.assert_array_equal(getattr(a, name), getattr(s, name), err_msg=name)
    with pytest.raises(ValueError, match="quantile cuts, which a stream read once cannot find"):
        db.Accumulator(stats=("moments", "mi"), range=(0.0, 1.0), target=True)


@pytest.mark.parametrize("given", ["target_mi", "target", "groups"])
def test_plan_describe_plans_what_describe_runs_with_a_target_or_groups(given: str) -> None:
    """plan_describe counts the target's statistics (co-moments, sketch, its bins) and the statistics by group."""
    from daskbatch.engine.planner import plan_describe

    rng = np.random.default_rng(0)
    x, t, g = rng.normal(size=(20000, 50)), rng.normal(size=20000), rng.integers(0, 7, 20000)
    kw = {"target_mi": {"target": t, "stats": ("moments", "mi")}, "target": {"target": t, "stats": ("moments",)},
          "groups": {"groups": g, "stats": ("moments", "hist"), "classes": list(range(7))}}[given]
    resources = db.Resources(memory_bytes=4 * 2**30, threads_per_worker=2)
    planned = plan_describe(x, resources=resources, range=(-5.0, 5.0), **kw)
    ran = db.describe(x, run=db.RunOptions(plan=resources), range=(-5.0, 5.0), **kw).provenance["plan"]
    assert (planned.task_bytes, planned.n_classes) == (ran["task_bytes"], ran["n_classes"])
    assert planned.task_bytes > plan_describe(x, resources=resources, stats=("moments",)).task_bytes
