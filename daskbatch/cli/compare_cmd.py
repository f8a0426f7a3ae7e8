"""``daskbatch compare REFERENCE NEW``: per-feature drift between two saved summaries, reading no data."""

from __future__ import annotations

import json

import click

import daskbatch as db
from daskbatch.cli._group import main, user_errors

__all__ = ["compare_command"]


@main.command("compare")
@click.argument("reference")
@click.argument("new")
@click.option("--top", type=click.IntRange(min=1), default=20, show_default=True, help="Rows of the table to print.")
@click.option(
    "--by", type=click.Choice(["psi", "js_divergence", "ks_upper", "mean_shift", "var_ratio"]), default="psi",
    show_default=True, help="Rank the features by this column.",
)
@click.option("--json", "json_path", type=click.Path(), default=None, help="Write the report as JSON ('-' for stdout).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None, help="Save the PSI figure (.png, .svg, .pdf).")
@click.option("--overwrite", is_flag=True, help="Let --json replace a file that is not a drift report.")
@user_errors
def compare_command(
    reference: str, new: str, top: int, by: str, json_path: str | None, plot_path: str | None, overwrite: bool,
) -> None:
    """Compare the summary in NEW with the one in REFERENCE (both written by ``describe --out``).

    Prints the features that drifted most: mean shift in reference standard
    deviations, variance ratio, PSI and Jensen-Shannon divergence of the
    histograms, bounds on the Kolmogorov-Smirnov statistic, and the changes of
    the out-of-range, NaN and MI figures. The histogram columns need NEW to be
    described on REFERENCE's bins: ``daskbatch describe DATA --like REFERENCE``.
    """
    drift = db.compare(db.load_summary(reference), db.load_summary(new))
    if json_path == "-":
        click.echo(json.dumps(drift.to_json()))
        return
    click.echo(f"drift of {len(drift.table)} features: {drift.rows[1]:,} rows against {drift.rows[0]:,}")
    click.echo(drift.top(top, by).to_string(float_format=lambda v: f"{v:.4g}"))
    if json_path is not None:
        click.echo(f"report written to {drift.save(json_path, overwrite=overwrite)}")
    if plot_path is not None:
        drift.plot(k=top).savefig(plot_path)
        click.echo(f"figure written to {plot_path}")
