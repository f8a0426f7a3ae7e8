"""``daskbatch plan STORE`` (the chunking and memory arithmetic, without a cluster or compute) and ``daskbatch run JOB`` (a whole batch job from one YAML file)."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Iterator

import click
from click.core import ParameterSource

from daskbatch.cli._common import EXIT_INTERRUPTED, main, report, user_errors
from daskbatch.cli.options import config_option, n_classes_options, resolve_n_classes
from daskbatch.config import STATISTIC_DEFAULTS, packaged
from daskbatch.engine.planner import plan
from daskbatch.errors import Interrupted
from daskbatch.jobs.spec import reference
from daskbatch.planning.search import plan_dropping_sketch, recorded_n_classes, sketch_in_plan
from daskbatch.runtime.capacity import resources_from_machine
from daskbatch.runtime.runlock import exit_now, sigterm_as_interrupt
from daskbatch.stats.sketch_windows import state_bytes_per_feature
from daskbatch.stats.spec import DEFAULT_STATS, normalize_stats, requested


def _parse_stats(text: str) -> tuple[str, ...]:
    """``--stats`` through the one spec describe uses (moments always first)."""
    try:
        return normalize_stats(text)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--stats") from None


@main.command("plan")
@click.argument("store")
@click.option("--x", "x_name", default=packaged("job.input.x"), show_default=True, help="Samples x features array in the store.")
@click.option("--label", default=None, help="Label array for 'mi' (default: the one the store records).")
@click.option(
    # describe adds the quantile sketch whenever it finds histogram ranges itself (no --range)
    "--stats", default=",".join((*DEFAULT_STATS, "sketch")), show_default=True,
    help="Comma-separated statistics.",
)
@click.option("--bins", default=STATISTIC_DEFAULTS["bins"], show_default=True, type=click.IntRange(min=1), help="Histogram bins.")
@n_classes_options(1, "Number of label classes, for 'mi' and 'class_moments' (default: from the store's attributes).")
@click.option(
    "--memory", default=packaged("job.memory"), show_default=True,
    help="Memory per worker (GPU memory with --device gpu): bytes like 16GiB, a fraction of "
    "this machine's (0.5), or auto (this machine's, shared by --workers).",
)
@click.option("--workers", default=1, show_default=True, type=click.IntRange(min=1), help="Workers.")
@click.option(
    "--threads", type=click.IntRange(min=1), default=None,
    help="Threads per worker [default: cores / workers on CPU, 1 on GPU].",
)
@click.option("--device", type=click.Choice(["cpu", "gpu"]), default="cpu", show_default=True)
@click.option("--split-every", type=click.IntRange(min=2), default=None, help="Merge fan-in.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON instead of text.")
@config_option
@user_errors
def plan_command(
    store: str,
    x_name: str,
    label: str | None,
    stats: str,
    bins: int,
    n_classes: int | None,
    class_values: str | None,
    memory: str,
    workers: int,
    threads: int | None,
    device: str,
    split_every: int | None,
    as_json: bool,
) -> None:
    """Plan chunk rows, merge fan-in and feature tiles for STORE and explain the arithmetic.

    Reads only the store's metadata; starts no cluster. Exit code 3 when the
    plan cannot fit the memory given. --config reads a describe job's file:
    its statistics, bins, label, split-every and dask settings (memory-fraction,
    reserved-memory) plan as describe will; its other keys are left alone.
    """
    from daskbatch.io.dataset import open_dataset  # lazy: dask, zarr

    names = _parse_stats(stats)
    n_classes = resolve_n_classes(n_classes, class_values, consecutive=False)
    ds = open_dataset(store, x=x_name, label=label)
    skipped = None
    default_stats = click.get_current_context().get_parameter_source("stats") == ParameterSource.DEFAULT
    wanted = requested(names)
    refused = [r.name for r in wanted if r.needs_class_label]
    if refused and ds.label is None and not default_stats:
        raise click.UsageError(f"statistic {refused[0]!r} needs a label (--label)")
    if any(r.needs_label for r in wanted):
        if ds.label is None:
            # as describe: the default's mi and class_moments are computed only with a label
            dropped = [r.name for r in wanted if r.needs_label]
            names = tuple(r.name for r in wanted if not r.needs_label)
            skipped = f"{' and '.join(dropped)} skipped: the store has no label"
        elif n_classes is None and recorded_n_classes(ds) is None:
            # Counting finds the classes; the plan assumes what describe assumes (no label read here).
            from daskbatch import config  # lazy: dask

            n_classes = int(config.get("assumed-classes"))
            skipped = f"the store does not record its classes: planned for {n_classes} (pass --n-classes K)"
    resources = resources_from_machine(
        n_workers=workers, threads_per_worker=threads, memory=memory, device=device
    )
    result, planned = plan_dropping_sketch(
        lambda stats_: plan(
            ds, stats=stats_, bins=bins, n_classes=n_classes, resources=resources, split_every=split_every
        ),
        names, optional=default_stats,  # as describe, which adds the sketch itself
    )
    by_name, window = sketch_in_plan(planned)
    if window is not None:
        note = (f"the quantile sketch keeps a window of {window[0]:,} buckets per sign in {window[1]} "
                f"({state_bytes_per_feature(*window[:2]) / 1e3:,.1f} kB a feature, quantiles within "
                f"{window[2]:.2%}) to fit")
        skipped = f"{skipped}; {note}" if skipped else note
    elif by_name != names:
        note = "the quantile sketch does not fit: describe takes histogram ranges from min and max, the last resort (or --range)"
        skipped = f"{skipped}; {note}" if skipped else note
    if as_json:
        out = result.to_dict()
        out["store"] = str(store)
        out["skipped"] = skipped
        click.echo(json.dumps(out, indent=2))
    else:
        report(result.explain())
        if skipped:
            report(f"  note: {skipped}")


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


@contextlib.contextmanager
def fallback_logging() -> Iterator[None]:
    """INFO records of ``daskbatch.*`` on stderr, with timestamps, unless logging is configured already."""
    logger = logging.getLogger("daskbatch")
    if logger.hasHandlers():
        yield
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    level = logger.level
    logger.addHandler(handler)
    if level == logging.NOTSET or level > logging.INFO:
        logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@main.command("run", cls=_JobCommand, epilog=_EPILOG)
@click.argument("job_file", metavar="JOB", type=click.Path(dir_okay=False))
@click.option(
    "--allow-dask-config",
    is_flag=True,
    help="Accept any dask setting in the job file. Without it only settings that "
    "tune sizes, memory thresholds and timeouts are accepted (no preload, plugins or logging).",
)
@click.option(
    "--overwrite",
    is_flag=True,
    help="Let the job's outputs replace existing paths that daskbatch did not write (never the input, "
    "and no two outputs may overlap).",
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
    from daskbatch.jobs.run import run_job  # lazy: dask, zarr

    with fallback_logging():
        try:
            # SIGTERM (a batch system's walltime warning) stops at a checkpoint or block boundary.
            with sigterm_as_interrupt():
                run_job(job_file, allow_dask_config=allow_dask_config, overwrite=overwrite)
        except (Interrupted, KeyboardInterrupt) as exc:
            click.echo(f"interrupted: {exc or 'keyboard interrupt'}; run the same command again to resume "
                       "(the checkpoint and the transform store keep what finished)", err=True)
            exit_now(EXIT_INTERRUPTED)
