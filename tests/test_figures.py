"""Static checks of the chapters' figures, before any build: every figure cell
declares a caption and a name inside ``mystnb.figure`` (a misplaced ``name``
silently drops the label), and every ``{numref}`` points at a declared figure."""

import re
from pathlib import Path

import yaml

CHAPTERS = sorted((Path(__file__).parents[1] / "chapters").glob("*.md"))
HEADER = re.compile(r"^```\{code-cell\}[^\n]*\n---\n(.*?)\n---\n", re.S | re.M)


def _figures(text: str) -> list[dict]:
    out = []
    for m in HEADER.finditer(text):
        meta = yaml.safe_load(m.group(1)) or {}
        assert "name" not in meta.get("mystnb", {}), \
            f"a figure's name belongs under mystnb.figure: {m.group(1)[:80]}"
        if "figure" in meta.get("mystnb", {}):
            out.append(meta["mystnb"]["figure"])
    return out


def test_every_figure_has_a_caption_and_a_unique_name():
    names = []
    for path in CHAPTERS:
        for fig in _figures(path.read_text(encoding="utf-8")):
            assert fig.get("caption", "").strip(), f"{path.name}: a figure without caption"
            assert str(fig.get("name", "")).startswith("fig-"), f"{path.name}: {fig}"
            names.append(fig["name"])
    assert len(names) == len(set(names)), "figure names must be unique across the book"
    assert len(names) >= 30


def test_every_numref_target_is_a_declared_figure_and_every_figure_is_cited():
    text = "\n".join(p.read_text(encoding="utf-8") for p in CHAPTERS)
    names = {f["name"] for p in CHAPTERS for f in _figures(p.read_text(encoding="utf-8"))}
    cited = set(re.findall(r"\{numref\}`(?:[^`<]*<)?(fig-[\w-]+)>?`", text))
    assert cited <= names, sorted(cited - names)
    assert names <= cited, f"figures never cited: {sorted(names - cited)}"
