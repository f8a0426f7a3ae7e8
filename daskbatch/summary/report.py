"""The plain-text report of a :class:`~daskbatch.Summary` that ``describe`` and ``demo`` print."""

from __future__ import annotations

from typing import Any

from daskbatch.stats.classes import format_classes
from daskbatch.summary.reprs import correlation_rows, format_column, summary_text


def format_report(summary: Any, *, top: int = 10, max_features: int = 20) -> str:
    """Write the human-readable report printed by ``describe`` and ``demo``."""
    lines = [summary_text(summary, rows=max_features)]
    pairs = summary.top_correlated(top)
    if len(pairs):
        rows = f", {correlation_rows(summary)}" if summary.cov_count is not None else ""
        lines.append(f"\nTop {len(pairs)} correlated pairs (Pearson r{rows}):")
        width = max(len(str(a)) for a in pairs["feature_a"])
        lines.extend(f"  {a:>{width}} ~ {b}  r = {r:+.4f}" for a, b, r in pairs.itertuples(index=False))
    ranked = summary.top_mi(top)
    if len(ranked):
        units = summary.provenance.get("mi_units", "nats")
        classes = getattr(summary, "classes", None)
        grouped = summary.groups is not None
        if classes is not None:
            units += f"; {len(classes)} {'groups' if grouped else 'classes'} {format_classes(classes.tolist())}"
        target = "the group key" if grouped else "the label"
        lines.append(f"\nTop {len(ranked)} features by mutual information with {target} ({units}):")
        width = max(len(str(n)) for n in ranked.index)
        values = format_column(ranked.to_numpy())
        lines.extend(f"  {name:>{width}}  {value}" for name, value in zip(ranked.index, values, strict=True))
    return "\n".join(lines)
