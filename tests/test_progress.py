"""Progress of describe, checkpointed passes, map_batches and ingest: what is counted, logged and shown.

The bar itself is seen where users see it: a notebook run by a real Jupyter
kernel (nbclient) must hold a displayed ipywidgets bar, with and without a
distributed cluster; a run whose stderr is not a terminal draws nothing. The
terminal bar on a pseudo-terminal is tested through the CLI in test_cli_logging.py.
"""

from __future__ import annotations

import logging
import os
import pathlib
import re
import time

import dask
import dask.array as da
import numpy as np
import pytest

import daskbatch as db
from daskbatch.engine.passes import tree_reduce
from daskbatch.runtime import progress as progress_mod
from daskbatch.runtime.progress import Progress
from daskbatch.stats import Bundle, Moments

ROOT = pathlib.Path(__file__).resolve().parents[1]
WIDGET = "application/vnd.jupyter.widget-view+json"


class Recording(Progress):
    """A Progress that keeps every count it was given (the display and log stay real)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.advances = 0

    def advance(self, n: int = 1) -> None:
        self.advances += n
        super().advance(n)


def _data(rows: int = 8000, features: int = 4, chunk: int = 1000) -> da.Array:
    return da.from_array(np.random.default_rng(3).normal(size=(rows, features)), chunks=(chunk, features))


def test_local_scheduler_counts_the_blocks_of_the_pass_only() -> None:
    x = _data()
    graph = tree_reduce(Bundle((Moments(),)), x, split_every=3)
    with Recording("pass 1/1: moments", int(x.numblocks[0]), rows=8000) as bar:
        with dask.config.set(scheduler="threads"):
            result = progress_mod.compute(graph, bar, prefix="db-chunk")
    # Eight chunk tasks of the 8 + 4 merge + result tasks: one count per block.
    assert bar.advances == 8 and bar.done == 8
    np.testing.assert_allclose(result[0].mean, x.compute().mean(axis=0), rtol=1e-12)


def test_distributed_counts_the_blocks_from_the_futures() -> None:
    distributed = pytest.importorskip("distributed")
    x = _data()
    graph = tree_reduce(Bundle((Moments(),)), x, split_every=3)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        with Recording("pass 1/1: moments", int(x.numblocks[0]), rows=8000) as bar:
            result = progress_mod.compute(graph, bar, prefix="db-chunk")
        # Every future was released (the client tells the scheduler from its event loop, soon after).
        deadline = time.monotonic() + 5
        while client.futures and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not client.futures
    assert bar.advances == 8 and bar.done == 8
    np.testing.assert_allclose(result[0].mean, x.compute().mean(axis=0), rtol=1e-12)


def test_a_graph_without_chunk_tasks_counts_all_its_tasks() -> None:
    y = da.ones(100, chunks=10).sum()
    with Recording("scan") as bar:
        assert progress_mod.compute(y, bar, prefix="db-chunk") == 100
    # The optimized graph's tasks (dask fuses some), each counted once as it ran.
    assert 0 < bar.total <= len(y.__dask_graph__()) and bar.advances == bar.done == bar.total


def test_describe_logs_each_pass_and_a_summary_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="daskbatch")
    db.describe(_data(), run=db.RunOptions(plan=None))  # no range: two passes
    text = caplog.text
    assert "pass 1/2: moments+cov+sketch: started (8 blocks, 8,000 rows, 250.00 kiB)" in text
    assert re.search(r"pass 2/2: hist\+qhist: done, 8/8 blocks in [\d.]+ s \([\d,]+ rows/s, [\d.]+ \w+/s\)", text)
    assert re.search(r"describe: 8,000 rows x 4 features in [\d.]+ s \([\d,]+ rows/s\), 2 passes, peak [\d.]+ \wiB", text)


def test_checkpointed_pass_counts_reused_blocks(tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="daskbatch")
    x = _data()
    first = db.describe(x, stats="moments", run=db.RunOptions(plan=None, checkpoint=tmp_path / "ck"))
    caplog.clear()
    again = db.describe(x, stats="moments", run=db.RunOptions(plan=None, checkpoint=tmp_path / "ck"))
    np.testing.assert_array_equal(first.mean, again.mean)
    assert "8 of 8 blocks on disk" in caplog.text
    assert re.search(r"pass 1/1: moments: done, 8/8 blocks \(8 reused, 0 computed\)", caplog.text)


def test_nothing_is_drawn_when_stderr_is_not_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    db.describe(_data(), run=db.RunOptions(plan=None, progress=True))
    err = capsys.readouterr().err
    assert "\r" not in err and "\x1b" not in err and "pass 1/2" not in err


def test_map_batches_and_ingest_log_their_blocks(tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="daskbatch")
    x = np.arange(4000.0).reshape(1000, 4)
    out = db.map_batches(lambda b: b * 2, da.from_array(x, chunks=(250, 4)), progress=True)
    np.testing.assert_array_equal(out, x * 2)
    assert re.search(r"map_batches: done, 4/4 blocks in [\d.]+ s \([\d,]+ rows/s\)", caplog.text)
    for i in range(3):
        np.save(tmp_path / f"b{i}.npy", x[i * 300:(i + 1) * 300])
    db.ingest(str(tmp_path / "b*.npy"), tmp_path / "o.zarr", chunk_rows=100, progress=True)
    assert re.search(r"ingest: done, 9/9 chunks in [\d.]+ s \(900 rows", caplog.text) is None  # rows/s, not rows
    assert re.search(r"ingest: done, 9/9 chunks in [\d.]+ s \([\d,]+ rows/s, [\d.]+ \w+/s\)", caplog.text)


def test_a_stopped_step_logs_where_it_stopped(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="daskbatch")
    with pytest.raises(KeyboardInterrupt), Progress("ingest", 10, unit="chunks") as bar:
        bar.skip(4)
        bar.advance(2)
        raise KeyboardInterrupt
    assert re.search(r"ingest: stopped at 6/10 chunks \(4 reused, 2 computed\) in [\d.]+ s", caplog.text)


def test_clock_and_rates_read_as_in_a_bar() -> None:
    assert progress_mod._clock(42) == "0:42" and progress_mod._clock(3723) == "1:02:03"
    assert progress_mod._si(1_234_567) == "1.2M" and progress_mod._si(81_300) == "81.3k" and progress_mod._si(12) == "12"


# ---------------------------------------------------------------------- Jupyter

NOTEBOOK_CELLS = [
    "import dask.array as da\nimport numpy as np\nimport daskbatch as db\n"
    "x = da.from_array(np.random.default_rng(0).normal(size=(6000, 3)), chunks=(500, 3))",
    # the threaded scheduler
    "s = db.describe(x, run=db.RunOptions(plan=None, progress=True))",
    # a distributed cluster
    "from distributed import Client, LocalCluster\n"
    "cluster = LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None)\n"
    "client = Client(cluster)\n"
    "s = db.describe(x, run=db.RunOptions(plan=None, progress=True))\n"
    "client.close(); cluster.close()",
]


@pytest.mark.slow
def test_a_notebook_displays_a_widget_per_pass_on_both_schedulers(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    pytest.importorskip("ipywidgets")
    # The kernel is a new process: it imports this checkout's daskbatch.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in NOTEBOOK_CELLS])
    nbclient.NotebookClient(nb, timeout=240, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    for cell in nb.cells[1:]:
        outputs = cell.outputs
        assert not [o for o in outputs if o.output_type == "error"], outputs
        widgets = [o for o in outputs if o.output_type == "display_data" and WIDGET in o.data]
        assert len(widgets) == 2, outputs  # one bar per pass, displayed (not discarded)
    # The frontend's state of every bar: each reached its end and says so.
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    bars = [m["state"] for m in state.values() if m["model_name"] == "IntProgressModel"]
    assert len(bars) == 4 and all(b["value"] == b["max"] == 12 and b["bar_style"] == "success" for b in bars)
    labels = [m["state"]["value"] for m in state.values() if m["model_name"] == "HTMLModel"]
    assert sum("pass 1/2: moments+cov+sketch" in v for v in labels) == 2
    assert sum("pass 2/2: hist" in v for v in labels) == 2


def test_progress_dask_uses_dasks_own_displays(capsys) -> None:
    """``progress="dask"``: distributed.progress on each pass's futures, or dask's ProgressBar locally."""
    import dask.array as da
    from distributed import Client, LocalCluster

    import daskbatch as db

    x = np.random.default_rng(1).standard_normal((4000, 3))
    dx = da.from_array(x, chunks=(500, -1))
    s = db.describe(dx, stats="moments", run=db.RunOptions(plan=None, progress="dask"))
    assert "100% Completed" in capsys.readouterr().out  # dask.diagnostics.ProgressBar
    np.testing.assert_allclose(s.mean, x.mean(axis=0), rtol=1e-12)
    with (
        LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster,
        Client(cluster),
    ):
        s = db.describe(dx, stats="moments,hist", run=db.RunOptions(plan=None, progress="dask"))
    out = capsys.readouterr().out
    assert out.count("Completed") >= 2, out  # distributed's text bar, once per pass
    np.testing.assert_allclose(s.mean, x.mean(axis=0), rtol=1e-12)
    with pytest.raises(ValueError, match="progress must be True, False or 'dask'"):
        db.describe(dx, stats="moments", run=db.RunOptions(plan=None, progress="tqdm"))
