"""Every generated example of docs/provenance.md is what the code and the command line give
today (``python -m tests.provenance.docexamples`` rewrites them after a deliberate change)."""

from __future__ import annotations

import pytest

from tests.provenance.docexamples import doc_block, generated

BLOCKS = generated()


@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_the_example_in_the_docs_is_current(name: str) -> None:
    assert doc_block(name) == BLOCKS[name], BLOCKS[name]
