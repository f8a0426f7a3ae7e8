"""Zarr stores and daskbatch outputs in an S3 bucket, over real HTTP to moto's S3 server on loopback.

Nothing of the client library is mocked: s3fs (through fsspec and zarr) talks to a
``moto.server.ThreadedMotoServer`` on 127.0.0.1. The Python API gets the endpoint and the
credentials as fsspec's ``storage_options``; the CLI and subprocesses through the
environment (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ...), as botocore reads them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import zarr

import daskbatch as db
from daskbatch.engine.checkpoint_files import read_runs
from daskbatch.errors import DataError
from daskbatch.io.outputs import OutputError

moto_server = pytest.importorskip(
    "moto.server", reason="the object-store tests need moto[server] (the [test] extra)"
)
pytest.importorskip("s3fs", reason="the object-store tests need s3fs (the [test] or [s3] extra)")
import boto3  # noqa: E402 - only once moto is known to be installed (it brings boto3)

REPO = Path(__file__).resolve().parents[1]
ROWS, FEATURES, CHUNK = 1200, 4, 200
N_BLOCKS = ROWS // CHUNK
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def _free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """The URL of moto's S3 server, started on loopback for this session."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # a log line per request otherwise
    server = moto_server.ThreadedMotoServer(
        ip_address="127.0.0.1", port=_free_port(), verbose=False
    )
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@dataclass(frozen=True)
class Bucket:
    """A fresh bucket on the loopback server: its name, fsspec's storage_options and the environment for the CLI."""

    name: str
    endpoint: str

    @property
    def storage_options(self) -> dict[str, object]:
        """The s3fs options: endpoint, key, secret and region."""
        return {
            "endpoint_url": self.endpoint,
            "key": CREDENTIALS["AWS_ACCESS_KEY_ID"],
            "secret": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            "client_kwargs": {"region_name": CREDENTIALS["AWS_DEFAULT_REGION"]},
        }

    @property
    def env(self) -> dict[str, str]:
        """The variables botocore reads the same endpoint and credentials from."""
        return {**CREDENTIALS, "AWS_ENDPOINT_URL": self.endpoint}

    def url(self, key: str) -> str:
        """The s3:// URL of ``key`` in this bucket."""
        return f"s3://{self.name}/{key}"

    def client(self):  # noqa: ANN201 - boto3's client class is generated
        """A boto3 client of the server (to delete or damage objects behind daskbatch's back)."""
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name=CREDENTIALS["AWS_DEFAULT_REGION"],
        )

    def keys(self, prefix: str) -> list[str]:
        """The object keys under ``prefix``, read from the server."""
        listing = self.client().list_objects_v2(Bucket=self.name, Prefix=prefix)
        return sorted(item["Key"] for item in listing.get("Contents", []))


@pytest.fixture
def bucket(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Bucket:
    """A new bucket; the environment holds its endpoint and credentials (what the CLI reads)."""
    made = Bucket(f"daskbatch-{uuid.uuid4().hex[:12]}", s3_endpoint)
    made.client().create_bucket(Bucket=made.name)
    for name, value in made.env.items():
        monkeypatch.setenv(name, value)
    return made


@pytest.fixture(scope="module")
def values() -> tuple[np.ndarray, np.ndarray]:
    """The samples and labels every store here holds."""
    rng = np.random.default_rng(35)
    return rng.normal(3.0, 2.0, size=(ROWS, FEATURES)), rng.integers(0, 3, size=ROWS)


def _write_zarr(
    where: str, values: tuple[np.ndarray, np.ndarray], zarr_format: int, **options: object
) -> None:
    """Write X and y with zarr's defaults (as another writer would) to a path or URL."""
    group = zarr.open_group(where, mode="w", zarr_format=zarr_format, **options)
    group.create_array("X", data=values[0], chunks=(CHUNK, FEATURES))
    group.create_array("y", data=values[1], chunks=(CHUNK,))


def assert_same_statistics(a: db.Summary, b: db.Summary) -> None:
    """Every per-feature statistic of the two summaries bitwise equal."""
    left, right = a.to_xarray(), b.to_xarray()
    assert sorted(left.data_vars) == sorted(right.data_vars)
    for name in left.data_vars:
        np.testing.assert_array_equal(left[name].values, right[name].values, err_msg=name)


STATS = ("moments", "cov", "mi")


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_describe_of_a_zarr_store_in_a_bucket_equals_local(
    bucket: Bucket, values, tmp_path: Path, zarr_format: int
) -> None:
    url = bucket.url(f"v{zarr_format}.zarr")
    _write_zarr(url, values, zarr_format, storage_options=bucket.storage_options)
    _write_zarr(str(tmp_path / "local.zarr"), values, zarr_format)
    ds = db.open_dataset(url, label="y", storage_options=bucket.storage_options)
    assert (ds.path, ds.zarr_format, ds.shape) == (url, zarr_format, (ROWS, FEATURES))
    remote = db.describe(ds, stats=STATS, bins=16, range=(-10, 16))
    local = db.describe(
        db.open_dataset(tmp_path / "local.zarr", label="y"), stats=STATS, bins=16, range=(-10, 16)
    )
    assert_same_statistics(remote, local)
    assert remote.provenance["path"] == url


def test_synth_writes_a_bucket_and_describe_reads_it_by_url(bucket: Bucket, tmp_path: Path) -> None:
    url = bucket.url("synth.zarr")
    db.synth(ROWS, FEATURES, classes=3, chunk_rows=CHUNK, seed=4, path=url)
    db.synth(ROWS, FEATURES, classes=3, chunk_rows=CHUNK, seed=4, path=tmp_path / "local.zarr")
    assert f"synth.zarr/X/c/{N_BLOCKS - 1}/0" in bucket.keys("synth.zarr/X/")
    # A URL string alone: the endpoint and the credentials come from the environment.
    assert_same_statistics(
        db.describe(url, stats=STATS), db.describe(tmp_path / "local.zarr", stats=STATS)
    )


def _damage(bucket: Bucket, local: Path, key: str, how: str) -> None:
    """Delete or overwrite the object ``key`` in the bucket and the same file of the local copy."""
    if how == "delete":
        bucket.client().delete_object(Bucket=bucket.name, Key=key)
        (local / key.split("/", 1)[1]).unlink()
    else:
        garbage = b"\x00not a chunk\xff" * 7
        bucket.client().put_object(Bucket=bucket.name, Key=key, Body=garbage)
        (local / key.split("/", 1)[1]).write_bytes(garbage)


def _refusal(store: object, **options: object) -> str:
    """The one-line message describe refuses ``store`` with."""
    with pytest.raises(DataError) as refused:
        db.describe(db.open_dataset(store, **options), stats=STATS, bins=16, range=(-10, 16))
    message = str(refused.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("how", ["delete", "corrupt"])
def test_damaged_chunk_object_of_a_daskbatch_store_is_refused_by_name(
    bucket: Bucket, tmp_path: Path, how: str
) -> None:
    url, local = bucket.url("lost.zarr"), tmp_path / "lost.zarr"
    for where in (url, local):
        db.synth(ROWS, FEATURES, classes=3, chunk_rows=CHUNK, seed=4, path=where)
    _damage(bucket, local, "lost.zarr/X/c/2/0", how)
    remote = _refusal(url, storage_options=bucket.storage_options)
    assert "X/c/2/0" in remote
    assert remote.replace(url, "STORE") == _refusal(local).replace(str(local), "STORE")


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_deleted_chunk_object_of_zarrs_writer_reads_as_the_fill_value_as_locally(
    bucket: Bucket, values, tmp_path: Path, zarr_format: int
) -> None:
    url, local = bucket.url("fill.zarr"), tmp_path / "fill.zarr"
    _write_zarr(url, values, zarr_format, storage_options=bucket.storage_options)
    _write_zarr(str(local), values, zarr_format)
    _damage(bucket, local, "fill.zarr/X/" + ("3.0" if zarr_format == 2 else "c/3/0"), "delete")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        remote = db.open_dataset(url, label="y", storage_options=bucket.storage_options)
        here = db.open_dataset(local, label="y")
    assert [str(w.message).replace(url, "S") for w in seen[: len(seen) // 2]] == [
        str(w.message).replace(str(local), "S") for w in seen[len(seen) // 2 :]
    ]
    assert (
        remote.missing_chunk_keys
        == here.missing_chunk_keys
        == ["X/" + ("3.0" if zarr_format == 2 else "c/3/0")]
    )
    assert_same_statistics(
        db.describe(remote, stats=STATS, bins=16, range=(-10, 16)),
        db.describe(here, stats=STATS, bins=16, range=(-10, 16)),
    )


@pytest.mark.parametrize("how", ["delete", "corrupt"])
def test_damaged_chunk_object_of_zarrs_writer_is_refused_as_locally(
    bucket: Bucket, values, tmp_path: Path, how: str
) -> None:
    """zarr's defaults write no checksum: garbage fails to decompress, a deletion is the fill value unless asked to raise."""
    url, local = bucket.url("z.zarr"), tmp_path / "z.zarr"
    _write_zarr(url, values, 3, storage_options=bucket.storage_options)
    _write_zarr(str(local), values, 3)
    _damage(bucket, local, "z.zarr/y/c/4", how)
    options = {"missing": "raise"} if how == "delete" else {}
    remote = _refusal(url, label="y", storage_options=bucket.storage_options, **options)
    assert "y/c/4" in remote
    assert remote.replace(url, "STORE") == _refusal(local, label="y", **options).replace(
        str(local), "STORE"
    )


KILLED = textwrap.dedent(
    """
    import dataclasses, sys, time
    import dask
    import daskbatch as db

    url, ckpt = sys.argv[1], sys.argv[2]
    ds = db.open_dataset(url, chunks=int(sys.argv[3]))  # endpoint and credentials from the environment

    def slow(block):
        time.sleep(0.25)
        return block

    ds = dataclasses.replace(ds, x=ds.x.map_blocks(slow, dtype=ds.x.dtype))
    with dask.config.set(num_workers=2):
        db.describe(ds, stats=("moments", "cov"), run=db.RunOptions(split_every=2, plan=None, checkpoint=ckpt))
    print("finished")
    """
)


def _checkpointed_blocks(folder: Path, split_every: int) -> int:
    """How many blocks the node files of one pass folder cover (from their names ``L<level>-<index>.ckpt``)."""
    covered: set[int] = set()
    for node in folder.glob("L*.ckpt"):
        level, index = (int(part) for part in node.stem[1:].split("-"))
        span = split_every ** (level + 1)
        covered.update(range(index * span, (index + 1) * span))
    return len(covered)


@pytest.mark.slow  # a subprocess, killed
def test_checkpointed_run_on_a_bucket_killed_and_resumed(bucket: Bucket, tmp_path: Path) -> None:
    url, rows_per_block = bucket.url("resume.zarr"), CHUNK // 4
    db.synth(ROWS, FEATURES, classes=3, chunk_rows=rows_per_block, seed=5, path=url)
    script, ckpt = tmp_path / "run.py", tmp_path / "ckpt"
    script.write_text(KILLED)
    proc = subprocess.Popen(
        [sys.executable, str(script), url, str(ckpt), str(rows_per_block)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while _checkpointed_blocks(ckpt / "pass-moments-cov", 2) < 4:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL and "finished" not in out
    ds = db.open_dataset(url, chunks=rows_per_block, storage_options=bucket.storage_options)
    run = db.RunOptions(split_every=2, plan=None, checkpoint=ckpt)
    resumed = db.describe(ds, stats=("moments", "cov"), run=run)
    runs = read_runs(ckpt, "moments-cov")
    assert (
        runs[-1]["reused_blocks"] >= 4
        and runs[-1]["computed_blocks"] == ROWS // rows_per_block - runs[-1]["reused_blocks"]
    )
    plain = db.describe(ds, stats=("moments", "cov"), run=db.RunOptions(split_every=2, plan=None))
    assert_same_statistics(resumed, plain)


def test_summary_saved_to_a_bucket_and_loaded_back(bucket: Bucket, values, tmp_path: Path) -> None:
    _write_zarr(str(tmp_path / "in.zarr"), values, 3)
    summary = db.describe(
        db.open_dataset(tmp_path / "in.zarr", label="y"), stats=STATS, bins=16, range=(-10, 16)
    )
    url = bucket.url("out/summary.zarr")
    assert summary.save(url) == url
    assert_same_statistics(db.load_summary(url), summary)
    assert summary.save(url, overwrite=True) == url  # our own output, replaced in place


def test_transform_to_a_bucket_is_refused_in_one_line_before_any_block(
    bucket: Bucket, values, tmp_path: Path
) -> None:
    """A transform resumes from a done-log appended beside its store: it writes local paths only, and says so."""
    from daskbatch.transforms import steps, transform

    _write_zarr(str(tmp_path / "in.zarr"), values, 3)
    ds = db.open_dataset(tmp_path / "in.zarr", label="y")
    url = bucket.url("out/standardized.zarr")
    with pytest.raises(
        ValueError, match=r"transform outputs are written to local paths only .* got 's3://"
    ) as refused:
        transform(ds, [steps.standardize(db.describe(ds))], url)
    assert "\n" not in str(refused.value) and "copy the store to the bucket" in str(refused.value)
    assert bucket.keys("") == []


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``python -m daskbatch ARGS`` in a subprocess with ``env`` added to the environment."""
    return subprocess.run(
        [sys.executable, "-m", "daskbatch", *args],
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        capture_output=True,
        text=True,
        timeout=240,
    )


@pytest.mark.slow  # a CLI subprocess
def test_cli_reads_and_writes_a_bucket_from_environment_variables(
    bucket: Bucket, tmp_path: Path
) -> None:
    store, out = bucket.url("cli.zarr"), bucket.url("cli-summary.zarr")
    db.synth(ROWS, FEATURES, classes=3, chunk_rows=CHUNK, seed=6, path=store)
    done = _cli("describe", store, "--out", out, env=bucket.env)
    assert done.returncode == 0, done.stderr
    assert_same_statistics(db.load_summary(out), db.describe(store))


@pytest.mark.slow  # CLI subprocesses
def test_output_guard_refuses_a_foreign_object_in_the_bucket(
    bucket: Bucket, values, tmp_path: Path
) -> None:
    _write_zarr(str(tmp_path / "in.zarr"), values, 3)
    summary = db.describe(db.open_dataset(tmp_path / "in.zarr"))
    client = bucket.client()
    client.put_object(Bucket=bucket.name, Key="theirs/results.csv", Body=b"a,b\n1,2\n")
    _write_zarr(bucket.url("their.zarr"), values, 3, storage_options=bucket.storage_options)
    before = bucket.keys("")
    for url in (bucket.url("theirs"), bucket.url("theirs/results.csv"), bucket.url("their.zarr")):
        with pytest.raises(
            FileExistsError, match=f"{url} already exists and is not a daskbatch summary"
        ):
            summary.save(url)
        done = _cli("describe", str(tmp_path / "in.zarr"), "--out", url, env=bucket.env)
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and url in done.stderr
    assert bucket.keys("") == before
    assert (
        client.get_object(Bucket=bucket.name, Key="theirs/results.csv")["Body"].read()
        == b"a,b\n1,2\n"
    )


@pytest.mark.slow  # CLI subprocesses
def test_json_summary_in_a_bucket_is_replaced_by_the_same_command(
    bucket: Bucket, tmp_path: Path
) -> None:
    store, out = bucket.url("j.zarr"), bucket.url("j.json")
    db.synth(ROWS, FEATURES, classes=3, chunk_rows=CHUNK, seed=6, path=store)
    for _ in range(2):  # the second run finds its own earlier summary there, as on a local disk
        done = _cli("describe", store, "--json", out, env=bucket.env)
        assert done.returncode == 0, done.stderr
    assert (
        json.loads(bucket.client().get_object(Bucket=bucket.name, Key="j.json")["Body"].read())[
            "daskbatch_output"
        ]
        == "summary"
    )


def test_summary_saved_to_a_missing_bucket_is_refused_by_name(bucket: Bucket) -> None:
    summary = db.describe(np.random.default_rng(0).normal(size=(100, 2)))
    with pytest.raises(
        OutputError,
        match=r"^path s3://no-such-bucket-35/s\.zarr: bucket no-such-bucket-35 does not exist",
    ):
        summary.save("s3://no-such-bucket-35/s.zarr")


def test_checkpoint_url_is_refused_not_made_a_local_folder(
    bucket: Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = bucket.url("c.zarr")
    db.synth(ROWS, FEATURES, classes=3, chunk_rows=CHUNK, seed=6, path=store)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        DataError,
        match=r"checkpoint s3://[^ ]+/ckpt is a URL; checkpoints are written to a directory",
    ):
        db.describe(store, run=db.RunOptions(checkpoint=bucket.url("ckpt")))
    done = _cli("describe", store, "--checkpoint", bucket.url("ckpt"), env=bucket.env)
    assert done.returncode == 2 and done.stderr.startswith("error: --checkpoint s3://"), done.stderr
    assert list(tmp_path.iterdir()) == [] and bucket.keys("ckpt") == []


def test_unreachable_endpoint_is_one_line_naming_the_store(bucket: Bucket, tmp_path: Path) -> None:
    done = _cli(
        "describe",
        bucket.url("any.zarr"),
        env={**bucket.env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{_free_port()}"},
    )
    assert done.returncode == 2
    assert done.stderr.startswith(
        f"error: cannot open '{bucket.url('any.zarr')}': EndpointConnectionError"
    ), done.stderr


class _Requests(logging.Handler):
    """The requests the loopback server logs (werkzeug's access log), as "METHOD path" strings."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []
        self.statuses: list[int] = []  # the status code of each of them

    def emit(self, record: logging.LogRecord) -> None:
        """Keep the request line of each access-log record (and in ``statuses`` its status code)."""
        # werkzeug colours the line of every status but 200 (a range read's 206 too): the colour codes go.
        found = re.search(r'"([A-Z]+) (\S+) HTTP\S*" (\d+)', re.sub(r"\x1b\[[0-9;]*m", "", record.getMessage()))
        if found:
            self.seen.append(f"{found.group(1)} {found.group(2)}")
            self.statuses.append(int(found.group(3)))


@contextlib.contextmanager
def _server_log() -> Iterator[_Requests]:
    """The requests the server answers inside the block, in order, and their status codes."""
    requests, werkzeug = _Requests(), logging.getLogger("werkzeug")
    werkzeug.addHandler(requests)
    werkzeug.setLevel(logging.INFO)
    try:
        yield requests
    finally:
        werkzeug.removeHandler(requests)
        werkzeug.setLevel(logging.WARNING)


@contextlib.contextmanager
def _server_requests() -> Iterator[list[str]]:
    """The requests the server answers inside the block ("GET /bucket/key"), in order."""
    with _server_log() as requests:
        yield requests.seen


def test_a_pass_reads_every_chunk_object_with_one_request(bucket: Bucket, values) -> None:
    """Each round trip to an object store costs its latency: a chunk is one GET, never a HEAD before it."""
    url = bucket.url("one.zarr")
    _write_zarr(url, values, 3, storage_options=bucket.storage_options)
    ds = db.open_dataset(url, label="y", storage_options=bucket.storage_options)
    with _server_requests() as seen:
        db.describe(ds, stats="moments")
    chunks = [r for r in seen if re.search(r"/one\.zarr/X/c/\d+/0$", r)]
    assert sorted(chunks) == [f"GET /{bucket.name}/one.zarr/X/c/{i}/0" for i in range(N_BLOCKS)]


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_opening_a_group_does_not_first_look_for_an_array(
    bucket: Bucket, values, zarr_format: int
) -> None:
    """zarr.open tries an array before a group: on an object store about 3 of the 8 round trips of an open."""
    url = bucket.url("g.zarr")
    _write_zarr(url, values, zarr_format, storage_options=bucket.storage_options)
    with _server_requests() as seen:
        ds = db.open_dataset(url, label="y", storage_options=bucket.storage_options)
    assert ds.shape == (ROWS, FEATURES)
    root = f"/{bucket.name}/g.zarr/"
    assert not [r for r in seen if "g.zarr/.zarray" in r], seen  # the key, or a listing of it
    metadata = root + ("zarr.json" if zarr_format == 3 else ".zgroup")
    assert seen.count(f"GET {metadata}") == 1, seen


def _write_parquet(fs_open, where: str, values: tuple[np.ndarray, np.ndarray]) -> None:  # noqa: ANN001 - open()
    """Three Parquet files of row groups of 150 rows, X's columns f0.. and the label y, under ``where``."""
    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    for k, rows in enumerate(np.array_split(np.arange(ROWS), 3)):
        columns = {f"f{j}": values[0][rows, j] for j in range(FEATURES)}
        with fs_open(f"{where}/part-{k}.parquet", "wb") as f:
            pq.write_table(pa.table({**columns, "y": values[1][rows]}), f, row_group_size=150)


def test_parquet_dataset_in_a_bucket_equals_local(bucket: Bucket, values, tmp_path: Path) -> None:
    import s3fs

    fs = s3fs.S3FileSystem(**bucket.storage_options)
    _write_parquet(fs.open, f"{bucket.name}/ds", values)
    (tmp_path / "ds").mkdir()
    _write_parquet(open, str(tmp_path / "ds"), values)
    table = db.open_table(bucket.url("ds/"), label="y", storage_options=bucket.storage_options)
    remote = db.describe(table, stats=STATS, bins=16, range=(-10, 16))
    local = db.describe(
        db.open_table(tmp_path / "ds", label="y"), stats=STATS, bins=16, range=(-10, 16)
    )
    assert_same_statistics(remote, local)
    # A URL string alone: the endpoint and the credentials come from the environment.
    assert_same_statistics(
        db.describe(bucket.url("ds/"), label="y", stats=STATS, bins=16, range=(-10, 16)), local
    )


def test_corrupt_parquet_object_is_refused_by_name_as_locally(
    bucket: Bucket, values, tmp_path: Path
) -> None:
    import s3fs

    fs = s3fs.S3FileSystem(**bucket.storage_options)
    _write_parquet(fs.open, f"{bucket.name}/bad", values)
    (tmp_path / "bad").mkdir()
    _write_parquet(open, str(tmp_path / "bad"), values)
    garbage = b"PAR1" + b"\x00not a parquet file\xff" * 9 + b"PAR1"
    bucket.client().put_object(Bucket=bucket.name, Key="bad/part-1.parquet", Body=garbage)
    (tmp_path / "bad" / "part-1.parquet").write_bytes(garbage)
    with pytest.raises(Exception) as remote:
        db.describe(bucket.url("bad/"), label="y")
    with pytest.raises(Exception) as local:
        db.describe(tmp_path / "bad", label="y")
    assert type(remote.value) is type(local.value) and isinstance(remote.value, ValueError)
    message = str(remote.value)
    assert "part-1.parquet" in message and "\n" not in message
    assert message.replace(bucket.url("bad"), "S").replace(f"{bucket.name}/bad", "S") == str(
        local.value
    ).replace(str(tmp_path / "bad"), "S")


def test_the_next_block_is_fetched_while_this_one_is_computed(bucket: Bucket, values) -> None:
    """A block read from a bucket starts the next block's read (one request each, never twice)."""
    from daskbatch.io.zarr_store import BlockReader

    url = bucket.url("ahead.zarr")
    _write_zarr(url, values, 3, storage_options=bucket.storage_options)
    x = zarr.open_group(url, mode="r", storage_options=bucket.storage_options)["X"]
    reader = BlockReader(x)
    assert (
        reader.read_ahead
        and not BlockReader(
            zarr.create_array(zarr.storage.MemoryStore(), shape=(2,), dtype="f8")
        ).read_ahead
    )
    with _server_requests() as seen:
        blocks = [
            reader[slice(i * CHUNK, (i + 1) * CHUNK), slice(0, FEATURES)] for i in range(N_BLOCKS)
        ]
        first = reader[
            slice(0, CHUNK), slice(0, FEATURES)
        ]  # a second pass: read again, and ahead again
        time.sleep(0.5)  # the read-ahead of the second pass's block 1 lands
    for i, block in enumerate(blocks):
        np.testing.assert_array_equal(block, values[0][i * CHUNK : (i + 1) * CHUNK])
    np.testing.assert_array_equal(first, values[0][:CHUNK])
    chunks = [r for r in seen if r.startswith("GET") and re.search(r"/ahead\.zarr/X/c/\d+/0$", r)]
    # (zarr opened here, not by daskbatch's open path, asks a HEAD first too.) Every chunk once in the first pass (block i + 1 came from the read-ahead started by block i), then
    # chunk 0 read again and chunk 1 fetched ahead of the second pass.
    expected = [f"GET /{bucket.name}/ahead.zarr/X/c/{i}/0" for i in range(N_BLOCKS)]
    assert sorted(chunks) == sorted([*expected, expected[0], expected[1]]), chunks
    assert set(reader._ahead) == {(CHUNK, 2 * CHUNK)}  # fetched, waiting for its task


def test_the_read_ahead_follows_tasks_that_run_last_block_first(bucket: Bucket, values) -> None:
    """dask may run a pass's chunk tasks last block first: the read-ahead then fetches the block before."""
    from daskbatch.io.zarr_store import BlockReader

    url = bucket.url("backward.zarr")
    _write_zarr(url, values, 3, storage_options=bucket.storage_options)
    x = zarr.open_group(url, mode="r", storage_options=bucket.storage_options)["X"]
    reader = BlockReader(x)
    reader.as_dask(CHUNK, "backward")  # the blocks the tasks read: one storage chunk each
    ahead, read = [], reader._read

    def counted(selection):  # noqa: ANN001, ANN202 - which blocks the read-ahead's threads read
        if threading.current_thread().name.startswith("daskbatch-read-ahead"):
            ahead.append(selection[0].start // CHUNK)
        return read(selection)

    reader._read = counted
    with _server_requests() as seen:
        blocks = {i: reader[slice(i * CHUNK, (i + 1) * CHUNK), slice(0, FEATURES)] for i in reversed(range(N_BLOCKS))}
    for i, block in blocks.items():
        np.testing.assert_array_equal(block, values[0][i * CHUNK : (i + 1) * CHUNK])
    chunks = [r for r in seen if r.startswith("GET") and re.search(r"/backward\.zarr/X/c/\d+/0$", r)]
    assert sorted(chunks) == sorted(f"GET /{bucket.name}/backward.zarr/X/c/{i}/0" for i in range(N_BLOCKS)), chunks
    # The last block is read by its task; the next one says the tasks go backward, and from then on each
    # block was fetched by the read-ahead its successor started (on main: none, it looked past the end).
    assert sorted(ahead) == list(range(N_BLOCKS - 2)) and not reader._ahead


def test_the_read_ahead_follows_dask_task_order(bucket: Bucket, values, monkeypatch: pytest.MonkeyPatch) -> None:
    """A local scheduler says in which order its tasks read the blocks: each block but the first is fetched ahead."""
    import dask

    from daskbatch.io.zarr_store import BlockReader

    url = bucket.url("order.zarr")
    _write_zarr(url, values, 3, storage_options=bucket.storage_options)
    blocks, read = {}, BlockReader._read  # block -> read by a task (False) or the read-ahead (True)

    def counted(self: BlockReader, selection: object) -> np.ndarray:
        if self.ndim == 2:
            blocks.setdefault(selection[0].start // CHUNK, []).append(
                threading.current_thread().name.startswith("daskbatch-read-ahead"))
        return read(self, selection)

    monkeypatch.setattr(BlockReader, "_read", counted)
    ds = db.open_dataset(url, chunks=CHUNK, storage_options=bucket.storage_options)
    with dask.config.set(scheduler="synchronous"), _server_requests() as seen:  # one task at a time, in dask's order
        remote = db.describe(ds, stats="moments")
    np.testing.assert_allclose(remote.mean, values[0].mean(axis=0), rtol=1e-12)
    # dask runs the tree reduction's tasks out of row order: on main 4 of the 6 blocks were read by their tasks.
    assert sorted(blocks) == list(range(N_BLOCKS)) and all(len(v) == 1 for v in blocks.values()), blocks
    assert sum(not v[0] for v in blocks.values()) == 1, blocks  # only the first block read by its task
    chunks = [r for r in seen if re.search(r"/order\.zarr/X/c/\d+/0$", r)]
    assert sorted(chunks) == [f"GET /{bucket.name}/order.zarr/X/c/{i}/0" for i in range(N_BLOCKS)], chunks


def _obstore_reader(bucket: Bucket, where: str, **options: object):  # noqa: ANN202 - a BlockReader
    """The BlockReader of X at ``where`` in the bucket, opened with the bucket's options and ``options``."""
    from daskbatch.io.zarr_store import BlockReader

    group = zarr.open_group(
        bucket.url(where), mode="r", storage_options={**bucket.storage_options, **options}
    )
    return BlockReader(group["X"])


def test_a_checksummed_store_is_read_through_obstore_and_equals_local(
    bucket: Bucket, tmp_path: Path
) -> None:
    """obstore's client costs a third less CPU per byte than s3fs; zarr's CRC-32C checks every chunk it reads."""
    pytest.importorskip("obstore", reason="obstore is the [s3] extra's reader")
    import pickle

    url, local = bucket.url("crc.zarr"), tmp_path / "crc.zarr"
    for where in (url, local):
        db.synth(ROWS, FEATURES, classes=3, chunk_rows=CHUNK, seed=4, path=where)
    reader = _obstore_reader(bucket, "crc.zarr")
    assert isinstance(reader.twin.store, zarr.storage.ObjectStore)
    ds = db.open_dataset(url, storage_options=bucket.storage_options)
    with _server_log() as log:
        remote = db.describe(ds, stats=STATS)
    chunks = [(r, status) for r, status in zip(log.seen, log.statuses, strict=True)
              if re.search(r"/crc\.zarr/X/c/\d+/0$", r)]
    # Each chunk read whole once; the rows' token takes its CRC-32C trailer from those bytes (no range GET: 206).
    assert sorted(chunks) == [(f"GET /{bucket.name}/crc.zarr/X/c/{i}/0", 200) for i in range(N_BLOCKS)]
    near = db.describe(local, stats=STATS)
    assert_same_statistics(remote, near)
    assert remote.provenance["input_tokens"] == near.provenance["input_tokens"]
    # A copy in another process (a distributed worker) opens its own client and reads the same values.
    copy = pickle.loads(pickle.dumps(reader))
    assert isinstance(copy.twin.store, zarr.storage.ObjectStore)
    np.testing.assert_array_equal(copy[slice(0, CHUNK), slice(0, FEATURES)], reader.arr[:CHUNK])


@pytest.mark.parametrize(
    "case", ["no checksum codec", "an option obstore does not take", "credentials of a profile"]
)
def test_reads_stay_on_s3fs_where_obstore_would_change_something(
    bucket: Bucket, values, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """No chunk CRC (botocore checks S3's response checksum, obstore not), or options only s3fs understands."""
    pytest.importorskip("obstore", reason="obstore is the [s3] extra's reader")
    options: dict[str, object] = {}
    if case == "no checksum codec":
        _write_zarr(bucket.url("s.zarr"), values, 3, storage_options=bucket.storage_options)
    else:
        db.synth(ROWS, FEATURES, classes=3, chunk_rows=CHUNK, seed=4, path=bucket.url("s.zarr"))
    if case == "an option obstore does not take":
        options = {"config_kwargs": {"max_pool_connections": 4}}
    if case == "credentials of a profile":  # botocore reads them from ~/.aws; obstore does not
        credentials = tmp_path / "credentials"
        credentials.write_text(
            "[someone]\naws_access_key_id = testing\naws_secret_access_key = testing\n"
        )
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
        monkeypatch.setenv("AWS_PROFILE", "someone")
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            monkeypatch.delenv(name)
        options = {"key": None, "secret": None}
    reader = _obstore_reader(bucket, "s.zarr", **options)
    assert reader.twin is None
    np.testing.assert_array_equal(reader[slice(0, CHUNK), slice(0, FEATURES)], reader.arr[:CHUNK])


def test_the_chunk_checksums_are_read_while_the_pass_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows' token reads a trailer per chunk (from S3 a request each): beside the pass, not all before it."""
    import threading

    from daskbatch.engine.pipeline import input_token
    from daskbatch.io import chunk_grid
    from daskbatch.io.zarr_store import BlockReader

    store = tmp_path / "crc.zarr"
    # synth's chunks end with a CRC-32C
    db.synth(ROWS, FEATURES, classes=3, chunk_rows=CHUNK, seed=4, path=store)
    ds = db.open_dataset(store)
    expected = input_token(ds)
    reading, read_checksums, during = threading.Event(), chunk_grid.chunk_checksums, []

    def block(self: BlockReader, selection: object) -> np.ndarray:
        reading.set()  # the pass has started reading blocks
        return original(self, selection)

    def checksums_once_the_pass_reads(arr: zarr.Array, fetched_since: int | None = None) -> object:
        # Read before the pass (as main did), nothing is read yet and the wait times out.
        during.append(reading.wait(timeout=15))
        return read_checksums(arr, fetched_since)

    original = BlockReader.__getitem__
    monkeypatch.setattr(BlockReader, "__getitem__", block)
    monkeypatch.setattr(chunk_grid, "chunk_checksums", checksums_once_the_pass_reads)
    summary = db.describe(ds, stats="moments")
    assert during == [True]
    # The same token that merge and update compare.
    assert summary.provenance["input_tokens"] == [expected]
    np.testing.assert_array_equal(summary.mean, db.describe(store, stats="moments").mean)


def test_the_chunk_trailers_are_read_once_the_first_block_is(
    bucket: Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read by s3fs, the rows' token reads each chunk's CRC-32C trailer (a range GET, 206) after the first block.

    Sent together, the trailer requests reach the server with the first block's and are answered first.
    """
    from daskbatch.io import chunk_grid, zarr_store

    for module in (chunk_grid, zarr_store):  # s3fs's reads, as without the [s3] extra's obstore
        monkeypatch.setattr(module, "object_store_twin", lambda arr: None)
    url, local = bucket.url("trail.zarr"), tmp_path / "trail.zarr"
    for where in (url, local):
        db.synth(ROWS, FEATURES, classes=3, chunk_rows=CHUNK, seed=4, path=where)
    expected = db.describe(db.open_dataset(local, chunks=CHUNK), stats="moments")  # the kernels compiled first
    ds = db.open_dataset(url, chunks=CHUNK, storage_options=bucket.storage_options)
    with _server_log() as log:
        summary = db.describe(ds, stats="moments")
    chunk_reads = [status for request, status in zip(log.seen, log.statuses, strict=True)
                   if re.search(r"^GET /[^/]+/trail\.zarr/X/c/\d+/0$", request)]
    # Every chunk read whole once (200) and its trailer once (206: a colored log line, uncounted before).
    assert sorted(chunk_reads) == [200] * N_BLOCKS + [206] * N_BLOCKS, chunk_reads
    assert chunk_reads[0] == 200, chunk_reads  # on main the 6 trailer reads came first
    assert summary.provenance["input_tokens"] == expected.provenance["input_tokens"]
    np.testing.assert_array_equal(summary.mean, expected.mean)


def test_the_planner_counts_the_blocks_fetched_ahead_from_a_bucket(
    bucket: Bucket, tmp_path: Path
) -> None:
    """Each worker process holds READ_AHEAD_BLOCKS blocks read ahead from an object store; its tasks share them."""
    from daskbatch.io.zarr_store import READ_AHEAD_BLOCKS
    from daskbatch.planning.plan import READ_BUFFERS

    url, local = bucket.url("plan.zarr"), tmp_path / "plan.zarr"
    for where in (url, local):
        db.synth(ROWS, FEATURES, classes=3, chunk_rows=CHUNK, seed=4, path=where)
    remote = db.open_dataset(url, storage_options=bucket.storage_options)
    for threads in (1, 2):
        resources = db.Resources(2**33, threads_per_worker=threads)
        near = db.plan(db.open_dataset(local), stats=("moments",), resources=resources)
        far = db.plan(remote, stats=("moments",), resources=resources)
        assert far.chunk_rows == near.chunk_rows  # 8 GiB are plenty either way
        block = far.chunk_rows * FEATURES * far.itemsize
        share = (READ_AHEAD_BLOCKS * (1 + READ_BUFFERS) + 1) * block / threads  # + a label's blocks read together
        assert far.chunk_task_bytes - near.chunk_task_bytes == share
        assert "read-ahead" in far.explain() and "read-ahead" not in near.explain()


def _listings(seen: list[str], prefix: str) -> list[str]:
    """The listing requests of ``prefix`` among the server's requests."""
    return [r for r in seen if "list-type=2" in r and re.search(f"prefix={prefix}(/|%2F)&", r)]


def test_the_samples_are_listed_once_per_open_and_describe(bucket: Bucket, tmp_path: Path) -> None:
    """The rows' token reads the chunks the open listed: X is listed once, not again for the token (a round trip)."""
    url = bucket.url("once.zarr")
    db.synth(ROWS, FEATURES, classes=3, chunk_rows=CHUNK, seed=4, path=url)  # chunks end with a CRC-32C
    with _server_requests() as seen:
        ds = db.open_dataset(url, storage_options=bucket.storage_options)
        summary = db.describe(ds, stats="moments")
    assert len(_listings(seen, "once.zarr/X")) == 1, seen
    # The same token as a fresh listing gives, and a chunk deleted since the open still changes it.
    from daskbatch.engine.pipeline import input_token

    fresh = db.open_dataset(url, storage_options=bucket.storage_options)
    assert summary.provenance["input_tokens"] == [input_token(fresh)]
    bucket.client().delete_object(Bucket=bucket.name, Key="once.zarr/X/c/1/0")
    assert input_token(ds) != summary.provenance["input_tokens"][0]


def test_the_label_scan_reads_the_label_blocks_together(
    bucket: Bucket, values, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From a bucket a label's blocks are read together (zarr fetches their chunks concurrently), not a round trip each."""
    from daskbatch.io.zarr_store import BlockReader

    url, local = bucket.url("scan.zarr"), tmp_path / "scan.zarr"
    for where, options in ((url, {"storage_options": bucket.storage_options}), (str(local), {})):
        group = zarr.open_group(where, mode="w", zarr_format=3, **options)
        group.create_array("X", data=values[0], chunks=(CHUNK, FEATURES))
        group.create_array("y", data=values[1].astype(np.int16), chunks=(CHUNK,))  # the label: 1/16 of X's bytes
    label_reads, read = [], BlockReader._read

    def counted(self: BlockReader, selection: object) -> np.ndarray:
        if self.ndim == 1:
            label_reads.append(selection[0].indices(ROWS)[:2])
        return read(self, selection)

    monkeypatch.setattr(BlockReader, "_read", counted)
    ds = db.open_dataset(url, label="y", chunks=CHUNK, storage_options=bucket.storage_options)
    with _server_requests() as seen:
        remote = db.describe(ds, stats=("moments", "mi", "class_moments"), bins=16, range=(-10, 16))
    # The class scan and each pass read the whole label (one X block's bytes) at once: N_BLOCKS reads each on main.
    assert label_reads and set(label_reads) == {(0, ROWS)}, label_reads
    scan_chunks = [r for r in seen if re.search(r"/scan\.zarr/y/c/\d+$", r)]
    assert len(scan_chunks) == len(label_reads) * N_BLOCKS
    assert_same_statistics(remote, db.describe(db.open_dataset(local, label="y", chunks=CHUNK),
                                               stats=("moments", "mi", "class_moments"), bins=16, range=(-10, 16)))
    # A damaged label chunk read in such a span is still refused by its name, as from local disk.
    _damage(bucket, local, "scan.zarr/y/c/4", "corrupt")
    far = _refusal(url, label="y", chunks=CHUNK, storage_options=bucket.storage_options)
    assert "y/c/4" in far
    assert far.replace(url, "S") == _refusal(local, label="y", chunks=CHUNK).replace(str(local), "S")


def _job_file(folder: Path, store: Path, outputs: dict[str, str | None]) -> Path:
    """A job file in ``folder`` reading ``store`` on dask's threads, with these ``outputs`` keys."""
    lines = "".join(
        f"      {key}: {'null' if value is None else value}\n" for key, value in outputs.items()
    )
    job = folder / "job.yaml"
    job.write_text(
        "daskbatch:\n  job:\n    input:\n"
        f"      store: {store}\n"
        "    cluster:\n      kind: threads\n    outputs:\n" + lines
    )
    return job


def _run_job(job: Path, cwd: Path, tmp: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``python -m daskbatch run JOB`` in ``cwd``, with ``tmp`` as its temporary directory."""
    return subprocess.run(
        [sys.executable, "-m", "daskbatch", "run", str(job)],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp), **env},
        capture_output=True,
        text=True,
        timeout=240,
    )


def _local_files(*folders: Path) -> list[str]:
    """Every file and folder below ``folders`` (what a run left on the local disk)."""
    return sorted(str(p) for folder in folders for p in folder.rglob("*"))


@pytest.mark.slow  # CLI subprocesses
@pytest.mark.parametrize("selection", ["selection.csv", "selection.json", None])
def test_job_writes_every_output_to_the_bucket_and_nothing_on_the_local_disk(
    bucket: Bucket, tmp_path: Path, selection: str | None
) -> None:
    """outputs.dir a URL: summary, selection and report land in the bucket; cwd and TMPDIR stay empty."""
    store = tmp_path / "in.zarr"
    db.synth(ROWS, FEATURES, classes=3, chunk_rows=CHUNK, seed=7, path=store)
    cwd, tmp = tmp_path / "cwd", tmp_path / "tmp"
    cwd.mkdir()
    tmp.mkdir()
    outputs = {"dir": bucket.url("run"), "selection": selection, "transform": None}
    job = _job_file(tmp_path, store, outputs)
    # With a selection, a second run replaces its own outputs, as on a local disk (each kind of file
    # once: without one, the summary and the report are those of the other cases).
    for _ in range(1 if selection is None else 2):
        done = _run_job(job, cwd, tmp, bucket.env)
        assert done.returncode == 0, done.stderr
        assert _local_files(cwd, tmp) == []
    assert bucket.keys("run/summary.zarr/zarr.json") == ["run/summary.zarr/zarr.json"]
    assert_same_statistics(
        db.load_summary(bucket.url("run/summary.zarr")),
        db.describe(store, stats=["moments", "class_moments"] if selection else ["moments"]),
    )
    report = json.loads(
        bucket.client().get_object(Bucket=bucket.name, Key="run/report.json")["Body"].read()
    )
    assert (report["daskbatch_output"], report["status"]) == ("job_report", "ok")
    assert report["outputs"]["report"] == bucket.url("run/report.json")
    if selection is None:  # summary and report only
        assert sorted({key.split("/")[1] for key in bucket.keys("run/")}) == ["report.json", "summary.zarr"]
        return
    assert report["outputs"]["selection"] == bucket.url(f"run/{selection}")
    picked = db.load_selection(bucket.url(f"run/{selection}"))
    assert list(picked.feature_names) == [f"f{i}" for i in range(FEATURES)]


@pytest.mark.slow  # CLI subprocesses
def test_job_refuses_an_object_in_the_bucket_it_did_not_write_before_any_compute(
    bucket: Bucket, tmp_path: Path
) -> None:
    """Each output key on someone's object: exit 2 in one line naming it; nothing replaced or written."""
    store = tmp_path / "in.zarr"
    db.synth(ROWS, FEATURES, classes=3, chunk_rows=CHUNK, seed=7, path=store)
    cwd, tmp = tmp_path / "cwd", tmp_path / "tmp"
    cwd.mkdir()
    tmp.mkdir()
    theirs = b'{"not": "daskbatch"}\n'
    client = bucket.client()
    for name in ("summary.zarr", "selection.csv", "report.json"):
        client.put_object(Bucket=bucket.name, Key=f"run/{name}", Body=theirs)
        job = _job_file(tmp_path, store, {"dir": bucket.url("run"), "transform": None})
        done = _run_job(job, cwd, tmp, bucket.env)
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and bucket.url(f"run/{name}") in done.stderr, done.stderr
        assert "already exists" in done.stderr
        assert bucket.keys("run/") == [f"run/{name}"]  # nothing written, not even the report
        assert client.get_object(Bucket=bucket.name, Key=f"run/{name}")["Body"].read() == theirs
        client.delete_object(Bucket=bucket.name, Key=f"run/{name}")
    assert _local_files(cwd, tmp) == []


@pytest.mark.slow  # a CLI subprocess
def test_job_transform_to_the_bucket_is_refused_before_any_compute(
    bucket: Bucket, tmp_path: Path
) -> None:
    """The transform store resumes from a local log: a URL is refused with the outputs, not after describe."""
    store = tmp_path / "in.zarr"
    db.synth(ROWS, FEATURES, classes=3, chunk_rows=CHUNK, seed=7, path=store)
    cwd, tmp = tmp_path / "cwd", tmp_path / "tmp"
    cwd.mkdir()
    tmp.mkdir()
    job = _job_file(tmp_path, store, {"dir": bucket.url("run")})
    done = _run_job(job, cwd, tmp, bucket.env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"error: outputs.transform {bucket.url('run/transformed.zarr')}: ")
    assert "describe:" not in done.stderr and bucket.keys("") == []
    assert _local_files(cwd, tmp) == []


def test_a_file_output_in_the_bucket_is_replaced_by_one_put_never_deleted_first(
    bucket: Bucket, values, tmp_path: Path
) -> None:
    """A PUT replaces an object whole: deleting it first would leave a moment with no selection at all."""
    _write_zarr(str(tmp_path / "in.zarr"), values, 3)
    summary = db.describe(db.open_dataset(tmp_path / "in.zarr", label="y"), stats=["class_moments"])
    selection = db.select(summary, score="f", param=2)
    url = bucket.url("out/selection.json")
    assert selection.save(url) == url
    with _server_requests() as seen:
        assert selection.save(url) == url  # its own earlier selection: replaced
    writes = [r for r in seen if r.split(" ")[0] in ("PUT", "POST", "DELETE")]
    assert writes == [f"PUT /{bucket.name}/out/selection.json"], seen
    again = db.load_selection(url)
    assert list(again.selected_names) == list(selection.selected_names)


def test_the_rows_token_takes_the_trailers_of_the_chunks_the_pass_fetched(bucket: Bucket, tmp_path: Path) -> None:
    """Read through obstore, each chunk is one GET a pass: its CRC-32C trailer, for the token, costs no request.

    On main the token sent a range GET per chunk (a second request for each, and the server's time for it).
    """
    pytest.importorskip("obstore", reason="obstore is the [s3] extra's reader")
    url, local = bucket.url("token.zarr"), tmp_path / "token.zarr"
    for where in (url, local):
        db.synth(ROWS, FEATURES, classes=3, chunk_rows=CHUNK, seed=4, path=where)
    near = db.describe(db.open_dataset(local, chunks=CHUNK), stats="moments")
    ds = db.open_dataset(url, chunks=CHUNK, storage_options=bucket.storage_options)
    with _server_log() as log:
        far = db.describe(ds, stats="moments")
    x_reads = [(request, status) for request, status in zip(log.seen, log.statuses, strict=True)
               if re.search(r"^GET /[^/]+/token\.zarr/X/", request)]
    assert sorted(x_reads) == [(f"GET /{bucket.name}/token.zarr/X/c/{i}/0", 200) for i in range(N_BLOCKS)]
    assert far.provenance["input_tokens"] == near.provenance["input_tokens"]  # the same bits: merge compares them
    np.testing.assert_array_equal(far.mean, near.mean)


def test_trailers_kept_from_an_earlier_pass_never_stand_for_the_store_rewritten_since(
    bucket: Bucket, tmp_path: Path
) -> None:
    """A chunk read before the token's stamp is read again for it: the object may have been rewritten since."""
    pytest.importorskip("obstore", reason="obstore is the [s3] extra's reader")
    from daskbatch.io.chunk_grid import chunk_checksums
    from daskbatch.io.object_store import read_stamp

    url, local = bucket.url("again.zarr"), tmp_path / "again.zarr"
    db.synth(ROWS, FEATURES, classes=3, chunk_rows=CHUNK, seed=4, path=url)
    ds = db.open_dataset(url, chunks=CHUNK, storage_options=bucket.storage_options)
    db.describe(ds, stats="moments")  # keeps the trailers of seed 4's chunks
    db.synth(ROWS, FEATURES, classes=3, chunk_rows=CHUNK, seed=5, path=local)
    for i in range(N_BLOCKS):  # other values in the same objects
        body = (local / "X" / "c" / str(i) / "0").read_bytes()
        bucket.client().put_object(Bucket=bucket.name, Key=f"again.zarr/X/c/{i}/0", Body=body)
    with _server_log() as log:
        trailers = chunk_checksums(ds.zarr_x, read_stamp())
    assert log.statuses == [206] * N_BLOCKS  # a range GET per chunk (the listing is the open's)
    assert trailers == chunk_checksums(zarr.open_array(local / "X", mode="r"))
    fresh = db.describe(db.open_dataset(url, chunks=CHUNK, storage_options=bucket.storage_options), stats="moments")
    assert fresh.provenance["input_tokens"] == db.describe(local, stats="moments").provenance["input_tokens"]
