"""Where a job runs: the client of its cluster, and the resources its plan must fit."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

from daskbatch.engine.planner import plan_describe
from daskbatch.jobs._stages import histogram_range
from daskbatch.jobs.schema import JobSpec
from daskbatch.runtime.capacity import (
    parse_memory,
    resources_from_client,
    resources_from_machine,
)
from daskbatch.runtime.cluster import cluster, require_cuda, resolve_kind


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
