"""Helpers the tests share: origins, an in-process proxy, clients, the CLI as a process."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
"""The repository's top directory."""
