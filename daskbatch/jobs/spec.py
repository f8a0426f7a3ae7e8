"""The job file of ``daskbatch run``: a schema of dataclasses, every key with a default and a docstring.

A job file is YAML with these sections (every key optional but ``input.store``)::

    input:      {store: data.zarr, x: X, label: y}
    statistics: {bins: 64, nan_policy: omit, ...}
    selection:  {score: f, mode: k, param: 10, ...}
    transform:  {steps: [select, standardize], k: 10, ...}
    cluster:    {kind: local, n_workers: 2, ...}
    memory: 4GiB
    checkpoint: ckpt/
    outputs:    {dir: results, summary: summary.zarr, ...}
    dask:       {daskbatch: {split-every: 16}}

:func:`load_job` merges, from lowest to highest precedence: the defaults of the
dataclasses below, ``dask.config`` under ``daskbatch.job.*`` (defaults in
``daskbatch/daskbatch.yaml``, ``DASK_DASKBATCH__JOB__CLUSTER__KIND=threads``
...), and the file. Keys may be spelled with ``_`` or ``-``. An unknown key is
a one-line :class:`JobConfigError` naming it and the closest valid key; a value
of the wrong type one naming the key and the type expected.

:func:`reference` renders the schema (keys, defaults, docs) as an annotated
YAML file: it is ``daskbatch run --help``'s epilog and ``docs/jobs.md``.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from daskbatch.jobs._types import describe_value, expected, matches

__all__ = [
    "ClusterSpec", "InputSpec", "JobConfigError", "JobSpec", "OutputsSpec", "SelectionSpec", "StatisticsSpec",
    "TransformSpec", "defaults", "effective_config", "load_job", "reference",
]


class JobConfigError(ValueError):
    """A job file (or ``daskbatch.job`` config) names an unknown key or holds a value of the wrong type."""


def _key(default: Any, doc: str) -> Any:
    """A schema field: its default and its one-paragraph documentation."""
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"doc": doc})
    return field(default=default, metadata={"doc": doc})


@dataclass(frozen=True)
class InputSpec:
    """The data: a (samples x features) array in a Zarr store."""

    store: str | None = _key(None, "Path or fsspec URL of the Zarr store (required).")
    x: str = _key("X", "Name of the (samples, features) array in the store.")
    label: str | None = _key(None, "Name of the integer label array; null: the one the store records (synth, ingest).")


@dataclass(frozen=True)
class StatisticsSpec:
    """What describe computes (one or two passes over the data)."""

    stats: str | list[str] | None = _key(
        None,
        "Statistics (list, or comma-separated): moments, cov, hist, mi, class_moments, sketch, and your own "
        "as 'module:qualname' or a name in the daskbatch.statistics entry-point group. null: what the "
        "selection and transform need (moments; class_moments for score f/chi2; mi for mi/mrmr; cov for "
        "max_corr, mrmr or a project step).",
    )
    bins: int = _key(64, "Histogram bins per feature.")
    range: str | list[float] | None = _key(
        None, "Histogram range [lo, hi] for every feature (one pass), or 'minmax'; null: each feature's "
        "0.1-99.9 % quantiles (two passes)."
    )
    ddof: int = _key(1, "Delta degrees of freedom of variance and covariance.")
    nan_policy: Literal["omit", "propagate", "raise"] = _key("omit", "NaN values: omit (and count), propagate, raise.")
    classes: list[int] | None = _key(
        None, "Class values of the label, e.g. [0, 1, 7]; null: recorded by the store, else found by a scan."
    )
    missing: Literal["auto", "raise", "skip", "fill"] = _key(
        "auto", "Chunks absent from the store: auto (fill value, except lost chunks of a store daskbatch "
        "wrote: raise), raise, skip their rows, or fill (recorded in the report)."
    )


@dataclass(frozen=True)
class SelectionSpec:
    """Which features to keep (db.select, from the summary alone)."""

    score: Literal["f", "chi2", "mi", "variance", "mrmr"] = _key(
        "f", "Relevance score: f (ANOVA F), chi2, mi, variance, mrmr."
    )
    mode: Literal["k", "percentile", "fpr", "fdr", "fwe"] = _key(
        "k", "k best, a percentile, or p-value tests (fpr, fdr, fwe; scores f and chi2)."
    )
    param: int | float | str | None = _key(None, "The mode's k ('all' allowed), percentile or alpha; null: 10, 10, 0.05.")
    min_variance: float | None = _key(None, "First drop features whose (ddof=0) variance is not above this.")
    max_corr: float | None = _key(None, "Then, of each pair with |corr| above this, keep the more relevant.")


@dataclass(frozen=True)
class TransformSpec:
    """The steps every row goes through, into the transform store."""

    steps: list[Literal["select", "standardize", "clip", "project"]] = _key(
        ["select", "standardize"],
        "Steps in order: select (the selection), standardize (z-scores from the summary), clip, project "
        "(principal components of the data as the previous steps leave it). [] skips the transform.",
    )
    clip: list[float | None] = _key([-5.0, 5.0], "[lo, hi] of the clip step; either may be null.")
    k: int = _key(10, "Principal components of the project step.")
    dtype: Literal["float32", "float64"] | None = _key(None, "Output dtype; null: float64 after arithmetic.")
    chunk_rows: int | None = _key(None, "Rows per output chunk; null: the plan's chunk rows.")
    overwrite: bool = _key(False, "Start the transform store afresh instead of resuming it.")


@dataclass(frozen=True)
class ClusterSpec:
    """Where the work runs."""

    kind: Literal["auto", "local", "cuda", "slurm", "pbs", "threads", "address", "scheduler_file"] = _key(
        "auto",
        "auto (a GPU cluster when CUDA devices exist, else local), local, cuda, slurm, pbs, threads (dask's "
        "threaded scheduler, no cluster), address or scheduler_file (join a running scheduler).",
    )
    address: str | None = _key(None, "Scheduler address for kind address, e.g. tcp://node1:8786.")
    scheduler_file: str | None = _key(None, "Scheduler file for kind scheduler_file (dask scheduler, dask-mpi).")
    n_workers: int | None = _key(None, "Workers to start (jobs for slurm/pbs); null: the cluster's default.")
    threads: int | None = _key(None, "Threads per worker (cores for slurm/pbs); null: the cluster's default.")
    memory: str | int | None = _key(
        None, "Host memory limit of each worker the job starts (e.g. 8GiB); null: the job's memory when given "
        "(not for cuda, where that is GPU memory), else the cluster's default."
    )
    wait_for_workers: int | None = _key(
        None, "Start once this many workers are connected; null: 1 when joining or with slurm/pbs."
    )
    device: Literal["auto", "cpu", "gpu"] = _key("auto", "Where blocks are computed; auto: gpu on dask-cuda workers.")


@dataclass(frozen=True)
class OutputsSpec:
    """What the job writes; a relative path is inside dir, and null skips that output."""

    dir: str = _key(".", "Folder of the outputs (created when missing).")
    summary: str | None = _key("summary.zarr", "The summary (Zarr; db.load_summary reads it).")
    selection: str | None = _key("selection.csv", "The selection (.csv, or .json; db.load_selection reads it).")
    transform: str | None = _key("transformed.zarr", "The transformed rows (Zarr); null skips the transform.")
    report: str | None = _key("report.json", "The JSON report: versions, plan, counts, timings, outputs.")


@dataclass(frozen=True)
class JobSpec:
    """A whole ``daskbatch run`` job."""

    input: InputSpec = field(default_factory=InputSpec, metadata={"doc": InputSpec.__doc__})
    statistics: StatisticsSpec = field(default_factory=StatisticsSpec, metadata={"doc": StatisticsSpec.__doc__})
    selection: SelectionSpec = field(default_factory=SelectionSpec, metadata={"doc": SelectionSpec.__doc__})
    transform: TransformSpec = field(default_factory=TransformSpec, metadata={"doc": TransformSpec.__doc__})
    cluster: ClusterSpec = field(default_factory=ClusterSpec, metadata={"doc": ClusterSpec.__doc__})
    memory: str | int | float = _key(
        "auto", "Memory per worker that the plan must fit (16GiB, a fraction such as 0.5, or auto: the "
        "cluster's workers, else this machine). A plan that cannot fit stops the job (exit 3) before any compute."
    )
    checkpoint: str | None = _key(None, "Directory of describe's resumable partial states (a re-run resumes).")
    outputs: OutputsSpec = field(default_factory=OutputsSpec, metadata={"doc": OutputsSpec.__doc__})
    dask: dict[str, Any] | None = _key(None, "dask config set for the run only, e.g. {daskbatch: {split-every: 16}}.")

    def to_dict(self) -> dict[str, Any]:
        """Convert the job to a plain nested dict (YAML/JSON-ready).

        Returns
        -------
        dict
            The job.
        """
        return dataclasses.asdict(self)

    def output_path(self, name: str) -> str | None:
        """Give the path of output ``name``.

        Parameters
        ----------
        name : {"summary", "selection", "transform", "report"}
            The output.

        Returns
        -------
        str or None
            Its path, or None when skipped.
        """
        value = getattr(self.outputs, name)
        if value is None:
            return None
        return value if "://" in value or os.path.isabs(value) else os.path.join(self.outputs.dir, value)


#: The sections of a job and their schemas.
SECTIONS: dict[str, type] = {
    "input": InputSpec, "statistics": StatisticsSpec, "selection": SelectionSpec,
    "transform": TransformSpec, "cluster": ClusterSpec, "outputs": OutputsSpec,
}
#: Keys of the job only a file sets (not ``daskbatch.job`` config).
FILE_ONLY = ("dask",)


def defaults() -> dict[str, Any]:
    """Read the job defaults (what ``daskbatch.job`` in daskbatch.yaml holds).

    Returns
    -------
    dict
        The defaults, nested.
    """
    out = JobSpec().to_dict()
    for key in FILE_ONLY:
        out.pop(key)
    return out


# ------------------------------------------------------------------ validation


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _norm(key: Any) -> str:
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
    hints = _hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    out: dict[str, Any] = {}
    for raw, value in values.items():
        key = _norm(raw)
        path = f"{section}.{key}" if section else key
        if key not in hints:
            raise _unknown(where, path, names)
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
    import dask.config

    from daskbatch import config as _config  # noqa: F401  (loads daskbatch.yaml into dask.config)

    values = dask.config.get("daskbatch.job", default=None) or {}
    if not isinstance(values, Mapping):
        raise JobConfigError(f"dask config daskbatch.job must be a mapping, got {describe_value(values)}")
    where = "dask config daskbatch.job"
    checked = _check_section(where, None, JobSpec, values)
    for key in FILE_ONLY:
        if key in checked:
            raise JobConfigError(f"{where}: '{key}' can be set in a job file only")
    return checked


def effective_config() -> dict[str, Any]:
    """Overlay the job defaults with ``daskbatch.job.*`` from dask.config (what a job file starts from).

    Returns
    -------
    dict
        The effective job settings, nested.
    """
    return _merge(defaults(), _from_config())


def _build(values: Mapping[str, Any]) -> JobSpec:
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        kwargs[key] = SECTIONS[key](**value) if key in SECTIONS else value
    return JobSpec(**kwargs)


def load_job(source: str | os.PathLike[str] | Mapping[str, Any]) -> tuple[JobSpec, str]:
    """The job of a YAML file (or a mapping) over the config and the defaults, checked.

    Parameters
    ----------
    source : path or mapping
        A YAML job file, or its content as a mapping.

    Returns
    -------
    (JobSpec, str)
        The job, and the name its errors use (the file's path, or "job").

    Raises
    ------
    JobConfigError
        An unknown key (naming the closest valid one), a value of the wrong
        type, a missing ``input.store``, or a file that is not a YAML mapping.
    FileNotFoundError
        The file does not exist.
    """
    import yaml

    if isinstance(source, Mapping):
        where, loaded = "job", dict(source)
    else:
        where = os.fspath(source)
        with open(where, encoding="utf-8") as f:
            try:
                loaded = yaml.safe_load(f)
            except yaml.YAMLError as exc:
                mark = getattr(exc, "problem_mark", None)
                at = f" (line {mark.line + 1})" if mark is not None else ""
                raise JobConfigError(f"{where}: not valid YAML{at}: {getattr(exc, 'problem', exc)}") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, Mapping):
            raise JobConfigError(f"{where}: must hold a mapping of sections (input, statistics, ...), "
                                 f"got {describe_value(loaded)}")
    _refuse_option_file(where, loaded)
    values = _merge(effective_config(), _check_section(where, None, JobSpec, loaded))
    job = _build(values)
    _check_consistency(where, job)
    return job, where


#: Option names of ``daskbatch describe`` that are no key of a job: a ``--config`` file holds them.
_DESCRIBE_OPTIONS = frozenset({
    "label", "x", "classes", "stats", "bins", "range", "ddof", "nan_policy", "missing", "out", "json",
    "cov_out", "scheduler_file", "address", "wait_for_workers", "split_every", "device", "update",
})


def _refuse_option_file(where: str, loaded: Mapping[str, Any]) -> None:
    """A ``describe --config`` file (option names as keys, no sections) given as a job: say so in one line."""
    keys = {str(k).replace("-", "_") for k in loaded}
    options = sorted(keys & _DESCRIBE_OPTIONS)
    if options and not keys & set(SECTIONS):
        raise JobConfigError(
            f"{where} holds describe options ({', '.join(options)}), as a 'daskbatch describe --config' file "
            "does, not a job: a job file has sections (input:, statistics:, selection:, ...; docs/jobs.md)"
        )


def _check_consistency(where: str, job: JobSpec) -> None:
    """Rules across keys, each a one-line error."""
    if not job.input.store:
        raise JobConfigError(f"{where}: 'input.store' is required (the Zarr store to read)")
    kind = job.cluster.kind
    if kind == "address" and not job.cluster.address:
        raise JobConfigError(f"{where}: cluster kind 'address' needs 'cluster.address'")
    if kind == "scheduler_file" and not job.cluster.scheduler_file:
        raise JobConfigError(f"{where}: cluster kind 'scheduler_file' needs 'cluster.scheduler_file'")
    if isinstance(job.statistics.range, list) and len(job.statistics.range) != 2:
        raise JobConfigError(f"{where}: 'statistics.range' expects [lo, hi], got {job.statistics.range!r}")
    if isinstance(job.statistics.range, str) and job.statistics.range != "minmax":
        raise JobConfigError(f"{where}: 'statistics.range' expects [lo, hi] or 'minmax', got {job.statistics.range!r}")
    if len(job.transform.clip) != 2:
        raise JobConfigError(f"{where}: 'transform.clip' expects [lo, hi], got {job.transform.clip!r}")
    if job.transform.k < 1:
        raise JobConfigError(f"{where}: 'transform.k' must be at least 1, got {job.transform.k}")
    steps = job.transform.steps
    if len(set(steps)) != len(steps):
        raise JobConfigError(f"{where}: 'transform.steps' names a step twice: {steps}")
    if "clip" in steps and "project" in steps and steps.index("clip") < steps.index("project"):
        raise JobConfigError(
            f"{where}: 'transform.steps' clips before project, but the summary does not describe clipped values; "
            "put project before clip"
        )


# ------------------------------------------------------------------ documentation


def _yaml_value(value: Any) -> str:
    import yaml

    return yaml.safe_dump(value, default_flow_style=True, width=1000).strip().removesuffix("...").strip()


def reference() -> str:
    """The schema as an annotated YAML job file: every key, its default and its documentation.

    Returns
    -------
    str
        Lines such as ``  bins: 64  # Histogram bins per feature.``; sections
        are introduced by a comment with their docstring.
    """
    lines = []
    for f in dataclasses.fields(JobSpec):
        if f.name in SECTIONS:
            lines.append(f"# {f.metadata['doc']}")
            lines.append(f"{f.name}:")
            for g in dataclasses.fields(SECTIONS[f.name]):
                default = g.default_factory() if g.default_factory is not dataclasses.MISSING else g.default
                lines.append(f"  {g.name}: {_yaml_value(default)}  # {g.metadata['doc']}")
        else:
            lines.append(f"{f.name}: {_yaml_value(f.default)}  # {f.metadata['doc']}")
    return "\n".join(lines)
