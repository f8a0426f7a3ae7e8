"""Click options shared by commands that run on a cluster."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar, overload

import click

from daskbatch._typing import DEVICES
from daskbatch.cli._group import one_line_distributed_logs
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


def parse_classes(text: str | None) -> list[int] | None:
    """Parse ``--classes``: ``"0,1,7"`` -> [0, 1, 7]."""
    if text is None:
        return None
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers (e.g. 0,1,7), got {text!r}") from None


def n_classes_options(minimum: int, help_: str) -> Callable[[F], F]:
    """Add ``--n-classes K`` (parameter ``n_classes``) and ``--classes V1,V2,...`` (``class_values``)."""

    def decorate(func: F) -> F:
        """Add the two options to ``func``."""  # numpydoc ignore=PR01,RT01
        func = click.option(
            "--classes", "class_values", default=None, metavar="V1,V2,...",
            help="Class values (e.g. 0,1,2), as on every command: their number is used. "
            "To give the number itself, use --n-classes.",
        )(func)
        return click.option("--n-classes", "n_classes", type=click.IntRange(min=minimum), default=None,
                            help=help_)(func)  # type: ignore[no-any-return]

    return decorate


def resolve_n_classes(n_classes: int | None, class_values: str | None, *, consecutive: bool) -> int | None:
    """The number of classes from ``--n-classes`` and ``--classes``; ValueError (one line) when unclear."""
    values = parse_classes(class_values)
    if values is None:
        return n_classes
    if len(values) == 1:
        raise ValueError(
            f"--classes takes class values (e.g. 0,1,2), and {class_values!r} is a single value; "
            f"for a number of classes use --n-classes {values[0]}"
        )
    if len(set(values)) != len(values):
        raise ValueError(f"--classes lists a value twice: {class_values!r}")
    if consecutive and sorted(values) != list(range(len(values))):
        raise ValueError(
            f"this command labels its classes 0 to K-1, so --classes must list 0,1,...,K-1, got {class_values!r}; "
            "use --n-classes K"
        )
    if n_classes is not None and n_classes != len(values):
        raise ValueError(f"--classes lists {len(values)} values but --n-classes is {n_classes}")
    return len(values)
