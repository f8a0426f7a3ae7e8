"""Adding a built-in statistic is one module plus one registry line (issue 31).

The module below is what a contributor writes for a running count of zeros per
feature: its state, chunk/merge/finalize and its declaration. The test writes
it into a temporary package and registers its declaration the way the table in
``daskbatch/stats/registry.py`` lists the built-ins; then the statistic is
everywhere a built-in is: ``describe`` and ``s.zeros``, ``to_xarray``,
save/load, ``db.merge`` and ``db.update``, the CLI's ``--stats`` and a
checkpointed run.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import zarr

import daskbatch as db
from daskbatch.stats.registry import STATISTICS, register

ZEROS_MODULE = '''
"""A running count of zeros per feature."""

from dataclasses import dataclass

import numpy as np

from daskbatch.stats import State
from daskbatch.stats.declaration import Declaration, Footprint, count


@dataclass
class ZerosState(State):
    zeros: np.ndarray


@dataclass(frozen=True)
class Zeros:
    name = "zeros"

    def chunk(self, x, label=None):
        return ZerosState(np.asarray((np.asarray(x) == 0).sum(axis=0), dtype=np.int64))

    def merge(self, a, b):
        return ZerosState(a.zeros + b.zeros)

    def finalize(self, state):
        return state.zeros


DECLARATION = Declaration(
    "zeros", Zeros, states=(ZerosState,), fused=False,
    footprint=Footprint("zeros", state=lambda d, bins, k, tile: 8 * d),
    variables={"zeros": count(("feature",), "number of zeros")},
)
'''


def _write_package(root: Path) -> None:
    """The contributor's one new module, in a package of its own."""
    (root / "zeros_pkg").mkdir()
    (root / "zeros_pkg" / "__init__.py").write_text("")
    (root / "zeros_pkg" / "zeros.py").write_text(ZEROS_MODULE)


@pytest.fixture
def zeros(tmp_path_factory: pytest.TempPathFactory):
    """The new statistic's module, registered as the table registers the built-ins; unregistered after."""
    root = tmp_path_factory.mktemp("pkg")
    _write_package(root)
    sys.path.insert(0, str(root))
    try:
        import zeros_pkg.zeros as module  # the one new file

        register(module.DECLARATION)  # the one registry line
        yield module, root
    finally:
        STATISTICS.pop("zeros", None)
        sys.path.remove(str(root))
        for name in ("zeros_pkg.zeros", "zeros_pkg"):
            sys.modules.pop(name, None)


def _data(seed: int, rows: int = 120) -> np.ndarray:
    """Rows with zeros in every feature (a different number in each)."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-2, 3, size=(rows, 4)).astype(np.float64)
    x[:, 3] = 0.0
    return x


def _zeros(x: np.ndarray) -> np.ndarray:
    return (x == 0).sum(axis=0)


def test_describe_serves_the_new_statistic(zeros) -> None:
    x = _data(0)
    s = db.describe(x, stats="moments,zeros")
    np.testing.assert_array_equal(s.zeros, _zeros(x))
    assert "zeros" not in s.extra  # a built-in's variable, not a user's result
    assert type(s.states["zeros"].statistic).__name__ == "Zeros"
    assert db.describe(x, stats="moments").zeros is None  # declared but not computed


def test_to_xarray_and_back(zeros) -> None:
    x = _data(1)
    s = db.describe(x, stats="moments,zeros")
    ds = s.to_xarray()
    assert ds["zeros"].dims == ("feature",) and ds["zeros"].dtype == np.int64
    assert ds["zeros"].attrs == {"long_name": "number of zeros", "units": "1"}
    np.testing.assert_array_equal(db.Summary.from_xarray(ds).zeros, _zeros(x))


def test_save_and_load_keep_the_values_and_the_state(zeros, tmp_path: Path) -> None:
    x = _data(2)
    s = db.describe(x, stats="moments,zeros")
    back = db.load_summary(s.save(tmp_path / "s.zarr"))  # no statistic passed: it is a built-in
    np.testing.assert_array_equal(back.zeros, s.zeros)
    np.testing.assert_array_equal(back.states["zeros"].state.zeros, s.states["zeros"].state.zeros)
    assert (
        zarr.open_group(str(tmp_path / "s.zarr"), mode="r")["states/zeros"].attrs["user"] is False
    )


def test_merge_and_update_add_the_counts(zeros) -> None:
    a, b = _data(3), _data(4, rows=70)
    sa, sb = db.describe(a, stats="moments,zeros"), db.describe(b, stats="moments,zeros")
    both = _zeros(np.concatenate([a, b]))
    np.testing.assert_array_equal(db.merge(sa, sb).zeros, both)
    np.testing.assert_array_equal(db.update(sa, b).zeros, both)


def test_checkpointed_run_counts_the_same(zeros, tmp_path: Path) -> None:
    import dask.array as da

    x = _data(5, rows=200)
    dx = da.from_array(x, chunks=(30, 4))
    run = db.RunOptions(plan=None, checkpoint=str(tmp_path / "ckpt"))
    first = db.describe(dx, stats="moments,zeros", run=run)
    again = db.describe(dx, stats="moments,zeros", run=run)
    np.testing.assert_array_equal(first.zeros, _zeros(x))
    np.testing.assert_array_equal(again.zeros, first.zeros)
    assert any((tmp_path / "ckpt").rglob("*.ckpt"))


def test_cli_stats_takes_the_new_name(zeros, tmp_path: Path) -> None:
    _, root = zeros
    x = _data(6)
    store = tmp_path / "x.zarr"
    zarr.create_array(str(store), data=x, chunks=(40, 4))
    out = tmp_path / "out.json"
    program = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(root)!r})
        import zeros_pkg.zeros as module
        from daskbatch.stats.registry import register
        register(module.DECLARATION)
        from daskbatch.cli import main
        main(["describe", {str(store)!r}, "--stats", "moments,zeros", "--json", {str(out)!r}],
             prog_name="daskbatch")
    """)
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["zeros"] == _zeros(x).tolist()


def test_the_table_is_consistent() -> None:
    """Every declaration's kernel references resolve, its states are registered, its variables are its own."""
    from daskbatch.stats._base import registered_state, state_key

    owners: dict[str, str] = {}
    for name, d in STATISTICS.items():
        assert d.name == name
        for ref in d.kernels:
            module, function = ref.split(":")
            assert callable(getattr(importlib.import_module(module), function)), ref
        for cls in d.states:
            assert registered_state(state_key(cls)) is cls
        for variable in d.variables:
            # ``classes``: the joint tables' class values, or without them the per-class moments'
            assert variable not in owners or variable == "classes", (
                variable,
                owners.get(variable),
                name,
            )
            owners.setdefault(variable, name)
        if d.selectable:
            assert d.statistic is not None and d.footprint is not None, name
    assert [n for n, d in STATISTICS.items() if d.selectable] == [
        "moments",
        "cov",
        "spearman",
        "hist",
        "mi",
        "class_moments",
        "sketch",
    ]


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("moments", "'moments' is declared already"),
        ("a b", "a letter, then letters, digits or '_'; got 'a b'"),
    ],
)
def test_register_refuses_a_taken_or_odd_name(name: str, message: str) -> None:
    from daskbatch.stats.declaration import Declaration

    before = dict(STATISTICS)
    with pytest.raises(ValueError, match=message) as info:
        register(Declaration(name, None))
    assert "\n" not in str(info.value) and STATISTICS == before


@pytest.mark.parametrize("name", ["qhist", "digest", "target_moments"])
def test_engine_only_statistics_cannot_be_asked_for(name: str) -> None:
    with pytest.raises(
        ValueError, match=rf"unknown statistic '{name}'; choose from \['class_moments', 'cov'"
    ):
        db.describe(np.zeros((4, 2)), stats=f"moments,{name}")
