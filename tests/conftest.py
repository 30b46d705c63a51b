"""Shared test fixtures: paths of the repository and the built book."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
CHAPTERS = sorted((ROOT / "chapters").glob("*.md"))


@pytest.fixture(scope="session")
def built_html() -> Path:
    """The built site; the book/browser tests run after `make html`."""
    if not (HTML / "index.html").exists():
        pytest.fail("the book is not built: run `make html` first (make test does)")
    return HTML
