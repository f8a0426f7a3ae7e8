"""Throughput of one describe pass from an S3 bucket with request latency, against the same store on local disk.

moto's S3 server (``python -m moto.server``) runs on loopback in its own process; a
small proxy, also its own process, forwards every HTTP request to it after sleeping
``--latency`` milliseconds, as a far object store would answer. The store is
written once to the bucket and once to a local directory, with the same chunks;
each case runs ``describe(stats="moments")`` (one pass) and reports MB/s of the
array's bytes and the ratio to local disk (best of ``--repeat``).

Usage::

    python benchmarks/bench_object_store.py                          # 0, 20 and 50 ms
    python benchmarks/bench_object_store.py --latency 20 --rows 400000 --chunk-rows 4096
"""

from __future__ import annotations

import argparse
import http.client
import http.server
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import zarr

import daskbatch as db

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


def serve_proxy(port: int, target: int, delay_ms: float) -> None:
    """Forward every request on ``port`` to 127.0.0.1:``target`` after ``delay_ms`` (runs until killed)."""

    class Delayed(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _forward(self) -> None:
            """Sleep, send the same request to the server, answer with its response."""
            time.sleep(delay_ms / 1000)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            upstream = http.client.HTTPConnection("127.0.0.1", target, timeout=120)
            upstream.request(self.command, self.path, body=body or None, headers=dict(self.headers))
            answer = upstream.getresponse()
            payload = answer.read()
            self.send_response(answer.status, answer.reason)
            for name, value in answer.getheaders():
                if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)
            upstream.close()

        do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward

        def log_message(self, *args: object) -> None:
            """Quiet: one line per request otherwise."""

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Delayed)
    server.daemon_threads = True
    server.serve_forever()


def wait_for(port: int, timeout: float = 60.0) -> None:
    """Wait until something listens on 127.0.0.1:``port``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


def start(args: list[str], port: int) -> subprocess.Popen[bytes]:
    """Start a server process and wait for its port."""
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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


def write(where: str, x: np.ndarray, chunk_rows: int, **options: object) -> None:
    """Write X with zarr's defaults, chunked by rows."""
    group = zarr.open_group(where, mode="w", zarr_format=3, **options)
    group.create_array("X", data=x, chunks=(chunk_rows, x.shape[1]))


def timed_pass(store: object, **options: object) -> tuple[float, float, db.Summary]:
    """Seconds to open the store, seconds of one describe pass (moments only), and the summary."""
    t0 = time.perf_counter()
    dataset = db.open_dataset(store, **options)
    t1 = time.perf_counter()
    summary = db.describe(dataset, stats="moments")
    return t1 - t0, time.perf_counter() - t1, summary


def main() -> None:
    """Write the store, run the cases in interleaved rounds, print the table (best of the rounds)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument(
        "--chunk-rows", type=int, default=4096, help="rows per storage chunk (one request each)"
    )
    parser.add_argument(
        "--latency", type=float, nargs="+", default=[0.0, 20.0, 50.0], help="ms added per request"
    )
    parser.add_argument("--repeat", type=int, default=5, help="rounds of all cases (best is shown)")
    parser.add_argument("--concurrency", type=int, default=None, help="zarr async.concurrency")
    parser.add_argument(
        "--serve-proxy",
        type=float,
        nargs=3,
        metavar=("PORT", "TARGET", "DELAY_MS"),
        help=argparse.SUPPRESS,
    )
    args = parser.parse_args()
    if args.serve_proxy:
        port, target, delay = args.serve_proxy
        serve_proxy(int(port), int(target), delay)
        return
    if args.concurrency:
        zarr.config.set({"async.concurrency": args.concurrency})

    os.environ.update(CREDENTIALS)
    x = np.random.default_rng(0).normal(size=(args.rows, args.features))
    mb = x.nbytes / 1e6
    moto_port = free_port()
    servers = [
        start(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(moto_port)],
            moto_port,
        )
    ]
    try:
        import boto3

        boto3.client("s3", endpoint_url=f"http://127.0.0.1:{moto_port}").create_bucket(
            Bucket=BUCKET
        )
        with tempfile.TemporaryDirectory() as tmp:
            local = str(Path(tmp) / "x.zarr")
            write(local, x, args.chunk_rows)
            write(
                f"s3://{BUCKET}/x.zarr",
                x,
                args.chunk_rows,
                storage_options=storage_options(moto_port),
            )
            cases: dict[str, tuple[object, dict[str, object]]] = {"local disk": (local, {})}
            for delay in args.latency:  # one proxy process per latency
                port = free_port()
                proxy = [
                    sys.executable,
                    __file__,
                    "--serve-proxy",
                    str(port),
                    str(moto_port),
                    str(delay),
                ]
                servers.append(start(proxy, port))
                cases[f"{delay:g}"] = (
                    f"s3://{BUCKET}/x.zarr",
                    {"storage_options": storage_options(port)},
                )
            # Rounds of every case in turn: the machine's load varies, and each case sees the same.
            best = {name: (float("inf"), float("inf")) for name in cases}
            reference = None
            for _ in range(args.repeat):
                for name, (store, options) in cases.items():
                    opened, passed, summary = timed_pass(store, **options)
                    if reference is None:
                        reference = summary
                    np.testing.assert_array_equal(summary.mean, reference.mean)  # the same bits
                    best[name] = (min(best[name][0], opened), min(best[name][1], passed))
    finally:
        for proc in servers:
            proc.kill()
            proc.wait()
    chunks = -(-args.rows // args.chunk_rows)
    print(
        f"{args.rows:,} x {args.features} float64 ({mb:.0f} MB) in {chunks} chunks of {args.chunk_rows:,} rows "
        f"({args.chunk_rows * args.features * 8 / 1e6:.1f} MB), zarr async.concurrency "
        f"{zarr.config.get('async.concurrency')}, best of {args.repeat} interleaved rounds"
    )
    print(
        "| store | ms per request | open s | pass s | pass MB/s | pass, of local | open + pass, of local |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    local_open, local_pass = best["local disk"]
    for name, (opened, passed) in best.items():
        where, delay = (
            ("local disk", "-") if name == "local disk" else ("S3 (moto) via proxy", name)
        )
        print(
            f"| {where} | {delay} | {opened:.2f} | {passed:.2f} | {mb / passed:.0f} | "
            f"{100 * local_pass / passed:.0f} % | {100 * (local_open + local_pass) / (opened + passed):.0f} % |"
        )


if __name__ == "__main__":
    main()
