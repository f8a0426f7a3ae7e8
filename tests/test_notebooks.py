"""The notebooks run top to bottom (code cells executed in order, as a kernel would)."""

from __future__ import annotations

import pathlib

import pytest

NOTEBOOKS = pathlib.Path(__file__).resolve().parents[1] / "notebooks"


def run_notebook(path: pathlib.Path) -> dict:
    nbformat = pytest.importorskip("nbformat")
    notebook = nbformat.read(path, as_version=4)
    namespace: dict = {"__name__": "__main__"}
    for i, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        assert not cell.get("outputs"), f"{path.name} cell {i}: outputs must be stripped"
        exec(compile(cell.source, f"{path.name}[{i}]", "exec"), namespace)
    return namespace


def test_quickstart_runs() -> None:
    pytest.importorskip("matplotlib")
    ns = run_notebook(NOTEBOOKS / "01-quickstart.ipynb")
    assert ns["summary"].mi is not None


@pytest.mark.slow
def test_hpc_batch_runs() -> None:
    ns = run_notebook(NOTEBOOKS / "03-hpc-batch.ipynb")
    assert len(ns["summary"].top_mi(3)) == 3


def test_gpu_notebook_runs_on_the_cpu_without_a_gpu(monkeypatch, capsys) -> None:
    # No CUDA device visible (as on a machine without one): the notebook says so and uses the CPU.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    ns = run_notebook(NOTEBOOKS / "02-gpu.ipynb")
    assert "no CUDA device: running on the CPU" in capsys.readouterr().out
    assert ns["device"] == "cpu"
    assert ns["summary"].mean.shape == (128,) and ns["summary"].mi is not None


@pytest.mark.gpu
def test_gpu_notebook_runs() -> None:
    pytest.importorskip("dask_cuda")
    run_notebook(NOTEBOOKS / "02-gpu.ipynb")
