"""docs/clients.md says what the build gets, and each recipe names the test that runs it.

Checked against the code, so the page cannot drift: the variables its tables list are exactly
the ones :func:`~fetchproxy.run.buildenv.build_setup` sets (the self-update values too); each
recipe's "fetchproxy sets" names only variables the build gets; each "tested by" names a test in
tests/clients/; and each test of the toolchains module is named by a recipe.
"""

from __future__ import annotations

import ast
import re

from fetchproxy.run.buildenv import CHECKS_OFF, build_setup
from tests.support import REPO

DOC = (REPO / "docs" / "clients.md").read_text(encoding="utf-8")
CLIENT_TESTS = REPO / "tests" / "clients"


def build_variables() -> set[str]:
    """The variables a build gets that the environment it starts from did not have."""
    env = build_setup(
        {}, proxy_host="169.254.77.1", proxy_port=3128, directory="/run/fetchproxy", bundle=b""
    ).env
    return set(env)


def table_rows(text: str) -> list[list[str]]:
    return [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("| `")
    ]


def recipes() -> dict[str, str]:
    """Each ``### `` section of "Recipes, one per ecosystem", by its heading."""
    part = DOC.split("## Recipes, one per ecosystem", 1)[1].split("\n## ", 1)[0]
    sections = re.split(r"^### (.+)$", part, flags=re.MULTILINE)[1:]
    return {
        heading: body + "\n\n" for heading, body in zip(sections[::2], sections[1::2], strict=True)
    }


def client_test_names() -> set[str]:
    names = set()
    for path in CLIENT_TESTS.glob("test_*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names |= {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    return {name for name in names if name.startswith("test_")}


def test_the_tables_list_exactly_the_variables_the_build_gets() -> None:
    named = {
        name
        for row in table_rows(DOC.split("## Recipes", 1)[0])
        for name in re.findall(r"`([A-Za-z_]+)`", row[0])
    }
    assert named == build_variables()


def test_the_self_update_values_are_the_codes() -> None:
    rows = {row[0].strip("`"): row[1].strip("`") for row in table_rows(DOC)}
    assert {name: rows.get(name) for name, _ in CHECKS_OFF} == dict(CHECKS_OFF)


def test_every_recipe_says_what_fetchproxy_sets_and_which_test_runs_it() -> None:
    found = recipes()
    assert len(found) >= 9
    variables, tests = build_variables(), client_test_names()
    named_tests: set[str] = set()
    for heading, body in found.items():
        sets = re.search(r"^- fetchproxy sets: (.+?)\n- ", body, re.MULTILINE | re.DOTALL)
        tested = re.search(r"^- tested by: (.+?)(?:\n\n|\n```)", body, re.MULTILINE | re.DOTALL)
        assert sets is not None, heading
        assert tested is not None, heading
        assert set(re.findall(r"`([A-Za-z_]+)`", sets[1])) <= variables, heading
        assert "```console\n$ fetchproxy record -- " in body or heading.startswith("Node"), heading
        names = set(re.findall(r"`(test_\w+)`", tested[1]))
        assert names <= tests, heading
        assert names or tested[1].startswith("none"), heading
        named_tests |= names
    toolchains = ast.parse((CLIENT_TESTS / "test_toolchains.py").read_text(encoding="utf-8"))
    ours = {n.name for n in toolchains.body if isinstance(n, ast.FunctionDef)}
    assert {name for name in ours if name.startswith("test_")} <= named_tests
