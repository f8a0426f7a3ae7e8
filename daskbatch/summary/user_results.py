"""A user's statistics' results as named arrays: what ``to_xarray``, ``to_dataframe`` and ``to_json`` show of them.

A result is an array, a scalar, or a dataclass, dict or named tuple of those.
Each array becomes one variable, named after the statistic (``"l1"``) or, for
a result with fields, ``"<statistic>_<field>"``. An array whose first axis has
one entry per feature lies along ``feature``; its other axes (and those of
other arrays) get dimensions of their own, named after the variable. The
variables carry the statistic's name and the field, so
:func:`results_from_variables` gathers them back (as arrays: the result's own
type needs the statistic, see ``load_summary(path, statistics=[...])``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np

__all__ = ["USER_ATTR", "UserVariable", "results_from_variables", "user_variables"]

#: Attribute naming the user's statistic a variable comes from (and ``FIELD_ATTR`` the field of its result).
USER_ATTR = "daskbatch_user_statistic"
FIELD_ATTR = "daskbatch_result_field"


class UserVariable(NamedTuple):
    """One array of a user's result: its variable name, dimensions, values and attributes."""

    name: str
    dims: tuple[str, ...]
    values: np.ndarray
    attrs: dict[str, Any]


def _fields(result: Any) -> Iterator[tuple[str, Any]]:
    """The (field, value) pairs of a result; ``""`` for a result that is one value."""
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        yield from ((f.name, getattr(result, f.name)) for f in dataclasses.fields(result))
    elif isinstance(result, tuple) and hasattr(result, "_asdict"):
        yield from result._asdict().items()
    elif isinstance(result, Mapping):
        yield from ((str(k), v) for k, v in result.items())
    else:
        yield "", result


def user_variables(extra: Mapping[str, Any], n_features: int, taken: set[str]) -> list[UserVariable]:
    """Turn the user's results into named arrays (non-numeric values are left out).

    Parameters
    ----------
    extra : mapping
        Results by statistic name (``Summary.extra``).
    n_features : int
        The summary's D: a first axis of that length is the ``feature`` dimension.
    taken : set of str
        Names already used by the built-in statistics: a clash gets the prefix ``user_``.

    Returns
    -------
    list of UserVariable
        The variables, statistic by statistic, field by field.
    """
    out: list[UserVariable] = []
    for stat, result in extra.items():
        for field, value in _fields(result):
            a = np.asarray(value)  # results are on the host already (describe and merge bring them there)
            if a.dtype.kind not in "biuf":
                continue  # strings, objects, complex: nothing a table or netCDF holds as numbers
            name = f"{stat}_{field}" if field else stat
            if name in taken:
                name = f"user_{name}"
            taken.add(name)
            first = ("feature",) if a.ndim and a.shape[0] == n_features else (f"{name}_dim0",)
            dims = (first + tuple(f"{name}_dim{i}" for i in range(1, a.ndim))) if a.ndim else ()
            attrs = {"long_name": f"{field or 'result'} of statistic {stat!r}", USER_ATTR: stat, FIELD_ATTR: field}
            out.append(UserVariable(name, dims, a, attrs))
    return out


def results_from_variables(ds: Any) -> dict[str, Any]:
    """Gather the user's results back from a dataset's variables: an array, or a dict of arrays by field.

    Parameters
    ----------
    ds : xarray.Dataset
        A dataset made by ``Summary.to_xarray``.

    Returns
    -------
    dict
        Results by statistic name.
    """
    out: dict[str, Any] = {}
    for var in ds.data_vars.values():
        stat = var.attrs.get(USER_ATTR)
        if not isinstance(stat, str):
            continue
        value = np.asarray(var.values)
        value = value[()] if value.ndim == 0 else value
        field = str(var.attrs.get(FIELD_ATTR) or "")
        if field:
            out.setdefault(stat, {})[field] = value
        else:
            out[stat] = value
    return out

