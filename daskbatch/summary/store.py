"""A summary onto disk: :func:`save_summary` (checked, staged, renamed into place); :mod:`daskbatch.summary.load` reads it back."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from daskbatch.io.outputs import MARKER, check_output, checksummed, write_output, zarr_target
from daskbatch.runtime.runlock import summary_lock

if TYPE_CHECKING:
    from daskbatch.summary.record import Summary

__all__ = ["save_summary"]


def save_summary(summary: Summary, path: str | os.PathLike[str], *, overwrite: bool = False) -> str:
    """Write the summary to a Zarr store at ``path`` (read back with :func:`daskbatch.load_summary`)."""
    from daskbatch.io.state_codec import (  # lazy: dask, zarr
        check_savable,
        results_digest,
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
        # A local "a::b.zarr" is written as that path, not read as a chained URL.
        ds.to_zarr(zarr_target(tmp), mode="w-", consolidated=False, encoding=_checksummed_encoding(ds), write_empty_chunks=True)
        if summary.states is not None:
            write_states(tmp, summary.states, results)

    # The lock ``describe --update`` holds: a summary being updated is not replaced under it.
    with summary_lock(path):
        return write_output(target, _write)


def _checksummed_encoding(ds: Any) -> dict[str, dict[str, Any]]:
    """Zarr encoding giving every variable zstd plus a CRC-32C checksum (a changed byte fails the read)."""
    from zarr.codecs import ZstdCodec  # lazy: zarr

    return {name: {"compressors": checksummed(ZstdCodec())} for name in ds.variables}
