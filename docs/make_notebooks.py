"""Run the notebooks and store them with their outputs: ``python docs/make_notebooks.py``.

Each notebook in ``notebooks/`` is executed top to bottom in a python3 kernel
(nbclient, in a temporary directory), and written back with its outputs, so
that GitHub shows them. Every code cell records the sha256 of the source that
made its outputs (``metadata["daskbatch"]["source_sha256"]``):
``tests/test_notebooks.py`` checks that the stored outputs are current, that no
cell wrote to stderr or failed, and the figures of every notebook are saved as
PNGs under ``docs/notebooks/`` (``<notebook>-<cell>.png``).

Without a GPU the GPU notebook runs its CPU branch (and says so).
"""

from __future__ import annotations

import base64
import hashlib
import os
import pathlib
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
PNG_DIR = ROOT / "docs" / "notebooks"
#: Metadata key of each code cell: the sha256 of the source its outputs came from.
KEY = "daskbatch"


def source_digest(source: str) -> str:
    """Give the sha256 of a cell's source (what its stored outputs must have come from).

    Parameters
    ----------
    source : str
        The cell's source.

    Returns
    -------
    str
        Hex digest.
    """
    return hashlib.sha256(source.encode()).hexdigest()


def strip(notebook) -> None:  # noqa: ANN001 - an nbformat.NotebookNode
    """Remove outputs, execution counts and digests (before executing).

    Parameters
    ----------
    notebook : nbformat.NotebookNode
        The notebook, changed in place.
    """
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
            cell.metadata.pop(KEY, None)


def execute(path: pathlib.Path, timeout: int = 600):  # noqa: ANN201 - an nbformat.NotebookNode
    """Execute the notebook at ``path`` in a fresh kernel in a temporary directory; return it with outputs.

    Parameters
    ----------
    path : pathlib.Path
        The notebook.
    timeout : int, default 600
        Seconds a cell may take.

    Returns
    -------
    nbformat.NotebookNode
        The executed notebook, each code cell stamped with its source's digest.
    """
    import nbclient
    import nbformat

    notebook = nbformat.read(path, as_version=4)
    strip(notebook)
    os.environ.pop("MPLBACKEND", None)  # the kernel's inline backend, as in Jupyter
    with tempfile.TemporaryDirectory() as work:
        nbclient.NotebookClient(
            notebook, kernel_name="python3", timeout=timeout, resources={"metadata": {"path": work}}
        ).execute()
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.metadata[KEY] = {"source_sha256": source_digest(cell.source)}
    return notebook


def save_pngs(notebook, stem: str, out_dir: pathlib.Path = PNG_DIR) -> list[pathlib.Path]:  # noqa: ANN001
    """Write every PNG the notebook's cells produced to ``out_dir/<stem>-<cell>.png``.

    Parameters
    ----------
    notebook : nbformat.NotebookNode
        An executed notebook.
    stem : str
        The notebook's name without ``.ipynb``.
    out_dir : pathlib.Path
        Where the PNGs go.

    Returns
    -------
    list of pathlib.Path
        The files written.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob(f"{stem}-*.png"):
        old.unlink()
    written = []
    for i, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []):
            png = output.get("data", {}).get("image/png")
            if png:
                path = out_dir / f"{stem}-{i:02d}.png"
                path.write_bytes(base64.b64decode(png))
                written.append(path)
    return written


def main(names: list[str] | None = None) -> list[pathlib.Path]:
    """Execute the notebooks (all, or ``names``), store them with outputs, and save their figures.

    Parameters
    ----------
    names : list of str, optional
        Notebook file names; default: every notebook.

    Returns
    -------
    list of pathlib.Path
        The notebooks and PNGs written.
    """
    import nbformat

    written = []
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        if names and path.name not in names:
            continue
        notebook = execute(path)
        nbformat.write(notebook, path)
        written += [path, *save_pngs(notebook, path.stem)]
    return written


if __name__ == "__main__":
    for p in main(sys.argv[1:] or None):
        print(p)
