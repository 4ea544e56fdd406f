"""Push and pull a lock's blobs between the local store and an S3 endpoint, against peers.

    .ci/object-store/up.sh /tmp/os && python bench/remote_bench.py --env /tmp/os/s3.env
    python bench/remote_bench.py --env ENV --rounds 5 --only fetchproxy --only "rclone copy"

The blobs are a lock like a real build's: ``--small`` (2,000) x ``--small-size`` (16 KiB) and
``--large`` (4) x ``--large-size`` (64 MiB), random bytes. Systems, each in a process of its own
so that its wall time includes its start-up and its peak RSS is its own (``wait4``):

- the candidate clients of bench/remotebench/candidates.py (``fetchproxy`` is the product's
  ``fetchproxy.store.remote``), pushing from a ``DiskStore`` and pulling into a fresh one
  through its verifying writer;
- the peers of bench/remotebench/peers.py (``rclone copy``, ``s5cmd cp``, ``aws s3 sync``),
  moving the same files between a directory and the bucket.

Every system pushes to a prefix of its own (deleted afterwards) and pulls the same source
prefix, pushed once at the start. Systems are interleaved, in a rotated order each round;
each cell is the median over ``--rounds`` and each ratio compares with ``fetchproxy``'s median
in the same run. Every push is checked (object count) and every pull (each file rehashed).
Then, once: peak RSS for one ``--big`` (256 MiB) blob, to show whether memory grows with blob
size, and the start-up cost of the client (import, session, credentials) in fresh
interpreters. Markdown goes to stdout, progress to stderr. Results: docs/remote-store.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import blake3
from remotebench.candidates import CANDIDATES, run_candidate
from remotebench.peers import Peer, peers

from fetchproxy.digest import Digest, hex_of
from fetchproxy.store import DiskStore

TIME = "/usr/bin/time"  # GNU time (Debian package time), for peak RSS
UNITS = {"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "": 1}


def parse_size(text: str) -> int:
    """``16KiB``, ``64MiB`` → bytes."""
    match = re.fullmatch(r"(\d+)([A-Za-z]*)", text.strip())
    number, unit = (match[1], match[2].lower()) if match else ("", "")
    if not number or unit not in UNITS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size like 16KiB or 64MiB")
    return int(number) * UNITS[unit]


def log(message: str) -> None:
    print(f"[remote_bench] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True, kw_only=True)
class Run:
    """One timed process: wall and CPU (user + system) seconds, peak RSS in MiB, and its own
    transfer time if it reports one."""

    wall: float
    cpu: float
    rss_mib: float
    inner: float | None


def timed(argv: list[str], env: dict[str, str], out_file: Path) -> Run:
    """Run ``argv`` to its end: wall time, its own peak RSS, the seconds it reports.

    Peak RSS and CPU time come from GNU time (``%M %U %S``): a child forked from this (large)
    Python would carry the bench's own RSS in its high-water mark; one forked from ``time``
    carries only time's.
    Output goes to ``out_file``; a non-zero exit stops the bench with the output's end.
    """
    rss_file = out_file.with_suffix(".rss")
    with out_file.open("wb") as out:
        start = time.perf_counter()
        code = subprocess.call(
            [TIME, "-f", "%M %U %S", "-o", str(rss_file), *argv],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        wall = time.perf_counter() - start
    text = out_file.read_text(errors="replace")
    raise_on(code, argv, text.encode())
    inner = None
    for line in text.splitlines():
        if line.startswith("{"):
            inner = json.loads(line).get("seconds")
    rss_kib, user, system = rss_file.read_text().split()[-3:]
    return Run(wall=wall, cpu=float(user) + float(system), rss_mib=int(rss_kib) / 1024, inner=inner)


def raise_on(code: int, argv: list[str], err: bytes) -> None:
    if code != 0:
        tail = err.decode(errors="replace")[-2000:]
        raise SystemExit(f"{argv[0]} {argv[1:3]} exited {code}:\n{tail}")


# ---------------------------------------------------------------------------------- data


def make_blobs(work: Path, spec: list[tuple[int, int]]) -> tuple[DiskStore, Path, Path]:
    """A store with ``count x size`` random blobs per spec, a flat directory of the same
    files (hard links named by hex digest), and a file listing the digests."""
    store = DiskStore(work / "src-store")
    files = work / "src-files"
    files.mkdir()
    digests: list[Digest] = []
    for count, size in spec:
        for _ in range(count):
            digest = store.put(os.urandom(size))
            digests.append(digest)
            os.link(store.blob_path(digest), files / hex_of(digest))
    listing = work / "digests.txt"
    listing.write_text("\n".join(digests) + "\n")
    return store, files, listing


def check_files(directory: Path, digests: list[Digest]) -> None:
    """Every blob is in ``directory`` (flat, by hex) with the bytes its name says."""
    for digest in digests:
        data = (directory / hex_of(digest)).read_bytes()
        if blake3.blake3(data).hexdigest() != hex_of(digest):
            raise SystemExit(f"pulled file {directory / hex_of(digest)} has other bytes")


def check_store(store: Path, digests: list[Digest]) -> None:
    found = set(DiskStore(store).digests())
    if found != set(digests):
        raise SystemExit(f"store {store} holds {len(found)} blobs, expected {len(digests)}")
    for digest in digests:
        DiskStore(store).verify(digest)


# ---------------------------------------------------------------------------------- main


def worker(argv: list[str]) -> None:
    """``worker CANDIDATE push|pull STORE DIGESTS PREFIX WORKERS``: one timed transfer."""
    name, op, store, digests, prefix, workers = argv
    seconds = run_candidate(
        name, op, store=Path(store), digests_file=Path(digests), prefix=prefix, workers=int(workers)
    )
    print(json.dumps({"seconds": seconds}), flush=True)
    # Every candidate skips interpreter teardown alike: obstore 0.12's process aborts there
    # (SIGABRT) after a push in about one run of three, once its work is done.
    os._exit(0)


def startup_costs(env: dict[str, str], rounds: int) -> list[tuple[str, float]]:
    """Start-up costs, each measured inside fresh interpreters: the least of ``rounds`` (other
    work on the machine only ever adds to it)."""
    snippets = {
        "import fetchproxy.store (the local store alone: the baseline)": (
            "import fetchproxy.store",
            "assert 'botocore' not in sys.modules",
        ),
        "import fetchproxy.store.remote (botocore not loaded)": (
            "import fetchproxy.store.remote",
            "assert 'botocore' not in sys.modules",
        ),
        "pull with nothing missing (no client made)": (
            "from fetchproxy.store import MemoryStore\n"
            "from fetchproxy.store.remote import RemoteStore\n"
            "from fetchproxy.store.remote_url import parse_remote_url\n"
            "s = MemoryStore(); d = s.put(b'x')\n"
            "RemoteStore(parse_remote_url('s3://fetchproxy-test/x')).pull([d], s)",
            "assert 'botocore' not in sys.modules",
        ),
        "fetchproxy BucketClient, configured from the environment (no botocore)": (
            "from fetchproxy.store.remote_client import BucketClient\n"
            "BucketClient(os.environ['BENCH_BUCKET'])",
            "assert 'botocore' not in sys.modules",
        ),
        "boto3 S3 client": ("import boto3\nboto3.client('s3')", ""),
        "aiobotocore S3 client (import, session)": (
            "import aiobotocore.session\naiobotocore.session.get_session()",
            "",
        ),
        "obstore S3Store": (
            "from remotebench.candidates import _obstore\n_obstore()",
            "",
        ),
    }
    results = []
    for label, (code, check) in snippets.items():
        samples: list[float] = []
        for _ in range(rounds):
            program = (
                "import os, sys, time\n"
                f"sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})\n"
                "t = time.perf_counter()\n"
                f"{code}\n"
                "print(time.perf_counter() - t)\n"
                f"{check}\n"
            )
            out = subprocess.run(
                [sys.executable, "-c", program], env=env, capture_output=True, check=False
            )
            if out.returncode != 0:
                samples.clear()
                log(f"{label}: failed: {out.stderr.decode(errors='replace')[-300:]}")
                break
            samples.append(float(out.stdout.split()[0]))
        if samples:
            results.append((label, min(samples)))
    return results


def main() -> None:  # noqa: PLR0912, PLR0915 -- one linear script: set up, rounds, tables
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", type=Path, default=os.environ.get("FETCHPROXY_TEST_S3_ENV"))
    parser.add_argument("--small", type=int, default=2000)
    parser.add_argument("--small-size", type=parse_size, default=16 << 10)
    parser.add_argument("--large", type=int, default=4)
    parser.add_argument("--large-size", type=parse_size, default=64 << 20)
    parser.add_argument("--big", type=parse_size, default=256 << 20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--only", action="append", default=[])
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    if not Path(TIME).exists():
        raise SystemExit(f"{TIME} is missing: apt-get install time (it measures peak RSS)")
    if args.env is None or not args.env.is_file():
        raise SystemExit("give --env DIR/s3.env (from .ci/object-store/up.sh DIR)")
    settings = dict(line.split("=", 1) for line in args.env.read_text().splitlines() if "=" in line)
    bucket = settings["FETCHPROXY_TEST_S3_BUCKET"]
    endpoint = settings["FETCHPROXY_TEST_S3_ENDPOINT"]
    s3_env = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_REGION": settings["FETCHPROXY_TEST_S3_REGION"],
        "AWS_DEFAULT_REGION": settings["FETCHPROXY_TEST_S3_REGION"],
        "AWS_ACCESS_KEY_ID": settings["FETCHPROXY_TEST_S3_WRITER_KEY"],
        "AWS_SECRET_ACCESS_KEY": settings["FETCHPROXY_TEST_S3_WRITER_SECRET"],
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
        "BENCH_BUCKET": bucket,
    }
    # The machine's own CA settings (AWS_CA_BUNDLE among them) mean nothing to an http://
    # endpoint, and rclone refuses to start with one.
    env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"} | s3_env
    os.environ.update(s3_env)
    from fetchproxy.store.remote import RemoteStore
    from fetchproxy.store.remote_url import parse_remote_url

    work = Path(tempfile.mkdtemp(prefix="remote-bench-"))
    run_id = f"bench-{uuid.uuid4().hex[:8]}"
    try:
        spec = [(args.small, args.small_size), (args.large, args.large_size)]
        log(f"making {args.small} x {args.small_size} B + {args.large} x {args.large_size} B")
        src, files, listing = make_blobs(work, spec)
        digests = [Digest(line) for line in listing.read_text().split()]
        total = sum(src.size_of(digest) for digest in digests)
        source = f"{run_id}/source"
        RemoteStore(parse_remote_url(f"s3://{bucket}/{source}")).push(digests, src)
        names = [name for name in CANDIDATES if not args.only or name in args.only]
        rows: dict[str, dict[str, list[Run]]] = {}
        missing: list[str] = []
        for round_no in range(args.rounds):
            peer_list, missing = peers(
                work=work, files=files, dst=work / "dst", bucket=bucket, prefix="",
                source=source, endpoint=endpoint, workers=args.workers, s3_env=s3_env,
            )  # fmt: skip
            systems: list[str | Peer] = [*names]
            systems += [peer for peer in peer_list if not args.only or peer.name in args.only]
            shift = round_no % len(systems)
            for system in systems[shift:] + systems[:shift]:
                label = system if isinstance(system, str) else system.name
                slug = "".join(c if c.isalnum() else "-" for c in label)
                prefix = f"{run_id}/r{round_no}-{slug}"
                dst = work / "dst"
                for op in ("push", "pull"):
                    if isinstance(system, str):
                        store = src.root if op == "push" else dst
                        argv = [sys.executable, __file__, "worker", system, op, str(store),
                                str(listing), prefix if op == "push" else source,
                                str(args.workers)]  # fmt: skip
                        extra: dict[str, str] = {}
                    else:
                        fresh = peers(
                            work=work, files=files, dst=dst, bucket=bucket, prefix=prefix,
                            source=source, endpoint=endpoint, workers=args.workers,
                            s3_env=s3_env,
                        )[0]  # fmt: skip
                        peer = next(p for p in fresh if p.name == system.name)
                        argv, extra = (peer.push if op == "push" else peer.pull), peer.env
                        dst.mkdir(exist_ok=True)
                    run = timed(argv, {**env, **extra}, work / "out.txt")
                    rows.setdefault(label, {}).setdefault(op, []).append(run)
                    log(f"round {round_no + 1} {label:22} {op}: {run.wall:6.2f} s "
                        f"(CPU {run.cpu:5.2f} s) {run.rss_mib:6.0f} MiB")  # fmt: skip
                    if op == "push":
                        pushed = RemoteStore(parse_remote_url(f"s3://{bucket}/{prefix}"))
                        keys = [obj.key for obj in pushed.list_objects()]
                        if len(keys) != len(digests):
                            raise SystemExit(f"{label} pushed {len(keys)} of {len(digests)}")
                        pushed.delete(keys)
                    else:
                        if isinstance(system, str):
                            check_store(dst, digests)
                        else:
                            check_files(dst, digests)
                        shutil.rmtree(dst)
        report(rows, missing, total, len(digests), args)
        big_phase(work, bucket, run_id, args, env)
        print("\n### Start-up (fresh interpreter, least of 7)\n")
        print("| what | ms |\n|---|---:|")
        for label, seconds in startup_costs(env, 7):
            print(f"| {label} | {seconds * 1000:.0f} |")
    finally:
        cleanup = RemoteStore(parse_remote_url(f"s3://{bucket}/{run_id}"))
        leftovers = [obj.key for obj in cleanup.client.list(f"{run_id}/")]
        for start in range(0, len(leftovers), 1000):
            cleanup.client.delete(leftovers[start : start + 1000])
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def big_phase(
    work: Path, bucket: str, run_id: str, args: argparse.Namespace, env: dict[str, str]
) -> None:
    """Peak RSS moving one ``--big`` blob, against the same for one small blob."""
    print(f"\n### Peak RSS against blob size (1 x {args.big >> 20} MiB vs 1 x 16 KiB)\n")
    print("| system | push 16 KiB | push big | pull 16 KiB | pull big |\n|---|---:|---:|---:|---:|")
    cells: dict[str, list[str]] = {}
    for size_label, size in (("small", 16 << 10), ("big", args.big)):
        sub = work / f"big-{size_label}"
        sub.mkdir()
        _, _, listing = make_blobs(sub, [(1, size)])
        for name in [n for n in CANDIDATES if not args.only or n in args.only]:
            prefix = f"{run_id}/big-{size_label}-{name}"
            for op in ("push", "pull"):
                store = sub / "src-store" if op == "push" else sub / f"dst-{name}"
                argv = [sys.executable, __file__, "worker", name, op, str(store), str(listing),
                        prefix, str(args.workers)]  # fmt: skip
                run = timed(argv, env, work / "out.txt")
                cells.setdefault(name, ["", "", "", ""])
                cells[name][(0 if op == "push" else 2) + (size_label == "big")] = (
                    f"{run.rss_mib:.0f} MiB"
                )
        shutil.rmtree(sub)
    for name, row in cells.items():
        print(f"| {name} | " + " | ".join(row) + " |")


def report(
    rows: dict[str, dict[str, list[Run]]],
    missing: list[str],
    total: int,
    count: int,
    args: argparse.Namespace,
) -> None:
    def median(runs: list[Run], what: str) -> float:
        return float(statistics.median(float(getattr(run, what)) for run in runs))

    base = rows.get("fetchproxy")
    print(f"### {count} blobs, {total / 1e6:.0f} MB; {args.workers} transfers at once; "
          f"median of {args.rounds} rounds\n")  # fmt: skip
    print("Wall and CPU (user + system) seconds of the whole process; x is the ratio to "
          "fetchproxy's median in this run.\n")  # fmt: skip
    print("| system | push s | x | push CPU s | pull s | x | pull CPU s | push RSS | pull RSS |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, ops in rows.items():
        cells = [label]
        for op in ("push", "pull"):
            wall = median(ops[op], "wall")
            cells.append(f"{wall:.2f}")
            cells.append(f"{wall / median(base[op], 'wall'):.2f}" if base else "-")
            cells.append(f"{median(ops[op], 'cpu'):.2f}")
        cells += [f"{max(r.rss_mib for r in ops[op]):.0f} MiB" for op in ("push", "pull")]
        print("| " + " | ".join(cells) + " |")
    for line in missing:
        print(f"\n(not measured: {line})")


if __name__ == "__main__":
    main()
