"""``run_job``: a whole batch job from one file (describe, select, transform, and a report), and what each stage needs and builds."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from daskbatch.describing import describe
from daskbatch.engine.checkpoint_files import check_checkpoint_dir
from daskbatch.engine.planner import plan_describe
from daskbatch.engine.run_options import RunOptions
from daskbatch.errors import (
    Cancelled,
    Interrupted,
    PlanError,
    describe_lost,
    is_lost_scheduler,
    what_was_lost,
)
from daskbatch.io.dataset import open_dataset
from daskbatch.io.outputs import (
    Form,
    OutputError,
    OutputTarget,
    check_outputs,
    check_separate,
    output_kind,
    write_json,
)
from daskbatch.io.rowstore import LOCAL_ONLY, LOCAL_ONLY_FIX
from daskbatch.jobs import (
    MISSING_KEYS,
    JobReport,
    json_default,
    json_safe,
    memory_words,
    now,
    phase,
)
from daskbatch.jobs.spec import JobConfigError, JobSpec, check_dask_settings, flatten, load_job
from daskbatch.runtime.capacity import (
    parse_memory,
    peak_memory,
    resources_from_client,
    resources_from_machine,
)
from daskbatch.runtime.cluster import cli_kind, planned_client, resolve_kind
from daskbatch.runtime.progress import ProgressCallback
from daskbatch.selection import select
from daskbatch.stats import Moments
from daskbatch.summary import load_summary
from daskbatch.transforms import steps, transform

if TYPE_CHECKING:
    from daskbatch.planning.plan import Plan, Resources

__all__ = ['JobReport', 'run_job']


log = logging.getLogger("daskbatch.jobs")


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
class FittedMoments:
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
    return FittedMoments(names, mean, cov, int(summary.cov_count), dict(summary.provenance))


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
        new, old = summary.variables.get(name), saved.variables.get(name)
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
            built.append(steps.select(selection))
        elif name == "standardize":
            built.append(steps.standardize(summary))
        elif name == "clip":
            lo, hi = job.transform.clip
            built.append(steps.clip(lo, hi))
        else:
            built.append(steps.project(pca_input(summary, selection, job.transform.steps[:i]), job.transform.k))
    return built


def describe_keywords(job: JobSpec) -> dict[str, Any]:
    """Give the keywords that describe and its plan take from the job."""
    r = job.statistics.range
    return {"bins": job.statistics.bins, "range": (float(r[0]), float(r[1])) if isinstance(r, list) else r,
            "classes": job.statistics.classes, "target": job.input.target, "groups": job.input.groups,
            "weights": job.input.weights}


def job_kind(job: JobSpec) -> str:
    """Give the kind of cluster the job runs on, ``"auto"`` resolved."""
    spec = job.cluster
    if spec.kind != "auto":
        return spec.kind
    # "auto" without GPUs runs here on dask's threads, as `daskbatch describe` does (worker processes would each
    # load the kernels again), unless the job sizes workers: then it gets the LocalCluster it describes.
    sized = spec.n_workers is not None or spec.memory is not None
    return resolve_kind("auto") if sized else cli_kind("auto")


@contextlib.contextmanager
def job_client(job: JobSpec, kind: str, plan_for: Callable[[Resources], Plan]) -> Iterator[Any]:
    """Start or join the job's cluster of ``kind``; its client is closed on exit if the job started it."""
    import dask  # lazy: dask

    spec = job.cluster
    if kind == "threads":  # dask's threaded scheduler here, on the job's threads when it gives them
        with dask.config.set(scheduler="threads", num_workers=spec.threads or dask.config.get("num_workers", None)):
            yield None
        return
    sizes: dict[str, Any] = {}
    if kind not in ("address", "scheduler_file"):  # a cluster the job starts: sized by the job
        memory: Any = spec.memory
        if memory is None and job.memory != "auto" and kind != "cuda":  # the job's budget (on cuda: GPU memory)
            memory = job.memory
        names = (("jobs", "cores", "memory") if kind in ("slurm", "pbs")
                 else ("n_workers", "threads_per_worker", "memory_limit"))
        given = zip(names, (spec.n_workers, spec.threads, memory), strict=True)
        sizes = {key: value for key, value in given if value is not None}
    with planned_client(kind, plan_for, gpu_memory=job.memory, address=spec.address if kind == "address" else None,
                        scheduler_file=spec.scheduler_file if kind == "scheduler_file" else None,
                        wait_for_workers=spec.wait_for_workers, **sizes) as client:
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


#: A failed job's status in its report, by the exception that ended it (else "failed").
_STATUS = ((PlanError, "plan_error"), ((Interrupted, Cancelled, KeyboardInterrupt), "interrupted"),
           ((ValueError, TypeError, KeyError, OSError), "bad_input"))


def run_job(
    source: str | os.PathLike[str] | Mapping[str, Any], *, allow_dask_config: bool = False, overwrite: bool = False,
    progress: bool | ProgressCallback = False, cancel: threading.Event | None = None,
) -> JobReport:
    """Run the batch job of a YAML file (or mapping): describe, select, transform, report."""
    t0 = time.perf_counter()
    job, where = load_job(source)
    settings = check_dask_settings(job.dask or {}, where, allow=allow_dask_config)
    targets = check_job_outputs(job, overwrite=overwrite)  # all of them before anything is written
    report = JobReport(job=job, source=where, started=now())
    import dask  # lazy: dask

    try:
        with dask.config.set(dict(flatten(settings))):
            _run(job, report, overwrite, progress, cancel)
    except BaseException as exc:
        if is_lost_scheduler(exc, connecting=False):  # as `daskbatch run` tells it: a checkpoint lets it resume
            report.status, report.error = "interrupted", f"lost {what_was_lost(exc)} ({describe_lost(exc)})"
        else:
            report.status = next((status for types, status in _STATUS if isinstance(exc, types)), "failed")
            report.error = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        _finish(report, t0, targets.get("outputs.report"))
    return report



def check_job_outputs(job: JobSpec, *, overwrite: bool = False) -> dict[str, OutputTarget]:
    """Check every path the job would write, together, before anything is written."""
    folder = job.outputs.dir
    named: dict[str, tuple[str | None, str, Form]] = {
        "outputs.summary": (job.output_path("summary"), "summary", "zarr"),
        "outputs.selection": (job.output_path("selection") if selection_needed(job) else None, "selection", "file"),
        "outputs.transform": (job.output_path("transform") if transform_needed(job) else None, "transform", "zarr"),
        "outputs.report": (job.output_path("report"), "job_report", "file"),
    }
    transform_path = named["outputs.transform"][0]
    if transform_path is not None and "://" in transform_path:  # transform() would refuse it after the describe
        raise OutputError(f"outputs.transform {transform_path}: transform stores are {LOCAL_ONLY}: {LOCAL_ONLY_FIX}")
    protected = {"the input store (input.store)": job.input.store}
    targets = check_outputs(named, overwrite=overwrite, protected=protected, make_parents=True)
    if job.checkpoint is not None:
        check_separate(job.checkpoint, "checkpoint", {**protected, **{k: t.path for k, t in targets.items()}})
        check_checkpoint_dir(job.checkpoint, "checkpoint")
    folder_abs = os.path.abspath(folder) if "://" not in folder else None
    for key, (path, _, _) in named.items():
        # Only outputs.dir is created: any other missing folder is an error now, not after the compute.
        if path is not None and "://" not in path:
            parent = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(parent) and parent != folder_abs:
                raise OutputError(f"{key} {path}: directory {parent} does not exist; create it or choose another path")
    return targets


def _finish(report: JobReport, t0: float, target: OutputTarget | None) -> None:
    report.timings["total"] = round(time.perf_counter() - t0, 3)
    report.finished = now()
    if not report.peak_memory:
        report.peak_memory = peak_memory(None)
    if target is not None:
        report.outputs["report"] = target.path
        try:  # write_json puts the marker first: a re-run recognises the report as one it may replace
            write_json(target, json_safe(report.to_dict()), indent=2, default=json_default)
        except OSError as exc:
            if report.status == "ok":
                raise
            log.error("could not write the report %s: %s", target.path, exc)
    (log.info if report.status == "ok" else log.error)("%s", report.summary_line())


def _run(
    job: JobSpec, report: JobReport, overwrite: bool, progress: bool | ProgressCallback,
    cancel: threading.Event | None,
) -> None:
    folder = job.outputs.dir
    if "://" not in folder:
        os.makedirs(folder, exist_ok=True)
    log.info("daskbatch run %s: input %s; cluster %s; memory %s; outputs in %s", report.source, job.input.store,
             job.cluster.kind, job.memory, os.path.abspath(folder) if "://" not in folder else folder)
    with phase(report, "open"):
        assert job.input.store is not None  # load_job checked it
        dataset = open_dataset(job.input.store, x=job.input.x, label=job.input.label,
                               missing=job.statistics.missing)
    report.rows, report.features = int(dataset.x.shape[0]), int(dataset.x.shape[1])
    log.info("input: %s rows x %s features (%s), label %s", f"{report.rows:,}", f"{report.features:,}",
             dataset.x.dtype, dataset.label_name if dataset.label is not None else "none")
    stats = needed_stats(job)
    if selection_needed(job) and job.selection.score in ("f", "chi2", "mi", "mrmr"):  # scores of class labels
        if job.input.groups is not None:
            raise JobConfigError(
                f"{report.source}: selection score '{job.selection.score}' needs class labels, and input.groups "
                "takes the label's place: set selection.score: variance, or select nothing (outputs.selection: "
                "null and no select step)"
            )
        if dataset.label is None:
            raise JobConfigError(
                f"{report.source}: selection score '{job.selection.score}' needs a label, and {job.input.store} "
                "has none: set input.label, or selection.score: variance"
            )

    def plan_for(resources: Resources) -> Plan:
        """The job's plan for ``resources`` (a cuda cluster's RMM pool is sized by it before it starts)."""
        return plan_describe(dataset, stats=stats, resources=resources, **describe_keywords(job))

    moments = Moments(ddof=job.statistics.ddof, nan_policy=job.statistics.nan_policy)
    kind = job_kind(job)
    if kind == "local":
        # As `describe --cluster local`: the kernels compiled (or loaded) once, here, before the worker
        # processes start; each would otherwise compile the same ones at once on a cold cache.
        from daskbatch.precompile import prepare_kernels  # lazy: dask

        prepare_kernels(dataset.x.dtype, None if dataset.label is None else dataset.label.dtype,
                        [*stats, moments], describe_keywords(job)["range"])
    t_cluster = time.perf_counter()
    with job_client(job, kind, plan_for) as client:
        report.timings["cluster"] = round(time.perf_counter() - t_cluster, 3)
        with phase(report, "plan"):
            resources = job_resources(job, client)
            try:
                plan = plan_for(resources)
            except PlanError as exc:
                # The planner speaks of command-line options; say which job keys they are.
                raise PlanError(f"{exc} (job keys: memory, cluster.threads, cluster.n_workers; "
                                "dask config daskbatch.memory-fraction, daskbatch.reserved-memory)") from None
        report.plan = plan
        log.info("plan:\n%s", plan.explain())
        device = resources.device if job.cluster.device == "auto" else job.cluster.device

        with phase(report, "describe"):
            summary = describe(
                dataset, stats=[*stats, moments], **describe_keywords(job),
                run=RunOptions(plan=plan, checkpoint=job.checkpoint, device=device, progress=progress, cancel=cancel),
            )
        passes = [float(s) for s in summary.provenance.get("pass_seconds", [])]
        report.timings["describe_passes"] = passes
        prov = summary.provenance
        report.missing = {k: prov.get(k) for k in MISSING_KEYS if k in prov}
        per_pass = ", ".join(f"pass {i + 1} {s:.1f} s" for i, s in enumerate(passes))
        log.info("describe: %d pass(es) in %.1f s (%s); %s", len(passes), report.timings["describe"], per_pass,
                 memory_words(peak_memory(None)))
        if not prov.get("complete", True):
            log.warning("the input is incomplete: %s missing chunk(s) of x, %s of the label, %s rows skipped",
                        len(prov.get("missing_chunks", [])), len(prov.get("label_missing_chunks", [])),
                        prov.get("rows_skipped", 0))
        path = job.output_path("summary")
        if path is not None:
            with phase(report, "write summary"):
                saved = saved_twin(path, summary)
                if saved is None:
                    summary.save(path, overwrite=overwrite)
                else:
                    # A re-run (after an interruption, say) found the same statistics: keep the saved
                    # summary, whose provenance the transform store's steps recorded, so it resumes.
                    log.info("summary: %s already holds these statistics (bitwise); kept", path)
                    summary = saved
            report.outputs["summary"] = path

        selection = None
        if selection_needed(job):
            with phase(report, "select"):
                s = job.selection
                selection = select(summary, score=s.score, mode=s.mode, param=s.param,
                                   min_variance=s.min_variance, max_corr=s.max_corr)
            report.selected = int(selection.selected.sum())
            shown = ", ".join(selection.selected_names[:10]) + (", ..." if report.selected > 10 else "")
            log.info("select: %d of %d features by %s (%s=%s) in %.2f s: %s", report.selected, report.features,
                     s.score, s.mode, selection.param, report.timings["select"], shown)
            path = job.output_path("selection")
            if path is not None:
                selection.save(path, overwrite=overwrite)
                report.outputs["selection"] = path

        if transform_needed(job):
            out = job.output_path("transform")
            assert out is not None
            with phase(report, "transform"):
                built = build_steps(job, summary, selection)
                # --overwrite replaces another kind of output; a transform store of its own is resumed.
                restart = job.transform.overwrite or (overwrite and output_kind(out) not in (None, "transform"))
                done = transform(
                    dataset, built, out, overwrite=restart,
                    chunk_rows=job.transform.chunk_rows or plan.chunk_rows, dtype=job.transform.dtype,
                    device=device,  # type: ignore[arg-type]
                    progress=progress, cancel=cancel,
                )
            report.output_features = done.features
            report.outputs["transform"] = out
            log.info("transform (%s): %s; %s", ", ".join(job.transform.steps), done.summary(),
                     memory_words(peak_memory(None)))
        report.peak_memory = peak_memory(client, warn=True)
    log.info("%s", memory_words(report.peak_memory))
