"""What a :class:`~daskbatch.Summary` looks like in a notebook and a terminal, and what it says about numbers that may mislead."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from daskbatch import _common as _html
from daskbatch._common import plural as _count
from daskbatch.stats.classes import format_classes
from daskbatch.stats.ranges import OUT_OF_RANGE_LIMIT, SuspectValue, suspect_values
from daskbatch.stats.sketch_layout import collapse_floor, slot_bounds
from daskbatch.summary.views import (
    correlated_pairs,
    format_percent,
    mi_ranking,
    nonfinite_text,
    quantile_values,
    sketch_layout,
)

#: Fraction of the rows the complete-rows covariance may leave out before the summary says so.
DROPPED_ROWS_LIMIT = 0.10
#: How to ask for the pairwise covariance, in Python and on the command line.
PAIRWISE_OPTION = "stats=[..., db.stats.CoMoments(rows='pairwise')] (--cov pairwise)"
#: Names listed in one line before "and N more".
LISTED = 8


def covariance_message(summary: Any) -> str | None:
    """Say what the complete-rows covariance of ``summary`` left out, when that is much."""
    prov = summary.provenance
    if summary.cov_count is None or prov.get("cov_rows", "complete") != "complete" or not summary.n_features:
        return None
    # The rows the statistics saw: ``count`` (±inf included) and ``nan_count`` hold each of a feature's
    # values once (a row of weight 0 is not seen at all: the weighted complete rows are not short of it).
    count = np.asarray(summary.count, dtype=np.float64)
    rows, used = int(np.max(count + np.asarray(summary.nan_count))), int(summary.cov_count)
    finite = count - np.asarray(summary.posinf_count) - np.asarray(summary.neginf_count)
    empty = np.flatnonzero(finite == 0)
    if rows == 0 or (not empty.size and rows - used <= DROPPED_ROWS_LIMIT * rows):
        return None
    why = f"; no finite value in {_listed(summary.feature_names, empty)}" if empty.size else ""
    if empty.size == finite.size:  # no pair has a row either: no option would help
        remedy = "no feature has a finite value to correlate"
    else:
        remedy = f"{PAIRWISE_OPTION} uses each pair's own rows"
    return (
        f"covariance and correlation use only the {used:,} of {rows:,} rows finite in every feature "
        f"({(rows - used) / rows:.1%} left out{why}): {remedy}"
    )


def summary_suspect_values(summary: Any) -> tuple[SuspectValue, ...] | None:
    """Find the suspect values of ``summary`` from its quantile sketch, minima and maxima."""
    counts, spec = summary.sketch_counts, summary.provenance.get("sketch")
    if counts is None or not isinstance(spec, dict) or np.ndim(counts) != 2:
        return None
    layout = sketch_layout(spec)
    first, width = int(spec["first_slot"]), counts.shape[1]
    if width == 0:  # no finite value in any feature (an all-NaN store): no pile to judge
        return ()
    lower, upper = slot_bounds(layout)
    edges = np.concatenate([lower[first : first + width], upper[first + width - 1 : first + width]])
    slots = np.arange(first, first + width, dtype=np.int64)[None, :]
    # Only which buckets hold anything decides a collapse: weighted counts (floats, up to 2**1000) need no cast.
    floor = collapse_floor((np.asarray(counts) > 0).astype(np.int64), slots, layout)  # (D, 2): 0 where not collapsed
    extremes = np.stack([np.asarray(summary.min), np.asarray(summary.max)], axis=1)
    magnitude = np.abs(extremes)
    beyond_floor = magnitude > np.where(extremes < 0, floor[:, :1], floor[:, 1:])
    judged = (magnitude < layout.max_magnitude) & ((extremes == 0) | beyond_floor)
    return suspect_values(summary.feature_names, counts, edges, summary.min, summary.max, judged)


def suspect_message(found: tuple[SuspectValue, ...]) -> str | None:
    """Name the suspect values in one line."""
    if not found:
        return None
    listed = "; ".join(f"{s.feature} {s.describe()}" for s in found[:LISTED])
    more = f"; and {len(found) - LISTED:,} more" if len(found) > LISTED else ""
    return (
        f"{len(found):,} value{'' if len(found) == 1 else 's'} repeated far more often than "
        f"{'its' if len(found) == 1 else 'their'} neighbours at the edge of a feature (a code for "
        f"missing values, or a floor or ceiling of the measurement?), counted as data: {listed}{more} "
        "(summary.suspect_values)"
    )


#: Fraction of NaN values above which a feature is flagged.
NAN_HEAVY = 0.05
#: Features shown by the HTML and the text repr.
HTML_ROWS = 50
TEXT_ROWS = 20
#: How a Python user shows every feature (the command line names its own option instead).
SHOW_ALL = ".to_dataframe()"
#: Significant digits of each value of a float column.
DIGITS = 4
#: Most decimals written in positional notation.
MAX_DECIMALS = 8
#: Count columns that are left out when they are zero for every feature.
ZERO_HIDDEN = ("nan_count", "posinf_count", "neginf_count")


def format_column(values: np.ndarray, *, integer: bool = False) -> list[str]:
    """Format one column, every value with the same number of significant digits."""
    raw = np.asarray(values)
    if raw.dtype.kind in "iu":  # exact integers (the extremes of int64 features): every digit
        return [f"{x:,}" for x in raw.tolist()]
    v = np.asarray(raw, dtype=np.float64)
    if integer:
        return [f"{int(round(x)):,}" if np.isfinite(x) else nonfinite_text(x) for x in v]
    finite = np.abs(v[np.isfinite(v)])
    big = float(finite.max()) if finite.size else 0.0
    if big != 0.0 and (big < 1e-4 or big >= 1e15):
        return [f"{x:.{DIGITS - 1}e}" if np.isfinite(x) else nonfinite_text(x) for x in v]
    out = []
    for x in v:
        if not np.isfinite(x):
            out.append(nonfinite_text(x))
            continue
        decimals = 0 if x == 0 else min(max(DIGITS - 1 - math.floor(math.log10(abs(x))), 0), MAX_DECIMALS)
        text = f"{x:,.{decimals}f}"
        if decimals and abs(float(text.replace(",", ""))) >= 10 ** (DIGITS - decimals):
            # rounding carried into a new power of ten (999.97 -> 1,000.0): one decimal fewer keeps DIGITS
            text = f"{x:,.{decimals - 1}f}"
        out.append("0" if float(text.replace(",", "")) == 0.0 else text)
    return out


@dataclass(frozen=True)
class FeatureFlags:
    """Indices of the features worth a second look (see the module docstring)."""

    constant: np.ndarray
    out_of_range: np.ndarray
    nan_heavy: np.ndarray
    out_fraction: np.ndarray | None
    nan_fraction: np.ndarray
    suspect: dict[int, str] = field(default_factory=dict)  # feature index -> its suspect values, for its note
    trust: tuple[str, ...] = ()  # the summary's lines from covariance_message, suspect_message

    def notes(self, i: int) -> list[str]:
        """Note what is special about feature ``i``."""
        notes = []
        if i in self.constant:
            notes.append("constant")
        if i in self.out_of_range and self.out_fraction is not None:
            notes.append(f"{format_percent(float(self.out_fraction[i]))} outside range")
        if i in self.nan_heavy:
            notes.append(f"{format_percent(float(self.nan_fraction[i]))} NaN")
        if i in self.suspect:
            notes.append(self.suspect[i])
        return notes

    def messages(self, names: Sequence[str]) -> list[str]:
        """Write one plain-text line per kind of warning, naming the features."""
        lines = []
        if self.constant.size:
            lines.append(f"{_count(self.constant.size, 'constant feature')} (std 0): {_listed(names, self.constant)}")
        if self.out_of_range.size:
            frac = self.out_fraction
            lines.append(
                f"{_count(self.out_of_range.size, 'feature')} with more than {OUT_OF_RANGE_LIMIT:.0%} of the "
                "values outside the histogram range: "
                + _listed(names, self.out_of_range, None if frac is None else [format_percent(float(f)) for f in frac])
                + " (describe(..., range='minmax') covers every value)"
            )
        if self.nan_heavy.size:
            lines.append(
                f"{_count(self.nan_heavy.size, 'feature')} with more than {NAN_HEAVY:.0%} NaN: "
                + _listed(names, self.nan_heavy, [format_percent(float(f)) for f in self.nan_fraction])
            )
        lines.extend(self.trust)
        return lines


def _listed(names: Sequence[str], index: np.ndarray, extra: Sequence[str] | None = None) -> str:
    """Name the features ``index`` (each with its ``extra``): :data:`LISTED` of them, then how many more."""
    shown = [names[i] + (f" ({extra[i]})" if extra is not None else "") for i in index[:LISTED]]
    more = f" and {index.size - LISTED:,} more" if index.size > LISTED else ""
    return ", ".join(shown) + more


def _feature_flags(summary: Any) -> FeatureFlags:
    """Flag the constant, mostly-outside-the-range and NaN-heavy features of ``summary``."""
    std = np.asarray(summary.std, dtype=np.float64)
    constant = np.flatnonzero(np.isfinite(std) & (std == 0))
    fraction = summary.out_of_range_fraction
    out = np.zeros(summary.n_features, dtype=bool)
    if fraction is not None:
        out |= np.asarray(fraction) > OUT_OF_RANGE_LIMIT
    flagged = set(summary.provenance.get("out_of_range") or ())  # what describe warned about
    out |= np.array([n in flagged for n in summary.feature_names], dtype=bool)
    nan = np.asarray(summary.nan_count, dtype=np.float64)
    total = np.asarray(summary.count, dtype=np.float64) + nan
    nan_fraction = nan / np.where(total > 0, total, 1.0)
    found = summary.suspect_values or ()
    index = {name: i for i, name in enumerate(summary.feature_names)}
    suspect: dict[int, str] = {}
    for value in found:
        i = index[value.feature]
        suspect[i] = f"{suspect[i]}, " if i in suspect else ""
        suspect[i] += f"{value.value:g} repeated?"
    trust = tuple(m for m in (covariance_message(summary), suspect_message(found)) if m is not None)
    return FeatureFlags(
        suspect=suspect,
        trust=trust,
        constant=constant,
        out_of_range=np.flatnonzero(out),
        nan_heavy=np.flatnonzero(nan_fraction > NAN_HEAVY),
        out_fraction=None if fraction is None else np.asarray(fraction, dtype=np.float64),
        nan_fraction=nan_fraction,
    )


#: The columns in the order shown, each the summary's attribute of its name; var is left out (std²).
#: Quantiles are titled as pandas' ``describe`` titles them.
COLUMNS = ("count", "nan_count", "posinf_count", "neginf_count", "mean", "std", "min", "25%", "50%", "75%", "max",
           "skew", "kurtosis", "mi")
#: The quantiles among the columns, by probability; the counts, written as integers.
TABLE_QUANTILES = {"25%": 0.25, "50%": 0.5, "75%": 0.75}
INTEGER_COLUMNS = ("count", *ZERO_HIDDEN)


@dataclass(frozen=True)
class Table:
    """Formatted cells of the first ``rows`` features."""

    columns: list[str]
    cells: list[list[str]]  # one list per column
    hidden: list[str]
    shown: int


def _build_table(summary: Any, rows: int) -> Table:
    """Format the columns of the first ``rows`` features; all-zero count columns left out."""
    shown = min(rows, summary.n_features)
    values = {c: np.asarray(v) for c in COLUMNS if c not in TABLE_QUANTILES and (v := getattr(summary, c)) is not None}
    if summary.hist_counts is not None or summary.sketch_counts is not None:
        table = quantile_values(summary.arrays, list(TABLE_QUANTILES.values()), "auto")[0]  # no pandas for a table
        values.update(zip(TABLE_QUANTILES, table.T, strict=True))
    hidden = [c for c in ZERO_HIDDEN if c in values and not np.any(values[c])]
    columns = [c for c in COLUMNS if c in values and c not in hidden]
    # Formats come from the shown rows: they are what the reader compares.
    cells = [format_column(values[c][:shown], integer=c in INTEGER_COLUMNS) for c in columns]
    return Table(columns=columns, cells=cells, hidden=hidden, shown=shown)


def correlation_rows(summary: Any) -> str:
    """Say which rows the correlations of ``summary`` used, for the titles of its top pairs."""
    if summary.cov_count is None:
        return ""
    if summary.provenance.get("cov_rows") == "pairwise":
        fewest = f", at least {summary.cov_count:,}" if summary.cov_count else ""  # 0: a feature without values
        return f"pairwise: each pair's own rows{fewest}"
    return f"{summary.cov_count:,} complete rows"


def pairs_table(top: Any) -> str:
    """The HTML table of ``top_correlated``'s pairs."""
    rows = [(f"{a} ~ {b}", [f"{r:+.3f}"], ["num"], "") for a, b, r in top.itertuples(index=False)]
    return _html.table("pair", ["Pearson r"], rows)


def mi_table(top: Any, title: str) -> str:
    """The HTML table of ``top_mi``'s features, their MI in the column ``title``."""
    rows = [(str(n), [v], ["num"], "") for n, v in zip(top.index, format_column(top.to_numpy()), strict=True)]
    return _html.table("feature", [title], rows)


def _header(summary: Any) -> str:
    rows = int(summary.provenance.get("rows", 0))
    return f"{rows:,} rows × {summary.n_features:,} features"


def _details(summary: Any) -> list[str]:
    prov = summary.provenance
    parts = []
    if prov.get("dtype") and summary.n_features:  # no numeric feature: no numeric dtype to name
        parts.append(str(prov["dtype"]))
    if prov.get("source"):
        parts.append(f"source: {prov['source']}")
    if prov.get("stats"):
        parts.append("statistics: " + ", ".join(map(str, prov["stats"])))
    if prov.get("passes"):
        parts.append(f"{prov['passes']} pass{'es' if prov['passes'] != 1 else ''}")
    return parts


def _absent_chunks_line(provenance: dict[str, Any]) -> str | None:
    """The one line on chunks absent from the store: how many, what they were read as, what refuses them."""
    absent = int(provenance.get("absent_chunks") or 0)
    if not absent:
        return None
    chunks = f"{absent:,} chunk{'s' if absent != 1 else ''} absent from the store"
    lost = int(provenance.get("absent_lost_chunks") or 0)
    lost_note = f", {lost:,} of them lost (daskbatch wrote every chunk)" if lost else ""
    skipped = int(provenance.get("rows_skipped") or 0)
    if skipped:
        return f"{chunks}{lost_note}: their {skipped:,} rows left out (missing='skip', --missing skip)"
    read_as = provenance.get("absent_read_as")
    value = f" ({read_as})" if read_as else ""
    # The option that refuses them; never one that changes the answer silently.
    return (
        f"{chunks}{lost_note}, read as their fill value{value} as zarr reads them; "
        "missing='raise' (--missing raise) refuses them"
    )


def _categorical_rows(summary: Any) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """Titles and (column, cells) rows of the non-numeric columns' section (no rows without them)."""
    frame = summary.categorical
    titles = ["dtype", "count", "nulls", "distinct", "top (count)", "min", "max"]
    rows = []
    for name, r in ([] if frame is None else frame.iterrows()):
        distinct = f"{'~' if r['distinct_error'] else ''}{r['distinct']:,}"
        stands_out = r["top_count"] > r["top_error"]  # else pruning may have taken as much as it counts
        top = f"{str(r['top'])[:24]} ({r['top_count']:,})" if stands_out else ""
        ends = ["" if r[k] is None else str(r[k]) for k in ("min", "max")]  # None: not a datetime
        rows.append((str(name), [str(r["dtype"]), f"{r['count']:,}", f"{r['null_count']:,}", distinct, top, *ends]))
    return titles, rows


def _provenance_rows(provenance: dict[str, Any]) -> list[tuple[str, str]]:
    rows = []
    for key, value in provenance.items():
        if key == "categorical":  # its own section
            continue
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        rows.append((str(key), text if len(text) <= 200 else text[:197] + "..."))
    return rows


def summary_html(summary: Any, *, rows: int = HTML_ROWS) -> str:
    """Render the notebook view of a summary (``Summary._repr_html_``)."""
    summary = summary.arrays  # the table reads the statistics by position (a Summary or its arrays)
    flags = _feature_flags(summary)
    table = _build_table(summary, rows)
    names = summary.feature_names
    notes = [flags.notes(r) for r in range(table.shown)]
    noted = any(notes)  # the notes column only when a shown row has a note: an empty column says nothing
    warned = {"std": flags.constant, "nan_count": flags.nan_heavy}  # the cells a note is about
    body_rows = []
    for r in range(table.shown):
        cells = [col[r] for col in table.cells] + (["; ".join(notes[r])] if noted else [])
        classes = ["num" + (" db-warn" if r in warned.get(c, ()) else "") for c in table.columns]
        classes += ["txt"] if noted else []
        body_rows.append((names[r], cells, classes, "db-warn" if notes[r] else ""))
    parts = [_html.warning_list(_html.escape(m) for m in flags.messages(names))]
    parts.append(_html.table("feature", [*table.columns, *(["notes"] if noted else [])], body_rows))
    foot = _footer(summary, table)
    if foot:
        parts.append("<div class='db-muted'>" + "; ".join(_html.escape(f) for f in foot) + "</div>")
    if summary.corr is not None:  # a tiled covariance would need a pass over its store: not in a repr
        top = summary.top_correlated(5)
        if len(top):
            rows_note = f" ({correlation_rows(summary)})" if summary.cov_count is not None else ""
            parts.append(_html.details(f"Top correlated pairs{rows_note}", pairs_table(top), open=True))
    if summary.mi is not None:
        units = summary.provenance.get("mi_units", "nats")
        parts.append(_html.details(f"Top features by mutual information with the label ({units})",
                                   mi_table(summary.top_mi(5), "mi"), open=True))
    titles, categorical = _categorical_rows(summary)
    if categorical:  # "~": a HyperLogLog estimate (summary.categorical has its error and the top values)
        table_rows = [(n, cells, ["txt", *["num"] * 3, "txt", "txt", "txt"], "") for n, cells in categorical]
        parts.append(_html.details("Non-numeric columns", _html.table("column", titles, table_rows), open=True))
    parts.append(_html.details("provenance", _html.key_value_table(_provenance_rows(summary.provenance))))
    subtitle = _html.escape(" · ".join(_details(summary)))
    return _html.repr_block(f"daskbatch.Summary: {_html.escape(_header(summary))}", *parts, subtitle=subtitle)


def summary_text(summary: Any, *, rows: int = TEXT_ROWS, show_all: str = SHOW_ALL) -> str:
    """Render the terminal view of a summary (``Summary.__repr__``); its first line is the header alone."""
    summary = summary.arrays  # the table reads the statistics by position (a Summary or its arrays)
    flags = _feature_flags(summary)
    table = _build_table(summary, rows)
    names = [str(n) for n in summary.feature_names[: table.shown]]
    notes = ["; ".join(flags.notes(r)) for r in range(table.shown)]
    columns = [("feature", names, "<"), *((c, cells, ">") for c, cells in zip(table.columns, table.cells, strict=True))]
    if any(notes):
        columns.append(("notes", notes, "<"))
    widths = [max(len(title), *(len(v) for v in cells)) if cells else len(title) for title, cells, _ in columns]
    lines = [f"<daskbatch.Summary: {_header(summary)}>"]
    extra = _details(summary)
    if extra:
        lines.append("  " + " · ".join(extra))
    lines.extend(f"! {m}" for m in flags.messages(summary.feature_names))
    if summary.n_features:  # a table of text columns only has no numeric table to head
        lines.append("  ".join(f"{t:{a}{w}}" for (t, _, a), w in zip(columns, widths, strict=True)).rstrip())
    for r in range(table.shown):
        lines.append(
            "  ".join(f"{cells[r]:{a}{w}}" for (_, cells, a), w in zip(columns, widths, strict=True)).rstrip()
        )
    lines.extend(_footer(summary, table, show_all))
    titles, categorical = _categorical_rows(summary)
    if categorical:  # a short section: one line a column ("~": an estimate; .categorical has the rest)
        lines.append("non-numeric columns: " + ", ".join(titles[:5]) + ", min to max")
        for name, cells in categorical[:rows]:
            span = [f"{cells[5]} to {cells[6]}"] if cells[5] else []
            lines.append(f"  {name}: " + " · ".join(c for c in [*cells[:5], *span] if c))
    return "\n".join(lines)


def _footer(summary: Any, table: Any, show_all: str = SHOW_ALL) -> list[str]:
    """The lines under the table of both views: features not shown, and chunks absent from the input."""
    foot = []
    if table.shown < summary.n_features:
        foot.append(f"showing {table.shown} of {summary.n_features:,} features (all of them: {show_all})")
    if table.hidden:
        foot.append("zero for every feature, not shown: " + ", ".join(table.hidden))
    absent = _absent_chunks_line(summary.provenance)
    return [*foot, absent] if absent else foot


def format_report(summary: Any, *, k: int = 10, rows: int = TEXT_ROWS, show_all: str = SHOW_ALL) -> str:
    """Write the report printed by ``describe`` and ``demo``: the table, then the top ``k`` correlated pairs and features by MI."""
    summary = summary.arrays  # the table and the lists read the statistics by position
    lines = [summary_text(summary, rows=rows, show_all=show_all)]
    pairs = correlated_pairs(summary, k)  # lists, not pandas: the CLI prints this and need not import it
    if pairs:
        rows_note = f", {correlation_rows(summary)}" if summary.cov_count is not None else ""
        lines.append(f"\nTop {len(pairs)} correlated pairs (Pearson r{rows_note}):")
        width_a = max(len(str(a)) for a, _, _ in pairs)
        width_b = max(len(str(b)) for _, b, _ in pairs)
        lines.extend(f"  {a:>{width_a}} ~ {b:<{width_b}}  r = {r:+.4f}" for a, b, r in pairs)
    ranked = mi_ranking(summary, k)
    if ranked:
        units = summary.provenance.get("mi_units", "nats")
        classes = getattr(summary, "classes", None)
        grouped = summary.groups is not None
        if classes is not None:
            units += f"; {len(classes)} {'groups' if grouped else 'classes'} {format_classes(classes.tolist())}"
        target = "the group key" if grouped else "the label"
        lines.append(f"\nTop {len(ranked)} features by mutual information with {target} ({units}):")
        width = max(len(str(name)) for name, _ in ranked)
        values = format_column(np.array([mi for _, mi in ranked], dtype=np.float64))
        lines.extend(f"  {name:>{width}}  {value}" for (name, _), value in zip(ranked, values, strict=True))
    return "\n".join(lines)
