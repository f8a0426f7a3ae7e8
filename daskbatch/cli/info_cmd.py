"""``daskbatch info``: versions, visible GPUs and the effective daskbatch configuration."""

from __future__ import annotations

import json
import platform
from importlib.metadata import PackageNotFoundError, version

import click

from daskbatch.cli._gpu_stack import gpu_stack
from daskbatch.cli._group import main, user_errors
from daskbatch.jobs.spec import effective_config
from daskbatch.runtime.capacity import cuda_device_count
from daskbatch.stats.kernels.preflight import check_gpu

PACKAGES = ("daskbatch", "dask", "distributed", "zarr", "numcodecs", "numpy", "numba", "xarray")


def _version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


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
        "packages": {name: _version(name) for name in PACKAGES},
        "gpu": gpu_stack(),
        "cuda_devices": cuda_device_count(),
        "config": config.get(),
    }
    if as_json:
        click.echo(json.dumps(facts, indent=2, default=str))
        return
    click.echo(f"python {facts['python']} on {facts['platform']}")
    for name, ver in facts["packages"].items():
        click.echo(f"  {name:<14} {ver or '-'}")
    click.echo("GPU stack:")
    for name, ver in facts["gpu"].items():
        click.echo(f"  {name:<14} {ver or '-'}")
    click.echo(f"CUDA devices: {facts['cuda_devices']}")
    click.echo("daskbatch config (dask.config 'daskbatch', DASK_DASKBATCH__* to override):")
    for key, value in facts["config"].items():
        click.echo(f"  {key}: {value}")


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
            click.echo(f"  {name:<14} {ver or '-'}")
        why = "the GPU check below failed" if not check.ok else auto["reason"]
        click.echo(f"device='auto': {auto['device'] or '?'} for {auto['chunk']} chunks ({why})")
        click.echo(check.verdict())
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
        click.echo(yaml.safe_dump(payload, sort_keys=False, default_flow_style=False).rstrip())
