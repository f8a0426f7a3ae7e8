"""Click options shared by commands that run on a cluster.

They are ``--cluster``, ``--address``, ``--scheduler-file`` and ``--wait-for-workers``.

Use :func:`cluster_options` on a command and :func:`client_from_options` in its body::

    @main.command()
    @cluster_options
    def describe(..., cluster, address, scheduler_file, wait_for_workers):
        with client_from_options(cluster, address, scheduler_file, wait_for_workers=wait_for_workers):
            ...
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar, overload

import click

from daskbatch._typing import DEVICES
from daskbatch.cli._lost_scheduler import one_line_distributed_logs
from daskbatch.runtime.cluster import KINDS
from daskbatch.runtime.cluster import cluster as start_cluster

if TYPE_CHECKING:
    from distributed import Client

F = TypeVar("F", bound=Callable[..., Any])

#: ``--cluster`` values: the cluster kinds, plus "threads" for dask's threaded scheduler (no cluster).
CLUSTER_CHOICES = (*KINDS, "threads")


def device_option(default: str, help_: str) -> Callable[[F], F]:
    """Add ``--device {auto,cpu,gpu}`` (parameter ``device``): the one device vocabulary of every command."""
    return click.option(  # type: ignore[no-any-return]
        "--device", type=click.Choice(DEVICES), default=default, show_default=True, help=help_,
    )


@overload
def cluster_options(func: F, /) -> F: ...  # numpydoc ignore=GL08


@overload
def cluster_options(*, default: str = "auto") -> Callable[[F], F]: ...  # numpydoc ignore=GL08


def cluster_options(func: F | None = None, /, *, default: str = "auto") -> Any:
    """Add ``--cluster``, ``--address``, ``--scheduler-file`` and ``--wait-for-workers`` to a click command."""
    if default not in CLUSTER_CHOICES:
        raise ValueError(f"default must be one of {CLUSTER_CHOICES}, got {default!r}")

    def decorate(f: F) -> F:
        """Add the four options to ``f``."""
        f = click.option(
            "--wait-for-workers",
            type=click.IntRange(min=0),
            metavar="N",
            help="Start computing once N workers are connected, waiting at most "
            "daskbatch.worker-timeout (default 10 minutes). With --cluster slurm/pbs also how many "
            "workers to submit jobs for. Default: 1 (slurm/pbs: one job, all its workers).",
        )(f)
        f = click.option(
            "--scheduler-file",
            type=click.Path(dir_okay=False),
            envvar="DASKBATCH_SCHEDULER_FILE",
            help="Connect to the scheduler that wrote this file (dask scheduler "
            "--scheduler-file, dask-mpi); env DASKBATCH_SCHEDULER_FILE. Overrides --cluster.",
        )(f)
        f = click.option(
            "--address",
            metavar="ADDR",
            help="Connect to a running scheduler, e.g. tcp://node1:8786. Overrides --cluster.",
        )(f)
        f = click.option(
            "--cluster",
            type=click.Choice(CLUSTER_CHOICES),
            default=default,
            show_default=True,
            help="Cluster to start: auto (one dask-cuda worker per GPU, else local), local, "
            "cuda, slurm/pbs (dask-jobqueue, configured in dask's jobqueue config), or "
            "threads (no cluster: dask's threaded scheduler).",
        )(f)
        return f

    return decorate(func) if func is not None else decorate


@contextlib.contextmanager
def client_from_options(
    cluster: str = "auto",
    address: str | None = None,
    scheduler_file: str | None = None,
    **kwargs: Any,
) -> Iterator[Client | None]:
    """Client for the parsed options (None with ``--cluster threads``); closes what it started."""
    if address and scheduler_file:
        raise click.UsageError("give --address or --scheduler-file, not both")
    if cluster == "threads" and not (address or scheduler_file):
        yield None
        return
    import distributed  # noqa: F401 - sets up the log handlers one_line_distributed_logs quiets  # lazy: distributed

    # cluster() prints the scheduler and its dashboard link on stderr. Losing the scheduler
    # makes distributed log tracebacks while the client closes: kept to one line each.
    with one_line_distributed_logs(), start_cluster(
        cluster, address=address, scheduler_file=scheduler_file, **kwargs
    ) as client:
        yield client
