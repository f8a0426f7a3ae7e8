"""``daskbatch run JOB``: a whole batch job (describe, select, transform, report) from one YAML file."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator

import click

from daskbatch.cli._group import EXIT_INTERRUPTED, main, user_errors
from daskbatch.engine.checkpoint import sigterm_as_interrupt
from daskbatch.errors import Interrupted
from daskbatch.jobs.spec import reference
from daskbatch.runtime.interrupts import exit_now

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
