"""Type aliases shared by the statistics (until array-api-typing exists)."""

from __future__ import annotations

from typing import Any, TypeAlias

#: Any array-API array: numpy, cupy, array_api_strict.
Array: TypeAlias = Any
#: An array-API namespace module, as returned by ``array_namespace``.
Namespace: TypeAlias = Any
