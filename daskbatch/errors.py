"""Exceptions that daskbatch raises on purpose."""

from __future__ import annotations


class PlanError(ValueError):
    """A computation cannot fit the memory budget; the message names the number to change."""


class DataError(ValueError):
    """The data cannot be read as asked: a missing array or chunk, a corrupt chunk, a bad shape."""


class CheckpointMismatchError(ValueError):
    """A checkpoint belongs to a different input or statistics spec."""


class DeviceUnavailableError(RuntimeError):
    """A GPU was asked for (a ``"cuda"`` cluster) but this machine shows none."""


class Interrupted(Exception):
    """A run was stopped (SIGTERM at a walltime); its checkpoint holds what finished."""
