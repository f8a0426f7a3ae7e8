"""Issue 'Every door locked', item 5: rows are never counted twice after a copy or a ``touch``.

Before, a summary knew the stores it held by a hash of their files' names,
sizes and modification times: after ``--update`` with feb.zarr, a
``cp -r feb.zarr febcopy.zarr`` and a ``touch`` of one of feb.zarr's chunks
each let ``--update`` count feb's rows again (exit 0).  The token is now the
content's: the CRC-32C checksums daskbatch's chunks end with, or, for another
writer's store, a hash of the blocks as describe reads them.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest
import zarr

import daskbatch as db
from daskbatch.engine.pipeline import input_token, listed_token

ROOT = pathlib.Path(__file__).parents[2]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m daskbatch`` in a fresh process, as a user runs it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "daskbatch", "-q", *args], capture_output=True, text=True,
                          timeout=240, env=env)


def update(store: pathlib.Path, summary: pathlib.Path) -> subprocess.CompletedProcess[str]:
    return cli("describe", str(store), "--update", str(summary), "--cluster", "threads", "--no-progress")


def touch(path: pathlib.Path) -> None:
    """A later modification time, the bytes unchanged."""
    later = path.stat().st_mtime_ns + 5 * 10**9
    os.utime(path, ns=(later, later))


def refused(run: subprocess.CompletedProcess[str], new: pathlib.Path, held: pathlib.Path) -> None:
    """Exit 2 with one line naming the new store and the one whose rows the summary holds."""
    err = run.stderr.strip()
    assert run.returncode == 2, (run.returncode, err)
    assert "\n" not in err and "already in the summary" in err, err
    assert f"rows of {new}" in err and f"from {held}" in err, err


def sources_and_rows(summary: pathlib.Path) -> tuple[list[str], int]:
    s = db.load_summary(summary)
    return [str(p.get("path")) for p in s.provenance["sources"]], int(s.arrays.count[0])


def test_daskbatch_store_copy_and_touch_are_refused(tmp_path: pathlib.Path) -> None:
    """The issue's sequence, with stores daskbatch wrote (checksummed chunks): refused before any compute."""
    jan, feb, mar = (tmp_path / f"{m}.zarr" for m in ("jan", "feb", "mar"))
    for path, rows, seed in ((jan, 6000, 1), (feb, 2000, 2), (mar, 2000, 3)):
        db.synth(path, rows=rows, features=4, chunk_rows=1000, seed=seed)
    summary = tmp_path / "s.zarr"
    made = cli("describe", str(jan), "--stats", "moments", "--out", str(summary), "--cluster", "threads")
    assert made.returncode == 0, made.stderr
    assert update(feb, summary).returncode == 0
    copy = tmp_path / "febcopy.zarr"
    shutil.copytree(feb, copy)
    refused(update(copy, summary), copy, feb)
    touch(feb / "X" / "c" / "0" / "0")
    refused(update(feb, summary), feb, feb)
    assert sources_and_rows(summary) == ([str(jan), str(feb)], 8000)
    assert update(mar, summary).returncode == 0  # genuinely new rows still go in
    assert sources_and_rows(summary) == ([str(jan), str(feb), str(mar)], 10000)


def test_foreign_store_copy_and_touch_are_refused(tmp_path: pathlib.Path) -> None:
    """Another writer's store (no checksums): its blocks' hash, taken as describe reads them, tells."""
    rng = np.random.default_rng(5)
    stores = {}
    for name in ("a", "b", "c"):
        stores[name] = tmp_path / f"{name}.zarr"
        zarr.open_group(str(stores[name]), mode="w").create_array("X", data=rng.normal(size=(900, 3)),
                                                                  chunks=(300, 3))
    summary = tmp_path / "s.zarr"
    made = cli("describe", str(stores["a"]), "--stats", "moments", "--out", str(summary), "--cluster", "threads")
    assert made.returncode == 0, made.stderr
    assert update(stores["b"], summary).returncode == 0
    copy = tmp_path / "bcopy.zarr"
    shutil.copytree(stores["b"], copy)
    refused(update(copy, summary), copy, stores["b"])
    touch(stores["b"] / "X" / "c" / "0" / "0")
    refused(update(stores["b"], summary), stores["b"], stores["b"])
    assert sources_and_rows(summary) == ([str(stores["a"]), str(stores["b"])], 1800)
    assert update(stores["c"], summary).returncode == 0
    assert sources_and_rows(summary)[1] == 2700


def test_the_api_refuses_a_copy_naming_both(tmp_path: pathlib.Path) -> None:
    x = np.random.default_rng(6).normal(size=(400, 3))
    one, two = tmp_path / "one.zarr", tmp_path / "two.zarr"
    zarr.open_group(str(one), mode="w").create_array("X", data=x, chunks=(100, 3))
    shutil.copytree(one, two)
    held = db.describe(str(one), stats="moments")
    with pytest.raises(ValueError, match=f"rows of {two} are already in the summary, from {one}"):
        db.update(held, str(two))
    # One chunk rewritten: other rows, accepted.
    zarr.open_array(str(two / "X"), mode="r+")[100:200] = x[100:200] + 1.0
    both = db.update(held, str(two))
    assert int(both.arrays.count[0]) == 800


def test_a_daskbatch_token_is_known_before_any_read_and_follows_every_byte(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "d.zarr"
    db.synth(path, rows=3000, features=3, chunk_rows=1000, seed=4)
    token = input_token(db.open_dataset(path))
    assert token is not None and "crc32c" in token
    copy = tmp_path / "copy.zarr"
    shutil.copytree(path, copy)
    assert input_token(db.open_dataset(copy)) == token
    chunk = copy / "X" / "c" / "2" / "0"
    data = bytearray(chunk.read_bytes())
    data[-1] ^= 1  # the stored checksum itself: another content, whether or not it still decodes
    chunk.write_bytes(bytes(data))
    assert input_token(db.open_dataset(copy)) != token


def test_a_summary_saved_with_listing_tokens_still_refuses_the_same_store(tmp_path: pathlib.Path) -> None:
    """Summaries saved before content tokens hold a hash of the store's listing: the same store is refused."""
    path = tmp_path / "d.zarr"
    db.synth(path, rows=2000, features=3, chunk_rows=1000, seed=8)
    old = db.describe(str(path), stats="moments")
    old.provenance["input_tokens"] = [listed_token(db.open_dataset(path))]  # as an earlier daskbatch saved it
    summary = tmp_path / "s.zarr"
    old.save(summary)
    refused(update(path, summary), path, path)
    assert int(db.load_summary(summary).arrays.count[0]) == 2000


def test_weights_do_not_change_the_rows_token(tmp_path: pathlib.Path) -> None:
    """The blocks are hashed as read, rows of weight 0 included: the same store weighted is the same rows."""
    path = tmp_path / "f.zarr"
    zarr.open_group(str(path), mode="w").create_array("X", data=np.random.default_rng(9).normal(size=(600, 3)),
                                                      chunks=(200, 3))
    weights = np.r_[np.zeros(200), np.ones(400)]
    weighted = db.describe(str(path), stats="moments", weights=weights)
    with pytest.raises(ValueError, match=f"rows of {path} are already in the summary"):
        db.update(weighted, str(path))


def test_a_foreign_token_does_not_depend_on_the_rows_per_block(tmp_path: pathlib.Path) -> None:
    """Another machine plans other blocks: the digest is one per storage chunk, so the token is the same."""
    path = tmp_path / "f.zarr"
    zarr.open_group(str(path), mode="w").create_array("X", data=np.random.default_rng(2).normal(size=(1200, 3)),
                                                      chunks=(200, 3))
    small = db.describe(db.open_dataset(path, chunks=200), stats="moments", run=db.RunOptions(plan=None))
    large = db.describe(db.open_dataset(path, chunks=600), stats="moments", run=db.RunOptions(plan=None))
    assert small.provenance["input_tokens"] == large.provenance["input_tokens"]
    with pytest.raises(ValueError, match="already in the summary"):
        db.merge(small, large)
