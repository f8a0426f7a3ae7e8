"""The schema of a job: a dataclass per section, every key with its type and documentation, and values checked against those type hints (types in words for errors)."""

from __future__ import annotations

import copy
import dataclasses
import os
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import yaml

from daskbatch._common import short_repr

__all__ = ['ClusterSpec', 'InputSpec', 'JobConfigError', 'JobSpec', 'OutputsSpec', 'SelectionSpec', 'StatisticsSpec', 'TransformSpec', 'defaults', 'reference']


class JobConfigError(ValueError):
    """A job file (or ``daskbatch.job`` config) names an unknown key or holds a value of the wrong type."""


class _Unset:
    """The default of every schema key: filled in from ``daskbatch.job`` of dask config when the spec is made."""

    def __repr__(self) -> str:
        return "<daskbatch.yaml>"


_UNSET: Any = _Unset()


def _key(doc: str) -> Any:
    """A schema field: its one-paragraph documentation; its default lives in daskbatch.yaml only."""
    return field(default=_UNSET, metadata={"doc": doc})


class _FromConfig:
    """Fill the fields left at ``_UNSET`` from dask config (``daskbatch.job.<section>.<name>``, set by daskbatch.yaml)."""

    _section: ClassVar[str | None]

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # type: ignore[arg-type]  # every subclass is a dataclass
            if getattr(self, f.name) is not _UNSET:
                continue
            from daskbatch import config  # lazy: dask, which `daskbatch --help` does not load

            key = f"job.{self._section}.{f.name}" if self._section else f"job.{f.name}"
            try:  # config.get falls back to daskbatch.yaml, which sets every key the schema has
                value = copy.deepcopy(config.get(key))
            except KeyError:
                raise JobConfigError(f"dask config daskbatch.{key} is missing, and daskbatch.yaml has no default for it") from None
            object.__setattr__(self, f.name, value)


@dataclass(frozen=True)
class InputSpec(_FromConfig):
    """The data: a (samples x features) array in a Zarr store."""

    _section: ClassVar[str | None] = "input"

    store: str | None = _key("Path or fsspec URL of the Zarr store (required).")
    x: str = _key("Name of the (samples, features) array in the store.")
    label: str | None = _key("Name of the integer label array; null: the one the store records (synth, ingest).")
    weights: str | None = _key(
        "Name of the 1-D array of sample weights in the store (one non-negative weight per row); null: unweighted."
    )
    target: str | None = _key(
        "Name of the 1-D continuous target array in the store (instead of a label); null: none."
    )
    groups: str | None = _key(
        "Name of the 1-D integer array of group keys in the store (instead of a label): moments, and with "
        "hist histograms, of every feature within every group; statistics.classes declares the group values. null: none."
    )


@dataclass(frozen=True)
class StatisticsSpec(_FromConfig):
    """What describe computes (one or two passes over the data)."""

    _section: ClassVar[str | None] = "statistics"

    stats: str | list[str] | None = _key(
        "Statistics (list, or comma-separated): moments, cov, hist, mi, class_moments, sketch, and your own "
        "by a name registered in the daskbatch.statistics entry-point group (never an import path). null: what the "
        "selection and transform need (moments; class_moments for score f/chi2; mi for mi/mrmr; cov for "
        "max_corr, mrmr or a project step).",
    )
    bins: int = _key("Histogram bins per feature.")
    range: str | list[float] | None = _key(
        "Histogram range [lo, hi] for every feature (one pass), or 'minmax'; null: each feature's "
        "0.1-99.9 % quantiles (two passes)."
    )
    ddof: int = _key("Delta degrees of freedom of variance and covariance.")
    nan_policy: Literal["omit", "propagate", "raise"] = _key("NaN values: omit (and count), propagate, raise.")
    classes: list[int] | None = _key(
        "Class values of the label, e.g. [0, 1, 7]; null: recorded by the store, else found by a scan."
    )
    missing: Literal["auto", "raise", "skip", "fill"] = _key(
        "Chunks absent from the store: auto (fill value, except lost chunks of a store daskbatch "
        "wrote: raise), raise, skip their rows, or fill (recorded in the report)."
    )


@dataclass(frozen=True)
class SelectionSpec(_FromConfig):
    """Which features to keep (db.select, from the summary alone)."""

    _section: ClassVar[str | None] = "selection"

    score: Literal["f", "chi2", "mi", "variance", "mrmr"] = _key(
        "Relevance score: f (ANOVA F), chi2, mi, variance, mrmr."
    )
    mode: Literal["k", "percentile", "fpr", "fdr", "fwe"] = _key(
        "k best, a percentile, or p-value tests (fpr, fdr, fwe; scores f and chi2)."
    )
    param: int | float | str | None = _key("The mode's k ('all' allowed), percentile or alpha; null: 10, 10, 0.05.")
    min_variance: float | None = _key("First drop features whose (ddof=0) variance is not above this.")
    max_corr: float | None = _key("Then, of each pair with |corr| above this, keep the more relevant.")


@dataclass(frozen=True)
class TransformSpec(_FromConfig):
    """The steps every row goes through, into the transform store."""

    _section: ClassVar[str | None] = "transform"

    steps: list[Literal["select", "standardize", "clip", "project"]] = _key(
        "Steps in order: select (the selection), standardize (z-scores from the summary), clip, project "
        "(principal components of the data as the previous steps leave it). [] skips the transform.",
    )
    clip: list[float | None] = _key("[lo, hi] of the clip step; either may be null.")
    k: int = _key("Principal components of the project step.")
    dtype: Literal["float32", "float64"] | None = _key("Output dtype; null: float64 after arithmetic.")
    chunk_rows: int | None = _key("Rows per output chunk; null: the plan's chunk rows.")
    overwrite: bool = _key("Start the transform store afresh instead of resuming it.")


@dataclass(frozen=True)
class ClusterSpec(_FromConfig):
    """Where the work runs."""

    _section: ClassVar[str | None] = "cluster"

    kind: Literal["auto", "local", "cuda", "slurm", "pbs", "threads", "address", "scheduler_file"] = _key(
        "auto (a GPU cluster when CUDA devices exist, else threads, or local when n_workers or memory is given), "
        "local, cuda, slurm, pbs, threads (dask's "
        "threaded scheduler, no cluster), address or scheduler_file (join a running scheduler).",
    )
    address: str | None = _key("Scheduler address for kind address, e.g. tcp://node1:8786.")
    scheduler_file: str | None = _key("Scheduler file for kind scheduler_file (dask scheduler, dask-mpi).")
    n_workers: int | None = _key("Workers to start (jobs for slurm/pbs); null: the cluster's default.")
    threads: int | None = _key("Threads per worker (cores for slurm/pbs); null: the cluster's default.")
    memory: str | int | None = _key(
        "Host memory limit of each worker the job starts (e.g. 8GiB); null: the job's memory when given "
        "(not for cuda, where that is GPU memory), else the cluster's default."
    )
    wait_for_workers: int | None = _key(
        "Start once this many workers are connected; null: 1 when joining or with slurm/pbs."
    )
    device: Literal["auto", "cpu", "gpu"] = _key("Where blocks are computed; auto: gpu on dask-cuda workers.")


@dataclass(frozen=True)
class OutputsSpec(_FromConfig):
    """What the job writes; a relative path is inside dir, and null skips that output."""

    _section: ClassVar[str | None] = "outputs"

    dir: str = _key("Folder of the outputs (created when missing).")
    summary: str | None = _key("The summary (Zarr; db.load_summary reads it).")
    selection: str | None = _key("The selection (.csv, or .json; db.load_selection reads it).")
    transform: str | None = _key("The transformed rows (Zarr); null skips the transform.")
    report: str | None = _key("The JSON report: versions, plan, counts, timings, outputs.")


@dataclass(frozen=True)
class JobSpec(_FromConfig):
    """A whole ``daskbatch run`` job."""

    _section: ClassVar[str | None] = None

    input: InputSpec = field(default_factory=InputSpec, metadata={"doc": InputSpec.__doc__})
    statistics: StatisticsSpec = field(default_factory=StatisticsSpec, metadata={"doc": StatisticsSpec.__doc__})
    selection: SelectionSpec = field(default_factory=SelectionSpec, metadata={"doc": SelectionSpec.__doc__})
    transform: TransformSpec = field(default_factory=TransformSpec, metadata={"doc": TransformSpec.__doc__})
    cluster: ClusterSpec = field(default_factory=ClusterSpec, metadata={"doc": ClusterSpec.__doc__})
    memory: str | int | float = _key(
        "Memory per worker that the plan must fit (16GiB, a fraction such as 0.5, or auto: the "
        "cluster's workers, else this machine). A plan that cannot fit stops the job (exit 3) before any compute."
    )
    checkpoint: str | None = _key("Directory of describe's resumable partial states (a re-run resumes).")
    outputs: OutputsSpec = field(default_factory=OutputsSpec, metadata={"doc": OutputsSpec.__doc__})
    # Set by the file's other top-level keys (daskbatch: {split-every: 16}, distributed: ...), not under job.
    dask: dict[str, Any] | None = field(
        default=None, metadata={"doc": "dask config set for the run only, e.g. {daskbatch: {split-every: 16}}."}
    )

    def to_dict(self) -> dict[str, Any]:
        """Convert the job to a plain nested dict (YAML/JSON-ready)."""
        return dataclasses.asdict(self)

    def output_path(self, name: str) -> str | None:
        """Give the path of output ``name``."""
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
    """Read the job defaults: ``daskbatch.job`` of dask config, whose defaults are daskbatch.yaml's."""
    out = JobSpec().to_dict()
    for key in FILE_ONLY:
        out.pop(key)
    return out


def _yaml_value(value: Any) -> str:
    """A value as YAML writes it on one line."""
    return yaml.safe_dump(value, default_flow_style=True, width=1000).strip().removesuffix("...").strip()


def reference() -> str:
    """Render the schema as an annotated configuration file: every key of the job, its default and its documentation."""
    lines = ["daskbatch:", "  job:"]
    job = JobSpec()
    for f in dataclasses.fields(JobSpec):
        if f.name in FILE_ONLY:
            continue  # the file's other top-level keys, not a key of the job
        if f.name in SECTIONS:
            lines.append(f"    # {f.metadata['doc']}")
            lines.append(f"    {f.name}:")
            section = getattr(job, f.name)
            for g in dataclasses.fields(SECTIONS[f.name]):
                lines.append(f"      {g.name}: {_yaml_value(getattr(section, g.name))}  # {g.metadata['doc']}")
        else:
            lines.append(f"    {f.name}: {_yaml_value(getattr(job, f.name))}  # {f.metadata['doc']}")
    return "\n".join(lines)


#: The scalar types of the schema: a test of a value, the type in words, and a list of them in words.
_SCALARS: dict[Any, tuple[Callable[[Any], bool], str, str]] = {
    type(None): (lambda v: v is None, "null", "null"),
    bool: (lambda v: isinstance(v, bool), "true or false", "booleans"),
    int: (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer", "integers"),
    float: (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number", "numbers"),
    str: (lambda v: isinstance(v, str), "a string", "strings"),
}


def expected(tp: Any) -> str:
    """Say a type in words: 'an integer', "one of 'omit', 'raise'", 'a list of numbers or null'."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(expected(a) for a in typing.get_args(tp))
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin is list:
        (item,) = typing.get_args(tp)
        if typing.get_origin(item):
            return f"a list of ({expected(item)})"
        return "a list of " + (_SCALARS[item][2] if item in _SCALARS else expected(item))
    if origin is dict or tp is dict:
        return "a mapping"
    return _SCALARS[tp][1] if tp in _SCALARS else str(tp)


def matches(value: Any, tp: Any) -> tuple[bool, Any]:
    """Check ``value`` against the type hint ``tp``."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            ok, conv = matches(value, arg)
            if ok:
                return True, conv
        return False, value
    if origin is Literal:
        return value in typing.get_args(tp) and not isinstance(value, bool), value
    if origin is list:
        if not isinstance(value, (list, tuple)):
            return False, value
        (item,) = typing.get_args(tp)
        checked = [matches(v, item) for v in value]
        if all(ok for ok, _ in checked):
            return True, [conv for _, conv in checked]
        return False, value
    if origin is dict or tp is dict:
        return isinstance(value, Mapping), dict(value) if isinstance(value, Mapping) else value
    if tp in _SCALARS:
        ok = _SCALARS[tp][0](value)
        return ok, float(value) if ok and tp is float else value
    return isinstance(value, tp), value


def describe_value(value: Any) -> str:
    """Show a value as an error does: its repr (cut at 40 characters) and its type."""
    return f"{short_repr(value)} ({type(value).__name__})"  # never the whole repr: a file's value may be huge


def short_text(text: Any, limit: int = 60) -> str:
    """Cut a key or a name from a file to about ``limit`` characters for a message."""
    if not isinstance(text, str):
        return short_repr(text, limit)
    return text if len(text) <= limit else text[: limit - 3] + "..."


#: Largest file read (a job file is a few hundred bytes; dask settings add little).
MAX_FILE_BYTES = 1 << 20
#: Most nested mappings and lists, aliases expanded (a job nests 4 deep, dask settings about 6).
MAX_DEPTH = 50
#: Most values (keys, scalars, mappings, lists), each alias counted as what it names.
MAX_VALUES = 100_000

_OPENING = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_CLOSING = (yaml.MappingEndEvent, yaml.SequenceEndEvent)
_MERGE_TAG = "tag:yaml.org,2002:merge"


def load_bounded(data: bytes, where: str) -> Any:
    """Build the value of a YAML file's bytes, refusing what exceeds the bounds."""
    if len(data) > MAX_FILE_BYTES:
        raise JobConfigError(f"{where}: is larger than {MAX_FILE_BYTES} bytes, far more than a configuration file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JobConfigError(f"{where}: is not UTF-8 text (byte {exc.start})") from None
    try:
        _check_shape(text, where)
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader that also refuses repeated keys
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark is not None else ""
        if isinstance(exc, yaml.reader.ReaderError):  # a character YAML does not allow: no line, a position
            at, problem = f" (character {exc.position})", f"{exc.reason} {exc.character!r}"
        else:
            problem = getattr(exc, "problem", None) or str(exc)
        raise JobConfigError(f"{where}: not valid YAML{at}: {' '.join(str(problem).split())}") from None


def _check_shape(text: str, where: str) -> None:
    """Scan the events of ``text``: depth and number of values, each alias as what it names, no alias in itself."""
    named: dict[str, tuple[int, int]] = {}  # anchor -> (values, depth below it) of the node it names
    open_nodes: list[list[Any]] = []  # [values so far, depth below, anchor] of each mapping or list being read
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, _OPENING):
            if len(open_nodes) >= MAX_DEPTH:
                raise _too_deep(where, event)
            open_nodes.append([1, 1, event.anchor])
            continue
        if isinstance(event, _CLOSING):
            values, depth, anchor = open_nodes.pop()
            if anchor is not None:
                named[anchor] = (values, depth)
        elif isinstance(event, yaml.ScalarEvent):
            values, depth = 1, 0
            if event.anchor is not None:
                named[event.anchor] = (values, depth)
        elif isinstance(event, yaml.AliasEvent):
            if any(node[2] == event.anchor for node in open_nodes):
                raise JobConfigError(f"{where}: line {event.start_mark.line + 1}: the alias *{event.anchor} is "
                                     "inside the value it names (a value that contains itself)")
            values, depth = named.get(event.anchor, (1, 0))  # an undefined alias: the loader says so
            if len(open_nodes) + depth > MAX_DEPTH:
                raise _too_deep(where, event)
        else:
            continue
        if open_nodes:
            parent = open_nodes[-1]
            parent[0] += values
            parent[1] = max(parent[1], depth + 1)
            values = parent[0]
        if values > MAX_VALUES:
            raise JobConfigError(
                f"{where}: line {event.start_mark.line + 1}: more than {MAX_VALUES} values with its aliases "
                "expanded, far more than a configuration file holds"
            )


def _too_deep(where: str, event: Any) -> JobConfigError:
    """The error of a value nested deeper than :data:`MAX_DEPTH`."""
    return JobConfigError(f"{where}: line {event.start_mark.line + 1}: mappings and lists nested more than "
                          f"{MAX_DEPTH} deep (aliases expanded), far more than a configuration file holds")


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a mapping that gives a key twice (the safe loader keeps the last)."""

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict[Any, Any]:
        """Build a mapping, refusing a repeated key (keys merged in by ``<<`` may be overridden, as YAML says)."""
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG:
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    repeated = key in seen
                    seen.add(key)
                except TypeError:
                    continue  # an unhashable key: the safe loader refuses it with its own words
                if repeated:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"the key {describe_value(key)} is given twice", key_node.start_mark
                    )
        return super().construct_mapping(node, deep=deep)  # type: ignore[no-any-return]
