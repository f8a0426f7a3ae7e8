"""``daskbatch transform``: select, standardize, clip and project a store into a new store, resumably."""

from __future__ import annotations

import click

import daskbatch as db
from daskbatch.cli._group import EXIT_INTERRUPTED, main, user_errors
from daskbatch.cli._logging import is_quiet
from daskbatch.cli.options import device_option
from daskbatch.config import packaged
from daskbatch.errors import Interrupted
from daskbatch.io.outputs import check_separate
from daskbatch.runtime.interrupts import exit_now, sigterm_as_interrupt


def _bounds(text: str) -> tuple[float | None, float | None]:
    lo, sep, hi = text.partition(":")
    if not sep:
        raise click.BadParameter(f"expected LO:HI (either may be empty), got {text!r}", param_hint="--clip")
    try:
        return (float(lo) if lo.strip() else None), (float(hi) if hi.strip() else None)
    except ValueError:
        raise click.BadParameter(f"expected numbers LO:HI, got {text!r}", param_hint="--clip") from None


def _pca_spec(text: str) -> tuple[str, int]:
    path, sep, k = text.rpartition(":")
    if not sep or not path or not k.strip().isdigit():
        raise click.BadParameter(f"expected STATS:K (a summary store and a number of components), got {text!r}",
                                 param_hint="--pca")
    return path, int(k)


@main.command("transform")
@click.argument("store", metavar="STORE")
@click.option("--select", "selection", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Keep the features of a selection (written by `daskbatch select --out`).")
@click.option("--standardize", metavar="STATS", type=click.Path(exists=True), default=None,
              help="z-scores from the mean and std of this summary (`describe --out`); constant features give 0.")
@click.option("--clip", "clip_", metavar="LO:HI", default=None, help="Limit values to [LO, HI]; either side may be empty.")
@click.option("--pca", "pca_", metavar="STATS:K", default=None,
              help="Project onto the first K principal components of the covariance in STATS.")
@click.option("--out", required=True, type=click.Path(), help="The output Zarr store.")
@click.option("--overwrite", is_flag=True, help="Start again over an existing daskbatch output (never other data).")
@click.option("--label", default=None, help="Name of a label array in STORE to carry through (default: the store's).")
@click.option("--chunk-rows", type=click.IntRange(min=1), default=None, help="Rows per block and output chunk.")
@click.option("--dtype", type=click.Choice(["float32", "float64"]), default=None, help="Output dtype [default: float64 after arithmetic].")
@device_option(packaged("job.cluster.device"), "gpu: copy each block to the GPU once; auto: compute where the blocks are.")
@click.option("--progress/--no-progress", default=True, show_default=True,
              help="Progress bar on stderr, when stderr is a terminal (the log records start and end either way).")
@user_errors
def transform_command(
    store: str, selection: str | None, standardize: str | None, clip_: str | None, pca_: str | None, out: str,
    overwrite: bool, label: str | None, chunk_rows: int | None, dtype: str | None, device: str,
    progress: bool,
) -> None:
    """Write STORE's rows through the given steps into a new Zarr store (--out).

    Steps run in this order: --select, --standardize, --clip, --pca. An
    interrupted run (Ctrl-C, SIGTERM, a killed job) resumes when the same
    command is run again: only the missing row blocks are computed.
    """
    # The files the steps read are inputs too: never written over, even with --overwrite.
    check_separate(out, "--out", {"the --select selection": selection, "the --standardize summary": standardize,
                                  "the --pca summary": _pca_spec(pca_)[0] if pca_ is not None else None})
    steps: list[object] = []
    if selection is not None:
        steps.append(db.steps.select(db.load_selection(selection)))
    if standardize is not None:
        steps.append(db.steps.standardize(db.load_summary(standardize)))
    if clip_ is not None:
        steps.append(db.steps.clip(*_bounds(clip_)))
    if pca_ is not None:
        path, k = _pca_spec(pca_)
        steps.append(db.steps.project(db.load_summary(path), k))
    if not steps:
        raise click.UsageError("give at least one step: --select, --standardize, --clip or --pca")
    dataset = db.open_dataset(store, label=label) if label is not None else store
    try:
        # SIGTERM before the blocks run (opening the store, building the graph) ends the run too, resumably.
        with sigterm_as_interrupt():
            report = db.transform(
                dataset, steps, out, overwrite=overwrite, chunk_rows=chunk_rows, dtype=dtype, device=device,  # type: ignore[arg-type]
                progress=progress and not is_quiet(),
            )
    except (Interrupted, KeyboardInterrupt) as exc:
        why = str(exc) if isinstance(exc, Interrupted) else "run the same command again to resume"
        click.echo(f"interrupted: {why}", err=True)
        exit_now(EXIT_INTERRUPTED)
    if not is_quiet():
        click.echo(report.summary())
