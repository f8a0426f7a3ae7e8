"""A statistic that the user's own code registers by name is usable from stats strings and job mappings.

A name in data never imports anything (test_statistic_names_import_nothing.py); the program that runs
chooses what a name may pick, with ``db.register_statistic``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import daskbatch as db
from daskbatch.jobs import run_job


@dataclass(frozen=True)
class AbsSumState(db.State):
    total: np.ndarray


class AbsSum:
    """The sum of |x| per feature: a small mergeable statistic."""

    name = "abs_sum"

    def chunk(self, x: np.ndarray, label: object = None) -> AbsSumState:
        return AbsSumState(np.nansum(np.abs(np.asarray(x, dtype=np.float64)), axis=0))

    def merge(self, a: AbsSumState, b: AbsSumState) -> AbsSumState:
        return AbsSumState(a.total + b.total)

    def finalize(self, state: AbsSumState) -> np.ndarray:
        return state.total


def test_a_name_registered_in_python_is_used_by_stats_strings_and_run_job(tmp_path: Path) -> None:
    x = np.random.default_rng(0).normal(size=(2000, 3))
    with pytest.raises(ValueError, match="unknown statistic 'abs_sum'"):
        db.describe(x, stats="moments,abs_sum")
    assert db.register_statistic("abs_sum", AbsSum) is AbsSum
    s = db.describe(x, stats="moments,abs_sum")
    np.testing.assert_allclose(s.extra["abs_sum"], np.abs(x).sum(axis=0), rtol=1e-13)

    store = tmp_path / "d.zarr"
    db.synth(store, rows=3000, features=4, classes=2, chunk_rows=1000)
    report = run_job({"daskbatch": {"job": {
        "input": {"store": str(store)}, "cluster": {"kind": "threads", "threads": 2}, "memory": "2GiB",
        "statistics": {"stats": ["moments", "abs_sum"]}, "selection": {"score": "variance"}, "outputs": {"dir": str(tmp_path / "out")},
    }}})
    assert report.status == "ok"
    saved = db.load_summary(tmp_path / "out" / "summary.zarr")
    data = db.open_dataset(store).x.compute().astype(np.float64)
    np.testing.assert_allclose(saved.extra["abs_sum"], np.abs(data).sum(axis=0), rtol=1e-12)


@pytest.mark.parametrize(
    ("name", "statistic", "error", "match"),
    [
        ("os:system", AbsSum, ValueError, "a letter, then letters"),
        ("moments", AbsSum, ValueError, "built-in statistic"),
        ("fine", object, TypeError, "not a statistic"),
        ("fine2", 42, TypeError, "not a statistic"),
    ],
)
def test_register_statistic_refuses_bad_names_and_non_statistics(
    name: str, statistic: object, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        db.register_statistic(name, statistic)
