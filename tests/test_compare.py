"""Drift between two summaries (db.compare, describe(like=...), daskbatch compare) against scipy/numpy on real data."""

from __future__ import annotations

import json
import subprocess
import sys

import dask.array as da
import numpy as np
import pytest
import scipy.spatial.distance
import scipy.stats
from click.testing import CliRunner
from sklearn.datasets import load_breast_cancer

import daskbatch as db
from daskbatch.cli import main
from daskbatch.summary.compare import PSI_FLOOR

# The new data reach outside the reference's ranges: that is drift, reported as out_of_range_change.
pytestmark = pytest.mark.filterwarnings("ignore::daskbatch.RangeWarning")
NAMES = tuple(load_breast_cancer().feature_names)


@pytest.fixture(scope="module")
def halves() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """breast_cancer split by class-balanced halves, the second shifted on two features."""
    data = load_breast_cancer()
    x, y = data.data.astype(np.float64), data.target.astype(np.int64)
    order = np.random.default_rng(7).permutation(len(x))
    a, b = order[: len(x) // 2], order[len(x) // 2 :]
    x_new = x[b].copy()
    x_new[:, 3] *= 1.3  # area: a scale change
    x_new[:, 0] += 2.0  # radius: a shift
    return x[a], y[a], x_new, y[b]


def _cells(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Probabilities of [below, bins..., above] for one feature, as numpy counts them."""
    counts, _ = np.histogram(values, bins=edges)
    cells = np.concatenate([[np.sum(values < edges[0])], counts, [np.sum(values > edges[-1])]]).astype(np.float64)
    return cells / cells.sum()


@pytest.mark.parametrize("rows", [569, 64, 100])
def test_compare_matches_numpy_and_scipy(halves, rows: int) -> None:
    x_ref, y_ref, x_new, y_new = halves
    ref = db.describe(da.from_array(x_ref, chunks=(rows, -1)), y_ref, run=db.RunOptions(feature_names=NAMES))
    new = db.describe(da.from_array(x_new, chunks=(rows, -1)), y_new, run=db.RunOptions(like=ref, feature_names=NAMES))
    np.testing.assert_array_equal(ref.hist_edges, new.hist_edges)
    drift = db.compare(ref, new)
    t = drift.to_dataframe()
    assert list(t.index) == list(ref.feature_names) and drift.rows == (len(x_ref), len(x_new))
    np.testing.assert_allclose(t["mean_shift"], (x_new.mean(0) - x_ref.mean(0)) / x_ref.std(0, ddof=1), rtol=1e-12)
    np.testing.assert_allclose(t["var_ratio"], x_new.var(0, ddof=1) / x_ref.var(0, ddof=1), rtol=1e-12)
    for j in range(x_ref.shape[1]):
        p, q = _cells(x_ref[:, j], ref.arrays.hist_edges[j]), _cells(x_new[:, j], ref.arrays.hist_edges[j])
        pf, qf = np.maximum(p, PSI_FLOOR), np.maximum(q, PSI_FLOOR)
        assert t["psi"].iloc[j] == pytest.approx(float(np.sum((qf - pf) * np.log(qf / pf))), rel=1e-12, abs=1e-15)
        js = scipy.spatial.distance.jensenshannon(p, q, base=2) ** 2
        assert t["js_divergence"].iloc[j] == pytest.approx(js, rel=1e-9, abs=1e-12)
        ks = scipy.stats.ks_2samp(x_ref[:, j], x_new[:, j]).statistic
        assert t["ks_lower"].iloc[j] - 1e-12 <= ks <= t["ks_upper"].iloc[j] + 1e-12
    assert t["psi"].idxmax() in ("mean radius", "mean area")
    np.testing.assert_allclose(t["mi_change"], new.mi - ref.mi)


def test_compare_chunking_invariant(halves) -> None:
    x_ref, y_ref, x_new, y_new = halves
    tables = []
    for rows in (569, 37):
        ref = db.describe(da.from_array(x_ref, chunks=(rows, -1)), y_ref, run=db.RunOptions(feature_names=NAMES))
        new = db.describe(da.from_array(x_new, chunks=(rows, 7)), y_new, run=db.RunOptions(like=ref, feature_names=NAMES))
        tables.append(db.compare(ref, new).to_dataframe())
    cols = ["psi", "js_divergence", "ks_lower", "ks_upper", "out_of_range_change", "nan_fraction_change"]
    np.testing.assert_array_equal(tables[0][cols].to_numpy(), tables[1][cols].to_numpy())


def test_identical_data_has_no_drift(halves) -> None:
    x_ref, y_ref, _, _ = halves
    ref = db.describe(x_ref, y_ref, run=db.RunOptions(feature_names=NAMES))
    again = db.describe(da.from_array(x_ref, chunks=(50, -1)), y_ref, run=db.RunOptions(like=ref, feature_names=NAMES))
    t = db.compare(ref, again).to_dataframe()
    assert np.all(t["psi"] == 0) and np.all(t["js_divergence"] == 0) and np.all(t["ks_lower"] == 0)
    np.testing.assert_allclose(t["mean_shift"], 0, atol=1e-12)


def test_compare_refuses_other_features_and_range_with_like(halves) -> None:
    # Other bin edges are rebinned with a warning (tests/test_drift_tests.py), not refused.
    x_ref, y_ref, x_new, y_new = halves
    ref = db.describe(x_ref, y_ref, run=db.RunOptions(feature_names=NAMES))
    with pytest.raises(ValueError, match=r"give range= or RunOptions\(like=...\), not both"):
        db.describe(x_new, y_new, range=(0, 1), run=db.RunOptions(like=ref))
    other = db.describe(x_new[:, :5], y_new, run=db.RunOptions(feature_names=NAMES[:5]))
    with pytest.raises(ValueError, match="different features: 25 name"):
        db.compare(ref, other)


def test_moments_only_summaries_compare_without_histogram_columns() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(1000, 3)), rng.normal(0.5, 2.0, size=(1000, 3))
    t = db.compare(db.describe(a, stats=("moments",)), db.describe(b, stats=("moments",))).to_dataframe()
    assert t["psi"].isna().all() and t["mi_change"].isna().all()
    np.testing.assert_allclose(t["var_ratio"], b.var(0, ddof=1) / a.var(0, ddof=1), rtol=1e-12)


def test_drift_report_and_plot(halves, tmp_path) -> None:
    x_ref, y_ref, x_new, y_new = halves
    ref = db.describe(x_ref, y_ref, run=db.RunOptions(feature_names=NAMES))
    drift = db.compare(ref, db.describe(x_new, y_new, run=db.RunOptions(like=ref, feature_names=NAMES)))
    path = drift.save(tmp_path / "drift.json")
    report = json.loads(open(path).read())
    assert report["rows"] == [len(x_ref), len(x_new)] and set(report["features"]) == set(ref.feature_names)
    (tmp_path / "mine.json").write_text("{}")
    with pytest.raises(FileExistsError, match="mine.json"):
        drift.save(tmp_path / "mine.json")
    assert json.loads((tmp_path / "mine.json").read_text()) == {}
    drift.save(tmp_path / "drift.json")  # an earlier drift report is ours to replace
    fig = drift.plot(k=5)
    fig.savefig(tmp_path / "psi.png")
    assert len(fig.axes[0].patches) == 5 and "Drift" in fig.axes[0].get_title()
    assert "Drift of 30 features" in repr(drift) and "<table" in drift._repr_html_()
    assert not hasattr(drift, "table")  # one name per idea: to_dataframe(), as Summary and Selection


def test_cli_compare(halves, tmp_path) -> None:
    x_ref, y_ref, x_new, y_new = halves
    for name, (x, y) in {"ref": (x_ref, y_ref), "new": (x_new, y_new)}.items():
        import zarr

        g = zarr.open_group(str(tmp_path / f"{name}.zarr"), mode="w")
        g.create_array("X", data=x, chunks=(100, 30), attributes={"feature_names": list(NAMES)})
        g.create_array("y", data=y, chunks=(100,))

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "daskbatch", *args], capture_output=True, text=True, cwd=tmp_path)

    common = ("--label", "y", "--cluster", "threads", "--no-progress")
    assert run("describe", "ref.zarr", *common, "--out", "ref-stats.zarr").returncode == 0
    # Refused (checked below), started now so that it runs beside the next describe.
    refused = subprocess.Popen([sys.executable, "-m", "daskbatch", "describe", "new.zarr", *common, "--like",
                                "ref-stats.zarr", "--range", "0:1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, cwd=tmp_path)
    done = run("describe", "new.zarr", *common, "--like", "ref-stats.zarr", "--out", "new-stats.zarr")
    assert done.returncode == 0, done.stderr
    out = run("compare", "ref-stats.zarr", "new-stats.zarr", "--top", "3", "--json", "drift.json", "--plot", "psi.png")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[3].split("  ")[0] in ("mean radius", "mean area"), out.stdout
    assert (tmp_path / "psi.png").stat().st_size > 0
    assert json.loads((tmp_path / "drift.json").read_text())["daskbatch_output"] == "drift"
    _, stderr = refused.communicate(timeout=300)
    assert refused.returncode == 2 and "--range or --like" in stderr
    # Without --like: compared all the same (284 rows keep every distinct value: rebinned exactly, no warning).
    done = run("describe", "new.zarr", *common, "--out", "own-stats.zarr")
    assert done.returncode == 0, done.stderr
    # In this process (the command's code as above, without four more interpreters' start).
    for by in ("ks_pvalue", "chi2_pvalue", "ks", "wasserstein"):
        ran = CliRunner().invoke(main, ["compare", str(tmp_path / "ref-stats.zarr"), str(tmp_path / "own-stats.zarr"),
                                        "--top", "2", "--by", by])
        assert ran.exit_code == 0, ran.output
        top = {line.split("  ")[0] for line in ran.stdout.splitlines()[3:5]}
        # Wasserstein is in the feature's units: the areas (hundreds) lead it with or without drift.
        assert top == ({"mean area", "worst area"} if by == "wasserstein" else {"mean radius", "mean area"}), by


def test_cli_compare_advises_like_in_its_own_words(tmp_path) -> None:
    """The rebinning warning at the command line names --like, not the API's RunOptions(like=...)."""
    rng = np.random.default_rng(3)
    db.describe(rng.normal(size=(20_000, 2))).save(str(tmp_path / "ref-stats.zarr"))
    db.describe(rng.normal(0.2, 1.5, size=(20_000, 2))).save(str(tmp_path / "new-stats.zarr"))
    out = subprocess.run([sys.executable, "-m", "daskbatch", "compare", "ref-stats.zarr", "new-stats.zarr"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "RebinnedWarning" in out.stderr and "--like REFERENCE makes them exact" in out.stderr, out.stderr
    assert "RunOptions" not in out.stderr


def test_infinities_are_counted_once_in_rows_and_nan_fraction() -> None:
    """``count`` already holds ±inf: the rows and the NaN fraction add only the NaNs to it."""
    rng = np.random.default_rng(7)
    a, b = rng.normal(size=(10, 2)), rng.normal(size=(20, 2))
    a[0, 0], a[1, 0], a[2, 0] = np.inf, -np.inf, np.nan
    b[:4, 1] = np.nan
    drift = db.compare(db.describe(a, stats=("moments",)), db.describe(b, stats=("moments",)))
    assert drift.rows == (10, 20)
    np.testing.assert_allclose(drift.to_dataframe()["nan_fraction_change"].to_numpy(), [0.0 - 0.1, 0.2 - 0.0])
