"""``daskbatch report``: a summary, saved or described now from a store, as one self-contained HTML file."""

from __future__ import annotations

import os

import click

from daskbatch.cli._common import is_quiet, main, user_errors
from daskbatch.io.outputs import output_kind
from daskbatch.summary import load_summary
from daskbatch.summary.report import report_target, write_report


@main.command("report")
@click.argument("source", metavar="STORE|SUMMARY")
@click.option(
    "-o",
    "--out",
    required=True,
    type=click.Path(dir_okay=False),
    help="The HTML file to write: a new path, or a report daskbatch wrote (nothing else is replaced).",
)
@click.option(
    "--reference",
    type=click.Path(exists=True),
    default=None,
    help="A saved summary of reference data (describe --out): adds the drift section.",
)
@click.option("--title", default=None, help="The page's title [default: names the source].")
@user_errors
def report_command(source: str, out: str, reference: str | None, title: str | None) -> None:
    """Write the profile report of STORE|SUMMARY to --out: one HTML file that opens offline.

    STORE|SUMMARY is a summary written by ``describe --out`` (read without touching
    the data again) or a Zarr store, described first with the defaults of
    ``daskbatch describe``. The page holds an overview with the warnings, a
    searchable section per feature (histogram, quantiles, extremes, class
    histograms, MI rank, most correlated features), the correlation heat map
    and top pairs, the MI ranking, and with --reference the drift.
    """
    protected = {"the STORE|SUMMARY": source, "the --reference summary": reference}
    report_target(out, protected)  # before anything is read or described
    # A bad --reference fails before a store is described.
    drift_from = load_summary(reference) if reference is not None else None
    if output_kind(source) == "summary":
        summary = load_summary(source)
    elif "://" not in source and not os.path.exists(source):
        raise FileNotFoundError(f"no store or summary at {source}: the path does not exist")
    else:
        from daskbatch.describing import describe  # lazy: dask

        summary = describe(source)
    written = write_report(summary, out, reference=drift_from, title=title, protected=protected)
    if not is_quiet():
        click.echo(f"report written to {written}")
