"""Make the pictures in docs/: ``python docs/make_figure.py`` regenerates all of them.

* ``summary-*.png``: three of ``summary.plot``'s figures of a seeded synthetic
  dataset (200,000 rows, 24 features, 3 classes);
* ``cli-table.txt`` and ``cli-table.png``: what ``daskbatch describe`` prints for
  the same data (the table the notebook shows, as text);
* ``notebooks/*.png``: the figures of the five notebooks, which are executed
  and stored with their outputs (``docs/make_notebooks.py``; ``--no-notebooks``
  skips this slow step).
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
import tempfile

import daskbatch as db

HERE = pathlib.Path(__file__).resolve().parent


def cli_table(store: str, out_dir: pathlib.Path) -> list[pathlib.Path]:
    """Write the report ``daskbatch describe STORE`` prints, as text and as a PNG of that text.

    Parameters
    ----------
    store : str
        A Zarr store.
    out_dir : pathlib.Path
        Where the files go.

    Returns
    -------
    list of pathlib.Path
        The text file and the PNG.
    """
    from matplotlib.figure import Figure

    report = subprocess.run(
        # --log-level error: the report alone (-q would leave out the table too)
        [sys.executable, "-m", "daskbatch", "describe", store, "--cluster", "threads", "--no-progress",
         "--log-level", "error"],
        check=True, capture_output=True, text=True,
    ).stdout.rstrip() + "\n"
    text_path = out_dir / "cli-table.txt"
    text_path.write_text(report)
    lines = report.splitlines()
    width = max(len(line) for line in lines)
    fig = Figure(figsize=(0.075 * width + 0.4, 0.19 * len(lines) + 0.4))
    fig.text(0.01, 0.99, report, family="monospace", fontsize=9, va="top", ha="left")
    png_path = out_dir / "cli-table.png"
    fig.savefig(png_path, dpi=100, bbox_inches="tight", pad_inches=0.2)  # the text decides the size
    return [text_path, png_path]


def main(out_dir: pathlib.Path, *, notebooks: bool = True) -> list[pathlib.Path]:
    """Make every picture of docs/ (and the notebooks' stored outputs).

    Parameters
    ----------
    out_dir : pathlib.Path
        Where the summary figures and the CLI table go.
    notebooks : bool, default True
        Also execute the notebooks and save their figures.

    Returns
    -------
    list of pathlib.Path
        The files written.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory() as tmp:
        store = f"{tmp}/data.zarr"
        data = db.synth(200_000, 24, classes=3, informative=6, correlated=6, seed=1, path=store)
        summary = db.describe(data, run=db.RunOptions(plan=None))
        for name, fig in (
            ("summary-histograms.png", summary.plot.histograms(ncols=4)),
            ("summary-correlation.png", summary.plot.correlation()),
            ("summary-mi.png", summary.plot.mi(k=12)),
        ):
            path = out_dir / name
            fig.savefig(path, dpi=90)
            written.append(path)
        written += cli_table(store, out_dir)
    if notebooks:
        sys.path.insert(0, str(HERE))
        import make_notebooks

        written += make_notebooks.main()
    return written


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--no-notebooks"]
    target = pathlib.Path(args[0]) if args else HERE
    for p in main(target, notebooks="--no-notebooks" not in sys.argv):
        print(p)
