"""``Accumulator``: the same statistics over a stream of in-memory batches (no Dask needed)."""

from __future__ import annotations

import datetime
import threading
from collections.abc import Iterable, Iterator, Sequence, Sized
from typing import Any, Literal

import numpy as np
from array_api_compat import is_array_api_obj, is_cupy_array

from daskbatch._common import Device, checked_device, gpu_module
from daskbatch.engine.inputs import check_label, check_numeric, check_weight_range
from daskbatch.engine.planner import max_classes
from daskbatch.engine.reduce import to_host
from daskbatch.engine.run_options import on_device
from daskbatch.runtime.progress import Progress, ProgressCallback
from daskbatch.stats import Bundle, ClassMoments, CoMoments, Histogram, Moments
from daskbatch.stats._base import reads_label
from daskbatch.stats.classes import validate_classes
from daskbatch.stats.kernels.path import stager
from daskbatch.stats.ranges import histogram_ranges
from daskbatch.stats.spec import (
    CLASS_MOMENTS,
    COV,
    HIST,
    MI,
    MOMENTS,
    NAN_POLICIES,
    configured,
    counts_by_label,
    counts_histograms,
    grouped_statistics,
    names_of,
    requested,
    target_statistics,
    user_statistics,
)
from daskbatch.summary import Summary


class Accumulator:
    """Mergeable running statistics for batches that are not Dask arrays (e.g. a data loader).

    Parameters
    ----------
    stats : sequence of {"moments", "cov", "hist", "mi"} and statistic objects, optional
        Defaults to moments and co-moments, plus histograms and mutual
        information when ``range`` is given. A stream is read once, so
        histograms need ``range`` up front. Built-in statistic objects
        (``Moments(ddof=0)``, ``Histogram(bins=32, range=(0, 1))``,
        ``MutualInformation(base=2)``) carry their parameters, as in
        :func:`daskbatch.describe`; a user's statistic lands in ``summary().extra[name]``.
    bins : int, optional
        Shortcut: histogram bins per feature (default 64).
    range : (lo, hi) or array of shape (D, 2), optional
        Shortcut: histogram range(s).
    ddof : int, optional
        Shortcut for the statistics' ``ddof`` (default 1).
    bias : bool, optional
        Shortcut for :class:`~daskbatch.stats.Moments`' ``bias`` (default True).
    nan_policy : {"omit", "propagate"}, optional
        Shortcut for :class:`~daskbatch.stats.Moments`' ``nan_policy`` (default "omit").
    feature_names : sequence of str, optional
        Names of the features.
    classes : sequence of int, optional
        Class values of the labels (for ``"mi"``); a label outside them is an
        error. Without it the labels must be ``0..K-1`` with K at most
        ``daskbatch.max-classes``.
    device : {"auto", "cpu", "gpu"}, default "auto"
        ``"auto"`` reduces each batch where it lives (NumPy on the CPU, CuPy on
        the GPU). ``"cpu"`` copies GPU batches to the host. ``"gpu"`` copies host batches to the GPU: one by one in
        :meth:`update`, and with the copy of the next batch in flight while
        the current one is reduced in :meth:`update_many` (pinned buffers,
        two CUDA streams; states identical to :meth:`update` one by one).
    groups : bool, default False
        The label of each batch holds integer group keys, as
        ``describe(groups=...)`` takes them: moments by group (and, with
        histograms, histograms by group), up to ``daskbatch.max-classes`` groups.
    target : bool, default False
        The label of each batch is a continuous target, as
        ``describe(target=...)`` takes it: its co-moments with every feature
        (``f_regression``, ``r_regression``). Its binned mutual information
        needs quantile cuts that a stream read once cannot find: not here.

    Examples
    --------
    >>> import numpy as np, daskbatch as db
    >>> acc = db.Accumulator(stats=("moments",))
    >>> for batch in np.array_split(np.arange(10.0).reshape(5, 2), 3):
    ...     _ = acc.update(batch)
    >>> acc.summary().mean.to_numpy()
    array([4., 5.])
    """

    def __init__(
        self,
        stats: str | Sequence[Any] | None = None,
        *,
        bins: int | None = None,
        range: Any = None,  # noqa: A002 - numpy.histogram's name
        ddof: int | None = None,
        bias: bool | None = None,
        nan_policy: Literal["omit", "propagate"] | None = None,
        feature_names: Sequence[str] | None = None,
        classes: Sequence[int] | None = None,
        device: Device = "auto",
        groups: bool = False,
        target: bool = False,
    ) -> None:
        self.device = checked_device(device)
        if self.device == "gpu":
            gpu_module("Accumulator")  # here, not at the first batch: one error type for a missing GPU
        if stats is None:
            stats = names_of((MOMENTS, COV) + ((HIST, MI) if range is not None else ()))
        asked = configured(stats, bins=bins, range=range, ddof=ddof, bias=bias, nan_policy=nan_policy, classes=classes)
        self._wanted = requested(asked)
        self.groups, self.target = bool(groups), bool(target)
        if self.groups and self.target:
            raise ValueError("give groups=True or target=True, not both: each batch has one label")
        if self.groups:  # the label of each batch holds group keys: moments (and histograms) by group
            self._wanted = grouped_statistics(self._wanted)
        self._target_stats: tuple[Any, ...] = ()
        self._target_dtype: str | None = None
        if self.target:  # the label of each batch is a continuous target: its co-moments with every feature
            self._wanted, self._target_stats, binned, _ = target_statistics(asked, self._wanted, 2)
            if binned is not None:
                raise ValueError("mutual information with a continuous target needs its quantile cuts, which a "
                                 "stream read once cannot find: leave 'mi' and 'hist' out, or use describe(target=...)")
        self.stats = names_of(self._wanted)
        self.user_stats = user_statistics(asked)  # a user's statistics, fused after the built-in ones
        moments, self.mi, self.cov_rows = asked.moments, asked.mi, asked.cov.rows
        if moments.nan_policy not in NAN_POLICIES[:2]:
            raise ValueError(f"nan_policy must be 'omit' or 'propagate' for a stream, got {moments.nan_policy!r}")
        if counts_histograms(self._wanted) and asked.histogram.range is None:
            raise ValueError(
                "histograms of a stream need range=(lo, hi) (or one per feature): a stream is read once"
            )
        self.bins, self.range = asked.histogram.bins, asked.histogram.range
        self.ddof, self.bias, self.nan_policy = moments.ddof, moments.bias, moments.nan_policy
        self.feature_names = None if feature_names is None else tuple(str(n) for n in feature_names)
        self.max_classes = max_classes()
        self.classes = None if asked.mi.classes is None else validate_classes(asked.mi.classes, self.max_classes)
        self._bundle: Bundle | None = None
        self._state: tuple[Any, ...] | None = None
        self._rows = 0
        self._batches = 0
        self._n_features = 0
        self._weighted: bool | None = None  # fixed by the first batch: every batch has weights, or none does

    def _make_bundle(self, n_features: int) -> Bundle:
        stats: list[Any] = [Moments(ddof=self.ddof, bias=self.bias, nan_policy=self.nan_policy)]
        if COV in self._wanted:
            stats.append(CoMoments(ddof=self.ddof, rows=self.cov_rows))
        if CLASS_MOMENTS in self._wanted:
            stats.append(ClassMoments(ddof=self.ddof, classes=self.classes))
        if counts_histograms(self._wanted):
            lo, hi = histogram_ranges(self.range, n_features)
            by_label = counts_by_label(self._wanted)
            stats.append(Histogram(
                bins=self.bins, lo=lo, hi=hi, by_label=by_label, classes=self.classes if by_label else None,
                max_classes=self.max_classes,
            ))
        return Bundle((*stats, *self._target_stats, *self.user_stats))

    def __repr__(self) -> str:
        return f"<daskbatch.Accumulator stats={list(self.stats)} rows={self._rows:,} batches={self._batches}>"

    @property
    def rows(self) -> int:
        """Count the rows seen so far.

        Returns
        -------
        int
            Rows.
        """
        return self._rows

    def update(self, batch: Any, label: Any = None, w: Any = None) -> Accumulator:
        """Add a (rows, features) batch (NumPy or CuPy) and, for mutual information, its labels.

        Parameters
        ----------
        batch : array
            NumPy or CuPy, (rows, features).
        label : array, optional
            One integer class per row.
        w : array, optional
            One sample weight per row (non-negative and finite), as
            ``describe(weights=...)`` takes them. Every batch has weights, or
            none does.

        Returns
        -------
        Accumulator
            This accumulator, updated.
        """
        weighted = self._check_weighted(w, self._batches)
        batch, label = self._checked(batch, label, self._batches)
        w = None if w is None else _checked_weights(w, int(batch.shape[0]), self._batches)
        batch, label = self._on_device(batch, label)
        assert self._bundle is not None
        state = self._chunk(batch, label, w)
        self._state = state if self._state is None else self._bundle.merge(self._state, state)
        self._weighted = weighted
        self._n_features = int(batch.shape[1])
        self._rows += int(batch.shape[0])
        self._batches += 1
        return self

    def _check_weighted(self, w: Any, index: int) -> bool:
        """Whether batch ``index`` is weighted, refusing a stream that mixes weighted and unweighted batches."""
        weighted = w is not None
        if self._weighted is not None and weighted != self._weighted:
            raise ValueError(f"batch {index} {'has' if weighted else 'lacks'} weights (w=); "
                             f"earlier batches {'had none' if weighted else 'had them'}: every batch has weights, or none does")
        return weighted

    def update_many(
        self, batches: Iterable[Any], *, progress: bool | ProgressCallback = False,
        cancel: threading.Event | None = None,
    ) -> Accumulator:
        """Add every batch of ``batches`` (arrays, ``(batch, label)`` pairs or ``(batch, label, w)`` triples), in order.

        The states are those of calling :meth:`update` on each batch in turn.
        With ``device="gpu"`` host batches go through pinned buffers on a copy
        stream, so that batch *i + 1* is read from ``batches`` and copied while
        batch *i* is reduced. A bad batch raises before anything of this call
        is added (the accumulator keeps the state it had).

        Parameters
        ----------
        batches : iterable
            Arrays, ``(batch, label)`` pairs, or ``(batch, label, w)`` triples
            (``w``: the sample weights, as in :meth:`update`).
        progress : bool or callable, default False
            True draws a progress bar; a callable is called as
            ``progress(done, total, "update_many")`` after every batch taken
            (``total`` is None when ``batches`` has no length).
        cancel : threading.Event, optional
            Set it (from another thread) to stop at the next batch with
            :class:`~daskbatch.Cancelled`; as for a bad batch, nothing of this call is added.

        Returns
        -------
        Accumulator
            This accumulator, updated.
        """
        seen: list[int] = []  # rows of the batches taken, committed at the end
        bundle_before, features_before, weighted_before = self._bundle, self._n_features, self._weighted
        total = len(batches) if isinstance(batches, Sized) else None
        bar = Progress("update_many", total, unit="batches", cancel=cancel, progress=progress)

        def parts() -> Iterator[tuple[Any, ...]]:
            """Check and yield ``(batch, label)`` (weighted: ``(batch, label, w)``) of each item, counting the rows."""
            for item in batches:
                index = self._batches + len(seen)
                batch, label, w = self._parts(item)
                self._weighted = self._check_weighted(w, index)
                batch, label = self._checked(batch, label, index)
                seen.append(int(batch.shape[0]))
                self._n_features = int(batch.shape[1])  # later batches are checked against it
                bar.advance()  # raises Cancelled once cancel is set
                yield (batch, label) if w is None else (batch, label, _checked_weights(w, int(batch.shape[0]), index))

        try:
            with bar:
                state = self._reduced(parts())
        except BaseException:
            self._bundle, self._n_features, self._weighted = bundle_before, features_before, weighted_before
            raise
        self._state = state
        self._rows += sum(seen)
        self._batches += len(seen)
        return self

    def _reduced(self, parts: Iterator[tuple[Any, ...]]) -> Any:
        """The state after adding every part to this accumulator's state (which is left as it is)."""
        if self.device == "gpu":
            return stager().reduce(parts, self._chunk, self._merge, initial=self._state)
        state = self._state
        for part in parts:
            batch, label = self._on_device(*part[:2])
            new = self._chunk(batch, label, *part[2:])
            state = new if state is None else self._merge(state, new)
        return state

    def _on_device(self, batch: Any, label: Any) -> tuple[Any, Any]:
        """``batch`` and ``label`` where ``device`` says: as they are, on the host, or on the GPU."""
        return on_device(batch, self.device), None if label is None else on_device(label, self.device)

    def _chunk(self, batch: Any, label: Any, w: Any = None) -> tuple[Any, ...]:
        """The states of one batch, weighted when ``w`` is given."""
        assert self._bundle is not None
        if w is None:
            return self._bundle.chunk(batch, label)
        # the weights follow the batch to the GPU or the host
        return self._bundle.chunk(batch, label, weights=on_device(w, "gpu" if is_cupy_array(batch) else "cpu"))

    def _merge(self, a: tuple[Any, ...], b: tuple[Any, ...]) -> tuple[Any, ...]:
        assert self._bundle is not None
        return self._bundle.merge(a, b)

    @staticmethod
    def _parts(item: Any) -> tuple[Any, Any, Any]:
        """``(batch, label, w)`` from an item of :meth:`update_many` (a batch alone has no label or weights)."""
        if isinstance(item, tuple):
            if len(item) not in (2, 3):
                raise ValueError(f"expected a batch, a (batch, label) pair or a (batch, label, w) triple, "
                                 f"got a tuple of {len(item)}")
            return item[0], item[1], item[2] if len(item) == 3 else None
        return item, None, None

    def _checked(self, batch: Any, label: Any, index: int) -> tuple[Any, Any]:
        """``batch`` and ``label`` validated (and the statistics made on the first batch)."""
        # Arrays of any array-API library (CuPy included, which may lack __array_namespace__)
        # stay where they are: NumPy would copy them to the host, or refuse (CuPy).
        if not is_array_api_obj(batch):
            batch = np.asarray(batch)
        check_numeric(batch.dtype, "batch")
        if batch.ndim != 2:
            raise ValueError(f"batch has shape {tuple(batch.shape)}; expected 2-D (samples, features)")
        n_features = batch.shape[1]
        if self._bundle is None:
            if self.feature_names is not None and len(self.feature_names) != n_features:
                raise ValueError(f"{len(self.feature_names)} feature names for {n_features} features")
            self._bundle = self._make_bundle(n_features)
        if (self._state is not None or index > self._batches) and n_features != self._n_features:
            raise ValueError(
                f"batch {index} has {n_features} features; earlier batches had {self._n_features}"
            )
        readers = [s for s in self._bundle.stats if reads_label(s)]
        if readers:
            if label is None:
                what = ("mutual information" if all(isinstance(s, Histogram) for s in readers)
                        else f"statistic(s) {', '.join(s.name for s in readers)}")
                raise ValueError(f"batch {index}: {what} needs the label of every batch")
            label = label if is_array_api_obj(label) else np.asarray(label)
            if self.target:
                label = self._checked_target(label, batch.shape[0], index)
            else:
                check_label(label, batch.shape[0], "batch")
        elif label is not None:
            label = None  # no statistic reads labels
        return batch, label

    def _checked_target(self, target: Any, rows: int, index: int) -> Any:
        """Batch ``index``'s continuous target: 1-D, one real value per row, as float64."""
        check_numeric(target.dtype, f"batch {index}'s target")
        if target.ndim != 1 or target.shape[0] != rows:
            raise ValueError(f"batch {index}'s target has shape {tuple(target.shape)}; expected ({rows:,},), one per row")
        if self._target_dtype is None:
            self._target_dtype = str(target.dtype)
        return target.astype(np.float64) if target.dtype != np.float64 else target

    def merge(self, other: Accumulator) -> Accumulator:
        """Fold ``other`` (same settings) into this accumulator, as if its batches came here.

        Parameters
        ----------
        other : Accumulator
            An accumulator with the same settings.

        Returns
        -------
        Accumulator
            This accumulator, updated.
        """
        if (other.stats, other.bins, other.ddof, other.nan_policy) != (self.stats, self.bins, self.ddof, self.nan_policy):
            raise ValueError("cannot merge accumulators with different stats, bins, ddof or nan_policy")
        if other._state is None:
            return self
        if self._state is not None and self._weighted != other._weighted:
            raise ValueError("cannot merge a weighted accumulator with an unweighted one")
        self._weighted = other._weighted
        if self._state is None:
            self._bundle, self._state, self._n_features = other._bundle, other._state, other._n_features
        else:
            if other._bundle != self._bundle:
                raise ValueError("cannot merge accumulators with different histogram ranges or feature counts")
            assert self._bundle is not None
            self._state = self._bundle.merge(self._state, other._state)
        self._rows += other._rows
        self._batches += other._batches
        return self

    def summary(self) -> Summary:
        """Finalize the statistics of every batch seen so far.

        Returns
        -------
        Summary
            The summary.
        """
        if self._state is None or self._bundle is None:
            raise ValueError("no batches yet: call update(batch) first")
        results = to_host(self._bundle.finalize(self._state))
        by_name = dict(zip((s.name for s in self._bundle.stats), results, strict=True))
        names = self.feature_names or tuple(f"f{i}" for i in range(self._n_features))
        provenance = {
            "source": "Accumulator", "rows": self._rows, "batches": self._batches,
            "features": self._n_features, "stats": list(self.stats), "ddof": self.ddof,
            "nan_policy": self.nan_policy, **({"weights": "w"} if self._weighted else {}),
            **({"grouped": True} if self.groups else {}),
            **({"target": {"dtype": self._target_dtype}} if self.target else {}),
            **({"cov_rows": self.cov_rows} if COV in self._wanted else {}),
            "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        }
        return Summary.from_results(names, by_name, provenance, mi_base=self.mi.base, miller_madow=self.mi.miller_madow)


def _checked_weights(w: Any, rows: int, index: int) -> Any:
    """The weights of batch ``index``: 1-D, one per row, real, non-negative and finite."""
    if not is_array_api_obj(w):
        w = np.asarray(w)
    check_numeric(w.dtype, f"batch {index}'s weights")
    if w.ndim != 1 or w.shape[0] != rows:
        raise ValueError(f"batch {index}'s weights have shape {tuple(w.shape)}; expected ({rows:,},), one per row")
    host = to_host(w)
    if not bool(np.all(np.isfinite(host))) or bool(np.any(host < 0)):
        raise ValueError(f"batch {index}'s weights must be finite and non-negative")
    if host.shape[0] and host.dtype.kind == "f":
        check_weight_range(host, f"batch {index}'s weights:")
    return w
