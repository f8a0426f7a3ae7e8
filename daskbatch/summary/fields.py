"""The fields of a :class:`~daskbatch.summary.Summary` by kind, and the names its views give them.

The record and every view (xarray, tables, JSON, files) read these names from
here, so no view needs the record's module to know them.
"""

from __future__ import annotations

#: Per-feature vectors, in the order tables show them.
PER_FEATURE = (
    "count", "nan_count", "posinf_count", "neginf_count",
    "mean", "std", "var", "min", "max", "skew", "kurtosis",
)

#: Fields holding the quantile sketch's internal state: in user outputs only when asked for (``states=True``).
STATE_FIELDS = ("sketch_counts", "sketch_extrema")

#: Per-(feature, class) arrays of the per-class moments.
CLASS_FIELDS = ("class_count", "class_mean", "class_m2")

#: Per-feature co-moments with a continuous target (``describe(x, target=y)``).
TARGET_FIELDS = ("target_count", "target_mean", "target_m2", "target_x_m2", "target_comoment")

#: Variables that :meth:`Summary.to_xarray` stores as int64 counts.
COUNT_FIELDS_INT = (
    "count", "nan_count", "posinf_count", "neginf_count", "class_count", "target_count",
    "hist_counts", "underflow", "overflow", "joint_counts", "sketch_counts", "quantile_counts",
)


#: Probabilities of the quantiles that tables, ``to_xarray`` and ``--json`` show.
DEFAULT_QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)

#: Result names of the built-in statistics (anything else in describe's results is a user's).
BUILT_IN_RESULTS = frozenset({
    "moments", "cov", "hist", "mi", "class_moments", "sketch", "qhist", "target_moments", "target_sketch",
})


def quantile_label(q: float) -> str:
    """Name a quantile's column: ``median`` for 0.5, else ``q`` and the percent (``q01``, ``q25``, ``q99.9``).

    Parameters
    ----------
    q : float
        The probability.

    Returns
    -------
    str
        The label.
    """
    if q == 0.5:
        return "median"
    pct = round(100 * q, 6)
    return f"q{int(pct):02d}" if pct == int(pct) else f"q{pct:g}"
