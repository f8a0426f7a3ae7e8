"""Non-numeric columns profiled: the merge laws of their states, and describe of DataFrames and Parquet tables."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import daskbatch as db
from daskbatch.stats.categorical import CategoricalProfile, hyperloglog_estimate

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

TINY = CategoricalProfile(top_k=3, counters=4)  # prunes from the fifth distinct value on
VALUES = st.lists(st.one_of(st.none(), st.sampled_from("abcdefghij")), max_size=60)


def state_of(profile: CategoricalProfile, values: list[str | None]) -> dict:
    """The state of one block holding ``values`` in a column "c"."""
    return profile.chunk(pd.DataFrame({"c": pd.Series(values, dtype=object)}))


def check_guarantees(record: dict, values: list[str | None], counters: int) -> None:
    """Counts exact; each listed count within n/(k'+1) below its true count (and at most top_error below)."""
    truth = pd.Series(values, dtype=object).value_counts()
    n = int(truth.sum())
    assert record["count"] == n and record["null_count"] == sum(v is None for v in values)
    for value, count in record["top_k"]:
        assert truth[value] - min(record["top_error"], n / (counters + 1)) <= count <= truth[value]
    listed = {v for v, _ in record["top_k"]}
    for (
        value,
        count,
    ) in truth.items():  # a value above n/(k'+1) is never dropped while the list has room
        if count > n / (counters + 1) and len(record["top_k"]) < TINY.top_k:
            assert value in listed
    if truth.size <= counters:  # nothing pruned: every count exact, the distinct count too
        assert (
            record["top_error"] == 0
            and record["distinct"] == truth.size
            and record["distinct_error"] == 0
        )


@settings(max_examples=60, deadline=None)
@given(VALUES, VALUES, VALUES)
def test_merge_is_associative_and_commutative_within_the_guarantees(
    a: list, b: list, c: list
) -> None:
    p = TINY
    sa, sb, sc = state_of(p, a), state_of(p, b), state_of(p, c)
    groupings = [
        p.merge(p.merge(sa, sb), sc),
        p.merge(sa, p.merge(sb, sc)),
        p.merge(sc, p.merge(sb, sa)),
        state_of(p, a + b + c),
    ]
    records = [p.finalize(s)["c"] for s in groupings]
    for r in records:
        check_guarantees(r, a + b + c, p.counters)
    registers = [
        s["c"].registers for s in groupings
    ]  # registers merge by maximum: equal in any order
    assert all(np.array_equal(registers[0], r) for r in registers)
    exact = {k: records[0][k] for k in ("count", "null_count")}
    assert all({k: r[k] for k in exact} == exact for r in records)


@pytest.mark.parametrize("distinct", [10, 1_000, 100_000])
def test_hyperloglog_within_its_stated_error(distinct: int) -> None:
    rng = np.random.default_rng(distinct)
    values = pd.Series(rng.permutation(distinct).astype(str)).sample(
        frac=1.5, replace=True, random_state=1
    )
    values = pd.concat([values, pd.Series(np.arange(distinct).astype(str))])  # every value present
    p = CategoricalProfile(top_k=1, counters=1)  # prunes: the estimate comes from the registers
    halves = np.array_split(values.to_numpy(dtype=object), 3)
    state = p.merge(
        p.chunk(pd.DataFrame({"c": halves[0]})),
        p.merge(*(p.chunk(pd.DataFrame({"c": h})) for h in halves[1:])),
    )
    record = p.finalize(state)["c"]
    assert record["distinct_error"] == pytest.approx(1.04 / math.sqrt(2**14))
    assert abs(record["distinct"] / values.nunique() - 1) <= 3 * record["distinct_error"]


def test_hyperloglog_estimate_of_empty_registers_is_zero() -> None:
    assert hyperloglog_estimate(np.zeros(2**14, dtype=np.uint8)) == 0.0


def test_hashes_are_the_same_in_another_process() -> None:
    code = (
        "import pandas as pd, hashlib; from daskbatch.stats.categorical import CategoricalProfile as P;"
        "s = P().chunk(pd.DataFrame({'c': [str(i) for i in range(5000)]}))['c'];"
        "print(hashlib.sha256(s.registers.tobytes()).hexdigest())"
    )
    import hashlib

    here = CategoricalProfile().chunk(pd.DataFrame({"c": [str(i) for i in range(5000)]}))["c"]
    there = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert there == hashlib.sha256(here.registers.tobytes()).hexdigest()


def mixed_frame(n: int = 6000, seed: int = 0) -> pd.DataFrame:
    """Numbers, text with nulls, categories, tz-aware datetimes with NaT, timedeltas and a label."""
    rng = np.random.default_rng(seed)
    text = pd.Series(rng.choice([f"w{i}" for i in range(40)], n), dtype=object)
    text[rng.random(n) < 0.1] = None
    times = pd.Series(pd.to_datetime(rng.integers(0, 10**15, n), unit="us", utc=True))
    times[rng.random(n) < 0.05] = pd.NaT
    return pd.DataFrame(
        {
            "x": rng.normal(size=n),
            "text": text,
            "city": pd.Categorical(rng.choice(["Oslo", "Rome", "Lima"], n)),
            "k": rng.integers(0, 5, n),
            "when": times,
            "wait": pd.to_timedelta(rng.integers(0, 100, n), unit="s"),
            "ids": pd.Series([f"id{i}" for i in range(n)], dtype="str"),
            "y": rng.integers(0, 2, n),
        }
    )


def test_describe_of_a_dataframe_profiles_non_numeric_columns_and_keeps_the_numbers_bitwise() -> (
    None
):
    df = mixed_frame()
    s = db.describe(df, label="y")
    numeric = db.describe(df[["x", "k", "y"]], label="y")
    for name, value in numeric.variables.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(s.variables[name], value, err_msg=name)
    assert s.feature_names == ("x", "k") and numeric.categorical is None
    cat = s.categorical
    assert list(cat.index) == ["text", "city", "when", "wait", "ids"]
    for name in cat.index:
        assert cat.loc[name, "null_count"] == df[name].isna().sum()
        assert cat.loc[name, "count"] == df[name].notna().sum()
    for name in ("text", "city", "wait"):  # at most 256 distinct values: counts exact
        counts = df[name].value_counts()
        assert (
            cat.loc[name, "distinct"] == df[name].nunique() and cat.loc[name, "distinct_error"] == 0
        )
        top = cat.loc[name, "top_k"]
        assert len(top) == min(10, counts.size)
        for value, count in top:  # the top k by count (ties in any order)
            assert count == counts[value if name != "wait" else pd.Timedelta(value)]
        assert [c for _, c in top] == counts.head(len(top)).tolist()
    when = df["when"].dropna()
    assert (
        cat.loc["when", "min"] == when.min().isoformat()
        and cat.loc["when", "max"] == when.max().isoformat()
    )
    assert cat.loc["when", "dtype"] == str(df["when"].dtype)
    ids = cat.loc["ids"]
    assert (
        ids["distinct_error"] > 0
        and abs(ids["distinct"] / len(df) - 1) <= 3 * ids["distinct_error"]
    )
    assert "text" in repr(s) and "text" in s._repr_html_()


def test_the_profile_survives_save_and_load(tmp_path: Path) -> None:
    s = db.describe(mixed_frame(800), label="y", stats=("moments",))
    s.save(tmp_path / "s.zarr")
    pd.testing.assert_frame_equal(db.load_summary(tmp_path / "s.zarr").categorical, s.categorical)
    json.dumps(s.provenance["categorical"])  # plain JSON


def write_table(folder: Path, files: int = 3, rows: int = 900, group: int = 200) -> pd.DataFrame:
    """Parquet files with string (nulls), dictionary, boolean and timestamp columns; their values as pandas."""
    folder.mkdir()
    rng = np.random.default_rng(7)
    parts = []
    for k in range(files):
        words = [None if rng.random() < 0.08 else f"t{int(v)}" for v in rng.integers(0, 30, rows)]
        table = pa.table(
            {
                "f": pa.array(rng.normal(size=rows)),
                "word": pa.array(words, pa.string()),
                "kind": pa.array(rng.choice(["a", "b", "c", "d"], rows)).dictionary_encode(),
                "flag": pa.array(rng.random(rows) < 0.3),
                "at": pa.array(rng.integers(0, 10**12, rows), pa.timestamp("ms")),
                "y": pa.array(rng.integers(0, 3, rows)),
            }
        )
        pq.write_table(table, folder / f"part-{k}.parquet", row_group_size=group)
        parts.append(table.to_pandas())
    return pd.concat(parts, ignore_index=True)


def test_a_parquet_dataset_with_text_dictionary_boolean_and_timestamp_columns_is_described(
    tmp_path: Path,
) -> None:
    values = write_table(tmp_path / "ds")
    s = db.describe(str(tmp_path / "ds"), label="y")
    assert s.feature_names == ("f", "flag")  # a boolean is a number: its mean is its rate
    np.testing.assert_allclose(s.mean["flag"], values["flag"].mean(), rtol=1e-12)
    cat = s.categorical
    assert list(cat.index) == ["word", "kind", "at"]
    for name in ("word", "kind"):
        counts = values[name].value_counts()
        assert cat.loc[name, "null_count"] == values[name].isna().sum()
        assert cat.loc[name, "distinct"] == values[name].nunique()
        top = cat.loc[name, "top_k"]
        assert [c for _, c in top] == counts.head(
            10
        ).tolist()  # value_counts().head(k), ties in any order
        assert all(counts[value] == c for value, c in top)
    assert cat.loc["at", "min"] == values["at"].min().isoformat()
    assert cat.loc["at", "max"] == values["at"].max().isoformat()


def test_a_dask_dataframe_is_profiled_by_partition() -> None:
    dd = pytest.importorskip("dask.dataframe")
    df = mixed_frame(1500)[["x", "text", "city"]]
    s = db.describe(dd.from_pandas(df, npartitions=3), stats=("moments",))
    assert s.categorical.loc["text", "null_count"] == df["text"].isna().sum()
    assert s.categorical.loc["city", "top_k"] == [
        [v, int(c)] for v, c in df["city"].value_counts().items()
    ]


def test_odd_values_are_profiled_and_what_cannot_be_is_named(tmp_path: Path) -> None:
    n = 40
    odd = pd.DataFrame(
        {
            "x": np.arange(n, dtype=float),
            "lists": [[1, 2], [3]] * 20,
            "mixed": [1, "a", b"z", None] * 10,
            "tupled": [(1, 2), "a", 3, None] * 10,  # a tuple among other values: counted by its text
        }
    )
    cat = db.describe(odd, stats=("moments",)).categorical
    assert cat.loc["tupled", "top_k"] == [["(1, 2)", 10], [3, 10], ["a", 10]]  # ties by their text
    assert cat.loc["lists", "top_k"] == [
        ["[1, 2]", 20],
        ["[3]", 20],
    ]  # unhashable: counted by their text
    assert (cat.loc["mixed", "distinct"], cat.loc["mixed", "null_count"]) == (3, 10)
    assert db.describe(pd.DataFrame({"s": ["a", "b"]})).categorical.loc["s", "distinct"] == 2  # text only
    folder = tmp_path / "drift"
    folder.mkdir()
    x = pa.array(np.arange(n, dtype=float))
    pq.write_table(pa.table({"x": x, "s": pa.array(["q"] * n)}), folder / "a.parquet")
    pq.write_table(pa.table({"x": x}), folder / "b.parquet")
    with pytest.raises(ValueError, match=r"b.parquet: column 's' is absent, unlike in .*a.parquet"):
        db.describe(str(folder), stats=("moments",))
    pq.write_table(pa.table({"x": x, "l": pa.array([[1]] * n)}), tmp_path / "lists.parquet")
    with pytest.warns(UserWarning, match=r"skipping 1 column\(s\) of other types: l"):
        assert db.describe(str(tmp_path / "lists.parquet"), stats=("moments",)).categorical is None


def test_mi_and_chi2_with_the_label_from_exact_joint_counts(tmp_path: Path) -> None:
    from scipy.stats import chi2_contingency
    from sklearn.metrics import mutual_info_score

    rng = np.random.default_rng(3)
    n = 3000
    y = rng.integers(0, 3, n)
    city = np.where(
        rng.random(n) < 0.6,
        np.array(["Oslo", "Rome", "Lima"])[y],
        rng.choice(["Oslo", "Rome", "Lima", "Kyiv"], n),
    )
    df = pd.DataFrame(
        {
            "x": rng.normal(size=n),
            "city": pd.Categorical(city),
            "noise": rng.choice(list("abcde"), n),
            "y": y,
        }
    )
    df.loc[df.index[::11], "noise"] = None
    df["ids"] = [f"i{i}" for i in range(n)]  # pruned: no exact joint counts, no mi
    s = db.describe(df, label="y", stats=("moments", "mi"))
    cat = s.categorical
    for name in ("city", "noise"):
        rows = df[name].notna()
        table = pd.crosstab(df.loc[rows, name], df.loc[rows, "y"])
        chi2, p, dof, _ = chi2_contingency(table, correction=False)
        assert cat.loc[name, "mi"] == pytest.approx(
            mutual_info_score(df.loc[rows, name], df.loc[rows, "y"]), rel=1e-12
        )
        assert (
            cat.loc[name, "chi2"] == pytest.approx(chi2, rel=1e-12)
            and cat.loc[name, "chi2_dof"] == dof
        )
        assert cat.loc[name, "chi2_pvalue"] == pytest.approx(p, rel=1e-9, abs=1e-300)
    assert cat.loc["city", "mi"] > 10 * cat.loc["noise", "mi"]
    assert cat.loc["ids", "mi"] is None or pd.isna(cat.loc["ids", "mi"])
    assert db.describe(df, stats=("moments",)).categorical["mi"].isna().all()  # no label: none
    # A Parquet dataset's row groups give the same counts as the DataFrame's blocks.
    folder = tmp_path / "ds"
    folder.mkdir()
    for k, part in enumerate(
        df.drop(columns="ids").iloc[k : k + 1000] for k in range(0, 3000, 1000)
    ):
        pq.write_table(
            pa.Table.from_pandas(part, preserve_index=False),
            folder / f"p{k}.parquet",
            row_group_size=300,
        )
    from_table = db.describe(str(folder), label="y", stats=("moments", "mi")).categorical
    for column in ("mi", "chi2", "chi2_dof", "count", "null_count", "distinct"):
        np.testing.assert_allclose(
            from_table[column].astype(float),
            cat.loc[["city", "noise"], column].astype(float),
            rtol=1e-12,
        )


ROWS = st.lists(
    st.tuples(st.one_of(st.none(), st.sampled_from("abcdef")), st.integers(0, 2)), max_size=40
)


@settings(max_examples=40, deadline=None)
@given(ROWS, ROWS, ROWS)
def test_joint_counts_merge_exactly_in_any_order(a: list, b: list, c: list) -> None:
    p = CategoricalProfile(top_k=6, counters=6)  # never pruned: six values at most

    def state(rows: list) -> dict:
        values, labels = [v for v, _ in rows], np.array([k for _, k in rows], dtype=np.int64)
        return p.chunk(pd.DataFrame({"c": pd.Series(values, dtype=object)}), labels)

    sa, sb, sc = state(a), state(b), state(c)
    records = [
        p.finalize(s)["c"]
        for s in (p.merge(p.merge(sa, sb), sc), p.merge(sc, p.merge(sb, sa)), state(a + b + c))
    ]
    for key in ("mi", "chi2", "chi2_dof", "chi2_pvalue"):
        first = records[0][key]
        expected = first if first is None else pytest.approx(first, rel=1e-12, abs=1e-15)
        assert all(r[key] == expected for r in records), key
    assert records[0]["mi"] is not None


def test_the_cli_shows_and_writes_the_profile(tmp_path: Path) -> None:
    write_table(tmp_path / "ds")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "daskbatch",
            "describe",
            str(tmp_path / "ds"),
            "--label",
            "y",
            "--json",
            "-",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    written = json.loads(done.stdout)["provenance"]["categorical"]
    assert sorted(written) == ["at", "kind", "word"] and written["kind"]["distinct"] == 4
    shown = subprocess.run(
        [sys.executable, "-m", "daskbatch", "describe", str(tmp_path / "ds"), "--label", "y"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert (
        "non-numeric columns" in shown.stdout and "  kind: category · 2,700 · 0 · 4" in shown.stdout
    )


def assert_same_profile(a: db.Summary, b: db.Summary, exact: tuple[str, ...]) -> None:
    """Counts, nulls, extremes and HyperLogLog registers equal; every result of the ``exact`` columns equal."""
    sa, sb = a.categorical_state.state, b.categorical_state.state
    assert list(sa) == list(sb)
    for name in sa:
        for key in ("count", "null_count", "low", "high", "dtype", "kind", "tz"):
            assert getattr(sa[name], key) == getattr(sb[name], key), (name, key)
        np.testing.assert_array_equal(sa[name].registers, sb[name].registers, err_msg=name)
    pd.testing.assert_frame_equal(a.categorical.loc[list(exact)], b.categorical.loc[list(exact)])


def test_merge_update_save_and_load_continue_the_profile(tmp_path: Path) -> None:
    df = mixed_frame(3000)
    exact = ("text", "city", "wait")  # "ids" and "when" have ~3,000 distinct values: pruned, distinct estimated
    parts = [df.iloc[:1200], df.iloc[1200:2100], df.iloc[2100:]]
    run = {"label": "y", "stats": ("moments", "mi"), "range": (-10.0, 10.0)}  # the same bins for every part
    described = [db.describe(part, **run) for part in parts]
    whole = db.describe(df, **run)
    merged = db.merge(db.merge(described[0], described[1]), described[2])
    assert_same_profile(merged, whole, exact)
    assert merged.categorical.loc["text", "mi"] == pytest.approx(whole.categorical.loc["text", "mi"], rel=1e-12)
    for name in ("ids", "when"):  # the same registers: the same estimate; the same extremes
        picked = ["distinct", "min", "max"]
        assert merged.categorical.loc[name, picked].tolist() == whole.categorical.loc[name, picked].tolist()
    # Saved and loaded, the state goes on: an update with the last rows gives the same profile.
    first_two = db.merge(described[0], described[1])
    first_two.save(tmp_path / "s.zarr")
    loaded = db.load_summary(tmp_path / "s.zarr")
    assert_same_profile(loaded, first_two, (*exact, "ids", "when"))
    assert_same_profile(db.update(loaded, parts[2], label="y"), whole, exact)


def test_a_profile_without_its_state_is_left_out_of_a_merge_and_a_changed_one_refused(tmp_path: Path) -> None:
    import dataclasses

    import zarr

    frame = pd.DataFrame({"x": np.arange(20.0), "word": list("ab") * 10})
    a = db.describe(frame.iloc[:10], stats=("moments",))
    b = db.describe(frame.iloc[10:], stats=("moments",))
    older = dataclasses.replace(a, categorical_state=None)  # as a summary saved before states were kept
    with pytest.warns(UserWarning, match=r"non-numeric columns \(summary.categorical\) is left out.*older"):
        merged = db.merge(older, b)
    assert merged.categorical is None and merged.count.iloc[0] == 20
    only = db.describe(pd.DataFrame({"x": np.arange(10.0) + 100, "other": list("xy") * 5}), stats=("moments",))
    with pytest.warns(UserWarning, match=r"'other', 'word' are in one summary only"):
        both = db.merge(a, only)
    assert both.categorical.loc["word", "count"] == 10 and both.categorical.loc["other", "count"] == 10
    a.save(tmp_path / "a.zarr")
    zarr.open_group(tmp_path / "a.zarr", mode="r+")["categorical/columns"][0] ^= 1
    with pytest.raises(db.DataError, match=r"^summary [^(]*: the profile of its non-numeric columns fails its sha256"):
        db.load_summary(tmp_path / "a.zarr")


def test_a_dataframe_of_text_and_times_only_is_described_and_merged_as_different_rows() -> None:
    rng = np.random.default_rng(15)
    n = 70_000  # two blocks of rows
    frame = pd.DataFrame({
        "word": pd.Series(rng.choice(["a", "b", "c", None], n), dtype=object),
        "at": pd.to_datetime(rng.integers(0, 10**12, n), unit="ms"),
        "y": rng.integers(0, 3, n),
    })
    s = db.describe(frame, label="y")
    assert s.n_features == 0 and list(s.categorical.index) == ["word", "at"]
    assert s.categorical.loc["word", "null_count"] == frame["word"].isna().sum()
    assert dict(s.categorical.loc["word", "top_k"]) == frame["word"].value_counts().to_dict()
    assert s.categorical.loc["at", "max"] == frame["at"].max().isoformat()
    text = str(s)
    assert "word" in text and "\nfeature" not in text and "float64" not in text, text
    # Another frame of the same length is other rows (its token is its content's), so merge takes both.
    other = frame.assign(word=frame["word"].str.upper())
    merged = db.merge(s, db.describe(other, label="y")).categorical
    assert merged.loc["word", "count"] == 2 * s.categorical.loc["word", "count"]
    with pytest.raises(ValueError, match="twice"):
        db.merge(s, db.describe(frame, label="y"))


def test_frames_of_the_same_numbers_and_other_text_merge_as_other_rows() -> None:
    numbers = np.arange(3000.0).reshape(1000, 3)
    first = pd.DataFrame(numbers, columns=["a", "b", "c"]).assign(word=["x", "y"] * 500)
    second = first.assign(word=["z", "w"] * 500)
    s1, s2 = db.describe(first), db.describe(second)
    np.testing.assert_array_equal(s1.arrays.mean, db.describe(numbers).arrays.mean)  # the numbers as before
    merged = db.merge(s1, s2)
    assert merged.arrays.count.tolist() == [2000] * 3
    assert dict(merged.categorical.loc["word", "top_k"]) == {"x": 500, "y": 500, "z": 500, "w": 500}
    with pytest.raises(ValueError, match="twice"):
        db.merge(s1, db.describe(first.copy()))
