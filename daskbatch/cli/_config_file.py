"""``--config FILE``: option defaults (and dask settings) from a YAML file, for batch jobs.

Every option value in the file is checked against its option's type before
the command runs, and the ``dask:`` mapping is limited to the settings in
:mod:`daskbatch.runtime.dask_settings` unless ``--allow-dask-config`` is given;
both fail with one line naming the key.
"""

from __future__ import annotations

import functools
from typing import Any, NoReturn

import click
import yaml

from daskbatch.cli._group import EXIT_BAD_INPUT
from daskbatch.runtime.dask_settings import UnsafeDaskSetting, check_dask_settings

#: ctx.meta keys: the file's ``dask:`` mapping, applied once --allow-dask-config is known.
_PENDING = "daskbatch.config.dask"
_SOURCE = "daskbatch.config.path"
#: Options a job file may not set for itself.
_NOT_FROM_FILE = ("config", "allow_dask_config")


def _fail(ctx: click.Context, message: str) -> NoReturn:
    """One line on stderr and exit code 2 (click's BadParameter would print usage lines too)."""
    click.echo(f"error: {message}", err=True)
    ctx.exit(EXIT_BAD_INPUT)
    raise AssertionError("unreachable")  # ctx.exit raises


def _expected(param: click.Parameter) -> tuple[str, tuple[type, ...]]:
    """What a value for ``param`` must be, in words and as Python types (YAML gives these)."""
    kind = param.type
    if isinstance(param, click.Option) and param.is_flag:
        return "true or false", (bool,)
    if isinstance(kind, click.types.IntParamType):
        return "an integer", (int,)
    if isinstance(kind, click.types.FloatParamType):
        return "a number", (int, float)
    if isinstance(kind, click.types.BoolParamType):
        return "true or false", (bool,)
    if isinstance(kind, click.Choice):
        return f"one of {', '.join(map(str, kind.choices))}", (str,)
    if isinstance(kind, click.Path):
        return "a path (a string)", (str,)
    return "a string", (str, int, float)  # e.g. --memory 16GiB, which YAML may read as a number


def _check_value(ctx: click.Context, source: str, key: str, param: click.Parameter, value: Any) -> Any:
    """``value`` checked against ``param``'s type; a one-line error naming ``key`` otherwise."""
    words, types = _expected(param)
    # bool is an int to Python, never an integer or a string to a user.
    if value is not None and (not isinstance(value, types) or (isinstance(value, bool) and bool not in types)):
        _fail(ctx, f"{source}: {key} must be {words}, got {value!r} ({type(value).__name__})")
    try:
        return param.type_cast_value(ctx, value) if value is not None else None
    except click.BadParameter as exc:
        _fail(ctx, f"{source}: {key}: {exc.format_message()}")


def _load(ctx: click.Context, param: click.Parameter, value: str | None, also: str | None = None) -> str | None:
    if value is None:
        return None
    try:
        with open(value) as f:
            loaded = yaml.safe_load(f) or {}
    except OSError as exc:
        _fail(ctx, f"cannot read --config {value}: {exc.strerror}")
    except yaml.YAMLError as exc:
        _fail(ctx, f"--config {value} is not valid YAML: {' '.join(str(exc).split())}")
    if not isinstance(loaded, dict):
        _fail(ctx, f"--config {value} must hold a mapping of option names to values")
    from daskbatch.jobs.spec import SECTIONS

    # A `daskbatch run` job file has sections (input:, selection:, ...) where this has option names.
    sections = sorted(k for k in loaded if k in SECTIONS and isinstance(loaded[k], dict))
    if sections:
        _fail(ctx, f"{value} is a job file for 'daskbatch run' (it has {', '.join(s + ':' for s in sections)}), "
                   f"not a --config file of option values: run it with daskbatch run {value}")
    dask_settings = loaded.pop("dask", None)
    if dask_settings is not None:
        if not isinstance(dask_settings, dict):
            _fail(ctx, f"{value}: dask must be a mapping of dask settings, got {type(dask_settings).__name__}")
        # Applied by the command once --allow-dask-config (which may come later) is known.
        ctx.meta[_PENDING], ctx.meta[_SOURCE] = dask_settings, value
    # Keys are the options' long names ("nan-policy", "json", "x"), mapped to click's parameters.
    by_flag: dict[str, click.Parameter] = {}
    for p in ctx.command.params:
        if p.name is None or p.name in _NOT_FROM_FILE or isinstance(p, click.Argument):
            continue
        for opt in p.opts:
            if opt.startswith("--"):
                by_flag[opt[2:].replace("-", "_")] = p
    defaults: dict[str, Any] = {}
    unknown = []
    # Keys of the command ``also`` names (a describe job file read by plan) are accepted and left alone.
    other = ctx.find_root().command
    other_cmd = other.commands.get(also) if also is not None and isinstance(other, click.Group) else None
    other_keys = {o[2:].replace("-", "_") for p in (other_cmd.params if other_cmd else ()) for o in p.opts}
    for key, val in loaded.items():
        target = by_flag.get(str(key).replace("-", "_"))
        if target is None:
            if str(key).replace("-", "_") not in other_keys:
                unknown.append(str(key))
            continue
        _check_value(ctx, value, str(key), target, val)
        assert target.name is not None
        defaults[target.name] = val
    if unknown:
        _fail(ctx, f"{value}: unknown option(s) {sorted(unknown)}; known: {sorted(by_flag)}")
    ctx.default_map = {**(ctx.default_map or {}), **defaults}
    return value


def _apply_dask_settings(ctx: click.Context, allow: bool) -> None:
    """Merge the job file's ``dask:`` mapping into dask.config, refusing unsafe keys unless ``allow``."""
    settings = ctx.meta.pop(_PENDING, None)
    if not settings:
        return
    source = ctx.meta.get(_SOURCE, "--config")
    try:
        check_dask_settings(settings, source, allow=allow)
    except UnsafeDaskSetting as exc:
        _fail(ctx, str(exc))
    import dask.config

    dask.config.update(dask.config.config, settings)


def config_option(func: Any = None, /, *, also: str | None = None) -> Any:
    """Add ``--config FILE`` and ``--allow-dask-config`` to a command.

    The file is YAML: option names as keys, plus an optional ``dask:`` mapping.

    Parameters
    ----------
    func : callable, optional
        The command's callback; use bare (``@config_option``) or called (``@config_option(also="describe")``).
    also : str, optional
        Another command of the same group whose option keys the file may hold too;
        they are left alone (``daskbatch plan --config`` reads a describe job's file).

    Returns
    -------
    callable
        The callback with both options; it applies the file's dask settings first.
    """
    if func is None:
        return functools.partial(config_option, also=also)

    @functools.wraps(func)
    def command(*args: Any, allow_dask_config: bool = False, **kwargs: Any) -> Any:
        """Apply the config file's dask settings, then run the command.

        Parameters
        ----------
        *args
            The command's positional arguments.
        allow_dask_config : bool, default False
            Accept any setting of the file's ``dask:`` mapping, not only sizes and timeouts.
        **kwargs
            The command's options.

        Returns
        -------
        object
            The command's result.
        """
        _apply_dask_settings(click.get_current_context(), allow_dask_config)
        return func(*args, **kwargs)

    command = click.option(
        "--allow-dask-config",
        is_flag=True,
        help="Accept any setting in the --config file's 'dask:' mapping. Without it only settings that "
        "tune sizes, memory thresholds and timeouts are accepted (no preload, plugins or logging).",
    )(command)
    return click.option(
        "--config",
        type=click.Path(dir_okay=False),
        is_eager=True,
        expose_value=False,
        callback=functools.partial(_load, also=also),
        help="YAML file of option values (keys as option names, e.g. bins: 128) and an optional "
        "'dask:' mapping of dask config. Command-line options win.",
    )(command)
