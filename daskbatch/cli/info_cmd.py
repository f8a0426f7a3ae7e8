"""``daskbatch info``: versions, visible GPUs and the effective daskbatch configuration."""

from __future__ import annotations

import json
import platform
from importlib.metadata import PackageNotFoundError, version

import click

from daskbatch.cli._group import main

PACKAGES = ("daskbatch", "dask", "distributed", "zarr", "numcodecs", "numpy", "numba", "xarray")


def _version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


@main.command("info")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def info_command(as_json: bool) -> None:
    """Versions, visible GPUs and the effective daskbatch settings (for bug reports and job logs)."""
    import dask.config

    from daskbatch.cli._gpu_stack import gpu_stack
    from daskbatch.runtime.capacity import cuda_device_count

    facts = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": {name: _version(name) for name in PACKAGES},
        "gpu": gpu_stack(),
        "cuda_devices": cuda_device_count(),
        "config": dask.config.get("daskbatch"),
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
