"""The one table of built-in statistics, and every other way a statistic is known by name.

:data:`STATISTICS` maps each built-in name to its :class:`~daskbatch.stats.declaration.Declaration`.
Saved summaries name a kept statistic by class and parameters; only classes known here are rebuilt.
A user's statistic is known by :func:`register_statistic` or the ``daskbatch.statistics`` entry points.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.metadata
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from daskbatch._common import short_repr
from daskbatch.stats import (
    class_moments,
    classes,
    comoments,
    histogram,
    moments,
    sketch_windows,
    spearman,
    target,
    tiled,
)
from daskbatch.stats.declaration import Declaration, Footprint, Variable, generic_footprint

#: Every built-in statistic by name, in the order summaries list their variables: the one table.
STATISTICS: dict[str, Declaration] = {d.name: d for d in (
    moments.DECLARATION,
    comoments.DECLARATION,
    spearman.DECLARATION,
    histogram.DECLARATION,
    target.MI_DECLARATION,
    class_moments.DECLARATION,
    target.DECLARATION,
    target.SKETCH_DECLARATION,
    sketch_windows.DECLARATION,
    histogram.QUANTILE_DECLARATION,
    tiled.DECLARATION,
    classes.DECLARATION,
    classes.DIGEST_DECLARATION,
)}


def selectable() -> list[str]:
    """The names users may type in ``stats=`` and ``--stats``, in table order."""  # numpydoc ignore=RT01
    return [name for name, d in STATISTICS.items() if d.selectable]


def register(declaration: Declaration) -> Declaration:
    """Add a built-in-style statistic to :data:`STATISTICS` (one line of the table); its name must be plain and new."""  # numpydoc ignore=PR01,RT01
    if not PLAIN_NAME.fullmatch(declaration.name):
        raise ValueError(f"a statistic's name is a letter, then letters, digits or '_'; got {declaration.name!r}")
    if declaration.name in STATISTICS:
        raise ValueError(f"statistic {declaration.name!r} is declared already; choose another name")
    STATISTICS[declaration.name] = declaration
    return declaration


def _kept(d: Declaration) -> bool:
    """Whether summaries keep this statistic's state as a built-in one (by class name and parameters)."""
    return d.statistic is not None and bool(d.states)


def declared_state(statistic: Any) -> type | None:  # numpydoc ignore=PR01,RT01
    """The state class a built-in statistic declares (its first), None for anything else (a user's)."""
    for d in STATISTICS.values():
        if type(statistic) is d.statistic and _kept(d):
            return d.states[0]
    return None


def fused(statistic: Any) -> bool:  # numpydoc ignore=PR01,RT01
    """Whether the engine's passes build ``statistic`` (not one the first pass runs as given)."""
    return any(type(statistic) is d.statistic and d.fused and _kept(d) for d in STATISTICS.values())


def built_in_states() -> tuple[type, ...]:  # numpydoc ignore=RT01
    """Every state class the built-in statistics declare (what checkpoints check as daskbatch's own)."""
    return tuple(dict.fromkeys(cls for d in STATISTICS.values() for cls in d.states))


def summary_variables() -> dict[str, Variable]:
    """Every summary variable the built-in statistics declare, by name, in table order."""  # numpydoc ignore=RT01
    return {name: v for d in STATISTICS.values() for name, v in d.variables.items()}


def footprint_of(stat: Any) -> Footprint:  # numpydoc ignore=PR01,RT01
    """The memory footprint a statistic declares (``stat.footprint`` or its declaration's), else a cautious one."""
    declared = getattr(stat, "footprint", None)
    if isinstance(declared, Footprint):
        return declared
    d = STATISTICS.get(getattr(stat, "name", None))  # type: ignore[arg-type]
    if d is not None and d.footprint is not None and type(stat) is d.statistic:
        return d.footprint
    return generic_footprint(stat.name)


@dataclass(frozen=True, eq=False)
class Kept:
    """A statistic with its merged (un-finalized) state over every row seen, in NumPy arrays."""

    statistic: Any
    state: Any

    def finalize(self) -> Any:
        """Finalize the kept state, as ``describe`` computes it from the same state."""  # numpydoc ignore=RT01
        return self.statistic.finalize(self.state)


def statistic_params(statistic: Any) -> dict[str, Any]:  # numpydoc ignore=PR01,RT01
    """The parameters of a kept built-in statistic as plain JSON values (tuples become lists)."""
    if declared_state(statistic) is None:
        raise TypeError(f"{type(statistic).__qualname__} is not a statistic whose state a summary keeps")
    # A request's fields (a histogram's ``range``) are resolved before counting: the state does not depend on them.
    return {
        f.name: list(v) if isinstance(v := getattr(statistic, f.name), tuple) else v
        for f in dataclasses.fields(statistic) if not f.metadata.get("request")
    }


def statistic_from_params(class_name: str, params: Any) -> Any:  # numpydoc ignore=PR01,RT01
    """Rebuild a kept statistic from its class name and :func:`statistic_params` (one-line ValueError)."""
    known = {d.statistic.__name__: d.statistic for d in STATISTICS.values() if d.statistic is not None and d.states}
    cls = known.get(class_name)
    if cls is None:
        raise ValueError(f"unknown statistic {class_name!r}; known: {', '.join(sorted(known))}")
    names = {f.name for f in dataclasses.fields(cls)}
    if not isinstance(params, dict) or set(params) - names:
        extra = sorted(set(params) - names) if isinstance(params, dict) else params
        raise ValueError(f"parameters of {class_name} are not its fields: {extra!r}")
    # JSON has lists where the statistics hold tuples (they are hashed and compared).
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in params.items()})


#: The entry-point group in which installed packages register statistics by name.
ENTRY_POINT_GROUP = "daskbatch.statistics"

#: A user's statistic name doubles as a task-name and checkpoint-folder part: a plain name.
PLAIN_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def is_statistic(obj: Any) -> bool:  # numpydoc ignore=PR01,RT01
    """Whether ``obj`` follows the statistic protocol: ``name``, ``chunk``, ``merge``, ``finalize``."""
    return isinstance(getattr(obj, "name", None), str) and all(
        callable(getattr(obj, m, None)) for m in ("chunk", "merge", "finalize")
    )


def named_statistic(name: str) -> Any:
    """A user's statistic from its registered name; a name is never an import path."""  # numpydoc ignore=PR01,RT01
    shown = short_repr(name, 60)
    obj: Any = registered(name)()
    if isinstance(obj, type):
        try:
            obj = obj()
        except TypeError as exc:
            raise ValueError(f"statistic {shown}: {obj.__qualname__}() needs arguments ({exc})") from None
    return obj


def registered(name: str) -> Callable[[], Any]:  # numpydoc ignore=PR01,RT01
    """What loads the statistic registered under ``name`` (a one-line ValueError when none is)."""
    if name in _PYTHON_REGISTRY:
        factory = _PYTHON_REGISTRY[name]
        return lambda: factory
    found = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP, name=name)
    if not found:
        # An import path in data would run the code of any module on sys.path (the working directory too).
        path = " (an import path, which is never imported)" if ":" in name else ""
        raise ValueError(
            f"unknown statistic {short_repr(name, 60)}{path}; {_hint(name)}{sorted(selectable())}, a name given to "
            f"db.register_statistic or registered in the {ENTRY_POINT_GROUP!r} entry-point group, or pass your "
            "statistic object in Python (stats=[MyStat()])"
        )
    return next(iter(found)).load


def _hint(name: str) -> str:
    """Start the list of choices: "did you mean ...?", or the statistic a result name (``mean``) comes from."""
    # Read from what each statistic declares, so that a new statistic's results are found too.
    givers = " or ".join(repr(n) for n, d in STATISTICS.items() if d.selectable and name in d.variables)
    if givers:
        return f"{name!r} is a result of the statistic {givers}: ask for that; or choose from "
    close = difflib.get_close_matches(name.lower(), [*selectable(), *_PYTHON_REGISTRY], n=1)
    return f"did you mean {close[0]!r}? Or choose from " if close else "choose from "


#: Statistics that the user's own code registered by name (:func:`register_statistic`).
_PYTHON_REGISTRY: dict[str, Any] = {}


def register_statistic(name: str, statistic: Any) -> Any:
    """Give a statistic a name that ``stats=`` strings, job files and ``run_job`` may use.

    Registration is code the user runs, so a name in a file only ever picks
    a statistic that the running program chose to offer; it never imports
    anything. A package offers its statistics to every program (and to the
    command line) through the ``daskbatch.statistics`` entry-point group instead.

    Parameters
    ----------
    name : str
        A plain name (a letter, then letters, digits and ``_``) that no built-in statistic uses.
    statistic : type or object
        A statistic class (called without arguments when the name is used) or a statistic object.

    Returns
    -------
    type or object
        ``statistic`` itself, so that this can decorate a class.

    Raises
    ------
    ValueError
        The name is not plain, or is a built-in statistic's.
    TypeError
        ``statistic`` does not follow the statistic protocol.

    Examples
    --------
    >>> import numpy as np
    >>> import daskbatch as db
    >>> class Count:
    ...     name = "count_rows"
    ...     def chunk(self, x, label=None): return np.array([x.shape[0]])
    ...     def merge(self, a, b): return a + b
    ...     def finalize(self, state): return state
    >>> db.register_statistic("count_rows", Count)  # doctest: +ELLIPSIS
    <class ...Count'>
    """
    if not isinstance(name, str) or not PLAIN_NAME.fullmatch(name):
        raise ValueError(f"a statistic's name is a letter, then letters, digits or '_'; got {short_repr(name, 60)}")
    if name in STATISTICS:
        raise ValueError(f"{name!r} is a built-in statistic's name; choose another")
    if isinstance(statistic, type):
        if not all(callable(getattr(statistic, m, None)) for m in ("chunk", "merge", "finalize")):
            raise TypeError(f"{statistic.__qualname__} has no chunk, merge and finalize: not a statistic")
    elif not is_statistic(statistic):
        raise TypeError(f"{short_repr(statistic, 60)} is not a statistic (it needs name, chunk, merge, finalize)")
    _PYTHON_REGISTRY[name] = statistic
    return statistic


