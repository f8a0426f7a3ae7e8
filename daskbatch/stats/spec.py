"""What to compute: the built-in statistics' declarations, and statistic objects from user input.

The one place that turns what a user asks for (``stats="moments,cov"``,
``stats=[Moments(ddof=0), "hist"]``) into what
:func:`daskbatch.describe`, :class:`daskbatch.Accumulator`, :func:`daskbatch.plan`
and the CLI compute: :func:`configured` builds the statistic objects, with
their parameters, that everything above this layer reads. Which of them a run
computes (with a label, groups or a target) is :mod:`daskbatch.stats.wanted`;
histogram ranges are :mod:`daskbatch.stats.ranges`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from daskbatch._arguments import strict_int
from daskbatch.config import STATISTIC_DEFAULTS
from daskbatch.stats import (
    STATISTICS,
    ClassMoments,
    CoMoments,
    Histogram,
    Moments,
    MutualInformation,
    Sketch,
)
from daskbatch.stats.footprint import Footprint, generic_footprint
from daskbatch.stats.named import (
    PLAIN_NAME,
    is_statistic,
    named_statistic,
    registered,
)

# class_moments is in the default so that db.select(db.describe(x, y)) has the inputs of its
# default score (ANOVA F); like mi it is computed only when there is a label.
DEFAULT_STATS = ("moments", "cov", "hist", "mi", "class_moments")
NAN_POLICIES = ("omit", "propagate", "raise")
#: Entry-point group under which installed packages register statistics by name (``--stats mystat``).


@dataclasses.dataclass(frozen=True)
class Requested:  # numpydoc ignore=PR02
    """A built-in statistic as users name it, and what it declares: what describe and the stream branch on.

    Parameters
    ----------
    name : str
        The name users type (``"mi"``).
    statistic : type
        Its statistic class (``"mi"``: :class:`~daskbatch.stats.MutualInformation`).
    needs_label, needs_class_label : bool, default False
        Computed only with a label or a continuous target (left out without one); only with a class label.
    needs_ranges, by_label : bool, default False
        Counts into bins whose ranges are given or found by a first pass; per class of the label.
    """

    name: str
    statistic: type
    needs_label: bool = False
    needs_class_label: bool = False
    needs_ranges: bool = False
    by_label: bool = False


MOMENTS = Requested("moments", Moments)
COV = Requested("cov", CoMoments)
HIST = Requested("hist", Histogram, needs_ranges=True)
#: Mutual information, from the joint tables of the histogram by label (counted in place of ``hist``).
MI = Requested("mi", MutualInformation, needs_label=True, needs_ranges=True, by_label=True)
CLASS_MOMENTS = Requested("class_moments", ClassMoments, needs_label=True, needs_class_label=True)
SKETCH = Requested("sketch", Sketch)
#: Every built-in statistic by the name users type: the one place that reads those names.
BUILT_IN: dict[str, Requested] = {r.name: r for r in (MOMENTS, COV, HIST, MI, CLASS_MOMENTS, SKETCH)}
assert set(BUILT_IN) == set(STATISTICS)


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
class Configured:  # numpydoc ignore=PR02
    """The built-in statistics of one run with their parameters, and a user's own: what :func:`configured` builds.

    Parameters
    ----------
    wanted : tuple
        The built-in statistics asked for, configured, moments first.
    user : tuple
        A user's statistics, in order.
    moments, cov, histogram, mi, class_moments : object
        Every built-in statistic as this run configures it, asked for or not
        (a run with ``groups`` adds the histograms by label, ``like=`` fixes bins).
    """

    wanted: tuple[Any, ...]
    user: tuple[Any, ...]
    moments: Moments
    cov: CoMoments
    histogram: Histogram
    mi: MutualInformation
    class_moments: ClassMoments

    @property
    def names(self) -> tuple[str, ...]:
        """Name the built-in statistics asked for (moments first).

        Returns
        -------
        tuple of str
            Their names.
        """
        return tuple(s.name for s in self.wanted)


def configured(stats: Any, **shortcuts: Any) -> Configured:
    """Build the statistic objects of ``stats`` with their parameters: the one builder above ``stats/``.

    Names (``"cov"``, ``"moments,hist"``) build the built-in statistics with
    the keyword ``shortcuts`` (describe's ``ddof=``, ``bins=``, ...; None: not
    given), else with what the objects among ``stats`` say (a parameter shared
    by several statistics, such as ``ddof`` or ``bins``, is one per run), else
    with the defaults. Objects of the built-in classes keep their parameters;
    other objects, and names of a user's statistics, are a user's statistics.

    Parameters
    ----------
    stats : str or sequence
        Names, comma-separated names, statistic objects.
    **shortcuts
        Values of the keys of :data:`SHORTCUTS`, or None.

    Returns
    -------
    Configured
        The statistics.

    Raises
    ------
    ValueError
        One line naming two values of one parameter that disagree, or a bad value.
    """
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
    built: dict[type, Any] = {cls: cls(**{k: v for k, v in values.items() if cls in SHORTCUTS[k][1]})
                               for cls in (Moments, CoMoments, Histogram, MutualInformation, ClassMoments)}
    built[Sketch] = given.get(Sketch, Sketch())
    order = (MOMENTS.name,) + tuple(n for n in dict.fromkeys(names) if n != MOMENTS.name)
    return Configured(
        wanted=tuple(built[BUILT_IN[n].statistic] for n in order),
        user=tuple(o for o in objects if type(o) not in _BUILT_IN_TYPES),
        moments=built[Moments], cov=built[CoMoments], histogram=built[Histogram], mi=built[MutualInformation],
        class_moments=built[ClassMoments],
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


def requested(stats: Any) -> tuple[Requested, ...]:
    """Turn the built-in statistic names among ``stats`` into what they declare (moments first).

    Parameters
    ----------
    stats : str or sequence
        The requested statistics (names, comma-separated names, statistic objects).

    Returns
    -------
    tuple of Requested
        The built-in statistics, in :func:`normalize_stats`'s order.
    """
    return tuple(BUILT_IN[n] for n in normalize_stats(stats))


def names_of(wanted: Sequence[Requested]) -> tuple[str, ...]:
    """List the names of ``wanted`` (for the planner and the provenance).

    Parameters
    ----------
    wanted : sequence of Requested
        Built-in statistics.

    Returns
    -------
    tuple of str
        Their names, in order.
    """
    return tuple(r.name for r in wanted)


def counts_histograms(wanted: Sequence[Requested]) -> bool:
    """Tell whether any of ``wanted`` counts into bins (needs ranges).

    Parameters
    ----------
    wanted : sequence of Requested
        Built-in statistics.

    Returns
    -------
    bool
        True when one does.
    """
    return any(r.needs_ranges for r in wanted)


def counts_by_label(wanted: Sequence[Requested]) -> bool:
    """Tell whether the histograms of ``wanted`` are counted per class of the label.

    Parameters
    ----------
    wanted : sequence of Requested
        Built-in statistics.

    Returns
    -------
    bool
        True when they are.
    """
    return any(r.by_label for r in wanted)


def normalize_stats(stats: Any) -> tuple[str, ...]:
    """Validate statistic names (``"moments"`` is always computed and listed first).

    ``stats`` is a name, a comma-separated string of names, or a sequence of
    names and statistic objects; the objects and the names of a user's
    statistics (registered in the ``daskbatch.statistics`` entry-point
    group) are left to :func:`user_statistics`.

    Parameters
    ----------
    stats : str or sequence
        The requested statistics.

    Returns
    -------
    tuple of str
        The validated built-in names, ``"moments"`` first.
    """
    names, _ = _split(stats)
    return (MOMENTS.name,) + tuple(n for n in dict.fromkeys(names) if n != MOMENTS.name)


#: The classes of the built-in statistics: an object of one is configured, not a user's statistic.
_BUILT_IN_TYPES = frozenset(STATISTICS.values())


def statistic_items(stats: Any) -> tuple[Any, ...]:
    """Split ``stats`` into its items: one name, comma string or statistic, or a sequence of them.

    Parameters
    ----------
    stats : str, statistic or sequence
        What ``describe``'s ``stats`` takes.

    Returns
    -------
    tuple
        The items.
    """
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
            if name in STATISTICS:
                names.append(name)
            elif name:
                objects.append(named_statistic(name))
    return names, objects


def check_statistic_names(names: str | Sequence[str]) -> None:
    """Check that every name is a built-in or a registered statistic, loading none of them.

    What a job file names is checked when the file is read, before anything
    runs or is written.

    Parameters
    ----------
    names : str or sequence of str
        Names, or comma-separated names.

    Raises
    ------
    ValueError
        One line naming the first name that is neither.
    """
    for part in statistic_items(names):
        for name in (n.strip() for n in str(part).split(",")):
            if name and name not in STATISTICS:
                registered(name)


def user_statistics(stats: Any) -> tuple[Any, ...]:
    """Pick the statistic objects among ``stats`` (a user's own), checked against the protocol.

    Each needs a plain ``name`` that no built-in statistic uses, and ``chunk(x,
    label=None)``, ``merge(a, b)`` and ``finalize(state)`` (see
    :class:`~daskbatch.stats._base.Statistic`); names of statistics
    (registered in the entry-point group) are built by :func:`named_statistic`.

    Parameters
    ----------
    stats : str or sequence
        The requested statistics, names and objects.

    Returns
    -------
    tuple
        The statistic objects, in order.
    """
    found: list[Any] = []
    for obj in _split(stats)[1]:
        if type(obj) in _BUILT_IN_TYPES:
            continue
        if not is_statistic(obj):
            raise TypeError(
                f"{obj!r} is neither a statistic name nor a statistic: it needs a str 'name' and "
                "chunk(x, label=None), merge(a, b) and finalize(state) methods"
            )
        if not PLAIN_NAME.fullmatch(obj.name) or obj.name in STATISTICS:
            raise ValueError(
                f"statistic name {obj.name!r} must be a plain name ([A-Za-z][A-Za-z0-9_]*) "
                f"other than the built-in {sorted(STATISTICS)}"
            )
        if obj.name in {s.name for s in found}:
            raise ValueError(f"two statistics are named {obj.name!r}")
        found.append(obj)
    return tuple(found)


def footprint_of(stat: Any) -> Footprint:
    """Get the memory footprint a statistic declares (``stat.footprint``), else a cautious default.

    Parameters
    ----------
    stat : object
        A statistic.

    Returns
    -------
    Footprint
        Its footprint.
    """
    declared = getattr(stat, "footprint", None)
    return declared if isinstance(declared, Footprint) else generic_footprint(stat.name)
