"""A user's own statistic runs through describe, the Accumulator, checkpoints and the planner."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from dask.sizeof import sizeof

import daskbatch as db
from daskbatch.engine.checkpoint import read_runs


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

    s = db.describe(da.from_array(data, chunks=(300, -1)), stats=["moments", L1Norm()], run=db.RunOptions(split_every=3))
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
    first = db.describe(x, stats=[L1Norm()], run=db.RunOptions(split_every=2, plan=None, checkpoint=tmp_path))
    again = db.describe(x, stats=[L1Norm()], run=db.RunOptions(split_every=2, plan=None, checkpoint=tmp_path))
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
        db.describe(data, stats=["moments", object()], run=db.RunOptions(plan=None))

    @dataclass(frozen=True)
    class Clash(L1Norm):
        name = "cov"

    with pytest.raises(ValueError, match="other than the built-in"):
        db.describe(data, stats=[Clash()], run=db.RunOptions(plan=None))
    with pytest.raises(ValueError, match="two statistics are named 'l1'"):
        db.describe(data, stats=[L1Norm(), L1Norm()], run=db.RunOptions(plan=None))


# A statistic that reads the label: per-class row counts, (K,) with K fixed.
@dataclass(frozen=True)
class CountState(db.State):
    n: np.ndarray


@dataclass(frozen=True)
class ClassRows:
    name = "class_rows"
    needs_label = True
    k: int = 3

    def chunk(self, x, label=None):
        assert label is not None, "a statistic with needs_label=True must receive the label"
        return CountState(np.bincount(np.asarray(label), minlength=self.k).astype(np.int64))

    def merge(self, a, b):
        return CountState(a.n + b.n)

    def finalize(self, s):
        return s.n


@dataclass(frozen=True)
class SeesNoLabel:
    name = "no_label"

    def chunk(self, x, label=None):
        assert label is None, "a statistic without needs_label must see label=None"
        return CountState(np.asarray([np.asarray(x).shape[0]], dtype=np.int64))

    def merge(self, a, b):
        return CountState(a.n + b.n)

    def finalize(self, s):
        return s.n


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("user") / "data.zarr")
    db.synth(path, rows=3000, features=4, classes=3, chunk_rows=500, dtype="float64", seed=5)
    return path


def _store_arrays(path: str) -> tuple[np.ndarray, np.ndarray]:
    ds = db.open_dataset(path)
    return np.asarray(ds.x.compute(), dtype=np.float64), np.asarray(ds.label.compute())


def test_needs_label_gives_chunk_the_label_and_others_none(store: str) -> None:
    x, y = _store_arrays(store)
    s = db.describe(store, stats=["moments", "mi", ClassRows(), SeesNoLabel()], run=db.RunOptions(plan=None))
    np.testing.assert_array_equal(s.extra["class_rows"], np.bincount(y, minlength=3))
    np.testing.assert_array_equal(s.extra["no_label"], [x.shape[0]])


def test_merge_and_update_keep_a_users_statistic(store: str) -> None:
    import dask.array as da

    x, y = _store_arrays(store)
    whole = db.describe(x, stats=["moments", L1Norm()], run=db.RunOptions(plan=None))
    a = db.describe(x[:1000], stats=["moments", L1Norm()], run=db.RunOptions(plan=None))
    b = db.describe(da.from_array(x[1000:], chunks=(700, -1)), stats=["moments", L1Norm()], run=db.RunOptions(plan=None))
    merged = db.merge(a, b)
    np.testing.assert_allclose(merged.extra["l1"], np.nansum(np.abs(x), axis=0), rtol=1e-13)
    np.testing.assert_allclose(merged.extra["l1"], whole.extra["l1"], rtol=1e-13)
    updated = db.update(a, x[1000:])
    np.testing.assert_allclose(updated.extra["l1"], whole.extra["l1"], rtol=1e-13)
    assert updated.provenance["user_statistics"] == ["l1"]
    # a labelled user statistic makes update ask for the label
    c = db.describe(x[:1000], y[:1000], stats=["moments", ClassRows()], run=db.RunOptions(plan=None))
    with pytest.raises(ValueError, match="statistic 'class_rows'"):
        db.update(c, x[1000:])
    np.testing.assert_array_equal(db.update(c, x[1000:], y[1000:]).extra["class_rows"], np.bincount(y, minlength=3))


class PlainTotal:
    """A statistic that is a plain class (no dataclass, no __eq__): two instances with the same attributes merge."""

    name = "plain_total"

    def __init__(self, scale=1.0):
        self.scale = scale

    def chunk(self, x, label=None):
        return L1State(self.scale * np.nansum(np.asarray(x, dtype=np.float64), axis=0))

    def merge(self, a, b):
        return L1State(a.total + b.total)

    def finalize(self, s):
        return s.total


def test_plain_class_statistics_merge_by_their_attributes(data: np.ndarray) -> None:
    a = db.describe(data[:100], stats=["moments", PlainTotal()], run=db.RunOptions(plan=None))
    b = db.describe(data[100:], stats=["moments", PlainTotal()], run=db.RunOptions(plan=None))
    np.testing.assert_allclose(db.merge(a, b).extra["plain_total"], np.nansum(data, axis=0), rtol=1e-12)
    with pytest.raises(ValueError, match="'plain_total' statistics differ"):
        db.merge(a, db.describe(data[100:], stats=["moments", PlainTotal(2.0)], run=db.RunOptions(plan=None)))


def test_a_plain_class_statistic_loads_with_a_new_instance(tmp_path, data: np.ndarray) -> None:
    s = db.describe(data, stats=["moments", PlainTotal(3.0)], run=db.RunOptions(plan=None))
    back = db.load_summary(s.save(tmp_path / "s.zarr"), statistics=[PlainTotal(3.0)])
    np.testing.assert_array_equal(back.extra["plain_total"], s.extra["plain_total"])
    with pytest.raises(db.DataError, match="'scale', 3.0.*'scale', 1.0"):
        db.load_summary(tmp_path / "s.zarr", statistics=[PlainTotal()])


def test_merge_refuses_different_parameters(data: np.ndarray) -> None:
    a = db.describe(data[:100], data[:100, 0] > 0, stats=["moments", ClassRows(k=3)], run=db.RunOptions(plan=None))
    b = db.describe(data[100:], data[100:, 0] > 0, stats=["moments", ClassRows(k=4)], run=db.RunOptions(plan=None))
    with pytest.raises(ValueError, match="'class_rows' statistics differ"):
        db.merge(a, b)


def test_results_are_in_to_xarray_and_to_dataframe(data: np.ndarray) -> None:
    s = db.describe(data, stats=["moments", L1Norm()], run=db.RunOptions(plan=None))
    want = np.nansum(np.abs(data), axis=0)
    ds = s.to_xarray()
    assert ds["l1"].dims == ("feature",)
    np.testing.assert_allclose(ds["l1"].values, want, rtol=1e-12)
    np.testing.assert_allclose(s.to_dataframe()["l1"].to_numpy(), want, rtol=1e-12)
    np.testing.assert_allclose(db.Summary.from_xarray(ds).extra["l1"], want, rtol=1e-12)


def test_save_and_load_keep_results_and_states_exactly(tmp_path, store: str) -> None:
    x, y = _store_arrays(store)
    s = db.describe(store, stats=["moments", ClassRows(), L1Norm()], run=db.RunOptions(plan=None))
    s.save(tmp_path / "s.zarr")
    # without the statistics: their results as saved, but no state to continue from
    plain = db.load_summary(tmp_path / "s.zarr")
    np.testing.assert_array_equal(plain.extra["l1"], s.extra["l1"])
    np.testing.assert_array_equal(plain.extra["class_rows"], s.extra["class_rows"])
    assert "l1" not in (plain.states or {})
    with pytest.raises(ValueError, match="loaded without the state of statistic"):
        db.merge(plain, s)
    # with them: states bitwise, and the summary merges like the original
    back = db.load_summary(tmp_path / "s.zarr", statistics=[L1Norm(), ClassRows()])
    np.testing.assert_array_equal(back.states["l1"].state.total, s.states["l1"].state.total)
    np.testing.assert_array_equal(back.extra["class_rows"], np.bincount(y, minlength=3))
    with pytest.raises(ValueError, match="already in the summary"):  # the same rows twice would count them twice
        db.merge(back, s)
    other_path = str(tmp_path / "other.zarr")
    other = db.synth(other_path, rows=1000, features=4, classes=3, chunk_rows=500, dtype="float64", seed=6)
    more = db.describe(other_path, stats=["moments", ClassRows(), L1Norm()], run=db.RunOptions(plan=None))
    both = db.merge(back, more)
    x_other = np.asarray(other.x)
    np.testing.assert_allclose(both.extra["l1"], np.nansum(np.abs(x), axis=0) + np.nansum(np.abs(x_other), axis=0),
                               rtol=1e-13)
    # a statistic with other parameters is refused, naming both
    with pytest.raises(db.DataError, match=r"ClassRows\(k=3\).*ClassRows\(k=5\)"):
        db.load_summary(tmp_path / "s.zarr", statistics=[ClassRows(k=5)])


def test_loading_never_imports_what_the_file_names(tmp_path, monkeypatch, data: np.ndarray) -> None:
    import sys

    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "secret_stats.py").write_text(_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path / "lib"))
    import secret_stats  # the user's own code imports its statistic; a name never does

    s = db.describe(data, stats=["moments", secret_stats.Total()], run=db.RunOptions(plan=None))
    s.save(tmp_path / "s.zarr")
    saved = next(p for p in (tmp_path / "s.zarr" / "states" / "total").iterdir() if p.name == "zarr.json")
    assert "secret_stats:Total" in saved.read_text()
    monkeypatch.delitem(sys.modules, "secret_stats")
    back = db.load_summary(tmp_path / "s.zarr")
    assert "secret_stats" not in sys.modules
    np.testing.assert_allclose(back.extra["total"], np.nansum(data, axis=0), rtol=1e-12)


_MODULE = """
from dataclasses import dataclass
import numpy as np
import daskbatch as db

@dataclass(frozen=True)
class TotalState(db.State):
    total: np.ndarray

@dataclass(frozen=True)
class Total:
    name = "total"
    def chunk(self, x, label=None):
        return TotalState(np.nansum(np.asarray(x, dtype=np.float64), axis=0))
    def merge(self, a, b):
        return TotalState(a.total + b.total)
    def finalize(self, s):
        return s.total
"""


def _install_entry_point(lib, module: str) -> None:
    """An installed package ``mystats`` whose ``daskbatch.statistics`` entry point names ``total``."""
    (lib / "mystats-1.0.dist-info").mkdir(parents=True)
    (lib / f"{module}.py").write_text(_MODULE)
    (lib / "mystats-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: mystats\nVersion: 1.0\n")
    (lib / "mystats-1.0.dist-info" / "entry_points.txt").write_text(f"[daskbatch.statistics]\ntotal = {module}:Total\n")


def test_the_cli_names_a_registered_statistic(tmp_path, monkeypatch, store: str) -> None:
    import json

    from click.testing import CliRunner

    from daskbatch.cli import main

    x, _ = _store_arrays(store)
    _install_entry_point(tmp_path / "lib", "cli_stats")
    monkeypatch.syspath_prepend(str(tmp_path / "lib"))
    result = CliRunner().invoke(main, [
        "describe", store, "--stats", "moments,total", "--json", "-", "--no-progress",
        "--cluster", "threads", "-q",
    ])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    np.testing.assert_allclose(out["user_statistics"]["total"], x.sum(axis=0), rtol=1e-12)
    # an import path is no name: nothing is imported
    bad = CliRunner().invoke(main, ["describe", store, "--stats", "moments,cli_stats:Total", "--cluster", "threads"])
    assert bad.exit_code == 2 and "unknown statistic 'cli_stats:Total'" in bad.output


def test_an_entry_point_registers_a_name(tmp_path, monkeypatch, data: np.ndarray) -> None:
    lib = tmp_path / "lib"
    _install_entry_point(lib, "ep_stats")
    monkeypatch.syspath_prepend(str(lib))
    s = db.describe(data, stats="moments,total", run=db.RunOptions(plan=None))
    np.testing.assert_allclose(s.extra["total"], np.nansum(data, axis=0), rtol=1e-12)
    with pytest.raises(ValueError, match="daskbatch.statistics"):
        db.describe(data, stats="moments,not_registered", run=db.RunOptions(plan=None))


def test_a_state_that_is_no_dataclass_is_refused_before_saving(tmp_path, data: np.ndarray) -> None:
    @dataclass(frozen=True)
    class DictState:
        name = "dict_state"

        def chunk(self, x, label=None):
            return {"n": np.asarray([len(x)])}

        def merge(self, a, b):
            return {"n": a["n"] + b["n"]}

        def finalize(self, s):
            return s["n"]

    s = db.describe(data, stats=["moments", DictState()], run=db.RunOptions(plan=None))
    with pytest.raises(ValueError, match="'dict_state': its state is a dict"):
        s.save(tmp_path / "s.zarr")
    assert not (tmp_path / "s.zarr").exists()


def test_check_statistic_runs_the_laws_on_a_users_statistic() -> None:
    from daskbatch.testing import check_statistic

    check_statistic(L1Norm(), lambda x: np.nansum(np.abs(x), axis=0), rtol=1e-12, atol=0)
    check_statistic(ClassRows(k=4), lambda x, label: np.bincount(label, minlength=4), exact=True)

    @dataclass(frozen=True)
    class Broken(L1Norm):
        def merge(self, a, b):  # forgets b
            return a

    with pytest.raises(AssertionError, match="test_matches_reference_under_any_chunking"):
        check_statistic(Broken(), lambda x: np.nansum(np.abs(x), axis=0))


def test_a_job_file_names_a_registered_statistic(tmp_path, monkeypatch, store: str) -> None:
    import yaml
    from click.testing import CliRunner

    from daskbatch.cli import main

    x, _ = _store_arrays(store)
    _install_entry_point(tmp_path / "lib", "job_stats")
    monkeypatch.syspath_prepend(str(tmp_path / "lib"))
    job = {"input": {"store": store}, "cluster": {"kind": "threads", "threads": 2}, "memory": "2GiB",
           "statistics": {"stats": "moments,class_moments,total"}, "outputs": {"dir": str(tmp_path / "out")}}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump({"daskbatch": {"job": job}}))
    result = CliRunner().invoke(main, ["run", str(tmp_path / "job.yaml")])
    assert result.exit_code == 0, result.output
    saved = tmp_path / "out" / "summary.zarr"  # outputs.summary, the default name
    np.testing.assert_allclose(db.load_summary(saved).extra["total"], x.sum(axis=0), rtol=1e-12)
