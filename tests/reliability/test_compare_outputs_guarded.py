"""``daskbatch compare --json/--plot``: both outputs go through the output guard, checked together before any write."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from collections.abc import Callable

import numpy as np
import pytest

import daskbatch as db


def _run(cwd: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m daskbatch ARGS`` in ``cwd``."""
    return subprocess.run(
        [sys.executable, "-m", "daskbatch", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=240,
    )


@pytest.fixture()
def summaries(tmp_path: pathlib.Path, data: np.ndarray) -> pathlib.Path:
    """``ref.zarr`` and ``new.zarr``: saved summaries of two halves of ``data``, on the same bins."""
    ref = db.describe(data[:300], stats=["moments", "hist"], range=(-5.0, 5.0))
    new = db.describe(data[300:], run=db.RunOptions(like=ref))
    ref.save(tmp_path / "ref.zarr")
    new.save(tmp_path / "new.zarr")
    return tmp_path


def _refused(result: subprocess.CompletedProcess[str], *words: str) -> None:
    """Exit 2 with one line on stderr naming ``words``."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert (
        len(lines) == 1 and lines[0].startswith("error: ") and all(w in lines[0] for w in words)
    ), result.stderr


def test_plot_never_replaces_what_is_not_asked(
    summaries: pathlib.Path, snapshot: Callable[[pathlib.Path], dict[str, str]]
) -> None:
    """A symlink's target, an existing image and the input summary stay as they were; nothing else is written."""
    tmp = summaries
    outside = tmp / "outside"
    outside.mkdir()
    precious = outside / "precious.png"
    precious.write_bytes(b"not to be replaced")
    (tmp / "link.png").symlink_to(precious)
    (tmp / "old.png").write_bytes(b"an earlier image")
    before = snapshot(tmp)
    for args, words in [
        (["--plot", "link.png"], ["--plot link.png already exists", "--overwrite"]),
        (["--plot", "old.png"], ["--plot old.png already exists", "--overwrite"]),
        (["--plot", "ref.zarr/mean/evil.png"], ["--plot", "is inside the REFERENCE summary"]),
        (["--plot", "new.zarr/evil.png", "--overwrite"], ["is inside the NEW summary"]),
        (
            ["--json", "ref.zarr/evil.json", "--overwrite"],
            ["--json", "is inside the REFERENCE summary"],
        ),
        (["--json", "d.png", "--plot", "d.png"], ["--plot d.png is --json"]),
        (["--json", "d.json", "--plot", "d.json"], ["--plot d.json: .json is not an image format"]),
        (["--json", "d.json", "--plot", "d.notanimage"], [".notanimage is not an image format"]),
    ]:
        _refused(_run(tmp, "compare", "ref.zarr", "new.zarr", *args), *words)
        assert snapshot(tmp) == before, args
        assert not (tmp / "d.json").exists() and not (tmp / "d.png").exists()


def test_plot_overwrite_replaces_the_link_not_its_target(summaries: pathlib.Path) -> None:
    """With --overwrite the path itself is replaced: a symlink there becomes the image, its target is untouched."""
    tmp = summaries
    precious = tmp / "precious.png"
    precious.write_bytes(b"not to be replaced")
    (tmp / "link.png").symlink_to(precious)
    done = _run(
        tmp,
        "compare",
        "ref.zarr",
        "new.zarr",
        "--plot",
        "link.png",
        "--json",
        "d.json",
        "--overwrite",
    )
    assert done.returncode == 0, done.stderr
    assert precious.read_bytes() == b"not to be replaced"
    assert not (tmp / "link.png").is_symlink() and (tmp / "link.png").read_bytes().startswith(
        b"\x89PNG"
    )
    assert json.loads((tmp / "d.json").read_text())["daskbatch_output"] == "drift"
    assert not [p.name for p in tmp.iterdir() if ".tmp-" in p.name]


def test_json_to_stdout_still_saves_the_plot(summaries: pathlib.Path) -> None:
    """``--json - --plot F``: stdout is the JSON alone, and the figure is written (it was skipped)."""
    tmp = summaries
    done = _run(tmp, "compare", "ref.zarr", "new.zarr", "--json", "-", "--plot", "psi.svg")
    assert done.returncode == 0, done.stderr
    assert set(json.loads(done.stdout)) == {"rows", "features"}
    assert (tmp / "psi.svg").read_text().lstrip().startswith("<?xml")
