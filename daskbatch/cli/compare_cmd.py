"""``daskbatch compare REFERENCE NEW``: per-feature drift between two saved summaries, reading no data."""

from __future__ import annotations

import json
import os

import click

import daskbatch as db
from daskbatch.cli._group import main, user_errors
from daskbatch.io.outputs import OutputError, check_outputs, write_json, write_output

__all__ = ["compare_command"]


@main.command("compare")
@click.argument("reference")
@click.argument("new")
@click.option(
    "--top",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="Rows of the table to print.",
)
@click.option(
    "--by",
    type=click.Choice(["psi", "js_divergence", "ks_upper", "mean_shift", "var_ratio"]),
    default="psi",
    show_default=True,
    help="Rank the features by this column.",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(),
    default=None,
    help="Write the report as JSON ('-' for stdout).",
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Save the PSI figure (.png, .svg, .pdf).",
)
@click.option(
    "--overwrite",
    is_flag=True,
    help="Let --json replace a file that is not a drift report, and --plot an existing file. "
    "The summaries compared are never written over.",
)
@user_errors
def compare_command(
    reference: str,
    new: str,
    top: int,
    by: str,
    json_path: str | None,
    plot_path: str | None,
    overwrite: bool,
) -> None:
    """Compare the summary in NEW with the one in REFERENCE (both written by ``describe --out``).

    Prints the features that drifted most: mean shift in reference standard
    deviations, variance ratio, PSI and Jensen-Shannon divergence of the
    histograms, bounds on the Kolmogorov-Smirnov statistic, and the changes of
    the out-of-range, NaN and MI figures. The histogram columns need NEW to be
    described on REFERENCE's bins: ``daskbatch describe DATA --like REFERENCE``.
    """
    # Both outputs are checked, against the disk, the inputs and each other, before anything is read or written.
    figure_format = _figure_format(plot_path) if plot_path is not None else None
    targets = check_outputs(
        {
            "--json": (None if json_path == "-" else json_path, "drift", "file"),
            "--plot": (plot_path, "figure", "file"),
        },
        overwrite=overwrite,
        protected={"the REFERENCE summary": reference, "the NEW summary": new},
    )
    drift = db.compare(db.load_summary(reference), db.load_summary(new))
    # With --json - stdout carries the JSON alone (json.load reads it): the rest goes to stderr.
    to_stderr = json_path == "-"
    if to_stderr:
        click.echo(json.dumps(drift.to_json()))
    else:
        click.echo(
            f"drift of {len(drift.table)} features: {drift.rows[1]:,} rows against {drift.rows[0]:,}"
        )
        click.echo(drift.top(top, by).to_string(float_format=lambda v: f"{v:.4g}"))
    if "--json" in targets:
        click.echo(f"report written to {write_json(targets['--json'], drift.to_json())}")
    if "--plot" in targets:
        figure = drift.plot(k=top)
        # The temporary file's name has no image suffix: the format is given.
        written = write_output(
            targets["--plot"], lambda tmp: figure.savefig(tmp, format=figure_format)
        )
        click.echo(f"figure written to {written}", err=to_stderr)


def _figure_format(path: str) -> str:
    """The image format ``path``'s suffix names (matplotlib's default without one); OutputError for an unknown one."""
    from matplotlib import rcParams  # lazy: matplotlib
    from matplotlib.backend_bases import FigureCanvasBase  # lazy: matplotlib

    suffix = os.path.splitext(path)[1].lstrip(".").lower()
    known = FigureCanvasBase.get_supported_filetypes()
    if not suffix:
        return str(rcParams["savefig.format"])
    if suffix not in known:
        raise OutputError(
            f"--plot {path}: .{suffix} is not an image format; end the name in one of .{', .'.join(sorted(known))}"
        )
    return suffix
