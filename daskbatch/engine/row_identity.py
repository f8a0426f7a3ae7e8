"""What identifies the rows of an input, so that a summary can refuse to count them twice.

``describe`` records the token of its input in ``provenance["input_tokens"]``;
:func:`daskbatch.merge` and :func:`daskbatch.update` refuse rows whose token a
summary already holds.  The token is the content's, never the path's or the
files' times: a copy of a store, or a store whose files were touched, has the
same token.

* A store daskbatch wrote: a hash of the CRC-32C checksum every chunk ends
  with (one listing and 4 bytes a chunk, before any compute).
* Another writer's store: a hash of the blocks as the first pass reads them
  (:class:`~daskbatch.stats.content_digest.ContentDigest`, no pass of its own),
  so it is known only once the rows are described.
* In-memory data: dask's name of the array (a hash of NumPy values).
"""

from __future__ import annotations

from typing import Any

from daskbatch.engine.checkpoint.fingerprint import checksums_digest, listing_token

__all__ = ["input_token", "listed_token"]


def input_token(data: Any, read_digest: str | None = None) -> str | None:
    """Identify the rows of an input by content: what a summary records to refuse counting them twice.

    Parameters
    ----------
    data : Dataset or FeatureMatrix
        An opened store or in-memory data.
    read_digest : str, optional
        The result of :class:`~daskbatch.stats.content_digest.ContentDigest`
        over the input's blocks, for a store whose chunks carry no checksum.

    Returns
    -------
    str or None
        The token; None for a store without chunk checksums before its blocks were read.
    """
    from daskbatch.io.chunk_grid import chunk_checksums  # lazy: zarr

    source = getattr(data, "source", None) or data
    zx = getattr(source, "zarr_x", None)
    if zx is None:
        return f"in-memory {getattr(data, 'x', data).name}"
    checksums = chunk_checksums(zx)
    if checksums is not None:
        return f"store x {len(checksums)} chunks, crc32c {checksums_digest(zx, checksums)}"
    return None if read_digest is None else f"store x read {read_digest}"


def listed_token(data: Any) -> str | None:
    """The token daskbatch recorded for a store before content tokens: a hash of its ``x`` array's listing.

    Summaries saved then hold only these; comparing with it still refuses the
    very same store, unchanged, that such a summary holds.

    Parameters
    ----------
    data : Dataset or FeatureMatrix
        The input.

    Returns
    -------
    str or None
        ``"store x <n> files, <bytes>, sha256 <digest>"``; None for in-memory data.
    """
    source = getattr(data, "source", None) or data
    zx = getattr(source, "zarr_x", None)
    return None if zx is None else f"store x {listing_token(zx)}"
