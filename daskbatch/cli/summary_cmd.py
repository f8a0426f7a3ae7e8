"""The commands on saved summaries: ``select`` (features, with the reason for every drop), ``transform`` (a store into a new store, resumably), ``compare`` (drift between two summaries) and ``report`` (one self-contained HTML file); and ``run``, the whole batch job (describe, select, transform) from one YAML file."""

from __future__ import annotations

import json
import os
import warnings

import click

import daskbatch as db
from daskbatch.cli._common import (
    EXIT_INTERRUPTED,
    exit_lost_scheduler,
    is_lost_scheduler,
    is_quiet,
    leave,
    main,
    one_line_distributed_logs,
    report,
    user_errors,
)
from daskbatch.cli.options import allow_dask_config_option, device_option
from daskbatch.engine.checkpoint_files import interrupted_message
from daskbatch.errors import Interrupted
from daskbatch.io.outputs import (
    OutputError,
    check_output,
    check_outputs,
    check_separate,
    output_kind,
    write_json,
    write_output,
)
from daskbatch.jobs.spec import load_job, reference
from daskbatch.runtime.runlock import sigterm_as_interrupt
from daskbatch.summary.compare import EXACT_ADVICE
from daskbatch.summary.report import report_target, write_report


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
@click.option("--overwrite", is_flag=True, help="Replace an existing --out file that daskbatch wrote but is not a saved selection "
              "(never a file daskbatch did not write).")
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
    report(f"{n} of {len(selection.feature_names)} features selected by {score} ({mode}={selection.param})")
    table = selection.to_dataframe().sort_values("rank")
    report(table.head(30).to_string(float_format=lambda v: f"{v:.6g}"))
    if len(table) > 30:
        report(f"... {len(table) - 30} more features")
    if out is not None:
        selection.save(out, overwrite=overwrite)
        report(f"selection written to {out}")


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
@device_option("gpu: copy each block to the GPU once; auto: compute where the blocks are.")
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
            written = db.transform(
                dataset, steps, out, overwrite=overwrite, chunk_rows=chunk_rows, dtype=dtype, device=device,  # type: ignore[arg-type]
                progress=progress and not is_quiet(),
            )
    except (Interrupted, KeyboardInterrupt) as exc:
        why = str(exc) if isinstance(exc, Interrupted) else "run the same command again to resume"
        click.echo(f"interrupted: {why}", err=True)
        leave(EXIT_INTERRUPTED, now=True)
    report(written.summary())


#: compare's advice for exact rebinned figures, in this command line's words.
CLI_EXACT_ADVICE = "describing the new data with --like REFERENCE makes them exact"


@main.command("compare")
@click.argument("reference")
@click.argument("new")
@click.option("--top", type=click.IntRange(min=1), default=20, show_default=True, help="Rows of the table to print.")
@click.option("--by", type=click.Choice(["psi", "js_divergence", "ks", "ks_pvalue", "ks_upper", "chi2_pvalue",
                                         "wasserstein", "mean_shift", "var_ratio"]),
              default="psi", show_default=True, help="Rank the features by this column (p-values smallest first).")
@click.option("--json", "json_path", type=click.Path(), default=None, help="Write the report as JSON ('-' for stdout).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="Save the PSI figure (.png, .svg, .pdf).")
@click.option("--overwrite", is_flag=True, help="Let --json replace another daskbatch output (never a file daskbatch did not "
              "write), and --plot an existing file. The summaries compared are never written over.")
@user_errors
def compare_command(
    reference: str, new: str, top: int, by: str, json_path: str | None, plot_path: str | None, overwrite: bool,
) -> None:
    """Compare the summary in NEW with the one in REFERENCE (both written by ``describe --out``).

    Prints the features that drifted most: mean shift in reference standard
    deviations, variance ratio, PSI and Jensen-Shannon divergence of the
    histograms, the Kolmogorov-Smirnov statistic with its error bound and
    p-value, chi2 on the histogram cells, Wasserstein-1, and the changes of the
    out-of-range, NaN and MI figures. NEW described on REFERENCE's bins
    (``daskbatch describe DATA --like REFERENCE``) makes PSI, JS and chi2
    exact; otherwise NEW's counts are read on REFERENCE's bins, with a
    RebinnedWarning that gives the error bound where that is not exact.
    """
    # Both outputs are checked, against the disk, the inputs and each other, before anything is read or written.
    figure_format = _figure_format(plot_path) if plot_path is not None else None
    targets = check_outputs(
        {"--json": (None if json_path == "-" else json_path, "drift", "file"), "--plot": (plot_path, "figure", "file")},
        overwrite=overwrite, protected={"the REFERENCE summary": reference, "the NEW summary": new},
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        drift = db.compare(db.load_summary(reference), db.load_summary(new))
    for caught_warning in caught:  # the API's advice, said as this command line says it
        message = str(caught_warning.message).replace(EXACT_ADVICE, CLI_EXACT_ADVICE)
        warnings.warn(message, caught_warning.category, stacklevel=1)
    # With --json - stdout carries the JSON alone (json.load reads it): the rest goes to stderr.
    to_stderr = json_path == "-"
    if to_stderr:
        click.echo(json.dumps(drift.to_json()))
    else:
        report(f"drift of {len(drift.to_dataframe())} features: {drift.rows[1]:,} rows against {drift.rows[0]:,}")
        report(drift.top(top, by).to_string(float_format=lambda v: f"{v:.4g}"))
    if "--json" in targets:
        report(f"report written to {write_json(targets['--json'], drift.to_json())}")
    if "--plot" in targets:
        figure = drift.plot(k=top)
        # The temporary file's name has no image suffix: the format is given.
        written = write_output(targets["--plot"], lambda tmp: figure.savefig(tmp, format=figure_format))
        report(f"figure written to {written}", err=to_stderr)


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
    drift_from = db.load_summary(reference) if reference is not None else None
    if output_kind(source) == "summary":
        summary = db.load_summary(source)
    elif "://" not in source and not os.path.exists(source):
        raise FileNotFoundError(f"no store or summary at {source}: the path does not exist")
    else:
        from daskbatch.describing import describe  # lazy: dask

        summary = describe(source)
    written = write_report(summary, out, reference=drift_from, title=title, protected=protected)
    report(f"report written to {written}")


_EPILOG = (
    "Exit codes: 0 ok, 1 failure, 2 bad input (an unknown key, a wrong type, a missing store), "
    "3 the plan does not fit the memory budget, 75 interrupted (run the same command again to resume).\n\n"
    "Every key of the job, with its default. The file is dask config: the job under daskbatch: job:, "
    "dask settings beside it; the same keys can be set in any dask config as daskbatch.job.<section>.<key>, "
    "e.g. DASK_DASKBATCH__JOB__CLUSTER__KIND=threads; the file wins:\n\n"
    "\b\n"
)


class _JobCommand(click.Command):
    """A command whose epilog ends with every key of the job and its default, read when the help is shown."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # The defaults live in dask config (daskbatch.yaml): reading them imports dask, which
        # `daskbatch --help` does not load; only this command's help renders them.
        self.epilog = _EPILOG + reference()
        super().format_epilog(ctx, formatter)


@main.command("run", cls=_JobCommand, epilog=_EPILOG)
@click.argument("job_file", metavar="JOB", type=click.Path(dir_okay=False))
@allow_dask_config_option("the job file")
@click.option(
    "--overwrite",
    is_flag=True,
    help="Let the job's outputs replace existing paths that daskbatch did not write (never the input, nor a "
    "file at outputs.selection that daskbatch did not write, and no two outputs may overlap).",
)
@user_errors
def run_command(job_file: str, allow_dask_config: bool, overwrite: bool) -> None:
    """Run the batch job described by the YAML file JOB.

    Describes the input store within the memory budget, selects features from
    the summary, writes the rows through the transform steps into a new store,
    and writes a JSON report (versions, plan, counts, missing chunks, timings,
    peak memory, outputs). The log (stderr) shows the plan, each phase's time
    and the peak memory, and ends with one summary line. Every output is
    checked before any compute: a job whose outputs overlap the input or each
    other, or would replace a path daskbatch did not write, writes nothing.
    """
    from daskbatch.jobs.run import job_kind, run_job  # lazy: dask, zarr

    job = load_job(job_file)[0]  # run_job reads it again: refusals of a bad file are its own
    if job_kind(job) != "threads":
        import distributed  # noqa: F401 - sets up the log handlers one_line_distributed_logs quiets  # lazy: distributed
    try:
        # SIGTERM (a batch system's walltime warning) stops at a checkpoint or block boundary. Losing the
        # scheduler makes distributed log tracebacks while the client closes: kept to one line each.
        with sigterm_as_interrupt(), one_line_distributed_logs():
            run_job(job_file, allow_dask_config=allow_dask_config, overwrite=overwrite)
    except (Interrupted, KeyboardInterrupt) as exc:
        click.echo(f"{interrupted_message(exc, job.checkpoint, 'checkpoint in the job file')} (a transform under "
                   "way resumes from its finished blocks too)", err=True)
        leave(EXIT_INTERRUPTED, now=True)
    except Exception as exc:
        if not is_lost_scheduler(exc, connecting=False):  # as user_errors and the job's report tell it
            raise
        exit_lost_scheduler(exc, job.checkpoint, "checkpoint in the job file",
                            unkept="the describe's finished blocks were not kept (a transform under way keeps its own)")
