"""Click options shared by commands: the cluster, the device, the classes, and ``--config FILE`` (option defaults and dask settings from a configuration file)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import typing
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Literal, NoReturn, TypeVar

import click

from daskbatch._common import DEVICES
from daskbatch.cli._common import EXIT_BAD_INPUT, one_line_distributed_logs
from daskbatch.config import packaged
from daskbatch.jobs.schema import short_text
from daskbatch.jobs.spec import (
    SECTIONS,
    ConfigFile,
    JobConfigError,
    JobSpec,
    OutputsSpec,
    UnsafeDaskSetting,
    check_config_file,
    check_dask_settings,
    is_config_file,
    read_yaml,
)
from daskbatch.runtime.cluster import KINDS, planned_client
from daskbatch.summary.reprs import TEXT_ROWS, format_report

if TYPE_CHECKING:
    from distributed import Client

    from daskbatch.planning.plan import Plan, Resources


F = TypeVar("F", bound=Callable[..., Any])

#: ``--cluster`` values: the cluster kinds, plus "threads" for dask's threaded scheduler (no cluster).
CLUSTER_CHOICES = (*KINDS, "threads")


def job_option(key: str, *decls: str, **kwargs: Any) -> Callable[[F], F]:
    """Add an option for the job key ``key`` (``statistics.bins``): its default from daskbatch.yaml, its choices the schema's."""
    section, _, name = key.rpartition(".")
    hint = typing.get_type_hints(SECTIONS[section] if section else JobSpec)[name]
    if typing.get_origin(hint) is Literal:
        kwargs.setdefault("type", click.Choice(typing.get_args(hint)))
    return click.option(*decls, default=packaged(f"job.{key}"), show_default=True, **kwargs)


def device_option(help_: str, default: str | None = None) -> Callable[[F], F]:
    """Add ``--device {auto,cpu,gpu}`` (parameter ``device``), by default the job's (``cluster.device``)."""
    if default is None:
        return job_option("cluster.device", "--device", help=help_)
    return click.option("--device", type=click.Choice(DEVICES), default=default, show_default=True, help=help_)


def cluster_options(f: F) -> F:
    """Add ``--cluster``, ``--address``, ``--scheduler-file`` and ``--wait-for-workers`` to a click command."""
    f = click.option(
        "--wait-for-workers", type=click.IntRange(min=0), metavar="N",
        help="Start computing once N workers are connected, waiting at most "
        "daskbatch.worker-timeout (default 10 minutes). With --cluster slurm/pbs also how many "
        "workers to submit jobs for. Default: 1 (slurm/pbs: one job, all its workers).",
    )(f)
    f = click.option(
        "--scheduler-file", type=click.Path(dir_okay=False), envvar="DASKBATCH_SCHEDULER_FILE",
        help="Connect to the scheduler that wrote this file (dask scheduler "
        "--scheduler-file, dask-mpi); env DASKBATCH_SCHEDULER_FILE. Overrides --cluster.",
    )(f)
    f = click.option("--address", metavar="ADDR",
                     help="Connect to a running scheduler, e.g. tcp://node1:8786. Overrides --cluster.")(f)
    f = job_option(
        "cluster.kind", "--cluster", type=click.Choice(CLUSTER_CHOICES), envvar="DASKBATCH_CLUSTER",
        help="Cluster to start: auto (one dask-cuda worker per GPU, else none: dask's threaded scheduler "
        "in this process, as the Python API), local (a LocalCluster of worker processes), "
        "cuda, slurm/pbs (dask-jobqueue, configured in dask's jobqueue config), or "
        "threads (no cluster: dask's threaded scheduler); env DASKBATCH_CLUSTER.",
    )(f)
    return f


@contextlib.contextmanager
def client_from_options(
    cluster: str = "auto", address: str | None = None, scheduler_file: str | None = None,
    plan_for: Callable[[Resources], Plan] | None = None, **kwargs: Any,
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
    with one_line_distributed_logs(), planned_client(
        cluster, plan_for, address=address, scheduler_file=scheduler_file, **kwargs
    ) as client:
        yield client


#: What the footer of a shortened table names at the command line (``.to_dataframe()`` in Python).
SHOW_ALL_OPTIONS = "--all, or --table-rows N"


def table_options(func: F) -> F:
    """Add ``--all`` and ``--table-rows N``: how many features the printed table shows."""  # numpydoc ignore=PR01,RT01
    func = click.option(
        "--table-rows", type=click.IntRange(min=1), default=TEXT_ROWS, show_default=True, metavar="N",
        help="Features shown in the printed table (the first N).",
    )(func)
    return click.option("--all", "show_all", is_flag=True, help="Show every feature in the printed table.")(func)


def table_report(summary: Any, *, top: int, table_rows: int, show_all: bool) -> str:
    """The report of ``describe`` and ``demo``: the table as long as ``--all``/``--table-rows`` ask."""
    shown = summary.n_features if show_all else table_rows
    return format_report(summary, k=top, rows=shown, show_all=SHOW_ALL_OPTIONS)


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


#: ctx.meta keys: the file's ``dask:`` mapping, applied once --allow-dask-config is known.
_PENDING = "daskbatch.config.dask"
_SOURCE = "daskbatch.config.path"
#: Options a job file may not set for itself.
_NOT_FROM_FILE = ("config", "allow_dask_config")


def _fail(ctx: click.Context, message: str) -> NoReturn:
    """One line on stderr and exit code 2 (click's BadParameter would print usage lines too)."""
    click.echo(f"error: {message}", err=True)
    ctx.exit(EXIT_BAD_INPUT)
    raise AssertionError("unreachable")  # ctx.exit raises


#: Keys of a job and the option (long name) each sets in describe and plan; a key whose option a
#: command lacks (selection.*, transform.*, ...) belongs to ``daskbatch run`` and is left alone.
_JOB_OPTIONS = {
    ("input", "x"): "x", ("input", "label"): "label", ("input", "weights"): "weights", ("input", "target"): "target",
    ("input", "groups"): "groups",
    ("statistics", "stats"): "stats", ("statistics", "bins"): "bins", ("statistics", "range"): "range",
    ("statistics", "ddof"): "ddof", ("statistics", "nan_policy"): "nan_policy",
    ("statistics", "classes"): "classes", ("statistics", "missing"): "missing",
    ("cluster", "kind"): "cluster", ("cluster", "address"): "address", ("cluster", "scheduler_file"): "scheduler_file",
    ("cluster", "n_workers"): "workers", ("cluster", "threads"): "threads",
    ("cluster", "wait_for_workers"): "wait_for_workers", ("cluster", "device"): "device",
    ("memory",): "memory", ("checkpoint",): "checkpoint",
}


def _as_option(key: tuple[str, ...], value: Any) -> Any:
    """A job value as the option's text takes it (lists become ``a,b`` or ``lo:hi``)."""
    if isinstance(value, list):
        return ":".join(map(str, value)) if key == ("statistics", "range") else ",".join(map(str, value))
    return value


def _job_options(found: ConfigFile) -> dict[str, Any]:
    """Option values (by long name) that the job of a configuration file sets."""
    options: dict[str, Any] = {}
    for key, name in _JOB_OPTIONS.items():
        where: Any = found.job
        for part in key:
            where = where.get(part) if isinstance(where, dict) else None
        if where is None:
            continue
        if key == ("cluster", "kind") and where in ("address", "scheduler_file"):
            continue  # joining a scheduler is said by cluster.address / cluster.scheduler_file themselves
        options[name] = _as_option(key, where)
    summary = (found.job.get("outputs") or {}).get("summary")
    if summary is not None:
        outputs = JobSpec(outputs=OutputsSpec(**{**dataclasses.asdict(OutputsSpec()), **found.job["outputs"]}))
        options["out"] = outputs.output_path("summary")
    return options


def _long_options(ctx: click.Context) -> dict[str, click.Parameter]:
    """The command's parameters by long option name, ``_`` for ``-``."""
    return {opt[2:].replace("-", "_"): p for p in ctx.command.params for opt in p.opts if opt.startswith("--")}


def _read(ctx: click.Context, value: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Option values and dask settings of a --config file."""
    try:
        loaded = read_yaml(value)
        if is_config_file(loaded, _long_options(ctx)):
            found = check_config_file(value, loaded)
            return _job_options(found), found.dask or None
    except OSError as exc:
        _fail(ctx, f"--config {exc}")  # read_yaml's one line names the file and why
    except JobConfigError as exc:
        _fail(ctx, str(exc))
    sections = sorted(k for k in loaded if k in SECTIONS and isinstance(loaded[k], dict))
    if sections:
        _fail(ctx, f"{value} has a job's sections at its top ({', '.join(s + ':' for s in sections)}): put them "
                   "under 'daskbatch: job:', with dask settings at the top beside 'daskbatch' (docs/jobs.md)")
    _fail(ctx, f"{value}: option values at the top ({short_text(', '.join(sorted(map(str, loaded))))}) are no --config "
               "shape: write them as a job's keys under 'daskbatch: job:' (statistics: {bins: 128}), with dask "
               "settings at the top beside 'daskbatch' (docs/jobs.md)")


def _load(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Read a --config file into the command's option defaults (its dask settings wait for --allow-dask-config)."""
    if value is None:
        return None
    options, dask_settings = _read(ctx, value)
    if dask_settings:
        # Applied by the command once --allow-dask-config (which may come later) is known.
        ctx.meta[_PENDING], ctx.meta[_SOURCE] = dask_settings, value
    by_flag = _long_options(ctx)
    defaults: dict[str, Any] = {}
    # A job key whose option this command lacks (plan has no --checkpoint) is left alone.
    for key, val in options.items():
        target = by_flag.get(key)
        if target is None or target.name is None or target.name in _NOT_FROM_FILE:
            continue
        try:  # the schema has checked the value's type; the option's own bounds (bins >= 1) are checked here
            target.type_cast_value(ctx, val)
        except click.BadParameter as exc:
            _fail(ctx, f"{value}: {key}: {exc.format_message()}")
        assert target.name is not None
        defaults[target.name] = val
    ctx.default_map = {**(ctx.default_map or {}), **defaults}
    return value


def _apply_dask_settings(ctx: click.Context, allow: bool) -> None:
    """Merge the job file's ``dask:`` mapping into dask.config, refusing unsafe keys unless ``allow``."""
    settings = ctx.meta.pop(_PENDING, None)
    if not settings:
        return
    source = ctx.meta.get(_SOURCE, "--config")
    try:
        settings = check_dask_settings(settings, source, allow=allow)
    except UnsafeDaskSetting as exc:
        _fail(ctx, str(exc))
    import dask.config  # lazy: dask

    dask.config.update(dask.config.config, settings)


def allow_dask_config_option(where: str) -> Callable[[F], F]:
    """Add ``--allow-dask-config``: any dask setting in ``where`` (a file) is accepted."""
    return click.option("--allow-dask-config", is_flag=True, help=f"Accept any dask setting in {where}. Without it "
                        "only settings that tune sizes, memory thresholds and timeouts are accepted (no preload, "
                        "plugins or logging).")


def config_option(func: Any) -> Any:
    """Add ``--config FILE`` and ``--allow-dask-config`` to a command."""
    @functools.wraps(func)
    def _command(*args: Any, allow_dask_config: bool = False, **kwargs: Any) -> Any:
        """Apply the config file's dask settings, then run the command."""
        _apply_dask_settings(click.get_current_context(), allow_dask_config)
        return func(*args, **kwargs)

    _command = allow_dask_config_option("the --config file")(_command)
    return click.option(
        "--config",
        type=click.Path(dir_okay=False),
        is_eager=True,
        expose_value=False,
        callback=_load,
        help="Configuration file, as 'daskbatch run' reads: its 'daskbatch: job:' keys set the matching "
        "options (statistics: {bins: 128} sets --bins), its other keys are dask settings (docs/jobs.md). "
        "Command-line options win.",
    )(_command)
