"""Measure daskbatch states for dask's memory accounting (``dask.sizeof``).

Registered on the :class:`~daskbatch.stats._base.State` base, so every statistic's
state (built in or a user's) is measured by its arrays' bytes.
:mod:`daskbatch._dask_setup` registers it when dask is first imported (the engine
itself is imported lazily). Not through a ``dask.sizeof`` entry point: dask loads
those while ``dask.sizeof`` itself is being imported, which would make that
import circular.
"""

from __future__ import annotations

from typing import Any

# No dask import here: _dask_setup imports this module while dask itself is being imported.
from daskbatch.stats._base import State


def _sizeof_state(state: State) -> int:
    """Measure a state by its arrays' bytes (``State.nbytes``)."""
    return state.nbytes


def register(sizeof: Any) -> None:
    """Register :func:`_sizeof_state` with dask's ``sizeof`` dispatch (``dask.sizeof.sizeof``)."""
    sizeof.register(State)(_sizeof_state)
