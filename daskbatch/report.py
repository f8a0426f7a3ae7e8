"""The plain-text report of a :class:`~daskbatch.Summary` that ``describe`` and ``demo`` print."""

from __future__ import annotations


def format_report(summary: object, *, top: int = 10, max_features: int = 20) -> str:
    """Write the human-readable report printed by ``describe`` and ``demo``.

    Parameters
    ----------
    summary : Summary
        A summary.
    top : int, default 10
        Pairs and features listed as the most correlated and informative.
    max_features : int, default 20
        Features in the table.

    Returns
    -------
    str
        The report.
    """
    import pandas as pd

    table = summary.to_dataframe()  # type: ignore[attr-defined]
    columns = [c for c in ("count", "nan_count", "mean", "std", "min", "max", "skew", "kurtosis", "mi") if c in table]
    lines = [repr(summary).splitlines()[0]]
    with pd.option_context("display.width", 160, "display.max_columns", 20):
        lines.append(table[columns].head(max_features).to_string(float_format=lambda v: f"{v:.5g}"))
    if len(table) > max_features:
        lines.append(f"... and {len(table) - max_features} more features")
    pairs = summary.top_correlated(top)  # type: ignore[attr-defined]
    if len(pairs):
        lines.append(f"\nTop {len(pairs)} correlated pairs (Pearson r, {summary.cov_count:,} complete rows):")  # type: ignore[attr-defined]
        lines.extend(f"  {a:>12} ~ {b:<12} r = {r:+.4f}" for a, b, r in pairs.itertuples(index=False))
    ranked = summary.top_mi(top)  # type: ignore[attr-defined]
    if len(ranked):
        units = summary.provenance.get("mi_units", "nats")  # type: ignore[attr-defined]
        classes = getattr(summary, "classes", None)
        if classes is not None:
            from daskbatch.stats.classes import format_classes

            units += f"; {len(classes)} classes {format_classes(classes.tolist())}"
        lines.append(f"\nTop {len(ranked)} features by mutual information with the label ({units}):")
        lines.extend(f"  {name:>12}  {value:.5f}" for name, value in ranked.items())
    return "\n".join(lines)
