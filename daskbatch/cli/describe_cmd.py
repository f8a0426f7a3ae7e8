"""``daskbatch describe``: the full summary of a Zarr store, from a shell or a batch job."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any, cast

import click

from daskbatch._common import Device
from daskbatch.cli._common import (
    EXIT_INTERRUPTED,
    exit_lost_scheduler,
    is_lost_scheduler,
    is_quiet,
    leave,
    main,
    report,
    user_errors,
)
from daskbatch.cli.options import (
    client_from_options,
    cluster_options,
    config_option,
    device_option,
    job_option,
    parse_classes,
    table_options,
    table_report,
)
from daskbatch.engine.checkpoint_files import check_checkpoint_dir, interrupted_message
from daskbatch.errors import DataError, Interrupted
from daskbatch.io.outputs import OutputTarget, check_outputs, check_separate, write_json
from daskbatch.runtime.capacity import resources_from_client
from daskbatch.runtime.cluster import cli_kind
from daskbatch.runtime.runlock import sigterm_as_interrupt, summary_lock
from daskbatch.stats.moments import NanPolicy
from daskbatch.stats.spec import DEFAULT_STATS, check_statistic_names
from daskbatch.summary import load_summary

if TYPE_CHECKING:
    from daskbatch.planning.plan import Plan, Resources


def parse_range(text: str | None) -> tuple[float, float] | str | None:
    """Parse ``--range``: ``"LO:HI"`` -> (lo, hi); ``"minmax"`` passes through."""
    if text is None or text == "minmax":
        return text
    try:
        lo, hi = (float(v) for v in text.split(":"))
    except ValueError:
        raise click.BadParameter(f"expected LO:HI (e.g. -5:5) or minmax, got {text!r}") from None
    return lo, hi


@main.command("describe")
@click.argument("store")
@job_option("input.x", "--x", "x_name", help="Name of the (samples, features) array.")
@click.option("--label", default=None, help="Name of the integer label array (for mutual information).")
@click.option("--weights", "weights_name", default=None, metavar="NAME",
              help="Name of a 1-D array of non-negative sample weights in STORE (frequency weights, one per row).")
@click.option(
    "--target", "target_name", default=None, metavar="NAME",
    help="Name of a continuous target array in STORE (for select --score f_regression, r_regression, mi); "
    "excludes --label and --groups.",
)
@click.option(
    "--groups", "groups_name", default=None, metavar="NAME",
    help="Name of a 1-D integer array of group keys in STORE: moments (and with hist, histograms) of every "
    "feature within every group, in the same passes; --classes declares the group values. Excludes --label and --target.",
)
@click.option(
    "--classes", "classes_", default=None, metavar="V1,V2,...",
    help="Class values of the label (e.g. 0,1,7); a label outside them is an error. "
    "Default: recorded by the store, else found by scanning the label array.",
)
@click.option(
    "--stats", default=",".join(DEFAULT_STATS), show_default=True,
    help="Comma-separated statistics (mi and class_moments only with a label).",
)
@job_option("statistics.bins", "--bins", type=click.IntRange(min=1), help="Histogram bins per feature.")
@click.option("--range", "range_", default=None, metavar="LO:HI", help="Histogram range for every feature (one pass), or 'minmax'. Default: each feature's 0.1-99.9 % quantiles, widened by 5 %.")
@click.option(
    "--like", "like_path", type=click.Path(), default=None, metavar="STATS",
    help="Count the histograms on the bins of the saved summary STATS (its ranges, bins and classes), "
    "for 'daskbatch compare STATS NEW'.",
)
@job_option("statistics.ddof", "--ddof", type=click.IntRange(min=0))
@click.option(
    "--cov", "cov_rows", type=click.Choice(["complete", "pairwise"]), default="complete", show_default=True,
    help="Rows of the covariance and correlation. complete: the rows finite in every feature; pairwise: "
    "for each pair, the rows where both are finite (as pandas' DataFrame.cov and corr).",
)
@job_option(
    "statistics.missing", "--missing",
    help="Chunks absent from STORE. auto: as the writer meant (zarr, xarray and dask leave out chunks of "
    "fill values, so they read as the fill value; in a store daskbatch wrote they were lost: refuse); "
    "raise: refuse any (naming them); skip: compute on the rows whose chunks are present; fill: read "
    "zarr's fill values. Recorded in the summary's provenance.",
)
@job_option("statistics.nan_policy", "--nan-policy")
@click.option("--split-every", type=click.IntRange(min=2), default=None, help="Fan-in of the merge tree.")
@click.option("--out", type=click.Path(), default=None, help="Write the summary to this Zarr store.")
@click.option(
    "--update", "update_path", type=click.Path(), default=None, metavar="STATS",
    help="Add STORE's rows to the saved summary STATS: describe them with STATS's settings and histogram "
    "ranges, merge, and write the result to --out (default: replace STATS once complete).",
)
@click.option("--json", "json_path", type=click.Path(), default=None,
              help="Write the results as JSON ('-' for stdout): statistics, quantiles, provenance.")
@click.option("--json-states", is_flag=True,
              help="With --json, also the quantile sketch's buckets and the fine histogram behind the quantiles "
              "(large: up to 237 kB a feature; Summary.to_json(states=True)).")
@click.option(
    "--overwrite", is_flag=True,
    help="Let --out and --json replace a path that is not a daskbatch summary (an earlier summary is "
    "replaced anyway). The input store is never written over.",
)
@click.option("--checkpoint", type=click.Path(file_okay=False), default=None, help="Directory for resumable partial states.")
@click.option("--force", is_flag=True, help="Start afresh when --checkpoint holds another input's states.")
@click.option("--cov-out", type=click.Path(), default=None, help="Zarr store for a covariance too wide for one worker (computed tile by tile when the plan says so).")
@click.option("--cache/--no-cache", default=None, help="Keep decoded chunks in memory between the two passes, or read them twice. Default: keep them when they take at most daskbatch.cache-fraction of the workers' memory.")
@device_option(
    "Where the statistics run: gpu moves each block to the GPU once (CuPy); auto picks gpu "
    "when the workers are dask-cuda workers.",
)
@click.option("--progress/--no-progress", default=True, show_default=True,
              help="A progress bar per pass on stderr, when stderr is a terminal (the log records the passes either way).")
@click.option("--top", default=10, show_default=True, help="Rows of the correlated-pairs and MI tables.")
@table_options
@cluster_options
@config_option
@user_errors
def describe_command(
    store: str, x_name: str, label: str | None, weights_name: str | None, target_name: str | None,
    groups_name: str | None, classes_: str | None, stats: str,
    bins: int, range_: str | None,
    like_path: str | None, ddof: int, cov_rows: str,
    missing: str, nan_policy: str, split_every: int | None, out: str | None, update_path: str | None,
    json_path: str | None, overwrite: bool, checkpoint: str | None, force: bool, cov_out: str | None, cache: bool | None, device: str, progress: bool,
    top: int, table_rows: int, show_all: bool, json_states: bool,
    cluster: str, address: str | None, scheduler_file: str | None, wait_for_workers: int | None,
) -> None:
    """Per-feature statistics of the array X in STORE (a Zarr path or fsspec URL).

    Prints a table and writes the summary to --out (Zarr) and/or --json.
    Runs in this process on dask's threaded scheduler by default (with GPUs:
    one dask-cuda worker per GPU); --cluster local starts a local cluster, and
    --address / --scheduler-file join one. Exit code 75 means interrupted but
    resumable: run the same command again.
    """
    from daskbatch.describing import describe  # lazy: dask
    from daskbatch.engine.planner import plan_describe  # lazy: dask
    from daskbatch.engine.run_options import RunOptions  # lazy: dask
    from daskbatch.io.dataset import open_dataset  # lazy: dask, zarr
    from daskbatch.io.table_files import refuse_unreadable_path  # lazy: fsspec for URLs
    from daskbatch.io.tables import is_table_path, open_table  # lazy: dask
    from daskbatch.io.zarr_store import MissingPolicy  # lazy: dask, zarr
    from daskbatch.stats import Moments  # lazy: numpy

    quiet = is_quiet()
    if json_states and json_path is None:
        raise click.UsageError("--json-states adds to --json: give --json PATH (or --json -) too")
    check_statistic_names(stats)  # a misspelt name is refused before a cluster starts
    # click.Choice has validated --nan-policy.
    settings: dict[str, Any] = {
        "stats": [*stats.split(","), Moments(ddof=ddof, nan_policy=cast(NanPolicy, nan_policy))],
        "bins": bins, "range": parse_range(range_),
    }
    like = None
    if like_path is not None:
        if range_ is not None:
            raise click.UsageError("give --range or --like, not both: --like takes the saved summary's ranges")
        like = load_summary(like_path)
    previous = None
    if update_path is not None:
        previous, settings = update_settings(click.get_current_context(), update_path, store)
        recorded = settings.pop("run").split_every
        split_every = split_every or recorded  # a fan-in changes no setting
        out = update_path if out is None else out
    if cov_rows == "pairwise":
        settings["stats"] = _pairwise_cov(settings["stats"])
    # Every output path is checked before anything is opened or computed.
    # The summaries read are inputs too; an --update summary is the default --out, replaced on purpose.
    read = {"the --like summary": like_path,
            "the --update summary": None if update_path is None or _same_path(out, update_path) else update_path}
    targets = _check_outputs(store, out, json_path, cov_out, checkpoint, overwrite, read)
    if out is not None:
        # The summary's run lock, as --update takes it: held until the command ends, so that a summary
        # being updated is not replaced under the update (nor updated while this run writes it).
        click.get_current_context().with_resource(summary_lock(out))
    # click.Choice has validated --missing.
    refuse_unreadable_path(store)  # a missing path or a CSV file, named in one line
    dataset: Any = (
        open_table(store, label=label) if is_table_path(store)  # Parquet / Arrow IPC files: columns by name
        else open_dataset(store, x=x_name, label=label, missing=cast(MissingPolicy, missing))
    )
    for summary, option, path in ((previous, "--update", update_path), (like, "--like", like_path)):
        if summary is not None and len(summary.feature_names) != dataset.x.shape[1]:  # before any data is read
            raise DataError(f"{option} {path} has {len(summary.feature_names):,} features and {store} "
                            f"{dataset.x.shape[1]:,}: give a store of the same features")
    if previous is not None and update_path is not None:
        from daskbatch.incremental import check_not_merged, labelled_statistics  # lazy: dask

        labelled = labelled_statistics(previous)  # the label is given, or the one the store records
        if labelled and dataset.label is None:
            raise click.UsageError(f"{update_path} holds {' and '.join(labelled)}: give the new rows' --label "
                                   "(the store records none)")
        check_not_merged(previous, dataset, f"the rows of {store}")  # the same store twice would count its rows twice
    if cov_out is None and out is not None:
        cov_out = f"{out.rstrip('/')}.cov.zarr"
    classes = parse_classes(classes_)
    _check_roles(label, target_name, groups_name)
    # Names of arrays in STORE: describe reads them aligned with its rows (or refuses, naming the problem).
    settings.update(target=target_name, groups=groups_name, weights=weights_name, classes=classes)
    if not (address or scheduler_file) and cluster != "threads":
        cluster = cli_kind(cluster)  # "auto" decided once, here: cuda or threads
    if cluster == "local" and not (address or scheduler_file):
        # The kernels compiled (or loaded) once, here, before the worker processes start: each would
        # otherwise compile the same ones at once on a cold cache.
        from daskbatch.precompile import prepare_kernels  # lazy: dask

        prepare_kernels(dataset.x.dtype, None if dataset.label is None else dataset.label.dtype,
                        settings["stats"], settings["range"])

    def plan_for(gpus: Resources) -> Plan:
        """The plan for this machine's GPUs, which sizes a cuda cluster's RMM pool (exit 3 if it cannot fit)."""
        return plan_describe(dataset, stats=settings["stats"], bins=settings.get("bins"), range=settings.get("range"),
                             split_every=split_every, resources=gpus, classes=classes, target=target_name,
                             groups=groups_name, weights=weights_name)

    connected = False  # a comm error before that is a wrong address (bad input), after it a lost scheduler
    try:
        # SIGTERM (a batch system's walltime warning) finishes the checkpoint write in flight.
        with sigterm_as_interrupt(), client_from_options(
            cluster, address, scheduler_file, plan_for, wait_for_workers=wait_for_workers
        ) as client:
            connected = True
            if device == "auto":
                device = "gpu" if client is not None and resources_from_client(client).device == "gpu" else "cpu"
            summary = describe(dataset, **settings, run=RunOptions(
                progress=progress and not quiet, checkpoint=checkpoint, force=force, cov_out=cov_out,
                cache="auto" if cache is None else cache, split_every=split_every, like=like,
                device=cast(Device, device),  # "auto" was resolved to cpu or gpu above
            ))
            if previous is not None:
                from daskbatch.incremental import merge  # lazy: dask

                summary = merge(previous, summary)
    except (Interrupted, KeyboardInterrupt) as exc:
        click.echo(interrupted_message(exc, checkpoint or None, "--checkpoint"), err=True)
        leave(EXIT_INTERRUPTED, now=True)
    except Exception as exc:
        if not (connected and is_lost_scheduler(exc)):
            raise
        exit_lost_scheduler(exc, checkpoint, "--checkpoint")
    # With --json - stdout carries the JSON alone (json.load reads it): the rest goes to stderr.
    report_to_stderr = json_path == "-"
    report(table_report(summary, top=top, table_rows=table_rows, show_all=show_all), err=report_to_stderr)
    if "--out" in targets:
        summary.save(out, overwrite=overwrite)  # type: ignore[arg-type]  # out is set when targeted
        report(f"{'updated summary' if previous is not None else 'summary'} written to {out}", err=report_to_stderr)
    if "--json" in targets:
        write_json(targets["--json"], summary.to_json(states=json_states))
        report(f"summary written to {json_path}", err=report_to_stderr)
    elif json_path == "-":
        click.echo(json.dumps(summary.to_json(states=json_states), default=str))


def _pairwise_cov(stats: list[Any]) -> list[Any]:
    """The statistics with the pairwise covariance in place of ``cov`` (refused without ``cov``)."""
    from daskbatch.stats import CoMoments  # lazy: numpy-only, but only this option needs it

    if "cov" not in [s.strip() if isinstance(s, str) else None for s in stats]:
        # One line, exit 2 (user_errors), as the other refusals of bad input.
        raise ValueError(f"--cov pairwise needs cov among --stats (got {','.join(s for s in stats if isinstance(s, str))})")
    return [CoMoments(rows="pairwise") if isinstance(s, str) and s.strip() == "cov" else s for s in stats]


def _check_roles(label: str | None, target: str | None, groups: str | None) -> None:
    """Refuse two of --label, --target and --groups: each takes the label's place in the passes."""
    given = [f"--{name}" for name, value in (("label", label), ("target", target), ("groups", groups)) if value]
    if len(given) > 1:
        raise click.UsageError(
            f"{' with '.join(given)} is not supported (each takes the label's place): describe them in "
            f"separate runs, one with each of {', '.join(given)}"
        )


def _same_path(a: str | None, b: str) -> bool:
    """Whether ``a`` names the path ``b`` (symlinks resolved for local paths)."""
    if a is None or "://" in a or "://" in b:
        return a == b
    return os.path.realpath(a) == os.path.realpath(b)


def _check_outputs(
    store: str, out: str | None, json_path: str | None, cov_out: str | None, checkpoint: str | None,
    overwrite: bool, summaries: dict[str, str | None],
) -> dict[str, OutputTarget]:
    """Check --out, --json and --cov-out against the disk, the inputs and each other (one-line OutputError)."""
    targets = check_outputs(
        {"--out": (out, "summary", "zarr"), "--json": (None if json_path == "-" else json_path, "summary", "file"),
         "--cov-out": (cov_out, "tiled_cov", "zarr")},
        # A tiled covariance is big: only an earlier one is replaced, whatever --overwrite says.
        overwrite={"--out": overwrite, "--json": overwrite},
        protected={"the input store": store, "the --checkpoint directory": checkpoint, **summaries},
    )
    if checkpoint is not None:
        check_separate(checkpoint, "--checkpoint", {"the input store": store, **summaries,
                                                    **{name: t.path for name, t in targets.items()}})
        check_checkpoint_dir(checkpoint, "--checkpoint")
    return targets


#: Options whose values come from STATS under --update (parameter name -> option).
FROM_SUMMARY = {
    "stats": "--stats", "bins": "--bins", "range_": "--range", "ddof": "--ddof", "nan_policy": "--nan-policy",
}

_GIVEN = (click.core.ParameterSource.COMMANDLINE, click.core.ParameterSource.ENVIRONMENT,
          click.core.ParameterSource.DEFAULT_MAP)


def update_settings(ctx: click.Context, stats_path: str, store: str) -> tuple[Any, dict[str, Any]]:
    """Open the summary at ``stats_path`` and find the describe arguments that continue it."""
    from daskbatch.incremental import describe_settings  # lazy: dask

    given = [option for name, option in FROM_SUMMARY.items() if ctx.get_parameter_source(name) in _GIVEN]
    if given:
        raise click.UsageError(
            f"{', '.join(given)} cannot be combined with --update: the new rows are described with "
            f"the settings of {stats_path}"
        )
    check_separate(stats_path, "--update", {"the input store": store})
    if os.path.exists(os.path.dirname(os.path.abspath(stats_path))):
        # Held from this read to the write of the merged summary (released when the command ends).
        ctx.with_resource(summary_lock(stats_path))
    previous = load_summary(stats_path)
    settings = describe_settings(previous)  # a summary without states is refused here, before any compute
    # The label is found as describe finds it (--label, else the one the store records): see needs_label.
    # The store's own names are checked against the summary's by the merge.
    return previous, settings

