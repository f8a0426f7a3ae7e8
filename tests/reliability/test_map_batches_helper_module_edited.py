"""Issue 'Every door locked', item 6: a map_batches resume never mixes versions of a helper module.

Before, the function token named the modules a function reads by name and
version only: a run killed after some batches, its helper module edited from
x2 to x3, resumed to ``complete=True`` with rows of both versions.  The token
now holds the source of every user module the function's code reaches.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys

import numpy as np
import pytest
import zarr

import daskbatch as db
from daskbatch.io.rowstore import DONE_FILE

ROOT = pathlib.Path(__file__).parents[2]

HELPER = "def scale(b):\n    return b * 2\n"

# Kills its own process (SIGKILL, nothing cleaned up) at the call after KILL_AFTER.
KILLSWITCH = """
import os
import signal

calls = 0


def tick():
    global calls
    calls += 1
    if calls > int(os.environ.get("KILL_AFTER") or 10**9):
        os.kill(os.getpid(), signal.SIGKILL)
"""

RUN = """
import sys
sys.path.insert(0, sys.argv[3])
import daskbatch as db
import helper
import killswitch


def work(b):
    killswitch.tick()
    return helper.scale(b)


report = db.map_batches(work, sys.argv[1], out=sys.argv[2], batch_rows=100)
print(len(report.written))
"""


def _run(store: pathlib.Path, out: pathlib.Path, folder: pathlib.Path, kill_after: int | None = None,
         ) -> subprocess.CompletedProcess[str]:
    """Run RUN (a script file, as a user would) in a fresh interpreter."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("KILL_AFTER", None)
    if kill_after is not None:
        env["KILL_AFTER"] = str(kill_after)
    return subprocess.run([sys.executable, str(folder / "run.py"), str(store), str(out), str(folder)],
                          env=env, capture_output=True, text=True, timeout=240)


def _killed_run(store: pathlib.Path, tmp_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """A user's folder (run.py, helper.py, killswitch.py) and the output of a run killed after 3 batches."""
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "run.py").write_text(RUN)
    (folder / "helper.py").write_text(HELPER)
    (folder / "killswitch.py").write_text(KILLSWITCH)
    out = tmp_path / "m.zarr"
    killed = _run(store, out, folder, kill_after=3)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    done = (out / DONE_FILE).read_text().split()
    assert 0 < len(done) < 6, done  # some batches written, not all
    return folder, out


def test_an_edited_helper_module_is_not_resumed(store: pathlib.Path, tmp_path: pathlib.Path,
                                                data: np.ndarray) -> None:
    folder, out = _killed_run(store, tmp_path)
    before = (out / DONE_FILE).read_text()
    (folder / "helper.py").write_text(HELPER.replace("b * 2", "b * 3"))
    resumed = _run(store, out, folder)
    assert resumed.returncode != 0, resumed.stdout
    assert "differs in function" in resumed.stderr, resumed.stderr
    assert (out / DONE_FILE).read_text() == before  # nothing written by the refused run
    assert zarr.open_group(str(out), mode="r").attrs["complete"] is False


def test_the_unchanged_helper_resumes(store: pathlib.Path, tmp_path: pathlib.Path, data: np.ndarray) -> None:
    folder, out = _killed_run(store, tmp_path)
    done = len((out / DONE_FILE).read_text().split())
    resumed = _run(store, out, folder)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.split() == [str(6 - done)]
    np.testing.assert_array_equal(db.open_dataset(out).x.compute(), data * 2)


def test_modules_reached_through_a_helper_count(tmp_path: pathlib.Path) -> None:
    """helper calls deeper.factor(): editing deeper.py (two modules away) changes the token."""
    (tmp_path / "deeper.py").write_text("def factor():\n    return 2\n")
    (tmp_path / "helper.py").write_text("import deeper\n\n\ndef scale(b):\n    return b * deeper.factor()\n")
    (tmp_path / "mainwork.py").write_text("import helper\n\n\ndef work(b):\n    return helper.scale(b)\n")
    token = ("import sys; sys.path.insert(0, sys.argv[1]); import mainwork;"
             "from daskbatch.engine.fingerprint import function_token;"
             "print(function_token(mainwork.work))")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}

    def token_now() -> str:
        run = subprocess.run([sys.executable, "-c", token, str(tmp_path)], env=env, capture_output=True,
                             text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        return run.stdout.strip()

    first = token_now()
    assert token_now() == first  # the same sources: the same token in another process
    (tmp_path / "deeper.py").write_text("def factor():\n    return 3\n")
    assert token_now() != first


MADE_AT_RUN_TIME = """
import types
from daskbatch.engine.fingerprint import function_token

made = types.ModuleType("made_at_run_time")
exec("def scale(b):\\n    return b * 2", vars(made))


def work(b):
    return made.scale(b)


print(function_token(work))
"""


def test_a_module_without_source_is_never_resumed() -> None:
    """A module made at run time has no source to hash: two processes never agree on its token."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    tokens = [subprocess.run([sys.executable, "-c", MADE_AT_RUN_TIME], env=env, capture_output=True, text=True,
                             timeout=120) for _ in range(2)]
    assert all(t.returncode == 0 for t in tokens), tokens[0].stderr
    assert tokens[0].stdout != tokens[1].stdout


#: (helper module, its source, the user's module, its source, the function): editing the helper's x2 to x3.
REACHED = {
    "a function imported from a helper": (
        "helper", "def scale(b):\n    return b * 2\n",
        "from helper import scale\n\n\ndef work(b):\n    return scale(b)\n", "work"),
    "a callable instance calling its own method": (
        "scaler", "class Scaler:\n    def __call__(self, b):\n        return self.f(b)\n\n"
                  "    def f(self, b):\n        return b * 2\n",
        "from scaler import Scaler\n\nwork = Scaler()\n", "work"),
    "a bound method calling another": (
        "runner", "class Runner:\n    def run(self, b):\n        return self.f(b)\n\n"
                  "    def f(self, b):\n        return b * 2\n",
        "from runner import Runner\n\nwork = Runner().run\n", "work"),
    "a helper class's static method": (
        "kit", "class Kit:\n    @staticmethod\n    def f(b):\n        return b * 2\n",
        "from kit import Kit\n\n\ndef work(b):\n    return Kit.f(b)\n", "work"),
}


@pytest.mark.parametrize("case", list(REACHED))
def test_every_way_of_reaching_a_helper_counts(tmp_path: pathlib.Path, case: str) -> None:
    helper, source, user, name = REACHED[case]
    (tmp_path / f"{helper}.py").write_text(source)
    (tmp_path / "usermain.py").write_text(user)
    token = ("import sys; sys.path.insert(0, sys.argv[1]); import usermain;"
             "from daskbatch.engine.fingerprint import function_token;"
             f"print(function_token(usermain.{name}))")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}

    def token_now() -> str:
        run = subprocess.run([sys.executable, "-c", token, str(tmp_path)], env=env, capture_output=True,
                             text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        return run.stdout.strip()

    first = token_now()
    assert token_now() == first
    (tmp_path / f"{helper}.py").write_text(source.replace("b * 2", "b * 3"))
    assert token_now() != first
