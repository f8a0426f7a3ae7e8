"""Non-numeric columns (strings, categoricals, datetimes, ...) profiled with mergeable states.

Per column: counts of values and nulls, a HyperLogLog of distinct values, a Misra-Gries summary of
the most frequent (Agarwal et al., "Mergeable summaries", 2012) and datetime extrema. Values are
hashed with :func:`pandas.util.hash_array` (fixed key), so states from different workers merge.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from typing import Any

import numpy as np

from daskbatch.stats._base import State, merge_all

#: Columns of the DataFrame :func:`categorical_frame` makes, in order.
COLUMNS = (
    "dtype", "count", "null_count", "distinct", "distinct_error", "top", "top_count", "top_error", "min", "max",
    "mi", "chi2", "chi2_dof", "chi2_pvalue", "top_k",
)


def is_profiled(dtype: Any) -> bool:
    """Whether a pandas column of ``dtype`` is profiled here (not a number, not a boolean)."""
    from pandas.api import types  # lazy: pandas

    return not (types.is_numeric_dtype(dtype) or types.is_bool_dtype(dtype))


@dataclass
class ColumnState:
    """One column's mergeable state: counts, HyperLogLog registers, Misra-Gries counters, datetime extremes."""

    dtype: str
    #: "value", or "datetime"/"timedelta" (counter keys and extremes are then int64 nanoseconds).
    kind: str
    count: int
    null_count: int
    registers: np.ndarray
    counters: dict[Any, int]
    #: What pruning subtracted in all: each counter is at most this much below its value's true count.
    undercount: int = 0
    low: int | None = None
    high: int | None = None
    tz: str | None = None
    #: Whether pruning ever dropped a value (else the counters are every value, counted exactly).
    pruned: bool = field(default=False)
    #: Counts by class of each value (value -> class -> count): kept only while nothing is pruned (exact).
    joint: dict[Any, dict[Any, int]] | None = None


@dataclass(frozen=True)
class CategoricalState(State):
    """Every column's state as plain arrays (no pickle): ``columns`` as UTF-8 JSON, ``registers`` one HyperLogLog row a column."""

    columns: np.ndarray
    registers: np.ndarray


@dataclass(frozen=True)
class CategoricalProfile:
    """Count, nulls, approximate distinct count, top values and datetime extremes of non-numeric columns.

    Parameters
    ----------
    top_k : int, default 10
        How many of the most frequent values a result lists.
    counters : int, default 256
        Misra-Gries counters kept per column (k'). The counts are exact while a
        column has at most ``counters`` distinct values; otherwise each estimated
        count ``f_hat`` of a value with true count ``f`` satisfies
        ``f - n / (counters + 1) <= f_hat <= f`` (n: the column's values), and the
        result's ``top_error`` is the bound actually reached (what pruning took).
    precision : int, default 14
        HyperLogLog registers ``m = 2**precision``: the distinct count's relative
        standard error is ``1.04 / sqrt(m)`` (0.81 % at 14), with Ertl's estimator
        (2017), unbiased from one value to billions. While no counter was pruned
        the distinct count is exact (the counters hold every value).
    """

    top_k: int = 10
    counters: int = 256
    precision: int = 14
    name = "categorical"

    def __post_init__(self) -> None:
        if not 1 <= self.top_k <= self.counters:
            raise ValueError(f"top_k must be between 1 and counters ({self.counters}), got {self.top_k}")
        if not 4 <= self.precision <= 18:
            raise ValueError(f"precision must be between 4 and 18, got {self.precision}")

    @property
    def params(self) -> dict[str, int]:
        """The parameters, as :class:`CategoricalProfile` takes them (saved with a summary's state)."""
        return asdict(self)

    def chunk(self, frame: Any, label: Any = None) -> dict[str, ColumnState]:
        """Make the states of every column of one block (a pandas DataFrame), with its rows' classes if given."""
        if label is not None:
            label = np.asarray(label.get() if hasattr(label, "get") else label)  # CuPy: to the host
        return {str(name): self._column(frame[name], label) for name in frame.columns}

    def merge(self, a: dict[str, ColumnState], b: dict[str, ColumnState]) -> dict[str, ColumnState]:
        """Combine the states of two blocks (either may lack a column the other has)."""
        out = dict(a)
        for name, right in b.items():
            out[name] = right if name not in out else self._merged(out[name], right)
        return out

    def finalize(self, state: dict[str, ColumnState]) -> dict[str, dict[str, Any]]:
        """Give each column's result as a JSON-able record (the rows of :func:`categorical_frame`)."""
        return {name: self._record(s) for name, s in state.items()}

    # -- one column

    def _column(self, series: Any, label: np.ndarray | None = None) -> ColumnState:
        """The state of one column of a block (with its joint counts by class when ``label`` is given)."""
        import pandas as pd  # lazy: pandas

        nulls = series.isna().to_numpy()
        values = series[~nulls]
        dtype, kind, tz = str(series.dtype), "value", None
        if pd.api.types.is_datetime64_any_dtype(series.dtype) or pd.api.types.is_timedelta64_dtype(series.dtype):
            kind = "timedelta" if pd.api.types.is_timedelta64_dtype(series.dtype) else "datetime"
            tz = str(series.dt.tz) if kind == "datetime" and series.dt.tz is not None else None
            keys = values.dt.as_unit("ns").array.asi8  # exact int64 nanoseconds
            uniques, codes = np.unique(keys, return_inverse=True)
        elif isinstance(series.dtype, pd.CategoricalDtype):  # the categories are the values; codes count them
            codes = values.cat.codes.to_numpy()
            uniques = np.asarray(series.cat.categories, dtype=object)
        else:
            try:
                codes, found = pd.factorize(values)
            except TypeError:  # unhashable values (lists, dicts): counted by their text
                codes, found = pd.factorize(values.map(repr))
            uniques = np.asarray(found, dtype=object)
        codes = np.asarray(codes, dtype=np.intp)
        counts = np.bincount(codes, minlength=len(uniques))
        joint = None
        if label is not None:  # (value x class) counts of this block's rows with a value
            classes, by_row = np.unique(label[~nulls], return_inverse=True)
            cells = np.bincount(codes * classes.size + by_row, minlength=len(uniques) * classes.size)
            joint = (classes, cells.reshape(len(uniques), classes.size))
        seen = counts > 0
        uniques, counts = uniques[seen], counts[seen]
        if joint is not None:
            joint = (joint[0], joint[1][seen])
        if kind == "value":  # counter keys as JSON holds them, so that a saved or checkpointed state is the same
            uniques, counts, joint = _plain_keys(uniques, counts, joint)
        hashes = pd.util.hash_array(uniques)  # of the keys: a tuple among other values is hashed as its text
        # Registers keep a maximum, so hashing each distinct value once gives the registers of all rows.
        state = ColumnState(dtype, kind, int(values.size), int(nulls.sum()), self._registers(hashes), {}, tz=tz)
        if kind != "value" and uniques.size:
            state.low, state.high = int(uniques.min()), int(uniques.max())
        if uniques.size > self.counters:  # pruned here, before a dict of every value is made
            cut = int(-np.partition(-counts, self.counters)[self.counters])
            keep = counts > cut
            uniques, counts = uniques[keep], counts[keep] - cut
            state.undercount, state.pruned = cut, True
        state.counters = dict(zip(uniques.tolist(), counts.tolist(), strict=True))
        if joint is not None and not state.pruned:
            classes, cells = joint[0].tolist(), joint[1]
            state.joint = {
                v: dict(zip(classes, row.tolist(), strict=True))
                for v, row in zip(state.counters, cells, strict=True)
            }
        return state

    def _registers(self, hashes: np.ndarray) -> np.ndarray:
        """HyperLogLog registers of 64-bit hashes: the first ``precision`` bits pick one, the rest's rank."""
        p, rest = self.precision, 64 - self.precision
        registers = np.zeros(2**p, dtype=np.uint8)
        h = np.asarray(hashes, dtype=np.uint64)
        index = (h >> np.uint64(rest)).astype(np.intp)
        tail = h & np.uint64((1 << rest) - 1)
        bits = np.zeros(h.size, dtype=np.int64)  # bit length of the tail, by halving (no float rounding)
        for shift in (32, 16, 8, 4, 2, 1):
            high = tail >= np.uint64(1 << shift)
            bits[high] += shift
            tail[high] >>= np.uint64(shift)
        bits += tail > 0
        np.maximum.at(registers, index, (rest - bits + 1).astype(np.uint8))
        return registers

    def _pruned(self, s: ColumnState) -> ColumnState:
        """Keep at most ``counters`` counters: subtract the next-largest count from all, keep what stays positive."""
        if len(s.counters) <= self.counters:
            return s
        counts = np.fromiter(s.counters.values(), dtype=np.int64, count=len(s.counters))
        cut = int(-np.partition(-counts, self.counters)[self.counters])  # the (k'+1)-th largest
        s.counters = {v: c - cut for v, c in s.counters.items() if c > cut}
        s.undercount += cut
        s.pruned, s.joint = True, None  # a pruned value's rows by class are lost: no exact joint counts
        return s

    def _merged(self, a: ColumnState, b: ColumnState) -> ColumnState:
        """Two states of one column combined: counts added, registers by maximum, counters added then pruned."""
        counters = dict(a.counters)
        for value, c in b.counters.items():
            counters[value] = counters.get(value, 0) + c
        joint = None
        if a.joint is not None and b.joint is not None:  # both exact: the counts by class add up
            joint = {v: dict(row) for v, row in a.joint.items()}
            for v, row in b.joint.items():
                into = joint.setdefault(v, {})
                for k, c in row.items():
                    into[k] = into.get(k, 0) + c
        lows = [v for v in (a.low, b.low) if v is not None]
        highs = [v for v in (a.high, b.high) if v is not None]
        merged = ColumnState(
            a.dtype, a.kind, a.count + b.count, a.null_count + b.null_count, np.maximum(a.registers, b.registers),
            counters, a.undercount + b.undercount, min(lows, default=None), max(highs, default=None), a.tz,
            a.pruned or b.pruned, joint,
        )
        return self._pruned(merged)

    def _record(self, s: ColumnState) -> dict[str, Any]:
        """One column's JSON-able result."""
        ranked = sorted(s.counters.items(), key=lambda vc: (-vc[1], str(vc[0])))[: self.top_k]
        top = [[self._plain(s, v), int(c)] for v, c in ranked]
        exact = not s.pruned
        return {
            "dtype": s.dtype,
            "count": s.count,
            "null_count": s.null_count,
            "distinct": len(s.counters) if exact else int(round(hyperloglog_estimate(s.registers))),
            "distinct_error": 0.0 if exact else 1.04 / math.sqrt(2**self.precision),  # HyperLogLog's standard error
            "top_k": top,
            "top_error": int(s.undercount),
            "min": None if s.low is None else self._plain(s, s.low),
            "max": None if s.high is None else self._plain(s, s.high),
            **association(s.joint),
        }

    @staticmethod
    def _plain(s: ColumnState, value: Any) -> Any:
        """A value as JSON holds it: text, a boolean, a number, or a datetime's ISO text."""
        import pandas as pd  # lazy: pandas

        if s.kind == "datetime":
            return pd.Timestamp(value, unit="ns", tz=s.tz).isoformat()
        if s.kind == "timedelta":
            return str(pd.Timedelta(value, unit="ns"))
        if isinstance(value, np.generic):
            value = value.item()
        if isinstance(value, bool | int | str) or (isinstance(value, float) and math.isfinite(value)):
            return value
        return str(value)


def association(joint: dict[Any, dict[Any, int]] | None) -> dict[str, Any]:
    """Mutual information (nats, plug-in) and Pearson's chi-squared of exact (value x class) counts; None without."""
    if joint is None:
        return {"mi": None, "chi2": None, "chi2_dof": None, "chi2_pvalue": None}
    classes = sorted({k for row in joint.values() for k in row}, key=str)
    table = np.array([[row.get(k, 0) for k in classes] for row in joint.values()], dtype=np.float64)
    table = table[table.sum(axis=1) > 0] if table.size else table.reshape(0, len(classes))
    if table.shape[0] < 2 or table.shape[1] < 2:  # one value or one class: nothing to associate
        return {"mi": 0.0, "chi2": 0.0, "chi2_dof": 0, "chi2_pvalue": None}
    from scipy.special import chdtrc  # lazy: scipy

    n = table.sum()
    expected = table.sum(axis=1, keepdims=True) * table.sum(axis=0, keepdims=True) / n
    filled = table > 0
    mi = float(np.sum(table[filled] / n * np.log(table[filled] / expected[filled])))
    chi2 = float(np.sum((table - expected) ** 2 / expected))
    dof = (table.shape[0] - 1) * (table.shape[1] - 1)
    return {"mi": max(mi, 0.0), "chi2": chi2, "chi2_dof": int(dof), "chi2_pvalue": float(chdtrc(dof, chi2))}


def hyperloglog_estimate(registers: np.ndarray) -> float:
    """Distinct values from HyperLogLog registers, by Ertl's improved estimator (no bias tables needed)."""
    m = registers.size
    rest = 64 - int(round(math.log2(m)))
    histogram = np.bincount(registers, minlength=rest + 2).astype(np.float64)
    if histogram[0] == m:
        return 0.0
    z = m * _tau(1.0 - histogram[rest + 1] / m)
    for k in range(rest, 0, -1):
        z = 0.5 * (z + histogram[k])
    z += m * _sigma(histogram[0] / m)
    return m * m / (2.0 * math.log(2.0) * z)


def _sigma(x: float) -> float:
    """Ertl's sigma series, for the registers still zero."""
    if x == 1.0:
        return math.inf
    y, z = 1.0, x
    while True:
        x *= x
        before = z
        z += x * y
        y += y
        if z == before:
            return z


def _tau(x: float) -> float:
    """Ertl's tau series, for the registers at their largest value."""
    if x in (0.0, 1.0):
        return 0.0
    y, z = 1.0, 1.0 - x
    while True:
        x = math.sqrt(x)
        before = z
        y *= 0.5
        z -= (1.0 - x) ** 2 * y
        if z == before:
            return z / 3.0


def categorical_frame(records: dict[str, dict[str, Any]] | None) -> Any:
    """The records of :meth:`CategoricalProfile.finalize` as a pandas DataFrame indexed by column name."""
    import pandas as pd  # lazy: pandas

    rows = {}
    for name, r in (records or {}).items():
        first = r["top_k"][0] if r["top_k"] else [None, 0]
        rows[name] = {**{k: r.get(k) for k in COLUMNS}, "top": first[0], "top_count": first[1]}
    # Built as objects, so that a value (top, min, max) stays as it was and an absent one None; then the numbers.
    frame = pd.DataFrame.from_dict(rows, orient="index", columns=list(COLUMNS), dtype=object)
    counts = dict.fromkeys(("count", "null_count", "distinct", "top_count", "top_error"), "int64")
    reals = dict.fromkeys(("distinct_error", "mi", "chi2", "chi2_pvalue"), "float64")
    frame = frame.astype({**counts, **reals, "chi2_dof": "Int64"})
    frame.index.name = "column"
    return frame


def frame_blocks(frame: Any, chunk_rows: Sequence[int]) -> list[Any]:
    """A pandas DataFrame as (rows, Delayed block) of ``chunk_rows`` rows each; a dask DataFrame: its partitions."""
    import dask  # lazy: dask

    bounds = np.cumsum([0, *chunk_rows]).tolist()
    if hasattr(frame, "to_delayed"):
        parts = frame.to_delayed()
    else:  # named by content, as a store's blocks are: a checkpoint resumes on the same values only
        token = _content_token(frame)
        parts = [dask.delayed(frame.iloc[a:b], name=f"frame-{token}-{a}") for a, b in pairwise(bounds)]
    return [(int(rows), part) for rows, part in zip(chunk_rows, parts, strict=True)]


def _content_token(frame: Any) -> str:
    """sha256 of a pandas DataFrame's columns, dtypes and values (unhashable values by their text)."""
    import pandas as pd  # lazy: pandas

    try:
        hashed = pd.util.hash_pandas_object(frame, index=False).to_numpy()
    except (TypeError, ValueError):  # lists, dicts, tuples among other values: by their text, as profiled
        hashed = pd.util.hash_pandas_object(frame.map(repr), index=False).to_numpy()
    digest = hashlib.sha256(repr([list(map(str, frame.columns)), list(map(str, frame.dtypes))]).encode())
    digest.update(hashed.tobytes())
    return digest.hexdigest()


def profile_blocks(
    blocks: Sequence[tuple[int, Any]], split_every: int, profile: CategoricalProfile, chunk_prefix: str, label: Any
) -> Any:
    """A dask Delayed of the merged state of ``blocks`` ((rows, Delayed pandas DataFrame), in row order)."""
    import dask  # lazy: dask
    from dask.base import tokenize  # lazy: dask

    fan_in, name = max(2, int(split_every)), f"{chunk_prefix}-{tokenize(*blocks, label)}"
    level = block_states(blocks, profile, label, name)
    while len(level) > 1:
        level = [
            dask.delayed(merge_all, pure=True)(profile, level[i : i + fan_in])
            for i in range(0, len(level), fan_in)
        ]
    return level[0]


def block_states(
    blocks: Sequence[tuple[int, Any]], profile: CategoricalProfile, label: Any = None, name: str | None = None
) -> list[Any]:
    """One Delayed state per block of ``blocks`` (with its rows of ``label``), in row order; keys ``(name, i)``."""
    import dask  # lazy: dask

    out, start = [], 0
    for i, (rows, frame) in enumerate(blocks):
        part = None if label is None else label[start : start + rows]
        named = {} if name is None else {"dask_key_name": (name, i)}
        out.append(dask.delayed(profile.chunk, pure=True)(frame, part, **named))
        start += rows
    return out


#: Counter keys kept as they are; any other value is keyed by its text (what a result shows of it anyway).
_PLAIN_TYPES = (str, int, float, bool)


def _plain_keys(uniques: np.ndarray, counts: np.ndarray, joint: tuple[Any, Any] | None) -> tuple[Any, Any, Any]:
    """Values that are not text, numbers or booleans as their text, their counts (and joint rows) added up."""
    import pandas as pd  # lazy: pandas

    plain = [v.item() if isinstance(v, np.generic) else v for v in uniques.tolist()]
    if all(type(v) in _PLAIN_TYPES for v in plain):
        return np.asarray(plain, dtype=object), counts, joint
    keys = np.empty(len(plain), dtype=object)
    keys[:] = [v if type(v) in _PLAIN_TYPES else str(v) for v in plain]
    codes, found = pd.factorize(keys)  # two values of one text (b"a" and "b'a'") are one key
    summed = np.zeros(len(found), dtype=np.int64)
    np.add.at(summed, codes, counts)
    if joint is not None:
        cells = np.zeros((len(found), joint[1].shape[1]), dtype=joint[1].dtype)
        np.add.at(cells, codes, joint[1])
        joint = (joint[0], cells)
    return np.asarray(found, dtype=object), summed, joint


def encode_profile(state: dict[str, ColumnState]) -> CategoricalState:
    """A profile's state as a :class:`CategoricalState` of plain arrays (JSON text and registers)."""
    columns = []
    for name, s in state.items():
        joint = s.joint
        classes = [] if joint is None else sorted({k for row in joint.values() for k in row}, key=repr)
        columns.append({
            "name": name, "dtype": s.dtype, "kind": s.kind, "tz": s.tz, "count": s.count,
            "null_count": s.null_count, "undercount": s.undercount, "low": s.low, "high": s.high,
            "pruned": s.pruned, "values": list(s.counters), "counts": list(s.counters.values()),
            "classes": classes,
            "joint": None if joint is None else [[joint.get(v, {}).get(k, 0) for k in classes] for v in s.counters],
        })
    text = json.dumps(columns, separators=(",", ":")).encode()
    registers = [s.registers for s in state.values()]
    return CategoricalState(
        np.frombuffer(text, dtype=np.uint8).copy(),
        np.stack(registers) if registers else np.zeros((0, 0), dtype=np.uint8),
    )


def decode_profile(encoded: CategoricalState) -> dict[str, ColumnState]:
    """The profile's state that :func:`encode_profile` wrote (ValueError when it does not fit together)."""
    columns = json.loads(np.asarray(encoded.columns, dtype=np.uint8).tobytes().decode())
    registers = np.asarray(encoded.registers)
    if not isinstance(columns, list) or registers.ndim != 2 or len(columns) != registers.shape[0]:
        raise ValueError(f"{len(columns)} columns and registers of shape {registers.shape} do not fit together")
    out = {}
    for c, row in zip(columns, registers, strict=True):
        joint = None
        if c["joint"] is not None:
            joint = {v: dict(zip(c["classes"], cells, strict=True)) for v, cells in zip(c["values"], c["joint"], strict=True)}
        out[c["name"]] = ColumnState(
            c["dtype"], c["kind"], c["count"], c["null_count"], row.copy(),
            dict(zip(c["values"], c["counts"], strict=True)), c["undercount"], c["low"], c["high"], c["tz"],
            c["pruned"], joint,
        )
    return out
