"""``--config FILE``: option defaults (and dask settings) from a YAML file, for batch jobs."""

from __future__ import annotations

from typing import Any

import click
import yaml


def _load(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    try:
        with open(value) as f:
            loaded = yaml.safe_load(f) or {}
    except OSError as exc:
        raise click.BadParameter(f"cannot read {value}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise click.BadParameter(f"{value} is not valid YAML: {exc}") from exc
    if not isinstance(loaded, dict):
        raise click.BadParameter(f"{value} must hold a mapping of option names to values")
    dask_settings = loaded.pop("dask", None)
    if dask_settings:
        import dask.config

        dask.config.update(dask.config.config, dask_settings)
    # Keys are the options' long names ("nan-policy", "json", "x"), mapped to click's parameter names.
    by_flag: dict[str, str] = {}
    for p in ctx.command.params:
        if p.name is None or p.name == "config" or isinstance(p, click.Argument):
            continue
        for opt in p.opts:
            if opt.startswith("--"):
                by_flag[opt[2:].replace("-", "_")] = p.name
    defaults: dict[str, Any] = {}
    unknown = []
    for key, val in loaded.items():
        name = by_flag.get(str(key).replace("-", "_"))
        if name is None:
            unknown.append(key)
        else:
            defaults[name] = val
    if unknown:
        raise click.BadParameter(f"{value}: unknown option(s) {sorted(unknown)}; known: {sorted(by_flag)}")
    ctx.default_map = {**(ctx.default_map or {}), **defaults}
    return value


def config_option(func: Any) -> Any:
    """Add ``--config FILE`` (YAML: option names as keys, plus an optional ``dask:`` mapping)."""
    return click.option(
        "--config",
        type=click.Path(dir_okay=False),
        is_eager=True,
        expose_value=False,
        callback=_load,
        help="YAML file of option values (keys as option names, e.g. bins: 128) and an optional "
        "'dask:' mapping of dask config. Command-line options win.",
    )(func)
