"""Steps of :func:`daskbatch.transform`: small frozen dataclasses that turn a block of rows into another.

>>> import daskbatch as db
>>> steps = [db.steps.select(selection), db.steps.standardize(summary),      # doctest: +SKIP
...          db.steps.clip(-5, 5)]
>>> db.transform("data.zarr", steps, out="z.zarr")                         # doctest: +SKIP

Each step has

``apply(block)``
    the (rows, features) block transformed, written against the array API
    standard, so NumPy and CuPy blocks both work (and stay where they are);
``output_features(names)``
    the names of the output columns for input columns ``names``;
``bind(names)``
    the step fitted to input columns ``names`` (``standardize`` picks the
    mean and std of the columns a ``select`` kept); it raises ``ValueError``
    naming the mismatch when the step cannot apply to those columns;
``describe()``
    a JSON-able description, stored as provenance (and compared on resume).

The constructors (:func:`select`, :func:`standardize`, :func:`minmax`,
:func:`robust`, :func:`quantile_transform`, :func:`log1p`, :func:`impute`,
:func:`clip`, :func:`project`) live in this package, ``db.steps``, and not at the top level:
``db.select`` already names feature *selection* from a summary.
"""

from __future__ import annotations

from daskbatch.transforms.steps.columns import (
    Clip,
    Project,
    Select,
    Step,
    apply_all,
    bind_all,
    clip,
    project,
    select,
)
from daskbatch.transforms.steps.scaling import (
    Impute,
    Log1p,
    QuantileTransform,
    Rescale,
    Standardize,
    impute,
    log1p,
    minmax,
    quantile_transform,
    robust,
    standardize,
)

__all__ = [
    "Clip", "Impute", "Log1p", "Project", "QuantileTransform", "Rescale", "Select", "Standardize", "Step",
    "apply_all", "bind_all", "clip", "impute", "log1p", "minmax", "project", "quantile_transform", "robust",
    "select", "standardize",
]
