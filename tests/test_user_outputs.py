"""User outputs (``to_xarray``, ``to_dataframe``, ``--json``) hold results, quantiles included, not internal states."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest
from click.testing import CliRunner

import daskbatch as db
from daskbatch.cli import main
from daskbatch.summary import DEFAULT_QUANTILES

ROWS, FEATURES = 100_000, 500


@pytest.fixture(scope="module")
def wide(tmp_path_factory) -> tuple[str, db.Summary]:
    """A realistic wide input: 100,000 x 500 float32 (200 MB) with a label, on disk."""
    path = str(tmp_path_factory.mktemp("wide") / "wide.zarr")
    db.synth(path, rows=ROWS, features=FEATURES, classes=3, seed=11)
    return path, db.describe(path)


def test_to_xarray_of_500_features_is_under_a_tenth_of_the_input(wide: tuple[str, db.Summary]) -> None:
    _, s = wide
    input_bytes = ROWS * FEATURES * 4
    ds = s.to_xarray()
    assert ds.nbytes < 0.1 * input_bytes, f"{ds.nbytes / 2**20:.1f} MiB"
    assert "sketch_counts" not in ds and "sketch_extrema" not in ds
    # the quantiles a user reads, through the public Summary.quantile
    np.testing.assert_array_equal(ds["quantile"].values, DEFAULT_QUANTILES)
    np.testing.assert_array_equal(ds["quantiles"].values, s.quantile(list(DEFAULT_QUANTILES)).to_numpy())
    assert ds["quantiles"].dims == ("feature", "quantile")
    # the internal sketch is there only when asked for, and is most of the bytes
    full = s.to_xarray(states=True)
    assert "sketch_counts" in full and full.nbytes > 5 * ds.nbytes


def test_json_holds_quantiles_not_sketch_buckets(wide: tuple[str, db.Summary]) -> None:
    _, s = wide
    text = json.dumps(s.to_json())
    assert len(text) < 0.1 * ROWS * FEATURES * 4, f"{len(text) / 2**20:.1f} MiB"
    payload = json.loads(text)
    assert "sketch_counts" not in payload and payload["quantiles"]["probabilities"] == list(DEFAULT_QUANTILES)
    np.testing.assert_allclose(payload["quantiles"]["values"], s.quantile(list(DEFAULT_QUANTILES)).to_numpy())
    assert "sketch_counts" in s.to_json(states=True)


def test_to_dataframe_has_the_quantile_columns() -> None:
    x = np.random.default_rng(2).standard_normal((5000, 3))
    s = db.describe(x, run=db.RunOptions(plan=None))
    table = s.to_dataframe()
    for column, q in zip(("1%", "5%", "25%", "50%", "75%", "95%", "99%"), DEFAULT_QUANTILES, strict=True):
        np.testing.assert_array_equal(table[column].to_numpy(), s.quantile(q).to_numpy())
        # the sketch's quantiles are within its relative accuracy of the exact ones
        np.testing.assert_allclose(table[column].to_numpy(), np.quantile(x, q, axis=0, method="inverted_cdf"),
                                   rtol=0.02, atol=1e-3)


def test_save_and_load_round_trip_is_exact(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "d.zarr")
    db.synth(path, rows=20_000, features=6, classes=3, chunk_rows=4096, seed=4)
    s = db.describe(path)
    back = db.load_summary(s.save(tmp_path / "s.zarr"))
    for name in ("mean", "var", "cov", "hist_counts", "joint_counts", "mi", "sketch_counts", "sketch_extrema"):
        np.testing.assert_array_equal(getattr(back, name), getattr(s, name), err_msg=name)
    for q in (0.3, [0.001, 0.5, 0.999]):
        np.testing.assert_array_equal(np.asarray(back.quantile(q)), np.asarray(s.quantile(q)))
    for k in s.states:
        assert back.states is not None and k in back.states


def test_cli_json_to_stdout_has_quantiles_and_no_buckets(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "d.zarr")
    db.synth(path, rows=5_000, features=4, classes=2, chunk_rows=1024, seed=9)
    result = CliRunner().invoke(main, ["describe", path, "--json", "-", "--no-progress", "--cluster", "threads", "-q"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert "sketch_counts" not in payload and len(payload["quantiles"]["values"]) == 4
    want = db.describe(path).quantile(list(DEFAULT_QUANTILES)).to_numpy()
    np.testing.assert_allclose(payload["quantiles"]["values"], want, rtol=0, atol=0)
