"""Losing the scheduler during ``describe`` or ``run JOB`` ends with one line and the right exit code.

It used to exit 1 after a 70-line ``FutureCancelledError`` traceback. Now a
run with ``--checkpoint`` exits 75 ("interrupted, resumable"), one without
exits 1, each with one line of its own and no traceback. ``daskbatch run``
ends the same way (its job file's ``checkpoint:`` in place of the option)
and says in its job report that the run was interrupted.

A real ``dask scheduler`` and ``dask worker`` run as subprocesses, and so does
the CLI; the scheduler is killed once the run's tasks are on it. Dask blocks
of 10 rows (``daskbatch.target-chunk-bytes``) make the compute last seconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import numpy as np
import pytest
import yaml
import zarr

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture()
def slow_store(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "d.zarr"
    x = np.random.default_rng(0).normal(size=(20_000, 4))
    zarr.open_group(str(path), mode="w").create_array("X", data=x, chunks=(2_000, 4))
    return path


@pytest.fixture()
def env() -> dict[str, str]:
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(paths),
        "DASK_DASKBATCH__TARGET_CHUNK_BYTES": "320",  # 10 rows of 4 float64 per task: ~2,000 tasks
        "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "5s",
    }


@pytest.fixture()
def scheduler_file(tmp_path: pathlib.Path, env: dict[str, str]) -> Iterator[tuple[pathlib.Path, subprocess.Popen[bytes]]]:
    """A scheduler and one single-threaded worker, as separate processes."""
    with cluster_processes(tmp_path / "scheduler.json", env) as (scheduler, _):
        yield tmp_path / "scheduler.json", scheduler


@contextlib.contextmanager
def cluster_processes(
    sf: pathlib.Path, env: dict[str, str], *worker_args: str
) -> Iterator[tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]]:
    """Start ``dask scheduler`` and ``dask worker`` (one thread, ``worker_args``) on ``sf``; kill them on exit."""
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "env": env}
    scheduler = subprocess.Popen(
        [sys.executable, "-m", "dask", "scheduler", "--scheduler-file", str(sf), "--no-dashboard", "--port", "0"], **quiet
    )
    worker = subprocess.Popen(
        [sys.executable, "-m", "dask", "worker", "--scheduler-file", str(sf), "--nthreads", "1", "--no-dashboard",
         *worker_args], **quiet,
    )
    try:
        yield scheduler, worker
    finally:
        for proc in (worker, scheduler):
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)


def tasks_on(sf: pathlib.Path) -> int:
    """How many tasks the scheduler holds (asked through a short-lived client)."""
    from distributed import Client

    with Client(scheduler_file=str(sf), timeout="20s") as client:
        client.wait_for_workers(1, timeout=60)
        return int(client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks)))


def kill_scheduler_mid_run(
    sf: pathlib.Path, scheduler: subprocess.Popen[bytes], env: dict[str, str], store: pathlib.Path, *args: str
) -> subprocess.CompletedProcess[str]:
    command = ["describe", str(store), "--scheduler-file", str(sf), "--no-progress", "--stats", "moments", *args]
    return kill_scheduler_during(sf, scheduler, env, command)


def kill_scheduler_during(
    sf: pathlib.Path, scheduler: subprocess.Popen[bytes], env: dict[str, str], command: list[str]
) -> subprocess.CompletedProcess[str]:
    """Run ``daskbatch COMMAND`` on the scheduler of ``sf`` and kill ``scheduler`` (or a worker) once its tasks are there."""
    deadline = time.monotonic() + 60
    while not sf.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert tasks_on(sf) == 0  # the worker is up and nothing runs yet
    run = subprocess.Popen(
        [sys.executable, "-m", "daskbatch", *command],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    from distributed import Client

    with Client(scheduler_file=str(sf), timeout="20s") as watch:
        while run.poll() is None and time.monotonic() < deadline:
            if watch.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks)) > 0:
                break
            time.sleep(0.02)
    assert run.poll() is None, "the run ended before its tasks were seen: make the store slower"
    scheduler.send_signal(signal.SIGKILL)
    out, err = run.communicate(timeout=120)
    return subprocess.CompletedProcess(run.args, run.returncode, out, err)


@pytest.mark.slow  # three processes and ~2,000 tasks: about 20 s on two cores
@pytest.mark.parametrize("with_checkpoint", [True, False], ids=["checkpoint", "no-checkpoint"])
def test_lost_scheduler_is_one_line_with_its_exit_code(
    tmp_path: pathlib.Path, slow_store: pathlib.Path, scheduler_file: tuple[pathlib.Path, subprocess.Popen[bytes]],
    env: dict[str, str], with_checkpoint: bool,
) -> None:
    sf, scheduler = scheduler_file
    checkpoint = tmp_path / "ckpt"
    args = ["--checkpoint", str(checkpoint)] if with_checkpoint else []
    done = kill_scheduler_mid_run(sf, scheduler, env, slow_store, *args)
    assert "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    if with_checkpoint:
        assert done.returncode == 75, done.stderr
        assert last.startswith("interrupted, resumable: lost the scheduler") and str(checkpoint) in last, last
    else:
        assert done.returncode == 1, done.stderr
        assert last.startswith("error: lost the scheduler") and "--checkpoint" in last, last
    assert done.stderr.count("lost the scheduler") == 1


@pytest.mark.slow  # as above, through a job file
@pytest.mark.parametrize(("with_checkpoint", "join"), [(True, "scheduler_file"), (False, "scheduler_file"),
                                                       (True, "address")])
def test_run_job_lost_scheduler_ends_as_describe(
    tmp_path: pathlib.Path, slow_store: pathlib.Path, scheduler_file: tuple[pathlib.Path, subprocess.Popen[bytes]],
    env: dict[str, str], with_checkpoint: bool, join: str,
) -> None:
    """``daskbatch run`` used to print describe's bare "lost the scheduler" line and exit 1, checkpoint or not."""
    sf, scheduler = scheduler_file
    deadline = time.monotonic() + 60
    while not sf.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    checkpoint = tmp_path / "ckpt"
    where = str(sf) if join == "scheduler_file" else yaml.safe_load(sf.read_text())["address"]
    job = {
        "input": {"store": str(slow_store)}, "statistics": {"stats": "moments"},
        "cluster": {"kind": join, join: where}, "outputs": {"dir": str(tmp_path / "out"), "selection": None, "transform": None},
        **({"checkpoint": str(checkpoint)} if with_checkpoint else {}),
    }
    job_file = tmp_path / "job.yaml"
    job_file.write_text(yaml.safe_dump({"daskbatch": {"job": job}}))
    done = kill_scheduler_during(sf, scheduler, env, ["run", str(job_file)])
    assert "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    if with_checkpoint:
        assert done.returncode == 75, done.stderr
        assert last.startswith("interrupted, resumable: lost the scheduler") and str(checkpoint) in last, last
        assert "run the same command to resume" in last, last
    else:
        assert done.returncode == 1, done.stderr
        assert last.startswith("error: lost the scheduler") and "checkpoint in the job file" in last, last
        assert "--checkpoint" not in last, last  # run has no such option
    assert done.stderr.count("lost the scheduler") == 2  # the report's summary line (a log line) and the last line
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["status"] == "interrupted" and "lost the scheduler" in report["error"], report
    assert not (tmp_path / "out" / "summary.zarr").exists()


@pytest.mark.slow  # as above; the scheduler gives up 5 s after its only worker is gone
@pytest.mark.parametrize("verb", ["describe", "run"])
def test_lost_workers_end_as_a_lost_scheduler(
    tmp_path: pathlib.Path, slow_store: pathlib.Path, env: dict[str, str], verb: str,
) -> None:
    """Every worker lost past ``no-workers-timeout``: one line and exit 75 or 1, not a ``NoWorkerError`` traceback."""
    env = {**env, "DASK_DISTRIBUTED__SCHEDULER__NO_WORKERS_TIMEOUT": "5s"}
    sf, checkpoint = tmp_path / "scheduler.json", tmp_path / "ckpt"
    with cluster_processes(sf, env, "--no-nanny") as (_, worker):  # no nanny to start the worker again
        if verb == "describe":
            command = ["describe", str(slow_store), "--scheduler-file", str(sf), "--no-progress", "--stats", "moments",
                       "--checkpoint", str(checkpoint)]
        else:
            job = {"input": {"store": str(slow_store)}, "statistics": {"stats": "moments"},
                   "cluster": {"kind": "scheduler_file", "scheduler_file": str(sf)},
                   "outputs": {"dir": str(tmp_path / "out"), "selection": None, "transform": None}}
            (tmp_path / "job.yaml").write_text(yaml.safe_dump({"daskbatch": {"job": job}}))
            command = ["run", str(tmp_path / "job.yaml")]
        done = kill_scheduler_during(sf, worker, env, command)
    assert "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    if verb == "describe":
        assert done.returncode == 75, done.stderr
        assert last.startswith("interrupted, resumable: lost the workers (NoWorkerError") and str(checkpoint) in last
    else:
        assert done.returncode == 1, done.stderr
        assert last.startswith("error: lost the workers during the computation (NoWorkerError"), last
        assert json.loads((tmp_path / "out" / "report.json").read_text())["status"] == "interrupted"


@pytest.mark.slow  # as above; the scheduler is killed once the job's transform has written blocks
def test_run_job_lost_scheduler_in_the_transform_is_resumable(
    tmp_path: pathlib.Path, slow_store: pathlib.Path, scheduler_file: tuple[pathlib.Path, subprocess.Popen[bytes]],
    env: dict[str, str],
) -> None:
    """The transform's blocks runner used to skip the futures a lost scheduler cancelled: "blocks were not written", exit 2."""
    sf, scheduler = scheduler_file
    deadline = time.monotonic() + 60
    while not sf.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    out, checkpoint = tmp_path / "out", tmp_path / "ckpt"
    job = {
        "input": {"store": str(slow_store)}, "statistics": {"stats": "moments"},
        "cluster": {"kind": "scheduler_file", "scheduler_file": str(sf)}, "checkpoint": str(checkpoint),
        "outputs": {"dir": str(out), "selection": None, "transform": "t.zarr"},
        "transform": {"steps": ["clip"], "clip": [-1.0, 1.0], "chunk_rows": 10},  # 2,000 blocks: seconds of work
    }
    job_file = tmp_path / "job.yaml"
    job_file.write_text(yaml.safe_dump({"daskbatch": {"job": job}}))
    run = subprocess.Popen([sys.executable, "-m", "daskbatch", "run", str(job_file)], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    done_log = out / "t.zarr" / "daskbatch-output-done.log"
    deadline = time.monotonic() + 120
    while run.poll() is None and time.monotonic() < deadline:
        if done_log.exists() and done_log.read_text().count("\n") >= 20:
            break
        time.sleep(0.02)
    assert run.poll() is None, run.communicate()
    scheduler.send_signal(signal.SIGKILL)
    _, err = run.communicate(timeout=120)
    assert "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert run.returncode == 75, err
    assert last.startswith("interrupted, resumable: lost the scheduler"), last
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "interrupted" and "lost the scheduler" in report["error"], report
