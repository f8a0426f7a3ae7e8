"""``daskbatch describe --update STATS NEW.zarr``: the settings the new rows are described with.

The new rows must be counted exactly as the saved summary's were (the same
statistics, bins, histogram ranges, ddof, ...) for the merge to be exact, so
those settings come from STATS, and giving one of them on the command line (or
in a ``--config`` file) is an error rather than silently ignored.

An update holds the run lock of STATS (``.STATS.daskbatch-lock`` beside it)
from reading it to writing it back: a second update of the same summary fails
at once instead of losing the first one's rows. New rows that STATS already
holds (the same store, by content token) are refused before any compute.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import click

from daskbatch.io.outputs import check_separate
from daskbatch.runtime.runlock import summary_lock
from daskbatch.summary import load_summary

#: Options whose values come from STATS under --update (parameter name -> option).
FROM_SUMMARY = {
    "stats": "--stats", "bins": "--bins", "range_": "--range", "ddof": "--ddof", "nan_policy": "--nan-policy",
}

_GIVEN = (click.core.ParameterSource.COMMANDLINE, click.core.ParameterSource.ENVIRONMENT,
          click.core.ParameterSource.DEFAULT_MAP)


def update_settings(ctx: click.Context, stats_path: str, store: str) -> tuple[Any, dict[str, Any]]:
    """Open the summary at ``stats_path`` and find the describe arguments that continue it."""
    from daskbatch.incremental import describe_settings  # lazy: dask

    given = [option for name, option in FROM_SUMMARY.items() if ctx.get_parameter_source(name) in _GIVEN]
    if given:
        raise click.UsageError(
            f"{', '.join(given)} cannot be combined with --update: the new rows are described with "
            f"the settings of {stats_path}"
        )
    check_separate(stats_path, "--update", {"the input store": store})
    if os.path.exists(os.path.dirname(os.path.abspath(stats_path))):
        # Held from this read to the write of the merged summary (released when the command ends).
        ctx.with_resource(summary_lock(stats_path))
    previous = load_summary(stats_path)
    settings = describe_settings(previous)  # a summary without states is refused here, before any compute
    # The label is found as describe finds it (--label, else the one the store records): see needs_label.
    # The store's own names are checked against the summary's by the merge; the fan-in changes no setting.
    split_every = ctx.params["split_every"] if ctx.get_parameter_source("split_every") in _GIVEN else None
    settings["run"] = dataclasses.replace(settings["run"], feature_names=None,
                                          split_every=split_every or settings["run"].split_every)
    return previous, settings


def check_label(previous: Any, stats_path: str, dataset: Any) -> None:
    """Refuse new rows without a label (given or recorded by the store) when STATS holds labelled statistics."""
    from daskbatch.incremental import labelled_statistics  # lazy: dask

    labelled = labelled_statistics(previous)
    if labelled and dataset.label is None:
        raise click.UsageError(
            f"{stats_path} holds {' and '.join(labelled)}: give the new rows' --label "
            "(the store records none)"
        )
