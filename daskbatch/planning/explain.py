"""The words and numbers of :meth:`daskbatch.planning.search.Plan.explain` (what ``daskbatch plan`` prints)."""

from __future__ import annotations

import math
from typing import Any

from daskbatch.planning.memory import chunk_task_terms, merge_terms, stat_name, state_bytes
from daskbatch.planning.resources import format_bytes
from daskbatch.planning.search import Plan, budget_formula

__all__ = ["explain_plan", "plan_rows"]


def explain_plan(p: Plan) -> str:
    """Write the text of :meth:`Plan.explain`: every term of the budget, the chunk and merge tasks, the tiles.

    Parameters
    ----------
    p : Plan
        The plan.

    Returns
    -------
    str
        The text.
    """
    title, rows = plan_rows(p)
    return "\n".join([title, *(f"  {k}: {v}" if k else f"  {v}" for k, v in rows)])


def plan_rows(p: Plan) -> tuple[str, list[tuple[str, str]]]:
    """Build the title line and the (term, words and numbers) rows of :meth:`Plan.explain`.

    A row whose term is empty is a sentence of its own.

    Parameters
    ----------
    p : Plan
        The plan.

    Returns
    -------
    title : str
        The title line.
    rows : list of tuple of str
        ``(term, text)`` rows.
    """
    n_rows, d = p.shape
    kw: dict[str, Any] = {"bins": p.bins, "n_classes": p.n_classes}
    dtype = p.dtype or f"{p.itemsize}-byte-element"
    stat_text = ", ".join(stat_name(s) for s in p.stats)
    if {"hist", "mi"} & set(p.stats):
        stat_text += f" ({p.bins} bins" + (f", {p.n_classes} classes)" if "mi" in p.stats else ")")
    fits = "<=" if p.task_bytes <= p.budget_bytes else ">"
    title = (
        f"Plan for a {n_rows:,} x {d:,} {dtype} array (storage chunks "
        f"{p.storage_chunks[0]:,} x {p.storage_chunks[1]:,}); statistics: {stat_text}"
    )
    lines: list[tuple[str, str]] = [
        ("resources", f"{p.resources.describe()}; kernels: "
         + {"compiled": "compiled CPU (numba)", "gpu-compiled": "compiled GPU (numba-cuda)"}.get(p.kernel_path, "array API")),
        ("budget per task", f"{budget_formula(p.resources, p.memory_fraction, p.reserved_bytes)}"
         f" = {format_bytes(p.budget_bytes)}"),
    ]
    if p.chunk_rows:
        per_storage = p.chunk_rows / min(p.storage_chunks[0], n_rows)
        lines.append((
            "chunk", f"{p.chunk_rows:,} rows ({_plural(per_storage, 'storage chunk')}) x {d:,} features = "
            f"{format_bytes(p.chunk_rows * d * p.itemsize)} of input; limited by {p.limited_by}"
        ))
    terms = chunk_task_terms(
        p.chunk_rows, d, p.itemsize, p.stats, feature_tile=p.feature_tile, path=p.kernel_path,
        device_bytes=p.resources.device_memory_bytes, **kw
    )
    lines.append((
        "chunk task",
        " + ".join(f"{format_bytes(v)} {k}" for k, v in terms.items() if v)
        + f" = {format_bytes(p.chunk_task_bytes)}",
    ))
    per_state = ", ".join(
        f"{stat_name(s)} {format_bytes(state_bytes(s, d, feature_tile=p.feature_tile, **kw))}" for s in p.stats
    )
    lines.append(("states", f"{per_state} (together {format_bytes(p.states_bytes)})"))
    mterms = merge_terms(p.stats, d, p.split_every, feature_tile=p.feature_tile, **kw)
    lines.append((
        f"merge task ({p.split_every} states in)",
        " + ".join(f"{format_bytes(v)} {k}" for k, v in mterms.items() if v)
        + f" = {format_bytes(p.merge_task_bytes)}",
    ))
    lines.append(("largest task", f"{format_bytes(p.task_bytes)} {fits} budget {format_bytes(p.budget_bytes)}"))
    threads = p.resources.total_threads
    lines.append((
        "",
        f"{_plural(p.n_chunks, 'chunk')} for {_plural(threads, 'thread')} "
        f"(aim: >= {2 * threads} when the data allow), split_every {p.split_every} -> "
        f"{p.n_tasks:,} tasks",
    ))
    if p.feature_tile:
        n_tiles = math.ceil(d / p.feature_tile)
        lines.append((
            f"co-moments in feature tiles of {p.feature_tile:,}",
            f"{n_tiles} x {n_tiles} tiles, {p.n_tile_pairs:,} tile pairs, each a reduction of its own",
        ))
    if p.resources.device == "gpu":
        lines.append((
            "RMM pool per GPU worker",
            f"{p.resources.threads_per_worker} x ({format_bytes(p.task_bytes)} "
            f"largest task + {format_bytes(p.reserved_bytes)} reserved), rounded up = "
            f"{format_bytes(p.rmm_pool_bytes)} (rmm_pool_size of cluster('cuda', plan=...))",
        ))
    lines.extend(("note", n) for n in p.notes)
    return title, lines


def _plural(n: float, word: str, plural: str | None = None) -> str:
    """``1 chunk``, ``2 chunks``, ``1,000 chunks``, ``2.5 storage chunks``."""
    text = f"{n:,}" if isinstance(n, int) else f"{n:,.4g}"
    return f"{text} {word if n == 1 else (plural or word + 's')}"
