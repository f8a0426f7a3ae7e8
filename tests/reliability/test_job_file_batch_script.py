"""A job file's jobqueue settings cannot put shell commands into the batch job script.

Before, ``jobqueue: {slurm: {local-directory: "/scratch; touch PWNED #"}}``
passed the check, and the worker line of the generated script ended
``--local-directory /scratch; touch PWNED #``: running it made the file; a
``name: "w$(...)"`` went into ``#SBATCH -J``. Each allowlisted value is now
checked against its kind and a path is quoted; free-form shell keys are refused.
The scripts here are dask-jobqueue's own, run by bash with the worker's Python
replaced by ``printf`` (which shows the arguments bash passes).
"""

from __future__ import annotations

import copy
import pathlib
import subprocess
from collections.abc import Iterator

import dask.config
import pytest
import yaml

from daskbatch.jobs.spec import (
    UnsafeDaskSetting,
    check_config_file,
    check_dask_settings,
    flatten,
    read_yaml,
)

HOSTILE = [
    "x; touch PWNED #",
    "$(touch PWNED)",
    "`touch PWNED`",
    "x && touch PWNED",
    "x\ntouch PWNED",
    "x|touch PWNED",
]
#: Every jobqueue key a file may set, by kind.
NAMES = ["name", "queue", "account", "interface", "walltime", "job-mem", "death-timeout", "memory"]
COUNTS = ["cores", "processes", "job-cpu"]


@pytest.fixture(autouse=True)
def restore_dask_config() -> Iterator[None]:
    import dask_jobqueue  # noqa: F401 - its defaults join dask.config on import: snapshot them too

    saved = copy.deepcopy(dask.config.config)
    yield
    dask.config.config.clear()
    dask.config.config.update(saved)


def applied(tmp_path: pathlib.Path, kind: str, settings: dict) -> dict:
    """The settings of a real job file as a run applies them (read, checked, quoted)."""
    path = tmp_path / "job.yaml"
    path.write_text(
        yaml.safe_dump(
            {"jobqueue": {kind: settings}, "daskbatch": {"job": {"input": {"store": "d"}}}}
        )
    )
    found = check_config_file(str(path), read_yaml(path))
    return check_dask_settings(found.dask, str(path))


def script_of(kind: str, settings: dict) -> str:
    """dask-jobqueue's job script for a cluster built under ``settings``."""
    from dask_jobqueue import PBSCluster, SLURMCluster  # lazy: dask_jobqueue

    cls = SLURMCluster if kind == "slurm" else PBSCluster
    with dask.config.set(dict(flatten(settings))):
        with cls(cores=1, memory="1GiB", scheduler_options={"dashboard_address": ":0"}) as cluster:
            return cluster.job_script()


def run_script(tmp_path: pathlib.Path, script: str) -> list[str]:
    """Run the script in bash with the worker's Python replaced by printf: the worker's arguments, one a line."""
    lines = script.splitlines()
    worker = next(i for i, line in enumerate(lines) if "distributed.cli.dask_worker" in line)
    python = lines[worker].split(" -m ", 1)[0]
    lines[worker] = "printf '%s\\n' " + lines[worker][len(python) :]
    done = subprocess.run(
        ["bash", "-c", "\n".join(lines)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "TMPDIR": "/node/tmp"},
    )
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "PWNED").exists()
    return done.stdout.splitlines()


@pytest.mark.parametrize("kind", ["slurm", "pbs"])
@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_local_directory_is_quoted_and_runs_nothing(
    tmp_path: pathlib.Path, kind: str, value: str
) -> None:
    if "\n" in value:  # a line break is no path a worker could use: refused with one line
        with pytest.raises(
            UnsafeDaskSetting, match=f"jobqueue.{kind}.local-directory must be a path"
        ):
            applied(tmp_path, kind, {"local-directory": value})
        return
    if (
        "$(" in value
    ):  # '$' other than $VARIABLE: refused, it cannot be kept as the shell would read it
        with pytest.raises(UnsafeDaskSetting, match=r"'\$' that is no \$VARIABLE"):
            applied(tmp_path, kind, {"local-directory": value})
        return
    args = run_script(
        tmp_path, script_of(kind, applied(tmp_path, kind, {"local-directory": value}))
    )
    assert (
        args[args.index("--local-directory") + 1] == value
    )  # one argument, the path as the file gives it


@pytest.mark.parametrize("kind", ["slurm", "pbs"])
@pytest.mark.parametrize("key", NAMES + COUNTS + ["resource-spec"])
@pytest.mark.parametrize("value", [*HOSTILE, "w 1", True, [1], -1])
def test_every_other_value_must_be_of_its_kind(
    tmp_path: pathlib.Path, kind: str, key: str, value: object
) -> None:
    if (
        key == "resource-spec"
        and kind == "slurm"
        or key in ("job-cpu", "job-mem")
        and kind == "pbs"
    ):
        pytest.skip("not a setting of this scheduler")
    with pytest.raises(UnsafeDaskSetting) as refused:
        applied(tmp_path, kind, {key: value})
    message = str(refused.value)
    assert f"jobqueue.{kind}.{key}" in message and "\n" not in message and "job.yaml" in message
    assert "--allow-dask-config" not in message  # a bad value is not a matter of trust


@pytest.mark.parametrize(
    "key",
    [
        "job-extra-directives",
        "job-script-prologue",
        "worker-extra-args",
        "python",
        "log-directory",
        "shebang",
        "header-skip",
        "job-directives-skip",
        "env-extra",
        "extra",
        "job-extra",
        "worker-command",
        "scheduler-options",
        "submit-command",
    ],
)
def test_free_form_shell_keys_are_refused(tmp_path: pathlib.Path, key: str) -> None:
    with pytest.raises(UnsafeDaskSetting) as refused:
        applied(tmp_path, "slurm", {key: ["touch PWNED"]})
    message = str(refused.value)
    assert f"jobqueue.slurm.{key}" in message and "\n" not in message
    assert "your own dask config or in Python" in message


def test_valid_values_reach_the_script_as_given(tmp_path: pathlib.Path) -> None:
    settings = {
        "name": "dask-worker.v2",
        "queue": "gpu,long",
        "account": "proj_1",
        "walltime": "1-00:00:00",
        "job-mem": "16G",
        "job-cpu": 4,
        "cores": 2,
        "processes": 1,
        "memory": "16GiB",
        "interface": "lo",
        "death-timeout": "60s",
        "local-directory": "$TMPDIR/my dir",
    }
    with pytest.raises(
        UnsafeDaskSetting, match="need quoting"
    ):  # '$' and a space: no quoting keeps both
        applied(tmp_path, "slurm", settings)
    settings["local-directory"] = "${TMPDIR}/dask"
    script = script_of("slurm", applied(tmp_path, "slurm", settings))
    for line in (
        "#SBATCH -J dask-worker.v2",
        "#SBATCH -p gpu,long",
        "#SBATCH -A proj_1",
        "#SBATCH -t 1-00:00:00",
        "#SBATCH --mem=16G",
        "#SBATCH --cpus-per-task=4",
    ):
        assert line in script.splitlines(), script
    args = run_script(tmp_path, script)
    assert args[args.index("--local-directory") + 1] == "/node/tmp/dask"  # the node's own $TMPDIR
    assert args[args.index("--interface") + 1] == "lo"
    spaced = applied(
        tmp_path, "pbs", {"local-directory": "/scratch/my dir", "resource-spec": "select=1:ncpus=4"}
    )
    script = script_of("pbs", spaced)
    assert "#PBS -l select=1:ncpus=4" in script.splitlines()
    args = run_script(tmp_path, script)
    assert args[args.index("--local-directory") + 1] == "/scratch/my dir"
