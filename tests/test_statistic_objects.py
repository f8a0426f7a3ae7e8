"""Statistic objects carry their parameters: describe, plan_describe and Accumulator give bitwise what the keywords give."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import daskbatch as db
from daskbatch.engine.checkpoint_files import spec_items
from daskbatch.engine.planner import plan_describe
from daskbatch.stats import Bundle, ClassMoments, CoMoments, Histogram, Moments, MutualInformation
from daskbatch.stats.registry import statistic_from_params, statistic_params
from daskbatch.stats.spec import configured
from daskbatch.testing import assert_states_equal

#: Provenance entries that record the statistics' parameters (the rest is timing and dates).
RECORDED = ("stats", "ddof", "bias", "nan_policy", "bins", "miller_madow", "range", "range_given", "classes_from")


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(19)
    x = rng.standard_t(4, size=(600, 5))
    x[::37, 2] = np.nan  # NaN values: nan_policy matters
    label = rng.choice([2, 5, 9], size=600)
    target = x[:, 0] * 0.5 + rng.normal(size=600)
    return x, label, target


def assert_same_summary(a: db.Summary, b: db.Summary) -> None:
    """Every result, kept state and recorded parameter of ``a`` equals ``b``'s, bitwise."""
    xa, xb = a.to_xarray(), b.to_xarray()
    assert set(xa.data_vars) == set(xb.data_vars)
    for name in xa.data_vars:
        np.testing.assert_array_equal(xa[name].values, xb[name].values, err_msg=name, strict=True)
    assert (a.states is None) == (b.states is None)
    if a.states is not None and b.states is not None:
        assert a.states.keys() == b.states.keys()
        for name, kept in a.states.items():
            assert kept.statistic == b.states[name].statistic, name
            assert_states_equal(kept.state, b.states[name].state)
    for key in RECORDED:
        assert a.provenance.get(key) == b.provenance.get(key), key


# describe's shortcuts (bins, range, classes) or configured's, and the same parameters carried by statistic objects
CASES: list[tuple[dict[str, Any], list[Any]]] = [
    ({"ddof": 0}, [Moments(ddof=0), CoMoments(ddof=0), "hist", "mi", ClassMoments(ddof=0)]),
    ({"ddof": 3}, [Moments(ddof=3), "cov", "hist", "mi", "class_moments"]),
    ({"bias": False}, [Moments(bias=False), "cov", "hist", "mi", "class_moments"]),
    ({"nan_policy": "propagate"}, [Moments(nan_policy="propagate"), "cov", "hist", "mi", "class_moments"]),
    ({"bins": 32}, ["moments", "cov", Histogram(bins=32), "mi", "class_moments"]),
    ({"bins": 8}, ["moments", "cov", "hist", MutualInformation(bins=8), "class_moments"]),
    ({"range": "minmax"}, ["moments", "cov", Histogram(range="minmax"), "mi", "class_moments"]),
    ({"range": (-9.0, 9.0)}, ["moments", "cov", Histogram(range=(-9.0, 9.0)), "mi", "class_moments"]),
    ({"range": [(-10.0, 10.0)] * 5}, ["moments", MutualInformation(range=np.array([(-10.0, 10.0)] * 5)), "hist"]),
    ({"range": (-9.0, 9.0)}, ["moments", Histogram(lo=(-9.0,) * 5, hi=(9.0,) * 5), "mi"]),
    ({"classes": [2, 5, 9, 11]}, ["moments", "cov", "hist", MutualInformation(classes=(2, 5, 9, 11)),
                                  "class_moments"]),
    ({"classes": [2, 5, 9]}, ["moments", ClassMoments(classes=(2, 5, 9)), "mi"]),
    ({"mi_base": 2}, ["moments", "cov", "hist", MutualInformation(base=2), "class_moments"]),
    ({"miller_madow": True}, ["moments", "cov", "hist", MutualInformation(miller_madow=True), "class_moments"]),
    ({"ddof": 0, "bins": 32, "range": "minmax", "mi_base": 2, "miller_madow": True},
     [Moments(ddof=0), Histogram(bins=32, range="minmax"), MutualInformation(base=2, miller_madow=True), "cov"]),
]


@pytest.mark.parametrize(("keywords", "objects"), CASES, ids=lambda v: repr(v)[:40])
def test_objects_give_what_the_keywords_give(data: Any, keywords: dict[str, Any], objects: list[Any]) -> None:
    x, label, _ = data
    names = [s if isinstance(s, str) else s.name for s in objects]
    if set(keywords) <= {"bins", "range", "classes"}:  # describe's own shortcuts
        assert_same_summary(db.describe(x, label, stats=objects), db.describe(x, label, stats=names, **keywords))
    else:  # the other parameters are the objects' own: the one builder configures the same statistics
        shortcuts = {("base" if k == "mi_base" else k): v for k, v in keywords.items()}
        assert configured(objects).wanted == configured(names, **shortcuts).wanted


@pytest.mark.parametrize("target_bins", [4, (-1.0, 0.0, 1.5)])
def test_target_bins_on_the_mutual_information(data: Any, target_bins: Any) -> None:
    x, _, target = data
    by_object = db.describe(x, target=target, stats=["moments", "hist", MutualInformation(target_bins=target_bins)])
    by_keyword = db.describe(x, target=target, stats=["moments", "hist", "mi", db.stats.MutualInformation(target_bins=target_bins)])
    assert_same_summary(by_object, by_keyword)
    assert by_object.provenance["target"] == by_keyword.provenance["target"]


def test_the_example_of_the_issue(data: Any) -> None:
    x, label, _ = data
    got = db.describe(x, label, stats=[Moments(ddof=0), Histogram(bins=32, range="minmax"),
                                       MutualInformation(base=2, miller_madow=True), "cov"])
    assert got.provenance["stats"] == ["moments", "hist", "mi", "cov"]
    assert got.provenance["ddof"] == 0 and got.provenance["bins"] == 32 and got.provenance["miller_madow"]
    np.testing.assert_allclose(got.var, np.nanvar(x, axis=0), rtol=1e-12)  # ddof 0 (NaN left out)
    np.testing.assert_allclose(got.cov, np.cov(x[~np.isnan(x).any(axis=1)], rowvar=False, ddof=0), rtol=1e-10)
    nats = db.describe(x, label, stats=[Moments(ddof=0), Histogram(bins=32, range="minmax"),
                                        MutualInformation(miller_madow=True), "cov"])
    np.testing.assert_allclose(got.mi, nats.mi / np.log(2.0), rtol=1e-12)  # base 2: bits


def test_a_named_statistic_takes_its_shared_parameters_from_an_object(data: Any) -> None:
    x, label, _ = data
    got = db.describe(x, label, stats=[Moments(ddof=0), "cov", Histogram(bins=16), "mi"])
    assert got.provenance["ddof"] == 0 and got.states is not None
    assert got.states["cov"].statistic == CoMoments(ddof=0)
    assert got.hist_counts.shape[1] == 16


@pytest.mark.parametrize(("stats", "keywords", "message"), [
    ([Moments(ddof=0)], {"ddof": 2}, r"^ddof=2 contradicts Moments\(ddof=0\): give ddof once$"),
    ([Moments(ddof=0), CoMoments(ddof=2)], {}, r"^Moments\(ddof=0\) contradicts CoMoments\(ddof=2\)"),
    ([Histogram(bins=8), MutualInformation(bins=16)], {}, r"^Histogram\(bins=8\) contradicts MutualInformation"),
    ([Histogram(range="minmax")], {"range": (0.0, 1.0)}, r"^range=\(0.0, 1.0\) contradicts Histogram"),
    ([MutualInformation(base=2)], {"base": "e"}, r"^base='e' contradicts MutualInformation\(base=2\)"),
    ([Moments(), Moments(ddof=0)], {}, r"^two Moments statistics"),
    ([Histogram(1, (0.0,), (1.0,), by_label=True)], {}, r"^a Histogram by label is what MutualInformation counts"),
    (["moments"], {"nan_policy": "drop"}, r"^nan_policy must be one of"),
])
def test_contradictions_are_one_line_errors(stats: list[Any], keywords: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        configured(stats, **keywords)
    assert "\n" not in str(info.value)


def test_bad_mutual_information_parameters() -> None:
    with pytest.raises(ValueError, match=r"^base must be 'e' or 2, got 10$"):
        MutualInformation(base=10)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^miller_madow must be True or False"):
        MutualInformation(miller_madow="yes")  # type: ignore[arg-type]


def test_plan_describe_reads_the_objects(data: Any) -> None:
    x, label, _ = data
    by_object = plan_describe(x, label, stats=["moments", Histogram(bins=512), "mi"], resources="auto")
    by_keyword = plan_describe(x, label, stats=["moments", "hist", "mi"], bins=512, resources="auto")
    assert by_object == by_keyword
    assert by_object != plan_describe(x, label, stats=["moments", "hist", "mi"], resources="auto")


def test_accumulator_reads_the_objects(data: Any) -> None:
    x, label, _ = data
    x = np.nan_to_num(x)

    def streamed(**kwargs: Any) -> db.Summary:
        acc = db.Accumulator(**kwargs)
        for rows in np.array_split(np.arange(len(x)), 4):
            acc.update(x[rows], label[rows])
        return acc.summary()

    by_object = streamed(stats=[Moments(ddof=0, bias=False), "cov", Histogram(bins=16, range=(-9.0, 9.0)),
                                MutualInformation(base=2, classes=(2, 5, 9))])
    by_keyword = streamed(stats=["moments", "cov", "hist", "mi"], ddof=0, bias=False, bins=16, range=(-9.0, 9.0),
                          classes=[2, 5, 9])
    np.testing.assert_array_equal(by_object.var, by_keyword.var, strict=True)
    np.testing.assert_array_equal(by_object.hist_counts, by_keyword.hist_counts, strict=True)
    np.testing.assert_allclose(by_object.mi, by_keyword.mi / np.log(2.0), rtol=1e-12)  # base 2 on the object


def test_the_saved_format_of_the_counts_is_unchanged() -> None:
    # A histogram's range is resolved into lo/hi before counting: saved summaries and checkpoint
    # fingerprints do not record it, so files written before MutualInformation existed still load and resume.
    joint = MutualInformation(bins=4, classes=(0, 1)).joint((0.0,), (1.0,), classes=(0, 1))
    assert joint == Histogram(4, (0.0,), (1.0,), by_label=True, classes=(0, 1))
    written_before = {"bins": 4, "lo": [0.0], "hi": [1.0], "by_label": True, "classes": [0, 1], "max_classes": 1000,
                      "target_cuts": None}
    assert statistic_params(joint) == written_before
    assert statistic_from_params("Histogram", written_before) == joint
    assert sorted(k for k in spec_items(Bundle((joint,))) if k.startswith("hist.")) == [
        f"hist.{f}" for f in ("bins", "by_label", "classes", "hi", "lo", "max_classes", "target_cuts", "type")
    ]
