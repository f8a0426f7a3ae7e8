"""``daskbatch config --show``: the effective daskbatch configuration, job defaults included."""

from __future__ import annotations

import json

import click

from daskbatch.cli._group import main, user_errors
from daskbatch.jobs.spec import effective_config


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
