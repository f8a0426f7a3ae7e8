"""Make the README's figure: ``python docs/make_figure.py`` writes docs/summary.png.

A seeded synthetic dataset (200,000 rows, 24 features, 3 classes) is summarised
with daskbatch, and three of ``summary.plot``'s figures are saved.
"""

from __future__ import annotations

import pathlib
import sys

import daskbatch as db


def main(out_dir: pathlib.Path) -> list[pathlib.Path]:
    data = db.synth(200_000, 24, classes=3, informative=6, correlated=6, seed=1)
    summary = db.describe(data, plan=None)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, fig in (
        ("summary-histograms.png", summary.plot.histograms(ncols=4)),
        ("summary-correlation.png", summary.plot.correlation()),
        ("summary-mi.png", summary.plot.mi(k=12)),
    ):
        path = out_dir / name
        fig.savefig(path, dpi=90)
        written.append(path)
    return written


if __name__ == "__main__":
    target = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).parent
    for p in main(target):
        print(p)
