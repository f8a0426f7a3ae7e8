"""The plain install (no extras) imports and runs.

The test venv has every extra installed, so an import of an optional package at module level
goes unseen there. Two checks close that gap:

* ``test_wheel_runs_on_base_dependencies_only``: the wheel, built from this checkout, installed
  into a fresh venv that sees only the distributions the base ``dependencies`` of
  ``pyproject.toml`` require (and what those require), linked from the test venv so that nothing
  is downloaded. It imports daskbatch, runs every command's ``--help``, a ``describe`` from the
  command line and ``db.select(db.describe(...))``.
* ``test_import_graph_touches_only_base_dependencies``: in this venv, the modules that
  ``import daskbatch`` and every command's ``--help`` load belong to base distributions.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, distribution, packages_distributions

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = pathlib.Path(__file__).resolve().parents[1]


def _base_closure() -> set[str]:
    """Canonical names of the base dependencies of pyproject.toml and everything they require."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    todo = [Requirement(r) for r in project["dependencies"]]
    seen: dict[str, set[str]] = {}
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(req.name)
        extras = set(req.extras)
        if name in seen and extras <= seen[name]:
            continue
        seen[name] = seen.get(name, set()) | extras
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue  # an optional dependency of a dependency that is not installed here
        for spec in dist.requires or []:
            sub = Requirement(spec)
            envs = [{"extra": e} for e in ("", *sorted(seen[name]))]
            if sub.marker is None or any(sub.marker.evaluate(env) for env in envs):
                todo.append(Requirement(str(sub).split(";")[0]))
    return set(seen)


def _link_distributions(names: set[str], into: pathlib.Path) -> None:
    """Symlink the installed files' top-level entries (packages, modules, .dist-info) of ``names``."""
    into.mkdir()
    for name in sorted(names):
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue
        assert dist.files is not None, f"{name} lists no files: cannot link it"
        tops = {f.parts[0] for f in dist.files if f.parts[0] not in ("..", "__pycache__")}
        for top in tops:
            source = pathlib.Path(str(dist.locate_file(top)))
            if source.exists() and not (into / top).exists():
                (into / top).symlink_to(source)


def _build_wheel(tmp_path: pathlib.Path) -> pathlib.Path:
    """The wheel of a copy of this checkout (so that no build/ or egg-info is left in it)."""
    project = tmp_path / "project"
    project.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, project / name)
    shutil.copytree(REPO / "daskbatch", project / "daskbatch", ignore=shutil.ignore_patterns("__pycache__"))
    dist = tmp_path / "dist"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-index", "--no-build-isolation",
         "--wheel-dir", str(dist), str(project)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = dist.glob("daskbatch-*.whl")
    return wheel


@pytest.mark.timeout(300)
def test_wheel_runs_on_base_dependencies_only(tmp_path):
    wheel = _build_wheel(tmp_path)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps", "--no-index",
         str(wheel)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    base = _base_closure()
    links = tmp_path / "base-site"
    _link_distributions(base, links)
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    pathlib.Path(site, "base_dependencies.pth").write_text(f"{links}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(list(args), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, f"{args}: {done.stderr[-3000:]}"
        return done

    # The venv really lacks the optional packages (and the test venv's daskbatch checkout).
    probe = run(str(python), "-c", (
        "import importlib.util as u, daskbatch, json; "
        "print(json.dumps([daskbatch.__file__, [m for m in ('matplotlib', 'sklearn', 'h5py', 'dask_jobqueue',"
        " 'cupy', 'numba_cuda', 'ipywidgets', 'boost_histogram', 'hypothesis', 'pytest', 'bokeh')"
        " if u.find_spec(m)]]))"))
    location, optional = json.loads(probe.stdout)
    assert pathlib.Path(location).is_relative_to(venv), location
    assert optional == []
    daskbatch = str(venv / "bin" / "daskbatch")
    names = json.loads(run(str(python), "-c",
                           "import json; from daskbatch.cli import main; print(json.dumps(sorted(main.commands)))").stdout)
    assert "describe" in names
    assert "Usage" in run(daskbatch, "--help").stdout
    for name in names:
        assert "Usage" in run(daskbatch, name, "--help").stdout
    run(str(python), "-c", "import daskbatch as db; db.synth('data.zarr', rows=3000, features=5, classes=3, chunk_rows=1000)")
    run(daskbatch, "-q", "describe", "data.zarr", "--label", "y", "--cluster", "threads", "--json", "stats.json")
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats
    selected = run(str(python), "-c", (
        "import daskbatch as db; s = db.describe('data.zarr', label='y'); "
        "sel = db.select(s, param=2); print(sel.score_name, int(sel.selected.sum()))"))
    assert selected.stdout.split()[-2:] == ["f", "2"]
    # What needs an extra says which, in one line.
    for code, extra in (
        ("import daskbatch as db; db.describe('data.zarr', label='y').plot.histograms()", "[notebook]"),
        ("import daskbatch.testing", "[test]"),
    ):
        done = subprocess.run([str(python), "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=240)
        assert done.returncode == 1, done.stderr[-2000:]
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith("ImportError: ") and f"pip install 'daskbatch{extra}'" in last, last


_PROBE = """
import json, sys

first_importer = {}


def record(event, args):
    # Who asked for a module that was not loaded yet: the first frame outside importlib.
    if event != "import":
        return
    top = args[0].split(".")[0]
    if top in first_importer:
        return
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").startswith(("importlib", "_frozen_importlib")):
        frame = frame.f_back
    first_importer[top] = frame.f_globals.get("__name__", "") if frame is not None else ""


sys.addaudithook(record)
from click.testing import CliRunner
import daskbatch
from daskbatch.cli import main
runner = CliRunner()
for args in [["--help"], *([name, "--help"] for name in main.commands)]:
    result = runner.invoke(main, args)
    assert result.exit_code == 0, (args, result.output)
print(json.dumps({m.split(".")[0]: first_importer.get(m.split(".")[0], "") for m in sys.modules}))
"""


def test_import_graph_touches_only_base_dependencies():
    # A fresh interpreter: this one has loaded pytest, hypothesis, scipy, ... already.
    # click.testing is click's own module (a base dependency), loaded only for the probe.
    proc = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    owners = packages_distributions()
    base = _base_closure() | {"daskbatch"}
    outside = {}
    for top, importer in json.loads(proc.stdout).items():
        if top in sys.stdlib_module_names or top.startswith("_") or top == "cython_runtime":
            continue  # the standard library, and extension modules' private helpers
        dists = {canonicalize_name(d) for d in owners.get(top, [])}
        # A dependency may try an optional package of its own (numpy.f2py tries charset_normalizer);
        # that it stays optional is what the fresh venv above proves. daskbatch itself may not.
        if not dists & base and importer.startswith("daskbatch"):
            outside[top] = (sorted(dists) or "no distribution", importer)
    assert not outside, f"imported by daskbatch on import or --help, not a base dependency: {outside}"
