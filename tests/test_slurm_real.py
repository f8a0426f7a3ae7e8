"""``examples/hpc/slurm.sbatch`` and ``cluster: {kind: slurm}`` on a real SLURM.

Runs when ``sinfo`` answers: ``.ci/run`` starts a one-node SLURM (Debian's
slurm-wlm, munge) with ``../shared/hpc/start-slurm.sh`` as root, with
``REQUEUE_DELAY=30 SCHED_INTERVAL=10``. The jobs are submitted from a fresh
directory with ``sbatch``; Slurm runs them, signals them, requeues them and
reports their states (``scontrol show job``). Nothing here is a stand-in.

The batch jobs are submitted together and run at once where the node has the
CPUs for them; each test then waits for its own.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml
import zarr

import daskbatch as db

REPO = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = REPO / "examples" / "hpc" / "slurm.sbatch"
# ../shared/hpc beside the clone (CI); HPC_SCRIPTS names another folder holding start-slurm.sh.
START = pathlib.Path(os.environ.get("HPC_SCRIPTS", REPO.parent / "shared" / "hpc")) / "start-slurm.sh"
BIN = pathlib.Path(sys.executable).parent
RANGE, BINS = (-5.0, 5.0), 64  # examples/hpc/daskbatch.yaml


def _answers() -> str | None:
    """Why no SLURM can be used here, or None when sinfo answers."""
    if shutil.which("sbatch") is None:
        return f"no sbatch on PATH: .ci/run starts a SLURM with {START} (as root)"
    done = subprocess.run(["sinfo", "-h", "-o", "%D %c %T"], capture_output=True, text=True, timeout=30)
    if done.returncode != 0 or not done.stdout.strip():
        return f"sinfo does not answer ({' '.join(done.stderr.split()) or 'no nodes'}): start a SLURM with {START}"
    return None


_WHY_NOT = _answers()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(_WHY_NOT is not None, reason=str(_WHY_NOT))]


def _env(**extra: str) -> dict[str, str]:
    """The environment a job is submitted with (--export=ALL): this Python's bin first on PATH."""
    # PYTHONPATH: `dask` on PATH may be a link to another environment's (a shared dependency tree).
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
            "DASK_DISTRIBUTED__WORKER__MEMORY__TARGET": "false", **extra}


def _sbatch(cwd: pathlib.Path, store: pathlib.Path, config: pathlib.Path, *options: str, **extra: str) -> str:
    """Submit slurm.sbatch from ``cwd`` (the job's SLURM_SUBMIT_DIR) through its checking submit mode."""
    done = subprocess.run(
        ["bash", str(SCRIPT), "--parsable", "--nodes=1", "--cpus-per-task=1", "--mem=3G", "--time=15", *options],
        cwd=cwd, env=_env(STORE=str(store), CONFIG=str(config), **extra), capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip().split(";")[0]


def _job(job: str) -> dict[str, str]:
    out = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True, timeout=30).stdout
    return dict(kv.split("=", 1) for kv in out.split() if "=" in kv)


def _wait(job: str, states: tuple[str, ...], timeout: float = 600) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        info = _job(job)
        if info.get("JobState") in states:
            return info
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job} is {info.get('JobState')} ({info.get('Reason')}) after {timeout}s")
        time.sleep(1)


def _output(cwd: pathlib.Path, job: str) -> str:
    path = cwd / f"daskbatch-{job}.out"
    return path.read_text(errors="replace") if path.exists() else ""


def _config(tmp: pathlib.Path, **replace: str) -> pathlib.Path:
    text = (REPO / "examples" / "hpc" / "daskbatch.yaml").read_text()
    for old, new in replace.items():
        text = text.replace(old, new)
    path = tmp / "job-config.yaml"
    path.write_text(text)
    return path


def _check_results(stats: pathlib.Path, store: pathlib.Path, full: bool = True) -> db.Summary:
    """The summary equals NumPy on the same data (``full``: also the covariance and histograms)."""
    x = zarr.open_group(str(store), mode="r")["X"][:].astype(np.float64)
    s = db.load_summary(stats)
    np.testing.assert_array_equal(s.count, np.full(x.shape[1], x.shape[0]))
    np.testing.assert_allclose(s.mean, x.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(s.var, x.var(axis=0, ddof=1), rtol=1e-11)
    if full:
        np.testing.assert_allclose(s.cov, np.cov(x, rowvar=False), rtol=1e-9, atol=1e-12)
        expected = np.stack([np.histogram(col, bins=BINS, range=RANGE)[0] for col in x.T])
        np.testing.assert_array_equal(s.hist_counts, expected)
    return s


def _same(a: db.Summary, b: db.Summary) -> None:
    """Bitwise equal results."""
    for name in ("count", "mean", "var", "cov", "hist_counts", "mi"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """The batch jobs, submitted together: small, large (interrupted here) and one whose walltime is too short.

    Once the large job has checkpointed its first unit, Slurm sends it USR1
    (``scancel --batch --signal=USR1``, as ``--signal=B:USR1@300`` would).
    """
    tmp = tmp_path_factory.mktemp("slurm")
    small, large = tmp / "small.zarr", tmp / "large.zarr"
    db.synth(40_000, 6, classes=3, informative=2, chunk_rows=4_000, path=small)
    # 40 blocks of 100,000 rows, merged in pairs: 20 checkpoint units.
    db.synth(4_000_000, 8, classes=3, informative=2, chunk_rows=100_000, path=large)
    config = _config(tmp, **{"split-every: 16": "split-every: 2", "target-chunk-bytes: 128MiB": "target-chunk-bytes: 4MiB"})
    submit = {name: tmp / name for name in ("small", "large", "stall")}
    for d in submit.values():
        d.mkdir()
    ids = {
        "large": _sbatch(submit["large"], large, config),
        "small": _sbatch(submit["small"], small, config),
    }
    # One minute, warned 57 s before: describe never gets to checkpoint a block (at 55 s it sometimes did,
    # once its start got faster).
    ids["stall"] = _sbatch(submit["stall"], large, config, "--time=1", "--signal=B:USR1@57",
                           STOP_BEFORE="57", MAX_STALLED="2")
    both_running = False
    deadline = time.monotonic() + 600
    while not list(submit["large"].glob("daskbatch-*/checkpoint/pass-*/L*.ckpt")):
        states = {name: _job(ids[name]).get("JobState") for name in ("small", "large")}
        both_running |= set(states.values()) == {"RUNNING"}
        assert states["large"] in ("PENDING", "RUNNING"), _output(submit["large"], ids["large"])
        assert time.monotonic() < deadline, states
        time.sleep(0.05)
    subprocess.run(["scancel", "--batch", "--signal=USR1", ids["large"]], check=True, timeout=30)
    return {"tmp": tmp, "config": config, "small": small, "large": large, "dirs": submit, "ids": ids,
            "interrupted": time.monotonic(), "both_running": both_running}


def _jobdir(cwd: pathlib.Path, job: str) -> pathlib.Path:
    (path,) = [p for p in cwd.glob(f"daskbatch-{job}*") if p.is_dir()]
    return path


def test_small_job_completes_beside_another_on_the_same_node(jobs):
    cwd, job = jobs["dirs"]["small"], jobs["ids"]["small"]
    info = _wait(job, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"))
    out = _output(cwd, job)
    assert info["JobState"] == "COMPLETED", out
    # Both on the one node at once: each scheduler took a free port (no "Address already in use").
    assert jobs["both_running"], "the two jobs never ran at once"
    jobdir = _jobdir(cwd, job)
    assert "dashboard on " in out and f"results: {jobdir}/stats.zarr" in out
    assert "Plan for a 40,000 x 6 float32 array" in (jobdir / "plan.txt").read_text()
    _check_results(jobdir / "stats.zarr", jobs["small"])


def test_usr1_requeues_and_the_job_resumes_to_the_uninterrupted_result(jobs, tmp_path):
    cwd, job = jobs["dirs"]["large"], jobs["ids"]["large"]
    interrupted = jobs["interrupted"]
    info = _wait(job, ("PENDING", "REQUEUED", "COMPLETED", "FAILED"), timeout=300)
    assert info["JobState"] != "FAILED", _output(cwd, job)
    info = _wait(job, ("RUNNING", "COMPLETED", "FAILED"), timeout=600)
    restarted = time.monotonic()
    info = _wait(job, ("COMPLETED", "FAILED"), timeout=900)
    out = _output(cwd, job)
    assert info["JobState"] == "COMPLETED", out
    assert int(info["Restarts"]) == 1, info
    assert "interrupted, resumable: requeueing (restart 1)" in out and f"job {job} restart 1 on" in out
    jobdir = _jobdir(cwd, job)
    runs = [json.loads(line) for line in next((jobdir / "checkpoint").glob("pass-*/runs.jsonl")).read_text().splitlines()]
    assert 0 < runs[-1]["reused_blocks"] < runs[-1]["blocks"], runs
    # The requeued job waits for Slurm's credential lifetime (AuthInfo cred_expire) before it starts again.
    auth = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=30).stdout
    delay = int(m.group(1)) if (m := re.search(r"cred_expire=(\d+)", auth)) else 120
    print(f"requeue: restarted {restarted - interrupted:.0f} s after USR1 (cred_expire {delay} s); runs {runs}")
    assert restarted - interrupted >= delay * 0.8
    # The same command, uninterrupted (here, on a local cluster): bitwise the same summary.
    ref = tmp_path / "ref"
    ref.mkdir()
    done = subprocess.run(
        [str(BIN / "daskbatch"), "describe", str(jobs["large"]), "--config", str(jobdir / "describe-options.yaml"), "--cluster", "local",
         "--checkpoint", str(ref / "checkpoint"), "--out", str(ref / "stats.zarr")],
        env=_env(DASK_DASKBATCH__SPLIT_EVERY="8"), capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr
    _same(_check_results(jobdir / "stats.zarr", jobs["large"]), db.load_summary(ref / "stats.zarr"))


def test_a_walltime_too_short_stops_requeueing_after_runs_without_progress(jobs):
    cwd, job = jobs["dirs"]["stall"], jobs["ids"]["stall"]
    info = _wait(job, ("COMPLETED", "FAILED", "TIMEOUT", "CANCELLED"), timeout=900)
    out = _output(cwd, job)
    assert info["JobState"] == "FAILED", out
    assert int(info["Restarts"]) == 1, info
    assert "not requeueing: 2 runs in a row (restart 1) were stopped before they checkpointed a block" in out, out


def test_a_shape_the_partition_cannot_run_is_refused_at_submission(jobs, tmp_path):
    cpus = max(int(c) for c in subprocess.run(["sinfo", "-h", "-o", "%c"], capture_output=True, text=True,
                                              timeout=30).stdout.split())
    done = subprocess.run(
        ["bash", str(SCRIPT), f"--cpus-per-task={cpus + 1}", "--nodes=1"],
        cwd=tmp_path, env=_env(STORE=str(jobs["small"])), capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 1
    assert "cannot run this job" in done.stderr and f"with {cpus} CPUs" in done.stderr, done.stderr
    assert "Submitted" not in done.stdout


def test_daskbatch_run_on_a_slurm_cluster_of_two_jobs(jobs, tmp_path):
    job = {
        "input": {"store": str(jobs["small"]), "label": "y"},
        "statistics": {"range": [-5, 5], "bins": BINS},
        "cluster": {"kind": "slurm", "n_workers": 2, "threads": 1, "memory": "1GiB"},
        "outputs": {"dir": str(tmp_path / "out")},
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump({"daskbatch": {"job": job}}))
    env = _env(DASK_JOBQUEUE__SLURM__WALLTIME="00:15:00", DASK_JOBQUEUE__SLURM__LOG_DIRECTORY=str(tmp_path / "logs"),
               DASK_JOBQUEUE__SLURM__SCHEDULER_OPTIONS='{"dashboard_address": ":0"}')
    done = subprocess.run([str(BIN / "daskbatch"), "run", str(tmp_path / "job.yaml")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    # The plan saw both workers: describe waited for every worker of the jobs it submitted.
    assert "2 workers x 1 thread" in done.stderr, done.stderr
    logs = list((tmp_path / "logs").glob("*.err"))
    assert len(logs) == 2, logs  # two worker jobs, each wrote its log
    # The default selection (score f) needs moments and class_moments: with statistics.range given,
    # no histogram is built, and the class values go to class_moments alone.
    s = _check_results(tmp_path / "out" / "summary.zarr", jobs["small"], full=False)
    g = zarr.open_group(str(jobs["small"]), mode="r")
    x, y = g["X"][:].astype(np.float64), g["y"][:]
    np.testing.assert_allclose(np.transpose(s.class_mean), [x[y == c].mean(axis=0) for c in np.unique(y)], rtol=1e-12)


def _restart_slurm(nodes: int) -> None:
    """Stop the SLURM start-slurm.sh started and start it again with ``nodes`` emulated nodes."""
    stop = START.with_name("stop-slurm.sh")
    env = {**os.environ, "NODES": str(nodes), "SKIP_INSTALL": "1",
           "REQUEUE_DELAY": os.environ.get("REQUEUE_DELAY", "30"), "SCHED_INTERVAL": os.environ.get("SCHED_INTERVAL", "10")}
    # Up to three tries: a slurmd of the stopped SLURM may still be shutting down when the new one starts (CI once
    # logged "slurmd did not start" while the two emulated nodes' slurmds were "shutdown completing").
    for attempt in range(3):
        subprocess.run(["bash", str(stop)], capture_output=True, text=True, timeout=120)
        time.sleep(2 * attempt)
        done = subprocess.run(["bash", str(START)], env=env, capture_output=True, text=True, timeout=300)
        if done.returncode == 0:
            return
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.skipif(os.geteuid() != 0 or not START.exists(), reason=f"restarting SLURM with NODES=2 needs root and {START}")
def test_two_nodes_give_the_one_node_result(jobs, tmp_path):
    # Last in this module: SLURM restarts with two emulated nodes (n1, n2 on this host), one
    # worker on each; the tree reduction's result is bitwise the one-node job's (same blocks, same tree).
    one_node = _wait(jobs["ids"]["large"], ("COMPLETED", "FAILED"), timeout=900)
    assert one_node["JobState"] == "COMPLETED"
    for name in ("stall",):  # the other jobs end first: restarting cancels what runs
        _wait(jobs["ids"][name], ("COMPLETED", "FAILED", "TIMEOUT", "CANCELLED"), timeout=900)
    start = time.monotonic()
    _restart_slurm(2)
    try:
        job = _sbatch(tmp_path, jobs["large"], jobs["config"], "--nodes=2", "--ntasks-per-node=1")
        info = _wait(job, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), timeout=900)
        out = _output(tmp_path, job)
        assert info["JobState"] == "COMPLETED", out
        assert info["NumNodes"] == "2" and info["NodeList"] == "n[1-2]", info
        jobdir = _jobdir(tmp_path, job)
        workers = (jobdir / "logs" / "workers.log").read_text()
        assert workers.count("Registered to:") == 2, workers
        assert "2 workers x 1 thread" in (jobdir / "plan.txt").read_text()
        _same(db.load_summary(jobdir / "stats.zarr"), db.load_summary(_jobdir(jobs["dirs"]["large"], jobs["ids"]["large"]) / "stats.zarr"))
    finally:
        print(f"two-node case: {time.monotonic() - start:.0f} s with the restarts")
        _restart_slurm(1)
