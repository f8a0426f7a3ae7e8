"""What :func:`daskbatch.describe` returns: the :class:`Summary` record and its views."""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from collections.abc import Sequence
from typing import Any

from daskbatch.errors import DataError
from daskbatch.io.outputs import (
    MARKER,
    check_output,
    checksummed,
    recover,
    write_output,
    zarr_target,
)
from daskbatch.runtime.runlock import summary_lock
from daskbatch.stats.spec import user_statistics
from daskbatch.summary.dataset import DEFAULT_QUANTILES, FORMAT, quantile_label
from daskbatch.summary.record import Summary
from daskbatch.summary.report import (
    write_report as write_report,  # Summary.to_html's way in: no cycle
)

__all__ = ["DEFAULT_QUANTILES", "load_summary", "quantile_label", "save_summary", "Summary"]


def save_summary(summary: Summary, path: str | os.PathLike[str], *, overwrite: bool = False) -> str:  # numpydoc ignore=PR01,RT01
    """Write the summary to a Zarr store at ``path`` (read back with :func:`load_summary`)."""
    from daskbatch.io.state_codec import (  # lazy: dask, zarr
        check_savable,
        results_digest,
        write_profile,
        write_states,
    )

    tiled = summary.provenance.get("tiled_cov") or {}
    protected = {
        "the summary's input store": summary.provenance.get("path"),
        "the summary's tiled covariance store": tiled.get("path") if isinstance(tiled, dict) else None,
    }
    for i, source in enumerate(summary.provenance.get("sources") or ()):  # a merged summary's inputs
        if isinstance(source, dict):
            protected[f"input store {i} of the merged summary"] = source.get("path")
    if summary.states is not None:
        check_savable(summary.states)  # before anything is written
    target = check_output(path, kind="summary", what="path", overwrite=overwrite, protected=protected)
    # The sketch's buckets are saved (quantiles at any probability after loading), the default table of quantiles not.
    ds = summary.to_xarray(states=True, quantiles=())
    results = results_digest(ds)
    ds.attrs[MARKER] = "summary"  # how check_output recognises a summary it may replace

    def _write(tmp: str) -> None:
        """Write the dataset (and the states) to the temporary path ``tmp``."""
        from zarr.codecs import ZstdCodec  # lazy: zarr

        # Every variable zstd plus a CRC-32C checksum: a changed byte fails the read.
        encoding = {name: {"compressors": checksummed(ZstdCodec())} for name in ds.variables}
        # A local "a::b.zarr" is written as that path, not read as a chained URL.
        ds.to_zarr(zarr_target(tmp), mode="w-", consolidated=False, encoding=encoding, write_empty_chunks=True)
        if summary.states is not None:
            write_states(tmp, summary.states, results)
        if summary.categorical_state is not None:  # the non-numeric columns' profile, for merge and update
            write_profile(tmp, summary.categorical_state, results)

    # The lock ``describe --update`` holds: a summary being updated is not replaced under it.
    with summary_lock(path):
        return write_output(target, _write)


def load_summary(path: str | os.PathLike[str], *, statistics: Any = ()) -> Summary:
    """Read a :class:`Summary` written by :meth:`Summary.save`.

    Parameters
    ----------
    path : str or os.PathLike
        The summary store.
    statistics : sequence of statistics, optional
        A user's statistics whose saved states to read; their results in
        ``extra`` are then finalized from those states (the statistic's own
        result type). Nothing named in the file is imported.

    Returns
    -------
    Summary
        The summary.

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist.
    DataError
        ``path`` is not a summary (a data store, another Zarr group, not Zarr at all),
        or a damaged one: one line naming it, before its metadata's claims are allocated.
    """
    where = os.fspath(path)
    recover(where)  # a replacement killed between its renames left the summary aside: put it back
    if "://" not in where and not os.path.exists(where):
        raise FileNotFoundError(f"no summary at {where}: the path does not exist")
    given = user_statistics(list(statistics))
    try:
        summary, states, profile = _read(where, given)
    except DataError:
        raise
    except Exception as exc:  # damaged metadata or chunks: zarr, xarray and json raise many kinds (RecursionError too)
        from daskbatch.io.state_codec import describe_error  # lazy: dask, zarr

        raise DataError(
            f"summary {where} cannot be read ({describe_error(exc)}): it was damaged; describe the data again"
        ) from None
    extra = dict(summary.extra)
    for stat in given:
        assert states is not None  # read_states raised when a given statistic has no state
        extra[stat.name] = states[stat.name].finalize()
    return dataclasses.replace(summary, states=states, extra=extra, categorical_state=profile)


def _read(where: str, given: Sequence[Any]) -> tuple[Summary, Any, Any]:
    """Read the summary at ``where`` and its states, its arrays' claims bounded before anything is allocated."""
    import xarray as xr  # lazy: xarray

    from daskbatch.io.state_codec import (  # lazy: dask, zarr
        check_bounds,
        read_profile,
        read_states,
        results_digest,
    )
    from daskbatch.io.zarr_store import FOREIGN_OBJECT  # lazy: dask, zarr

    _check_is_summary(where)
    check_bounds(where)
    # chunks=None: NumPy arrays read as they are loaded, no dask graph over chunks the metadata claims. Every node
    # has its zarr.json (_check_is_summary): what else zarr finds is another tool's (.ipynb_checkpoints).
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=FOREIGN_OBJECT)
        with xr.open_zarr(zarr_target(where, read_only=True), consolidated=False, chunks=None) as ds:
            loaded = ds.load()
    summary, results = Summary.from_xarray(loaded), results_digest(loaded)
    return summary, read_states(where, results, given, summary.n_features), read_profile(where, results)


def _check_is_summary(where: str) -> None:
    """Raise a one-line DataError unless ``where`` holds a saved summary (marked, or with its arrays)."""
    import zarr  # lazy: zarr

    from daskbatch.io.zarr_store import group_arrays  # lazy: dask, zarr

    try:
        group = zarr.open_group(zarr_target(where, read_only=True), mode="r")
    except (OSError, ValueError):  # zarr's "not a group" errors are ValueErrors (and FileNotFoundErrors)
        raise DataError(
            f"{where} is not a daskbatch summary (not a Zarr group); give a path written by Summary.save"
        ) from None
    marker, version = group.attrs.get(MARKER), group.attrs.get("daskbatch_summary_format")
    arrays = sorted(name for name, _ in group_arrays(group, max_depth=0))  # a row store's log is no node
    if marker == "summary" and (lost := _folders_without_metadata(where)):
        raise DataError(f"summary {where}: {', '.join(lost)} {'has' if len(lost) == 1 else 'have'} no zarr.json "
                        "(its metadata was removed): it was damaged; describe the data again")
    # A Summary.to_xarray() written with xarray has no marker, but its version and per-feature arrays.
    described = "provenance" in group.attrs or version is not None
    unmarked = marker is None and described and {"feature", "mean", "count"} <= set(arrays)
    if marker != "summary" and not unmarked:
        held = f"it holds arrays {', '.join(arrays)}" if arrays else "it holds no arrays"
        kind = f", it is a daskbatch {marker} output" if isinstance(marker, str) else ""
        raise DataError(
            f"{where} is not a daskbatch summary ({held}{kind}); describe it with daskbatch.describe, "
            "or give a path written by Summary.save / describe --out"
        )
    if version != FORMAT:  # an older layout is refused, never read by special code
        raise DataError(
            f"summary {where}: it has format version {version!r}, this daskbatch reads {FORMAT}; "
            "describe the data again (or use the daskbatch that wrote it)"
        )


def _folders_without_metadata(where: str) -> list[str]:
    """The folders of a local summary that hold no zarr.json, where each of its nodes has one (none from a URL)."""
    # zarr passes over such a folder with a warning, and the summary would then be refused as changed.
    if "://" in where:
        return []
    lost = []
    for folder, subfolders, files in os.walk(where):
        subfolders[:] = [name for name in subfolders if not name.startswith(".")]  # a tool's own (.ipynb_checkpoints)
        if "zarr.json" not in files:
            lost.append(os.path.relpath(folder, where))
            subfolders.clear()
            continue
        try:
            with open(os.path.join(folder, "zarr.json")) as f:
                array = json.load(f).get("node_type") == "array"
        except (OSError, ValueError, AttributeError):  # a damaged one: the reads that follow name it
            array = True
        if array:  # the folders of its chunks are no nodes
            subfolders.clear()
    return sorted(lost)
