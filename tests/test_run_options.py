"""describe's one run-control value (RunOptions), the one device vocabulary, and statistics chosen by what they declare."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import daskbatch as db
from daskbatch._common import checked_device
from daskbatch.stats.registry import selectable
from daskbatch.stats.spec import HIST, MI, describe_statistics, requested


@pytest.fixture
def xy() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 4))
    return x, (x[:, 0] > 0).astype(np.int64)


def test_describe_takes_ten_parameters_and_no_old_keyword(xy: tuple[np.ndarray, np.ndarray]) -> None:
    x, _ = xy
    assert list(inspect.signature(db.describe).parameters) == [
        "x", "label", "stats", "bins", "range", "classes", "weights", "target", "groups", "run"]
    # the keywords that moved (run options, statistic parameters) are refused, each named, with no warning
    for keyword in ("plan", "split_every", "device", "checkpoint", "progress", "ddof", "bias", "mi_base",
                    "feature_names", "missing", "like"):
        with pytest.raises(TypeError, match=rf"unexpected keyword argument '{keyword}'"):
            db.describe(x, **{keyword: None})
    with pytest.raises(TypeError, match="run must be a daskbatch.RunOptions"):
        db.describe(x, run={"plan": None})  # type: ignore[arg-type]


def test_run_options_and_statistic_objects_carry_what_moved(xy: tuple[np.ndarray, np.ndarray]) -> None:
    x, y = xy
    run = db.RunOptions(plan=None, split_every=2, device="cpu", feature_names=["a", "b", "c", "d"])
    s = db.describe(x, y, stats=["moments", "cov", db.Moments(ddof=0, bias=False)], run=run)
    assert s.provenance["split_every"] == 2 and s.feature_names == ("a", "b", "c", "d")
    np.testing.assert_allclose(s.var, x.var(axis=0), rtol=1e-12)  # ddof=0, from the Moments object
    np.testing.assert_allclose(s.cov, np.cov(x, rowvar=False, ddof=0), rtol=1e-10)  # one ddof per run


@pytest.mark.parametrize("bad", ["tpu", None, 1, "GPU"])
def test_one_device_vocabulary(bad: object) -> None:
    with pytest.raises(ValueError, match="device must be one of 'auto', 'cpu', 'gpu'; got"):
        checked_device(bad)
    with pytest.raises(ValueError, match="device must be one of"):
        db.RunOptions(device=bad)  # type: ignore[arg-type]


def test_accumulator_on_the_cpu_matches_auto(xy: tuple[np.ndarray, np.ndarray]) -> None:
    x, _ = xy
    a = db.Accumulator(stats=("moments", "cov"), device="cpu").update(x).summary()
    b = db.Accumulator(stats=("moments", "cov")).update(x).summary()
    np.testing.assert_array_equal(a.cov, b.cov)


def test_hist_and_mi_are_two_declarations() -> None:
    assert HIST.statistic is db.stats.Histogram and MI.statistic is db.stats.MutualInformation
    assert HIST != MI and HIST.needs_ranges and MI.needs_ranges and MI.by_label and not HIST.by_label
    assert MI.needs_label and not HIST.needs_label
    assert set(selectable()) == {"moments", "cov", "spearman", "hist", "mi", "class_moments", "sketch"}
    assert [r.name for r in requested("cov,hist")] == ["moments", "cov", "hist"]
    # without a label: what needs one is left out, and histograms found from the data add the sketch
    assert [r.name for r in describe_statistics(("hist", "mi"), labelled=False)] == ["moments", "hist", "sketch"]
    with pytest.raises(ValueError, match="statistic 'class_moments' needs a label"):
        describe_statistics(("class_moments",), labelled=False)
