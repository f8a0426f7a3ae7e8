"""What identifies the rows of an input, so that a summary can refuse to count them twice.

``describe`` records the token of its input in ``provenance["input_tokens"]``;
:func:`daskbatch.merge` and :func:`daskbatch.update` refuse rows whose token a
summary already holds.
"""

from __future__ import annotations

from typing import Any

from daskbatch.engine.checkpoint.fingerprint import content_token

__all__ = ["input_token"]


def input_token(data: Any) -> str:
    """Identify the rows of an input by content: what a summary records to refuse counting them twice.

    Parameters
    ----------
    data : Dataset or FeatureMatrix
        An opened store (the token hashes its ``x`` array's file names, sizes
        and modification times, one listing, no chunk read) or in-memory data
        (its dask name, a hash of NumPy values).

    Returns
    -------
    str
        The token.
    """
    source = getattr(data, "source", None) or data
    zx = getattr(source, "zarr_x", None)
    if zx is not None:
        return f"store x {content_token(zx)}"
    return f"in-memory {getattr(data, 'x', data).name}"
