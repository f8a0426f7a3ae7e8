"""What to compute: statistic objects from what a user asks for, and which of them a run computes.

:func:`configured` turns ``stats="moments,cov"`` or objects into statistics, reading the built-ins from
:data:`daskbatch.stats.registry.STATISTICS`; :func:`describe_statistics`, :func:`grouped_statistics`
and :func:`target_statistics` decide what a label, groups or a target add.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from daskbatch._common import strict_int
from daskbatch.config import STATISTIC_DEFAULTS
from daskbatch.stats import (
    ClassMoments,
    CoMoments,
    Histogram,
    Moments,
    MutualInformation,
)
from daskbatch.stats.declaration import Declaration
from daskbatch.stats.registry import (
    PLAIN_NAME,
    STATISTICS,
    is_statistic,
    named_statistic,
    registered,
)
from daskbatch.stats.target import TargetMoments, TargetSketch, checked_cuts

# class_moments is in the default so that db.select(db.describe(x, y)) has the inputs of its
# default score (ANOVA F); like mi it is computed only when there is a label.
DEFAULT_STATS = ("moments", "cov", "hist", "mi", "class_moments")
NAN_POLICIES = ("omit", "propagate", "raise")


MOMENTS, COV, HIST, MI, CLASS_MOMENTS, SKETCH = (
    STATISTICS[n] for n in ("moments", "cov", "hist", "mi", "class_moments", "sketch"))


def _built_in() -> dict[str, Declaration]:
    """The statistics users may name that the engine's passes build, by name (read from the one table)."""
    return {n: d for n, d in STATISTICS.items() if d.selectable and d.fused}


#: Default of every parameter a keyword shortcut fills (from daskbatch.yaml), and the statistics that carry it.
SHORTCUTS: dict[str, tuple[Any, tuple[type, ...]]] = {
    key: (STATISTIC_DEFAULTS.get(key), carriers) for key, carriers in {
        "ddof": (Moments, CoMoments, ClassMoments), "rows": (CoMoments,), "bias": (Moments,),
        "nan_policy": (Moments,), "bins": (Histogram, MutualInformation), "range": (Histogram, MutualInformation),
        "classes": (ClassMoments, MutualInformation), "base": (MutualInformation,),
        "miller_madow": (MutualInformation,), "target_bins": (MutualInformation,),
    }.items()
}


@dataclasses.dataclass(frozen=True)
class Configured:
    """The built-in statistics of one run with their parameters, and a user's own: what :func:`configured` builds."""

    wanted: tuple[Any, ...]
    user: tuple[Any, ...]
    moments: Moments
    cov: CoMoments
    histogram: Histogram
    mi: MutualInformation
    class_moments: ClassMoments

    @property
    def names(self) -> tuple[str, ...]:
        """Name the built-in statistics asked for (moments first)."""
        return tuple(s.name for s in self.wanted)


def configured(stats: Any, **shortcuts: Any) -> Configured:
    """Build the statistic objects of ``stats`` with their parameters: the one builder above ``stats/``."""
    names, objects = _split(stats)
    given: dict[type, Any] = {}
    for obj in (o for o in objects if type(o) in _BUILT_IN_TYPES):
        if type(obj) in given:
            raise ValueError(f"two {type(obj).__name__} statistics: give each built-in statistic once")
        given[type(obj)] = obj
    values = {key: _resolved(key, shortcuts.get(key), given) for key in SHORTCUTS}
    values["bins"] = strict_int(values["bins"], "bins", minimum=1)
    values["ddof"] = strict_int(values["ddof"], "ddof", minimum=0)
    if values["nan_policy"] not in NAN_POLICIES:
        raise ValueError(f"nan_policy must be one of {NAN_POLICIES}, got {values['nan_policy']!r}")
    if values["classes"] is not None:
        values["classes"] = tuple(int(c) for c in values["classes"])
    built: dict[str, Any] = {}
    for name, declared in _built_in().items():  # a statistic without shortcut parameters: as given, else default
        cls: Any = declared.statistic
        keys = [k for k, (_, carriers) in SHORTCUTS.items() if cls in carriers]
        built[name] = cls(**{k: values[k] for k in keys}) if keys else given.get(cls, cls())
    order = (MOMENTS.name,) + tuple(n for n in dict.fromkeys(names) if n != MOMENTS.name)
    return Configured(
        wanted=tuple(built[n] for n in order),
        user=tuple(o for o in objects if type(o) not in _BUILT_IN_TYPES),
        moments=built["moments"], cov=built["cov"], histogram=built["hist"], mi=built["mi"],
        class_moments=built["class_moments"],
    )


def _resolved(key: str, shortcut: Any, given: dict[type, Any]) -> Any:
    """The one value of parameter ``key``: the keyword's or the objects' (those that differ from the default)."""
    default, carriers = SHORTCUTS[key]
    said = [(f"{cls.__name__}({key}={v!r})", v) for cls in carriers if cls in given
            and not _same(v := _field(given[cls], key), default)]
    if shortcut is not None:
        said.insert(0, (f"{key}={shortcut!r}", shortcut))
    for where, value in said[1:]:
        if not _same(value, said[0][1]):
            raise ValueError(f"{said[0][0]} contradicts {where}: give {key} once")
    return said[0][1] if said else default


def _field(obj: Any, key: str) -> Any:
    """A configured field of a built-in statistic (a histogram's ``lo``/``hi`` stand for its ``range``)."""
    if key == "range" and isinstance(obj, Histogram) and obj.range is None and obj.lo:
        return np.stack([obj.lo, obj.hi], axis=1)
    return getattr(obj, key)


def _same(a: Any, b: Any) -> bool:
    """Whether two parameter values are the same (ranges and class values compared as arrays)."""
    if a is None or b is None or isinstance(a, str) or isinstance(b, str):
        return a is b or (type(a) is type(b) and a == b)
    try:
        return bool(np.array_equal(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)))
    except (TypeError, ValueError):
        return bool(a == b)


def requested(stats: Any) -> tuple[Declaration, ...]:
    """Turn the built-in statistic names among ``stats`` into what they declare (moments first)."""
    return tuple(STATISTICS[n] for n in normalize_stats(stats))


def names_of(wanted: Sequence[Declaration]) -> tuple[str, ...]:
    """List the names of ``wanted`` (for the planner and the provenance)."""
    return tuple(r.name for r in wanted)


def counts_histograms(wanted: Sequence[Declaration]) -> bool:
    """Tell whether any of ``wanted`` counts into bins (needs ranges)."""
    return any(r.needs_ranges for r in wanted)


def ranks_by_sketch(wanted: Sequence[Declaration]) -> bool:
    """Tell whether any of ``wanted`` is built from the first pass's sketch (``spearman``)."""
    return any(r.needs_sketch for r in wanted)


def counts_by_label(wanted: Sequence[Declaration]) -> bool:
    """Tell whether the histograms of ``wanted`` are counted per class of the label."""
    return any(r.by_label for r in wanted)


def normalize_stats(stats: Any) -> tuple[str, ...]:
    """Validate statistic names (``"moments"`` is always computed and listed first)."""
    names, _ = _split(stats)
    return (MOMENTS.name,) + tuple(n for n in dict.fromkeys(names) if n != MOMENTS.name)


#: The classes of the built-in statistics the passes build: an object of one is configured, not a user's statistic.
_BUILT_IN_TYPES = frozenset(d.statistic for d in _built_in().values())


def statistic_items(stats: Any) -> tuple[Any, ...]:
    """Split ``stats`` into its items: one name, comma string or statistic, or a sequence of them."""
    if isinstance(stats, str) or is_statistic(stats) or type(stats) in _BUILT_IN_TYPES:
        return (stats,)
    return tuple(stats)


def _split(stats: Any) -> tuple[list[str], list[Any]]:
    """The built-in names among ``stats``, and the user's statistics (objects, or built from their names)."""
    names: list[str] = []
    objects: list[Any] = []
    if isinstance(stats, Configured):
        return list(stats.names), list(stats.user)
    for part in statistic_items(stats):
        if type(part) in _BUILT_IN_TYPES:  # a built-in statistic with its parameters
            if isinstance(part, Histogram) and part.by_label:
                raise ValueError("a Histogram by label is what MutualInformation counts: give MutualInformation(...)")
            names.append(part.name)
        if not isinstance(part, str):
            objects.append(part)
            continue
        for name in (n.strip() for n in part.split(",")):
            declared = STATISTICS.get(name)
            if declared is not None and declared.selectable and declared.fused:
                names.append(name)
            elif declared is not None and declared.selectable and declared.statistic is not None:
                objects.append(declared.statistic())  # a declared statistic the first pass runs as given
            elif name:
                objects.append(named_statistic(name))
    return names, objects


def check_statistic_names(names: str | Sequence[str]) -> None:
    """Check that every name is a built-in or a registered statistic, loading none of them."""
    for part in statistic_items(names):
        for name in (n.strip() for n in str(part).split(",")):
            if name and not (name in STATISTICS and STATISTICS[name].selectable):
                registered(name)


def user_statistics(stats: Any) -> tuple[Any, ...]:
    """Pick the statistic objects among ``stats`` (a user's own), checked against the protocol."""
    found: list[Any] = []
    for obj in _split(stats)[1]:
        if type(obj) in _BUILT_IN_TYPES:
            continue
        if not is_statistic(obj):
            raise TypeError(
                f"{obj!r} is neither a statistic name nor a statistic: it needs a str 'name' and "
                "chunk(x, label=None), merge(a, b) and finalize(state) methods"
            )
        declared = STATISTICS.get(obj.name)
        if not PLAIN_NAME.fullmatch(obj.name) or (declared is not None and type(obj) is not declared.statistic):
            raise ValueError(
                f"statistic name {obj.name!r} must be a plain name ([A-Za-z][A-Za-z0-9_]*) "
                f"other than the built-in {sorted(n for n, d in STATISTICS.items() if d.selectable)}"
            )
        if obj.name in {s.name for s in found}:
            raise ValueError(f"two statistics are named {obj.name!r}")
        found.append(obj)
    return tuple(found)


def describe_statistics(stats: Any, *, labelled: bool, range_: Any = None) -> tuple[Declaration, ...]:
    """What :func:`daskbatch.describe` computes for ``stats``: without the label's statistics when there is none."""
    wanted = requested(stats)
    if not labelled:
        refused = [r.name for r in wanted if r.needs_class_label]
        if refused and not _the_default(wanted):
            raise ValueError(f"statistic {refused[0]!r} needs a label (describe(x, label, ...))")
        wanted = tuple(r for r in wanted if not r.needs_label)
    # The sketch finds the histograms' ranges, and the ranks of the statistics that need them.
    if (range_ is None and counts_histograms(wanted) or ranks_by_sketch(wanted)) and SKETCH not in wanted:
        wanted += (SKETCH,)
    return wanted


def _the_default(wanted: tuple[Declaration, ...]) -> bool:
    """Tell whether ``wanted`` is the default, whose label statistics are skipped without a label (a sketch aside)."""
    return tuple(r for r in wanted if r is not SKETCH) == requested(DEFAULT_STATS)


def grouped_statistics(wanted: tuple[Declaration, ...]) -> tuple[Declaration, ...]:
    """Add what ``describe(x, groups=g)`` computes by group to ``wanted``."""
    added = (CLASS_MOMENTS, MI) if counts_histograms(wanted) else (CLASS_MOMENTS,)
    return (*wanted, *(r for r in added if r not in wanted))


def target_statistics(
    stats: Any, wanted: tuple[Declaration, ...], target_bins: Any
) -> tuple[tuple[Declaration, ...], tuple[Any, ...], tuple[int, ...] | None, tuple[float, ...] | None]:
    """Decide what a run with a continuous target (``describe(x, target=y)``) computes."""
    given = None
    if isinstance(target_bins, (int, np.integer)):
        n_bins = strict_int(target_bins, "target_bins", minimum=2)
    else:
        given = checked_cuts(target_bins)
        n_bins = len(given) + 1
    refused = [r.name for r in requested(stats) if r.needs_class_label]
    if refused and not _the_default(requested(stats)):
        raise ValueError(f"statistic {refused[0]!r} needs a class label; with target= select ranks by "
                         "'f_regression', 'r_regression' or 'mi'")
    wanted = tuple(r for r in wanted if not r.needs_class_label)
    if not counts_by_label(wanted):
        return wanted, (TargetMoments(),), None, given
    return wanted, (TargetMoments(), TargetSketch()), tuple(range(n_bins)), given
