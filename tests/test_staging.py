"""Overlapped host-to-GPU transfers: the split of a chunk into parts, the staged chunk task, Accumulator.update_many.

On any machine: the split (pure), the staged statistic's delegation and
checkpoint settings, the ``gpu-transfer`` setting's checks, and
``Accumulator.update_many`` (its CPU path shares the validation and the
all-or-nothing commit with the GPU one). On a CUDA machine
(``@pytest.mark.gpu``): the pinned double buffer against the unpipelined
device path and the CPU path, histogram counts bitwise and moments and
co-moments to 1e-12, through the stager, the staged chunk task, ``describe``
and ``Accumulator``.
"""

from __future__ import annotations

import dataclasses
import functools

import dask
import dask.array as da
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import daskbatch as db
from daskbatch.engine.checkpoint import spec_items
from daskbatch.engine.inputs import as_feature_matrix, to_device
from daskbatch.engine.reduce import Staged, part_rows_for
from daskbatch.stats import Bundle, CoMoments, Histogram, Moments
from daskbatch.stats.kernels.path import split_rows

gpu = pytest.mark.gpu
RANGE = (-4.0, 14.0)


def data(rows: int = 3_000, cols: int = 6, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = (rng.gamma(2.0, 1.5, size=(rows, cols)) + np.arange(cols)).astype(np.float32)
    x[5, 1] = np.nan
    x[9, 2] = np.inf
    y = rng.integers(0, 3, size=rows).astype(np.int32)
    return x, y


def bundle(cols: int, by_label: bool = True) -> Bundle:
    return Bundle((Moments(), CoMoments(), Histogram(16, (RANGE[0],) * cols, (RANGE[1],) * cols, by_label=by_label)))


def host(a):  # noqa: ANN001, ANN201
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)


def assert_states(got: tuple, ref: tuple, rtol: float = 1e-12) -> None:
    """Counts and extrema bitwise; moments and co-moments to ``rtol`` (relative to each field's scale)."""
    import dataclasses

    for g, r in zip(got, ref, strict=True):
        for f in dataclasses.fields(r):
            a, b = host(getattr(g, f.name)), np.asarray(getattr(r, f.name))
            if f.name == "c":  # co-moments: only the upper triangle is the state's (GPU states hold zeros below)
                a, b = np.triu(a), np.triu(b)
            if f.name in ("counts", "n", "nan_count", "posinf_count", "neginf_count", "fmin", "fmax", "shift"):
                np.testing.assert_array_equal(a, b, err_msg=f.name)
            else:
                scale = np.max(np.abs(b[np.isfinite(b)]), initial=0.0)
                np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * scale, err_msg=f.name)


# --- the split ---------------------------------------------------------------------------------


@given(rows=st.integers(0, 10_000), part=st.integers(1, 3_000))
def test_split_rows_covers_in_order_with_near_equal_parts(rows: int, part: int) -> None:
    ranges = split_rows(rows, part)
    assert len(ranges) == -(-rows // part)
    assert [a for a, _ in ranges[1:]] == [b for _, b in ranges[:-1]]  # consecutive
    if ranges:
        assert ranges[0][0] == 0 and ranges[-1][1] == rows
        sizes = [b - a for a, b in ranges]
        assert max(sizes) <= part and max(sizes) - min(sizes) <= 1
    assert split_rows(rows, part) == ranges  # depends on the two numbers only


def test_split_rows_refuses_empty_parts() -> None:
    with pytest.raises(ValueError, match="part_rows must be at least 1"):
        split_rows(10, 0)


def test_part_rows_is_the_staging_bytes_of_input() -> None:
    assert part_rows_for(64, 4, 64 * 2**20) == 262_144
    assert part_rows_for(1_000, 4, 64 * 2**20) == 16_777
    assert part_rows_for(1, 8, 1) == 2  # never zero rows


def test_wide_parts_grow_with_the_co_moments_state() -> None:
    """At D = 5,000 a 64 MiB part (3,355 rows) paid the (D, D) state's work 8 times a 25,000-row block (issue 18, 5)."""
    rows = part_rows_for(5_000, 4, 64 * 2**20)
    assert rows * 5_000 * 4 == 2 * 8 * 5_000**2  # twice the float64 state: 20,000 rows
    assert len(split_rows(25_000, rows)) == 2
    assert part_rows_for(5_000, 8, 64 * 2**20) == 10_000  # float64 input: half the rows


# --- the staged statistic (no GPU needed for these) --------------------------------------------


def test_staged_has_the_statistic_s_face() -> None:
    x, y = data()
    b = bundle(x.shape[1])
    s = Staged(b, 700)
    assert s.name == b.name and s.stats == b.stats
    parts = [b.chunk(x[:1000], y[:1000]), b.chunk(x[1000:], y[1000:])]
    assert_states(s.merge(*parts), b.merge(*parts), rtol=0)
    np.testing.assert_array_equal(s.finalize(parts[0])[2].counts, b.finalize(parts[0])[2].counts)
    with pytest.raises(ValueError, match="part_rows must be at least 1"):
        Staged(b, 0)


def test_staged_hands_device_blocks_to_the_statistic() -> None:
    """Blocks that are not host NumPy arrays are not staged (array_api_strict stands in for CuPy here)."""
    xp = pytest.importorskip("array_api_strict")
    x, _ = data(rows=200)
    b = Bundle((Moments(),))
    got = Staged(b, 7).chunk(xp.asarray(x.astype(np.float64)))
    ref = b.chunk(xp.asarray(x.astype(np.float64)))
    np.testing.assert_array_equal(np.asarray(got[0].mean), np.asarray(ref[0].mean))


def test_checkpoint_spec_records_the_transfer() -> None:
    b = bundle(3)
    plain, staged = spec_items(b), spec_items(Staged(b, 4_096))
    assert staged == {**plain, "gpu transfer": "staged, parts of 4,096 rows"}


def test_gpu_transfer_setting_is_checked() -> None:
    x, _ = data(rows=100)
    fm = as_feature_matrix(x)
    assert to_device(fm, "cpu", transfer="nonsense") is fm  # the CPU path moves nothing
    with pytest.raises(ValueError, match="gpu transfer must be one of block, staged, got 'pinned'"):
        to_device(fm, "gpu", transfer="pinned")
    with dask.config.set({"daskbatch.gpu-transfer": "pinned"}), pytest.raises(ValueError, match="gpu transfer"):
        to_device(fm, "gpu")


# --- Accumulator.update_many ---------------------------------------------------------------------


def test_update_many_equals_update_one_by_one() -> None:
    x, y = data()
    batches = [(x[a:b], y[a:b]) for a, b in split_rows(x.shape[0], 700)]
    one = db.Accumulator(range=RANGE, bins=16)
    for xb, yb in batches:
        one.update(xb, yb)
    many = db.Accumulator(range=RANGE, bins=16).update_many(iter(batches))
    assert (many.rows, many._batches) == (one.rows, one._batches) == (x.shape[0], len(batches))
    assert_states(many._state, one._state, rtol=0)
    plain = db.Accumulator(stats=("moments",)).update_many(xb for xb, _ in batches)  # bare arrays
    np.testing.assert_array_equal(plain.summary().mean, one.summary().mean)


def test_update_many_adds_nothing_when_a_batch_is_bad() -> None:
    x, y = data()
    acc = db.Accumulator(range=RANGE, bins=16).update(x[:100], y[:100])
    before = (acc.rows, acc._batches, acc.summary().mean.copy())
    with pytest.raises(ValueError, match="batch 3 has 5 features; earlier batches had 6"):
        acc.update_many([(x[100:200], y[100:200]), (x[200:300], y[200:300]), (x[300:400, :5], y[300:400])])
    with pytest.raises(ValueError, match="batch 1: mutual information needs the label"):
        acc.update_many([x[100:200]])
    with pytest.raises(ValueError, match="expected a batch, a \\(batch, label\\) pair or a \\(batch, label, w\\) triple, got a tuple of 4"):
        acc.update_many([(x, y, y, y)])
    with pytest.raises(ValueError, match="batch 1 has weights"):  # a triple is a weighted batch; these were not
        acc.update_many([(x, y, np.ones(len(x)))])
    assert (acc.rows, acc._batches) == before[:2]
    np.testing.assert_array_equal(acc.summary().mean, before[2])
    fresh = db.Accumulator(stats=("moments",))
    with pytest.raises(ValueError, match="batch 1 has 2 features"):
        fresh.update_many([x[:10], x[:10, :2]])
    fresh.update(x[:10, :2])  # the failed call fixed nothing: two features are fine now
    assert fresh.summary().mean.shape == (2,)


def test_accumulator_device_is_checked() -> None:
    with pytest.raises(ValueError, match="device must be one of 'auto', 'cpu', 'gpu'; got 'tpu'"):
        db.Accumulator(device="tpu")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="device must be one of 'auto', 'cpu', 'gpu'; got None"):
        db.Accumulator(device=None)  # type: ignore[arg-type]


# --- on a CUDA device ----------------------------------------------------------------------------


@gpu
@pytest.mark.parametrize("part_rows", [500, 1_024, 3_000])
def test_gpu_stager_equals_unpipelined_and_cpu(part_rows: int) -> None:
    cupy = pytest.importorskip("cupy")
    from daskbatch.stats.kernels.path import Stager

    x, y = data()
    b = bundle(x.shape[1])
    ranges = split_rows(x.shape[0], part_rows)
    stager = Stager()
    got = stager.reduce(((x[i:j], y[i:j]) for i, j in ranges), b.chunk, b.merge)
    device = functools.reduce(b.merge, [b.chunk(cupy.asarray(x[i:j]), cupy.asarray(y[i:j])) for i, j in ranges])
    cpu = functools.reduce(b.merge, [b.chunk(x[i:j], y[i:j]) for i, j in ranges])
    assert isinstance(got[0].mean, cupy.ndarray)
    assert_states(got, device)
    assert_states(got, cpu)
    again = stager.reduce(((x[i:j], y[i:j]) for i, j in ranges), b.chunk, b.merge)  # buffers reused
    assert_states(again, got, rtol=0)


@gpu
def test_gpu_stager_parts_of_many_sizes_dtypes_and_device_arrays() -> None:
    cupy = pytest.importorskip("cupy")
    from daskbatch.stats.kernels.path import Stager

    x, _ = data()
    sizes = [(0, 10), (10, 2_000), (2_000, 2_001), (2_001, 3_000)]  # the buffers grow and shrink
    m = Moments()
    parts = [(x[a:b].astype(">f8"),) for a, b in sizes[:2]] + [(cupy.asarray(x[2_000:2_001]),), (x[2_001:, ::-1],)]
    got = Stager(depth=3).reduce(iter(parts), m.chunk, m.merge)
    ref = functools.reduce(m.merge, [m.chunk(np.asarray(host(p[0]), dtype=np.float64)) for p in parts])
    assert_states((got,), (ref,))
    assert Stager().reduce(iter([]), m.chunk, m.merge) is None


@gpu
def test_gpu_staged_chunk_task_equals_cpu() -> None:
    pytest.importorskip("cupy")
    x, y = data(rows=10_000, cols=9)
    b = bundle(x.shape[1])
    got = Staged(b, 1_234).chunk(x, y)
    ref = functools.reduce(b.merge, [b.chunk(x[i:j], y[i:j]) for i, j in split_rows(x.shape[0], 1_234)])
    assert_states(got, ref)


@gpu
def test_gpu_describe_staged_equals_block_and_cpu(tmp_path) -> None:  # noqa: ANN001
    pytest.importorskip("cupy")
    x, y = data(rows=40_000, cols=7)
    xd, yd = da.from_array(x, chunks=(10_000, -1)), da.from_array(y, chunks=10_000)
    kw = {"range": RANGE, "bins": 16, "run": db.RunOptions(plan=None)}
    cpu = db.describe(xd, yd, **kw)
    block = db.describe(xd, yd, **{**kw, "run": dataclasses.replace(kw["run"], device="gpu")})
    with dask.config.set({"daskbatch.gpu-transfer": "staged", "daskbatch.gpu-staging-bytes": 3_000 * 7 * 4}):
        staged = db.describe(xd, yd, **{**kw, "run": dataclasses.replace(kw["run"], device="gpu")})
        again = db.describe(xd, yd, **{**kw, "run": dataclasses.replace(kw["run"], device="gpu")})
        ckpt = db.describe(xd, yd, **{**kw, "run": dataclasses.replace(kw["run"], device="gpu", checkpoint=tmp_path / "ck")})
    assert staged.provenance["gpu_transfer"] == "staged"
    for s in (block, staged):
        np.testing.assert_array_equal(s.hist_counts, cpu.hist_counts)
        np.testing.assert_array_equal(s.joint_counts, cpu.joint_counts)
        for f in ("mean", "var", "skew", "kurtosis", "cov"):
            np.testing.assert_allclose(getattr(s, f), getattr(cpu, f), rtol=1e-12, atol=1e-12)
    for f in ("mean", "var", "cov", "hist_counts"):
        np.testing.assert_array_equal(getattr(again, f), getattr(staged, f))  # reproducible
        np.testing.assert_array_equal(getattr(ckpt, f), getattr(staged, f))


@gpu
def test_gpu_accumulator_update_many_pipelines_like_update() -> None:
    cupy = pytest.importorskip("cupy")
    x, y = data(rows=20_000, cols=11)
    batches = [(x[a:b], y[a:b]) for a, b in split_rows(x.shape[0], 3_000)]
    cpu = db.Accumulator(range=RANGE, bins=16)
    one = db.Accumulator(range=RANGE, bins=16, device="gpu")
    for xb, yb in batches:
        cpu.update(xb, yb)
        one.update(xb, yb)
    many = db.Accumulator(range=RANGE, bins=16, device="gpu").update_many(iter(batches))
    assert isinstance(many._state[0].mean, cupy.ndarray)
    assert_states(many._state, one._state)
    assert_states(many._state, cpu._state)
    s, c = many.summary(), cpu.summary()
    np.testing.assert_array_equal(s.joint_counts, c.joint_counts)
    np.testing.assert_allclose(s.cov, c.cov, rtol=1e-12, atol=1e-12)
