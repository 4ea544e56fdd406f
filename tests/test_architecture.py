"""The house rules the code must keep: one wing imports mitmproxy, the core loads without it,
every module is on the map, and the addons run in a stock mitmdump as mitmproxy's own do."""

from __future__ import annotations

import ast
import importlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from fetchproxy.lock.file import load_lock
from tests.support import REPO
from tests.support.clients import urlfetch, urllib_opener
from tests.support.origin import Origin, OriginPKI

PACKAGE = REPO / "fetchproxy"
WING = REPO / "addons"


def _modules() -> list[Path]:
    """Every module of the package but the mitmproxy wing (which fetchproxy/addons links to)."""
    return sorted(
        path for path in PACKAGE.rglob("*.py") if path.relative_to(PACKAGE).parts[0] != "addons"
    )


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_nothing_outside_the_mitmproxy_wing_imports_mitmproxy() -> None:
    offenders = [
        str(path.relative_to(REPO))
        for path in _modules()
        if any(name == "mitmproxy" or name.startswith("mitmproxy.") for name in _imports(path))
    ]
    assert offenders == []
    assert any(
        "mitmproxy" in _imports(path) or any(n.startswith("mitmproxy.") for n in _imports(path))
        for path in WING.glob("*.py")
    ), "the wing itself imports mitmproxy"


def test_the_core_the_cli_and_the_direct_replay_engine_load_without_mitmproxy() -> None:
    """Only the mitmproxy engine loads mitmproxy: the keys, the lock, the store, record's and
    replay's decisions, the direct server, the run and the CLI do not (mitmproxy is slow to
    import, and the pure core must not depend on it)."""
    modules = [
        ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        for path in _modules()
    ]
    # __main__ runs the CLI; the sandbox's bare programs run as scripts of their own
    skip = ("fetchproxy.__main__", "fetchproxy.sandbox.supervisor", "fetchproxy.sandbox.userns")
    modules = [m for m in modules if m not in skip]
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "loaded = sorted(m for m in sys.modules if m.partition('.')[0] == 'mitmproxy')\n"
        "print(loaded)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_every_module_is_on_the_map() -> None:
    """docs/how-it-works.md names every module of the package and of the wing: by its whole
    path, or by its name in a table row that names its folder."""
    lines = (REPO / "docs" / "how-it-works.md").read_text().splitlines()

    def shown(path: Path) -> bool:
        whole = str(path.relative_to(REPO))
        folder = str(path.parent.relative_to(REPO)) + "/"
        return any(whole in line or (folder in line and f"`{path.name}`" in line) for line in lines)

    missing = [
        str(path.relative_to(REPO))
        for path in [*_modules(), *sorted(WING.glob("*.py"))]
        if path.name != "__init__.py" and not shown(path)
    ]
    missing += [
        str(path.relative_to(REPO))
        for path in [PACKAGE / "__init__.py", PACKAGE / "cli" / "__init__.py"]
        if not shown(path)
    ]
    assert missing == []


def test_the_record_addon_records_in_a_stock_mitmdump(
    origin: Origin, origin_pki: OriginPKI, tmp_path: Path
) -> None:
    """``mitmdump -s addons/record.py`` with the addon's own options: a mitmproxy user records
    with the tools they know, and gets the same lock."""
    lock = tmp_path / "stock.lock.toml"
    confdir = tmp_path / "mitmproxy"
    process = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("mitmdump")),
            "--quiet",
            "--listen-host",
            "127.0.0.1",
            "--listen-port",
            "0",
            "--set",
            f"confdir={confdir}",
            "--set",
            f"ssl_verify_upstream_trusted_ca={origin_pki.ca_cert}",
            "-s",
            str(WING / "record.py"),
            "--set",
            f"record_lock={lock}",
            "--set",
            f"record_store={tmp_path / 'store'}",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        port = _listening_port(process.pid)
        opener = urllib_opener(f"http://127.0.0.1:{port}", confdir / "mitmproxy-ca-cert.pem")
        assert urlfetch(opener, origin.url("/small.txt")).status == 200
    finally:
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
    assert [f.key.url for f in load_lock(lock).fetches] == [origin.url("/small.txt")]


def _listening_port(pid: int, timeout: float = 30.0) -> int:
    """The TCP port process ``pid`` listens on, once it does (read from /proc, no sleep-guess)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        inodes = set()
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = str(fd.readlink())
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
        for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                return int(fields[1].rpartition(":")[2], 16)
        time.sleep(0.05)
    raise AssertionError(f"process {pid} did not listen within {timeout} s")


def test_the_docs_name_only_tests_that_exist() -> None:
    """A guarantees table that names a test (`test_…`) names one that is there: renaming or
    removing a test cannot leave a guarantee the docs claim but nothing pins."""
    tests = {
        node.name
        for path in (REPO / "tests").rglob("test_*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
    }
    named = {
        (doc.name, name)
        for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
        for name in re.findall(r"`(test_\w+)`", doc.read_text(encoding="utf-8"))
    }
    assert sorted(f"{doc}: {name}" for doc, name in named if name not in tests) == []


def test_the_docs_name_only_modules_that_exist() -> None:
    """Every module path (``fetchproxy/…py``, ``addons/…py``) and every ``from fetchproxy…
    import`` in the README and docs/ names code that is there: a move cannot leave a stale map."""
    stale: list[str] = []
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            paths = re.findall(r"\b((?:fetchproxy|addons)/[\w/]*\w\.py)\b", line)
            stale.extend(f"{doc.name}:{number}: {p}" for p in paths if not (REPO / p).is_file())
            for module, names in re.findall(r"^from (fetchproxy[\w.]*) import (.+)$", line):
                try:
                    loaded = importlib.import_module(module)
                except ImportError:
                    stale.append(f"{doc.name}:{number}: {module}")
                    continue
                missing = [n for n in re.split(r"[,\s()]+", names) if n and not hasattr(loaded, n)]
                stale.extend(f"{doc.name}:{number}: {module}.{n}" for n in missing)
    assert stale == []


def _imported_modules(path: Path, module: str) -> set[str]:
    """Every module ``path`` (the module named ``module``) may import, anywhere in it: each
    ``import a.b``, and for ``from a import b`` both ``a`` and ``a.b`` (``b`` may be a module);
    a relative import is read from the module's package."""
    package = module.split(".")[: -1 if path.name != "__init__.py" else None]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            source = ".".join([*base, *([node.module] if node.module else [])])
            names.add(source)
            names.update(f"{source}.{alias.name}" for alias in node.names)
    return names


def test_no_module_of_the_tests_imports_a_test_module() -> None:
    """What two test modules share (a helper, a fixture, a constant) lives in a module that is
    not a test: :mod:`tests.support`, a package's own support module (``tests/clients/support/``,
    ``tests/review/example_locks.py``) or its ``conftest.py``. A test module imported by another
    runs inside it, lends it fixtures without saying so, and cannot be split or renamed without
    breaking a module that does not look related; a support module that imports one is the same
    knot. Every import counts, a function's own too."""
    tests = REPO / "tests"
    modules = {
        ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__"): path
        for path in sorted(tests.rglob("*.py"))
        if "__pycache__" not in path.parts
    }
    test_modules = {name for name, path in modules.items() if path.name.startswith("test_")}
    assert len(test_modules) > 90  # the tests are where this looks for them
    imports = [
        f"{path.relative_to(REPO)} imports {name}"
        for module, path in modules.items()
        for name in sorted(_imported_modules(path, module) & test_modules - {module})
    ]
    assert imports == []


def test_nothing_refers_to_issue_numbers() -> None:
    """Issue numbers mean nothing to a reader of the repository: the text says what and why."""
    pattern = re.compile(r"\bissues? ?#?\d+\b|\bissue \d+'s\b", re.IGNORECASE)
    roots = ["README.md", "docs", "fetchproxy", "addons", "tests", "bench", ".ci"]
    found = []
    for root in roots:
        paths = [REPO / root] if (REPO / root).is_file() else sorted((REPO / root).rglob("*"))
        for path in paths:
            if path.suffix not in {".py", ".md", ".sh", ".toml", ""} or not path.is_file():
                continue
            if "__pycache__" in path.parts or path.is_symlink():
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            found += [f"{path.relative_to(REPO)}: {m}" for m in pattern.findall(text)]
    assert found == []
