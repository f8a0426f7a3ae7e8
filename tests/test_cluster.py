"""cluster(): start, connect and close; Resources from a live cluster and from this machine."""

from __future__ import annotations

import logging
import os
import time

import pytest
from distributed import Client, LocalCluster
from distributed.diagnostics.plugin import SchedulerPlugin

from daskbatch.engine.planner import plan
from daskbatch.planning.plan import Resources
from daskbatch.runtime.capacity import (
    parse_memory,
    resources_auto,
    resources_from_client,
    resources_from_machine,
)
from daskbatch.runtime.cluster import cluster

GiB = 2**30


@pytest.fixture(scope="module")
def local():
    # TCP, not inproc://: a second client joined by address once waited in wait_for_workers until the test's
    # timeout on an inproc address (tests/test_cluster.py::test_connect_by_address_does_not_close_external, CI).
    with LocalCluster(
        n_workers=2, threads_per_worker=1, memory_limit="1GiB", processes=False, protocol="tcp",
        dashboard_address=":0",
    ) as lc:
        yield lc


def test_resources_from_client(local):
    with Client(local) as client:
        r = resources_from_client(client)
    assert r == Resources(memory_bytes=GiB, threads_per_worker=1, n_workers=2, device="cpu")


def test_resources_auto_prefers_live_client(local):
    with Client(local):
        assert resources_auto().n_workers == 2
        p = plan(__import__("numpy").zeros((4000, 4)), stats=("moments",), resources="auto")
        assert p.resources.memory_bytes == GiB
    # no client any more: this machine
    r = resources_auto(device="cpu")
    assert r.n_workers == 1 and r.threads_per_worker == (os.cpu_count() or 1)


def test_connect_by_address_does_not_close_external(local):
    with cluster(address=local.scheduler_address) as client:
        assert resources_from_client(client).n_workers == 2
    assert local.status.name == "running"
    with Client(local) as again:  # still usable
        assert len(again.scheduler_info()["workers"]) == 2


def test_connect_by_scheduler_file(tmp_path):
    """A scheduler file names a TCP address, as a batch job's scheduler writes it.

    An in-process cluster's ``inproc://`` address is only reachable from the thread pool that
    made it, so joining through a file written from it could wait for workers until the timeout.
    """
    import json

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tcp",
                      dashboard_address=":0") as lc:
        assert lc.scheduler_address.startswith("tcp://")
        sf = tmp_path / "scheduler.json"
        sf.write_text(json.dumps({"address": lc.scheduler_address}))
        with cluster(scheduler_file=sf) as client:
            assert client.scheduler.address == lc.scheduler_address
            assert client.submit(sum, [1, 2]).result() == 3


def test_joining_waits_for_workers_that_arrive_late():
    """A batch job starts its workers beside the client: joining waits for them."""
    import threading

    with LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as lc:
        late = threading.Timer(1.0, lc.scale, args=(1,))  # the worker joins a second after the client
        late.start()
        try:
            with cluster(address=lc.scheduler_address, wait_for_workers=1) as client:
                assert len(client.scheduler_info()["workers"]) == 1
                assert client.submit(sum, [1, 2]).result() == 3
        finally:
            late.join()


def test_joining_without_workers_times_out_with_advice():
    import dask

    with LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as lc:
        with dask.config.set({"daskbatch.worker-timeout": "1s"}):
            with pytest.raises(TimeoutError, match=r"0 of 2 worker\(s\) joined .* within 1s"):
                with cluster(address=lc.scheduler_address, wait_for_workers=2):
                    pass


def test_resolve_kind():
    from daskbatch.runtime.capacity import cuda_device_count
    from daskbatch.runtime.cluster import resolve_kind

    assert resolve_kind("local") == "local" and resolve_kind("slurm") == "slurm"
    assert resolve_kind("auto") in ("cuda", "local")
    if cuda_device_count() == 0:
        assert resolve_kind("auto") == "local"
    with pytest.raises(ValueError, match="unknown cluster kind 'gpu'"):
        resolve_kind("gpu")


def test_local_cluster_starts_and_closes(capsys):
    with cluster("local", n_workers=1, threads_per_worker=1, processes=False,
                 dashboard_address=":0", memory_limit="512MiB") as client:
        started = client.cluster
        printed = capsys.readouterr().err
        assert f"daskbatch: started a local cluster at {client.scheduler.address}; dashboard: http" in printed
        assert client.dashboard_link in printed
        assert client.submit(sum, [1, 2]).result() == 3
        assert resources_from_client(client).memory_bytes == 512 * 2**20
    assert client.status == "closed"
    assert started.status.name == "closed"


def test_closing_a_cluster_of_in_process_workers_logs_no_heartbeat_failure(caplog, monkeypatch):
    # A heartbeat every millisecond is nearly always in flight when a worker closes; distributed's
    # Worker.close then logs "Failed to communicate with scheduler during heartbeat" with a traceback
    # (seen as stderr in a notebook): the close we asked for must stay quiet. The scheduler tells
    # workers how often to beat (every 0.5 s for a few workers): here, every millisecond.
    import distributed.scheduler

    monkeypatch.setattr(distributed.scheduler, "heartbeat_interval", lambda n: 0.001)
    caplog.set_level(logging.WARNING, logger="distributed.worker")
    for _ in range(3):
        with cluster("local", n_workers=2, threads_per_worker=1, processes=False, protocol="tcp",
                     dashboard_address=":0", heartbeat_interval="1ms") as client:
            assert client.submit(sum, [1, 2]).result() == 3
            time.sleep(0.2)  # many heartbeats
    assert not [r.getMessage() for r in caplog.records if "during heartbeat" in r.getMessage()]


def test_closing_a_cluster_of_worker_processes_logs_no_heartbeat_failure(capfd, monkeypatch):
    # As above, with each worker in a process of its own, which writes its log to the inherited stderr.
    import distributed.scheduler

    monkeypatch.setattr(distributed.scheduler, "heartbeat_interval", lambda n: 0.001)
    for _ in range(2):
        with cluster("local", n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                     heartbeat_interval="1ms") as client:
            assert client.submit(sum, [1, 2]).result() == 3
            time.sleep(0.2)
    assert "during heartbeat" not in capfd.readouterr().err


class _LogsAClosedStreamOnClose(SchedulerPlugin):
    """A scheduler plugin that logs what a batched stream caught mid-write by the close logs, as the scheduler closes."""

    name = "logs-a-closed-stream"

    async def close(self) -> None:
        logging.getLogger("distributed.batched").info("Batched Comm Closed <TCP (closed) the close>", exc_info=True)


def test_closing_a_cluster_logs_no_stream_it_broke_and_keeps_one_broken_in_the_work(caplog):
    # A scheduler's batched stream to a worker or a client, caught mid-write by the close, logs "Batched Comm
    # Closed" with a traceback after the cluster has put distributed's log level back (now and then; seen as
    # stderr in a notebook). The plugin logs that record while the scheduler closes, every time; one logged
    # during the work is the user's to see.
    caplog.set_level(logging.INFO, logger="distributed.batched")
    with cluster("local", n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as client:
        client.register_plugin(_LogsAClosedStreamOnClose())
        logging.getLogger("distributed.batched").info("Batched Comm Closed <TCP (closed) the work>")
    messages = [r.getMessage() for r in caplog.records if r.name == "distributed.batched"]
    assert messages == ["Batched Comm Closed <TCP (closed) the work>"]
    assert not logging.getLogger("distributed.batched").filters  # the filter is gone with the close


def test_bad_kind_and_both_targets():
    with pytest.raises(ValueError, match="unknown cluster kind 'k8s'"):
        with cluster("k8s"):
            pass
    with pytest.raises(ValueError, match="not both"):
        with cluster(address="tcp://x:1", scheduler_file="s.json"):
            pass


@pytest.mark.parametrize("kind", ["slurm", "pbs"])
def test_jobqueue_missing_names_extra(kind, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "dask_jobqueue", None)  # as if not installed: import fails
    with pytest.raises(ImportError, match=r"daskbatch\[hpc\]"):
        with cluster(kind):
            pass


@pytest.mark.parametrize(
    ("value", "expected"),
    [("auto", 8 * GiB), (None, 8 * GiB), ("16GiB", 16 * GiB), (1000, 1000), ("0.5", 4 * GiB),
     (0.25, 2 * GiB), ("1e9", 10**9)],
)
def test_parse_memory(value, expected):
    assert parse_memory(value, total_bytes=8 * GiB) == expected


@pytest.mark.parametrize("value", ["lots", 2.0, 0, True])
def test_parse_memory_rejects(value):
    with pytest.raises(ValueError):
        parse_memory(value, total_bytes=GiB)


def test_resources_from_machine():
    r = resources_from_machine(n_workers=2, threads_per_worker=3, memory="4GiB")
    assert r == Resources(4 * GiB, 3, 2)
    half = resources_from_machine(memory=0.5)
    assert half.memory_bytes == resources_from_machine().memory_bytes // 2


@pytest.mark.gpu
def test_cuda_cluster():
    pytest.importorskip("dask_cuda")
    with cluster("cuda", dashboard_address=":0") as client:
        r = resources_from_client(client)
        assert r.device == "gpu" and r.device_memory_bytes
        assert r.n_workers >= 1

        def allocator_is_rmm():
            import cupy

            return "rmm" in str(cupy.cuda.get_allocator()).lower()

        assert all(client.run(allocator_is_rmm).values())


def test_require_cuda_names_what_is_missing(monkeypatch):
    from daskbatch.errors import DeviceUnavailableError
    from daskbatch.runtime.cluster import _has_module, require_cuda

    if not _has_module("dask_cuda"):
        with pytest.raises(ImportError, match=r"needs dask-cuda: .*daskbatch\[gpu-cu12\]' or 'daskbatch\[gpu-cu13\]"):
            require_cuda()
        return
    # dask-cuda is here: hide every device from this process.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(DeviceUnavailableError, match=r"none is visible \(CUDA_VISIBLE_DEVICES=''\)"):
        require_cuda()
