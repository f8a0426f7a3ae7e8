"""Type aliases shared by the statistics (until array-api-typing exists)."""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

#: Any array-API array: numpy, cupy, array_api_strict.
Array: TypeAlias = Any
#: An array-API namespace module, as returned by ``array_namespace``.
Namespace: TypeAlias = Any

#: Where blocks are computed, the one vocabulary of every ``device`` argument and ``--device``
#: option: the GPU when it pays (``"auto"``), the host, or the GPU (CuPy).
Device: TypeAlias = Literal["auto", "cpu", "gpu"]
#: The values of :data:`Device`, in order.
DEVICES: tuple[Device, ...] = ("auto", "cpu", "gpu")
