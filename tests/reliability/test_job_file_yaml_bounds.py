"""A job file is read within bounds, and its settings are checked by name and value.

Before, ``statistics: {classes: *a8}`` in a 1 kB file (10**9 values through
aliases) grew to 3 GB while the type error built its repr; ~2,500 nested lists
ended in a RecursionError traceback; a key given twice kept the last; and
``daskbatch: {no-such-setting: 5}``, ``cache-fraction: -3`` or
``kernels: os.system`` were accepted silently.
"""

from __future__ import annotations

import copy
import pathlib
import resource
import subprocess
import sys
import time
from collections.abc import Iterator

import dask.config
import pytest

from daskbatch import config
from daskbatch.jobs.spec import JobConfigError, load_job

ROOT = pathlib.Path(__file__).parents[2]

LAUGHS = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9)
)


@pytest.fixture(autouse=True)
def restore_dask_config() -> Iterator[None]:
    saved = copy.deepcopy(dask.config.config)
    yield
    dask.config.config.clear()
    dask.config.config.update(saved)


def run_cli(
    tmp_path: pathlib.Path, text: str, store: pathlib.Path
) -> subprocess.CompletedProcess[str]:
    """``python -m daskbatch run`` on a job file holding ``text``, in a subprocess."""
    job = tmp_path / "job.yaml"
    job.write_text(text)
    return subprocess.run(
        [sys.executable, "-m", "daskbatch", "run", str(job)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )


def job_text(extra: str, store: pathlib.Path, tmp_path: pathlib.Path) -> str:
    return (
        f"daskbatch:\n  job:\n    input: {{store: {store}}}\n    cluster: {{kind: threads}}\n"
        f"    outputs: {{dir: {tmp_path / 'out'}}}\n{extra}"
    )


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (LAUGHS + "daskbatch: {job: {statistics: {classes: *a8}}}\n", "more than 100000 values"),
        (LAUGHS + "daskbatch: {split-every: *a8}\n", "more than 100000 values"),
        (LAUGHS + "distributed: {worker: {memory: *a8}}\n", "more than 100000 values"),
        (
            "daskbatch: {job: {statistics: {classes: " + "[" * 2500 + "]" * 2500 + "}}}\n",
            "nested more than 50 deep",
        ),
        ("a: " + "{a: " * 3000 + "1" + "}" * 3000 + "\n", "nested more than 50 deep"),
        ("daskbatch: &a {job: *a}\n", "inside the value it names"),
        (
            "daskbatch:\n  job:\n    memory: 1GiB\n    memory: 2GiB\n",
            "'memory' (str) is given twice",
        ),
        (
            "daskbatch:\n  job:\n    statistics: {nan-policy: omit, nan_policy: raise}\n",
            "given twice",
        ),
        (
            "daskbatch: {job: {statistics: {classes: '" + "x" * 200_000 + "'}}}\n",
            "'statistics.classes' expects",
        ),
        (
            "daskbatch: {split-every: 8}\n" * 1 + "x: '" + "y" * (1 << 20) + "'\n",
            "larger than 1048576 bytes",
        ),
    ],
)
def test_a_hostile_file_is_one_line_fast_and_small(
    tmp_path: pathlib.Path, text: str, words: str
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    with pytest.raises(JobConfigError) as refused:
        load_job(path)
    assert time.perf_counter() - started < 5
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000  # kB: no expansion
    message = str(refused.value)
    assert (
        words in message and str(path) in message and "\n" not in message and len(message) < 400
    ), message


def test_the_command_refuses_deep_and_aliased_files_in_one_line(
    tmp_path: pathlib.Path, store: pathlib.Path
) -> None:
    for text in (
        job_text("  x: " + "[" * 2500 + "]" * 2500 + "\n", store, tmp_path),
        LAUGHS + job_text("  split-every: *a8\n", store, tmp_path),
    ):
        done = run_cli(tmp_path, text, store)
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().startswith("error: ") and "\n" not in done.stderr.strip(), (
            done.stderr
        )
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("setting", "words"),
    [
        ("no-such-setting: 5", "daskbatch.no-such-setting is no daskbatch setting"),
        ("split_everyy: 5", "did you mean daskbatch.split-every?"),
        ("cache-fraction: -3", "daskbatch.cache-fraction must be a number in [0, 1], got -3"),
        ("kernels: os.system", "daskbatch.kernels must be true or false, got 'os.system'"),
        ("memory-fraction: 7", "daskbatch.memory-fraction must be a number in (0, 1]"),
        ("worker-timeout: soon", "daskbatch.worker-timeout must be a duration"),
        ("gpu-transfer: fast", "daskbatch.gpu-transfer must be block or staged"),
        ("split-every: {a: 1}", "daskbatch.split-every.a is no daskbatch setting"),
    ],
)
def test_daskbatch_settings_are_checked_by_name_and_value(
    tmp_path: pathlib.Path, store: pathlib.Path, setting: str, words: str
) -> None:
    done = run_cli(tmp_path, job_text(f"  {setting}\n", store, tmp_path), store)
    assert done.returncode == 2, done.stderr
    err = done.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err and words in err and "job.yaml" in err, err
    assert "--allow-dask-config" not in err  # a wrong value is no matter of trust
    assert not (tmp_path / "out").exists()


def test_every_packaged_setting_is_checked_and_its_default_passes() -> None:
    packaged = {k: v for k, v in config._packaged_defaults()["daskbatch"].items() if k != "job"}
    assert set(packaged) == set(config.SETTINGS)
    for key, value in packaged.items():
        assert config.check_setting(key, value) is None, key


def test_good_settings_and_yaml_merge_keys_still_work(
    tmp_path: pathlib.Path, store: pathlib.Path
) -> None:
    text = job_text(
        "    statistics: &s {bins: 8, stats: moments}\n    selection: {score: variance, param: 2}\n"
        "    transform: {steps: []}\n  split-every: 4\n  worker-timeout: 2 minutes\n  cache-fraction: 0\n",
        store,
        tmp_path,
    )
    done = run_cli(tmp_path, text, store)
    assert done.returncode == 0, done.stderr
