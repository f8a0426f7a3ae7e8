"""A hash of the blocks a pass reads, taken as it reads them: the content token of another writer's store.

A store daskbatch wrote carries CRC-32C checksums (:func:`daskbatch.io.chunk_grid.chunk_checksums`);
another writer's does not, and hashing it up front would read it once more. :class:`ContentDigest`
rides along in the first pass instead: one digest per ``piece_rows`` rows (the store's chunk rows,
so the token does not depend on the blocking), kept in row order and hashed into one token (32
bytes a piece, so checkpoints keep it). zlib's CRC-32 (fast, the GIL released), not a
cryptographic hash: it guards against counting rows twice by mistake, not against forgery.
"""

from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from daskbatch.stats._base import State
from daskbatch.stats.declaration import Declaration

__all__ = ["ContentDigest", "DigestState"]

#: Bytes of one piece's digest (a BLAKE2b of its shape, dtype and CRC-32).
DIGEST_BYTES = 32


@dataclass(frozen=True)
class DigestState(State):
    """The digests of the blocks of some consecutive rows, in row order."""

    digests: np.ndarray


@dataclass(frozen=True)
class ContentDigest:  # numpydoc ignore=PR02
    """Hash the blocks of a pass as they are read: a content token that costs no pass of its own.

    Its state and result stay inside the pass runner: ``describe`` turns the
    result into the input's token and keeps neither in the summary.

    Parameters
    ----------
    piece_rows : int, default 0
        Rows hashed into one digest (the store's chunk rows, which every block
        starts on); 0: one digest per block.
    """

    piece_rows: int = 0

    #: Not a statistic the user asked for: pass names and titles leave it out (:func:`~daskbatch.stats._base.shown_names`).
    rides_along = True
    #: Weighted passes take it too; its weights are ignored.
    takes_weights = True
    #: A weighted pass hands it every row as read, not only those of positive weight
    #: (:class:`~daskbatch.stats.Bundle`): the token is the store's, whatever the weights.
    reads_every_row = True

    @property
    def name(self) -> str:
        """Name the statistic in task keys and checkpoints."""
        return "content_digest"

    def chunk(self, x: Any, label: Any = None, /, *, weights: Any = None) -> DigestState:
        """Hash one block (a GPU block is hashed from a host copy)."""
        block = x.get() if hasattr(x, "get") and not isinstance(x, np.ndarray) else np.asarray(x)
        rows = int(block.shape[0])
        step = self.piece_rows if self.piece_rows > 0 else max(rows, 1)
        digests = np.zeros((-(-rows // step), DIGEST_BYTES), dtype=np.uint8)
        for i, start in enumerate(range(0, rows, step)):
            piece = np.ascontiguousarray(block[start : start + step])
            digest = hashlib.blake2b(f"{piece.shape} {piece.dtype.str}".encode(), digest_size=DIGEST_BYTES)
            digest.update(zlib.crc32(piece.data).to_bytes(4, "little"))  # C-contiguous; zlib releases the GIL
            digests[i] = np.frombuffer(digest.digest(), dtype=np.uint8)
        return DigestState(digests)

    def merge(self, a: DigestState, b: DigestState, /) -> DigestState:
        """Put ``b``'s digests after ``a``'s."""
        return DigestState(np.concatenate([np.asarray(a.digests), np.asarray(b.digests)]))

    def finalize(self, state: DigestState, /) -> str:
        """Hash the blocks' digests into one token."""
        digests = np.ascontiguousarray(np.asarray(state.digests, dtype=np.uint8))
        whole = hashlib.blake2b(digests.tobytes(), digest_size=DIGEST_BYTES).hexdigest()
        return f"{digests.shape[0]} pieces, blake2b {whole[:20]}"


#: The digest of the rows a checkpoint counted (its state only).
DECLARATION = Declaration("digest", None, states=(DigestState,), selectable=False)
