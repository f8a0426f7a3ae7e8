"""The README is executed: every Python and shell block runs, as written, on small data.

Each fenced block is one test, run in a fresh directory that holds the files the README names
(``data.zarr``, ``jan.zarr``, ``feb.zarr``, ``stats.zarr``, ``a.zarr``, ``b.zarr``, ``batches/*.npz``,
and the README's own YAML blocks under the names their first line gives). Python blocks run in a
fresh namespace (only the placeholders the README calls "yours", ``loader`` and ``my_model_scores``,
are given); shell blocks run with ``bash -e`` and this venv's ``daskbatch`` first on ``PATH``.

Blocks that install or run the whole suite are not run here; :data:`NOT_RUN` says which test
covers each instead.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys
import time
import tomllib

import numpy as np
import pytest
import yaml

import daskbatch as db

REPO = pathlib.Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
BLOCKS = [
    (README.count("\n", 0, m.start()) + 2, m.group(1), m.group(2))
    for m in re.finditer(r"^```(\w+)\n(.*?)^```", README, flags=re.S | re.M)
]

#: Blocks not run here (by their first line), and the tests that cover them.
NOT_RUN = {
    # installs: a fresh venv of the wheel on the base dependencies (test_install), the GPU extras
    # resolved against the index (test_packaging, slow), the extras named exist (below)
    "git clone": "tests/test_install.py::test_wheel_runs_on_base_dependencies_only",
    "python3 -m pip install '.[gpu-cu12]'": "tests/test_packaging.py::test_gpu_extra_resolves, "
                                            "tests/test_readme.py::test_install_extras_exist",
    "conda env create": "tests/test_readme.py::test_environment_yml_has_the_gpu_path",
    # the opening lines: the demo (test_cli_describe checks the line and runs the demo small);
    # the test command is what .ci/run runs
    "python3 -m venv .venv": "tests/test_cli_describe.py::test_demo_small and .ci/run",
}


def _not_run(code: str) -> str | None:
    return next((why for start, why in NOT_RUN.items() if code.startswith(start)), None)


def _yaml_files() -> dict[str, str]:
    """The README's YAML blocks by the file name their first line (a comment) gives."""
    files = {}
    for _, lang, code in BLOCKS:
        if lang == "yaml":
            name = re.match(r"# (\S+\.yaml)", code)
            assert name is not None, f"a README YAML block names no file on its first line: {code[:60]!r}"
            files[name.group(1)] = code
    return files


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The files the README's blocks read, made once."""
    here = tmp_path_factory.mktemp("readme-files")
    db.synth(str(here / "data.zarr"), rows=20_000, features=32, classes=3, informative=8, chunk_rows=5_000)
    db.describe(str(here / "data.zarr"), label="y").save(str(here / "stats.zarr"))
    # January and February: two months of the same process (feb's values fall in jan's ranges).
    rng = np.random.default_rng(3)
    shift = rng.normal(0.0, 1.0, (3, 32))
    for folder, months in (("batches", ("batches",)), ("months", ("jan", "feb"))):
        (here / folder).mkdir()
        for month in months:
            for i in range(2):
                y = rng.integers(0, 3, 5_000).astype(np.int32)
                x = (rng.standard_normal((5_000, 32)) + shift[y]).astype(np.float32)
                np.savez(here / folder / f"{month}-{i}.npz", x=x, y=y)
    for month in ("jan", "feb"):
        db.ingest(str(here / "months" / f"{month}-*.npz"), str(here / f"{month}.zarr"), x_key="x", label_key="y")
    a = db.describe(str(here / "jan.zarr"), label="y")
    a.save(str(here / "a.zarr"))
    edges = np.asarray(a.hist_edges)
    b = db.describe(str(here / "feb.zarr"), label="y", range=[(e[0], e[-1]) for e in edges],
                    stats=("moments", "cov", "hist", "mi", "class_moments", "sketch"))  # mergeable with a
    b.save(str(here / "b.zarr"))
    for name, code in _yaml_files().items():
        (here / name).write_text(code)
    return here


@pytest.fixture()
def workdir(template: pathlib.Path, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    here = tmp_path / "run"
    shutil.copytree(template, here)
    monkeypatch.chdir(here)
    return here


def _scheduler(workdir: pathlib.Path, n_workers: int) -> list[subprocess.Popen[bytes]]:
    """A scheduler and ``n_workers`` worker processes writing and reading ``scheduler.json``."""
    # This interpreter's modules (the `dask` script of a shared install may run another Python).
    started = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--scheduler-file", "scheduler.json",
                                 "--no-dashboard", "--host", "127.0.0.1"], cwd=workdir,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    deadline = time.monotonic() + 120
    while not (workdir / "scheduler.json").exists():
        assert time.monotonic() < deadline, "the scheduler did not start"
        time.sleep(0.2)
    started.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file", "scheduler.json",
                                     "--nworkers", str(n_workers), "--nthreads", "1", "--no-dashboard",
                                     "--memory-limit", "2GiB"], cwd=workdir,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return started


class _Loader:
    """The README's ``loader``: (x, y) batches of a user's data loader."""

    def __iter__(self):  # noqa: ANN204
        rng = np.random.default_rng(4)
        for _ in range(4):
            yield rng.standard_normal((500, 6)), rng.integers(0, 3, 500)


def my_model_scores(block: np.ndarray) -> np.ndarray:
    """The README's ``my_model_scores``: a vectorised model, rows in, one score per row out."""
    return np.asarray(block, dtype=np.float64).sum(axis=1)


RUN = [(line, lang, code) for line, lang, code in BLOCKS if lang in ("python", "bash") and _not_run(code) is None]


def test_blocks_are_all_accounted_for() -> None:
    # A new block is run, or says here which test covers it.
    langs = {lang for _, lang, _ in BLOCKS}
    assert langs <= {"python", "bash", "yaml"}, langs
    skipped = [code.splitlines()[0] for _, lang, code in BLOCKS if lang != "yaml" and _not_run(code)]
    assert len(skipped) == len(NOT_RUN), skipped
    assert len(RUN) >= 8 and set(_yaml_files()) == {"job.yaml", "describe-options.yaml"}


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("line", "lang", "code"), RUN, ids=[f"README.md:{line}-{lang}" for line, lang, _ in RUN])
def test_readme_block_runs(line: int, lang: str, code: str, workdir: pathlib.Path) -> None:
    if lang == "python":
        namespace = {"__name__": "__readme__"}
        if "loader" in code:
            namespace["loader"] = _Loader()
        if "my_model_scores" in code:
            namespace["my_model_scores"] = my_model_scores
        exec(compile(code, f"README.md:{line}", "exec"), namespace)  # noqa: S102 - running the docs is the test
        return
    started = _scheduler(workdir, 2) if "scheduler.json" in code else []
    try:
        env = dict(os.environ, PATH=f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
        proc = subprocess.run(["bash", "-e", "-c", code], cwd=workdir, env=env, capture_output=True, text=True,
                              timeout=560, stdin=subprocess.DEVNULL)
    finally:
        for p in reversed(started):
            p.terminate()
            p.wait(timeout=60)
    assert proc.returncode == 0, f"README.md:{line}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"


def test_install_extras_exist() -> None:
    extras = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    named = set(re.findall(r"daskbatch\[([\w,-]+)\]", README)) | set(re.findall(r"'\.\[([\w,-]+)\]'", README))
    named |= set(re.findall(r"`\.\[([\w,-]+)\]", README)) | set(re.findall(r"`\[([\w-]+)\]`", README))
    names = {n for group in named for n in group.split(",")}
    assert {"gpu-cu12", "gpu-cu13", "notebook", "hpc"} <= names, names
    assert names <= extras, f"the README names extras pyproject.toml lacks: {sorted(names - extras)}"


def test_environment_yml_has_the_gpu_path() -> None:
    # Uncommented as the README says: the rapidsai channel and the GPU block.
    text = (REPO / "environment.yml").read_text()
    env = yaml.safe_load(re.sub(r"^(\s*)# (- )", r"\1\2", text, flags=re.M))
    assert env["channels"] == ["rapidsai", "conda-forge"]  # RAPIDS's order
    specs = [s for s in env["dependencies"] if isinstance(s, str)]
    names = {re.split(r"[<>=! ]", s, maxsplit=1)[0] for s in specs}
    # What the GPU path imports, by its conda package (the pip extra's names differ by CUDA suffix).
    gpu_imports = {"cupy": "cupy", "dask_cuda": "dask-cuda", "rmm": "rmm", "pynvml": "pynvml",
                   "numba.cuda": "numba-cuda", "ipywidgets": "ipywidgets"}
    source = "\n".join(p.read_text() for p in (REPO / "daskbatch").rglob("*.py"))
    for module, package in gpu_imports.items():
        assert re.search(rf"^\s*(import {re.escape(module)}\b|from {re.escape(module)} import)", source, re.M), module
        assert package in names, f"environment.yml lacks {package} (daskbatch imports {module})"
    # One RAPIDS release for every RAPIDS package.
    rapids = {s.split("=", 1)[1] for s in specs if s.split("=")[0] in ("dask-cuda", "rmm")}
    assert len(rapids) == 1 and re.fullmatch(r"=?\d\d\.\d\d\.\*", rapids.pop())
    # The base dependencies of pyproject.toml are all there.
    base = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    for req in base:
        name = re.split(r"[<>=\[ ]", req, maxsplit=1)[0]
        assert name in names, f"environment.yml lacks the base dependency {name}"
