"""The docs are a reference, not a history: every docs/*.md page says how things are now, fits in 30 KB, and
names no issue number (the history of each change is in CHANGELOG.md, the raw runs in benchmarks/data/)."""

from __future__ import annotations

import re

import pytest
from conftest import ROOT

DOCS = ROOT / "docs"
LIMIT_BYTES = 30 * 1024
#: "issue 27", "issues 2 and 3", "issue-15", "issue #54": a page organised by the change that made it
ISSUE_NUMBER = re.compile(r"\bissues?[\s#-]*\d+", re.I)

#: pages not yet rewritten as a reference; this list only shrinks (remove a page once it passes)
NOT_YET_REFERENCE: set[str] = set()

PAGES = sorted(DOCS.glob("*.md"))


def test_the_exceptions_are_pages_that_exist():
    names = {page.name for page in PAGES}
    assert NOT_YET_REFERENCE <= names, f"not pages of docs/: {sorted(NOT_YET_REFERENCE - names)}"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_page_is_a_reference(page):
    if page.name in NOT_YET_REFERENCE:
        pytest.skip("listed in NOT_YET_REFERENCE")
    size = len(page.read_bytes())
    assert size <= LIMIT_BYTES, f"docs/{page.name} is {size} bytes, over {LIMIT_BYTES}: split it by topic"
    named = [
        f"{number}: {line.strip()[:80]}"
        for number, line in enumerate(page.read_text().splitlines(), 1)
        if ISSUE_NUMBER.search(line)
    ]
    assert not named, f"docs/{page.name} names issues (history goes to CHANGELOG.md): {named[:3]}"


def test_exceptions_still_need_their_place():
    """An exception that passes both checks is stale: drop it from the list so the check covers the page."""
    stale = []
    for name in sorted(NOT_YET_REFERENCE):
        text = (DOCS / name).read_text()
        if len(text.encode()) <= LIMIT_BYTES and not ISSUE_NUMBER.search(text):
            stale.append(name)
    assert not stale, f"these pages pass now; remove them from NOT_YET_REFERENCE: {stale}"


def test_the_check_sees_an_issue_number():
    assert ISSUE_NUMBER.search("## The library's house (issue 27, second part)")
    assert ISSUE_NUMBER.search("mpi vs pccl-flat at 2 ranks (issues 2 and 3)")
    assert ISSUE_NUMBER.search("the issue-15 figures of the paired design")
    assert not ISSUE_NUMBER.search("the issue asked for it; 27 cells")
