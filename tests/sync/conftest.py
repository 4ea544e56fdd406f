"""The real S3 endpoint the remote-store tests use (tests/support/s3.py)."""

from tests.support.s3 import aws_env, no_secret_anywhere, remote_url, s3  # noqa: F401 -- fixtures
