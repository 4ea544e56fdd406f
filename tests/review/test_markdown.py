"""The pull-request comment, rendered by GitHub's own Markdown renderer (cmark-gfm): what the
reviewer sees first, and that nothing from a lock renders as anything but its text."""

from __future__ import annotations

import html.parser
from pathlib import Path

import cmarkgfm
import pytest
from cmarkgfm.cmark import Options

from fetchproxy.lock.file import write_lock
from fetchproxy.lock.model import Lock
from fetchproxy.review.diff import diff_locks
from fetchproxy.review.markdown import MAX_ITEMS, code, render_markdown
from fetchproxy.review.packages import package_diff
from tests.review.example_locks import NEW, OLD, file
from tests.support.cli import run_command

ALLOWED_TAGS = {"h3", "p", "strong", "ul", "li", "code", "details", "summary"}


class _Page(html.parser.HTMLParser):
    """The tags of a page, and its text outside and inside ``<code>``."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.depth = 0
        self.outside: list[str] = []
        self.inside: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.depth += tag == "code"

    def handle_endtag(self, tag: str) -> None:
        self.depth -= tag == "code"

    def handle_data(self, data: str) -> None:
        (self.inside if self.depth else self.outside).append(data)


def rendered(markdown: str) -> _Page:
    # UNSAFE: raw HTML passes through, so a test sees what a less careful sanitizer would
    page = _Page()
    page.feed(cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE))
    return page


def comment(old: Lock, new: Lock) -> str:
    diff = diff_locks(old, new)
    return render_markdown(diff, package_diff(diff, old, new), old_label="old", new_label="new")


def test_the_summary_new_hosts_and_drift_come_first() -> None:
    text = comment(OLD, NEW)
    headings = [line for line in text.splitlines() if line.startswith(("**", "<details>"))]
    assert [h.split(":")[0] for h in headings] == [
        "**Summary",
        "**New hosts**",
        "**Content drift**",
        "**Packages**",
        "<details><summary>Other entries (1)</summary>",
        "<details><summary>Metadata (indexes, packuments) (2)</summary>",
    ]
    assert text.splitlines()[2] == (
        "**Summary:** **1 content drift**, **1 new host**, 6 added, 4 removed, 3 changed entries; "
        "+71 B -38 B of bodies; packages: 2 changed, 1 new, 1 with other files, 1 content drift."
    )
    assert "- `npm acc-right` `1.0.0` → `1.1.0`" in text.splitlines()
    assert "- `pypi six` `1.16.0` (new)" in text.splitlines()
    page = rendered(text)
    assert page.tags <= ALLOWED_TAGS
    assert "mirror.example.net" in "".join(page.inside)


HOSTILE_URLS = [
    "https://example.org/[click](javascript:alert(1))",
    "https://example.org/<img src=x onerror=alert(1)>",
    "https://example.org/`` <b>bold</b> ``",
    "https://example.org/@admin *approved* _by_ ~~me~~",
    "https://example.org/ | table | cell |",
]


def test_nothing_from_a_lock_renders_as_markup() -> None:
    new = Lock.from_fetches(
        file(url, b"x", content_type="text/html\x1b[2J<script>") for url in HOSTILE_URLS
    )
    text = comment(Lock(), new)
    page = rendered(text)
    assert page.tags <= ALLOWED_TAGS, page.tags
    outside = "".join(page.outside)
    for marker in ("javascript", "<img", "<b>", "@admin", "approved", "table", "\x1b"):
        assert marker not in outside
    inside = "".join(page.inside)
    for url in HOSTILE_URLS:
        assert url in inside  # shown as exactly the text it is
    assert "\x1b" not in text


@pytest.mark.parametrize(
    ("text", "span"),
    [
        ("plain", "`plain`"),
        ("a`b", "``a`b``"),
        ("`x``", "``` `x`` ```"),
        (" padded ", "`  padded  `"),
        ("", "`  `"),
        ("bell\x07", "`bell\\x07`"),
    ],
)
def test_code_spans_show_exactly_the_text(text: str, span: str) -> None:
    assert code(text) == span
    if text.strip():
        page = rendered(code(text))
        assert "".join(page.inside) == text.replace("\x07", "\\x07")


def test_long_lists_are_cut(tmp_path: Path) -> None:
    new = Lock.from_fetches(file(f"https://example.org/f{i}", b"%d" % i) for i in range(150))
    text = comment(Lock(), new)
    assert f"- … and {150 - MAX_ITEMS} more (`fetchproxy lock diff` lists them all)" in text
    assert text.count("\n- added ") == MAX_ITEMS


def test_no_changes() -> None:
    assert comment(OLD, OLD) == (
        "### fetchproxy lock diff: `old` → `new`\n\n**No changes** (7 fetches).\n"
    )


def test_cli_markdown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old, new = tmp_path / "old.lock.toml", tmp_path / "new.lock.toml"
    write_lock(old, OLD)
    write_lock(new, NEW)
    assert run_command("lock", "diff", "--format", "markdown", str(old), str(new)) == 1
    out = capsys.readouterr().out
    assert out == comment(OLD, NEW).replace("`old`", f"`{old}`", 1).replace("`new`", f"`{new}`", 1)
