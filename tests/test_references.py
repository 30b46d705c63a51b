"""The References page (chapters/references.md) and references.bib.

Sphinx lists on the References page the works cited with {cite} and the keys
written in its bibliography directive. The interview answers and quizzes name
works in plain text (a candidate cannot say a citation role), so those works
are listed there by key; these tests keep that list exact.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import yaml
from pybtex.database import parse_file

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = ROOT / "chapters"
CITE = re.compile(r"\{cite(?::[a-z]+)?\}`([^`]+)`")


def _fold(text: str) -> str:
    """ASCII letters only: accents dropped, LaTeX accent commands resolved."""
    text = re.sub(r"\\.\{?(\w)\}?", r"\1", text).replace("{", "").replace("}", "")
    text = unicodedata.normalize("NFKD", text)
    return "".join(c for c in text if not unicodedata.combining(c))


def _strings(node):
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for v in node.values():
            yield from _strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from _strings(v)


def _bib():
    return parse_file(str(ROOT / "references.bib"), "bibtex").entries


def _cited() -> set[str]:
    keys = set()
    for page in CHAPTERS.glob("*.md"):
        for group in CITE.findall(page.read_text(encoding="utf-8")):
            keys |= {k.strip() for k in group.split(",")}
    return keys


def _listed() -> list[str]:
    text = (CHAPTERS / "references.md").read_text(encoding="utf-8")
    block = re.search(r"```\{bibliography\}[^\n]*\n(.*?)```", text, re.S)
    assert block, "references.md has no bibliography directive"
    return [line.strip() for line in block.group(1).splitlines()
            if line.strip() and not line.lstrip().startswith(":")]


def _named_in_answers(entry) -> bool:
    """The first author's surname, as a word, in an interview or quiz text."""
    surname = _fold(" ".join(entry.persons["author"][0].last_names))
    texts = [_fold(s) for folder in ("interview", "quizzes")
             for f in sorted((CHAPTERS / folder).glob("*.yml"))
             for s in _strings(yaml.safe_load(f.read_text(encoding="utf-8")))]
    word = re.compile(rf"\b{re.escape(surname)}\b")
    return any(word.search(t) for t in texts)


def test_every_cited_key_is_in_the_bibliography():
    missing = _cited() - set(_bib())
    assert not missing, missing


def test_every_work_the_answers_name_is_a_reference():
    """A work of references.bib named in an answer or a quiz is on the page:
    cited by a chapter, or listed in the directive; and the list holds only
    such works."""
    bib, cited, listed = _bib(), _cited(), _listed()
    assert len(listed) == len(set(listed)), listed
    for key in listed:
        assert key in bib, f"{key} is listed but not in references.bib"
        assert key not in cited, f"{key} is cited by a chapter: no need to list it"
        assert _named_in_answers(bib[key]), f"{key} is listed but named nowhere"
    shown = cited | set(listed)
    unlisted = [k for k, e in bib.items() if k not in shown and _named_in_answers(e)]
    assert not unlisted, f"named in the answers but not on the References page: {unlisted}"


def test_the_check_can_fail():
    """The surname match finds the plain-text names it is meant to find."""
    bib = _bib()
    for key in ("zhang2019root", "arjovsky2017wasserstein", "gulrajani2017improved",
                "behrmann2019invertible", "li2018deeper", "oono2020graph"):
        assert _named_in_answers(bib[key]), key
    assert not _named_in_answers(bib["horn2012matrix"])
