"""``daskbatch select``: choose features from a saved summary, with the reason for every drop."""

from __future__ import annotations

import click

import daskbatch as db
from daskbatch.cli._group import main, user_errors
from daskbatch.io.outputs import check_output


@main.command("select")
@click.argument("stats_store", metavar="STATS")
@click.option(
    "--score", type=click.Choice(["f", "chi2", "mi", "variance", "mrmr", "f_regression", "r_regression"]),
    default="f", show_default=True,
    help="f: ANOVA F; chi2; mi: binned mutual information; variance; mrmr: MI minus mean |corr| (greedy); "
    "f_regression, r_regression: against a continuous target (describe --target).",
)
@click.option("--k", "k", default=None, help="Keep the k best features (an integer or 'all') [default mode, k=10].")
@click.option("--percentile", type=click.FloatRange(0, 100), default=None, help="Keep this percent of the features.")
@click.option("--fpr", type=click.FloatRange(0, 1), default=None, help="Keep p < FPR.")
@click.option("--fdr", type=click.FloatRange(0, 1), default=None, help="Benjamini-Hochberg at this false discovery rate.")
@click.option("--fwe", type=click.FloatRange(0, 1), default=None, help="Keep p < FWE / number of features (Bonferroni).")
@click.option("--min-variance", type=click.FloatRange(min=0), default=None, help="First drop features whose (ddof=0) variance is not above this.")
@click.option("--max-corr", type=click.FloatRange(0, 1), default=None, help="Then, of each pair with |corr| above this, keep the more relevant.")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Write the selection (.csv, or .json).")
@click.option("--overwrite", is_flag=True, help="Replace an existing --out file that is not a saved selection.")
@user_errors
def select_command(
    stats_store: str, score: str, k: str | None, percentile: float | None, fpr: float | None,
    fdr: float | None, fwe: float | None, min_variance: float | None, max_corr: float | None, out: str | None,
    overwrite: bool,
) -> None:
    """Select features from the summary in STATS (written by ``describe --out``), reading no data.

    One of --k, --percentile, --fpr, --fdr, --fwe picks the mode (default --k 10);
    f and chi2 need a summary described with --label and --stats ...,class_moments;
    f_regression and r_regression one described with --target.
    """
    given = {name: v for name, v in (("k", k), ("percentile", percentile), ("fpr", fpr), ("fdr", fdr), ("fwe", fwe))
             if v is not None}
    if len(given) > 1:
        raise click.UsageError(f"give one of --k, --percentile, --fpr, --fdr, --fwe; got {', '.join('--' + g for g in given)}")
    mode, param = next(iter(given.items())) if given else ("k", None)
    if mode == "k" and param is not None and param != "all":
        try:
            param = int(param)
        except ValueError:
            raise click.BadParameter(f"expected an integer or 'all', got {param!r}", param_hint="--k") from None
    if out is not None:  # before reading anything
        check_output(out, kind="selection", form="file", what="--out", overwrite=overwrite,
                     protected={"the summary STATS": stats_store})
    summary = db.load_summary(stats_store)
    selection = db.select(
        summary, score=score, mode=mode, param=param, min_variance=min_variance, max_corr=max_corr,  # type: ignore[arg-type]
    )
    n = int(selection.selected.sum())
    click.echo(f"{n} of {len(selection.feature_names)} features selected by {score} ({mode}={selection.param})")
    table = selection.to_dataframe().sort_values("rank")
    click.echo(table.head(30).to_string(float_format=lambda v: f"{v:.6g}"))
    if len(table) > 30:
        click.echo(f"... {len(table) - 30} more features")
    if out is not None:
        selection.save(out, overwrite=overwrite)
        click.echo(f"selection written to {out}")
