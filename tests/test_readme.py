"""The README is executed: every Python and shell block runs, as written and in order, on small data.

The blocks run one after the other in one directory, as a user pasting the README would: the
README's own first runnable block makes the small dataset (``daskbatch synth data.zarr ...``) that
the others read, and the summaries they save are read by the ones after them. Only what the README
calls the user's own is made here beforehand: the stores ``jan.zarr``, ``feb.zarr``, ``a.zarr``,
``b.zarr``, the batch files ``batches/*.npz``, the data ``loader`` and ``my_model_scores``, and the
README's YAML blocks under the names their first line gives. Python blocks run in a fresh namespace;
shell blocks with ``bash -e``, this venv's ``daskbatch`` first on ``PATH`` and ``DASKBATCH_CLUSTER=threads``
(no local cluster started per command).

A block that cannot run here (an install, a GPU, a running scheduler) says so in the README, in an
HTML comment on the line before it: ``<!-- skip-test: why (the test that covers it) -->``.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import tomllib

import numpy as np
import pytest
import yaml

import daskbatch as db

REPO = pathlib.Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
#: (line, language, code, why it is not run or None), in the README's order.
BLOCKS = [
    (README.count("\n", 0, m.start("fence")) + 2, m.group("lang"), m.group("code"), m.group("skip"))
    for m in re.finditer(
        r"(?:^<!-- skip-test: (?P<skip>[^\n]*?) -->\n)?(?P<fence>^```(?P<lang>\w+)\n(?P<code>.*?)^```)",
        README, flags=re.S | re.M,
    )
]
RUN = [(line, lang, code) for line, lang, code, skip in BLOCKS if lang in ("python", "bash") and skip is None]


def _yaml_files() -> dict[str, str]:
    """The README's YAML blocks by the file name their first line (a comment) gives."""
    files = {}
    for _, lang, code, _ in BLOCKS:
        if lang == "yaml":
            name = re.match(r"# (\S+\.yaml)", code)
            assert name is not None, f"a README YAML block names no file on its first line: {code[:60]!r}"
            files[name.group(1)] = code
    return files


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """One directory for every block, holding what the README calls the user's own files."""
    here = tmp_path_factory.mktemp("readme")
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


class _Loader:
    """The README's ``loader``: (x, y) batches of a user's data loader."""

    def __iter__(self):  # noqa: ANN204
        rng = np.random.default_rng(4)
        for _ in range(4):
            yield rng.standard_normal((500, 6)), rng.integers(0, 3, 500)


def my_model_scores(block: np.ndarray) -> np.ndarray:
    """The README's ``my_model_scores``: a vectorised model, rows in, one score per row out."""
    return np.asarray(block, dtype=np.float64).sum(axis=1)


def test_blocks_are_all_accounted_for() -> None:
    # Every block runs, or says in the README why not; the README makes its dataset before anything reads it.
    langs = {lang for _, lang, _, _ in BLOCKS}
    assert langs <= {"python", "bash", "yaml"}, langs
    markers = re.findall(r"<!-- skip-test:", README)
    skipped = [(line, skip) for line, lang, _, skip in BLOCKS if skip is not None]
    assert len(markers) == len(skipped), "a skip-test marker that is not on the line before a block"
    assert all(why.strip() for _, why in skipped), skipped
    assert len(RUN) >= 20 and set(_yaml_files()) == {"job.yaml", "describe-options.yaml"}
    line, lang, first = RUN[0]
    assert lang == "bash" and first.startswith("daskbatch synth data.zarr"), first
    assert not any("data.zarr" in code for at, _, code, _ in BLOCKS if at < line), "a block reads data.zarr before it is made"
    assert not any("--scheduler-file" in code for _, _, code in RUN)  # a running scheduler: marked


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("line", "lang", "code"), RUN, ids=[f"README.md:{line}-{lang}" for line, lang, _ in RUN])
def test_readme_block_runs(line: int, lang: str, code: str, workdir: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(workdir)
    if lang == "python":
        namespace = {"__name__": "__readme__"}
        if "loader" in code:
            namespace["loader"] = _Loader()
        if "my_model_scores" in code:
            namespace["my_model_scores"] = my_model_scores
        exec(compile(code, f"README.md:{line}", "exec"), namespace)  # noqa: S102 - running the docs is the test
        return
    # The commands as written, on dask's threaded scheduler: a local cluster per command would
    # take most of the test's time (tests/test_cli_describe.py starts them).
    env = dict(os.environ, PATH=f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
               DASKBATCH_CLUSTER="threads")
    proc = subprocess.run(["bash", "-e", "-c", code], cwd=workdir, env=env, capture_output=True, text=True,
                          timeout=560, stdin=subprocess.DEVNULL)
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
