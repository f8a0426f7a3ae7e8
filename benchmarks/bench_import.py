"""What importing daskbatch costs: best of ``--repeat`` fresh interpreters, wall and CPU seconds.

Each command runs in its own subprocess from a neutral directory (so the
current checkout is not first on ``sys.path``). CPU (user + system of the child)
is reported beside wall time because on a shared machine the load inflates the
wall time far more than the CPU time. ``--tree`` puts another checkout's
package first on ``PYTHONPATH`` (e.g. ``git archive <commit> daskbatch | tar -x
-C /tmp/before``) to time it with the same interpreter.

Usage::

    python benchmarks/bench_import.py [--repeat 5] [--tree /tmp/before]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

COMMANDS = {
    "python -c pass": ["-c", "pass"],
    "import daskbatch": ["-c", "import daskbatch"],
    "import daskbatch.stats": ["-c", "import daskbatch.stats"],
    "daskbatch --help": ["-m", "daskbatch", "--help"],
}


def best_of(args: list[str], env: dict[str, str], repeat: int) -> tuple[float, float]:
    """Best wall and best CPU seconds of ``repeat`` runs of ``python *args``."""
    walls, cpus = [], []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run([sys.executable, *args], env=env, stdout=subprocess.DEVNULL, check=True)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return min(walls), min(cpus)


def main() -> None:
    """Print one Markdown table row per command."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--tree", help="a directory holding another daskbatch package to time instead")
    opts = parser.parse_args()
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if opts.tree:
        env["PYTHONPATH"] = opts.tree
    os.chdir(tempfile.gettempdir())
    where = subprocess.run([sys.executable, "-c", "import daskbatch; print(daskbatch.__file__)"], env=env,
                           capture_output=True, text=True, check=True).stdout.strip()
    print(f"daskbatch from {where}\n\n| command | wall s | CPU s |\n|---|---:|---:|")
    for name, args in COMMANDS.items():
        wall, cpu = best_of(args, env, opts.repeat)
        print(f"| `{name}` | {wall:.3f} | {cpu:.3f} |")


if __name__ == "__main__":
    main()
