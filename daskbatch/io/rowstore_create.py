"""Creating a row-block output store on disk, and deciding what to do with one already there."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from typing import Any

import numpy as np

from daskbatch.errors import DataError
from daskbatch.io.ingest.manifest import read_manifest, write_manifest
from daskbatch.io.integrity import WRITES_EVERY_CHUNK

__all__ = [
    "CREATING_FILE", "DONE_FILE", "MANIFEST_FILE", "OUTPUT_ATTR", "ArraySpec", "create_store", "replace_or_resume",
]

#: Group attribute naming the job that wrote a store ("transform", "map_batches").
OUTPUT_ATTR = "daskbatch_output"
MANIFEST_FILE = "daskbatch-output.json"
DONE_FILE = "daskbatch-output-done.log"
#: Present from the first write of a new store until it is created completely.
CREATING_FILE = "daskbatch-output-creating"


@dataclass(frozen=True)
class ArraySpec:
    """One output array: ``columns`` None for a 1-D (per-row) array."""

    name: str
    dtype: np.dtype
    columns: int | None = None
    dims: tuple[str, ...] = ("sample", "feature")


def _is_output(path: str) -> str | None:
    """The kind of daskbatch output at ``path`` (its ``daskbatch_output`` attribute), or None."""
    try:
        with open(os.path.join(path, "zarr.json")) as f:
            kind = json.load(f).get("attributes", {}).get(OUTPUT_ATTR)
    except (OSError, ValueError, AttributeError):
        return None
    return kind if isinstance(kind, str) else None


def _differences(old: Any, new: Any, where: str = "") -> list[str]:
    """Dotted keys at which two JSON documents differ."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new)):
            out += _differences(old.get(key), new.get(key), f"{where}.{key}" if where else key)
        return out
    if old == new:
        return []
    key = where or "(document)"
    if isinstance(old, str) and isinstance(new, str) and len(old) + len(new) < 200:
        return [f"{key}: {old!r} then, {new!r} now"]
    return [key]


def replace_or_resume(out: str, kind: str, doc: dict[str, Any], overwrite: bool) -> bool:
    """Decide about an existing store at ``out``: remove it to be created again, or resume it."""
    if os.path.isdir(out) and not os.path.islink(out) and not os.listdir(out):
        os.rmdir(out)  # an empty directory holds nothing to protect
        return True
    directory = os.path.isdir(out) and not os.path.islink(out)
    if directory and os.path.isfile(os.path.join(out, CREATING_FILE)):
        shutil.rmtree(out)  # our own marker: interrupted while being created, nothing written yet
        return True
    found = _is_output(out) if directory else None
    if found is None:
        raise FileExistsError(
            f"{out!r} already exists and is not a daskbatch output; daskbatch does not replace "
            "other data (even with overwrite): choose another path or remove it yourself"
        )
    if overwrite:
        shutil.rmtree(out)
        return True
    if found != kind:
        raise DataError(
            f"{out!r} holds a daskbatch {found} output, not {kind}; choose another path, or pass "
            "overwrite=True (--overwrite) to replace it"
        )
    old = read_manifest(out, name=MANIFEST_FILE)
    if old is None:
        raise DataError(
            f"{out!r} is a daskbatch {kind} output without its {MANIFEST_FILE}; choose another path, "
            "or pass overwrite=True (--overwrite) to start again"
        )
    old.pop("version", None)
    # Name the items themselves (a store from before the items were kept differs as a whole).
    diffs = _differences(old.get("items"), doc["items"]) if "items" in doc else _differences(old, doc)
    if diffs:
        raise DataError(
            f"{out!r} was started by a different {kind} (differs in {', '.join(diffs[:6])}"
            f"{', ...' if len(diffs) > 6 else ''}); re-run the original call to resume it, "
            "or pass overwrite=True (--overwrite) to start again"
        )
    return False

def create_store(
    out: str, kind: str, rows: int, chunk_rows: int, arrays: list[ArraySpec],
    attrs: dict[str, Any], doc: dict[str, Any],
) -> None:
    """Create a new store at ``out``: the creating marker first, then the arrays and the manifest, the marker removed last."""
    import zarr  # lazy: zarr
    from zarr.codecs import Crc32cCodec, ZstdCodec  # lazy: zarr

    # First the marker that says "ours, being created", then the data; the marker is removed last.
    os.mkdir(out)
    with open(os.path.join(out, CREATING_FILE), "w") as f:
        f.write(f"{kind}\n")
        f.flush()
        os.fsync(f.fileno())
    # "a", not "w-": the directory is ours (os.mkdir just made it) and holds the marker already.
    group = zarr.open_group(
        out, mode="a", zarr_format=3,
        attributes={OUTPUT_ATTR: kind, "complete": False, **attrs},
    )
    for spec in arrays:
        dtype = np.dtype(spec.dtype)
        two_d = spec.columns is not None
        shape: tuple[int, ...] = (rows,) if spec.columns is None else (rows, spec.columns)
        group.create_array(
            spec.name,
            shape=shape,
            chunks=(max(1, chunk_rows), max(1, spec.columns or 1)) if two_d else (max(1, chunk_rows),),
            dtype=dtype,
            # Unwritten float rows read as NaN, not as plausible zeros.
            fill_value=np.nan if dtype.kind == "f" else 0,
            compressors=(ZstdCodec(level=1), Crc32cCodec()),
            dimension_names=spec.dims if two_d else spec.dims[:1],
            config={"write_empty_chunks": True},  # every chunk on disk: absent means missing
            attributes={WRITES_EVERY_CHUNK: True},  # ... and readers are told so
        )
    write_manifest(out, doc, name=MANIFEST_FILE)
    os.unlink(os.path.join(out, CREATING_FILE))
