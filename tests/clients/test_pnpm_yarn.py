"""pnpm 9 and yarn 1 through the real sandbox, against a local npm registry.

Each installs a small dependency tree from a package.json with no lockfile, with a fresh store
and cache in its working directory and a fresh HOME (no state file that would say "checked for
updates today"), not in CI (the CI variables unset, as on a laptop): recorded, the registry
stopped, and replayed ``--exact`` from the same start. The replay gives the same lockfile
(pnpm-lock.yaml, yarn.lock) and the same node_modules, every lock entry used, no request refused,
none reaching the registry.

Both check for a newer version of themselves once a day, a fetch no build needs and one that
would make the lock depend on the day: pnpm asks the registry for ``/pnpm`` (and keeps the time
in ``~/.local/state/pnpm/pnpm-state.json``), yarn 1, at a terminal, asks
``https://yarnpkg.com/latest-version`` (the time in ``~/.yarnrc``). fetchproxy turns both off
(:data:`~fetchproxy.run.buildenv.CHECKS_OFF`); each test also shows, with the user's own value
turning the check back on, that the same build would otherwise have made it.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from tests.clients.support.builds import assert_replay_served, fetchproxy, lock_entries, resolving
from tests.clients.support.npm_registry import CI_VARIABLES, Registry, registry
from tests.support.tools import require

__all__ = ["registry"]  # a fixture, imported to be used here

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="the network sandbox needs root (CI is root)"),
]

REGISTRY_ADDRESS = "127.0.0.62"  # the registry fixture's, on the host's loopback
NOT_IN_CI = " ".join(f"-u {name}" for name in CI_VARIABLES)
PACKAGE_JSON = {
    "name": "app",
    "version": "1.0.0",
    "private": True,
    "dependencies": {"mid-pkg": "^1.0.0", "left-pad-ish": "1.0.0"},
}


def publish_tree(registry: Registry) -> None:
    """app → mid-pkg ^1.0.0 → leaf-pkg ^1.0.0 (1.1.0 the newest), and left-pad-ish 1.0.0."""
    registry.publish("leaf-pkg", "1.0.0")
    registry.publish("leaf-pkg", "1.1.0")
    registry.publish("mid-pkg", "1.0.0", {"leaf-pkg": "^1.0.0"})
    registry.publish("left-pad-ish", "1.0.0")


TREE_REQUESTS = sorted(
    [
        "/left-pad-ish",
        "/left-pad-ish/-/left-pad-ish-1.0.0.tgz",
        "/mid-pkg",
        "/mid-pkg/-/mid-pkg-1.0.0.tgz",
        "/leaf-pkg",
        "/leaf-pkg/-/leaf-pkg-1.1.0.tgz",
    ]
)


def fresh_start(work: Path) -> None:
    """The build's start: package.json alone, an empty HOME, no store, cache or lockfile."""
    for name in ("home", "node_modules", "store", "cache"):
        shutil.rmtree(work / name, ignore_errors=True)
    for name in ("pnpm-lock.yaml", "yarn.lock"):
        (work / name).unlink(missing_ok=True)
    (work / "home").mkdir(parents=True)
    (work / "package.json").write_text(json.dumps(PACKAGE_JSON, indent=2) + "\n")


def tree(root: Path) -> dict[str, tuple[str, bytes | str]]:
    """Every file (its bytes) and symlink (its target) under ``root``, links not followed."""
    found: dict[str, tuple[str, bytes | str]] = {}
    for directory, subdirectories, files in os.walk(root):
        for name in [*subdirectories, *files]:
            path = Path(directory) / name
            where = str(path.relative_to(root))
            if path.is_symlink():
                found[where] = ("link", str(path.readlink()))
            elif path.is_file():
                found[where] = ("file", path.read_bytes())
    return found


def run(
    registry: Registry,
    work: Path,
    mode: str,
    build: str,
    *,
    env: Mapping[str, str] = {},
    prefix: Sequence[str] = (),
) -> str:
    """``fetchproxy MODE`` of ``build`` (a shell command; ``$0`` is the registry's URL) from a
    fresh start, which succeeded (a replay: ``--exact``, and it served the whole lock and
    nothing else); its output, the build's and fetchproxy's."""
    fresh_start(work)
    args = ("record", "--allow-origin", REGISTRY_ADDRESS) if mode == "record" else (mode, "--exact")
    done = fetchproxy(
        work, work.parent / "fetchproxy-store", *args, "--", "sh", "-c", build, registry.url,
        env=env, prefix=prefix,
    )  # fmt: skip
    if mode == "replay":
        assert_replay_served(done, work, requests=lock_entries(work))
    else:
        assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


# ----------------------------------------------------------------------------------------- pnpm

PNPM_INSTALL = (
    f'env {NOT_IN_CI} pnpm install --registry "$0" --store-dir store --cache-dir cache'
    " --reporter append-only"
)
PNPM_STATE = Path("home/.local/state/pnpm/pnpm-state.json")


def pnpm_result(work: Path) -> dict[str, tuple[str, bytes | str]]:
    found = tree(work / "node_modules")
    # pnpm's record of this install: when it last pruned the store is the one line that varies
    modules = found.pop(".modules.yaml")[1]
    assert isinstance(modules, bytes)
    kept = [line for line in modules.splitlines() if not line.startswith(b"prunedAt:")]
    found[".modules.yaml without prunedAt"] = ("file", b"\n".join(kept))
    found["pnpm-lock.yaml"] = ("file", (work / "pnpm-lock.yaml").read_bytes())
    return found


def test_pnpm_installs_the_same_from_the_replay_and_never_checks_for_itself(
    tmp_path: Path, registry: Registry
) -> None:
    require("pnpm", install="npm install -g pnpm@9")
    publish_tree(registry)
    registry.publish("pnpm", "99.0.0")  # what the real registry would answer pnpm's check with
    work = tmp_path / "work"

    recorded = run(registry, work, "record", PNPM_INSTALL)
    assert sorted(registry.requests) == TREE_REQUESTS, recorded
    assert lock_entries(work) == 6
    assert not (work / PNPM_STATE).exists()  # no check, so no time of one
    installed = pnpm_result(work)
    assert installed["mid-pkg"] == ("link", ".pnpm/mid-pkg@1.0.0/node_modules/mid-pkg")
    assert ".pnpm/leaf-pkg@1.1.0/node_modules/leaf-pkg/index.js" in installed
    assert b"leaf-pkg@1.1.0:" in (work / "pnpm-lock.yaml").read_bytes()

    # the same build, where the user turned the check back on: pnpm asks for itself
    checked = tmp_path / "checked" / "work"
    run(registry, checked, "record", PNPM_INSTALL, env={"npm_config_update_notifier": "true"})
    assert "/pnpm" in registry.requests
    assert "lastUpdateCheck" in (checked / PNPM_STATE).read_text()

    registry.stop()
    run(registry, work, "replay", PNPM_INSTALL)
    assert pnpm_result(work) == installed
    assert not (work / PNPM_STATE).exists()


# ----------------------------------------------------------------------------------------- yarn

YARN_CHECK = "https://yarnpkg.com/latest-version"


def yarn_build(registry: Registry) -> str:
    """``yarn install`` at a terminal (``script`` gives it a pty in the sandbox): yarn checks
    for itself only when its output is one."""
    install = (
        f"env {NOT_IN_CI} yarn install --registry {registry.url} --cache-folder cache --no-progress"
    )
    return f"script -qec 'test -t 1 && {install}' /dev/null"


def yarn_result(work: Path) -> dict[str, tuple[str, bytes | str]]:
    found = tree(work / "node_modules")
    found["yarn.lock"] = ("file", (work / "yarn.lock").read_bytes())
    return found


def test_yarn_installs_the_same_from_the_replay_and_never_checks_for_itself(
    tmp_path: Path, registry: Registry
) -> None:
    require("yarn", "script", install="npm install -g yarn@1 (script: apt-get install bsdutils)")
    publish_tree(registry)
    work = tmp_path / "work"
    build = yarn_build(registry)
    # the recording proxy finds yarnpkg.com at 127.0.0.3, which it may not reach: a check that
    # is made is refused, and no lookup of the name leaves the host
    unreachable = resolving(tmp_path, "yarnpkg.com", address="127.0.0.3")

    recorded = run(registry, work, "record", build, prefix=unreachable)
    assert sorted(registry.requests) == TREE_REQUESTS, recorded
    assert lock_entries(work) == 6
    assert "yarnpkg.com" not in recorded
    assert not (work / "home/.yarnrc").exists()  # no check, so no time of one
    installed = yarn_result(work)
    assert "mid-pkg/package.json" in installed
    assert "leaf-pkg/index.js" in installed
    assert b'leaf-pkg@^1.0.0:\n  version "1.1.0"' in (work / "yarn.lock").read_bytes()

    # the same build, where the user turned the check back on: yarn asks for its version
    checked = tmp_path / "checked" / "work"
    output = run(
        registry, checked, "record", build, env={"YARN_DISABLE_SELF_UPDATE_CHECK": "false"},
        prefix=unreachable,
    )  # fmt: skip
    assert f"record: refused GET {YARN_CHECK}: yarnpkg.com:443 is not among the allowed" in output

    registry.stop()
    run(registry, work, "replay", build)
    assert yarn_result(work) == installed
