"""Throughput of one describe pass from an S3 bucket with request latency, against the same store on local disk.

moto's S3 server (``python -m moto.server``) runs on loopback in its own process; a
small proxy, also its own process, forwards every HTTP request to it after sleeping
``--latency`` milliseconds, as a far object store would answer (it never caches or
answers for the server; responses pass through ``os.splice``). The store (X and an
integer label y) is written once to the bucket and once to a local directory, with the
same chunks (16 MiB by default) and codecs (zstd and a CRC-32C by default) as ``ingest``
writes; with obstore installed such a store's chunks are read through it. Each case runs
``describe(stats="moments")`` and describe's default statistics with the label, and
reports MB/s of X's bytes and the ratio to local disk (best of ``--repeat``), the
requests of a pass, and the CPU seconds of the describing process, the server and the
proxy (from /proc/PID/stat), per request and per MB.

Usage::

    python benchmarks/bench_object_store.py                          # 0, 20 and 50 ms
    python benchmarks/bench_object_store.py --chunk-rows 4096        # 2.1 MB chunks
    python benchmarks/bench_object_store.py --chunk-rows 0           # zarr's automatic chunks
    python benchmarks/bench_object_store.py --codecs zarr            # no CRC-32C: read by s3fs
    python benchmarks/bench_object_store.py --chunk-rows 4096 --shard-rows 32768 --concurrency 32
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import zarr
from zarr.codecs import ZstdCodec

import daskbatch as db
from daskbatch.io.ingest import DEFAULT_CHUNK_BYTES
from daskbatch.io.outputs import checksummed

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_DEFAULT_REGION": "us-east-1",
}
BUCKET = "daskbatch-bench"


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def serve_proxy(port: int, target: int, delay_ms: float, log: str) -> None:
    """Forward every request on ``port`` to 127.0.0.1:``target`` after ``delay_ms`` (runs until killed).

    Each client connection gets a thread and its own connection to the server.
    Requests are parsed only as far as their head and ``Content-Length`` (to find where
    each one ends and delay it), then sent on unchanged. Responses go from the
    server's socket to the client's with ``os.splice`` through a 1 MiB pipe, in the
    kernel: no parsing, no copy into Python, a few system calls per MiB. Clients
    (aiobotocore) wait for a response before sending the next request on a
    connection, so delaying each request as it arrives delays every round trip by
    ``delay_ms``. One line per request goes to ``log`` (time, method and path), from
    which the benchmark counts the requests of a pass.
    """
    import fcntl
    import threading

    delay = delay_ms / 1000
    journal = open(log, "a", buffering=1)  # noqa: SIM115 - open for the process's life

    def relay(upstream: socket.socket, client: socket.socket) -> None:
        """Move the server's bytes to the client until the server closes, then close both connections."""
        read_end, write_end = os.pipe()
        fcntl.fcntl(write_end, 1031, 1 << 20)  # F_SETPIPE_SZ: 1 MiB per splice, not 64 KiB
        try:
            while moved := os.splice(upstream.fileno(), write_end, 1 << 20):
                while moved:
                    moved -= os.splice(read_end, client.fileno(), moved)
        except OSError:
            pass  # the client went away
        finally:
            os.close(read_end)
            os.close(write_end)
            with contextlib.suppress(OSError):
                client.shutdown(
                    socket.SHUT_RDWR
                )  # wakes the request thread if it waits on the client
            client.close()
            upstream.close()

    def forward(client: socket.socket) -> None:
        """Delay and forward each request of one client connection; a thread relays the answers."""
        upstream = socket.create_connection(("127.0.0.1", target))
        for sock in (client, upstream):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=relay, args=(upstream, client), daemon=True).start()
        pending = b""
        try:
            while True:
                while b"\r\n\r\n" not in pending:
                    received = client.recv(1 << 16)
                    if not received:
                        return  # the client closed its connection
                    pending += received
                head, pending = pending.split(b"\r\n\r\n", 1)
                fields = {
                    name.strip().lower(): value.strip()
                    for name, _, value in (line.partition(b":") for line in head.split(b"\r\n")[1:])
                }
                if fields.get(b"transfer-encoding", b"").lower() == b"chunked":
                    raise RuntimeError("the bench proxy does not forward chunked request bodies")
                length = int(fields.get(b"content-length", b"0"))
                while len(pending) < length:
                    received = client.recv(1 << 20)
                    if not received:
                        return
                    pending += received
                body, pending = pending[:length], pending[length:]
                request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
                journal.write(f"{time.time():.3f} {request_line}\n")
                time.sleep(delay)
                upstream.sendall(head + b"\r\n\r\n" + body)
        except OSError:
            pass  # either side went away
        finally:
            with contextlib.suppress(OSError):
                upstream.shutdown(socket.SHUT_RDWR)  # the relay sees the end, closes both sockets

    listener = socket.create_server(("127.0.0.1", port), backlog=256)
    while True:
        client, _ = listener.accept()
        threading.Thread(target=forward, args=(client,), daemon=True).start()


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system, all threads and waited-for children) of process ``pid`` so far."""
    after_name = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # Fields 14-17 of proc(5): utime, stime, cutime, cstime; after the name, field 3 is index 0.
    return sum(int(after_name[i]) for i in range(11, 15)) / os.sysconf("SC_CLK_TCK")


def wait_for(port: int, timeout: float = 60.0) -> None:
    """Wait until something listens on 127.0.0.1:``port``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


#: CPUs for the server and proxy processes (None: all); set by --server-cpus.
SERVER_CPUS: set[int] | None = None


def start(args: list[str], port: int) -> subprocess.Popen[bytes]:
    """Start a server process (on :data:`SERVER_CPUS`) and wait for its port."""
    cpus = SERVER_CPUS
    pin = None if cpus is None else (lambda: os.sched_setaffinity(0, cpus))
    proc = subprocess.Popen(
        args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=pin
    )
    wait_for(port)
    return proc


def storage_options(port: int) -> dict[str, object]:
    """s3fs options for the endpoint on ``port``."""
    return {
        "endpoint_url": f"http://127.0.0.1:{port}",
        "key": CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "secret": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        "client_kwargs": {"region_name": CREDENTIALS["AWS_DEFAULT_REGION"]},
    }


def write(
    where: str,
    x: np.ndarray,
    y: np.ndarray,
    chunk_rows: int,
    shard_rows: int | None,
    codecs: str = "ingest",
    **options: object,
) -> None:
    """Write X (chunked by rows, optionally in shards of ``shard_rows``) and the label y.

    ``codecs``: ``"ingest"`` compresses X as ``ingest`` does (zstd level 1, then the CRC-32C
    that every read checks), ``"zarr"`` with zarr's defaults (zstd, no checksum).
    """
    group = zarr.open_group(where, mode="w", zarr_format=3, **options)
    compressors = checksummed(ZstdCodec(level=1)) if codecs == "ingest" else "auto"
    shards = None if shard_rows is None else (shard_rows, x.shape[1])
    chunks = (
        (chunk_rows, x.shape[1]) if chunk_rows else "auto"
    )  # zarr's own: splits the features too
    group.create_array("X", data=x, chunks=chunks, shards=shards, compressors=compressors)
    group.create_array("y", data=y)  # zarr's own chunks (50,000 rows for 200,000)


def timed_pass(
    store: object, stats: str, counters: Callable[[], np.ndarray], **options: object
) -> tuple[float, float, np.ndarray, db.Summary]:
    """Seconds to open the store, seconds of one describe pass, what ``counters`` counted in the pass, and the summary."""
    t0 = time.perf_counter()
    # moments only, or describe's default statistics with the label (cov, histograms and quantiles, MI, class moments)
    dataset = (
        db.open_dataset(store, **options)
        if stats == "moments"
        else db.open_dataset(store, label="y", **options)
    )
    before, t1 = counters(), time.perf_counter()
    summary = db.describe(dataset, stats="moments") if stats == "moments" else db.describe(dataset)
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, counters() - before, summary


def counters(
    server: subprocess.Popen[bytes], proxy: subprocess.Popen[bytes] | None, log: Path | None
) -> np.ndarray:
    """CPU seconds so far of this process, the server and the proxy, and the requests the proxy forwarded."""
    times = os.times()
    return np.array(
        [
            times.user + times.system,
            cpu_seconds(server.pid),
            cpu_seconds(proxy.pid) if proxy else 0.0,
            requests_logged(log) if log else 0,
        ]
    )


def requests_logged(log: Path) -> int:
    """Requests the proxy has forwarded so far (one line each)."""
    return log.read_bytes().count(b"\n") if log.exists() else 0


def main() -> None:
    """Write the store, run the cases in interleaved rounds, print the table (best of the rounds)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument(
        "--chunk-rows",
        type=int,
        default=DEFAULT_CHUNK_BYTES // (64 * 8),
        help="rows per storage chunk, one request each (default: 16 MiB of 64 features, as ingest "
        "writes; 0: zarr's automatic chunks)",
    )
    parser.add_argument(
        "--codecs",
        choices=("ingest", "zarr"),
        default="ingest",
        help="X's codecs: ingest's (zstd + CRC-32C; read through obstore when installed) or zarr's "
        "defaults (zstd; read through s3fs, whose botocore checks S3's response checksums)",
    )
    parser.add_argument(
        "--shard-rows", type=int, default=None, help="rows per zarr v3 shard (default: no shards)"
    )
    parser.add_argument(
        "--latency", type=float, nargs="+", default=[0.0, 20.0, 50.0], help="ms added per request"
    )
    parser.add_argument(
        "--stats",
        nargs="+",
        choices=("moments", "defaults"),
        default=["moments", "defaults"],
        help="moments only, and/or describe's default statistics with a label",
    )
    parser.add_argument("--repeat", type=int, default=5, help="rounds of all cases (best is shown)")
    parser.add_argument("--concurrency", type=int, default=None, help="zarr async.concurrency")
    parser.add_argument(
        "--server-cpus",
        type=int,
        nargs="+",
        default=None,
        help="CPUs of moto and the proxies (e.g. 1), with the benchmark itself started on others "
        "(taskset -c 0 python ...): a server that is not on the client's cores, as a real S3 is",
    )
    parser.add_argument(
        "--serve-proxy",
        nargs=4,
        metavar=("PORT", "TARGET", "DELAY_MS", "LOG"),
        help=argparse.SUPPRESS,
    )
    args = parser.parse_args()
    if args.serve_proxy:
        port, target, delay, log = args.serve_proxy
        serve_proxy(int(port), int(target), float(delay), log)
        return
    if args.concurrency:
        zarr.config.set({"async.concurrency": args.concurrency})
    global SERVER_CPUS
    SERVER_CPUS = set(args.server_cpus) if args.server_cpus else None

    os.environ.update(CREDENTIALS)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.rows, args.features))
    y = rng.integers(0, 2, size=args.rows)
    mb = x.nbytes / 1e6
    moto_port = free_port()
    moto = start(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(moto_port)], moto_port
    )
    servers = [moto]
    best: dict[tuple[str, str], np.ndarray] = {}  # (stats, case) -> fastest open, fastest pass
    used_in_all: dict[
        tuple[str, str], np.ndarray
    ] = {}  # -> mean CPU seconds and requests of a pass
    try:
        import boto3

        boto3.client("s3", endpoint_url=f"http://127.0.0.1:{moto_port}").create_bucket(
            Bucket=BUCKET
        )
        with tempfile.TemporaryDirectory() as tmp:
            local = str(Path(tmp) / "x.zarr")
            write(local, x, y, args.chunk_rows, args.shard_rows, args.codecs)
            grid = zarr.open_array(f"{local}/X", mode="r")  # its metadata, for the heading
            write(
                f"s3://{BUCKET}/x.zarr",
                x,
                y,
                args.chunk_rows,
                args.shard_rows,
                args.codecs,
                storage_options=storage_options(moto_port),
            )
            # name -> (store, open options, proxy process, proxy's request log)
            cases: dict[
                str, tuple[object, dict[str, object], subprocess.Popen[bytes] | None, Path | None]
            ] = {"local disk": (local, {}, None, None)}
            for delay in args.latency:  # one proxy process per latency
                port = free_port()
                log = Path(tmp) / f"proxy-{delay:g}.log"
                proxy = [
                    sys.executable,
                    __file__,
                    "--serve-proxy",
                    str(port),
                    str(moto_port),
                    str(delay),
                    str(log),
                ]
                servers.append(start(proxy, port))
                cases[f"{delay:g}"] = (
                    f"s3://{BUCKET}/x.zarr",
                    {"storage_options": storage_options(port)},
                    servers[-1],
                    log,
                )
            # Rounds of every case in turn: the machine's load varies, and each case sees the same.
            references: dict[str, db.Summary] = {}
            for stats in args.stats:  # compile the kernels and warm the caches before any timing
                timed_pass(local, stats, partial(counters, moto, None, None))
            for _ in range(args.repeat):
                for stats in args.stats:
                    for name, (store, options, proxy, log) in cases.items():
                        opened, passed, used, summary = timed_pass(
                            store, stats, partial(counters, moto, proxy, log), **options
                        )
                        reference = references.setdefault(stats, summary)
                        np.testing.assert_array_equal(summary.mean, reference.mean)  # the same bits
                        if stats == "defaults":
                            np.testing.assert_array_equal(summary.cov, reference.cov)
                        key = (stats, name)
                        best[key] = np.minimum(best.get(key, np.inf), [opened, passed])
                        used_in_all[key] = used_in_all.get(key, 0.0) + used / args.repeat
    finally:
        for proc in servers:
            proc.kill()
            proc.wait()
    layout = f"shards of {grid.shards[0]:,} rows, " if grid.shards else ""
    print(
        f"{args.rows:,} x {args.features} float64 ({mb:.0f} MB), {layout}{grid.nchunks} chunks of "
        f"{grid.chunks[0]:,} x {grid.chunks[1]} ({grid.chunks[0] * grid.chunks[1] * 8 / 1e6:.1f} MB), "
        f"zarr async.concurrency {zarr.config.get('async.concurrency')}, best pass of {args.repeat} "
        "interleaved rounds; requests and CPU seconds: mean of the passes (open excluded); CPU of local: "
        "local describe CPU / (describe + server + proxy CPU), the ratio when every core is busy"
    )
    print(
        "| stats | store | ms per request | open s | pass s | pass MB/s | pass, of local | requests "
        "| describe CPU s | server CPU s | server ms per request | server ms per MB | proxy ms per MB "
        "| CPU of local |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for (stats, name), (opened, passed) in best.items():
        client_cpu, server_cpu, proxy_cpu, requests = used_in_all[(stats, name)]
        local_pass = best[(stats, "local disk")][1]
        local_cpu = used_in_all[(stats, "local disk")][0]
        times = (
            f"{opened:.2f} | {passed:.2f} | {mb / passed:.0f} | {100 * local_pass / passed:.0f} %"
        )
        if name == "local disk":
            print(
                f"| {stats} | local disk | - | {times} | - | {client_cpu:.2f} | - | - | - | - | 100 % |"
            )
            continue
        print(
            f"| {stats} | S3 (moto) via proxy | {name} | {times} | {requests:.0f} | {client_cpu:.2f} | "
            f"{server_cpu:.2f} | {1000 * server_cpu / requests:.1f} | {1000 * server_cpu / mb:.2f} | "
            f"{1000 * proxy_cpu / mb:.2f} | {100 * local_cpu / (client_cpu + server_cpu + proxy_cpu):.0f} % |"
        )


if __name__ == "__main__":
    main()
