"""``daskbatch info``: versions, the GPU stack (CuPy, RMM, dask-cuda, CUDA), visible GPUs and the effective daskbatch configuration."""

from __future__ import annotations

import json
import platform
import re
import warnings
from importlib.metadata import distributions

import click

from daskbatch.cli._common import main, report, user_errors
from daskbatch.jobs import versions
from daskbatch.jobs.spec import effective_config
from daskbatch.runtime.capacity import cuda_device_count
from daskbatch.stats.kernels.preflight import check_gpu

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
    from daskbatch.engine.devices import auto_device  # lazy: dask

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
