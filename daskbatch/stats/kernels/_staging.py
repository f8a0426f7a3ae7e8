"""Overlapped host-to-GPU copies: pinned staging buffers and two CUDA streams."""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import numpy as np

__all__ = ["DEPTH", "Stager", "release", "split_rows", "stager"]

#: Slots in rotation: 2 is a double buffer (one part copying while one is reduced).
DEPTH = 2

S = TypeVar("S")


def split_rows(rows: int, part_rows: int) -> list[tuple[int, int]]:
    """Split ``0 .. rows`` into ``ceil(rows / part_rows)`` consecutive, near-equal row ranges."""
    if part_rows < 1:
        raise ValueError(f"part_rows must be at least 1, got {part_rows}")
    if rows <= 0:
        return []
    n = math.ceil(rows / part_rows)
    bounds = [rows * i // n for i in range(n + 1)]
    return list(zip(bounds[:-1], bounds[1:], strict=True))


class _Slot:
    """One pinned host buffer and one device buffer per array of a part, and the events guarding them."""

    def __init__(self, cupy: Any) -> None:
        self._cupy = cupy
        self.host: list[np.ndarray] = []  # pinned uint8
        self.device: list[Any] = []  # cupy uint8
        self.copied = cupy.cuda.Event(disable_timing=True)  # the copies of this slot's part are done
        self.consumed = cupy.cuda.Event(disable_timing=True)  # the kernels reading this slot's part are done

    def buffers(self, i: int, nbytes: int) -> tuple[np.ndarray, Any]:
        """The ``i``-th pinned and device buffers, grown to at least ``nbytes``."""
        import cupyx

        while len(self.host) <= i:
            self.host.append(np.empty(0, dtype=np.uint8))
            self.device.append(self._cupy.empty(0, dtype=np.uint8))
        if self.host[i].nbytes < nbytes:
            # Kernels may still read the old device buffer: freed memory goes back to the
            # pool at once, so wait for them before letting go of it (a rare, growing step).
            self.consumed.synchronize()
            self.host[i] = cupyx.empty_pinned((nbytes,), dtype=np.uint8)
            self.device[i] = self._cupy.empty(nbytes, dtype=np.uint8)
        return self.host[i], self.device[i]

    @property
    def nbytes(self) -> int:
        return sum(h.nbytes for h in self.host)


class Stager:
    """Copies host parts to the current CUDA device through pinned buffers while earlier parts are reduced."""

    def __init__(self, depth: int = DEPTH) -> None:
        import cupy  # lazy: cupy

        if depth < 2:
            raise ValueError(f"depth must be at least 2 (a double buffer), got {depth}")
        self._cupy = cupy
        self.device_id = int(cupy.cuda.Device().id)
        # Blocking streams (the default): they stay ordered with the legacy default stream,
        # on which other threads' CuPy work (merges) runs. CuPy's pool hands memory freed
        # there back to the stream that allocated it, so a state freed by a merge whose
        # kernels are still queued must not be rewritten by this compute stream before they
        # ran. The two streams still overlap each other; the events order what must be.
        self.copy_stream = cupy.cuda.Stream()
        self.compute_stream = cupy.cuda.Stream()
        self._slots = [_Slot(cupy) for _ in range(depth)]

    @property
    def depth(self) -> int:
        """Count the slots in rotation."""
        return len(self._slots)

    @property
    def pinned_bytes(self) -> int:
        """Count the pinned host bytes the stager holds (the device buffers hold as many)."""
        return sum(s.nbytes for s in self._slots)

    def _stage(self, slot: _Slot, part: Sequence[Any]) -> list[Any]:
        """Queue the copies of ``part`` (host arrays or None) into ``slot``; their device views."""
        cupy = self._cupy
        slot.copied.synchronize()  # the pinned buffers are free once their last copy is done
        self.copy_stream.wait_event(slot.consumed)  # the device buffers once their kernels are
        out: list[Any] = []
        for i, a in enumerate(part):
            if a is None:
                out.append(None)
                continue
            if not isinstance(a, np.ndarray) and hasattr(a, "__cuda_array_interface__"):
                out.append(cupy.asarray(a))  # already on a device: nothing to stage
                continue
            a = np.asarray(a)
            dtype = a.dtype.newbyteorder("=")  # the device reads native byte order
            if a.size == 0:
                out.append(cupy.empty(a.shape, dtype=dtype))
                continue
            host, device = slot.buffers(i, a.nbytes)
            pinned = host[: a.nbytes].view(dtype).reshape(a.shape)
            np.copyto(pinned, a)  # pageable -> pinned, here, while the GPU reduces the previous part
            view = device[: a.nbytes].view(dtype).reshape(a.shape)
            view.set(pinned, stream=self.copy_stream)  # pinned -> device, asynchronous
            out.append(view)
        slot.copied.record(self.copy_stream)
        return out

    def reduce(
        self,
        parts: Iterable[Sequence[Any]],
        chunk: Callable[..., S],
        merge: Callable[[S, S], S],
        initial: S | None = None,
    ) -> S | None:
        """``merge(...merge(merge(initial, chunk(*p0)), chunk(*p1))...)`` over the device copies of ``parts``."""
        cupy = self._cupy
        pending: deque[tuple[_Slot, list[Any]]] = deque()
        free = deque(self._slots)
        source = iter(parts)
        exhausted = False
        state = initial

        def refill() -> None:
            """Start copies into every free slot while parts remain."""
            nonlocal exhausted
            while free and not exhausted:
                part = next(source, None)
                if part is None:
                    exhausted = True
                    return
                slot = free.popleft()
                pending.append((slot, self._stage(slot, part)))

        with cupy.cuda.Device(self.device_id):
            caller = cupy.cuda.get_current_stream()
            self.compute_stream.wait_event(caller.record())  # e.g. the kernels that made ``initial``
            try:
                refill()
                while pending:
                    slot, arrays = pending.popleft()
                    with self.compute_stream:
                        self.compute_stream.wait_event(slot.copied)
                        result = chunk(*arrays)
                        state = result if state is None else merge(state, result)
                        slot.consumed.record(self.compute_stream)
                    del arrays, result
                    free.append(slot)
                    refill()  # the next copy goes in while the GPU works on this part
                # A device-side wait, not a host one: the chunk task returns while the GPU works.
                caller.wait_event(self.compute_stream.record())
            except BaseException:
                # Leave nothing in flight that reads or writes buffers a later call reuses.
                self.copy_stream.synchronize()
                self.compute_stream.synchronize()
                raise
        return state

    def close(self) -> None:
        """Wait for the streams and let go of the buffers (they return to CuPy's pools)."""
        self.copy_stream.synchronize()
        self.compute_stream.synchronize()
        self._slots = [_Slot(self._cupy) for _ in self._slots]


_local = threading.local()


def stager(depth: int = DEPTH) -> Stager:
    """Get the calling thread's :class:`Stager` for the current CUDA device (made on first use, then reused)."""
    import cupy  # lazy: cupy

    cache: dict[tuple[int, int], Stager] | None = getattr(_local, "stagers", None)
    if cache is None:
        cache = _local.stagers = {}
    key = (int(cupy.cuda.Device().id), int(depth))
    if key not in cache:
        cache[key] = Stager(depth)
    return cache[key]


def release() -> None:
    """Close the calling thread's stagers (their pinned and device buffers go back to CuPy's pools)."""
    for s in getattr(_local, "stagers", {}).values():
        s.close()
    _local.stagers = {}
