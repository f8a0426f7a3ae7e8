"""dask's memory accounting sees every daskbatch state at its real size (``dask.sizeof``)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

import numpy as np
from dask.sizeof import sizeof

from daskbatch.stats import CoMoments, Histogram, Moments
from daskbatch.stats._base import State
from daskbatch.stats.tiled import CrossCoMoments


def test_every_state_counts_its_arrays() -> None:
    x = np.random.default_rng(0).standard_normal((50, 500))
    y = np.arange(50) % 3
    for stat in (Moments(), CoMoments(), Histogram(bins=8, lo=(-3.0,) * 500, hi=(3.0,) * 500, by_label=True),
                 CrossCoMoments(split=100)):
        state = stat.chunk(x, y)
        arrays = sum(v.nbytes for v in vars(state).values() if isinstance(v, np.ndarray))
        assert arrays <= sizeof(state) <= arrays + 8 * len(vars(state)), type(state).__name__
    # the tiled-covariance state that dask used to count as 56 bytes
    assert sizeof(CrossCoMoments(split=100).chunk(x)) > 100 * 400 * 8


def test_a_users_state_is_counted_too() -> None:
    @dataclass(frozen=True)
    class L1State(State):
        n: np.ndarray
        total: np.ndarray

    assert sizeof(L1State(n=np.zeros(()), total=np.zeros(1000))) == 8 + 8000


def test_registered_for_every_graph_daskbatch_builds() -> None:
    # a fresh process: importing the engine that builds the graphs registers the states
    code = (
        "import numpy as np; from dask.sizeof import sizeof; import daskbatch; "
        "from daskbatch.stats.tiled import CrossCoMoments; "
        "print(sizeof(CrossCoMoments(split=10).chunk(np.ones((4, 30)))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert int(out) > 10 * 20 * 8
