"""``daskbatch synth``, ``daskbatch ingest`` and ``daskbatch inspect``: thin shells over the data layer."""

from __future__ import annotations

import json

import click

from daskbatch.cli._group import EXIT_INTERRUPTED, main, user_errors
from daskbatch.cli._logging import is_quiet
from daskbatch.runtime.interrupts import exit_now


@main.command("synth")
@click.argument("out", type=click.Path())
@click.option("--rows", type=click.IntRange(min=0), required=True, help="Number of samples.")
@click.option("--features", type=click.IntRange(min=1), required=True, help="Number of features.")
@click.option(
    "--classes",
    type=click.IntRange(min=2),
    default=None,
    help="Add an int32 label y with K classes.",
)
@click.option(
    "--informative",
    type=click.IntRange(min=0),
    default=None,
    help="Features with class-dependent means.",
)
@click.option(
    "--correlated",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Features that mix two others.",
)
@click.option("--chunk-rows", type=click.IntRange(min=1), default=65536, show_default=True)
@click.option(
    "--dtype", type=click.Choice(["float32", "float64"]), default="float32", show_default=True
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--overwrite", is_flag=True, help="Replace OUT if it exists.")
@user_errors
def synth_cmd(
    out: str,
    rows: int,
    features: int,
    classes: int | None,
    informative: int | None,
    correlated: int,
    chunk_rows: int,
    dtype: str,
    seed: int,
    overwrite: bool,
) -> None:
    """Write a deterministic synthetic dataset (Zarr v3: X, y) with ground truth in its attrs."""
    import time

    from daskbatch.io.synth import synth

    t0 = time.perf_counter()
    ds = synth(
        rows,
        features,
        classes=classes,
        informative=informative,
        correlated=correlated,
        chunk_rows=chunk_rows,
        dtype=dtype,
        seed=seed,
        path=out,
        overwrite=overwrite,
    )
    click.echo(
        f"wrote {rows:,} rows x {features:,} features ({ds.x.dtype}"
        f"{f', {classes} classes' if classes else ''}) to {out} in {time.perf_counter() - t0:.1f} s"
    )


@main.command("ingest")
@click.argument("paths", nargs=-1, required=True, metavar="SOURCES... OUT.zarr")
@click.option("--x-key", default=None, help="Array key in .npz/HDF5/Zarr sources [default: X].")
@click.option(
    "--label-key", default=None, help="Key of a 1-D label array in each source (written as y)."
)
@click.option("--dtype", default=None, help="Output dtype [default: the sources' dtype].")
@click.option(
    "--chunk-rows",
    type=click.IntRange(min=1),
    default=None,
    help="Rows per output chunk [default: ~16 MiB].",
)
@click.option(
    "--compressor", type=click.Choice(["zstd", "lz4", "none"]), default="zstd", show_default=True
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="Chunks written in parallel [default: CPUs].",
)
@click.option(
    "--overwrite",
    is_flag=True,
    help="Replace OUT if it exists (otherwise an unfinished ingest resumes).",
)
@user_errors
def ingest_cmd(
    paths: tuple[str, ...],
    x_key: str | None,
    label_key: str | None,
    dtype: str | None,
    chunk_rows: int | None,
    compressor: str,
    workers: int | None,
    overwrite: bool,
) -> None:
    """Copy batch files (.npy, .npz, .h5, Zarr; globs allowed) into one Zarr store OUT.zarr.

    Re-running the same command after an interruption finishes the remaining chunks.
    """
    from daskbatch.io.ingest import ingest

    if len(paths) < 2:
        raise click.UsageError("give at least one source and the output store")
    *sources, out = paths
    try:
        report = ingest(
            sources,
            out,
            x_key=x_key,
            label_key=label_key,
            dtype=dtype,
            chunk_rows=chunk_rows,
            compressor=compressor,
            workers=workers,
            overwrite=overwrite,
            progress=not is_quiet(),  # drawn on a terminal only; the log has start and end
        )
    except KeyboardInterrupt:
        click.echo(
            f"interrupted: {out} is incomplete; run the same command again to resume", err=True
        )
        exit_now(EXIT_INTERRUPTED)
    if not is_quiet():
        click.echo(report.summary())


@main.command("inspect")
@click.argument("store")
@click.option(
    "-x", "--x", "x_name", default="X", show_default=True, help="Samples x features array."
)
@click.option("--label", default=None, help="Label array [default: as recorded by daskbatch].")
@click.option("--json", "as_json", is_flag=True, help="Print provenance as JSON.")
@user_errors
def info_cmd(store: str, x_name: str, label: str | None, as_json: bool) -> None:
    """Describe a Zarr store: arrays, shape, chunks, feature names, missing chunks.

    Reads metadata and the store's key listing only: missing chunks (of X and
    the label) are found, but no chunk is decoded, so corrupt or truncated
    chunks are not; `daskbatch verify STORE` decodes and checks every chunk.
    """
    import warnings

    from daskbatch.io.dataset import open_dataset

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # "fill": list missing chunks instead of refusing; nothing is read here.
        ds = open_dataset(store, x=x_name, label=label, missing="fill")
    not_decoded = f"chunks not decoded: run daskbatch verify {store}"
    if as_json:
        click.echo(json.dumps({**ds.provenance(), "chunks_decoded": False, "note": not_decoded}, indent=2))
    else:
        click.echo(repr(ds))
        click.echo(f"  {not_decoded}")
    for w in caught:
        click.echo(f"warning: {w.message}", err=True)
