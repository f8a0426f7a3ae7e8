"""Incremental summaries: merge two summaries, or add new rows to one, as if all rows were described at once."""

from __future__ import annotations

import dataclasses
import datetime
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from daskbatch._common import warn
from daskbatch._version import __version__
from daskbatch.describing import FeatureCountError, describe
from daskbatch.engine.pipeline import input_token, listed_token
from daskbatch.engine.planner import max_classes
from daskbatch.engine.reduce import to_host
from daskbatch.engine.run_options import RunOptions
from daskbatch.stats import ClassMoments, Histogram, Moments, MutualInformation
from daskbatch.stats._base import reads_label
from daskbatch.stats.classes import format_classes
from daskbatch.stats.ranges import flag_out_of_range
from daskbatch.stats.registry import STATISTICS, Kept, declared_state, fused, statistic_params
from daskbatch.stats.spec import normalize_stats
from daskbatch.summary import Summary

__all__ = ["check_not_merged", "describe_settings", "labelled_statistics", "merge", "update"]

#: describe arguments that would change the statistics: update takes them from the summary.
FIXED_OPTIONS = ("stats", "bins", "range")

#: Provenance items that describe the settings (the same for every part), kept by a merge.
_SETTINGS = (
    "stats", "bins", "ddof", "bias", "nan_policy", "range", "range_given", "miller_madow", "features", "grouped", "cov_rows",
)

#: Parameters that may differ between the parts of a merge: class values are merged as a union.
_CLASS_PARAMS = ("classes", "n_classes", "max_classes")


def merge(first: Summary, second: Summary) -> Summary:
    """The summary of the rows of both: what ``describe`` gives on ``first``'s rows followed by ``second``'s.

    Parameters
    ----------
    first, second : Summary
        Summaries of the same features with the same settings (statistics,
        bins, histogram ranges, ddof, bias, nan_policy, MI units), each with
        its states (every summary from :func:`daskbatch.describe` has them,
        saved and loaded with it).

    Returns
    -------
    Summary
        A new summary; its provenance lists the merged sources and their rows.

    Raises
    ------
    ValueError
        A one-line message naming what differs, or the summary without states.

    Examples
    --------
    >>> import numpy as np, daskbatch as db
    >>> x = np.arange(20.0).reshape(10, 2)
    >>> a = db.describe(x[:4], stats="moments")
    >>> b = db.describe(x[4:], stats="moments")
    >>> db.merge(a, b).mean.to_numpy()
    array([ 9., 10.])
    """
    for summary, which in ((first, "first"), (second, "second")):
        _check_has_states(summary, f"the {which} summary")
    assert first.states is not None and second.states is not None
    _check_same_features(first, second)
    _check_same_settings(first, second)
    again = sorted(set(_tokens(first)) & set(_tokens(second)))
    if again:
        raise ValueError(
            f"the rows of {_source_of(second, again[0])} are already in the summary, from "
            f"{_source_of(first, again[0])} (same content, {again[0]}): merging them again would count its rows "
            "twice; nothing was changed"
        )
    ranked = _ranked(first)
    if ranked:
        warn(UserWarning(f"{', '.join(map(repr, ranked))} is left out of the merged summary: its ranks are each "
                         "run's own, so it does not merge; describe all the rows together for it"))
    profile = _merged_profile(first, second)
    a, b = _on_common_classes(first.states, second.states)
    merged = {name: Kept(k.statistic, k.statistic.merge(k.state, b[name].state)) for name, k in a.items()}
    return _summary(first, second, merged, profile)


def update(summary: Summary, new_rows: Any, label: Any = None, **options: Any) -> Summary:
    """Add ``new_rows`` to ``summary``: :func:`merge` of it and ``describe(new_rows)`` with its settings.

    Parameters
    ----------
    summary : Summary
        A summary with states (from :func:`daskbatch.describe` or :func:`daskbatch.load_summary`).
    new_rows : array, Dataset or path
        What :func:`daskbatch.describe` accepts; the same features.
    label : array or name, optional
        The new rows' labels, when the summary has mutual information or per-class moments
        (or ``groups=`` / ``target=`` in ``options``, as the summary was described).
    **options
        Passed to :func:`daskbatch.describe` (``weights``, ``classes``,
        ``target``, ``groups``, ``run``): ``weights=`` weighs the new rows
        (without it each weighs 1, whether or not the summary was weighted).
        What changes the statistics (``stats``, ``bins``, ``range``, the
        feature names) comes from the summary and cannot be given.

    Returns
    -------
    Summary
        A new summary of all the rows.
    """
    run = options.pop("run", None) or RunOptions()
    fixed = sorted(set(options) & set(FIXED_OPTIONS)) + (["feature_names"] if run.feature_names is not None else [])
    if fixed:
        raise TypeError(f"update takes {', '.join(fixed)} from the summary; leave them out")
    _check_has_states(summary, "the summary")
    labelled = labelled_statistics(summary)
    keyed = options.get("groups") is not None or options.get("target") is not None
    if labelled and label is None and not keyed and getattr(new_rows, "label", None) is None:
        raise ValueError(f"the summary holds {' and '.join(labelled)}: give the new rows' label")
    settings = describe_settings(summary)
    kept: RunOptions = settings.pop("run")
    # A store's own names are checked against the summary's by merge; a split_every given wins.
    names = None if _carries_names(new_rows) else kept.feature_names
    run = dataclasses.replace(run, feature_names=names, split_every=run.split_every or kept.split_every)
    x = new_rows.x if hasattr(new_rows, "x") and hasattr(new_rows, "feature_names") else new_rows  # a Dataset's
    shape: tuple[int, ...] = tuple(getattr(x, "shape", ()))
    # An array's width, known without reading it (a DataFrame's columns hold its label and text too).
    if len(shape) == 2 and not hasattr(x, "columns") and shape[1] != len(summary.feature_names):
        raise _other_features(len(summary.feature_names), int(shape[1]))
    try:
        described = describe(new_rows, label, **settings, **options, run=run)
    except FeatureCountError as exc:  # a store's: the summary's ranges are checked before any data is read
        raise _other_features(exc.given, exc.data) from None
    return merge(summary, described)


def _other_features(given: int, data: int) -> FeatureCountError:
    """The error of new rows with another number of features than the summary's."""
    return FeatureCountError(given, data, f"the summary has {given:,} features and the new rows {data:,}: "
                             "update adds rows of the same features")


def check_not_merged(summary: Summary, data: Any, where: str = "the new rows") -> None:  # numpydoc ignore=PR01
    """Refuse, before any compute, new rows that ``summary`` already holds."""
    held = _tokens(summary)
    token = input_token(data)  # None for a store without chunk checksums: merge checks it once read
    if token is None or token not in held:
        # A summary saved by an earlier daskbatch holds listing tokens: the same store, untouched, has it.
        listed = listed_token(data) if any(" files, " in t for t in held) else None
        token = listed if listed in held else None
    if token is not None:
        raise ValueError(
            f"{where} are already in the summary, from {_source_of(summary, token)} (same content, {token}): "
            "updating it again would count those rows twice; nothing was changed"
        )


def _source_of(summary: Summary, token: str) -> str:
    """Name the source of ``summary`` whose rows have ``token`` (its path, else its description)."""
    sources = _sources(summary.provenance)
    found = [s for s in sources if s.get("input_token") == token] or (sources if len(sources) == 1 else [])
    if not found:
        return "one of its parts"  # merged by a daskbatch that did not record each part's token
    return str(found[0].get("path") or found[0].get("source") or "one of its parts")


def _tokens(summary: Summary) -> list[str]:
    """The content tokens of the inputs ``summary`` holds (none for summaries made before they were recorded)."""
    return [str(t) for t in summary.provenance.get("input_tokens") or ()]


def describe_settings(summary: Summary) -> dict[str, Any]:  # numpydoc ignore=PR01,RT01
    """Find the :func:`daskbatch.describe` arguments that reproduce ``summary``'s statistics on other rows."""
    _check_has_states(summary, "the summary")
    assert summary.states is not None
    split_every = summary.provenance.get("split_every")
    if "moments" not in summary.states:  # a table of text, categories or times only: its profile alone
        return {"stats": ["moments"], "run": RunOptions(feature_names=[], split_every=split_every)}
    moments = summary.states["moments"].statistic
    builtin = [name for name, k in summary.states.items() if fused(k.statistic)]
    names = [n for n in summary.provenance.get("stats") or builtin if n not in _ranked(summary)]
    stats: list[Any] = [*names, Moments(ddof=moments.ddof, bias=moments.bias, nan_policy=moments.nan_policy)]
    hist = summary.states["hist"].statistic if "hist" in summary.states else None
    if MutualInformation.name in normalize_stats(names):
        cuts: dict[str, Any] = {} if hist is None or hist.target_cuts is None else {"target_bins": list(hist.target_cuts)}
        stats.append(MutualInformation(base=2 if summary.provenance.get("mi_units") == "bits" else "e",
                                       miller_madow=bool(summary.provenance.get("miller_madow", False)), **cuts))
    # a user's statistics are passed as the objects the summary kept (their parameters included)
    cov = summary.states.get("cov")
    if cov is not None and getattr(cov.statistic, "rows", "complete") == "pairwise":  # the new rows' pairs alike
        stats = [cov.statistic if s == "cov" else s for s in stats]
    settings: dict[str, Any] = {"stats": stats + _user_statistics(summary)}
    if hist is not None:
        settings.update(bins=hist.bins, range=np.column_stack([hist.lo, hist.hi]))
    settings["run"] = RunOptions(feature_names=list(summary.feature_names),
                                 split_every=None if split_every is None else int(split_every))
    return settings


def labelled_statistics(summary: Summary) -> list[str]:  # numpydoc ignore=PR01,RT01
    """List what in ``summary`` needs the label of new rows."""
    states = summary.states or {}
    found = []
    if "hist" in states and states["hist"].statistic.by_label:
        found.append("mutual information")
    if "class_moments" in states:
        found.append("per-class moments")
    found += [f"statistic {name!r}" for name, k in states.items() if name != "hist" and
              not fused(k.statistic) and reads_label(k.statistic)]
    return found


def _user_statistics(summary: Summary) -> list[Any]:
    """The user's statistics whose states ``summary`` keeps, in order."""
    return [k.statistic for k in (summary.states or {}).values() if not fused(k.statistic)]


# ------------------------------------------------------------------ checks


def _check_has_states(summary: Summary, which: str) -> None:
    if summary.states is not None:
        missing = [n for n in summary.provenance.get("user_statistics") or () if n not in summary.states]
        if missing:
            raise ValueError(
                f"{which} was loaded without the state of statistic(s) {', '.join(missing)}: "
                "pass them to load_summary(path, statistics=[...]) to merge or update it"
            )
        return
    if summary.provenance.get("tiled_cov"):
        why = "its covariance was computed tile by tile into a store, which keeps no mergeable state"
    else:
        why = "it was made without them (an Accumulator, or saved by an older daskbatch)"
    raise ValueError(f"{which} holds no mergeable states ({why}); describe all the rows together instead")


def _check_same_features(first: Summary, second: Summary) -> None:
    a, b = first.feature_names, second.feature_names
    if len(a) != len(b):
        raise ValueError(f"the summaries have {len(a)} and {len(b)} features; merge needs the same features")
    differ = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
    if differ:
        i = differ[0]
        raise ValueError(
            f"feature names differ at {len(differ)} position(s), first at {i}: {a[i]!r} vs {b[i]!r}; "
            "merge needs the same features in the same order"
        )


def _check_same_settings(first: Summary, second: Summary) -> None:
    """One line naming the first setting that differs (statistics, their parameters, MI units)."""
    assert first.states is not None and second.states is not None
    a, b = set(first.states), set(second.states)
    if a != b:
        labelled = {"hist", "class_moments"} & (a ^ b)
        hint = (" (the new rows need a label for 'mi' and 'class_moments')" if labelled else
                " (the new rows need target= for 'target_moments')" if "target_moments" in a ^ b else "")
        raise ValueError(
            f"the summaries hold different statistics: {', '.join(sorted(a))} vs {', '.join(sorted(b))}{hint}"
        )
    for key in ("mi_units", "miller_madow"):
        va, vb = first.provenance.get(key), second.provenance.get(key)
        if va != vb and va is not None and vb is not None:
            raise ValueError(f"the summaries differ in {key}: {va!r} vs {vb!r}")
    for name in sorted(a):
        sa, sb = first.states[name].statistic, second.states[name].statistic
        if type(sa) is not type(sb):
            raise ValueError(
                f"statistic {name!r} is a {type(sa).__name__} in one summary, a {type(sb).__name__} in the other"
            )
        if declared_state(sa) is None:  # a user's statistic: its parameters are its equality
            # (or, for a class without __eq__, its instance attributes: two describe calls make two instances)
            same_fields = vars(sa) == vars(sb) if hasattr(sa, "__dict__") and hasattr(sb, "__dict__") else False
            if sa != sb and not same_fields:
                raise ValueError(f"the summaries' {name!r} statistics differ: {sa!r} vs {sb!r}")
            continue
        pa, pb = statistic_params(sa), statistic_params(sb)
        if isinstance(sa, Histogram) and (pa["lo"], pa["hi"]) != (pb["lo"], pb["hi"]):
            raise ValueError(_range_difference(first.feature_names, sa, sb))
        for key in pa:
            if key not in _CLASS_PARAMS and key not in ("lo", "hi") and pa[key] != pb[key]:
                raise ValueError(f"the summaries' {name!r} statistics differ in {key}: {pa[key]!r} vs {pb[key]!r}")


def _range_difference(names: tuple[str, ...], a: Histogram, b: Histogram) -> str:
    lo_a, hi_a, lo_b, hi_b = (np.asarray(v, dtype=np.float64) for v in (a.lo, a.hi, b.lo, b.hi))
    differ = np.flatnonzero((lo_a != lo_b) | (hi_a != hi_b))
    d = int(differ[0])
    more = f" and {differ.size - 1} more feature(s)" if differ.size > 1 else ""
    return (
        f"the summaries' histogram ranges differ: {names[d]!r} [{float(lo_a[d])!r}, {float(hi_a[d])!r}] vs "
        f"[{float(lo_b[d])!r}, {float(hi_b[d])!r}]{more}; describe the second part with run=db.RunOptions(like=first), "
        "or every part with the same range= (db.update does the former)"
    )


# ------------------------------------------------------------------ class values


def _class_values(kept: Kept) -> tuple[int, ...] | None:
    """The class value of each class column of ``kept``'s state; None when it has no class axis."""
    stat = kept.statistic
    if isinstance(stat, Histogram) and stat.by_label:
        return stat.classes if stat.classes is not None else tuple(range(kept.state.counts.shape[2]))
    if isinstance(stat, ClassMoments):
        return stat.classes if stat.classes is not None else tuple(range(kept.state.n.shape[1]))
    return None


def _on_common_classes(a: Mapping[str, Kept], b: Mapping[str, Kept]) -> tuple[dict[str, Kept], dict[str, Kept]]:
    """Both summaries' states with class columns on the union of their class values."""
    # Each class column moves to its value's place among the union and the new
    # columns hold the merge identity (zeros), so merging is exact.
    out_a, out_b = dict(a), dict(b)
    for name in a:
        ca, cb = _class_values(a[name]), _class_values(b[name])
        if ca is None or cb is None or ca == cb:
            continue
        union = tuple(sorted(set(ca) | set(cb)))
        if len(union) > max_classes():
            raise ValueError(
                f"the summaries' class values {format_classes(ca)} and {format_classes(cb)} make {len(union):,} "
                f"classes, more than daskbatch.max-classes ({max_classes():,})"
            )
        out_a[name], out_b[name] = _with_classes(a[name], ca, union), _with_classes(b[name], cb, union)
    return out_a, out_b


def _with_classes(kept: Kept, values: tuple[int, ...], union: tuple[int, ...]) -> Kept:
    """``kept`` with its class columns (for ``values``) placed among ``union``'s."""
    where = np.searchsorted(np.asarray(union), np.asarray(values))

    def spread(a: np.ndarray) -> np.ndarray:
        out = np.zeros((*a.shape[:-1], len(union)), dtype=a.dtype)
        out[..., where] = a
        return out

    state = kept.state
    fields = {f.name: spread(np.asarray(getattr(state, f.name))) for f in dataclasses.fields(state)}
    spread_state = type(state)(**fields)
    sized = {"n_classes": len(union)} if isinstance(kept.statistic, ClassMoments) else {}
    statistic = dataclasses.replace(kept.statistic, classes=union, **sized)
    return Kept(statistic, spread_state)


# ------------------------------------------------------------------ the result


def _merged_profile(first: Summary, second: Summary) -> Kept | None:
    """The non-numeric columns' profile of both (None when neither has one), merged column by column."""
    a, b = first.categorical_state, second.categorical_state
    if (a is None and first.provenance.get("categorical")) or (b is None and second.provenance.get("categorical")):
        warn(UserWarning("the profile of the non-numeric columns (summary.categorical) is left out of the merged "
                         "summary: one summary keeps no state of it (saved by an older daskbatch); describe all "
                         "the rows together for it"))
        return None
    if a is None or b is None:
        return a or b
    if a.statistic.params != b.statistic.params:
        raise ValueError(f"the summaries' non-numeric columns were profiled with {a.statistic!r} and "
                         f"{b.statistic!r}; merge needs the same parameters")
    alone = sorted(set(a.state) ^ set(b.state))
    if alone:
        warn(UserWarning(f"non-numeric column(s) {', '.join(map(repr, alone[:10]))} are in one summary only: "
                         "their counts in summary.categorical cover that summary's rows only"))
    return Kept(a.statistic, a.statistic.merge(a.state, b.state))


def _summary(first: Summary, second: Summary, merged: dict[str, Kept], profile: Kept | None = None) -> Summary:
    """The merged summary: finalized as describe does, with the merge in its provenance."""
    results = {name: to_host(k.finalize()) for name, k in merged.items()}
    provenance = {k: v for k, v in first.provenance.items() if k in _SETTINGS}
    if "stats" in provenance:
        provenance["stats"] = [n for n in provenance["stats"] if n not in _ranked(first)]
    sources = _sources(first.provenance) + _sources(second.provenance)
    provenance.update(
        source=f"merge of {len(sources)} summaries",
        rows=sum(int(s.get("rows") or 0) for s in sources),
        sources=sources,
        input_tokens=_tokens(first) + _tokens(second),
        **_weights_of(sources),
        created=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        daskbatch_version=__version__,
    )
    if profile is not None:
        provenance["categorical"] = profile.finalize()
    summary = Summary.from_results(
        first.feature_names, results, provenance,
        mi_base=2 if first.provenance.get("mi_units") == "bits" else "e",
        miller_madow=bool(first.provenance.get("miller_madow", False)),
        states=merged, categorical_state=profile,
    )
    fraction = summary.arrays.out_of_range_fraction
    if fraction is not None:
        summary.provenance["out_of_range"] = flag_out_of_range(fraction, first.feature_names)
    return summary


def _ranked(summary: Summary) -> list[str]:
    """The statistics of ``summary`` built from its own run's ranks, which merges leave out (``spearman``)."""
    return [n for n in summary.provenance.get("stats") or () if n in STATISTICS and STATISTICS[n].needs_sketch]


def _sources(provenance: Mapping[str, Any]) -> list[dict[str, Any]]:
    """What a summary was made from: the sources of a merged one, else its own source, path and rows."""
    if isinstance(provenance.get("sources"), list):
        return [dict(s) for s in provenance["sources"]]
    keys = ("source", "path", "rows", "weights", "created", "range")
    own = {k: provenance[k] for k in keys if k in provenance}
    tokens = list(provenance.get("input_tokens") or ())
    if len(tokens) == 1:  # each part keeps its token, so that a refused merge can name the part
        own["input_token"] = str(tokens[0])
    return [own]


def _weights_of(sources: list[dict[str, Any]]) -> dict[str, str]:
    """The merged summary's ``weights`` provenance: which parts were weighted (the others weigh 1 per row)."""
    weighted = [str(s["weights"]) for s in sources if s.get("weights")]
    if not weighted:
        return {}
    if len(weighted) == len(sources) and len(set(weighted)) == 1:
        return {"weights": weighted[0]}
    return {"weights": f"{len(weighted)} of {len(sources)} parts weighted ({'; '.join(dict.fromkeys(weighted))}), "
                       "the others 1 per row"}


def _carries_names(x: Any) -> bool:
    """Whether ``x`` brings its own feature names (a store path, a Dataset, a named DataArray)."""
    if isinstance(x, (str, os.PathLike)) or (hasattr(x, "x") and hasattr(x, "feature_names")):
        return True
    return hasattr(x, "dims") and hasattr(x, "coords") and getattr(x, "ndim", 0) == 2 and x.dims[1] in x.coords
