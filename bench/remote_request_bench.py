"""CPU per object request: the remote store's data path against botocore's client.

    .ci/object-store/up.sh /tmp/os && python bench/remote_request_bench.py --env /tmp/os/s3.env

A pull of a lock's blobs is thousands of small GETs, so the CPU each costs the client decides
its speed. This puts ``--objects`` (500) objects of ``--size`` (16 KiB) under a prefix of its
own, then GETs (reading every body) and HEADs each of them one after another — no concurrency,
so CPU per request is the process's CPU time over the requests — through:

- ``fetchproxy``: ``BucketClient.get``/``head``, the product's data path (``remote_http`` on
  ``http.client``, signed by ``sigv4``), its configuration resolved as the product does
  (``remote_config``: here from the environment alone);
- ``botocore client``: ``get_object``/``head_object`` of the S3 client ``remote_config``
  makes (the same settings: path-style, no automatic checksums, no parameter validation).

Rounds alternate the two; each cell is the median over ``--rounds``. The objects are deleted
at the end. Markdown to stdout. Results: docs/remote-store.md.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fetchproxy.store.remote_client import BucketClient
from fetchproxy.store.remote_config import ClientOptions, make_client, new_session


def environment(env_file: Path) -> str:
    """Point the AWS variables at the writer of ``up.sh``'s store; the bucket."""
    settings = dict(line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line)
    os.environ.pop("AWS_CA_BUNDLE", None)
    os.environ.update(
        {
            "AWS_ENDPOINT_URL": settings["FETCHPROXY_TEST_S3_ENDPOINT"],
            "AWS_REGION": settings["FETCHPROXY_TEST_S3_REGION"],
            "AWS_ACCESS_KEY_ID": settings["FETCHPROXY_TEST_S3_WRITER_KEY"],
            "AWS_SECRET_ACCESS_KEY": settings["FETCHPROXY_TEST_S3_WRITER_SECRET"],
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": "/dev/null",
            "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
        }
    )
    return settings["FETCHPROXY_TEST_S3_BUCKET"]


def cpu_per_request(keys: list[str], request: Callable[[str], object]) -> tuple[float, float]:
    """Milliseconds of CPU and of wall time per request, over ``keys`` in turn."""
    cpu, wall = time.process_time(), time.perf_counter()
    for key in keys:
        request(key)
    return (
        (time.process_time() - cpu) * 1000 / len(keys),
        (time.perf_counter() - wall) * 1000 / len(keys),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", type=Path, default=os.environ.get("FETCHPROXY_TEST_S3_ENV"))
    parser.add_argument("--objects", type=int, default=500)
    parser.add_argument("--size", type=int, default=16 << 10)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.env is None or not args.env.is_file():
        raise SystemExit("give --env DIR/s3.env (from .ci/object-store/up.sh DIR)")
    bucket = environment(args.env)
    ours = BucketClient(bucket)
    options = ClientOptions(max_connections=4, connect_timeout=10, read_timeout=60, max_attempts=3)
    theirs = make_client(new_session(), region=os.environ["AWS_REGION"], options=options)
    prefix = f"request-bench-{uuid.uuid4().hex[:8]}"
    keys = [f"{prefix}/blake3/{i:064x}" for i in range(args.objects)]
    for key in keys:
        body = os.urandom(args.size)
        ours.put_new(
            key, body, size=len(body), md5=hashlib.md5(body, usedforsecurity=False).digest()
        )

    def our_get(key: str) -> object:
        return sum(len(c) for c in ours.get(key).chunks(1 << 20, where=key, endpoint=""))

    def their_get(key: str) -> object:
        return len(theirs.get_object(Bucket=bucket, Key=key)["Body"].read())

    systems: dict[str, dict[str, Callable[[str], object]]] = {
        "fetchproxy (`remote_http` + `sigv4`)": {"GET": our_get, "HEAD": ours.head},
        "botocore client": {
            "GET": their_get,
            "HEAD": lambda key: theirs.head_object(Bucket=bucket, Key=key),
        },
    }
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    try:
        for requests in systems.values():  # warm: connections, first-call caches
            for request in requests.values():
                cpu_per_request(keys[:20], request)
        for number in range(args.rounds):
            order = list(systems.items())[:: 1 if number % 2 == 0 else -1]
            for name, requests in order:
                for method, request in requests.items():
                    results.setdefault((name, method), []).append(cpu_per_request(keys, request))
    finally:
        for start in range(0, len(keys), 1000):
            ours.delete(keys[start : start + 1000])
    print(f"{args.objects} objects of {args.size} B, sequential, median of {args.rounds} rounds\n")
    print("| client | request | CPU per request | wall per request | CPU vs fetchproxy |")
    print("|---|---|---:|---:|---:|")
    base = {
        m: statistics.median(c for c, _ in results[(next(iter(systems)), m)])
        for m in ("GET", "HEAD")
    }
    for (name, method), runs in results.items():
        cpu = statistics.median(c for c, _ in runs)
        wall = statistics.median(w for _, w in runs)
        print(f"| {name} | {method} | {cpu:.2f} ms | {wall:.2f} ms | {cpu / base[method]:.2f} |")


if __name__ == "__main__":
    main()
