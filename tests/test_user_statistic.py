"""A user's own statistic runs through describe, the Accumulator, checkpoints and the planner."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from dask.sizeof import sizeof

import daskbatch as db
from daskbatch.engine.checkpoint.run import read_runs


# The README's example, as a user writes it: a mergeable L1 norm per feature.
@dataclass(frozen=True)
class L1State(db.State):
    total: np.ndarray


@dataclass(frozen=True)
class L1Norm:
    name = "l1"

    def chunk(self, x, label=None):
        return L1State(np.nansum(np.abs(np.asarray(x, dtype=np.float64)), axis=0))

    def merge(self, a, b):
        return L1State(a.total + b.total)

    def finalize(self, s):
        return s.total


@pytest.fixture(scope="module")
def data() -> np.ndarray:
    x = np.random.default_rng(3).standard_normal((4000, 5))
    x[7, 2] = np.nan
    return x


def test_describe_runs_a_users_statistic_fused_with_the_built_in_ones(data: np.ndarray) -> None:
    import dask.array as da

    s = db.describe(da.from_array(data, chunks=(300, -1)), stats=["moments", L1Norm()], split_every=3)
    np.testing.assert_allclose(s.extra["l1"], np.nansum(np.abs(data), axis=0), rtol=1e-12)
    np.testing.assert_allclose(s.mean, np.nanmean(data, axis=0), rtol=1e-12)
    assert s.provenance["user_statistics"] == ["l1"]


def test_the_planner_sizes_it_from_its_footprint(data: np.ndarray) -> None:
    fp = db.Footprint(name="l1", state=lambda d, bins, k, tile: d * 8)
    plan = db.plan(data, stats=("moments", fp), resources=db.Resources(2**30))
    assert [getattr(s, "name", s) for s in plan.stats] == ["moments", "l1"]
    assert "l1" in plan.explain() and plan.to_dict()["stats"] == ["moments", "l1"]


def test_checkpoint_resumes_a_users_state_bitwise(tmp_path, data: np.ndarray) -> None:
    import dask.array as da

    x = da.from_array(data, chunks=(250, -1))
    first = db.describe(x, stats=[L1Norm()], checkpoint=tmp_path, split_every=2, plan=None)
    again = db.describe(x, stats=[L1Norm()], checkpoint=tmp_path, split_every=2, plan=None)
    assert read_runs(tmp_path, "moments-l1")[-1]["computed_blocks"] == 0
    np.testing.assert_array_equal(first.extra["l1"], again.extra["l1"])


def test_the_accumulator_takes_it_too(data: np.ndarray) -> None:
    acc = db.Accumulator(stats=["moments", L1Norm()])
    for part in np.array_split(data, 7):
        acc.update(part)
    np.testing.assert_allclose(acc.summary().extra["l1"], np.nansum(np.abs(data), axis=0), rtol=1e-12)


def test_dask_counts_its_state_by_its_arrays() -> None:
    assert sizeof(L1State(np.zeros(1000))) == 8000


def test_bad_statistics_get_one_line_errors(data: np.ndarray) -> None:
    with pytest.raises(TypeError, match="neither a statistic name nor a statistic"):
        db.describe(data, stats=["moments", object()], plan=None)

    @dataclass(frozen=True)
    class Clash(L1Norm):
        name = "cov"

    with pytest.raises(ValueError, match="other than the built-in"):
        db.describe(data, stats=[Clash()], plan=None)
    with pytest.raises(ValueError, match="two statistics are named 'l1'"):
        db.describe(data, stats=[L1Norm(), L1Norm()], plan=None)


def test_a_summary_with_a_users_statistic_saves_the_built_in_states(tmp_path, data: np.ndarray) -> None:
    s = db.describe(data, stats=["moments", L1Norm()], plan=None)
    s.save(tmp_path / "s.zarr")
    back = db.load_summary(tmp_path / "s.zarr")
    np.testing.assert_array_equal(back.mean, s.mean)
    assert back.provenance["user_statistics"] == ["l1"] and "l1" not in back.extra
