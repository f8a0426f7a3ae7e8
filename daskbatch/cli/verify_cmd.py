"""``daskbatch verify STORE``: decode every chunk and report missing, corrupt and truncated ones."""

from __future__ import annotations

import json
import sys

import click

from daskbatch.cli._group import EXIT_FAILURE, main, user_errors

__all__ = ["verify_command"]


@main.command("verify")
@click.argument("store")
@click.option(
    "--threads", type=click.IntRange(min=1), default=None,
    help="Chunks decoded at once [default: CPU count, at most 8]; memory is about this many chunks.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@user_errors
def verify_command(store: str, threads: int | None, as_json: bool) -> None:
    """Decode and check every chunk of every array in STORE (a Zarr path or fsspec URL).

    Reports chunks that are missing (absent from an array daskbatch wrote: it
    stores every chunk, so they were lost), corrupt (checksum mismatch or
    undecodable) or truncated, by key and grid position; inner chunks of
    shards included. Chunks absent from an array of another writer are listed
    as "absent (fill value)": zarr, xarray and dask leave out chunks that hold
    only the fill value. Exit code 0 when every stored chunk decodes and none
    was lost, 1 otherwise, 2 when STORE cannot be opened or has more chunks
    than daskbatch.max-chunks.
    """
    from daskbatch.io.verify import verify_store  # lazy: dask, zarr

    report = verify_store(store, threads=threads)
    click.echo(json.dumps(report.to_dict(), indent=2) if as_json else report.summary())
    if not report.ok:
        sys.exit(EXIT_FAILURE)
