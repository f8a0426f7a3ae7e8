"""``daskbatch demo``: the end-to-end tour on generated data."""

from __future__ import annotations

import click

from daskbatch.cli._group import main, user_errors
from daskbatch.cli.options import n_classes_options, resolve_n_classes
from daskbatch.demo import run_demo


@main.command("demo")
@click.option("--rows", default=2_000_000, show_default=True, type=click.IntRange(min=1))
@click.option("--features", default=64, show_default=True, type=click.IntRange(min=1))
@n_classes_options(2, "Number of label classes.  [default: 3]")
@click.option("--workers", default=None, type=click.IntRange(min=1), help="Worker processes (default: cores, at most 4).")
@click.option("--threads", default=1, show_default=True, type=click.IntRange(min=1), help="Threads per worker.")
@click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False), help="Directory for data and results (default: a new temporary one).")
@click.option("--seed", default=0, show_default=True)
@user_errors
def demo_command(rows: int, features: int, n_classes: int | None, class_values: str | None, workers: int | None, threads: int, out_dir: str | None, seed: int) -> None:
    """Generate a labelled dataset, start a local cluster, and print its full summary."""
    classes = resolve_n_classes(n_classes, class_values, consecutive=True) or 3

    run_demo(rows=rows, features=features, classes=classes, workers=workers,
             threads_per_worker=threads, out_dir=out_dir, seed=seed, echo=click.echo)
