"""The configuration file: one dask-config-shaped YAML that ``daskbatch run`` and ``describe --config`` read, and the dask settings it may set without ``--allow-dask-config``."""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import shlex
import typing
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from daskbatch._common import short_repr
from daskbatch.jobs.schema import (
    FILE_ONLY,
    MAX_FILE_BYTES,
    SECTIONS,
    JobConfigError,
    JobSpec,
    OutputsSpec,
    defaults,
    describe_value,
    expected,
    load_bounded,
    matches,
    reference,
    short_text,
)
from daskbatch.stats.spec import check_statistic_names

__all__ = [
    "ConfigFile", "JobConfigError", "JobSpec", "OutputsSpec", "check_config_file", "defaults", "effective_config",
    "is_config_file", "SAFE_DASK_SETTINGS", "UnsafeDaskSetting", "check_dask_settings", "flatten", "load_job",
    "read_yaml", "reference",
]


def _norm(key: Any) -> str:
    """A key as the schema spells it: ``_`` for ``-``."""
    return str(key).replace("-", "_")


def _all_keys() -> list[str]:
    keys: list[str] = []
    for f in dataclasses.fields(JobSpec):
        if f.name in SECTIONS:
            keys.extend(f"{f.name}.{g.name}" for g in dataclasses.fields(SECTIONS[f.name]))
        else:
            keys.append(f.name)
    return keys


def _unknown(where: str, path: str, valid: list[str]) -> JobConfigError:
    """'unknown key X; did you mean Y?': Y is the key elsewhere with the same name, else the closest one."""
    name = path.rsplit(".", 1)[-1]
    same = [k for k in _all_keys() if k.rsplit(".", 1)[-1] == name]
    prefix = path.rsplit(".", 1)[0] + "." if "." in path else ""
    close = same or [prefix + c for c in difflib.get_close_matches(name, valid, n=1, cutoff=0.0)]
    hint = f"; did you mean '{close[0]}'?" if close else ""
    return JobConfigError(f"{where}: unknown key '{path}'{hint}")


def _check_section(where: str, section: str | None, cls: type, values: Mapping[Any, Any]) -> dict[str, Any]:
    """``values`` with normalised keys, each checked against ``cls``'s field types."""
    all_hints = typing.get_type_hints(cls)
    hints = {f.name: all_hints[f.name] for f in dataclasses.fields(cls)}  # the keys: its fields, no ClassVar
    out: dict[str, Any] = {}
    for raw, value in values.items():
        key = _norm(raw)
        path = f"{section}.{key}" if section else key
        if key not in hints:
            raise _unknown(where, short_text(path), list(hints))
        if key in out:  # nan-policy and nan_policy: one key, given twice
            raise JobConfigError(f"{where}: '{path}' is given twice (spelled with '-' and with '_')")
        if section is None and key in SECTIONS:
            if value is None:
                continue  # an empty section in YAML ("cluster:") means its defaults
            if not isinstance(value, Mapping):
                raise JobConfigError(f"{where}: '{key}' must be a mapping of its keys, got {describe_value(value)}")
            out[key] = _check_section(where, key, SECTIONS[key], value)
            continue
        ok, conv = matches(value, hints[key])
        if not ok:
            raise JobConfigError(f"{where}: '{path}' expects {expected(hints[key])}, got {describe_value(value)}")
        out[key] = conv
    return out


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if key in SECTIONS and isinstance(out.get(key), dict) and isinstance(value, Mapping):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


def _from_config() -> dict[str, Any]:
    """``daskbatch.job.*`` from dask.config, checked ("dask config daskbatch.job" names the source)."""
    from daskbatch import config  # lazy: dask

    values = config.get("job") or {}
    if not isinstance(values, Mapping):
        raise JobConfigError(f"dask config daskbatch.job must be a mapping, got {describe_value(values)}")
    where = "dask config daskbatch.job"
    checked = _check_section(where, None, JobSpec, values)
    for key in FILE_ONLY:
        if key in checked:
            raise JobConfigError(f"{where}: '{key}' can be set in a job file only")
    return checked


def effective_config() -> dict[str, Any]:
    """Overlay the job defaults with ``daskbatch.job.*`` from dask.config (what a job file starts from)."""
    return _merge(defaults(), _from_config())


def _build(values: Mapping[str, Any]) -> JobSpec:
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        kwargs[key] = SECTIONS[key](**value) if key in SECTIONS else value
    return JobSpec(**kwargs)


def read_yaml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a YAML file that must hold a mapping (an empty file is an empty mapping)."""
    where = os.fspath(path)
    try:
        with open(where, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)  # no more than the bound, whatever the file holds
    except OSError as exc:  # one line naming the file (a raw "[Errno 2]" named nothing); the same type for callers
        reason = "no such file" if isinstance(exc, FileNotFoundError) else f"cannot be read ({exc.strerror})"
        raise type(exc)(f"{where}: {reason}; give the path of a YAML job or configuration file") from None
    loaded = load_bounded(data, where)
    if loaded is None:
        return {}
    if not isinstance(loaded, Mapping):
        raise JobConfigError(f"{where}: must hold a mapping (daskbatch: {{job: ...}}), got {describe_value(loaded)}")
    return dict(loaded)


@dataclass(frozen=True)
class ConfigFile:  # numpydoc ignore=PR02
    """A configuration file as read: its job (``daskbatch.job``) and every other dask setting."""

    path: str
    job: dict[str, Any]
    dask: dict[str, Any]


def is_config_file(loaded: Mapping[str, Any], older_keys: Collection[str] = ()) -> bool:
    """Tell whether a YAML mapping is in the configuration file's shape, not one of the older ones."""
    if "daskbatch" in loaded:
        return True
    older = {f.name for f in dataclasses.fields(JobSpec)} | _DESCRIBE_OPTIONS | set(older_keys)
    return not any(_norm(key) in older for key in loaded)


def check_config_file(where: str, loaded: Mapping[str, Any]) -> ConfigFile:
    """Check a configuration file: the one place its shape and its job are validated."""
    settings = loaded.get("daskbatch")
    if settings is None:
        settings = {}
    if not isinstance(settings, Mapping):
        raise JobConfigError(f"{where}: 'daskbatch' must be a mapping of settings, got {describe_value(settings)}")
    job = settings.get("job")
    if job is None:
        job = {}
    if not isinstance(job, Mapping):
        raise JobConfigError(f"{where}: 'daskbatch.job' must be a mapping of its sections, got {describe_value(job)}")
    checked = _check_section(where, None, JobSpec, job)
    _check_range_pair(where, checked.get("statistics", {}).get("range"))
    for key in FILE_ONLY:
        if key in checked:
            raise JobConfigError(f"{where}: 'daskbatch.job.{key}' is no job key: put dask settings at the top "
                                 "of the file, beside 'daskbatch'")
    rest = {k: v for k, v in settings.items() if k != "job"}
    dask = {str(k): v for k, v in loaded.items() if k != "daskbatch"}
    if rest:
        dask["daskbatch"] = rest
    return ConfigFile(where, checked, dask)


def load_job(source: str | os.PathLike[str] | Mapping[str, Any]) -> tuple[JobSpec, str]:
    """Read the job of a configuration file (or a mapping), over dask config and the defaults, checked."""
    if isinstance(source, Mapping):
        where, loaded = "job", dict(source)
    else:
        where = os.fspath(source)
        loaded = read_yaml(where)
    if is_config_file(loaded):
        found = check_config_file(where, loaded)
        given = {**found.job, "dask": found.dask or None}
    elif isinstance(source, Mapping):
        given = _check_section(where, None, JobSpec, loaded)
    else:
        _refuse_option_file(where, loaded)
        raise JobConfigError(
            f"{where}: a job's sections go under 'daskbatch: job:', and dask settings at the top of the file "
            "beside 'daskbatch' (docs/jobs.md)"
        )
    job = _build(_merge(effective_config(), given))
    _check_consistency(where, job)
    return job, where


#: Option names of ``daskbatch describe`` that are no key of a job: a ``--config`` file holds them.
_DESCRIBE_OPTIONS = frozenset({
    "label", "x", "classes", "stats", "bins", "range", "ddof", "nan_policy", "missing", "out", "json",
    "cov_out", "scheduler_file", "address", "wait_for_workers", "split_every", "device", "update",
})


def _refuse_option_file(where: str, loaded: Mapping[str, Any]) -> None:
    """A ``describe --config`` file (option names as keys, no sections) given as a job: say so in one line."""
    keys = {_norm(k) for k in loaded}
    options = sorted(keys & _DESCRIBE_OPTIONS)
    if options and not keys & set(SECTIONS):
        raise JobConfigError(
            f"{where} holds describe options ({', '.join(options)}), as a 'daskbatch describe --config' file "
            "does, not a job: a job file has sections (input:, statistics:, selection:, ...; docs/jobs.md)"
        )


def _check_range_pair(where: str, value: Any) -> None:
    """Refuse a histogram range that is not [lo, hi] or 'minmax' (``describe --config`` and ``run`` alike)."""
    if isinstance(value, list) and len(value) != 2:
        raise JobConfigError(f"{where}: 'statistics.range' expects [lo, hi], got {describe_value(value)}")
    if isinstance(value, str) and value != "minmax":
        raise JobConfigError(f"{where}: 'statistics.range' expects [lo, hi] or 'minmax', got {describe_value(value)}")


def _check_consistency(where: str, job: JobSpec) -> None:
    """Rules across keys, each a one-line error."""
    if not job.input.store:
        raise JobConfigError(f"{where}: 'input.store' is required (the Zarr store to read)")
    roles = [f"'input.{k}'" for k in ("label", "target", "groups") if getattr(job.input, k) is not None]
    if len(roles) > 1:
        raise JobConfigError(f"{where}: {' with '.join(roles)} is not supported (each takes the label's place): "
                             f"describe them in separate jobs, one with each of {', '.join(roles)}")
    if job.statistics.stats is not None:
        try:
            check_statistic_names(job.statistics.stats)
        except ValueError as exc:
            raise JobConfigError(f"{where}: 'statistics.stats': {exc}") from None
    kind = job.cluster.kind
    if kind == "address" and not job.cluster.address:
        raise JobConfigError(f"{where}: cluster kind 'address' needs 'cluster.address'")
    if kind == "scheduler_file" and not job.cluster.scheduler_file:
        raise JobConfigError(f"{where}: cluster kind 'scheduler_file' needs 'cluster.scheduler_file'")
    _check_range_pair(where, job.statistics.range)
    if len(job.transform.clip) != 2:
        raise JobConfigError(f"{where}: 'transform.clip' expects [lo, hi], got {describe_value(job.transform.clip)}")
    for key, value in (("statistics.bins", job.statistics.bins), ("transform.k", job.transform.k)):
        if value < 1:
            raise JobConfigError(f"{where}: '{key}' must be at least 1, got {value}")
    steps = job.transform.steps
    if len(set(steps)) != len(steps):
        raise JobConfigError(f"{where}: 'transform.steps' names a step twice: {steps}")
    if "clip" in steps and "project" in steps and steps.index("clip") < steps.index("project"):
        raise JobConfigError(
            f"{where}: 'transform.steps' clips before project, but the summary does not describe clipped values; "
            "put project before clip"
        )


_JOBQUEUE_COMMON = (
    "cores", "memory", "processes", "walltime", "queue", "account", "name",
    "interface", "local-directory", "death-timeout",
)

#: Dotted dask config keys a job file may set (``_`` and ``-`` are the same, as in dask).
SAFE_DASK_SETTINGS = frozenset(
    {
        "temporary-directory", "scheduler", "num-workers", "tokenize.ensure-deterministic",
        "array.chunk-size", "array.rechunk.method", "array.rechunk.threshold",
        "array.slicing.split-large-chunks", "optimization.fuse.active",
        "dataframe.convert-string", "dataframe.shuffle.method",
        "distributed.worker.memory.target", "distributed.worker.memory.spill",
        "distributed.worker.memory.pause", "distributed.worker.memory.terminate",
        "distributed.worker.memory.max-spill", "distributed.worker.memory.spill-compression",
        "distributed.worker.lifetime.duration", "distributed.worker.lifetime.stagger",
        "distributed.worker.lifetime.restart",
        "distributed.comm.timeouts.connect", "distributed.comm.timeouts.tcp",
        "distributed.comm.retry.count", "distributed.comm.retry.delay.min",
        "distributed.comm.retry.delay.max", "distributed.comm.compression",
        "distributed.scheduler.work-stealing", "distributed.scheduler.work-stealing-interval",
        "distributed.scheduler.allowed-failures", "distributed.scheduler.worker-saturation",
        "distributed.scheduler.idle-timeout", "distributed.scheduler.worker-ttl",
        "distributed.deploy.lost-worker-timeout",
        *(f"jobqueue.slurm.{k}" for k in (*_JOBQUEUE_COMMON, "job-cpu", "job-mem")),
        *(f"jobqueue.pbs.{k}" for k in (*_JOBQUEUE_COMMON, "resource-spec")),
    }
)


class UnsafeDaskSetting(ValueError):
    """A job file's ``dask:`` mapping sets something that may run code; the message names the key."""


#: A name the batch script's shell and the scheduler take as it is (job name: ``#SBATCH -J``).
_NAME = re.compile(r"[A-Za-z0-9_.-]+")
#: Characters a shell takes literally (a queue ``gpu,long``, an interface ``ib0``, a PBS ``select=1:ncpus=4``).
_SHELL_WORD = re.compile(r"[A-Za-z0-9_.,:@%+=/-]+")
#: A time limit as SLURM and PBS write it (``01:00:00``, ``1-12:00:00``) or minutes.
_WALLTIME = re.compile(r"[0-9]+([:-][0-9]+)*")
#: A size or a duration without spaces (``16G``, ``60s``).
_AMOUNT = re.compile(r"[0-9]+(\.[0-9]+)?[A-Za-z]*")
#: An environment variable the batch shell expands in a path (``$TMPDIR``, ``${SCRATCH}``): it runs nothing.
_VARIABLE = re.compile(r"\$(\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)")


def _positive_int(value: Any) -> bool:
    """Whether ``value`` is an integer of at least 1."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _matches(pattern: re.Pattern[str], numbers: bool = False) -> Any:
    """A test for a string that ``pattern`` matches whole (or, with ``numbers``, a non-negative number)."""
    def test(value: Any) -> bool:
        if numbers and isinstance(value, int | float) and not isinstance(value, bool):
            return value >= 0
        return isinstance(value, str) and pattern.fullmatch(value) is not None
    return test


def _byte_size(value: Any) -> bool:
    """Whether ``value`` is a byte size dask-jobqueue parses (it writes the script's number itself)."""
    from dask.utils import parse_bytes  # lazy: dask

    try:
        return _positive_int(value) or (isinstance(value, str) and parse_bytes(value) > 0)
    except (TypeError, ValueError):
        return False


#: The jobqueue settings a file may set, each reaching the batch job script: a test of the value and it in words.
_JOBQUEUE_VALUES: dict[str, tuple[Any, str]] = {
    "cores": (_positive_int, "an integer of at least 1"),
    "processes": (_positive_int, "an integer of at least 1"),
    "job-cpu": (_positive_int, "an integer of at least 1"),
    "memory": (_byte_size, "a byte size such as 16GiB"),
    "job-mem": (_matches(_AMOUNT, numbers=True), "a size such as 16G"),
    "walltime": (_matches(_WALLTIME, numbers=True), "a time such as 01:00:00 or 1-12:00:00"),
    "death-timeout": (_matches(_AMOUNT, numbers=True), "seconds or a duration such as 60s"),
    "name": (_matches(_NAME), "a name of letters, digits, '_', '.' and '-'"),
    "queue": (_matches(_SHELL_WORD), "a name of letters, digits and _ . , : @ % + = / -"),
    "account": (_matches(_SHELL_WORD), "a name of letters, digits and _ . , : @ % + = / -"),
    "interface": (_matches(_SHELL_WORD), "a network interface name such as ib0"),
    "resource-spec": (_matches(_SHELL_WORD), "a resource list such as select=1:ncpus=4:mem=8GB"),
    "local-directory": (lambda v: isinstance(v, str) and v != "", "a path"),
}
_JOBQUEUE_PATHS = frozenset({"local-directory"})


def flatten(mapping: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Walk the leaves of a nested mapping."""
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            yield from flatten(value, f"{name}.")
        else:
            yield name, value


#: What a refusal of a setting off the list (or one that runs code) advises.
_TRUST = "; pass --allow-dask-config if you trust this file (or set it in dask's own config)"


def _refused_setting(key: str, value: Any) -> str | None:
    """Why ``key: value`` may not be set from a job file without ``--allow-dask-config`` (None if it may)."""
    canonical = key.replace("_", "-")
    if any(fragment in canonical.lower() for fragment in ("preload", "plugin")):  # load or run code anywhere
        return "loads or runs code" + _TRUST
    if canonical.startswith("daskbatch.job."):
        return None  # the job's own keys: the schema of daskbatch/jobs checks them
    if canonical.startswith("daskbatch."):
        from daskbatch.config import check_setting  # lazy: dask

        return check_setting(canonical.removeprefix("daskbatch."), value)
    if canonical.startswith("jobqueue.") and canonical not in SAFE_DASK_SETTINGS:
        return ("is written into the batch job script as shell text, which a file may not set: set it in your "
                "own dask config or in Python (db.cluster('slurm', ...)), or pass --allow-dask-config if you "
                "trust this file")
    if canonical not in SAFE_DASK_SETTINGS:
        return "is not on daskbatch's list of settings a job file may change" + _TRUST
    if isinstance(value, (Mapping, list, tuple)):
        return f"must be a single value, not a {type(value).__name__}"
    if canonical.startswith("jobqueue."):
        return _refused_script_value(canonical.rsplit(".", 1)[-1], value)
    return None


def _refused_script_value(name: str, value: Any) -> str | None:
    """Why a jobqueue value cannot go into the batch job script (None if it can, quoted where it needs it)."""
    if value is None:
        return None  # dask-jobqueue's default
    test, words = _JOBQUEUE_VALUES[name]
    if not test(value) or (isinstance(value, str) and any(ord(c) < 32 or c == "\x7f" for c in value)):
        return f"must be {words} (it goes into the batch job script), got {short_repr(value)}"
    if name in _JOBQUEUE_PATHS and "$" in value:
        if "$" in _VARIABLE.sub("", value):
            return (f"is a path with a '$' that is no $VARIABLE, which the batch script's shell would run "
                    f"({short_repr(value)})")
        if not _SHELL_WORD.fullmatch(_VARIABLE.sub("x", value)):
            return (f"is a path with a $VARIABLE and characters that need quoting, which would stop the "
                    f"variable's expansion ({short_repr(value)}): use letters, digits and _ . , : @ % + = / -")
    return None


def _quoted(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` with each jobqueue path quoted for the batch script's shell, unless literal text and $VARIABLEs."""
    out: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, Mapping):
            out[key] = _quoted(value)
        elif (str(key).replace("_", "-") in _JOBQUEUE_PATHS and isinstance(value, str)
              and not _SHELL_WORD.fullmatch(_VARIABLE.sub("x", value))):
            out[key] = shlex.quote(value)  # dask-jobqueue writes it unquoted after --local-directory
        else:
            out[key] = value  # nothing to quote, and $TMPDIR stays the node's own
    return out


def check_dask_settings(settings: Mapping[str, Any], source: str, *, allow: bool = False) -> dict[str, Any]:
    """Check a file's dask settings, and give them as they are applied."""
    if allow:
        return dict(settings)
    for key, value in flatten(settings):
        why = _refused_setting(key, value)
        if why is not None:
            # A key from a file may be megabytes long.
            raise UnsafeDaskSetting(f"{source}: dask setting {short_text(key, 80)} {why}")
    return _quoted(settings)
