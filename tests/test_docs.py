"""The front door: a short README whose links, and the docs' links, lead somewhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from spec_lib.io import REPO_ROOT

PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_the_readme_is_read_in_five_minutes():
    assert len((REPO_ROOT / "README.md").read_text().splitlines()) <= 300


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page: Path):
    broken = [target for target in LINK.findall(page.read_text())
              if not re.match(r"[a-z]+://", target) and not target.startswith("#")
              and not (page.parent / target.split("#")[0]).exists()]
    assert not broken, f"{page.name}: {broken}"


def test_every_docs_page_is_linked_from_the_readme():
    readme = (REPO_ROOT / "README.md").read_text()
    assert not [p.name for p in PAGES[1:] if f"docs/{p.name}" not in readme]
