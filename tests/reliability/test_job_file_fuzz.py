"""Fuzz the job file: random YAML shapes, aliases, depths, sizes and bytes give only one-line errors.

Whatever the file holds, reading and checking it (``load_job`` and the
dask-settings check, what ``daskbatch run`` and ``describe --config`` do
before anything runs) either accepts it or raises the project's one-line
error: no traceback of another kind, no code run (a module ``evil`` sits on
sys.path and a statistic may name it), no unbounded memory.
"""

from __future__ import annotations

import copy
import os
import pathlib
import sys
from collections.abc import Iterator

import dask.config
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daskbatch.jobs.spec import (
    JobConfigError,
    UnsafeDaskSetting,
    check_config_file,
    check_dask_settings,
    is_config_file,
    load_job,
    read_yaml,
)

EVIL = "import pathlib\npathlib.Path(__file__).with_name('RAN').touch()\nclass X:\n    name = 'x'\n"
KEYS = [
    "daskbatch",
    "job",
    "input",
    "store",
    "statistics",
    "stats",
    "classes",
    "bins",
    "cluster",
    "kind",
    "jobqueue",
    "slurm",
    "local-directory",
    "name",
    "distributed",
    "worker",
    "preload",
    "split-every",
    "kernels",
    "cache-fraction",
    "memory",
    "<<",
    "x",
    "nan_policy",
    "nan-policy",
]
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.sampled_from(
        ["evil:X", "moments,evil:X", "$(touch RAN)", "!!python/name:os.system", "auto"]
    ),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(KEYS), inner, max_size=4)
    ),
    max_leaves=30,
)
#: Pieces of YAML text that the dumper never writes: aliases, tags, deep nesting, repeated keys, control bytes.
PIECES = [
    "&a ",
    "*a",
    "*b",
    "&b [*a, *a, *a, *a]",
    "!!python/object/apply:os.system ['touch RAN']",
    "[" * 60,
    "{a: " * 60,
    "<<: *a\n",
    "\n  ",
    "\n",
    ": ",
    "- ",
    "\t",
    "\x00",
    "\x85",
    "'",
    '"',
    "? ",
    "%YAML 1.1\n",
    "---\n",
    "!!binary aGk=",
    "!!set {a}",
    "2001-12-14",
    "0x1F",
    ".inf",
    "~",
]


@pytest.fixture(autouse=True, scope="module")
def restore_dask_config() -> Iterator[None]:
    saved = copy.deepcopy(dask.config.config)
    yield
    dask.config.config.clear()
    dask.config.config.update(saved)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[pathlib.Path]:
    """A working directory holding a module ``evil`` that marks its import, on sys.path."""
    where = tmp_path_factory.mktemp("fuzz")
    (where / "evil.py").write_text(EVIL)
    sys.path.insert(0, str(where))
    before = os.getcwd()
    os.chdir(where)
    yield where
    os.chdir(before)
    sys.path.remove(str(where))


def check(folder: pathlib.Path, data: bytes) -> None:
    """Read and check ``data`` as ``daskbatch run`` does: accepted, or the project's one-line error."""
    path = folder / "job.yaml"
    path.write_bytes(data)
    try:
        load_job(path)
        loaded = read_yaml(path)
        if is_config_file(loaded):
            check_dask_settings(check_config_file(str(path), loaded).dask, str(path))
    except (JobConfigError, UnsafeDaskSetting) as exc:
        message = str(exc)
        assert "\n" not in message and len(message) < 1000, message
    assert not (folder / "RAN").exists() and "evil" not in sys.modules


FAST = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@FAST
@given(value=VALUES)
def test_random_shapes(folder: pathlib.Path, value: object) -> None:
    check(folder, yaml.safe_dump(value).encode())
    check(folder, yaml.safe_dump({"daskbatch": {"job": value}}).encode())
    check(folder, yaml.safe_dump({"daskbatch": value, "jobqueue": {"slurm": value}}).encode())


@FAST
@given(
    value=VALUES,
    pieces=st.lists(st.tuples(st.integers(min_value=0), st.sampled_from(PIECES)), max_size=6),
)
def test_random_text(folder: pathlib.Path, value: object, pieces: list[tuple[int, str]]) -> None:
    text = yaml.safe_dump({"daskbatch": {"job": value}})
    for at, piece in pieces:
        at %= len(text) + 1
        text = text[:at] + piece + text[at:]
    check(folder, text.encode("utf-8", "surrogatepass"))


@FAST
@given(
    width=st.integers(2, 12),
    levels=st.integers(1, 12),
    depth=st.integers(0, 3000),
    where=st.sampled_from(
        [
            "daskbatch: {job: {statistics: {classes: %s}}}",
            "daskbatch: {split-every: %s}",
            "distributed: {worker: {memory: %s}}",
            "jobqueue: {slurm: {name: %s}}",
        ]
    ),
)
def test_aliases_and_depths(
    folder: pathlib.Path, width: int, levels: int, depth: int, where: str
) -> None:
    lines = ["a0: &a0 [" + ", ".join(["x"] * width) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    lines.append(where % f"*a{levels - 1}")
    lines.append("deep: " + "[" * depth + "]" * depth)
    check(folder, "\n".join(lines).encode())


@FAST
@given(data=st.binary(max_size=300))
def test_random_bytes(folder: pathlib.Path, data: bytes) -> None:
    check(folder, data)
    check(folder, b"daskbatch:\n  job:\n    input: {store: " + data + b"}\n")


def test_bombs_stay_small_in_a_fresh_process(tmp_path: pathlib.Path) -> None:
    """The alias and depth bombs are refused by a process capped at 1 GiB of address space beyond its start.

    Measured in a child of its own: the test process's peak is that of every test it ran before.
    """
    import subprocess
    import textwrap

    bombs = {
        "laughs.yaml": "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, "
                  f"*a{i - 1}, *a{i - 1}, *a{i - 1}]\n" for i in range(1, 9))
        + "daskbatch:\n  job:\n    statistics: {classes: *a8}\n",
        "deep.yaml": "daskbatch:\n  job:\n    x: " + "[" * 2500 + "]" * 2500 + "\n",
    }
    for name, text in bombs.items():
        (tmp_path / name).write_text(text)
    child = textwrap.dedent(f"""
        import sys
        from daskbatch.jobs.spec import JobConfigError, load_job

        def peak():  # kB; this process's own, not counting the pages of the one it was forked from
            return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM"))

        start = peak()
        for name in {sorted(bombs)!r}:
            try:
                load_job({str(tmp_path)!r} + "/" + name)
            except JobConfigError as exc:
                assert "\\n" not in str(exc), exc
            else:
                sys.exit(name + " was accepted")
        grew = peak() - start
        sys.exit(0 if grew < 200_000 else f"grew by {{grew}} kB")
    """)
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
