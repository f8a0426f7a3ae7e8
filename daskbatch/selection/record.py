"""A :class:`Selection`: per feature its score, p-value, rank, whether it was kept and why not."""

from __future__ import annotations

import io
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from daskbatch.io.outputs import MARKER, SELECTION_HEADER, check_output, write_text
from daskbatch.summary.views import json_values

__all__ = ["Selection", "load_selection"]


@dataclass(frozen=True, eq=False)
class Selection:
    """The outcome of :func:`select`: per-feature score, p-value, rank, decision and reason.

    Attributes
    ----------
    feature_names : tuple of str
    score : ndarray of float64, shape (D,)
        The score (for ``"mrmr"``: the mRMR criterion when the feature was
        picked, or after the last pick; NaN for features dropped by a filter).
    pvalue : ndarray of float64 or None
        p-values of ``"f"`` and ``"chi2"``; None for the other scores.
    rank : ndarray of int64
        1 for the best feature (``"mrmr"``: pick order, then the rest).
    selected : ndarray of bool
    reason : tuple of str
        Why each feature was dropped ("" when selected).
    score_name, mode : str
    param : float or str
        The mode's k, percentile or alpha.
    min_variance, max_corr : float or None
    """

    feature_names: tuple[str, ...]
    score: np.ndarray
    pvalue: np.ndarray | None
    rank: np.ndarray
    selected: np.ndarray
    reason: tuple[str, ...]
    score_name: str
    mode: str
    param: Any
    min_variance: float | None = None
    max_corr: float | None = None

    @property
    def indices(self) -> np.ndarray:
        """List the indices of the selected features, ascending.

        Returns
        -------
        numpy.ndarray
            The indices.
        """
        return np.flatnonzero(self.selected)

    @property
    def selected_names(self) -> tuple[str, ...]:
        """List the names of the selected features, in feature order.

        Returns
        -------
        tuple of str
            The names.
        """
        return tuple(self.feature_names[i] for i in self.indices)

    def to_dataframe(self) -> Any:
        """Tabulate the selection, one row per feature.

        Returns
        -------
        pandas.DataFrame
            Indexed by feature name.
        """
        import pandas as pd  # lazy: pandas

        columns: dict[str, Any] = {"score": self.score}
        if self.pvalue is not None:
            columns["pvalue"] = self.pvalue
        columns.update(rank=self.rank, selected=self.selected, reason=list(self.reason))
        return pd.DataFrame(columns, index=pd.Index(list(self.feature_names), name="feature"))

    def _meta(self) -> dict[str, Any]:
        return {
            "score": self.score_name, "mode": self.mode, "param": self.param,
            "min_variance": self.min_variance, "max_corr": self.max_corr,
        }

    def save(
        self, path: str | os.PathLike[str], *, format: Literal["csv", "json"] | None = None,  # noqa: A002
        overwrite: bool = False,
    ) -> str:
        """Write to ``path`` as CSV (a ``#`` header line with the settings, then the table) or JSON.

        Read back with :func:`load_selection`. The file is written beside
        ``path`` and renamed into place; an earlier selection there is replaced,
        another daskbatch output only with ``overwrite``, a file daskbatch did not write never.

        Parameters
        ----------
        path : str or os.PathLike
            The file, or its fsspec URL (an object is written by one PUT).
        format : {"csv", "json"}, optional
            Default: from the file's suffix (``.json``, else CSV).
        overwrite : bool, default False
            Also replace another daskbatch output (never a file daskbatch did not write).

        Returns
        -------
        str
            The path written.
        """
        where = os.fspath(path)
        kind = format or ("json" if where.lower().endswith(".json") else "csv")
        if kind == "json":
            # The marker first: check_output recognises the file as a selection it may replace.
            out = dict({MARKER: "selection"}, **self._meta(), feature_names=list(self.feature_names),
                       score_values=json_values(self.score),
                       pvalue=None if self.pvalue is None else json_values(self.pvalue),
                       rank=self.rank.tolist(), selected=self.selected.tolist(), reason=list(self.reason))
            text = json.dumps(out, indent=1)
        elif kind == "csv":
            # pandas writes floats with repr: they read back bit for bit.
            text = SELECTION_HEADER + json.dumps(self._meta()) + "\n" + self.to_dataframe().to_csv()
        else:
            raise ValueError(f"format must be 'csv' or 'json', got {format!r}")
        return write_text(check_output(where, kind="selection", form="file", overwrite=overwrite), text)

    def __repr__(self) -> str:
        n = int(self.selected.sum())
        names = ", ".join(self.selected_names[:10]) + (", ..." if n > 10 else "")
        return (f"<daskbatch.Selection: {n} of {len(self.feature_names)} features by {self.score_name} "
                f"({self.mode}={self.param}): {names}>")


def load_selection(path: str | os.PathLike[str]) -> Selection:
    """Read a :class:`Selection` written by :meth:`Selection.save` (CSV or JSON, told apart by content).

    Parameters
    ----------
    path : str or os.PathLike
        The file, or its fsspec URL.

    Returns
    -------
    Selection
        The selection.
    """
    where = os.fspath(path)
    import fsspec  # lazy: fsspec

    # A URL (a selection saved to a bucket) through fsspec; a local path as it is, "::" included.
    opener = fsspec.open if "://" in where else open
    try:
        with opener(where, "r", encoding="utf-8") as f:
            return _parsed_selection(f.read())
    except (IsADirectoryError, ValueError, KeyError, TypeError) as exc:  # JSONDecodeError, UnicodeDecodeError too
        detail = " ".join(str(exc).split()) or type(exc).__name__
        raise ValueError(
            f"{where!r} is not a saved selection ({type(exc).__name__}: {detail}); give a file Selection.save wrote"
        ) from None


def _parsed_selection(text: str) -> Selection:
    """The :class:`Selection` in the text of a file :meth:`Selection.save` wrote (JSON or CSV)."""
    if text.lstrip().startswith("{"):
        d = json.loads(text)
        pvalue = None if d["pvalue"] is None else _from_json_floats(d["pvalue"])
        return Selection(
            feature_names=tuple(d["feature_names"]), score=_from_json_floats(d["score_values"]), pvalue=pvalue,
            rank=np.asarray(d["rank"], dtype=np.int64), selected=np.asarray(d["selected"], dtype=bool),
            reason=tuple(d["reason"]), score_name=d["score"], mode=d["mode"], param=d["param"],
            min_variance=d["min_variance"], max_corr=d["max_corr"],
        )
    import pandas as pd  # lazy: pandas

    first, _, body = text.partition("\n")
    if not first.startswith(SELECTION_HEADER):
        raise ValueError(f"no {SELECTION_HEADER.strip()!r} line")
    meta = json.loads(first[len(SELECTION_HEADER):])
    # pandas 2's default float parser could read a written score back 1 ulp off; pandas 3's is exact (and it
    # deprecates the option).
    exact = {"float_precision": "round_trip"} if int(pd.__version__.split(".")[0]) < 3 else {}
    table = pd.read_csv(io.StringIO(body), dtype={"feature": str, "reason": str}, keep_default_na=False,
                        na_values={"score": [""], "pvalue": [""]}, **exact)
    return Selection(
        feature_names=tuple(table["feature"]), score=table["score"].to_numpy(np.float64),
        pvalue=table["pvalue"].to_numpy(np.float64) if "pvalue" in table else None,
        rank=table["rank"].to_numpy(np.int64), selected=table["selected"].to_numpy(bool),
        reason=tuple(table["reason"]), score_name=meta["score"], mode=meta["mode"], param=meta["param"],
        min_variance=meta["min_variance"], max_corr=meta["max_corr"],
    )


def _from_json_floats(values: Sequence[Any]) -> np.ndarray:
    return np.asarray([math.nan if v is None else float(v) for v in values], dtype=np.float64)
