"""What each stage of a job needs and builds: its statistics, its transform steps, a saved summary to reuse."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from daskbatch.engine.planner import plan_describe
from daskbatch.jobs.schema import JobSpec
from daskbatch.runtime.capacity import (
    parse_memory,
    resources_from_client,
    resources_from_machine,
)
from daskbatch.runtime.cluster import cluster, require_cuda, resolve_kind
from daskbatch.summary import load_summary
from daskbatch.transforms import steps
from daskbatch.transforms import steps as st

log = logging.getLogger("daskbatch.jobs")  # the job's one logger, as run.py's


def needed_stats(job: JobSpec) -> list[str]:
    """List the statistics of the job: as given, else what its selection and transform need."""
    given = job.statistics.stats
    if given is not None:
        return [s.strip() for s in given.split(",") if s.strip()] if isinstance(given, str) else list(given)
    names = ["moments"]
    if selection_needed(job):
        score = job.selection.score
        if score in ("f", "chi2"):
            names.append("class_moments")
        if score in ("mi", "mrmr"):
            names += ["hist", "mi"]
        if job.selection.max_corr is not None or score == "mrmr":
            names.append("cov")
    if transform_needed(job) and "project" in job.transform.steps and "cov" not in names:
        names.append("cov")
    return names


def transform_needed(job: JobSpec) -> bool:
    """Tell whether the job writes a transform store (steps given and an output named)."""
    return bool(job.transform.steps) and job.outputs.transform is not None


def selection_needed(job: JobSpec) -> bool:
    """Tell whether the job selects features: for its own output or for a select step."""
    return job.outputs.selection is not None or (transform_needed(job) and "select" in job.transform.steps)


@dataclass(frozen=True)
class Moments:
    """The first two moments of the data as some steps leave them: what :func:`daskbatch.pca` reads."""

    feature_names: tuple[str, ...]
    mean: np.ndarray
    cov: np.ndarray
    cov_count: int
    provenance: dict[str, Any]


def pca_input(summary: Any, selection: Any, before: Sequence[str]) -> Any:
    """Give the summary's moments after the steps ``before`` (select: a subset; standardize: the correlations)."""
    d = len(summary.feature_names)
    idx = selection.indices if "select" in before else np.arange(d)
    standardized = "standardize" in before
    if summary.cov is not None:
        cov = np.asarray(summary.cov, dtype=np.float64)[np.ix_(idx, idx)]
    elif summary.provenance.get("tiled_cov"):
        if idx.size == d and not standardized:
            return summary  # the whole tiled covariance: pca's Lanczos reads it tile by tile
        lazy = summary.tiled_cov().cov
        cov = np.asarray(lazy[idx][:, idx].compute(), dtype=np.float64)
    else:
        raise ValueError("the project step needs the covariance: add 'cov' to statistics.stats")
    mean = np.asarray(summary.mean, dtype=np.float64)[idx]
    if standardized:
        # z = (x - mean) / std: mean 0, cov_ij / (std_i std_j); constant features (std 0) become 0.
        # The std the standardize step divides by (the population std, as StandardScaler's).
        std = steps.standardize(summary).std[idx]
        inv = np.divide(1.0, std, out=np.zeros_like(std), where=std != 0)
        cov, mean = cov * np.outer(inv, inv), np.zeros_like(mean)
    names = tuple(str(summary.feature_names[i]) for i in idx)
    return Moments(names, mean, cov, int(summary.cov_count), dict(summary.provenance))


#: Provenance that must agree for a saved summary to stand for a new one.
_SAME_PROVENANCE = ("path", "array", "label", "shape", "dtype", "stats", "bins", "ddof", "bias", "nan_policy",
                    "range", "missing_policy", "classes_from")


def saved_twin(path: str, summary: Any) -> Any:
    """Give the summary saved at ``path`` when its statistics equal ``summary``'s bit for bit, else None."""
    if "://" in path or not os.path.exists(path):
        return None
    try:
        saved = load_summary(path)
    except Exception as exc:  # unreadable or not a summary: it is replaced
        log.info("summary: %s cannot be read as a summary (%s); writing it again", path, exc)
        return None
    if tuple(saved.feature_names) != tuple(summary.feature_names):
        return None
    a, b = saved.provenance, summary.provenance
    if any(a.get(k) != b.get(k) for k in _SAME_PROVENANCE) or saved.cov_count != summary.cov_count:
        return None
    for name in {**summary.variables, **saved.variables}:
        new, old = getattr(summary, name), getattr(saved, name)
        if isinstance(new, np.ndarray) or isinstance(old, np.ndarray):
            if not (isinstance(new, np.ndarray) and isinstance(old, np.ndarray) and new.shape == old.shape
                    and new.dtype == old.dtype and np.array_equal(new, old, equal_nan=new.dtype.kind in "fc")):
                return None
    return saved


def build_steps(job: JobSpec, summary: Any, selection: Any) -> list[Any]:
    """Build the transform steps of the job from the summary and the selection."""
    built: list[Any] = []
    for i, name in enumerate(job.transform.steps):
        if name == "select":
            built.append(st.select(selection))
        elif name == "standardize":
            built.append(st.standardize(summary))
        elif name == "clip":
            lo, hi = job.transform.clip
            built.append(st.clip(lo, hi))
        else:
            built.append(st.project(pca_input(summary, selection, job.transform.steps[:i]), job.transform.k))
    return built



def histogram_range(job: JobSpec) -> Any:
    """Give the job's histogram range as describe takes it."""
    r = job.statistics.range
    return (float(r[0]), float(r[1])) if isinstance(r, list) else r


def memory_limit(job: JobSpec, kind: str) -> Any:
    """Give the host memory limit of each worker the job starts."""
    if job.cluster.memory is not None:
        return job.cluster.memory
    return None if job.memory == "auto" or kind == "cuda" else job.memory


@contextlib.contextmanager
def job_client(job: JobSpec, cuda_plan: Any) -> Iterator[Any]:
    """Start or join the job's cluster; its client is closed on exit if the job started it."""
    import dask  # lazy: dask

    spec = job.cluster
    if spec.kind == "threads":
        settings: dict[str, Any] = {"scheduler": "threads"}
        if spec.threads:
            settings["num_workers"] = spec.threads
        with dask.config.set(settings):
            yield None
        return
    kwargs: dict[str, Any] = {}
    kind = resolve_kind(spec.kind) if spec.kind == "auto" else spec.kind
    limit = memory_limit(job, kind)
    if spec.kind in ("address", "scheduler_file"):
        with cluster(address=spec.address if spec.kind == "address" else None,
                     scheduler_file=spec.scheduler_file if spec.kind == "scheduler_file" else None,
                     wait_for_workers=spec.wait_for_workers) as client:
            yield client
        return
    if spec.kind in ("slurm", "pbs"):
        for key, value in (("jobs", spec.n_workers), ("cores", spec.threads), ("memory", limit)):
            if value is not None:
                kwargs[key] = value
    else:
        for key, value in (("n_workers", spec.n_workers), ("threads_per_worker", spec.threads),
                           ("memory_limit", limit)):
            if value is not None:
                kwargs[key] = value
    with cluster(kind, plan=cuda_plan, wait_for_workers=spec.wait_for_workers, **kwargs) as client:
        yield client


def job_resources(job: JobSpec, client: Any) -> Any:
    """Give the workers the plan must fit: the cluster's (or this machine's), with the job's memory budget."""
    if client is None:
        return resources_from_machine(n_workers=1, threads_per_worker=job.cluster.threads, memory=job.memory)
    device = None if job.cluster.device == "auto" else job.cluster.device
    found = resources_from_client(client, device=device)
    if job.memory == "auto":
        return found
    if found.device == "gpu":
        total = found.device_memory_bytes or 1
        return dataclasses.replace(found, device_memory_bytes=parse_memory(job.memory, total_bytes=total))
    return dataclasses.replace(found, memory_bytes=parse_memory(job.memory, total_bytes=found.memory_bytes))


def plan_for_cuda(job: JobSpec, dataset: Any, stats: list[str]) -> Any:
    """Plan for this machine's GPUs before a cuda cluster starts (the plan sizes its RMM pool)."""
    kind = resolve_kind(job.cluster.kind) if job.cluster.kind == "auto" else job.cluster.kind
    if kind != "cuda":
        return None
    gpus = resources_from_machine(n_workers=require_cuda(), device="gpu", memory=job.memory)
    return plan_describe(dataset, stats=stats, bins=job.statistics.bins, range=histogram_range(job), resources=gpus,
                         classes=job.statistics.classes, target=job.input.target, groups=job.input.groups,
                         weights=job.input.weights)
