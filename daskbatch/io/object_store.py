"""Which client reads an S3 store's chunks: obstore's where it changes nothing but the CPU, else s3fs.

s3fs costs about 0.5 ms of CPU per MB more than obstore (``benchmarks/bench_object_store.py``). obstore is used
only when installed (the ``[s3]`` extra), the user's options and credentials mean the same to it, and every chunk
carries a CRC-32C that zarr checks (obstore does not check S3's checksums); otherwise, or when its first read
fails, the reads stay on s3fs.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import zarr

__all__ = ["object_store_twin", "verifies_chunks"]

#: s3fs options obstore takes as they are (s3fs name -> obstore name); any other keeps s3fs.
_OBSTORE_OPTIONS = {
    "key": "access_key_id",
    "secret": "secret_access_key",
    "token": "session_token",
    "anon": "skip_signature",
    "endpoint_url": "endpoint",
}


def verifies_chunks(arr: zarr.Array) -> bool:
    """Whether every chunk of ``arr`` (also inside shards) ends with a CRC-32C that zarr checks on each read."""
    from zarr.codecs import Crc32cCodec, ShardingCodec  # lazy: zarr

    for codec in getattr(arr.metadata, "codecs", None) or ():
        if isinstance(codec, Crc32cCodec):
            return True
        if isinstance(codec, ShardingCodec):
            return any(isinstance(c, Crc32cCodec) for c in codec.codecs)
    return False


def object_store_twin(arr: zarr.Array) -> zarr.Array | None:
    """``arr``'s metadata on zarr's ``ObjectStore`` over obstore at the same keys; None where reads stay on s3fs."""
    fs: Any = getattr(arr.store, "fs", None)
    protocol = getattr(fs, "protocol", "")
    if "s3" not in (protocol if isinstance(protocol, tuple) else (protocol,)):
        return None
    if not verifies_chunks(arr):
        return None
    # zarr adds "asynchronous"; the user's own options are all the others.
    options = {k: v for k, v in fs.storage_options.items() if k != "asynchronous"}
    client = options.pop("client_kwargs", None) or {}
    if set(options) - set(_OBSTORE_OPTIONS) or set(client) - {"region_name", "endpoint_url"}:
        return None
    config = {_OBSTORE_OPTIONS[k]: v for k, v in options.items() if v is not None}
    env = os.environ.get  # where botocore looks when the options do not say
    config["endpoint"] = (
        client.get("endpoint_url")
        or config.get("endpoint")
        or env("AWS_ENDPOINT_URL_S3")
        or env("AWS_ENDPOINT_URL")
    )
    config["region"] = client.get("region_name") or env("AWS_REGION") or env("AWS_DEFAULT_REGION")
    keyed = "access_key_id" in config or config.get("skip_signature") or env("AWS_ACCESS_KEY_ID")
    # botocore finds a profile's credentials and the bucket's region itself; obstore does not.
    if not keyed or env("AWS_PROFILE") or not config["region"]:
        return None
    bucket, _, prefix = str(getattr(arr.store, "path", "")).strip("/").partition("/")
    probe = f"{arr.store_path.path}/zarr.json".lstrip("/")
    store = _obstore_of(
        bucket, prefix, probe, tuple(sorted((k, v) for k, v in config.items() if v))
    )
    if store is None:
        return None
    from zarr.core.array import AsyncArray  # lazy: the same metadata on another store
    from zarr.storage import StorePath  # lazy: zarr

    path = StorePath(store, arr.store_path.path)
    return zarr.Array(AsyncArray(arr.metadata, path, config=arr._async_array.config))


@functools.cache
def _obstore_of(bucket: str, prefix: str, probe: str, config: tuple[tuple[str, Any], ...]) -> Any:
    """A read-only zarr store over obstore for ``bucket``/``prefix`` once it has read ``probe``; else None."""
    try:
        from obstore.store import S3Store  # lazy and optional: the [s3] extra
    except ImportError:
        return None
    from zarr.core.buffer import default_buffer_prototype  # lazy: zarr
    from zarr.core.sync import sync  # lazy: zarr

    options = dict(config)
    allow_http = str(options.get("endpoint", "")).startswith("http://")
    try:
        s3 = S3Store(
            bucket, prefix=prefix or None, client_options={"allow_http": allow_http}, **options
        )
        store = zarr.storage.ObjectStore(s3, read_only=True)
        # A key s3fs has just read: where obstore cannot (credentials it looks for elsewhere), s3fs reads.
        if sync(store.get(probe, default_buffer_prototype())) is None:
            return None
    except Exception:  # noqa: BLE001 - any failure of the optional client leaves the reads to s3fs
        return None
    return store
