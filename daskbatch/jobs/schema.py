"""The schema of a job: a dataclass per section, every key with its type and its documentation."""

from __future__ import annotations

import copy
import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

__all__ = [
    "ClusterSpec", "InputSpec", "JobConfigError", "JobSpec", "OutputsSpec", "SelectionSpec", "StatisticsSpec",
    "TransformSpec", "defaults", "reference",
]


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


def configured_default(section: str | None, name: str) -> Any:
    """Read the default of a job key from dask config (``daskbatch.job.<section>.<name>``, set by daskbatch.yaml)."""
    from daskbatch import config  # lazy: dask, which `daskbatch --help` does not load

    key = f"job.{section}.{name}" if section else f"job.{name}"
    try:
        return copy.deepcopy(config.get(key))
    except KeyError:  # config.get falls back to daskbatch.yaml, which sets every key the schema has
        raise JobConfigError(f"dask config daskbatch.{key} is missing, and daskbatch.yaml has no default for it") from None


class _FromConfig:
    """Fill the fields left at ``_UNSET`` from daskbatch.yaml: a section's keys live there only."""

    _section: ClassVar[str | None]

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # type: ignore[arg-type]  # every subclass is a dataclass
            if getattr(self, f.name) is _UNSET:
                object.__setattr__(self, f.name, configured_default(self._section, f.name))


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
        "auto (a GPU cluster when CUDA devices exist, else local), local, cuda, slurm, pbs, threads (dask's "
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


# ------------------------------------------------------------------ documentation


def _yaml_value(value: Any) -> str:
    import yaml

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
