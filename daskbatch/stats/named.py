"""Statistics known by name: the entry-point group, the user's own registrations, never an import path.

A name in a ``stats=`` string, on the command line or in a job file picks a
built-in statistic (:data:`daskbatch.stats.STATISTICS`), one that the running
program registered (:func:`register_statistic`), or one that an installed
package registers in the ``daskbatch.statistics`` entry-point group. Text from
a file or a command line never names a module to import.
"""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Callable
from typing import Any

from daskbatch._arguments import short_repr
from daskbatch.stats import STATISTICS

__all__ = ["ENTRY_POINT_GROUP", "PLAIN_NAME", "is_statistic", "named_statistic", "register_statistic", "registered"]

#: The entry-point group in which installed packages register statistics by name.
ENTRY_POINT_GROUP = "daskbatch.statistics"

#: A user's statistic name doubles as a task-name and checkpoint-folder part: a plain name.
PLAIN_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def is_statistic(obj: Any) -> bool:
    """Tell whether ``obj`` follows the statistic protocol: ``name``, ``chunk``, ``merge``, ``finalize``.

    Parameters
    ----------
    obj : object
        Anything.

    Returns
    -------
    bool
        True for a statistic.
    """
    return isinstance(getattr(obj, "name", None), str) and all(
        callable(getattr(obj, m, None)) for m in ("chunk", "merge", "finalize")
    )


def named_statistic(name: str) -> Any:
    """Build a user's statistic from its name on the command line, in a job file or in a ``stats`` string.

    A name is looked up among those the running program registered
    (:func:`register_statistic`), then in the ``daskbatch.statistics``
    entry-point group of the installed packages; a class found there is called
    without arguments. A name is never an
    import path: text from a file or a command line imports nothing of its own
    choosing (a statistic object is passed in Python: ``stats=[MyStat()]``).

    Parameters
    ----------
    name : str
        A registered name.

    Returns
    -------
    object
        The statistic (checked against the protocol by :func:`~daskbatch.stats.spec.user_statistics`).

    Raises
    ------
    ValueError
        One line naming what cannot be found or built.
    """
    shown = short_repr(name, 60)
    obj: Any = registered(name)()
    if isinstance(obj, type):
        try:
            obj = obj()
        except TypeError as exc:
            raise ValueError(f"statistic {shown}: {obj.__qualname__}() needs arguments ({exc})") from None
    return obj


def registered(name: str) -> Callable[[], Any]:
    """What loads the statistic registered under ``name``.

    Parameters
    ----------
    name : str
        A name given to :func:`register_statistic` or registered in the entry-point group.

    Returns
    -------
    callable
        Called without arguments, gives the registered class or object.

    Raises
    ------
    ValueError
        One line naming the name, when nothing is registered under it.
    """
    if name in _PYTHON_REGISTRY:
        factory = _PYTHON_REGISTRY[name]
        return lambda: factory
    found = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP, name=name)
    if not found:
        # An import path in data would run the code of any module on sys.path (the working directory too).
        path = " (an import path, which is never imported)" if ":" in name else ""
        raise ValueError(
            f"unknown statistic {short_repr(name, 60)}{path}; choose from {sorted(STATISTICS)}, a name given to "
            f"db.register_statistic or registered in the {ENTRY_POINT_GROUP!r} entry-point group, or pass your "
            "statistic object in Python (stats=[MyStat()])"
        )
    return next(iter(found)).load


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
    probe = statistic
    if isinstance(statistic, type):
        if not all(callable(getattr(statistic, m, None)) for m in ("chunk", "merge", "finalize")):
            raise TypeError(f"{statistic.__qualname__} has no chunk, merge and finalize: not a statistic")
    elif not is_statistic(probe):
        raise TypeError(f"{short_repr(statistic, 60)} is not a statistic (it needs name, chunk, merge, finalize)")
    _PYTHON_REGISTRY[name] = statistic
    return statistic


