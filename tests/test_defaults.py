"""Every default lives in ``daskbatch/daskbatch.yaml``: no stray literal of a configured default in the package.

The statistics' parameters (``statistics:`` in the file, ``config.STATISTIC_DEFAULTS``) are read by
the statistic classes, ``stats/spec.SHORTCUTS``, the planner and the CLI; the job's keys
(``daskbatch: job:``) by the job schema and by the command-line options that a ``--config`` file
sets. A parameter, dataclass field or click option of one of those names whose default is written
out as the configured value is a second home for that default, and goes stale when the file
changes: the scan below finds each one.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from daskbatch import config
from daskbatch.cli._config_file import _JOB_OPTIONS

PACKAGE = Path(__file__).parents[1] / "daskbatch"

#: (file, name) -> why a literal equal to a configured default there is another concept.
ALLOWED: dict[tuple[str, str], str] = {}


def _statistic_defaults() -> dict[str, object]:
    return {k: v for k, v in config.STATISTIC_DEFAULTS.items() if v is not None}


def _option_defaults() -> dict[str, object]:
    """The job default of each option a ``--config`` file sets (by the option's long name)."""
    found = {}
    for key, option in _JOB_OPTIONS.items():
        value = config.packaged("job." + ".".join(key))
        if value is not None:
            found[option] = value
    return found


def _same(a: object, b: object) -> bool:
    return type(a) is type(b) and a == b


def stray_literals(root: Path) -> list[str]:
    """``file:line: name=value`` for every literal default equal to its configured value."""
    statistics, options = _statistic_defaults(), _option_defaults()
    found = []
    for path in sorted(root.rglob("*.py")):
        where = path.relative_to(root.parent).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            pairs: list[tuple[str, ast.expr]] = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args
                positional = args.posonlyargs + args.args
                pairs += [(a.arg, d) for a, d in zip(positional[len(positional) - len(args.defaults):], args.defaults, strict=True)]
                pairs += [(a.arg, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None]
            elif isinstance(node, ast.ClassDef):
                pairs += [(s.target.id, s.value) for s in node.body if isinstance(s, ast.AnnAssign)
                          and isinstance(s.target, ast.Name) and s.value is not None]
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "option":
                flags = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                names = {f.lstrip("-").replace("-", "_") for f in flags if f.startswith("--")}
                default = next((k.value for k in node.keywords if k.arg == "default"), None)
                if default is not None:
                    pairs += [(f"--{n}", default) for n in names if n in options]
            for name, value in pairs:
                configured = options[name[2:]] if name.startswith("--") else statistics.get(name)
                if configured is None or not isinstance(value, ast.Constant) or (where, name) in ALLOWED:
                    continue
                if _same(value.value, configured):
                    found.append(f"{where}:{value.lineno}: {name}={value.value!r}")
    return found


def test_no_configured_default_is_written_twice() -> None:
    assert stray_literals(PACKAGE) == []


def test_the_scan_finds_a_stray_default(tmp_path: Path) -> None:
    package = tmp_path / "daskbatch"
    package.mkdir()
    (package / "mine.py").write_text(
        "import click\n"
        "def plan(x, bins: int = 64, *, ddof=1, split=64):\n    pass\n"
        "class Stat:\n    nan_policy: str = 'omit'\n    ddof: int = 0\n"
        "@click.option('--bins', default=64)\n@click.option('--x', 'x_name', default='X')\n"
        "def command(bins, x_name):\n    pass\n"
    )
    assert stray_literals(package) == [
        "daskbatch/mine.py:2: bins=64", "daskbatch/mine.py:2: ddof=1", "daskbatch/mine.py:5: nan_policy='omit'",
        "daskbatch/mine.py:7: --bins=64", "daskbatch/mine.py:8: --x='X'",
    ]


@pytest.mark.parametrize("key", ["bins", "ddof", "nan_policy"])
def test_the_job_schema_and_the_statistics_share_one_value(key: str) -> None:
    assert config.packaged(f"job.statistics.{key}") == config.STATISTIC_DEFAULTS[key]


def test_a_changed_default_reaches_every_reader(tmp_path: Path) -> None:
    """Change ``bins`` in a copy of the package's file: the statistics, describe, the planner and the CLI follow."""
    package = tmp_path / "daskbatch"
    subprocess.run(["cp", "-r", str(PACKAGE), str(package)], check=True)
    defaults = package / "daskbatch.yaml"
    defaults.write_text(defaults.read_text().replace("bins: &bins 64 ", "bins: &bins 24 ", 1))
    code = (
        "import inspect, numpy as np, daskbatch as db\n"
        "from daskbatch.cli import main\nfrom click.testing import CliRunner\n"
        "from daskbatch.engine.planner import plan\n"
        "assert db.Histogram().bins == db.stats.MutualInformation().bins == 24\n"
        "assert inspect.signature(plan).parameters['bins'].default == 24\n"
        "s = db.describe(np.random.default_rng(0).normal(size=(200, 2)), stats='hist', range=(-4, 4))\n"
        "assert s.hist_counts.shape[-1] == 24, s.hist_counts.shape\n"
        "assert '[default: 24;' in CliRunner().invoke(main, ['describe', '--help']).output\n"
        "import dask.config\nassert dask.config.get('daskbatch.job.statistics.bins') == 24\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path, env={"PYTHONPATH": str(tmp_path),
                   "PATH": "/usr/bin:/bin"})
