"""describe's one run-control value (RunOptions), the one device vocabulary, and statistics chosen by what they declare."""

from __future__ import annotations

import re

import numpy as np
import pytest

import daskbatch as db
from daskbatch._arguments import checked_device
from daskbatch.describe import new_spelling
from daskbatch.stats.registry import selectable
from daskbatch.stats.spec import HIST, MI, describe_statistics, requested


@pytest.fixture
def xy() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 4))
    return x, (x[:, 0] > 0).astype(np.int64)


def test_run_options_give_the_summary_the_keywords_give(xy: tuple[np.ndarray, np.ndarray]) -> None:
    x, y = xy
    with pytest.warns(DeprecationWarning) as record:
        by_keywords = db.describe(x, y, plan=None, split_every=2, device="cpu")
    assert [str(w.message) for w in record] == [
        f"describe({k}=...) is deprecated and goes in the next release: use run=db.RunOptions({k}=...)"
        for k in ("plan", "split_every")
    ]
    by_run = db.describe(x, y, run=db.RunOptions(plan=None, split_every=2, device="cpu"))
    for name in ("mean", "var", "cov", "hist_counts", "mi"):
        np.testing.assert_array_equal(getattr(by_run, name), getattr(by_keywords, name))
    assert by_run.provenance["split_every"] == 2


def test_a_run_keyword_and_run_together_are_refused(xy: tuple[np.ndarray, np.ndarray]) -> None:
    x, _ = xy
    with pytest.raises(ValueError, match="give device= in run=RunOptions"):
        db.describe(x, run=db.RunOptions(plan=None, device="auto"), device="gpu")
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="give split_every= in run=RunOptions"):
        db.describe(x, run=db.RunOptions(plan=None, split_every=2), split_every=4)
    with pytest.raises(ValueError, match="give device= in run=RunOptions"):  # the default's value is given too
        db.describe(x, run=db.RunOptions(plan=None, device="gpu"), device="cpu")
    both = db.describe(x, run=db.RunOptions(plan=None), device="cpu", progress=False)  # shortcuts fill run's defaults
    assert both.provenance["device"] == "cpu"
    with pytest.raises(TypeError, match="run must be a daskbatch.RunOptions"):
        db.describe(x, run={"plan": None})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^describe\(\) got an unexpected keyword argument 'bin'$"):
        db.describe(x, bin=3)


@pytest.mark.parametrize(("keyword", "value", "new"), [
    ("bias", False, "Moments(bias=...)"), ("nan_policy", "propagate", "Moments(nan_policy=...)"),
    ("mi_base", 2, "MutualInformation(base=...)"), ("miller_madow", True, "MutualInformation(miller_madow=...)"),
    ("force", True, "run=db.RunOptions(force=...)"), ("cache", False, "run=db.RunOptions(cache=...)"),
    ("cov_out", None, "run=db.RunOptions(cov_out=...)"), ("cancel", None, "run=db.RunOptions(cancel=...)"),
])
def test_moved_keywords_warn_with_the_new_spelling_and_still_work(
    xy: tuple[np.ndarray, np.ndarray], keyword: str, value: object, new: str
) -> None:
    x, y = xy
    with pytest.warns(DeprecationWarning, match=rf"^describe\({keyword}=...\) is deprecated .*{re.escape(new)}"):
        old = db.describe(x, y, **{keyword: value})
    respelt = db.describe(x, y, **new_spelling({keyword: value}))
    for name in ("mean", "var", "skew", "cov", "hist_counts", "mi"):
        np.testing.assert_array_equal(getattr(old, name), getattr(respelt, name), strict=True)
    if keyword == "mi_base":  # the spelling changes, not the numbers: bits
        np.testing.assert_allclose(old.mi, db.describe(x, y).mi / np.log(2), rtol=1e-12)


@pytest.mark.parametrize("bad", ["tpu", None, 1, "GPU"])
def test_one_device_vocabulary(bad: object) -> None:
    with pytest.raises(ValueError, match="device must be one of 'auto', 'cpu', 'gpu'; got"):
        checked_device(bad)
    with pytest.raises(ValueError, match="device must be one of"):
        db.RunOptions(device=bad)  # type: ignore[arg-type]


def test_old_device_spellings_warn() -> None:
    with pytest.warns(DeprecationWarning, match="device='auto'"):
        assert db.Accumulator(device=None).device == "auto"  # type: ignore[arg-type]
    with pytest.warns(DeprecationWarning, match="device='auto'"):
        db.plan(np.zeros((100, 2)), stats=("moments",), device=None)


def test_accumulator_on_the_cpu_matches_auto(xy: tuple[np.ndarray, np.ndarray]) -> None:
    x, _ = xy
    a = db.Accumulator(stats=("moments", "cov"), device="cpu").update(x).summary()
    b = db.Accumulator(stats=("moments", "cov")).update(x).summary()
    np.testing.assert_array_equal(a.cov, b.cov)


def test_hist_and_mi_are_two_declarations() -> None:
    assert HIST.statistic is db.stats.Histogram and MI.statistic is db.stats.MutualInformation
    assert HIST != MI and HIST.needs_ranges and MI.needs_ranges and MI.by_label and not HIST.by_label
    assert MI.needs_label and not HIST.needs_label
    assert set(selectable()) == {"moments", "cov", "hist", "mi", "class_moments", "sketch"}
    assert [r.name for r in requested("cov,hist")] == ["moments", "cov", "hist"]
    # without a label: what needs one is left out, and histograms found from the data add the sketch
    assert [r.name for r in describe_statistics(("hist", "mi"), labelled=False)] == ["moments", "hist", "sketch"]
    with pytest.raises(ValueError, match="statistic 'class_moments' needs a label"):
        describe_statistics(("class_moments",), labelled=False)
