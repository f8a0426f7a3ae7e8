"""``daskbatch run`` jobs and ``daskbatch config --show``, on real Zarr stores through the click entry point."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import time
import warnings

import dask.config
import numpy as np
import pytest
import yaml
from click.testing import CliRunner

import daskbatch as db
from daskbatch.cli import main
from daskbatch.errors import MissingChunksWarning
from daskbatch.jobs.spec import JobConfigError, defaults, load_job, reference
from daskbatch.runtime.cluster import cli_kind

ROOT = pathlib.Path(__file__).resolve().parents[1]
ROWS, FEATURES = 6000, 10


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("jobs") / "data.zarr"
    db.synth(path, rows=ROWS, features=FEATURES, classes=3, chunk_rows=1000, seed=11)
    return str(path)


def write_job(folder: pathlib.Path, store: str, **sections: object) -> pathlib.Path:
    job = {"input": {"store": store}, "cluster": {"kind": "threads", "threads": 2}, "memory": "2GiB",
           "outputs": {"dir": str(folder / "out")}}
    for key, value in sections.items():
        job[key] = {**job[key], **value} if isinstance(job.get(key), dict) and isinstance(value, dict) else value
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump({"daskbatch": {"job": job}}))
    return path


def as_config_file(job: str) -> str:
    """A job's sections (YAML text) under ``daskbatch: job:``, as a configuration file holds them."""
    return "daskbatch:\n  job:\n" + "".join(f"    {line}\n" for line in job.splitlines())


def test_job_end_to_end_equals_sklearn_pipeline(tmp_path: pathlib.Path, store: str) -> None:
    """select (f, k=4) -> standardize -> project (k=3) equals SelectKBest -> StandardScaler -> PCA."""
    from sklearn.decomposition import PCA
    from sklearn.feature_selection import SelectKBest, f_classif
    from sklearn.preprocessing import StandardScaler

    job = write_job(tmp_path, store, selection={"param": 4},
                    transform={"steps": ["select", "standardize", "project"], "k": 3})
    result = CliRunner().invoke(main, ["run", str(job)])
    assert result.exit_code == 0, result.output
    out = tmp_path / "out"
    for name in ("summary.zarr", "selection.csv", "transformed.zarr", "report.json"):
        assert (out / name).exists(), name
    assert not [p for p in os.listdir(out) if p.startswith(".report-")]  # the temporary file was renamed

    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "ok" and report["error"] is None
    assert report["versions"]["daskbatch"] == db.__version__ and report["versions"]["dask"]
    assert report["plan"]["shape"] == [ROWS, FEATURES] and report["plan"]["chunk_rows"] >= 1000
    assert report["counts"] == {"rows": ROWS, "features": FEATURES, "selected": 4, "output_features": 3}
    assert report["missing"]["complete"] is True and report["missing"]["missing_chunks"] == []
    timings = report["timings"]
    assert {"open", "plan", "describe", "select", "transform", "total"} <= set(timings)
    assert len(timings["describe_passes"]) == 1  # f needs class moments only: one pass, no histograms
    assert timings["total"] >= timings["describe"] > 0
    assert report["peak_memory"]["process_bytes"] > 10 * 2**20
    assert report["outputs"]["transform"] == str(out / "transformed.zarr")
    assert report["job"]["selection"]["param"] == 4 and report["job"]["cluster"]["kind"] == "threads"

    data = db.open_dataset(store)
    x, y = data.x.compute().astype(np.float64), data.label.compute()
    kbest = SelectKBest(f_classif, k=4).fit(x, y)
    assert db.load_selection(out / "selection.csv").selected.tolist() == kbest.get_support().tolist()
    z = StandardScaler().fit_transform(kbest.transform(x))
    expected = PCA(n_components=3, svd_solver="full").fit_transform(z)
    got = db.open_dataset(out / "transformed.zarr")
    # standardize divides by the population std, as StandardScaler does.
    np.testing.assert_allclose(got.x.compute(), expected, rtol=1e-7, atol=1e-9)
    np.testing.assert_array_equal(got.label.compute(), y)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("input: {store: S}\nstatistics: {binz: 32}\n", "unknown key 'statistics.binz'; did you mean 'statistics.bins'?"),
        ("input: {store: S}\nbins: 32\n", "unknown key 'bins'; did you mean 'statistics.bins'?"),
        ("input: {store: S}\ncluster: {kindd: threads}\n", "unknown key 'cluster.kindd'; did you mean 'cluster.kind'?"),
        ("input: {store: S}\nstatistics: {bins: many}\n", "'statistics.bins' expects an integer, got 'many' (str)"),
        ("input: {store: S}\ncluster: {kind: slurmm}\n", "'cluster.kind' expects one of 'auto', 'local'"),
        ("input: {store: S}\ntransform: {steps: select}\n", "'transform.steps' expects a list of"),
        ("input: {store: S}\nselection: {max_corr: high}\n", "'selection.max_corr' expects a number or null"),
        ("input: {store: S}\ncluster: threads\n", "'cluster' must be a mapping"),
        ("statistics: {bins: 8}\n", "'input.store' is required"),
        ("- a list\n", "must hold a mapping"),
        ("input: {store: S\n", "not valid YAML (line"),
    ],
)
def test_bad_job_files_are_one_line_errors(tmp_path: pathlib.Path, store: str, content: str, message: str) -> None:
    job = tmp_path / "job.yaml"
    as_is = content in ("- a list\n", "input: {store: S\n")  # not a mapping, or not YAML: the file's own error
    job.write_text((content if as_is else as_config_file(content)).replace("S", store))
    result = CliRunner().invoke(main, ["run", str(job)])
    assert result.exit_code == 2, result.output
    assert message in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {job}: ")
    assert not (tmp_path / "report.json").exists()


def test_key_spellings_and_types(store: str) -> None:
    job, _ = load_job({"input": {"store": store}, "statistics": {"nan-policy": "raise", "range": [-3, 3]},
                       "memory": 0.5, "selection": {"param": "all"}})
    assert job.statistics.nan_policy == "raise"
    assert job.statistics.range == [-3.0, 3.0] and all(isinstance(v, float) for v in job.statistics.range)
    assert job.memory == 0.5 and job.selection.param == "all"
    with pytest.raises(JobConfigError, match=r"'input.x' expects a string, got 3 \(int\)"):
        load_job({"input": {"store": store, "x": 3}})
    with pytest.raises(JobConfigError, match="'transform.overwrite' expects true or false, got 1"):
        load_job({"input": {"store": store}, "transform": {"overwrite": 1}})
    with pytest.raises(JobConfigError, match="clips before project"):
        load_job({"input": {"store": store}, "transform": {"steps": ["clip", "project"]}})
    with pytest.raises(JobConfigError, match=r"'statistics.bins' must be at least 1, got 0$"):
        load_job({"input": {"store": store}, "statistics": {"bins": 0}})  # before the store is opened


def test_dask_config_sets_job_keys_and_the_file_wins(tmp_path: pathlib.Path, store: str) -> None:
    with dask.config.set({"daskbatch.job.statistics.bins": 16, "daskbatch.job.cluster.kind": "threads",
                          "daskbatch.job.outputs.dir": str(tmp_path)}):
        job, _ = load_job({"input": {"store": store}})
        assert (job.statistics.bins, job.cluster.kind, job.outputs.dir) == (16, "threads", str(tmp_path))
        assert job.statistics.ddof == 1  # untouched keys keep their defaults
        job, _ = load_job({"input": {"store": store}, "statistics": {"bins": 8}})
        assert job.statistics.bins == 8 and job.cluster.kind == "threads"
        shown = yaml.safe_load(CliRunner().invoke(main, ["config", "--show"]).output)
        assert shown["daskbatch"]["job"]["statistics"]["bins"] == 16
    with dask.config.set({"daskbatch.job.statistics.bins": "many"}):
        with pytest.raises(JobConfigError, match=r"dask config daskbatch.job: 'statistics.bins' expects an integer"):
            load_job({"input": {"store": store}})
    with dask.config.set({"daskbatch.job.statistics.binz": 3}):
        result = CliRunner().invoke(main, ["config", "--show"])
        assert result.exit_code == 2 and "did you mean 'statistics.bins'?" in result.output


def test_config_show_yaml_and_json() -> None:
    result = CliRunner().invoke(main, ["config", "--show"])
    assert result.exit_code == 0, result.output
    shown = yaml.safe_load(result.output)["daskbatch"]
    assert shown["split-every"] == dask.config.get("daskbatch.split-every")
    assert shown["job"]["transform"]["steps"] == ["select", "standardize"]
    assert shown["job"]["outputs"]["report"] == "report.json"
    as_json = json.loads(CliRunner().invoke(main, ["config", "--show", "--json"]).output)
    assert as_json == yaml.safe_load(result.output)


def test_daskbatch_yaml_is_the_only_source_of_job_defaults() -> None:
    """The schema holds no default: every key's comes from dask config, which daskbatch.yaml sets, key for key."""
    import dataclasses

    from daskbatch.jobs.schema import FILE_ONLY, SECTIONS, JobSpec

    with open(ROOT / "daskbatch" / "daskbatch.yaml") as f:
        assert yaml.safe_load(f)["daskbatch"]["job"] == defaults()  # a key the file lacks or adds fails here
    for cls in (JobSpec, *SECTIONS.values()):
        for f in dataclasses.fields(cls):
            if f.name not in SECTIONS and f.name not in FILE_ONLY:
                assert repr(f.default) == "<daskbatch.yaml>", f"{cls.__name__}.{f.name} has a default of its own"
    with dask.config.set({"daskbatch.job.statistics.bins": 7, "daskbatch.job.transform.clip": [-1.0, 2.0]}):
        assert JobSpec().statistics.bins == 7 and JobSpec().transform.clip == [-1.0, 2.0]
        assert "      bins: 7  # Histogram bins per feature." in reference()
    steps = JobSpec().transform.steps
    steps.append("clip")  # a spec's list is its own: the config's default is untouched
    assert JobSpec().transform.steps == ["select", "standardize"]
    with dask.config.set({"daskbatch.job.cluster": {"kind": "threads"}}):  # a whole section: the rest keep defaults
        spec = JobSpec()
        assert spec.cluster.kind == "threads" and spec.cluster.address == defaults()["cluster"]["address"]


def test_docs_hold_the_rendered_schema() -> None:
    """docs/jobs.md shows every key with its default and doc, as ``daskbatch run --help`` does."""
    text = (ROOT / "docs" / "jobs.md").read_text()
    assert reference() in text, "docs/jobs.md is stale: paste daskbatch.jobs.spec.reference() into it"
    help_text = CliRunner().invoke(main, ["run", "--help"]).output
    assert "  bins: 64  # Histogram bins per feature." in help_text and "75 interrupted" in help_text


def test_plan_that_cannot_fit_exits_3_before_compute(tmp_path: pathlib.Path, store: str) -> None:
    job = write_job(tmp_path, store, memory="1MiB")
    result = CliRunner().invoke(main, ["run", str(job)])
    assert result.exit_code == 3, result.output
    assert "error: no per-task budget is left" in result.output
    out = tmp_path / "out"
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "plan_error" and "PlanError" in report["error"]
    assert report["plan"] is None and report["counts"]["rows"] == ROWS
    assert not (out / "summary.zarr").exists() and not (out / "transformed.zarr").exists()


def test_log_of_a_batch_job(tmp_path: pathlib.Path, store: str) -> None:
    """The log a batch system keeps (stdout and stderr to a file): plan, phase times, the final line.

    The selection's k comes from the environment (dask config ``daskbatch.job.selection.param``).
    """
    job = write_job(tmp_path, store, transform={"steps": ["select", "standardize", "clip"]})
    log = tmp_path / "job.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DASK_DASKBATCH__JOB__SELECTION__PARAM": "3"}
    with open(log, "w") as f:
        proc = subprocess.run([sys.executable, "-m", "daskbatch", "run", str(job)], stdout=f, stderr=subprocess.STDOUT,
                              env=env, cwd=tmp_path, timeout=300)
    text = log.read_text()
    assert proc.returncode == 0, text
    assert "plan:\nPlan for a 6,000 x 10 float32 array" in text and "budget per task:" in text
    assert text.count("Plan for a") == 1 and text.count("budget per task:") == 1, text  # the plan, once
    # the CLI's log format: a timestamp, the level, the message (the logger's name only with -v)
    assert re.search(r"INFO describe: 1 pass\(es\) in \d+\.\d s \(pass 1 \d+\.\d s\); "
                     r"peak memory [\d.]+ [MGk]i?B", text), text
    assert re.search(r"select: 3 of 10 features by f \(k=3\) in \d+\.\d\d s", text), text
    assert re.search(r"transform \(select, standardize, clip\): wrote 6,000 rows x 3 features", text), text
    last = text.strip().splitlines()[-1]
    out = tmp_path / "out"
    assert re.fullmatch(
        rf"\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d INFO daskbatch run: done in \d+\.\d s; "
        rf"6,000 rows x 10 features; selected 3; wrote {re.escape(str(out / 'summary.zarr'))}, .*"
        rf"{re.escape(str(out / 'transformed.zarr'))}; report {re.escape(str(out / 'report.json'))}",
        last,
    ), last
    z = db.open_dataset(out / "transformed.zarr").x.compute()
    assert z.shape == (ROWS, 3) and z.min() >= -5 and z.max() <= 5


def test_rerun_after_an_interrupted_transform_resumes(tmp_path: pathlib.Path, store: str) -> None:
    """A re-run recomputes the summary (bitwise the same), keeps the saved one, and resumes the transform."""
    import shutil

    import zarr

    job = write_job(tmp_path, store, transform={"steps": ["select", "standardize"], "chunk_rows": 1000})
    assert CliRunner().invoke(main, ["run", str(job)]).exit_code == 0
    out = tmp_path / "out" / "transformed.zarr"
    first = db.open_dataset(out).x.compute()
    # What a kill during the transform leaves: two blocks logged, the others neither logged nor written.
    log = out / "daskbatch-output-done.log"
    kept = log.read_text().splitlines()[:2]
    log.write_text("".join(f"{line}\n" for line in kept))
    zarr.open_group(str(out), mode="r+").attrs["complete"] = False
    for block in set(range(ROWS // 1000)) - {int(b) for b in kept}:
        shutil.rmtree(out / "X" / "c" / str(block))
    time.sleep(1.1)  # the new summary's creation time (whole seconds) differs from the saved one's
    result = CliRunner().invoke(main, ["run", str(job)])
    assert result.exit_code == 0, result.output
    again = db.open_dataset(out)
    np.testing.assert_array_equal(again.x.compute(), first)
    assert zarr.open_group(str(out), mode="r").attrs["complete"] is True
    # A different selection is a different transform: refused, naming the way out (exit 2).
    changed = yaml.safe_load(job.read_text())
    changed["daskbatch"]["job"]["selection"] = {"param": 3}
    job.write_text(yaml.safe_dump(changed))
    result = CliRunner().invoke(main, ["run", str(job)])
    assert result.exit_code == 2 and "was started by a different transform" in result.output


def test_report_names_skipped_chunks(tmp_path: pathlib.Path, store: str) -> None:
    import shutil

    damaged = tmp_path / "damaged.zarr"
    shutil.copytree(store, damaged)
    shutil.rmtree(damaged / "X" / "c" / "2")  # rows 2,000-2,999 of X are gone
    job = write_job(tmp_path, str(damaged), statistics={"missing": "skip"})
    with warnings.catch_warnings():  # as outside pytest (its filterwarnings=error would raise it)
        warnings.simplefilter("always", MissingChunksWarning)
        result = CliRunner().invoke(main, ["run", str(job)])
    assert result.exit_code == 0, result.output
    # the CLI logs every warning as one line
    assert re.search(r"WARNING MissingChunksWarning: .*X/c/2/0", result.output), result.output
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    missing = report["missing"]
    assert missing["complete"] is False and missing["missing_policy"] == "skip"
    assert missing["missing_chunks"] == [[2, 0]] and missing["rows_skipped"] == 1000
    assert missing["skipped_rows"] == [[2000, 3000]]
    assert db.open_dataset(tmp_path / "out" / "transformed.zarr").x.shape == (ROWS - 1000, FEATURES)  # k=10 of 10

    job = write_job(tmp_path, str(damaged))  # the default refuses, naming the chunk (exit 2)
    result = CliRunner().invoke(main, ["run", str(job)])
    assert result.exit_code == 2 and "X/c/2/0" in result.output, result.output


def test_job_input_weights_equal_describe(tmp_path: pathlib.Path, store: str) -> None:
    """``input.weights`` names the store's weight array: the job's summary is describe(weights=...)'s."""
    import shutil

    import zarr

    weighted = tmp_path / "weighted.zarr"
    shutil.copytree(store, weighted)
    w = np.random.default_rng(5).gamma(2.0, 1.0, size=ROWS)
    zarr.open_group(weighted, mode="a").create_array("w", data=w, chunks=(1000,))
    job = write_job(tmp_path, str(weighted), input={"weights": "w"}, statistics={"stats": ["moments"]},
                    transform={"steps": []}, selection={"score": "variance"})
    result = CliRunner().invoke(main, ["run", str(job)])
    assert result.exit_code == 0, result.output
    got = db.load_summary(tmp_path / "out" / "summary.zarr")
    want = db.describe(str(weighted), weights="w", stats=("moments",))
    assert "weights" in got.provenance["weights"]
    np.testing.assert_array_equal(got.weight_sum, want.weight_sum)
    np.testing.assert_allclose(got.mean, want.mean, rtol=1e-13)
    np.testing.assert_allclose(got.var, want.var, rtol=1e-12)


def test_job_input_target_equals_describe(tmp_path: pathlib.Path, store: str) -> None:
    """``input.target`` names a continuous target in the store: the job's MI is describe(target=...)'s."""
    import shutil

    import zarr

    targeted = tmp_path / "targeted.zarr"
    shutil.copytree(store, targeted)
    t = np.random.default_rng(6).normal(size=ROWS)
    zarr.open_group(targeted, mode="a").create_array("t", data=t, chunks=(1000,))
    job = write_job(tmp_path, str(targeted), input={"target": "t"}, statistics={"stats": ["moments", "mi"]},
                    transform={"steps": []}, selection={"score": "variance"})
    result = CliRunner().invoke(main, ["run", str(job)])
    assert result.exit_code == 0, result.output
    got = db.load_summary(tmp_path / "out" / "summary.zarr")
    want = db.describe(str(targeted), target="t", stats=("moments", "mi"))
    assert got.provenance["target"]["cuts"] == want.provenance["target"]["cuts"]
    np.testing.assert_allclose(got.mi, want.mi, rtol=1e-12, atol=1e-15)


def test_job_input_groups_equal_numpy_per_group(tmp_path: pathlib.Path, store: str) -> None:
    """``input.groups`` names the store's group keys: the job's grouped moments and histograms are numpy's per group."""
    import shutil

    import zarr

    grouped = tmp_path / "grouped.zarr"
    shutil.copytree(store, grouped)
    g = np.random.default_rng(8).integers(-1, 4, size=ROWS).astype(np.int32)
    zarr.open_group(grouped, mode="a").create_array("g", data=g, chunks=(1000,))
    job = write_job(tmp_path, str(grouped), input={"groups": "g"}, transform={"steps": []},
                    statistics={"stats": ["moments", "hist"], "bins": 10, "range": "minmax"},
                    selection={"score": "variance"})
    result = CliRunner().invoke(main, ["run", str(job)])
    assert result.exit_code == 0, result.output
    got = db.load_summary(tmp_path / "out" / "summary.zarr")
    x = np.asarray(db.open_dataset(str(grouped)).x, dtype=np.float64)
    np.testing.assert_array_equal(got.groups, np.arange(-1, 4))
    for j, v in enumerate(got.groups):
        xs = x[g == v]
        np.testing.assert_array_equal(got.arrays.group_count[:, j], len(xs))
        np.testing.assert_allclose(got.arrays.group_mean[:, j], xs.mean(axis=0), rtol=1e-12)
        np.testing.assert_allclose(got.arrays.group_var[:, j], xs.var(axis=0, ddof=1), rtol=1e-10)
        for d in range(FEATURES):
            np.testing.assert_array_equal(got.arrays.group_hist[d, :, j], np.histogram(xs[:, d], bins=got.arrays.hist_edges[d])[0])


@pytest.mark.parametrize(("sections", "message"), [
    ({"input": {"groups": "g", "label": "y"}},
     "'input.label' with 'input.groups' is not supported (each takes the label's place): describe them in separate jobs"),
    ({"input": {"groups": "g", "target": "t"}}, "'input.target' with 'input.groups' is not supported"),
    ({"input": {"groups": "g"}}, "selection score 'f' needs class labels, and input.groups takes the label's place: "
                                 "set selection.score: variance"),
])
def test_job_groups_refusals_are_one_line(tmp_path: pathlib.Path, store: str, sections: dict, message: str) -> None:
    result = CliRunner().invoke(main, ["run", str(write_job(tmp_path, store, **sections))])
    lines = [line for line in result.output.splitlines() if line.startswith("error")]
    assert result.exit_code == 2 and len(lines) == 1 and message in lines[0], result.output


@pytest.mark.parametrize("sized", [False, True])
def test_auto_without_gpus_runs_in_process_unless_the_job_sizes_workers(
    tmp_path: pathlib.Path, store: str, sized: bool
) -> None:
    """``kind: auto`` without CUDA runs on dask's threads as ``daskbatch describe`` does; ``n_workers`` asks for a cluster."""
    if cli_kind("auto") != "threads":
        pytest.skip("CUDA devices and dask-cuda here: auto starts a dask-cuda cluster")
    cluster = {"kind": "auto", "n_workers": 1} if sized else {"kind": "auto"}
    job = write_job(tmp_path, store, cluster=cluster)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "daskbatch", "run", str(job)], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # cluster() says where it started one (the scheduler and its dashboard) on stderr.
    assert ("started a local cluster at" in proc.stderr) is sized, proc.stderr[-3000:]



@pytest.mark.slow  # compiles the kernels into an empty numba cache (a new install): 10 s to a minute
def test_local_cluster_job_compiles_the_kernels_before_its_workers_start(tmp_path: pathlib.Path, store: str) -> None:
    """``cluster: local`` compiles the kernels once, here, as ``describe --cluster local`` does.

    Each worker process compiled them itself, at once, and the log said nothing of it.
    """
    job = write_job(tmp_path, store, cluster={"kind": "local", "n_workers": 1, "threads": 1},
                    statistics={"stats": "moments"}, outputs={"selection": None, "transform": None})
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    proc = subprocess.run([sys.executable, "-m", "daskbatch", "run", str(job)], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = proc.stderr
    assert log.count("Compiling the CPU kernels once") == 1, log[-3000:]
    assert log.index("Compiling the CPU kernels once") < log.index("started a local cluster at"), log[-3000:]
    assert re.search(r"compiled in \d+\.\d s", log), log[-3000:]

_RENAMES: list[tuple[str, str]] | None = None  # recording while a test sets it to a list


def _record_renames(event: str, args: tuple) -> None:
    """Audit hook: note every rename (os.rename, os.replace) while :data:`_RENAMES` is a list."""
    if event == "os.rename" and _RENAMES is not None:
        _RENAMES.append((os.fspath(args[0]), os.fspath(args[1])))


sys.addaudithook(_record_renames)  # audit hooks cannot be removed: it records only while a test asks


def test_the_report_is_staged_once_and_renamed_into_place(tmp_path: pathlib.Path, store: str) -> None:
    """One temporary file beside report.json and one rename: not a temporary of a temporary."""
    global _RENAMES
    job = write_job(tmp_path, store, outputs={"selection": None, "transform": None})
    _RENAMES = []
    try:
        result = CliRunner().invoke(main, ["run", str(job)])
    finally:
        renames, _RENAMES = _RENAMES, None
    assert result.exit_code == 0, result.output
    report = tmp_path / "out" / "report.json"
    into_report = [(src, dst) for src, dst in renames if "report" in os.path.basename(dst)]
    assert len(into_report) == 1 and into_report[0][1] == str(report), renames
    assert os.path.dirname(into_report[0][0]) == str(report.parent)
    text = report.read_text()
    assert text.startswith('{\n  "daskbatch_output": "job_report",') and text.endswith("}\n")
    assert json.loads(text)["status"] == "ok"
    assert sorted(p.name for p in report.parent.iterdir()) == ["report.json", "summary.zarr"]  # no leftovers
