"""``cluster("slurm")`` and ``cluster("pbs")``: dask-jobqueue clusters whose jobs really run.

dask-jobqueue writes a worker job script and hands it to ``sbatch`` or
``qsub``; it cancels with ``scancel`` or ``qdel``. There is no batch system
here, so those four commands are stand-ins on ``PATH``: submitting runs the
very job script dask-jobqueue wrote on this machine, in the background (a
one-node queue), and cancelling kills that job. The scheduler, the job
script, the worker it starts, the wait for it and the statistics are real.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest

import daskbatch as db
from daskbatch.errors import SubmitError
from daskbatch.runtime.capacity import resources_from_client
from daskbatch.runtime.cluster import cluster

pytest.importorskip("dask_jobqueue")
pytestmark = pytest.mark.slow

# Submitting: keep a copy of the script (dask-jobqueue deletes its temporary file once
# submitted) and run it in a session of its own, so that cancelling kills all of it.
SUBMIT = """#!/bin/bash
[ "$1" = --test-only ] && { echo "$(basename "$0") $*" >> "$JOBS_DIR/tested.log"; exit 0; }
script="${@: -1}"
id=$(( $(date +%s%N) / 1000 % 100000000 ))
cp "$script" "$JOBS_DIR/$id.sh"
echo "$(basename "$0") $*" >> "$JOBS_DIR/submitted.log"
setsid bash "$JOBS_DIR/$id.sh" > "$JOBS_DIR/$id.out" 2>&1 < /dev/null &
echo $! > "$JOBS_DIR/$id.pid"
echo "{ANSWER}"
"""
CANCEL = """#!/bin/bash
for id in "$@"; do
    kill -- -"$(cat "$JOBS_DIR/$id.pid")" 2>/dev/null
    echo "$(basename "$0") $id" >> "$JOBS_DIR/cancelled.log"
done
"""
BATCH_SYSTEMS = {
    "slurm": {"sbatch": SUBMIT.replace("{ANSWER}", "Submitted batch job $id"), "scancel": CANCEL},
    "pbs": {"qsub": SUBMIT.replace("{ANSWER}", "$id.pbs-server"), "qdel": CANCEL},
}


@pytest.fixture()
def queue(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    """A one-node stand-in queue for both batch systems; returns its jobs directory."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    for commands in BATCH_SYSTEMS.values():
        for name, text in commands.items():
            (bin_dir / name).write_text(text)
            (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("JOBS_DIR", str(jobs))
    return jobs


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _jobs_end(jobs: pathlib.Path, timeout: float = 60) -> bool:
    """Whether every submitted job's processes are gone within ``timeout`` s (a kill takes a moment)."""
    pids = [int(p.read_text()) for p in jobs.glob("*.pid")]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(_running(pid) for pid in pids):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("kind", ["slurm", "pbs"])
def test_jobqueue_cluster_waits_for_its_job_and_computes(kind: str, queue: pathlib.Path) -> None:
    x = np.random.default_rng(3).normal(size=(6000, 5))
    with cluster(
        kind, cores=1, memory="1GiB", processes=1, jobs=1, walltime="00:10:00",
        scheduler_options={"dashboard_address": ":0"},
    ) as client:
        # Yielded only once the job's worker has joined (default wait: 1 worker).
        workers = client.scheduler_info(n_workers=-1)["workers"]
        assert len(workers) == 1
        assert resources_from_client(client).memory_bytes == 2**30  # the job's --memory-limit
        s = db.describe(x, stats=("moments", "cov"))
    np.testing.assert_allclose(s.mean, x.mean(axis=0), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(s.cov, np.cov(x, rowvar=False), rtol=1e-12)
    submit = next(iter(BATCH_SYSTEMS[kind]))
    submitted = (queue / "submitted.log").read_text().splitlines()
    assert len(submitted) == 1 and submitted[0].startswith(submit)
    assert (queue / "cancelled.log").read_text().split()[0] in ("scancel", "qdel")
    assert _jobs_end(queue)


def test_describe_cli_starts_a_slurm_cluster_from_dask_config(queue: pathlib.Path, tmp_path: pathlib.Path) -> None:
    store = tmp_path / "data.zarr"
    db.synth(20_000, 4, classes=2, informative=1, chunk_rows=5_000, path=store)
    env = {
        **os.environ,
        # dask-jobqueue's own configuration, as a site would set it in ~/.config/dask/jobqueue.yaml
        "DASK_JOBQUEUE__SLURM__CORES": "1",
        "DASK_JOBQUEUE__SLURM__MEMORY": "1GiB",
        "DASK_JOBQUEUE__SLURM__WALLTIME": "00:10:00",
        "DASK_JOBQUEUE__SLURM__SCHEDULER_OPTIONS": '{"dashboard_address": ":0"}',
    }
    out = tmp_path / "stats.json"
    result = subprocess.run(
        [sys.executable, "-m", "daskbatch", "describe", str(store), "--label", "y", "--cluster", "slurm",
         "--no-progress", "--json", str(out)],
        env=env, capture_output=True, text=True, timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (queue / "submitted.log").read_text().startswith("sbatch ")
    assert (queue / "cancelled.log").read_text().startswith("scancel ")
    assert _jobs_end(queue)
    x = db.open_dataset(store).x.compute().astype(np.float64)
    np.testing.assert_allclose(json.loads(out.read_text())["mean"], x.mean(axis=0), rtol=1e-12)


def test_slurm_cluster_submits_and_waits_for_the_workers_asked_for(queue: pathlib.Path) -> None:
    # wait_for_workers without jobs=: that many workers (here one per job), all joined when cluster() yields,
    # so that a plan made on the client sees them all (not the first of two).
    with cluster(
        "slurm", cores=1, memory="1GiB", processes=1, walltime="00:10:00", wait_for_workers=2,
        scheduler_options={"dashboard_address": ":0"},
    ) as client:
        assert len(client.scheduler_info(n_workers=-1)["workers"]) == 2
        assert resources_from_client(client).n_workers == 2
    assert len((queue / "submitted.log").read_text().splitlines()) == 2
    # sbatch --test-only saw the worker job's script before anything was submitted.
    assert (queue / "tested.log").read_text().startswith("sbatch --test-only ")
    assert _jobs_end(queue)


REFUSE = '#!/bin/bash\necho "{cmd}: error: Batch job submission failed: Invalid account or account/partition combination" >&2\nexit 1\n'


@pytest.mark.parametrize("kind", ["slurm", "pbs"])
def test_a_refused_submission_is_one_error_at_once(
    kind: str, queue: pathlib.Path, tmp_path: pathlib.Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # slurm: sbatch --test-only refuses (nothing is submitted); pbs: qsub itself fails on the event loop.
    submit = next(iter(BATCH_SYSTEMS[kind]))
    (tmp_path / "bin" / submit).write_text(REFUSE.format(cmd=submit))
    start = time.monotonic()
    with pytest.raises(SubmitError, match="Invalid account or account/partition combination"), cluster(
        kind, cores=1, memory="1GiB", processes=1, walltime="00:10:00",
        scheduler_options={"dashboard_address": ":0"},
    ):
        pass
    assert time.monotonic() - start < 30  # not daskbatch.worker-timeout (10 minutes)
    assert "Traceback" not in capfd.readouterr().err
    assert not (queue / "submitted.log").exists()
