"""The S3 clients the remote store could be built on, each doing the store's whole job.

Every candidate pushes blobs from a ``DiskStore`` (create-only where the client can say so) and
pulls objects into another ``DiskStore`` through its verifying ``BlobWriter`` (hash while
writing, fsync, publish on match), with the same concurrency. What differs is the engine:

- ``fetchproxy``: the product itself (``fetchproxy.store.remote``): a thread pool over its
  own data path (``http.client``, its own SigV4 signer, the configuration from the environment
  alone), If-None-Match + Content-MD5 on push, a streamed GET per blob on pull.
- ``obstore``: the Rust ``object_store`` crate through obstore, asyncio with a semaphore.
  Create-only puts are single-part and, as obstore documents, held whole in memory; it has no
  Content-MD5 (only x-amz-checksum-*, which RGW 16 ignores).
- ``aiobotocore``: botocore's client on aiohttp, asyncio with a semaphore, the same requests
  as ``fetchproxy``.
- ``s3transfer``: boto3's own TransferManager and thread pool (multipart above 8 MiB, ranged
  parallel GETs); it cannot write create-only, so its push overwrites, and its pull goes
  through a temp file per object (into a non-seekable writer it hangs).

Each runs in a process of its own (``run_candidate``), started by the bench, which measures its
wall time and peak RSS.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fetchproxy.digest import Digest, hex_of
from fetchproxy.store import DiskStore

CHUNK = 1 << 20


def _env(name: str) -> str:
    return os.environ[name]


def _key(prefix: str, digest: Digest) -> str:
    return f"{prefix}/blake3/{hex_of(digest)}"


def _md5_b64(path: Path) -> str:
    md5 = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as file:
        while chunk := file.read(CHUNK):
            md5.update(chunk)
    return base64.b64encode(md5.digest()).decode()


# ---------------------------------------------------------------------------------- fetchproxy


def fetchproxy_push(src: DiskStore, digests: list[Digest], prefix: str, workers: int) -> None:
    from fetchproxy.store.remote import RemoteStore, TransferSettings
    from fetchproxy.store.remote_client import ClientSettings
    from fetchproxy.store.remote_url import parse_remote_url

    settings = TransferSettings(concurrency=workers, client=ClientSettings(max_connections=workers))
    remote = RemoteStore(
        parse_remote_url(f"s3://{_env('BENCH_BUCKET')}/{prefix}"), settings=settings
    )
    remote.push(digests, src)


def fetchproxy_pull(dst: DiskStore, digests: list[Digest], prefix: str, workers: int) -> None:
    from fetchproxy.store.remote import RemoteStore, TransferSettings
    from fetchproxy.store.remote_client import ClientSettings
    from fetchproxy.store.remote_url import parse_remote_url

    settings = TransferSettings(concurrency=workers, client=ClientSettings(max_connections=workers))
    remote = RemoteStore(
        parse_remote_url(f"s3://{_env('BENCH_BUCKET')}/{prefix}"), settings=settings
    )
    remote.pull(digests, dst)


# ---------------------------------------------------------------------------------- obstore


def _obstore() -> Any:  # noqa: ANN401 -- obstore's store type, imported in the worker only
    from obstore.store import S3Store

    return S3Store(
        _env("BENCH_BUCKET"),
        endpoint=_env("AWS_ENDPOINT_URL"),
        region=_env("AWS_REGION"),
        access_key_id=_env("AWS_ACCESS_KEY_ID"),
        secret_access_key=_env("AWS_SECRET_ACCESS_KEY"),
        virtual_hosted_style_request=False,
        client_options={"allow_http": True, "pool_max_idle_per_host": "64"},
    )


def obstore_push(src: DiskStore, digests: list[Digest], prefix: str, workers: int) -> None:
    import obstore
    import obstore.exceptions

    store = _obstore()

    async def one(digest: Digest, gate: asyncio.Semaphore) -> None:
        async with gate:
            with contextlib.suppress(obstore.exceptions.AlreadyExistsError):
                await obstore.put_async(
                    store, _key(prefix, digest), src.blob_path(digest), mode="create"
                )

    async def main() -> None:
        gate = asyncio.Semaphore(workers)
        await asyncio.gather(*(one(digest, gate) for digest in digests))

    asyncio.run(main())


def obstore_pull(dst: DiskStore, digests: list[Digest], prefix: str, workers: int) -> None:
    import obstore

    store = _obstore()

    async def one(digest: Digest, gate: asyncio.Semaphore) -> None:
        async with gate:
            result = await obstore.get_async(store, _key(prefix, digest))
            with dst.writer() as writer:
                async for chunk in result.stream(min_chunk_size=CHUNK):
                    writer.update(bytes(chunk))
                await writer.commit_async(digest)

    async def main() -> None:
        gate = asyncio.Semaphore(workers)
        await asyncio.gather(*(one(digest, gate) for digest in digests))

    asyncio.run(main())


# ---------------------------------------------------------------------------------- aiobotocore


def _aio_config(workers: int) -> Any:  # noqa: ANN401 -- botocore's Config
    from botocore.config import Config

    return Config(
        s3={"addressing_style": "path"},
        max_pool_connections=workers,
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )


def aiobotocore_push(src: DiskStore, digests: list[Digest], prefix: str, workers: int) -> None:
    from aiobotocore.session import get_session
    from botocore.exceptions import ClientError

    async def one(client: Any, digest: Digest, gate: asyncio.Semaphore) -> None:  # noqa: ANN401
        async with gate:
            path = src.blob_path(digest)
            md5 = await asyncio.to_thread(_md5_b64, path)
            with path.open("rb") as body:
                try:
                    await client.put_object(
                        Bucket=_env("BENCH_BUCKET"),
                        Key=_key(prefix, digest),
                        Body=body,
                        ContentMD5=md5,
                        IfNoneMatch="*",
                    )
                except ClientError as exc:
                    if exc.response["ResponseMetadata"]["HTTPStatusCode"] != 412:
                        raise

    async def main() -> None:
        gate = asyncio.Semaphore(workers)
        async with get_session().create_client("s3", config=_aio_config(workers)) as client:
            await asyncio.gather(*(one(client, digest, gate) for digest in digests))

    asyncio.run(main())


def aiobotocore_pull(dst: DiskStore, digests: list[Digest], prefix: str, workers: int) -> None:
    from aiobotocore.session import get_session

    async def one(client: Any, digest: Digest, gate: asyncio.Semaphore) -> None:  # noqa: ANN401
        async with gate:
            response = await client.get_object(
                Bucket=_env("BENCH_BUCKET"), Key=_key(prefix, digest)
            )
            with dst.writer() as writer:
                async with response["Body"] as body:
                    while chunk := await body.read(CHUNK):
                        writer.update(chunk)
                await writer.commit_async(digest)

    async def main() -> None:
        gate = asyncio.Semaphore(workers)
        async with get_session().create_client("s3", config=_aio_config(workers)) as client:
            await asyncio.gather(*(one(client, digest, gate) for digest in digests))

    asyncio.run(main())


# ---------------------------------------------------------------------------------- s3transfer


def _transfer_manager(workers: int) -> Any:  # noqa: ANN401 -- s3transfer's manager
    import boto3
    from boto3.s3.transfer import TransferConfig, create_transfer_manager

    client = boto3.client("s3", config=_aio_config(workers))
    return create_transfer_manager(client, TransferConfig(max_concurrency=workers))


def s3transfer_push(src: DiskStore, digests: list[Digest], prefix: str, workers: int) -> None:
    with _transfer_manager(workers) as manager:
        futures = [
            manager.upload(str(src.blob_path(digest)), _env("BENCH_BUCKET"), _key(prefix, digest))
            for digest in digests
        ]
        for future in futures:
            future.result()


def s3transfer_pull(dst: DiskStore, digests: list[Digest], prefix: str, workers: int) -> None:
    # download_fileobj into a BlobWriter (not seekable) hangs on 64 MiB objects with parallel
    # parts, so each object goes to a temp file first, then through the verifying writer.
    spool = dst.root.parent / f"{dst.root.name}-spool"
    spool.mkdir(parents=True, exist_ok=True)

    def publish(digest: Digest, path: Path) -> None:
        with dst.writer() as writer, path.open("rb") as file:
            while chunk := file.read(CHUNK):
                writer.update(chunk)
            writer.commit(digest)
        path.unlink()

    with _transfer_manager(workers) as manager:
        futures = []
        for digest in digests:
            path = spool / hex_of(digest)
            futures.append(
                (
                    digest,
                    path,
                    manager.download(_env("BENCH_BUCKET"), _key(prefix, digest), str(path)),
                )
            )
        for digest, path, future in futures:
            future.result()
            publish(digest, path)
    spool.rmdir()


# ---------------------------------------------------------------------------------- running

Job = Callable[[DiskStore, list[Digest], str, int], None]
CANDIDATES: dict[str, tuple[Job, Job]] = {
    "fetchproxy": (fetchproxy_push, fetchproxy_pull),
    "obstore": (obstore_push, obstore_pull),
    "aiobotocore": (aiobotocore_push, aiobotocore_pull),
    "s3transfer": (s3transfer_push, s3transfer_pull),
}


def run_candidate(
    name: str, op: str, *, store: Path, digests_file: Path, prefix: str, workers: int
) -> float:
    """Push the blobs listed in ``digests_file`` from ``store`` (op ``push``) or pull them
    into it (``pull``); the seconds the transfer took."""
    push, pull = CANDIDATES[name]
    digests = [Digest(line) for line in digests_file.read_text().split()]
    start = time.perf_counter()
    (push if op == "push" else pull)(DiskStore(store), digests, prefix, workers)
    return time.perf_counter() - start
