"""The closed registry of state classes: the only classes a checkpoint or a saved summary may rebuild.

A file names a state class by its key, ``"module:qualname"``; reading looks the
key up here and never imports anything. Every subclass of
:class:`~daskbatch.stats._base.State` is registered when its class statement
runs, the built-in states and a user's alike: code the running program
defined vouches for the class, a name read from a file does not. A state
dataclass that does not derive from ``State`` is registered with
:func:`register_state`. A class defined again under the same key (a notebook
cell run twice) replaces the earlier one.
"""

from __future__ import annotations

import dataclasses
from typing import TypeVar

__all__ = ["register_state", "registered_state", "state_key"]

T = TypeVar("T", bound=type)

_REGISTRY: dict[str, type] = {}


def state_key(cls: type) -> str:
    """Name a state class as files record it: ``"module:qualname"``.

    Parameters
    ----------
    cls : type
        A state class.

    Returns
    -------
    str
        Its key in the registry.
    """
    return f"{cls.__module__}:{cls.__qualname__}"


def register_state(cls: T) -> T:
    """Register a state class, so that checkpoints and saved summaries can rebuild it.

    Subclasses of :class:`daskbatch.State` need not call it: they are
    registered when defined. Usable as a class decorator (above ``@dataclass``).

    Parameters
    ----------
    cls : type
        A dataclass whose fields are arrays or scalars.

    Returns
    -------
    type
        ``cls`` itself.

    Raises
    ------
    TypeError
        ``cls`` is not a dataclass.
    """
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"register_state takes a dataclass, not {cls!r}")
    _register(cls)
    return cls


def _register(cls: type) -> None:
    """Record ``cls`` under its key (State's subclass hook: the class is not yet a dataclass then)."""
    _REGISTRY[state_key(cls)] = cls


def registered_state(key: str) -> type | None:
    """Look up the state class registered under ``key``; nothing is imported.

    Parameters
    ----------
    key : str
        A key as :func:`state_key` writes it, read from a file.

    Returns
    -------
    type or None
        The class, or None when no class of that key was registered.
    """
    return _REGISTRY.get(key)
