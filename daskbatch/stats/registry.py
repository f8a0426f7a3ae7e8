"""The statistics whose merged states a summary keeps, and how they are named on disk.

A :class:`~daskbatch.Summary` keeps, next to its finalized numbers, the merged
state of every statistic of the passes that made it (:class:`Kept`), so that it
can be merged with another summary or updated with new rows (see
:mod:`daskbatch.incremental`). Saved summaries write each statistic as its class
name and parameters (plain JSON) and its state as plain arrays; this registry is
the closed list of classes that loading may build from such names: nothing is
imported by a name read from a file.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from daskbatch.stats.class_moments import ClassMoments, ClassMomentsState
from daskbatch.stats.comoments import CoMoments, CoMomentsState
from daskbatch.stats.histogram import Histogram, HistogramState
from daskbatch.stats.moments import Moments, MomentsState
from daskbatch.stats.sketch import Sketch, SketchState
from daskbatch.stats.target import TargetMoments, TargetMomentsState, TargetSketch

__all__ = ["STATE_CLASSES", "STATISTIC_CLASSES", "Kept", "statistic_from_params", "statistic_params"]

#: Statistic class -> the class of its state: the only classes a saved summary may name.
STATE_CLASSES: dict[type, type] = {
    Moments: MomentsState,
    CoMoments: CoMomentsState,
    Histogram: HistogramState,
    ClassMoments: ClassMomentsState,
    Sketch: SketchState,
    TargetMoments: TargetMomentsState,
    TargetSketch: SketchState,
}

#: Class name (as written to disk) -> statistic class.
STATISTIC_CLASSES: dict[str, type] = {cls.__name__: cls for cls in STATE_CLASSES}


@dataclass(frozen=True, eq=False)
class Kept:  # numpydoc ignore=PR02
    """A statistic with its merged (un-finalized) state, on the host.

    Parameters
    ----------
    statistic : Moments, CoMoments, Histogram, ClassMoments or Sketch
        The statistic and its parameters (a histogram's bins and ranges, ...).
    state : State
        Its merged state over every row seen, with NumPy arrays.
    """

    statistic: Any
    state: Any

    def finalize(self) -> Any:
        """Finalize the kept state, as ``describe`` computes it from the same state.

        Returns
        -------
        object
            The statistic's result.
        """
        return self.statistic.finalize(self.state)


def statistic_params(statistic: Any) -> dict[str, Any]:
    """Read the parameters of ``statistic`` as plain JSON values (tuples become lists).

    Parameters
    ----------
    statistic : object
        An instance of a registered statistic class.

    Returns
    -------
    dict
        Field name to value.

    Raises
    ------
    TypeError
        ``statistic`` is not one of the registered classes.
    """
    if type(statistic) not in STATE_CLASSES:
        raise TypeError(f"{type(statistic).__qualname__} is not a statistic whose state a summary keeps")
    # A request's fields (a histogram's ``range``) are resolved before counting: the state does not depend on them.
    return {
        f.name: list(v) if isinstance(v := getattr(statistic, f.name), tuple) else v
        for f in dataclasses.fields(statistic) if not f.metadata.get("request")
    }


def statistic_from_params(class_name: str, params: Any) -> Any:
    """Rebuild a statistic from :func:`statistic_params`' output and its class name.

    Parameters
    ----------
    class_name : str
        The statistic's class name.
    params : dict
        Its parameters, as :func:`statistic_params` wrote them.

    Returns
    -------
    object
        The statistic.

    Raises
    ------
    ValueError
        The name is not a registered statistic, or the parameters are not its
        fields (one line naming what is wrong).
    """
    cls = STATISTIC_CLASSES.get(class_name)
    if cls is None:
        raise ValueError(f"unknown statistic {class_name!r}; known: {', '.join(sorted(STATISTIC_CLASSES))}")
    names = {f.name for f in dataclasses.fields(cls)}
    if not isinstance(params, dict) or set(params) - names:
        extra = sorted(set(params) - names) if isinstance(params, dict) else params
        raise ValueError(f"parameters of {class_name} are not its fields: {extra!r}")
    # JSON has lists where the statistics hold tuples (they are hashed and compared).
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in params.items()})
