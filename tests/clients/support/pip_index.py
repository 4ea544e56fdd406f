"""pip against a static simple index of demo wheels (:data:`PIP_WHEELS`): the command
(:func:`pip_install`, run by the interpreter outside the test's venv), what it installed
(:func:`installed`), and the recording of it the pip tests replay (:func:`pip_recording`)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.clients.support.builds import LOCK, fetchproxy, prepare_work
from tests.support.real_origins import HTTPSOrigin, make_wheel, simple_index, static_site

PIP_WHEELS = (
    make_wheel("demo-dep", "1.0", {"demo_dep/__init__.py": 'GREETING = "hello from demo-dep"\n'}),
    make_wheel("demo-pkg", "0.9", {"demo_pkg/__init__.py": 'VERSION = "0.9"\n'}),
    make_wheel(
        "demo-pkg",
        "1.0",
        {"demo_pkg/__init__.py": 'from demo_dep import GREETING\n\nVERSION = "1.0"\n'},
        requires=["demo-dep>=1.0"],
    ),
)


BASE_PYTHON = str(Path(sys.base_prefix) / "bin" / "python3")
"""The interpreter outside the test's venv: the venv may live in a checkout under /tmp, which
the sandbox makes private; the base installation (with its own pip) is where the build sees it."""


def pip_install(index_url: str) -> list[str]:
    return [
        BASE_PYTHON,
        "-I",  # isolated: no PYTHONPATH, no user site
        "-m",
        "pip",
        "install",
        "--no-cache-dir",
        "--no-compile",  # .pyc files embed the install time
        "--disable-pip-version-check",
        "--index-url",
        index_url,
        "--target",
        "site",
        "demo-pkg",
    ]


def installed(site: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(site)): p.read_bytes() for p in sorted(site.rglob("*")) if p.is_file()
    }


@dataclass(frozen=True)
class PipRecording:
    lock: Path
    store: Path
    index_url: str
    site: dict[str, bytes]


@pytest.fixture(scope="module")
def pip_recording(tmp_path_factory: pytest.TempPathFactory) -> PipRecording:
    """``pip install demo-pkg`` recorded once from a static simple index; the origin stopped."""
    tmp = tmp_path_factory.mktemp("pip-record")
    work, store = prepare_work(tmp), tmp / "store"
    with HTTPSOrigin(tmp / "origin", static_site(simple_index(PIP_WHEELS))) as origin:
        index_url = f"{origin.url}/simple/"
        recorded = fetchproxy(
            work, store, "record", "--upstream-ca", origin.ca_path, "--", *pip_install(index_url)
        )
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    assert [r.target for r in origin.requests] == [
        "/simple/demo-pkg/",
        "/files/demo_pkg-1.0-py3-none-any.whl",
        "/simple/demo-dep/",
        "/files/demo_dep-1.0-py3-none-any.whl",
    ]
    assert "fetchproxy: recorded 4 fetches" in recorded.stderr
    return PipRecording(work / LOCK, store, index_url, installed(work / "site"))
