"""``daskbatch synth``, ``ingest``, ``inspect``, ``verify``, ``plan``, ``demo``, ``info`` and ``config``: thin shells over the data layer (``plan``: the chunking and memory arithmetic, without a cluster or compute), the end-to-end tour, and the versions, GPU stack and effective configuration."""

from __future__ import annotations

import functools
import json
import platform
import re
import sys
import warnings
from importlib.metadata import distributions

import click
from click.core import ParameterSource

from daskbatch.cli._common import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    is_quiet,
    leave,
    main,
    report,
    user_errors,
)
from daskbatch.cli.options import (
    config_option,
    device_option,
    job_option,
    n_classes_options,
    resolve_n_classes,
    table_options,
    table_report,
)
from daskbatch.demo import DEMO_ROWS, run_demo
from daskbatch.engine.planner import plan, recorded_n_classes
from daskbatch.jobs import versions
from daskbatch.jobs.spec import effective_config
from daskbatch.planning.search import plan_dropping_sketch, sketch_in_plan
from daskbatch.runtime.capacity import cuda_device_count, resources_from_machine
from daskbatch.stats.kernels.preflight import check_gpu
from daskbatch.stats.sketch_windows import state_bytes_per_feature
from daskbatch.stats.spec import DEFAULT_STATS, normalize_stats, requested


@main.command("synth")
@click.argument("out", type=click.Path())
@click.option("--rows", type=click.IntRange(min=0), required=True, help="Number of samples.")
@click.option("--features", type=click.IntRange(min=1), required=True, help="Number of features.")
@n_classes_options(2, "Add an int32 label y with K classes (0 to K-1).")
@click.option("--informative", type=click.IntRange(min=0), default=None, help="Features with class-dependent means.")
@click.option("--correlated", type=click.IntRange(min=0), default=0, show_default=True,
              help="Features that mix two others.")
@click.option("--chunk-rows", type=click.IntRange(min=1), default=65536, show_default=True)
@click.option("--dtype", type=click.Choice(["float32", "float64"]), default="float32", show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--rank", type=click.IntRange(min=0), default=None,
    help="Write only this rank's contiguous share of the rows (with --world-size), bitwise those rows of the whole.",
)
@click.option("--world-size", type=click.IntRange(min=1), default=None, help="Number of ranks sharing the rows.")
@device_option("Where the rows are made: gpu generates each block on the GPU (CuPy), with the counter stream.", "cpu")
@click.option(
    "--generator", type=click.Choice(["default", "counter"]), default="default", show_default=True,
    help="default: numpy's Philox, block by block; counter: the GPU's counter-based stream (same data on a CPU).",
)
@click.option("--overwrite", is_flag=True, help="Replace OUT if daskbatch wrote it (never other data).")
@user_errors
def synth_cmd(
    out: str, rows: int, features: int, n_classes: int | None, class_values: str | None, informative: int | None,
    correlated: int, chunk_rows: int, dtype: str, seed: int, rank: int | None, world_size: int | None, device: str,
    generator: str, overwrite: bool,
) -> None:
    """Write a deterministic synthetic dataset (Zarr v3: X, y) with ground truth in its attrs."""
    import time

    from daskbatch.io.synth import synth  # lazy: dask, zarr

    classes = resolve_n_classes(n_classes, class_values, consecutive=True)
    t0 = time.perf_counter()
    ds = synth(
        rows, features, classes=classes, informative=informative, correlated=correlated, chunk_rows=chunk_rows,
        dtype=dtype, seed=seed, path=out, overwrite=overwrite, rank=rank, world_size=world_size,
        device=device, generator=generator,  # type: ignore[arg-type]  # click.Choice has validated both
    )
    share = "" if rank is None else f" (rank {rank} of {world_size}: rows {ds.attrs['synth']['row_range']})"
    report(
        f"wrote {ds.x.shape[0]:,} rows x {features:,} features{share} ({ds.x.dtype}"
        f"{f', {classes} classes' if classes else ''}) to {out} in {time.perf_counter() - t0:.1f} s"
    )


def _named_keys(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    """``NAME`` or ``NAME=KEY`` values of a repeated option as output name -> source key."""
    out: dict[str, str] = {}
    for value in values:
        name, _, key = value.partition("=")
        if not name or name in out:
            why = "an empty name" if not name else f"{name!r} given twice"
            raise click.BadParameter(f"{value!r}: {why}", ctx, param)
        out[name] = key or name
    return out


@main.command("ingest")
@click.argument("paths", nargs=-1, required=True, metavar="SOURCES... OUT.zarr")
@click.option("--x-key", default=None, help="Array key in .npz/HDF5/Zarr sources [default: X].")
@click.option("--label-key", default=None, help="Key of a 1-D label array in each source (written as y).")
@click.option(
    "--label", "labels", multiple=True, metavar="NAME[=KEY]", callback=_named_keys,
    help="A 1-D label array in each source, written as NAME (from key KEY if given); repeat for more.",
)
@click.option(
    "--mask", "masks", multiple=True, metavar="NAME[=KEY]", callback=_named_keys,
    help="A 1-D boolean or integer mask array in each source, stored as NAME; repeat for more.",
)
@click.option("--dtype", default=None, help="Output dtype [default: the sources' dtype].")
@click.option("--chunk-rows", type=click.IntRange(min=1), default=None, help="Rows per output chunk [default: ~16 MiB].")
@click.option("--compressor", type=click.Choice(["zstd", "lz4", "none"]), default="zstd", show_default=True)
@click.option("--workers", type=click.IntRange(min=1), default=None, help="Chunks written in parallel [default: CPUs].")
@click.option("--overwrite", is_flag=True,
              help="Replace OUT if daskbatch wrote it, never other data (otherwise an unfinished ingest resumes).")
@user_errors
def ingest_cmd(
    paths: tuple[str, ...], x_key: str | None, label_key: str | None, labels: dict[str, str], masks: dict[str, str],
    dtype: str | None, chunk_rows: int | None, compressor: str, workers: int | None, overwrite: bool,
) -> None:
    """Copy batch files (.npy, .npz, .h5, Zarr; globs allowed) into one Zarr store OUT.zarr.

    Re-running the same command after an interruption finishes the remaining chunks.
    Labels and masks (--label-key, --label, --mask) are written beside X, row for row,
    and resume with it.
    """
    from daskbatch.io.ingest import ingest  # lazy: dask, zarr

    if len(paths) < 2:
        raise click.UsageError("give at least one source and the output store")
    *sources, out = paths
    try:
        ingested = ingest(
            sources, out, x_key=x_key, label_key=label_key, labels=labels, masks=masks, dtype=dtype,
            chunk_rows=chunk_rows, compressor=compressor, workers=workers, overwrite=overwrite,
            progress=not is_quiet(),  # drawn on a terminal only; the log has start and end
        )
    except KeyboardInterrupt:
        click.echo(f"interrupted: {out} is incomplete; run the same command again to resume", err=True)
        leave(EXIT_INTERRUPTED, now=True)
    report(ingested.summary())


@main.command("inspect")
@click.argument("store")
@job_option("input.x", "-x", "--x", "x_name", help="Samples x features array.")
@click.option("--label", default=None, help="Label array [default: as recorded by daskbatch].")
@click.option("--json", "as_json", is_flag=True, help="Print provenance as JSON.")
@user_errors
def info_cmd(store: str, x_name: str, label: str | None, as_json: bool) -> None:
    """Describe a Zarr store: arrays, shape, chunks, feature names, missing chunks.

    Reads metadata, the store's key listing and shard indexes only: absent
    chunks (of X and the label, inner chunks of shards included) are found and
    said to be the fill value (zarr, xarray and dask leave out chunks of fill
    values) or lost (daskbatch wrote every chunk), but no chunk is decoded, so
    corrupt or truncated chunks are not; `daskbatch verify STORE` decodes and
    checks every chunk.
    """
    from daskbatch.io.dataset import open_dataset  # lazy: dask, zarr

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # "fill": list absent chunks instead of refusing; nothing is read here.
        ds = open_dataset(store, x=x_name, label=label, missing="fill")
    not_decoded = f"chunks not decoded: run daskbatch verify {store}"
    if as_json:
        click.echo(json.dumps({**ds.provenance(), "chunks_decoded": False, "note": not_decoded}, indent=2))
    else:
        report(repr(ds))
        report(f"  {not_decoded}")
    for w in caught:
        click.echo(f"warning: {w.message}", err=True)


@main.command("verify")
@click.argument("store")
@click.option(
    "--threads", type=click.IntRange(min=1), default=None,
    help="Chunks decoded at once [default: CPU count, at most 8]; memory is about this many chunks.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@user_errors
def verify_command(store: str, threads: int | None, as_json: bool) -> None:
    """Decode and check every chunk of every array in STORE (a Zarr path or fsspec URL).

    Reports chunks that are missing (absent from an array daskbatch wrote: it
    stores every chunk, so they were lost), corrupt (checksum mismatch or
    undecodable) or truncated, by key and grid position; inner chunks of
    shards included. Chunks absent from an array of another writer are listed
    as "absent (fill value)": zarr, xarray and dask leave out chunks that hold
    only the fill value. Exit code 0 when every stored chunk decodes and none
    was lost, 1 otherwise, 2 when STORE cannot be opened or has more chunks
    than daskbatch.max-chunks.
    """
    from daskbatch.io.verify import verify_store  # lazy: dask, zarr

    checked = verify_store(store, threads=threads)
    if as_json:
        click.echo(json.dumps(checked.to_dict(), indent=2))
    else:  # -q: the exit status says it
        report(checked.summary())
    if not checked.ok:
        sys.exit(EXIT_FAILURE)


@main.command("demo")
@click.option("--rows", default=DEMO_ROWS, show_default=True, type=click.IntRange(min=1),
              help="Rows of the synthetic dataset (--rows 2000000: the full-size demo, about 0.5 GB).")
@click.option("--features", default=64, show_default=True, type=click.IntRange(min=1))
@n_classes_options(2, "Number of label classes.  [default: 3]")
@click.option("--workers", default=None, type=click.IntRange(min=1), help="Worker processes (default: cores, at most 4).")
@click.option("--threads", default=1, show_default=True, type=click.IntRange(min=1), help="Threads per worker.")
@click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False),
              help="Directory for data and results, kept (default: a new temporary one, removed at the end).")
@click.option("--keep", is_flag=True, help="Keep the temporary directory's data and save the results there.")
@click.option("--seed", default=0, show_default=True)
@table_options
@user_errors
def demo_command(
    rows: int, features: int, n_classes: int | None, class_values: str | None, workers: int | None, threads: int,
    out_dir: str | None, keep: bool, seed: int, table_rows: int, show_all: bool,
) -> None:
    """Generate a labelled dataset, start a local cluster, and print its full summary."""
    classes = resolve_n_classes(n_classes, class_values, consecutive=True) or 3

    run_demo(rows=rows, features=features, classes=classes, workers=workers, threads_per_worker=threads,
             out_dir=out_dir, keep=keep, seed=seed, progress=not is_quiet(), echo=report,
             report=functools.partial(table_report, top=10, table_rows=table_rows, show_all=show_all))


#: Report key -> pattern of the normalised distribution names that provide it.
GPU_FAMILIES: dict[str, re.Pattern[str]] = {
    "cupy": re.compile(r"cupy(-cuda\d+x?|-rocm-[\w-]+)?"),
    "rmm": re.compile(r"rmm(-cu\d+)?"),
    "dask-cuda": re.compile(r"dask-cuda"),
}


def _normalise(name: str) -> str:
    """PEP 503 normalised name: lower case, runs of ``-_.`` as one ``-``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def matching_distributions(pattern: re.Pattern[str], installed: dict[str, str]) -> str | None:
    """``"name version"`` of each installed distribution whose whole name matches; None if none."""
    found = [f"{name} {ver}" for name, ver in sorted(installed.items()) if pattern.fullmatch(name)]
    return ", ".join(found) or None


def _version_text(value: int) -> str:
    """CUDA's integer version (1000 * major + 10 * minor) as ``"major.minor"``."""
    return f"{value // 1000}.{value % 1000 // 10}"


def _cuda_versions() -> tuple[str | None, str | None]:
    """Read the CUDA runtime and driver versions as CuPy sees them."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. CuPy's warning that it found no CUDA path
            import cupy  # lazy: cupy
    except Exception:  # not installed, or installed but broken (wrong CUDA, missing libraries)
        return None, None
    versions: list[str | None] = []
    for query in (cupy.cuda.runtime.runtimeGetVersion, cupy.cuda.runtime.driverGetVersion):
        try:
            versions.append(_version_text(int(query())))
        except Exception:  # no driver, or no CUDA runtime library to load
            versions.append(None)
    return versions[0], versions[1]


def gpu_stack() -> dict[str, str | None]:
    """The installed GPU distributions and the CUDA runtime and driver versions (None: absent)."""
    installed = {_normalise(d.metadata["Name"] or ""): d.version for d in distributions()}
    facts = {key: matching_distributions(pattern, installed) for key, pattern in GPU_FAMILIES.items()}
    runtime, driver = _cuda_versions()  # also when CuPy imports without metadata (a source tree)
    return {**facts, "cuda_runtime": runtime, "cuda_driver": driver}


#: The packages ``daskbatch info`` lists (a job's report records more).
PACKAGES = ("daskbatch", "dask", "distributed", "zarr", "numcodecs", "numpy", "numba", "xarray")


@main.command("info")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--gpu", "gpu_check", is_flag=True,
              help="Check the GPU stack instead: compile and launch daskbatch's GPU kernels once and say whether "
                   "CuPy chunks will use them (exit status 1 when not).")
def info_command(as_json: bool, gpu_check: bool) -> None:
    """Versions, visible GPUs and the effective daskbatch settings (for bug reports and job logs)."""
    from daskbatch import config  # lazy: dask

    if gpu_check:
        _gpu_check(as_json)
        return

    facts = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": {name: ver for name, ver in versions().items() if name in PACKAGES},
        "gpu": gpu_stack(),
        "cuda_devices": cuda_device_count(),
        "config": config.get(),
    }
    if as_json:
        click.echo(json.dumps(facts, indent=2, default=str))
        return
    report(f"python {facts['python']} on {facts['platform']}")
    for name, ver in facts["packages"].items():
        report(f"  {name:<14} {ver or '-'}")
    report("GPU stack:")
    for name, ver in facts["gpu"].items():
        report(f"  {name:<14} {ver or '-'}")
    report(f"CUDA devices: {facts['cuda_devices']}")
    report("daskbatch config (dask.config 'daskbatch', DASK_DASKBATCH__* to override):")
    for key, value in facts["config"].items():
        report(f"  {key}: {value}")


def _gpu_check(as_json: bool) -> None:
    """``daskbatch info --gpu``: the versions the GPU kernels depend on, then the verdict."""
    check = check_gpu()
    stack = gpu_stack()
    versions = {**check.versions, "cupy": stack["cupy"], "rmm": stack["rmm"], "dask-cuda": stack["dask-cuda"],
                "cuda_runtime": stack["cuda_runtime"]}
    if versions["driver"] is None:
        versions["driver"] = stack["cuda_driver"]
    auto = _auto_choice()
    if as_json:
        click.echo(json.dumps({"ok": check.ok, "simulated": check.simulated, "problem": check.problem,
                               "verdict": check.verdict(), "versions": versions, "auto": auto}, indent=2))
    else:
        for name, ver in versions.items():
            report(f"  {name:<14} {ver or '-'}")
        why = "the GPU check below failed" if not check.ok else auto["reason"]
        report(f"device='auto': {auto['device'] or '?'} for {auto['chunk']} chunks ({why})")
        report(check.verdict())
    if not check.ok:
        raise SystemExit(1)


def _auto_choice() -> dict[str, str | None]:
    """Where ``device="auto"`` would run chunks of ``daskbatch.target-chunk-bytes`` here, and why."""
    from dask.utils import format_bytes, parse_bytes  # lazy: dask

    from daskbatch import config  # lazy: dask
    from daskbatch.engine.run_options import auto_device  # lazy: dask

    size = parse_bytes(config.get("target-chunk-bytes"))
    try:
        choice = auto_device(size, quiet=True)
    except ValueError as error:  # a malformed daskbatch.gpu-min-batch-bytes: shown, not fatal to the report
        return {"device": None, "chunk": format_bytes(size), "reason": str(error)}
    return {"device": choice.device, "chunk": format_bytes(size), "reason": choice.reason}


@main.command("config")
@click.option("--show", is_flag=True, help="Print the effective configuration (the default action).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of YAML.")
@user_errors
def config_command(show: bool, as_json: bool) -> None:
    """The effective daskbatch configuration: dask.config's 'daskbatch' keys and the job defaults.

    'daskbatch.job' is what a `daskbatch run` job file starts from: the schema's
    defaults overlaid with daskbatch.job.* from dask config (YAML files, or
    DASK_DASKBATCH__JOB__... environment variables).
    """
    import yaml

    from daskbatch import config  # lazy: dask

    settings = dict(config.get())
    settings["job"] = effective_config()
    payload = {"daskbatch": settings}
    if as_json:
        click.echo(json.dumps(payload, indent=2, default=str))
    else:
        report(yaml.safe_dump(payload, sort_keys=False, default_flow_style=False).rstrip())


def _parse_stats(text: str) -> tuple[str, ...]:
    """``--stats`` through the one spec describe uses (moments always first)."""
    try:
        return normalize_stats(text)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--stats") from None


@main.command("plan")
@click.argument("store")
@job_option("input.x", "--x", "x_name", help="Samples x features array in the store.")
@click.option("--label", default=None, help="Label array for 'mi' (default: the one the store records).")
@click.option(
    # describe adds the quantile sketch whenever it finds histogram ranges itself (no --range)
    "--stats", default=",".join((*DEFAULT_STATS, "sketch")), show_default=True,
    help="Comma-separated statistics.",
)
@job_option("statistics.bins", "--bins", type=click.IntRange(min=1), help="Histogram bins.")
@n_classes_options(1, "Number of label classes, for 'mi' and 'class_moments' (default: from the store's attributes).")
@job_option(
    "memory", "--memory",
    help="Memory per worker (GPU memory with --device gpu): bytes like 16GiB, a fraction of "
    "this machine's (0.5), or auto (this machine's, shared by --workers).",
)
@click.option("--workers", default=1, show_default=True, type=click.IntRange(min=1), help="Workers.")
@click.option(
    "--threads", type=click.IntRange(min=1), default=None,
    help="Threads per worker [default: cores / workers on CPU, 1 on GPU].",
)
@click.option("--device", type=click.Choice(["cpu", "gpu"]), default="cpu", show_default=True)
@click.option("--split-every", type=click.IntRange(min=2), default=None, help="Merge fan-in.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON instead of text.")
@config_option
@user_errors
def plan_command(
    store: str,
    x_name: str,
    label: str | None,
    stats: str,
    bins: int,
    n_classes: int | None,
    class_values: str | None,
    memory: str,
    workers: int,
    threads: int | None,
    device: str,
    split_every: int | None,
    as_json: bool,
) -> None:
    """Plan chunk rows, merge fan-in and feature tiles for STORE and explain the arithmetic.

    Reads only the store's metadata; starts no cluster. Exit code 3 when the
    plan cannot fit the memory given. --config reads a describe job's file:
    its statistics, bins, label, split-every and dask settings (memory-fraction,
    reserved-memory) plan as describe will; its other keys are left alone.
    """
    from daskbatch.io.dataset import open_dataset  # lazy: dask, zarr

    names = _parse_stats(stats)
    n_classes = resolve_n_classes(n_classes, class_values, consecutive=False)
    ds = open_dataset(store, x=x_name, label=label)
    skipped = None
    default_stats = click.get_current_context().get_parameter_source("stats") == ParameterSource.DEFAULT
    wanted = requested(names)
    refused = [r.name for r in wanted if r.needs_class_label]
    if refused and ds.label is None and not default_stats:
        raise click.UsageError(f"statistic {refused[0]!r} needs a label (--label)")
    if any(r.needs_label for r in wanted):
        if ds.label is None:
            # as describe: the default's mi and class_moments are computed only with a label
            dropped = [r.name for r in wanted if r.needs_label]
            names = tuple(r.name for r in wanted if not r.needs_label)
            skipped = f"{' and '.join(dropped)} skipped: the store has no label"
        elif n_classes is None and recorded_n_classes(ds) is None:
            # Counting finds the classes; the plan assumes what describe assumes (no label read here).
            from daskbatch import config  # lazy: dask

            n_classes = int(config.get("assumed-classes"))
            skipped = f"the store does not record its classes: planned for {n_classes} (pass --n-classes K)"
    resources = resources_from_machine(
        n_workers=workers, threads_per_worker=threads, memory=memory, device=device
    )
    result, planned = plan_dropping_sketch(
        lambda stats_: plan(
            ds, stats=stats_, bins=bins, n_classes=n_classes, resources=resources, split_every=split_every
        ),
        names, optional=default_stats,  # as describe, which adds the sketch itself
    )
    by_name, window = sketch_in_plan(planned)
    notes = [skipped] if skipped else []
    if window is not None:
        notes.append(f"the quantile sketch keeps a window of {window[0]:,} buckets per sign in {window[1]} "
                     f"({state_bytes_per_feature(*window[:2]) / 1e3:,.1f} kB a feature, quantiles within "
                     f"{window[2]:.2%}) to fit")
    elif by_name != names:
        notes.append("the quantile sketch does not fit: describe takes histogram ranges from min and max, the last "
                     "resort (or --range)")
    skipped = "; ".join(notes) or None
    if as_json:
        out = result.to_dict()
        out["store"] = str(store)
        out["skipped"] = skipped
        click.echo(json.dumps(out, indent=2))
    else:
        report(result.explain())
        if skipped:
            report(f"  note: {skipped}")
