"""A summary as one self-contained HTML report: overview, a section per feature, correlations, MI and drift."""

from __future__ import annotations

import json
import os
import re
import warnings
from importlib import resources
from typing import Any

import numpy as np

from daskbatch import _common as _html
from daskbatch.errors import RebinnedWarning
from daskbatch.io.outputs import (
    OutputExistsError,
    OutputTarget,
    check_output,
    output_kind,
    write_text,
)
from daskbatch.summary.compare import compare
from daskbatch.summary.dataset import DEFAULT_QUANTILES, quantile_label
from daskbatch.summary.reprs import (
    FeatureFlags,
    _absent_chunks_line,
    _build_table,
    _feature_flags,
    correlation_rows,
    format_column,
    mi_table,
    pairs_table,
)
from daskbatch.summary.views import json_values

#: The template's second line: what marks a file as a daskbatch report (replaced without asking).
REPORT_MARK = "<!-- daskbatch_output: report -->"
#: Features whose sections are drawn when the page opens; the others when picked in the index.
DRAWN_AT_OPEN = 50
#: Names listed by the index at once (the search narrows them).
INDEX_LIMIT = 300
#: Features of the correlation heat map: all of narrower data, else those of the strongest pairs.
HEATMAP_FEATURES = 60
#: Rows of the tables of top pairs, MI ranking and drift.
TOP_ROWS = 50
#: Most correlated partners listed in each feature's section.
PARTNERS = 5
#: Quantiles marked on each histogram.
MARKED = ("25%", "50%", "75%")
#: Significant digits of the numbers the page draws with.
DIGITS = 4


def report_target(path: str | os.PathLike[str], protected: dict[str, Any]) -> OutputTarget:
    """Check ``path`` for a report before anything is computed: new, or a report of ours (one-line error else)."""
    where = os.fspath(path)
    try:  # a file holding a report daskbatch wrote: its mark in the first bytes
        ours = output_kind(where) == "report"
    except (OSError, ValueError):
        ours = False
    exists = os.path.lexists(where) if "://" not in where else ours  # a URL: check_output checks it below
    if exists and not ours and not os.path.isdir(where):  # a directory: check_output names it
        raise OutputExistsError(
            f"report {where} already exists and is not a daskbatch report; daskbatch replaces only its own "
            "reports: choose another path or remove it yourself"
        )
    return check_output(where, kind="report", form="file", what="report", overwrite=ours, protected=protected)


def write_report(
    summary: Any,
    path: str | os.PathLike[str],
    *,
    reference: Any = None,
    title: str | None = None,
    protected: dict[str, Any] | None = None,
) -> str:
    """Write :func:`report_html` to ``path`` through the output guard (:meth:`Summary.to_html`); the path."""
    guarded = {"the summary's input store": summary.provenance.get("path"), **(protected or {})}
    target = report_target(path, guarded)  # before the work, and again by write_output before the rename
    return write_text(target, report_html(summary, reference=reference, title=title))


def report_html(summary: Any, *, reference: Any = None, title: str | None = None) -> str:
    """Render the report of ``summary`` (with the drift from ``reference`` when given) as one HTML page."""
    drift = None
    if reference is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RebinnedWarning)  # the drift section says it, with its error bound
            drift = compare(reference, summary)
    heading = title or f"daskbatch report: {summary.provenance.get('source') or 'summary'}"
    flags = _feature_flags(summary)  # once: finding suspect values reads every sketch
    corr = _correlations(summary)
    pairs = summary.top_correlated(max(TOP_ROWS, HEATMAP_FEATURES)) if corr is not None else None
    payload = _payload(summary, flags, reference, drift)
    if corr is not None and pairs is not None:
        index = _heatmap_features(summary, pairs)
        heat = np.asarray(corr[index][:, index], dtype=np.float64)
        payload.update(partners=_partners(corr), heatmap={"index": index, "r": _numbers(heat, 2)})
    sections = [("overview", "Overview", _overview(summary, flags))]
    if summary.n_features:
        sections.append(("features", "Features", _features_html(summary.n_features)))
    if pairs is not None:
        sections.append(("correlations", "Correlations", _correlation_html(summary, pairs)))
    if summary.arrays.mi is not None:
        units = summary.provenance.get("mi_units", "nats")
        sections.append(("mi", "Mutual information", mi_table(summary.top_mi(TOP_ROWS), f"mi ({units})")))
    if drift is not None:
        sections.append(("drift", "Drift", _drift_html(drift)))
    nav = "".join(f"<a href='#{key}'>{name}</a>" for key, name, _ in sections)
    body = "".join(f"<h2 id='{key}'>{name}</h2>{html}" for key, name, html in sections)
    # "</" inside the JSON (a feature named "</script>") would end the script element.
    data = json.dumps(payload, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    template = resources.files("daskbatch.summary").joinpath("report.html").read_text(encoding="utf-8")
    # One pass of substitutions: a placeholder spelled inside a name or title is left as it is.
    parts = {
        "__TITLE__": _html.escape(heading),
        "__STYLE__": _html.STYLE,
        "__NAV__": nav,
        "__BODY__": body,
        "__DATA__": data,
    }
    return re.sub("|".join(parts), lambda m: parts[m.group(0)], template)


def _numbers(values: Any, digits: int = DIGITS) -> list[Any]:
    """Values rounded to ``digits`` significant digits for the page; NaN as null, ±inf as strings."""
    flat = np.asarray(values, dtype=np.float64)
    return json_values(np.array([float(f"{v:.{digits}g}") for v in flat.ravel().tolist()]).reshape(flat.shape))


def _counts(values: np.ndarray) -> list[Any]:
    """Histogram counts for the page: exact integers, or rounded weights."""
    if np.all(np.mod(values, 1) == 0) and np.all(np.abs(values) < 2**53):
        return values.astype(np.int64).tolist()
    return _numbers(values)


def _payload(summary: Any, flags: FeatureFlags, reference: Any, drift: Any) -> dict[str, Any]:
    """The numbers the page's script draws from, per feature, as JSON-able lists."""
    table = _build_table(summary, summary.n_features)
    out: dict[str, Any] = {
        "names": [str(n) for n in summary.feature_names],
        "notes": ["; ".join(flags.notes(i)) for i in range(summary.n_features)],
        "columns": table.columns,
        "cells": [list(row) for row in zip(*table.cells, strict=True)] if table.cells else [[]] * summary.n_features,
        "drawn_at_open": DRAWN_AT_OPEN,
        "index_limit": INDEX_LIMIT,
    }
    counts, edges = summary.arrays.hist_counts, summary.arrays.hist_edges
    if counts is not None and edges is not None and summary.n_features:
        out["hist"] = {"range": _numbers(edges[:, [0, -1]], 8), "counts": _counts(counts)}
        ref = None if reference is None else reference.arrays
        if ref is not None and ref.hist_counts is not None and np.array_equal(ref.hist_edges, edges):
            out["reference_hist"] = _counts(ref.hist_counts)  # same bins (described like= it): drawn over
        joint, classes = summary.arrays.joint_counts, summary.arrays.classes
        if joint is not None and classes is not None and joint.shape[1] == counts.shape[1] + 2:
            kind = "group" if summary.provenance.get("grouped") else "class"
            out["class_hist"] = {
                "labels": [f"{kind} {c}" for c in classes.tolist()],
                "kind": kind,
                "counts": _counts(joint[:, 1:-1, :]),
            }
    if summary.n_features and (counts is not None or summary.arrays.sketch_counts is not None):
        values = summary.quantile(list(DEFAULT_QUANTILES)).to_numpy()
        out["quantiles"] = {
            "labels": [quantile_label(q) for q in DEFAULT_QUANTILES],
            "marked": list(MARKED),
            "values": _numbers(values, 8),
        }
    mi = summary.arrays.mi
    if mi is not None:
        order = np.argsort(-np.nan_to_num(mi.astype(np.float64), nan=-np.inf), kind="stable")
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(1, len(order) + 1)
        out["mi"] = {"values": _numbers(mi), "rank": rank.tolist(), "units": summary.provenance.get("mi_units", "nats")}
    if drift is not None:
        drifts = drift.to_dataframe()
        out["drift"] = {"columns": list(drifts.columns), "values": _numbers(drifts.to_numpy())}
    return out


def _correlations(summary: Any) -> Any:
    """The correlation matrix: in memory, or the tiled store's (dask, read by rows); None without one."""
    if summary.n_features < 2:
        return None
    corr = summary.arrays.corr
    if corr is None and summary.provenance.get("tiled_cov"):
        return summary.tiled_cov().corr  # too wide for memory: read a block of rows at a time
    return corr


def _partners(corr: Any) -> dict[str, list[Any]]:
    """Each feature's :data:`PARTNERS` most correlated others (by |r|), a block of rows at a time."""
    n, k = corr.shape[0], min(PARTNERS, corr.shape[0] - 1)
    # A tiled store is read a row of tiles at a time; in memory, blocks keep the copies small.
    step = max(int(corr.chunks[0][0]), 1) if hasattr(corr, "chunks") else 512
    index: list[Any] = []
    values: list[Any] = []
    for start in range(0, n, step):
        rows = np.asarray(corr[start : start + step], dtype=np.float64)
        block = np.abs(np.nan_to_num(rows, nan=0.0))
        block[np.arange(len(block)), np.arange(start, start + len(block))] = -1.0  # not itself
        top = np.argpartition(-block, k - 1, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(block, top, axis=1), axis=1, kind="stable")
        for row, picks in enumerate(np.take_along_axis(top, order, 1)):
            kept = [int(j) for j in picks if np.isfinite(rows[row, j])]
            index.append(kept)
            values.append(_numbers(rows[row, kept], 3))
    return {"index": index, "r": values}


def _heatmap_features(summary: Any, pairs: Any) -> list[int]:
    """The features of the heat map: every one up to :data:`HEATMAP_FEATURES`, else those of the strongest pairs."""
    if summary.n_features <= HEATMAP_FEATURES:
        return list(range(summary.n_features))
    position = {name: i for i, name in enumerate(summary.feature_names)}
    chosen: dict[int, None] = {}
    for a, b, _ in pairs.itertuples(index=False):
        for name in (a, b):
            if len(chosen) < HEATMAP_FEATURES:
                chosen[position[name]] = None
    return sorted(chosen) or list(range(HEATMAP_FEATURES))


def _overview(summary: Any, flags: FeatureFlags) -> str:
    """The overview: size, where from, the warnings the summary knows."""
    prov = summary.provenance
    rows = int(prov.get("rows", 0))
    facts = [("rows", f"{rows:,}"), ("features", f"{summary.n_features:,}")]
    dtype = prov.get("dtype")
    if dtype:
        size = rows * summary.n_features * np.dtype(dtype).itemsize
        facts.append(("data in memory", f"{_bytes(size)} as {dtype}"))
    facts += [(key, str(prov[key])) for key in ("source", "created") if prov.get(key)]
    if prov.get("stats"):
        facts.append(("statistics", ", ".join(map(str, prov["stats"]))))
    warnings = flags.messages(summary.feature_names)
    absent = _absent_chunks_line(prov)
    if absent:
        warnings.append(absent)
    listed = _html.warning_list(_html.escape(m) for m in warnings) or "<p class='db-muted'>no warnings</p>"
    return _html.key_value_table(facts) + listed


def _bytes(size: float) -> str:
    """``size`` bytes in binary units."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _features_html(n: int) -> str:
    """The index (searchable, drawn by the script) beside the feature sections."""
    return (
        "<div class='db-features'><div class='db-side'>"
        f"<input id='db-search' type='search' placeholder='search {n:,} features' aria-label='search features'>"
        "<label><input id='db-flagged' type='checkbox'> only those with notes</label>"
        "<div id='db-matches' class='db-muted'></div><ol id='db-index'></ol></div>"
        "<div id='db-sections'></div></div>"
    )


def _correlation_html(summary: Any, pairs: Any) -> str:
    """The heat map's holder (drawn by the script) and the top pairs."""
    shown = min(summary.n_features, HEATMAP_FEATURES)
    which = "every feature" if shown == summary.n_features else f"the {shown} features of the strongest pairs"
    top = pairs.head(TOP_ROWS)
    note = correlation_rows(summary)
    return (
        f"<div class='db-sub'>Pearson r of {which} (red positive, blue negative){'; ' + note if note else ''}</div>"
        "<div id='db-heatmap'></div>"
        + _html.details(f"Top {len(top)} correlated pairs", pairs_table(top), open=True)
    )


def _drift_html(drift: Any) -> str:
    """The features that drifted most (by PSI when there is one, else by mean shift)."""
    table = drift.to_dataframe()
    by = "psi" if "psi" in table.columns and table["psi"].notna().any() else "mean_shift"
    top = drift.top(TOP_ROWS, by)
    columns = list(top.columns)
    cells = [format_column(top[c].to_numpy()) for c in columns]
    rows = [(str(name), [col[r] for col in cells], ["num"] * len(columns), "") for r, name in enumerate(top.index)]
    head = f"{drift.rows[1]:,} rows against a reference of {drift.rows[0]:,}, ranked by {by}"
    missing = "" if drift.rebin_error is None else (
        "; the summaries have different histogram bins: one side's counts were read on the other's edges "
        f"(each cumulative share within {float(np.nanmax(drift.rebin_error)):.2g}, so PSI, JS and chi2 approximate); "
        "describe the new data with describe(..., run=db.RunOptions(like=reference)) to make them exact"
    )
    return f"<div class='db-sub'>{_html.escape(head + missing)}</div>" + _html.table("feature", columns, rows)
