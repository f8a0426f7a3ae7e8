"""Defaults of daskbatch, from ``daskbatch.yaml``: the one file that holds every default."""

from __future__ import annotations

import copy
import difflib
import functools
import os
import pathlib
import sys
import tempfile
from typing import Any

import yaml

from daskbatch._common import short_repr, strict_int


def config_file_error(exc: ValueError) -> None:
    """End a command run with one line (or raise one, for a library import) when a dask YAML file is malformed."""
    first, _, rest = str(exc).partition(", original error message:")
    lines = [line.strip().rstrip(":") for line in rest.splitlines() if line.strip()]
    problem = " ".join(lines[:2]) or "not valid YAML"
    message = f"{first}: {problem}; fix or remove it"
    orig = list(getattr(sys, "orig_argv", []))
    command = os.path.basename(sys.argv[0]) == "daskbatch" or (
        "daskbatch" in orig and orig[orig.index("daskbatch") - 1] == "-m"
    )
    if command:
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2)
    raise ValueError(message) from None


_DEFAULTS_FILE = pathlib.Path(__file__).with_name("daskbatch.yaml")


@functools.cache
def _packaged() -> dict[str, Any]:
    """Read ``daskbatch.yaml`` once."""
    with _DEFAULTS_FILE.open() as f:
        return yaml.safe_load(f)  # type: ignore[no-any-return]


#: The default of every parameter of the built-in statistics (``bins``, ``ddof``, ...).
STATISTIC_DEFAULTS: dict[str, Any] = _packaged()["statistics"]


def packaged(key: str) -> Any:
    """The default of ``daskbatch.<key>`` (dotted) as ``daskbatch.yaml`` writes it, read without dask."""
    value = _packaged()["daskbatch"]
    for part in key.split("."):
        value = value[part]
    return copy.deepcopy(value)


def _packaged_defaults() -> dict[str, Any]:
    """The ``{"daskbatch": {...}}`` mapping of ``daskbatch.yaml``, a copy of its own."""
    return {"daskbatch": copy.deepcopy(_packaged()["daskbatch"])}


def load_into_dask() -> None:
    """Put the ``daskbatch`` defaults into ``dask.config`` (once dask is imported)."""
    import dask.config  # lazy: dask

    dask.config.update_defaults(_packaged_defaults())


def get(key: str | None = None) -> Any:
    """Read the effective value of ``daskbatch.<key>`` (e.g. ``get("split-every")``)."""
    import dask.config  # lazy: dask

    name = "daskbatch" if key is None else f"daskbatch.{key}"
    try:
        return dask.config.get(name)
    except KeyError:
        # dask.config.set({"daskbatch.job.cluster": {"kind": "slurm"}}) replaces the whole mapping, so
        # the keys it leaves out are gone from dask.config: they keep their packaged default.
        return dask.config.get(name, config=_packaged_defaults())


def resolve_split_every(split_every: int | None) -> int:
    """``split_every``, or the configured ``daskbatch.split-every`` when None, validated (>= 2)."""
    if split_every is None:
        return strict_int(get("split-every"), "daskbatch.split-every (dask config)", minimum=2)
    return strict_int(split_every, "split_every", minimum=2)


def planner_settings() -> dict[str, Any]:
    """Read the planner's settings as the keyword arguments of :func:`~daskbatch.planning.search.plan_chunks`."""
    import dask.utils  # lazy: dask

    settings: dict[str, Any] = {}
    for name, key, parse in (
        ("split_every", "split-every", int),
        ("memory_fraction", "memory-fraction", float),
        ("reserved_bytes", "reserved-memory", dask.utils.parse_bytes),
        ("target_chunk_bytes", "target-chunk-bytes", dask.utils.parse_bytes),
        ("compiled_kernels", "kernels", bool),
    ):
        value = get(key)
        try:
            settings[name] = parse(value)
        except (TypeError, ValueError):
            kind = "a number" if parse in (int, float) else "a byte size such as '64MiB'"
            raise ValueError(f"daskbatch.{key} must be {kind}, got {value!r}") from None
    return settings


def _is_number(value: Any) -> bool:
    """Whether ``value`` is an int or a float, not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_count(minimum: int) -> Any:
    """A test for an integer of at least ``minimum``."""
    return lambda value: isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _is_byte_size(value: Any, minimum: int = 0) -> bool:
    """Whether ``value`` is a byte count or a size such as ``"64MiB"`` of at least ``minimum`` bytes."""
    import dask.utils  # lazy: dask

    if isinstance(value, str):
        try:
            return dask.utils.parse_bytes(value) >= minimum
        except (TypeError, ValueError):
            return False
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _is_duration(value: Any) -> bool:
    """Whether ``value`` is seconds or a duration such as ``"10 minutes"``, not negative."""
    import dask.utils  # lazy: dask

    if isinstance(value, str):
        try:
            return dask.utils.parse_timedelta(value) >= 0
        except (TypeError, ValueError, KeyError):
            return False
    return _is_number(value) and value >= 0


#: Every setting of daskbatch.yaml but ``job`` (the schema of daskbatch/jobs checks that one): a test
#: of its value, and the test in words.
SETTINGS: dict[str, tuple[Any, str]] = {
    "split-every": (_is_count(2), "an integer of at least 2"),
    "memory-fraction": (lambda v: _is_number(v) and 0 < v <= 1, "a number in (0, 1]"),
    "reserved-memory": (_is_byte_size, "a byte size such as 256MiB"),
    "cache-fraction": (lambda v: _is_number(v) and 0 <= v <= 1, "a number in [0, 1]"),
    "target-chunk-bytes": (lambda v: _is_byte_size(v, minimum=1), "a byte size above 0 such as 64MiB"),
    "kernels": (lambda v: isinstance(v, bool), "true or false"),
    "gpu-transfer": (lambda v: v in ("block", "staged"), "block or staged"),
    "gpu-staging-bytes": (_is_byte_size, "a byte size such as 64MiB"),
    "gpu-min-batch-bytes": (lambda v: v == "auto" or _is_byte_size(v), "auto or a byte size such as 16MiB"),
    "assumed-classes": (_is_count(1), "an integer of at least 1"),
    "max-classes": (_is_count(1), "an integer of at least 1"),
    "worker-timeout": (_is_duration, "a duration such as '10 minutes' or seconds"),
    "scheduler-file-timeout": (_is_duration, "a duration such as '60s' or seconds"),
    "max-chunks": (_is_count(1), "an integer of at least 1"),
    "max-features": (_is_count(1), "an integer of at least 1"),
    "lock-stale-after": (_is_duration, "a duration such as '5 minutes' or seconds"),
}


def check_setting(key: str, value: Any) -> str | None:
    """Say what is wrong with the setting ``daskbatch.<key>: value``, if anything."""
    name = key.replace("_", "-")
    if name not in SETTINGS:
        close = difflib.get_close_matches(name, SETTINGS, n=1)
        hint = f"; did you mean daskbatch.{close[0]}?" if close else ""
        return f"is no daskbatch setting{hint}"
    test, words = SETTINGS[name]
    if not test(value):
        return f"must be {words}, got {short_repr(value)}"
    return None


def check() -> None:
    """Check the settings a run depends on before it starts: the memory fraction and the temporary directory."""
    import dask.config  # lazy: dask

    fraction = get("memory-fraction")
    if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 < fraction <= 1:
        raise ValueError(
            f"daskbatch.memory-fraction must be a number in (0, 1] (the share of a worker's memory one task "
            f"may plan to use), got {fraction!r}"
        )
    where = dask.config.get("temporary-directory", None) or tempfile.gettempdir()
    try:
        os.makedirs(where, exist_ok=True)
        with tempfile.TemporaryFile(dir=where):
            pass
    except OSError as exc:
        raise ValueError(
            f"the temporary directory {where!r} is not usable ({exc.strerror or exc}); set dask's "
            "temporary-directory (or TMPDIR) to a writable directory"
        ) from None
