"""The notebooks run top to bottom in a real Jupyter kernel (nbclient), with figures inline.

Each is stored with its outputs (``python docs/make_notebooks.py`` makes them),
so that GitHub shows them; a test checks they are current. The other tests
execute a copy in memory, outputs stripped, with a last cell of checks
appended, and look at what the kernel sent back: a PNG for every plot cell,
nothing on stderr, no error anywhere.
"""

from __future__ import annotations

import hashlib
import pathlib
import time

import pytest

NOTEBOOKS = pathlib.Path(__file__).resolve().parents[1] / "notebooks"


def stored(name: str):  # -> nbformat.NotebookNode
    """The notebook as stored, outputs stripped (what a fresh run starts from)."""
    nbformat = pytest.importorskip("nbformat")
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
            cell.metadata.pop("daskbatch", None)
    return notebook


def unclean_outputs(notebook) -> list[str]:
    """Cells that wrote to stderr or raised: a notebook must run clean."""
    return [
        f"cell {i}: {o.get('name') or o.get('ename')}: {(o.get('text') or o.get('evalue') or '')[:300]}"
        for i, c in enumerate(notebook.cells) if c.cell_type == "code" for o in c.outputs
        if o.get("output_type") == "error" or o.get("name") == "stderr"
    ]


def run_notebook(name: str, tmp_path: pathlib.Path, monkeypatch, checks: str = "", timeout: int = 240):
    """Execute ``name`` in a python3 kernel started in ``tmp_path``; ``checks`` runs last, in the same kernel."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    notebook = stored(name)
    if checks:
        notebook.cells.append(nbformat.v4.new_code_cell(checks))
    # The kernel's own default (matplotlib-inline), as in Jupyter; a backend set
    # for the test run (MPLBACKEND=Agg) would hide the figures.
    monkeypatch.delenv("MPLBACKEND", raising=False)
    client = nbclient.NotebookClient(
        notebook, kernel_name="python3", timeout=timeout, resources={"metadata": {"path": str(tmp_path)}}
    )
    started = time.perf_counter()
    client.execute()
    notebook.metadata["wall_seconds"] = time.perf_counter() - started
    assert unclean_outputs(notebook) == [], name
    return notebook


def outputs_of(notebook, needle: str) -> list[dict]:
    """Outputs of the one code cell whose source contains ``needle``."""
    cells = [c for c in notebook.cells if c.cell_type == "code" and needle in c.source]
    assert len(cells) == 1, f"{len(cells)} cells contain {needle!r}"
    return cells[0].outputs


def has_png(outputs: list[dict]) -> bool:
    return any("image/png" in o.get("data", {}) for o in outputs)


def html_of(outputs: list[dict]) -> str:
    return "".join(o.get("data", {}).get("text/html", "") for o in outputs)


def figures_as_text(notebook) -> list[str]:
    """``<Figure ...>``/``<Axes ...>`` results that came without an image (what a non-inline backend gives)."""
    return [
        o["data"]["text/plain"]
        for c in notebook.cells if c.cell_type == "code" for o in c.outputs
        if o.get("data", {}).get("text/plain", "").startswith(("<Figure", "<Axes", "[<Axes"))
        and "image/png" not in o["data"]
    ]


def text_of(notebook) -> str:
    return "".join(
        o.get("text", "") + o.get("data", {}).get("text/plain", "")
        for c in notebook.cells if c.cell_type == "code" for o in c.outputs
    )


def test_every_notebook_is_stored_with_current_clean_outputs() -> None:
    """Stored outputs come from the stored sources (python docs/make_notebooks.py), and ran clean."""
    nbformat = pytest.importorskip("nbformat")
    names = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
    assert {"01-quickstart.ipynb", "04-feature-selection.ipynb", "05-explore.ipynb"} <= set(names)
    for name in names:
        notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
        code = [c for c in notebook.cells if c.cell_type == "code"]
        assert all(c.execution_count is not None for c in code), f"{name}: run python docs/make_notebooks.py"
        for i, cell in enumerate(code):
            digest = cell.metadata.get("daskbatch", {}).get("source_sha256")
            assert digest == hashlib.sha256(cell.source.encode()).hexdigest(), (
                f"{name}: code cell {i} changed since its outputs were made; run python docs/make_notebooks.py"
            )
        assert any(c.outputs for c in code), name
        assert unclean_outputs(notebook) == [], name
        # the figures of the notebooks are in docs/, as PNGs
        pngs = sum("image/png" in o.get("data", {}) for c in code for o in c.outputs)
        assert len(list((NOTEBOOKS.parent / "docs" / "notebooks").glob(f"{name[:-6]}-*.png"))) == pngs, name


def test_the_clusters_of_the_notebooks_close_with_context_managers() -> None:
    # db.cluster, not a bare LocalCluster: it closes its in-process workers without the heartbeat
    # error that distributed logs now and then when a worker closes mid-heartbeat (stderr in a notebook).
    for name in ("01-quickstart.ipynb", "03-hpc-batch.ipynb"):
        source = "".join(c.source for c in stored(name).cells if c.cell_type == "code")
        assert 'with db.cluster("local"' in source and "LocalCluster(" not in source, name
        assert ".close()" not in source, name
    gpu = "".join(c.source for c in stored("02-gpu.ipynb").cells if c.cell_type == "code")
    assert "dashboard_link" not in gpu  # db.cluster prints it once


def test_quickstart_runs_with_inline_figures(tmp_path, monkeypatch) -> None:
    pytest.importorskip("matplotlib")
    nb = run_notebook("01-quickstart.ipynb", tmp_path, monkeypatch, checks=(
        "import pandas as pd\n"
        "assert summary.mi is not None\n"
        "assert isinstance(summary.top_mi(5), pd.Series) and isinstance(summary.top_correlated(5), pd.DataFrame)\n"
    ))
    for cell in ("plot.histograms", "plot.correlation", "plot.mi"):
        assert has_png(outputs_of(nb, cell)), cell
    assert "matplotlib.use" not in "".join(c.source for c in nb.cells)
    html = html_of(outputs_of(nb, "summary = db.describe"))
    assert "daskbatch.Summary: 200,000 rows × 16 features" in html
    assert not figures_as_text(nb)


def test_explore_notebook(tmp_path, monkeypatch) -> None:
    pytest.importorskip("matplotlib")
    nb = run_notebook("05-explore.ipynb", tmp_path, monkeypatch, checks=(
        "import numpy as np\n"
        "assert len(after.feature_names) == 10 and after.feature_names == selection.selected_names\n"
        "assert np.abs(after.mean).max() < 1e-6 and np.abs(after.std - 1).max() < 1e-6\n"
        "informative = {f'f{i}' for i in synth['informative']}\n"
        "assert informative <= set(selection.selected_names)  # F keeps every informative feature\n"
    ))
    for cell in ("plot.histograms", "plot.correlation", "plot.mi"):
        assert has_png(outputs_of(nb, cell)), cell
    assert "daskbatch.Summary" in html_of(outputs_of(nb, "summary = db.describe"))
    assert "daskbatch.Dataset" in html_of(outputs_of(nb, "selected = db.open_dataset"))
    assert not figures_as_text(nb)


def test_feature_selection_notebook(tmp_path, monkeypatch) -> None:
    pytest.importorskip("matplotlib")
    nb = run_notebook("04-feature-selection.ipynb", tmp_path, monkeypatch, checks=(
        "import numpy as np\n"
        "assert set(by_f.selected_names) >= {f'f{i}' for i in truth}  # all 6 informative among the 8\n"
        "assert by_chi2.pvalue is not None and by_mrmr.selected.sum() == 8\n"
        "assert np.all(np.diff(ratio) <= 0) and 0 < ratio.sum() <= 1\n"
        "out = db.open_dataset(f'{workdir}/mrmr.zarr', label='y')\n"
        "assert out.feature_names == list(by_mrmr.selected_names) and out.label is not None\n"
    ))
    assert has_png(outputs_of(nb, "ax.bar("))
    assert not figures_as_text(nb)


@pytest.mark.slow
def test_hpc_batch_runs(tmp_path, monkeypatch) -> None:
    run_notebook("03-hpc-batch.ipynb", tmp_path, monkeypatch, checks="assert len(summary.top_mi(3)) == 3\n")


def test_gpu_notebook_runs_on_the_cpu_without_a_gpu(tmp_path, monkeypatch) -> None:
    # No CUDA device visible (as on a machine without one): the notebook says so and uses the CPU.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    nb = run_notebook("02-gpu.ipynb", tmp_path, monkeypatch, checks=(
        "assert device == 'cpu'\n"
        "assert summary.mean.shape == (128,) and summary.mi is not None\n"
    ))
    assert "no CUDA device: running on the CPU" in text_of(nb)


@pytest.mark.gpu
def test_gpu_notebook_runs(tmp_path, monkeypatch) -> None:
    pytest.importorskip("dask_cuda")
    nb = run_notebook("02-gpu.ipynb", tmp_path, monkeypatch, checks="assert device == 'gpu'\n", timeout=600)
    assert "daskbatch.Summary" in html_of(outputs_of(nb, "summary = db.describe"))
