"""One codec for states: every state class round-trips through checkpoints and saved summaries; nothing else does.

A file names its state classes by registry key: an unregistered key is refused in
one line and nothing is imported; a flipped byte is refused; formats of an older
daskbatch are refused with what to do.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr

import daskbatch as db
from daskbatch.engine.checkpoint_files import (
    DamagedCheckpoint,
    decode_state,
    encode_state,
    read_header,
)
from daskbatch.errors import CheckpointMismatchError, DataError
from daskbatch.io import state_codec
from daskbatch.io.state_codec import UnreadableState
from daskbatch.stats._base import registered_state, registered_states, state_key
from daskbatch.stats.moments import MomentsState
from daskbatch.stats.registry import STATISTICS, built_in_states


@dataclasses.dataclass(frozen=True)
class UserState(db.State):
    """A user's state: registered by subclassing State; a scalar field too."""

    total: np.ndarray
    count: float


@dataclasses.dataclass(frozen=True)
class PlainState:
    """A state dataclass that does not derive from State: registered explicitly, in the test that needs it."""

    total: np.ndarray


def _instance(cls: type, seed: int = 0) -> object:
    """An instance of a state class with arrays of several dtypes and shapes in its fields."""
    rng = np.random.default_rng(seed)
    values: list[object] = [rng.standard_normal(4), rng.integers(0, 9, (2, 3)), np.float64(rng.standard_normal()),
                            rng.standard_normal((3, 3)).astype(np.float32), np.array([True, False])]
    return cls(**{f.name: values[i % len(values)] for i, f in enumerate(dataclasses.fields(cls))})


def _assert_same(a: object, b: object) -> None:
    assert type(a) is type(b)
    for f in dataclasses.fields(a):  # type: ignore[arg-type]
        x, y = getattr(a, f.name), getattr(b, f.name)
        assert np.asarray(x).dtype == np.asarray(y).dtype and isinstance(y, np.ndarray) == isinstance(x, np.ndarray)
        np.testing.assert_array_equal(x, y, strict=True)


ALL_STATES = (*built_in_states(), UserState)


def test_every_built_in_state_class_is_registered_and_listed() -> None:
    for cls in ALL_STATES:
        assert registered_state(state_key(cls)) is cls
    own = [cls.__qualname__ for cls in registered_states() if cls.__module__.startswith("daskbatch.")]
    assert len(own) == len(set(own)) >= len(built_in_states())  # a record names daskbatch's own by qualname


#: Another daskbatch module: where a record says a built-in state class lived when it was written.
_ELSEWHERE = "daskbatch.stats.registry"


def _moved(key: str) -> str:
    """``key`` with its module part rewritten, as a class that has moved since the record was written."""
    assert key.startswith("daskbatch.") and not key.startswith(_ELSEWHERE + ":")
    return f"{_ELSEWHERE}:{key.partition(':')[2]}"


def _rewrite_checkpoint(path: Path, rename: Any) -> None:
    """Rewrite the state classes a checkpoint file names with ``rename``, its checksum forged to match."""
    first, _, body = path.read_bytes().partition(b"\n")
    line, _, payload = body.partition(b"\n")
    doc = json.loads(line)
    for record in doc["states"]:
        record["state"] = rename(record["state"])
    body = json.dumps(doc, sort_keys=True).encode() + b"\n" + payload
    path.write_bytes(first.split(b"sha256=")[0] + b"sha256=" + hashlib.sha256(body).hexdigest().encode() + b"\n" + body)


def _rewrite_summary(path: str, rename: Any) -> None:
    """Rewrite the state classes a saved summary names with ``rename``, its checksums recomputed to match."""
    group = zarr.open_group(Path(path) / "states", mode="r+")
    digests = {}
    for name, sub in sorted(group.groups()):
        attrs = dict(sub.attrs, state=rename(sub.attrs["state"]))
        record = {key: attrs[key] for key in ("codec", "state", "fields")}
        arrays = {f[0]: np.asarray(sub[f[0]][...]) for f in attrs["fields"]}
        context = [state_codec.FORMAT_VERSION, attrs["statistic"], attrs["params"]]
        attrs["sha256"] = digests[name] = state_codec.record_sha256(record, arrays, context)
        sub.attrs.put(attrs)
    with xr.open_zarr(path, consolidated=False, chunks=None) as ds:
        results = state_codec.results_digest(ds.load())
    group.attrs.put(dict(group.attrs, summary_sha256=state_codec._binding(results, digests)))


def test_a_checkpoint_naming_built_in_states_in_another_module_still_loads(tmp_path: Path) -> None:
    """Built-in state classes are read by qualified name: one may move between modules without losing checkpoints."""
    states = tuple(_instance(cls, i) for i, cls in enumerate(built_in_states()))
    path = tmp_path / "L0-000000.ckpt"
    path.write_bytes(encode_state(states, _META))
    _rewrite_checkpoint(path, _moved)
    assert all(r["state"].startswith(_ELSEWHERE + ":") for r in read_header(path)[0]["states"])
    for back, state in zip(decode_state(*read_header(path)), states, strict=True):
        _assert_same(back, state)


def test_a_summary_naming_built_in_states_in_another_module_still_loads(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    x, y, w = rng.standard_normal((200, 3)), rng.integers(0, 2, 200), rng.uniform(0.5, 2.0, 200)
    for i, s in enumerate((
        db.describe(x, y, stats=("moments", "cov", "hist", "class_moments", "sketch"), run=db.RunOptions(plan=None)),
        db.describe(x, weights=w, stats=("moments", "cov"), run=db.RunOptions(plan=None)),
    )):
        path = s.save(tmp_path / f"s{i}.zarr")
        _rewrite_summary(path, _moved)
        assert zarr.open_group(Path(path) / "states" / "moments").attrs["state"].startswith(_ELSEWHERE + ":")
        back = db.load_summary(path)
        assert back.states is not None and s.states is not None and set(back.states) == set(s.states)
        for name, kept in s.states.items():
            want = kept.state.canonical() if hasattr(kept.state, "canonical") else kept.state
            _assert_same(back.states[name].state, want)


def test_an_unknown_built_in_state_name_is_refused_in_one_line(tmp_path: Path) -> None:
    unknown = "daskbatch.stats.moments:NoSuchState"
    header, arrays = state_codec.encode(_instance(MomentsState))
    with pytest.raises(UnreadableState, match=f"state class '{unknown}' is not one of daskbatch's built-in") as info:
        state_codec.decode(dict(header, state=unknown), arrays)
    assert "\n" not in str(info.value)
    with pytest.raises(UnreadableState, match="is not one of daskbatch's built-in states") as info:
        state_codec.decode(dict(header, state="daskbatch.stats.moments:" + "A" * 10_000), arrays)
    assert len(str(info.value)) < 250  # a key as long as a file allows is cut in the message
    path = tmp_path / "L0-000000.ckpt"
    path.write_bytes(encode_state((_instance(MomentsState),), _META))
    _rewrite_checkpoint(path, lambda key: unknown)
    with pytest.raises(DamagedCheckpoint, match=f"'{unknown}' is not one of daskbatch's built-in states") as err:
        read_header(path)
    assert "\n" not in str(err.value)
    saved = db.describe(np.ones((10, 2)), stats=("moments",), run=db.RunOptions(plan=None)).save(tmp_path / "s.zarr")
    _rewrite_summary(saved, lambda key: unknown)
    with pytest.raises(DataError, match=f"state 'moments': state class '{unknown}' is not one of daskbatch's") as e:
        db.load_summary(saved)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("cls", ALL_STATES, ids=lambda c: c.__name__)
def test_round_trip_through_the_codec_and_a_checkpoint_file(tmp_path: Path, cls: type) -> None:
    state = _instance(cls)
    header, arrays = state_codec.encode(state)
    _assert_same(state_codec.decode(json.loads(json.dumps(header)), arrays), state)
    path = tmp_path / "L0-000000.ckpt"
    path.write_bytes(encode_state((state, _instance(MomentsState, 1)), _META))
    (back, other) = decode_state(*read_header(path))
    _assert_same(back, state)
    _assert_same(other, _instance(MomentsState, 1))


_META = {"format": 4, "pass": "p", "level": 0, "index": 0, "blocks": [0, 1]}


def test_round_trip_of_every_kept_state_through_a_saved_summary(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    x, y, t = rng.standard_normal((300, 4)), rng.integers(0, 3, 300), rng.standard_normal(300)
    by_label = db.describe(da.from_array(x, chunks=(70, -1)), da.from_array(y, chunks=70), run=db.RunOptions(plan=None),
                           stats=("moments", "cov", "hist", "mi", "class_moments", "sketch"))
    by_target = db.describe(x, target=t, run=db.RunOptions(plan=None))
    seen = set()
    for i, s in enumerate((by_label, by_target)):
        back = db.load_summary(s.save(tmp_path / f"s{i}.zarr"))
        assert back.states is not None and s.states is not None and set(back.states) == set(s.states)
        for name, kept in s.states.items():
            want = kept.state.canonical() if hasattr(kept.state, "canonical") else kept.state
            _assert_same(back.states[name].state, want)
            assert back.states[name].statistic == kept.statistic
            seen.add(type(kept.statistic))
    assert seen == {d.statistic for d in STATISTICS.values() if d.statistic is not None and d.states}


def test_a_user_state_round_trips_through_a_saved_summary(tmp_path: Path) -> None:
    @dataclasses.dataclass(frozen=True)
    class Total:
        name = "total"

        def chunk(self, x, label=None):  # noqa: ANN001, ANN202
            return UserState(np.nansum(np.asarray(x, dtype=np.float64), axis=0), float(len(x)))

        def merge(self, a, b):  # noqa: ANN001, ANN202
            return UserState(a.total + b.total, a.count + b.count)

        def finalize(self, s):  # noqa: ANN001, ANN202
            return s.total

    x = np.random.default_rng(4).standard_normal((200, 3))
    s = db.describe(x, stats=["moments", Total()], run=db.RunOptions(plan=None))
    back = db.load_summary(s.save(tmp_path / "s.zarr"), statistics=[Total()])
    _assert_same(back.states["total"].state, s.states["total"].state)

    class Other(Total):
        """Another class of the same statistic name: its state is not read as the saved one."""

    with pytest.raises(DataError, match=r"state 'total' was saved by \S+\.Total \S+\.Total\(\), not by \S+\.Other \S+\.Other\(\)$"):
        db.load_summary(tmp_path / "s.zarr", statistics=[Other()])


def test_a_plain_dataclass_state_needs_register_state() -> None:
    state = PlainState(np.arange(3.0))
    with pytest.raises(TypeError, match="not registered; derive it from daskbatch.State or decorate") as info:
        state_codec.encode(state)
    assert "\n" not in str(info.value)
    try:
        assert db.register_state(PlainState) is PlainState
        _assert_same(state_codec.decode(*state_codec.encode(state)), state)
    finally:  # leave the registry as the other tests expect it
        from daskbatch.stats import _base as declaration

        declaration._REGISTRY.pop(state_key(PlainState))
    with pytest.raises(TypeError, match="register_state takes a dataclass"):
        db.register_state(int)


_EVIL = "raise RuntimeError('a module named by a file was imported')\n"


@pytest.fixture()
def evil_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module on sys.path that must never be imported; the key of a 'state class' in it."""
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "codec_evil_states.py").write_text(_EVIL)
    monkeypatch.syspath_prepend(str(tmp_path / "lib"))
    return "codec_evil_states:EvilState"


def test_an_unregistered_class_is_refused_and_nothing_is_imported(tmp_path: Path, evil_module: str) -> None:
    header, arrays = state_codec.encode(_instance(UserState))
    with pytest.raises(UnreadableState, match=r"state class 'codec_evil_states:EvilState' is not registered") as info:
        state_codec.decode(dict(header, state=evil_module), arrays)
    assert "\n" not in str(info.value)
    # in a checkpoint file, its checksum forged to match
    raw = encode_state((_instance(UserState),), _META)
    first, _, body = raw.partition(b"\n")
    line, _, payload = body.partition(b"\n")
    doc = json.loads(line)
    doc["states"][0]["state"] = evil_module
    body = json.dumps(doc, sort_keys=True).encode() + b"\n" + payload
    path = tmp_path / "L0-000000.ckpt"
    path.write_bytes(first.split(b"sha256=")[0] + b"sha256=" + hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
    with pytest.raises(DamagedCheckpoint, match="is not registered") as err:
        read_header(path)
    assert "\n" not in str(err.value)
    assert "codec_evil_states" not in sys.modules


def test_an_unregistered_class_in_a_saved_summary_is_refused_and_nothing_is_imported(
    tmp_path: Path, evil_module: str
) -> None:
    x = np.random.default_rng(5).standard_normal((100, 3))
    path = db.describe(x, stats=("moments",), run=db.RunOptions(plan=None)).save(tmp_path / "s.zarr")
    group = zarr.open_group(Path(path) / "states" / "moments", mode="r+")
    group.attrs.put(dict(group.attrs, state=evil_module))
    with pytest.raises(DataError, match="'codec_evil_states:EvilState' is not the expected") as info:
        db.load_summary(path)
    assert "\n" not in str(info.value)
    assert "codec_evil_states" not in sys.modules


@pytest.mark.parametrize("cls", ALL_STATES, ids=lambda c: c.__name__)
def test_a_flipped_byte_changes_the_checksum(cls: type) -> None:
    header, arrays = state_codec.encode(_instance(cls))
    before = state_codec.record_sha256(header, arrays, ["context"])
    name = next(iter(arrays))
    flipped = bytearray(np.ascontiguousarray(arrays[name]).tobytes())
    flipped[0] ^= 0x01
    changed = dict(arrays, **{name: np.frombuffer(bytes(flipped), arrays[name].dtype).reshape(arrays[name].shape)})
    assert state_codec.record_sha256(header, changed, ["context"]) != before
    assert state_codec.record_sha256(header, arrays, ["other context"]) != before


def test_a_flipped_byte_in_a_checkpoint_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "L0-000000.ckpt"
    raw = bytearray(encode_state((_instance(MomentsState),), _META))
    raw[-40] ^= 0x01
    path.write_bytes(bytes(raw))
    with pytest.raises(DamagedCheckpoint, match="checksum mismatch"):
        read_header(path)


def test_a_changed_state_in_a_saved_summary_is_refused(tmp_path: Path) -> None:
    x = np.random.default_rng(6).standard_normal((100, 3))
    path = db.describe(x, stats=("moments",), run=db.RunOptions(plan=None)).save(tmp_path / "s.zarr")
    mean = zarr.open_array(Path(path) / "states" / "moments" / "mean", mode="r+")
    mean[1] = np.nextafter(mean[1], np.inf)  # one bit of one number, with a valid chunk checksum
    with pytest.raises(DataError, match="state 'moments' fails its sha256 checksum"):
        db.load_summary(path)


def test_states_of_an_older_summary_are_refused_saying_what_to_do(tmp_path: Path) -> None:
    x = np.random.default_rng(7).standard_normal((100, 3))
    path = db.describe(x, stats=("moments",), run=db.RunOptions(plan=None)).save(tmp_path / "s.zarr")
    group = zarr.open_group(Path(path) / "states", mode="r+")
    group.attrs.put(dict(group.attrs, format_version=2))
    with pytest.raises(DataError, match=r"format version 2, this daskbatch reads 3; describe the data again") as info:
        db.load_summary(path)
    assert "\n" not in str(info.value)


def test_a_checkpoint_of_an_older_format_is_refused_saying_what_to_do(tmp_path: Path) -> None:
    x = da.from_array(np.random.default_rng(8).standard_normal((400, 3)), chunks=(100, -1))
    db.describe(x, stats=("moments",), run=db.RunOptions(split_every=2, plan=None, checkpoint=tmp_path))
    manifest = tmp_path / "daskbatch-checkpoint.json"
    doc = json.loads(manifest.read_text())
    doc["input"]["format"] = "3"
    manifest.write_text(json.dumps(doc))
    with pytest.raises(CheckpointMismatchError, match=r"format \(3 in the checkpoint, 4 now\).*--force") as info:
        db.describe(x, stats=("moments",), run=db.RunOptions(split_every=2, plan=None, checkpoint=tmp_path))
    assert "\n" not in str(info.value)
