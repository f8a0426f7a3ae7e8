"""``daskbatch describe`` and ``daskbatch demo`` on real Zarr stores, through the click entry point."""

from __future__ import annotations

import json
import pathlib
import re
import warnings

import numpy as np
import pytest
import zarr
from click.testing import CliRunner

import daskbatch as db
from daskbatch.cli import main
from daskbatch.errors import CompleteRowsWarning

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture()
def store(tmp_path: pathlib.Path) -> tuple[str, np.ndarray]:
    rng = np.random.default_rng(7)
    x = rng.normal(size=(2000, 4)).astype(np.float32)
    root = zarr.open_group(str(tmp_path / "d.zarr"), mode="w")
    root.create_array("X", data=x, chunks=(256, 4))
    root.create_array("y", data=(x[:, 0] > 0).astype(np.int8), chunks=(256,))
    return str(tmp_path / "d.zarr"), x


def test_describe_writes_zarr_and_json(tmp_path: pathlib.Path, store: tuple[str, np.ndarray]) -> None:
    path, x = store
    out, js = tmp_path / "s.zarr", tmp_path / "s.json"
    result = CliRunner().invoke(
        main, ["describe", path, "--label", "y", "--out", str(out), "--json", str(js), "--no-progress", "--cluster", "threads"]
    )
    assert result.exit_code == 0, result.output
    assert "Top 4 features by mutual information" in result.output and "f0" in result.output
    summary = db.load_summary(out)
    np.testing.assert_allclose(summary.mean, x.astype(np.float64).mean(axis=0), rtol=1e-12)
    payload = json.loads(js.read_text())
    assert payload["feature_names"] == ["f0", "f1", "f2", "f3"]
    np.testing.assert_allclose(payload["std"], x.astype(np.float64).std(axis=0, ddof=1), rtol=1e-12)
    # The decoded blocks fit: kept between the passes by default, read twice with --no-cache, same bits.
    assert summary.provenance["cached"] is True
    twice = tmp_path / "twice.zarr"
    result = CliRunner().invoke(
        main, ["describe", path, "--label", "y", "--out", str(twice), "--no-cache", "--no-progress", "--cluster", "threads"]
    )
    assert result.exit_code == 0, result.output
    again = db.load_summary(twice)
    assert again.provenance["cached"] is False
    np.testing.assert_array_equal(again.joint_counts, summary.joint_counts)
    np.testing.assert_array_equal(again.class_m2, summary.class_m2)


def test_the_cli_table_says_what_the_notebook_says(tmp_path: pathlib.Path) -> None:
    """Warnings, quantiles and number formats of the repr (and so of the notebook's HTML) in the CLI report."""
    rng = np.random.default_rng(3)
    x = rng.normal(1000.0, 1.0, size=(3000, 4))
    x[:, 1] = 2.5  # constant
    x[::5, 2] = np.nan  # 20 % NaN
    root = zarr.open_group(str(tmp_path / "d.zarr"), mode="w")
    root.create_array("X", data=x, chunks=(500, 4))
    with warnings.catch_warnings():  # 20 % NaN in f2: the CLI shows CompleteRowsWarning (and its table says so)
        warnings.simplefilter("ignore", CompleteRowsWarning)
        result = CliRunner().invoke(main, ["describe", str(tmp_path / "d.zarr"), "--no-progress", "--cluster", "threads"])
    assert result.exit_code == 0, result.output
    with pytest.warns(CompleteRowsWarning, match="only the 2,400 of 3,000 rows"):
        summary = db.describe(str(tmp_path / "d.zarr"), run=db.RunOptions(plan=None))
    assert repr(summary).split("\n", 2)[2] in result.output  # the same table, warnings first
    assert "! covariance and correlation use only the 2,400 of 3,000 rows" in result.output
    assert "! 1 constant feature (std 0): f1" in result.output
    assert "with more than 5% NaN: f2 (20.0%)" in result.output
    header = next(line for line in result.stdout.splitlines() if line.startswith("feature"))
    assert header.split()[:3] == ["feature", "count", "nan_count"] and {"25%", "50%", "75%"} <= set(header.split())
    assert "3,000" in result.output and "2,400" in result.output  # counts with thousands separators
    rows = [line for line in result.stdout.splitlines() if re.match(r"f\d ", line)]
    means = [row.split()[3] for row in rows]
    assert means == ["1,000", "2.500", "1,000", "1,000"], means  # 4 significant digits each, 999.97 too


def test_percent_never_rounds_a_fraction_to_zero() -> None:
    from daskbatch.summary.views import format_percent

    assert format_percent(0.0004) == "<0.1%" and format_percent(0.0) == "0%" and format_percent(0.125) == "12.5%"


@pytest.fixture()
def restore_dask_config():
    """A config file's ``dask:`` mapping changes the process-wide dask config, as it should in a job."""
    import copy

    import dask.config

    saved = copy.deepcopy(dask.config.config)
    yield
    dask.config.config.clear()
    dask.config.config.update(saved)


@pytest.mark.usefixtures("restore_dask_config")
def test_describe_config_file_sets_options(tmp_path: pathlib.Path, store: tuple[str, np.ndarray]) -> None:
    path, _ = store
    cfg = tmp_path / "job.yaml"
    # The job's keys set describe's options; the other daskbatch settings apply for the run.
    cfg.write_text("daskbatch:\n  job:\n    statistics: {bins: 8, range: [-4, 4], stats: [moments, hist]}\n"
                   "    selection: {score: variance}\n  split-every: 3\n")
    out = tmp_path / "s.zarr"
    result = CliRunner().invoke(main, ["describe", path, "--config", str(cfg), "--out", str(out), "--no-progress", "--cluster", "threads"])
    assert result.exit_code == 0, result.output
    s = db.load_summary(out)
    assert s.hist_counts.shape == (4, 8) and s.cov is None
    assert s.provenance["passes"] == 1 and s.provenance["split_every"] == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["describe", "{tmp}/missing.zarr"], "missing.zarr"),
        (["describe", "{store}", "--range", "5"], "LO:HI"),
        (["describe", "{store}", "--stats", "moments,median"], "unknown statistic"),
        (["describe", "{store}", "--x", "nope"], "nope"),
        (["describe", "{store}", "--config", "{tmp}/bad.yaml"], "unknown key 'statistics.binz'"),
    ],
)
def test_describe_bad_input_one_line_and_exit_2(
    tmp_path: pathlib.Path, store: tuple[str, np.ndarray], args: list[str], message: str
) -> None:
    (tmp_path / "bad.yaml").write_text("daskbatch: {job: {statistics: {binz: 3}}}\n")
    argv = [a.format(tmp=tmp_path, store=store[0]) for a in args]
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_describe_config_range_not_a_pair_names_the_file_and_key(
    tmp_path: pathlib.Path, store: tuple[str, np.ndarray]
) -> None:
    """A ``--config`` range of one number is refused as ``daskbatch run`` refuses it: the file and the key, one line."""
    (tmp_path / "c.yaml").write_text("daskbatch: {job: {statistics: {range: [1]}}}\n")
    result = CliRunner().invoke(main, ["describe", store[0], "--config", str(tmp_path / "c.yaml")])
    assert result.exit_code == 2, result.output
    assert result.output == f"error: {tmp_path / 'c.yaml'}: 'statistics.range' expects [lo, hi], got [1.0] (list)\n"
    assert "Traceback" not in result.output
    (tmp_path / "c.yaml").write_text("daskbatch: {job: {statistics: {range: '-5:5'}}}\n")  # the option's text, not a key's
    result = CliRunner().invoke(main, ["describe", store[0], "--config", str(tmp_path / "c.yaml")])
    assert result.exit_code == 2, result.output
    assert result.output == (f"error: {tmp_path / 'c.yaml'}: 'statistics.range' expects [lo, hi] or 'minmax', "
                             "got '-5:5' (str)\n")


def test_every_command_has_help() -> None:
    runner = CliRunner()
    top = runner.invoke(main, ["--help"])
    assert top.exit_code == 0 and "Exit codes" in top.output
    for name in main.commands:
        sub = runner.invoke(main, [name, "--help"])
        assert sub.exit_code == 0, name
        assert "Usage" in sub.output


def test_demo_small(tmp_path: pathlib.Path) -> None:
    result = CliRunner().invoke(
        main, ["demo", "--rows", "20000", "--features", "6", "--workers", "1", "--out", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    assert "dashboard" in result.output and "Results saved" in result.output
    assert db.load_summary(tmp_path / "summary.zarr").mi is not None


def test_readme_opens_with_the_two_commands_and_ci_runs_the_second() -> None:
    readme = re.sub(r"<!--.*?-->\n", "", (ROOT / "README.md").read_text())  # as rendered: comments hidden
    block = re.search(r"```bash\n(.*?)```", readme, re.S)
    assert block is not None and readme.index("```bash") < 40
    demo, tests = block.group(1).strip().splitlines()
    assert demo.startswith("python3 -m venv .venv") and demo.endswith("daskbatch demo")
    assert tests.startswith("python3 -m venv .venv") and "pytest" in tests
    ci = (ROOT / ".ci" / "run").read_text()
    assert tests in ci.splitlines()


def test_commands_are_also_reachable_as_dask_batch() -> None:
    from importlib.metadata import entry_points

    (ep,) = [ep for ep in entry_points(group="dask_cli") if ep.value == "daskbatch.cli:main"]
    assert ep.load() is main and main.name == "batch"  # dask registers it under the group's name


def test_missing_chunk_refuses_by_default_and_skip_warns_in_one_line(
    tmp_path: pathlib.Path, store: tuple[str, np.ndarray]
) -> None:
    """A chunk absent from a store zarr wrote is its fill value; refused only when asked, never advising skip."""
    path, x = store
    import subprocess
    import sys

    (pathlib.Path(path) / "X" / "c" / "3" / "0").unlink()
    js = tmp_path / "s.json"
    read = CliRunner().invoke(
        main, ["describe", path, "--cluster", "threads", "--stats", "moments", "--json", str(js)]
    )
    assert read.exit_code == 0, read.output
    filled = x.astype(np.float64)
    filled[3 * 256 : 4 * 256] = 0.0  # zarr's default fill value
    facts = json.loads(js.read_text())
    np.testing.assert_allclose(facts["mean"], filled.mean(axis=0), rtol=1e-6)
    assert facts["provenance"]["absent_fill_chunks"] == 1 and facts["provenance"]["complete"] is True
    refused = CliRunner().invoke(main, ["describe", path, "--cluster", "threads", "--missing", "raise"])
    assert refused.exit_code == 2 and "X/c/3/0" in refused.output and "--missing auto" in refused.output
    assert "skip" not in refused.output
    # In a real process, as a user sees it (pytest would turn the warning into an error).
    warned = subprocess.run(
        [sys.executable, "-m", "daskbatch", "describe", path, "--cluster", "threads", "--no-progress",
         "--missing", "skip"],
        capture_output=True, text=True, timeout=120,
    )
    assert warned.returncode == 0, warned.stderr
    first = warned.stderr.strip().splitlines()[0]
    # One timestamped log line, naming the warning's category.
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d WARNING MissingChunksWarning: 1 chunk\(s\) of array 'X'", first)
    assert "X/c/3/0" in first and "left out" in first


def test_info_reports_versions_gpus_and_config() -> None:
    result = CliRunner().invoke(main, ["info", "--json"])
    assert result.exit_code == 0, result.output
    facts = json.loads(result.output)
    assert facts["packages"]["daskbatch"] and facts["packages"]["dask"]
    assert facts["config"]["split-every"] == 8 and isinstance(facts["cuda_devices"], int)


def test_describe_device_gpu_without_cupy_is_one_line_exit_2(store: tuple[str, np.ndarray]) -> None:
    pytest.importorskip("numpy")
    try:
        import cupy  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("CuPy is installed: --device gpu would run")
    result = CliRunner().invoke(main, ["describe", store[0], "--cluster", "threads", "--device", "gpu"])
    assert result.exit_code == 2, result.output
    assert "describe(device='gpu'): CuPy does not import" in result.output and "daskbatch[gpu-cu12]" in result.output
    assert "Traceback" not in result.output


def test_describe_device_auto_is_cpu_on_cpu_workers(tmp_path: pathlib.Path, store: tuple[str, np.ndarray]) -> None:
    out = tmp_path / "s.json"
    result = CliRunner().invoke(
        main,
        ["describe", store[0], "--stats", "moments", "--cluster", "local", "--no-progress", "--json", str(out)],
    )
    assert result.exit_code == 0, result.output
    provenance = json.loads(out.read_text())["provenance"]
    assert provenance.get("device", "cpu") == "cpu"
    np.testing.assert_allclose(json.loads(out.read_text())["mean"], store[1].mean(axis=0, dtype=np.float64), rtol=1e-12)


def test_plan_describe_is_the_plan_describe_runs(store: tuple[str, np.ndarray]) -> None:
    from daskbatch.engine.planner import plan_describe

    ds = db.open_dataset(store[0], label="y")
    resources = db.Resources(memory_bytes=4 * 2**30, threads_per_worker=2, n_workers=1)
    # describe finds the label's classes (0 and 1) before planning; plan_describe reads
    # nothing, so it is told them (else it assumes daskbatch.assumed-classes).
    p = plan_describe(ds, stats=("moments", "cov", "hist", "mi"), bins=16, range=(-4, 4), resources=resources, classes=[0, 1])
    s = db.describe(ds, stats=("moments", "cov", "hist", "mi"), bins=16, run=db.RunOptions(plan=resources), range=(-4, 4))
    assert s.provenance["plan"]["task_bytes"] == p.task_bytes
    assert p.n_classes == s.provenance["plan"]["n_classes"] == 2
    assumed = plan_describe(ds, stats=("moments", "mi"), bins=16, resources=resources)
    assert assumed.n_classes == db.config.get("assumed-classes")
    assert s.provenance["chunk_rows"] == min(p.chunk_rows, max(ds.x.chunks[0]))  # blocks are split, never merged
    assert set(p.stats) == {"moments", "cov", "hist", "mi"}
    unlabelled = plan_describe(db.open_dataset(store[0]), bins=16, resources=resources)
    assert "mi" not in unlabelled.stats and "sketch" in unlabelled.stats  # ranges found from the data


def test_describe_cluster_cuda_without_a_gpu_is_one_line_exit_2(store: tuple[str, np.ndarray]) -> None:
    from daskbatch.runtime.capacity import cuda_device_count
    from daskbatch.runtime.cluster import _has_module

    if _has_module("dask_cuda") and cuda_device_count():
        pytest.skip("this machine can start a CUDA cluster")
    result = CliRunner().invoke(main, ["describe", store[0], "--cluster", "cuda"])
    assert result.exit_code == 2, result.output
    expected = "needs dask-cuda" if not _has_module("dask_cuda") else "needs a CUDA device, and none is visible"
    assert expected in result.output
    assert "Traceback" not in result.output


@pytest.fixture()
def grouped(store: tuple[str, np.ndarray]) -> tuple[str, np.ndarray, np.ndarray]:
    """The store with group keys ``g`` (negative and sparse values) beside its label ``y``."""
    path, x = store
    g = np.random.default_rng(3).choice(np.array([-2, 0, 4, 9]), size=x.shape[0]).astype(np.int16)
    zarr.open_group(path, mode="a").create_array("g", data=g, chunks=(256,))
    return path, x.astype(np.float64), g


def test_describe_groups_equal_numpy_per_group(tmp_path: pathlib.Path, grouped) -> None:
    """``--groups g``: moments and histograms by group, from the store's array, as numpy computes them per group."""
    path, x, g = grouped
    out = tmp_path / "s.zarr"
    result = CliRunner().invoke(main, ["describe", path, "--groups", "g", "--stats", "moments,hist", "--bins", "8",
                                       "--out", str(out), "--no-progress", "--cluster", "threads"])
    assert result.exit_code == 0, result.output
    s = db.load_summary(out)
    values = np.unique(g)
    np.testing.assert_array_equal(s.groups, values)
    assert s.provenance["groups"].startswith("groups array 'g' in ")
    for j, v in enumerate(values):
        xs = x[g == v]
        np.testing.assert_array_equal(s.arrays.group_count[:, j], len(xs))
        np.testing.assert_allclose(s.arrays.group_mean[:, j], xs.mean(axis=0), rtol=1e-12)
        np.testing.assert_allclose(s.arrays.group_var[:, j], xs.var(axis=0, ddof=1), rtol=1e-10)
        for d in range(x.shape[1]):
            np.testing.assert_array_equal(s.arrays.group_hist[d, :, j], np.histogram(xs[:, d], bins=s.arrays.hist_edges[d])[0])


def test_describe_groups_report_names_the_groups(grouped) -> None:
    """The report's MI lines speak of the group key and its groups, not of a label and classes."""
    path, _, g = grouped
    result = CliRunner().invoke(main, ["describe", path, "--groups", "g", "--no-progress", "--cluster", "threads"])
    assert result.exit_code == 0, result.output
    assert f"mutual information with the group key (nats; {len(np.unique(g))} groups [" in result.output
    assert "with the label" not in result.output


def test_describe_roles_of_the_label_refused_together_in_one_line(grouped) -> None:
    path, _, _ = grouped
    for given in (["--label", "y", "--groups", "g"], ["--target", "y", "--groups", "g"], ["--label", "y", "--target", "y"]):
        result = CliRunner().invoke(main, ["describe", path, *given, "--no-progress", "--cluster", "threads"])
        assert result.exit_code == 2, result.output
        flags = [f for f in given if f.startswith("--")]
        assert f"{flags[0]} with {flags[1]} is not supported (each takes the label's place)" in result.output
    result = CliRunner().invoke(main, ["describe", path, "--groups", "nope", "--no-progress", "--cluster", "threads"])
    assert result.exit_code == 2 and "nope" in result.output, result.output


def test_describe_config_file_input_groups(tmp_path: pathlib.Path, grouped, monkeypatch) -> None:
    """``input.groups`` of a configuration file reaches ``describe --config`` and ``run`` alike (bit for bit)."""
    path, x, g = grouped
    monkeypatch.chdir(tmp_path)
    (tmp_path / "grouped.yaml").write_text(
        f"daskbatch:\n  job:\n    input: {{store: {path}, groups: g}}\n    statistics: {{stats: [moments]}}\n"
        "    selection: {score: variance}\n    transform: {steps: []}\n    cluster: {kind: threads}\n"
        "    outputs: {dir: results}\n")
    result = CliRunner().invoke(main, ["describe", path, "--no-progress", "--config", "grouped.yaml", "--out", "s.zarr"])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(main, ["run", "grouped.yaml"])
    assert result.exit_code == 0, result.output
    by_describe, by_run = db.load_summary("s.zarr"), db.load_summary(tmp_path / "results" / "summary.zarr")
    np.testing.assert_allclose(by_describe.arrays.group_mean[:, 1], x[g == 0].mean(axis=0), rtol=1e-12)
    for name in ("groups", "group_count", "group_mean", "group_var"):
        np.testing.assert_array_equal(getattr(by_describe, name), getattr(by_run, name), err_msg=name)


def test_describe_update_takes_a_split_every_of_its_own(tmp_path: pathlib.Path, store: tuple[str, np.ndarray]) -> None:
    """``--update --split-every N``: the fan-in is the run's own (no setting), and the rows merge as without it."""
    path, x = store
    more = zarr.open_group(str(tmp_path / "more.zarr"), mode="w")
    more.create_array("X", data=x[::-1] * 2, chunks=(256, 4))
    base, updated = str(tmp_path / "base.zarr"), str(tmp_path / "updated.zarr")
    common = ["--no-progress", "--cluster", "threads"]
    first = CliRunner().invoke(main, ["describe", path, "--out", base, "--stats", "moments", *common])
    assert first.exit_code == 0, first.output
    result = CliRunner().invoke(
        main, ["describe", str(tmp_path / "more.zarr"), "--update", base, "--out", updated, "--split-every", "2", *common]
    )
    assert result.exit_code == 0, result.output
    merged = db.load_summary(updated)
    both = np.concatenate([x, x[::-1] * 2]).astype(np.float64)
    assert (np.asarray(merged.count) == 4000).all()
    np.testing.assert_allclose(merged.mean, both.mean(axis=0), rtol=1e-12)
