"""The Chinese edition (Sphinx gettext; locale/README.md).

* Catalogues: every page listed in ``locale/zh_CN/TRANSLATED`` has a complete
  ``.po`` (no untranslated, fuzzy or obsolete entry; math, code, roles,
  labels and links preserved), and one in step with the current English
  source (every message of a fresh ``.pot`` is in it). The checker is shown
  to fail on a small fixture catalogue.
* The mechanism, on a small fixture book: the zh build reuses the English
  build's execution cache, glue roles in translated text render, a glued
  Markdown or HTML paste (a quiz) is the page's Chinese one, every page
  links to its twin, untranslated pages say so, figures take their alt text
  from figures.po and explorers their texts from explorers.po, a second
  build of both languages changes nothing.
* explorers.po and figures.po are complete, and (marker ``book``) hold every
  text of the built English site's players and every alt text of its figures.
* The built site (marker ``book``): both editions have the same pages, the
  same glued numbers, and their links to each other.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from lipattn.book.sphinxext import EXPLORERS_DOMAIN, FIGURES_DOMAIN, translated_pages

ROOT = Path(__file__).resolve().parents[1]
LOCALE = ROOT / "locale" / "zh_CN" / "LC_MESSAGES"
#: The one list of translated pages (docnames); the zh build reads it too.
TRANSLATED_LIST = ROOT / "locale" / "zh_CN" / "TRANSLATED"
TRANSLATED = translated_pages(TRANSLATED_LIST)

# Markup that a translation must keep (as a multiset): MyST roles (for a role
# with an explicit title, ``title <label>``, only the label), $$...$$ and $...$
# math, `code`, (label)= targets and link targets.
_ROLE = re.compile(r"\{([a-z][a-z0-9:\-]*)\}`([^`]*)`")
_MATH2 = re.compile(r"\$\$.*?\$\$", re.S)
_MATH = re.compile(r"(?<![\\$])\$(?!\$)(.+?)(?<![\\$])\$", re.S)
_CODE = re.compile(r"(?<!`)`([^`{}]+)`(?!`)")
_LINK = re.compile(r"\]\(([^)]+)\)")
_TARGET = re.compile(r"^\(([^)\s]+)\)=\s*$", re.M)
# The one substitution allowed: a glue role with key ``K_zh`` in the msgstr
# stands for the role with key ``K`` of the msgid (the page glues a Chinese
# value, words rather than a number, beside the English one).
_GLUE_ZH = re.compile(r"^(\{glue(?::[a-z]+)?\})([^:]+)_zh((?::.*)?)$", re.S)


def markup(text: str) -> Counter:
    """The markup tokens of one message (what a translation must keep)."""
    out: Counter = Counter()
    for role, body in _ROLE.findall(text):
        m = re.match(r"(?s).*<([^<>]+)>\s*$", body)
        out[f"{{{role}}}" + (m.group(1) if m else body)] += 1
    rest = _ROLE.sub(" ", text)
    for m in _MATH2.findall(rest):
        out["$$" + re.sub(r"\s+", "", m)] += 1
    rest = _MATH2.sub(" ", rest)
    for m in _MATH.findall(rest):
        out["$" + re.sub(r"\s+", "", m)] += 1
    rest = _MATH.sub(" ", rest)
    for m in _CODE.findall(rest):
        out["`" + m] += 1
    for m in _LINK.findall(text):
        out["link:" + m] += 1
    for m in _TARGET.findall(text):
        out["target:" + m] += 1
    return out


def _zh_glue_as_english(a: Counter, b: Counter) -> Counter:
    """``b`` (a msgstr's markup) with each glue role of key ``K_zh`` counted
    as key ``K`` where the msgid (markup ``a``) has that role."""
    out: Counter = Counter()
    for tok, n in b.items():
        m = _GLUE_ZH.match(tok)
        if m and tok not in a and m.group(1) + m.group(2) + m.group(3) in a:
            tok = m.group(1) + m.group(2) + m.group(3)
        out[tok] += n
    return out


def emphasis(text: str) -> tuple[Counter, list[str]]:
    """Bold and italic spans of ``text`` as CommonMark parses it (with
    dollar math, as MyST does), and the text fragments that still hold a
    literal ``**`` (e.g. ``**问题。**自``, which CommonMark does not close)."""
    from markdown_it import MarkdownIt
    from mdit_py_plugins.dollarmath import dollarmath_plugin

    spans: Counter = Counter()
    stray = []
    for block in MarkdownIt("commonmark").use(dollarmath_plugin).parse(text):
        for t in block.children or ():
            if t.type in ("strong_open", "em_open"):
                spans[t.type] += 1
            elif t.type == "text" and "**" in t.content:
                stray.append(t.content)
    return spans, stray


def _read(path: Path):
    from babel.messages.pofile import read_po

    with open(path, "rb") as f:
        return read_po(f)


def po_problems(path: Path) -> list[str]:
    """Every reason ``path`` (a .po) is not a finished translation."""
    cat = _read(path)
    problems = []
    for msg in cat:
        if not msg.id:
            continue
        mid, mstr = msg.id, msg.string
        if not mstr:
            problems.append(f"untranslated: {mid[:70]!r}")
            continue
        if msg.fuzzy:
            problems.append(f"fuzzy: {mid[:70]!r}")
        a = markup(mid)
        b = _zh_glue_as_english(a, markup(mstr))
        if a != b:
            problems.append(f"markup not preserved in {mid[:60]!r}: missing {dict(a - b)}, "
                            f"extra {dict(b - a)}")
        (spans_id, _), (spans_str, stray) = emphasis(mid), emphasis(mstr)
        if stray:
            problems.append(f"emphasis not closed (CommonMark) in {mstr[:60]!r}: literal ** "
                            f"in {[x[:40] for x in stray]}")
        elif spans_id != spans_str:
            problems.append(f"emphasis differs in {mid[:60]!r}: msgid {dict(spans_id)}, "
                            f"msgstr {dict(spans_str)}")
    for mid in cat.obsolete:
        problems.append(f"obsolete: {str(mid)[:70]!r}")
    return problems


def pot(root: Path, build: Path) -> Path:
    """:func:`lipattn.book.edition.pot` in its own process (Sphinx's
    extensions warn of deprecations, which pytest here turns into errors)."""
    code = "import sys; from lipattn.book.edition import pot; pot(sys.argv[1], sys.argv[2])"
    proc = subprocess.run([sys.executable, "-c", code, str(root), str(build)],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "lib")})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return build / "gettext"


def missing_messages(pot: Path, po: Path) -> list[str]:
    """Messages of the English source (``pot``) that ``po`` lacks (or keeps
    only as obsolete): English changed and the catalogue was not updated."""
    have = {m.id for m in _read(po) if m.id}
    return [m.id for m in _read(pot) if m.id and m.id not in have]


# --- the checker, on fixture catalogues --------------------------------------

_HEADER = ('msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n'
           '"Language: zh_CN\\n"\n\n')
_GOOD = {
    "The norm is $\\|J\\|_2 \\le 1/2$, see {ref}`the bound <sec-bound>` and `lipattn.softmax`.":
        "范数满足 $\\|J\\|_2 \\le 1/2$，见 {ref}`界 <sec-bound>` 与 `lipattn.softmax`。",
    "Measured: {glue:text}`ratio:.2f` ([paper](https://example.org/a))":
        "实测：{glue:text}`ratio:.2f`（[论文](https://example.org/a)）",
    "$$\nx^2\n$$": "$$\nx^2\n$$",
}


def _po(path: Path, entries: dict[str, str], extra: str = "") -> Path:
    def q(s: str) -> str:
        return json.dumps(s, ensure_ascii=False)

    body = "".join(f"msgid {q(k)}\nmsgstr {q(v)}\n\n" for k, v in entries.items())
    path.write_text(_HEADER + body + extra, encoding="utf-8")
    return path


def test_a_complete_catalogue_passes(tmp_path: Path):
    assert po_problems(_po(tmp_path / "good.po", _GOOD)) == []


@pytest.mark.parametrize("what,change", [
    ("untranslated", lambda e: {**e, "A new paragraph.": ""}),
    ("math", lambda e: {k: v.replace("1/2", "1/3") for k, v in e.items()}),
    ("math", lambda e: {k: v.replace("$$\nx^2\n$$", "x^2") for k, v in e.items()}),
    ("code", lambda e: {k: v.replace("`lipattn.softmax`", "softmax") for k, v in e.items()}),
    ("label", lambda e: {k: v.replace("<sec-bound>", "<sec-other>") for k, v in e.items()}),
    ("glue", lambda e: {k: v.replace("ratio:.2f", "ratio") for k, v in e.items()}),
    ("link", lambda e: {k: v.replace("example.org/a", "example.org/b") for k, v in e.items()}),
])
def test_the_checker_finds_what_is_wrong(tmp_path: Path, what: str, change):
    problems = po_problems(_po(tmp_path / "bad.po", change(dict(_GOOD))))
    assert len(problems) == 1, problems
    assert ("untranslated" if what == "untranslated" else "markup") in problems[0]


def test_a_chinese_glue_value_may_stand_for_the_english_one(tmp_path: Path):
    entries = {"The method is {glue:text}`verdict`, {glue:text}`ratio:.2f` times.":
               "该方法{glue:text}`verdict_zh`，快 {glue:text}`ratio:.2f` 倍。"}
    assert po_problems(_po(tmp_path / "ok.po", entries)) == []
    wrong = {k: v.replace("ratio:.2f", "ratio_zh:.2f").replace("verdict_zh", "other_zh")
             for k, v in entries.items()}
    assert len(po_problems(_po(tmp_path / "bad.po", wrong))) == 1


def test_the_checker_finds_emphasis_that_does_not_parse(tmp_path: Path):
    entries = {"**The question.** Why?": "**问题。**为什么？"}  # CommonMark: not closed
    problems = po_problems(_po(tmp_path / "bad.po", entries))
    assert len(problems) == 1 and "emphasis not closed" in problems[0], problems
    good = {"**The question.** Why?": "**问题。** 为什么？"}
    assert po_problems(_po(tmp_path / "good.po", good)) == []
    lost = {"*Only* this.": "只有这个。"}
    assert "emphasis differs" in po_problems(_po(tmp_path / "lost.po", lost))[0]


def test_the_checker_finds_fuzzy_and_obsolete_entries(tmp_path: Path):
    fuzzy = '#, fuzzy\nmsgid "Old text."\nmsgstr "旧文。"\n\n'
    obsolete = '#~ msgid "Gone."\n#~ msgstr "已删。"\n'
    problems = po_problems(_po(tmp_path / "bad.po", _GOOD, fuzzy + obsolete))
    assert sorted(p.split(":")[0] for p in problems) == ["fuzzy", "obsolete"], problems


def test_the_targets_of_labels_are_markup():
    assert markup("(sec-a)=\n# Title")["target:sec-a"] == 1


# --- the listed pages ----------------------------------------------------------

def test_the_translated_list_names_pages_of_the_book():
    for page in TRANSLATED:
        assert (ROOT / f"{page}.md").is_file(), f"{TRANSLATED_LIST.name}: no page {page}"
        assert (LOCALE / f"{page}.po").is_file(), f"no catalogue for {page}"


@pytest.mark.parametrize("page", TRANSLATED or [pytest.param("none", marks=pytest.mark.skip(
    reason="no page is listed in locale/zh_CN/TRANSLATED yet"))])
def test_translated_pages_are_complete(page: str):
    problems = po_problems(LOCALE / f"{page}.po")
    assert not problems, f"{page}.po:\n  " + "\n  ".join(problems[:20])


@pytest.fixture(scope="module")
def fresh_pot(tmp_path_factory) -> Path:
    """The .pot files of the current English source (gettext builder,
    notebooks not executed, as `make gettext`)."""
    return pot(ROOT, tmp_path_factory.mktemp("gettext"))


@pytest.mark.book
@pytest.mark.parametrize("page", TRANSLATED or [pytest.param("none", marks=pytest.mark.skip(
    reason="no page is listed in locale/zh_CN/TRANSLATED yet"))])
def test_translated_pages_are_in_step_with_the_english(fresh_pot: Path, page: str):
    missing = missing_messages(fresh_pot / f"{page}.pot", LOCALE / f"{page}.po")
    assert not missing, (f"{page}: the English changed and {page}.po was not updated "
                         f"(`make gettext`, then translate the fuzzy/new entries): {missing[:5]}")


@pytest.mark.book
def test_every_page_has_a_catalogue(fresh_pot: Path):
    pages = sorted(p.relative_to(fresh_pot).with_suffix("").as_posix()
                   for p in fresh_pot.rglob("*.pot"))
    assert "chapters/04_prenorm_postnorm" in pages
    lacking = [p for p in pages if not (LOCALE / f"{p}.po").is_file()]
    assert not lacking, f"no catalogue (run `make gettext`): {lacking}"


# --- the mechanism, on a fixture book ----------------------------------------

_NOTEBOOK = """\
---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  name: python3
  display_name: Python 3
---
# The page

(sec-first)=
## First section

```{code-cell} ipython3
:tags: [remove-cell]
from myst_nb import glue
glue("answer", 42.123456, display=False)
glue("name", "spectral", display=False)
from IPython.display import Markdown
glue("box", Markdown("**An English box**"), display=False)
glue("box_zh", Markdown("**一个中文框**"), display=False)
print("executed", flush=True)
```

```{glue:md} box
```

```{code-cell} ipython3
:tags: [remove-output]
from lipattn.book.quiz import Quiz
Quiz.glue_yaml("quiz", "quiz.yml")
```

```{glue} quiz
```

```{code-cell} ipython3
:tags: [hide-input]
1 + 1
```

```{code-cell} ipython3
---
tags: [remove-input]
mystnb:
  figure:
    caption: |
      A caption in the
      cell's metadata.
    name: fig-cell
---
from lipattn.book import plotting
plotting.setup_notebook()
fig, ax = plotting.figure(width=4.0, height=2.0)
ax.plot([0, 1], [1, 0])
plotting.set_alt(fig, "A falling line.")
```

```{code-cell} ipython3
:tags: [remove-cell]
from lipattn.book import plotting
plotting.setup_notebook()
fig, ax = plotting.figure(width=4.0, height=2.0)
ax.plot([0, 1], [0, 1])
plotting.glue_figure("fig-line", fig, "A straight line.")
```

```{glue:figure} fig-line
:name: fig-line

A line.
```

```{code-cell} ipython3
:tags: [remove-input]
import numpy as np
from lipattn.book.widgets import Explorer, Slider


class Tiny(Explorer, name="tiny", size=(4.0, 2.0), title="A tiny explorer: y = a·x"):
    slope = Slider([0.5, 1.0, 2.0], label="slope a", default=1.0)
    shape = Slider(["line", "curve"], label="shape")
    presets = {"steep line": {"slope": 2.0}}

    def setup(self, fig):
        ax = fig.add_subplot(xlim=(0, 1), ylim=(0, 2))
        (self.line,) = ax.plot([], [])
        return [self.line]

    def update(self, slope, shape):
        x = np.linspace(0, 1, 9)
        self.line.set_data(x, slope * x ** (1 if shape == "line" else 2))


Tiny()
```

The answer is {glue:text}`answer:.2f` and the name is {glue:text}`name`, with $x^2$ \
and `code`; see {ref}`sec-first`.
"""
_TRANSLATION = {
    "The page": "页面",
    "First section": "第一节",
    "A line.": "一条线。",
    "A caption in the cell's metadata.": "单元元数据里的图注。",
    "The answer is {glue:text}`answer:.2f` and the name is {glue:text}`name`, with $x^2$ and "
    "`code`; see {ref}`sec-first`.":
        "答案是 {glue:text}`answer:.2f`，名称是 {glue:text}`name`，公式 $x^2$，代码 `code`；"
        "见 {ref}`sec-first`。",
}


_QUIZ = """\
title: {en: Self-check, zh: 自测}
questions:
  - prompt: {en: 'An English question?', zh: 一个中文问题？}
    options:
      - {text: '\\(1\\)', correct: true, why: {en: English why., zh: 中文解释。}}
      - {text: '\\(2\\)', correct: false, why: {en: English why not., zh: 中文反例。}}
"""


def _book(src: Path) -> None:
    (src / "locale" / "zh_CN" / "LC_MESSAGES").mkdir(parents=True)
    (src / "_config.yml").write_text(textwrap.dedent("""\
        title: Fixture
        only_build_toc_files: true
        exclude_patterns: [_build, locale]
        execute:
          execute_notebooks: cache
        parse:
          myst_enable_extensions: [dollarmath]
        sphinx:
          config:
            extensions: [sphinx_comments, myst_nb, jupyter_book, sphinx_external_toc,
                         sphinx_book_theme, lipattn.book.sphinxext, lipattn.book.captions]
            html_theme: sphinx_book_theme
            lipattn_watch: []
            html_search_language: zh
            nb_mime_priority_overrides:
              - [html, application/vnd.jupyter.widget-view+json, 31]
            nb_ipywidgets_js: {}
            locale_dirs: [locale]
            gettext_compact: false
            gettext_uuid: false
            gettext_location: false
            lipattn_translation: {language: zh_CN, folder: zh, lang: zh-Hans, label: 中文,
                                  list: locale/zh_CN/TRANSLATED}
    """), encoding="utf-8")
    (src / "_toc.yml").write_text("format: jb-book\nroot: index\nchapters:\n"
                                  "  - file: page\n  - file: other\n")
    (src / "index.md").write_text("# Index\n\nThe index.\n")
    (src / "other.md").write_text("# Other\n\nNot translated yet.\n")
    (src / "page.md").write_text(_NOTEBOOK)
    (src / "quiz.yml").write_text(_QUIZ, encoding="utf-8")
    (src / "locale" / "zh_CN" / "TRANSLATED").write_text("# translated\npage\n")
    _po(src / "locale" / "zh_CN" / "LC_MESSAGES" / "page.po", _TRANSLATION)


def _run(src: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib")}
    proc = subprocess.run([*args], cwd=src, capture_output=True, text=True, timeout=600,
                          env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def _english(src: Path) -> subprocess.CompletedProcess:
    jb = Path(sys.executable).with_name("jupyter-book")
    return _run(src, str(jb), "build", ".", "--builder", "html", "-n", "-W", "--keep-going")


def _chinese(src: Path) -> subprocess.CompletedProcess:
    return _run(src, sys.executable, "-m", "lipattn.book.edition", "build", "-n", "-W",
                "--keep-going")


def _site(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes()
            for p in sorted(out.rglob("*")) if p.is_file()}


def test_the_chinese_build_reuses_the_cache_and_translates_glue(tmp_path: Path):
    src = tmp_path / "book"
    src.mkdir()
    _book(src)
    en = _english(src)
    assert "Executing notebook" in en.stdout + en.stderr
    from lipattn.book.sphinxext import explorers_pot, figures_pot

    alts = src / "_build" / "figures.pot"  # as `make gettext` does, from the English images
    assert figures_pot(src / "_build" / "html" / "_images", alts) == 2
    assert "A straight line." in alts.read_text(encoding="utf-8")
    _po(src / "locale" / "zh_CN" / "LC_MESSAGES" / "figures.po",
        {"A straight line.": "一条直线的图。"})
    texts = src / "_build" / "explorers.pot"  # the players' texts, from the English pages
    explorers_pot(src / "_build" / "html", texts)
    assert _messages(texts) == _TINY_MESSAGES
    _po(src / "locale" / "zh_CN" / "LC_MESSAGES" / "explorers.po", _TINY_ZH)
    en_player = _player((src / "_build" / "html" / "page.html").read_text(encoding="utf-8"))
    zh = _chinese(src)
    log = zh.stdout + zh.stderr
    assert "Executing notebook" not in log and "Using cached notebook" in log, log[-3000:]
    out = src / "_build" / "html"
    page = (out / "zh" / "page.html").read_text(encoding="utf-8")

    # language, translation, glue, math, code and cross-reference
    assert '<html lang="zh-Hans"' in page
    text = re.sub(r"<[^>]+>", "", page)
    assert "答案是 42.12，名称是 spectral，公式 \\(x^2\\)，代码 code；见 第一节。" in text
    assert "The answer is" not in text and "lp-untranslated" not in page
    assert 'href="#sec-first"' in page

    # twins, both ways; the untranslated page says so, in Chinese
    assert re.search(r'class="btn btn-sm lp-language" href="zh/page.html" hreflang="zh-Hans"',
                     (out / "page.html").read_text(encoding="utf-8"))
    assert re.search(r'class="btn btn-sm lp-language" href="../page.html" hreflang="en"', page)
    other = (out / "zh" / "other.html").read_text(encoding="utf-8")
    assert "lp-untranslated" in other and "本页尚未译成中文" in other
    assert '<div lang="en">' in other and "Not translated yet." in other
    english = (out / "other.html").read_text(encoding="utf-8")
    assert "lp-untranslated" not in english and '<html lang="en"' in english

    # the captions are translated (a glued figure's, and a code cell's, from its
    # metadata); a {glue:md} paste takes the page's Chinese value; the English
    # page keeps its own
    assert "一条线。" in text and "单元元数据里的图注。" in text
    assert "一个中文框" in text and "An English box" not in text
    en_page = (out / "page.html").read_text(encoding="utf-8")
    en_text = re.sub(r"<[^>]+>", "", en_page)
    assert "An English box" in en_text and "一个中文框" not in en_text
    # so does a {glue} paste of any mime type (a quiz's HTML, glued in both
    # languages by Quiz.glue_yaml); the cell's own output is not on the page
    assert page.count('class="lipattn-quiz') == 1 and 'lang="zh"' in page
    assert "第 1 题：一个中文问题？" in text and "中文反例。" in text and "自测" in text
    assert "An English question" not in text and "English why" not in text
    assert en_page.count('class="lipattn-quiz') == 1 and 'lang="en"' in en_page
    assert "Q1. An English question?" in en_text and "English why not." in en_text
    assert "一个中文问题" not in en_text and "Self-check" in en_text
    assert "A caption in the" in en_text and "metadata." in en_text
    # the interface texts the book adds are the page's language: the note on
    # running the page, and myst-nb's prompt of a collapsed code cell
    assert "自己运行本页。" in page and "Run this page yourself" not in page
    assert "Run this page yourself." in en_page and "自己运行本页" not in en_page
    assert "展开代码单元" in text and "Show code cell" not in text
    assert "Show code cell source" in en_text
    # the alt text (set in code) comes from figures.po
    assert 'alt="A straight line."' in (out / "page.html").read_text(encoding="utf-8")
    assert 'alt="一条直线的图。"' in page

    # the explorer's texts come from explorers.po ("curve" is not translated:
    # English, marked so); its frames, data and script are the English build's
    zh_player = _player(page)
    _check_translated_player(zh_player, en_player, "zh-Hans")
    assert (out / "zh" / "_static" / "frames" / "tiny").is_dir()
    assert _player((out / "page.html").read_text(encoding="utf-8")) == en_player
    assert '<a class="lp-skip-explorer" href="#explorer-tiny">跳到第一个探索器</a>' in page

    # nothing of the zh build inside the English site but zh/
    assert not (out / "jupyter_execute").exists() and not (out / "lipattn-mathjax").exists()
    assert (out / "zh" / "_static" / "mathjax" / "es5" / "tex-chtml.js").is_file()

    # the Chinese search index holds the translated words (jieba)
    index = (out / "zh" / "searchindex.js").read_text(encoding="utf-8")
    data = json.loads(index[index.index("(") + 1:index.rindex(")")])
    assert {"答案", "名称"} <= set(data["terms"]), sorted(data["terms"])[:40]

    # a second build of each language changes nothing in either site
    site = _site(out)
    assert "no targets are out of date" in _english(src).stdout
    assert "no targets are out of date" in _chinese(src).stdout
    assert _site(out) == site

    # a page that joins the list loses its notice at the next build
    (src / "locale" / "zh_CN" / "TRANSLATED").write_text("page\nother\n")
    _chinese(src)
    assert "lp-untranslated" not in (out / "zh" / "other.html").read_text(encoding="utf-8")


def test_a_changed_english_paragraph_is_caught(tmp_path: Path):
    """The in-step check: after an English edit, the fresh .pot has a message
    that the catalogue lacks."""
    src = tmp_path / "book"
    src.mkdir()
    _book(src)
    po = src / "locale" / "zh_CN" / "LC_MESSAGES" / "page.po"
    assert missing_messages(pot(src, tmp_path / "gt1") / "page.pot", po) == []
    (src / "page.md").write_text(_NOTEBOOK.replace("and the name", "and its name"))
    missing = missing_messages(pot(src, tmp_path / "gt2") / "page.pot", po)
    assert len(missing) == 1 and "and its name" in missing[0]


# --- the built site -------------------------------------------------------------

def _pages(site: Path) -> list[str]:
    return sorted(p.relative_to(site).as_posix() for p in (site / "chapters").glob("*.html"))


@pytest.mark.book
def test_both_editions_have_the_same_pages_and_link_to_each_other(built_html: Path):
    zh = built_html / "zh"
    assert _pages(built_html) and _pages(zh) == _pages(built_html)
    for rel in _pages(built_html):
        en_page = (built_html / rel).read_text(encoding="utf-8")
        zh_page = (zh / rel).read_text(encoding="utf-8")
        name = rel.split("/")[-1]
        assert f'href="../zh/chapters/{name}" hreflang="zh-Hans"' in en_page, rel
        assert f'href="../../chapters/{name}" hreflang="en"' in zh_page, rel
        assert '<html lang="zh-Hans"' in zh_page, rel
        docname = rel[:-5]
        native = docname == "chapters/review_zh"
        assert ("lp-untranslated" in zh_page) == (docname not in TRANSLATED and not native), rel


@pytest.mark.book
@pytest.mark.parametrize("rel", ["chapters/" + p.stem + ".html"
                                 for p in sorted((ROOT / "chapters").glob("*.md"))])
def test_every_glued_number_is_in_the_chinese_page(built_html: Path, rel: str):
    """Glue roles survive translation: the zh page pastes as many values as
    the English one, and each of its values without Chinese characters (a
    number; not a ``K_zh`` phrase) is one of the English page's (up to
    typographic quotes: Sphinx's smart quotes are language-dependent)."""
    quotes = str.maketrans("\u2018\u2019\u201c\u201d", "''\"\"")

    def pasted(path: Path) -> list[str]:
        return [v.translate(quotes) for v in re.findall(
            r'<span class="pasted-text">([^<]*)</span>', path.read_text(encoding="utf-8"))]

    en, zh = pasted(built_html / rel), pasted(built_html / "zh" / rel)
    assert len(zh) == len(en)
    shared = Counter(v for v in zh if not re.search(r"[\u3000-\u9fff\uff00-\uffef]", v))
    assert not shared - Counter(en), dict(shared - Counter(en))


@pytest.mark.book
def test_the_chinese_search_index_splits_chinese_words(built_html: Path):
    index = (built_html / "zh" / "searchindex.js").read_text(encoding="utf-8")
    data = json.loads(index[index.index("(") + 1:index.rindex(")")])
    for term in ("谱范数", "预热", "范数"):
        assert term in data["terms"], term


# --- figure alt text -------------------------------------------------------------

def test_figure_alt_text_comes_from_the_figures_catalogue(tmp_path: Path):
    """Alt text is set in code (plotting.set_alt), not in the page: `make
    gettext` collects it from the English build's images (figures.pot), and
    the translation's figures take it from figures.po (fuzzy or empty
    entries stay English)."""
    from babel.messages.pofile import read_po

    from lipattn.book import plotting
    from lipattn.book.sphinxext import alt_catalogue, figures_pot, rewrite_page

    site = tmp_path / "site"
    (site / "chapters").mkdir(parents=True)
    (site / "_images").mkdir()
    alts = {"a.png": "Two panels: the norm against n.", "b.png": "A heatmap of the weights."}
    for name, alt in alts.items():
        fig, ax = plotting.figure(width=4.0, height=2.0)
        ax.plot([0, 1], [0, 1])
        plotting.set_alt(fig, alt)
        (site / "_images" / name).write_bytes(plotting.figure_png(fig))
    pot = tmp_path / "figures.pot"
    assert figures_pot(site / "_images", pot) == 2
    with open(pot, "rb") as f:
        assert sorted(m.id for m in read_po(f) if m.id) == sorted(alts.values())

    po = _po(tmp_path / "figures.po", {alts["a.png"]: "两幅图：范数随 n 的变化。"},
             f'#, fuzzy\nmsgid "{alts["b.png"]}"\nmsgstr "权重热图（待校）。"\n')
    table = alt_catalogue(po)
    assert table == {alts["a.png"]: "两幅图：范数随 n 的变化。"}
    page = "".join(f'<img alt="../_images/{n}" src="../_images/{n}" />' for n in alts)
    out = rewrite_page(page, site / "chapters", site / "_static", None, table)
    assert 'alt="两幅图：范数随 n 的变化。"' in out
    assert f'alt="{alts["b.png"]}"' in out  # fuzzy: the English stays
    english = rewrite_page(page, site / "chapters", site / "_static", None)
    assert f'alt="{alts["a.png"]}"' in english
    assert alt_catalogue(tmp_path / "missing.po") == {}


# --- the explorers' texts ----------------------------------------------------------

#: The word-bearing texts of the fixture's explorer (``Tiny``, declared in
#: ``_NOTEBOOK``; numbers and math such as "0.5" have no message), the note of
#: every player (``{n}``: its number of frames) and the pages' skip link.
_NOTE = ("Precomputed player: {n} frames rendered by <code>lipattn</code> when the book "
         "was built. Run the page as a notebook for the live widget.")
_TINY_MESSAGES = {"A tiny explorer: y = a·x", "slope a", "shape", "line", "curve",
                  "steep line", "Try:", "Try a preset", _NOTE, "Skip to the first explorer"}
_TINY_ZH = {"A tiny explorer: y = a·x": "小探索器：y = a·x", "slope a": "斜率 a",
            "shape": "形状", "line": "直线", "steep line": "陡的直线", "Try:": "试试：",
            "Try a preset": "试一个预设",
            _NOTE: "预先计算的播放器：构建本书时由 <code>lipattn</code> 渲染的 {n} 帧。",
            "Skip to the first explorer": "跳到第一个探索器"}


def _messages(pot: Path) -> set[str]:
    return {m.id for m in _read(pot) if m.id}


class _Tags:
    """Whether HTML is well nested (every element closed, in order; void
    elements excepted), with Python's own parser."""

    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta",
            "source", "track", "wbr"}

    @classmethod
    def balanced(cls, text: str) -> bool:
        from html.parser import HTMLParser

        stack: list[str] = []
        ok = [True]

        class P(HTMLParser):
            def handle_starttag(self, tag, attrs):
                if tag not in cls.VOID:
                    stack.append(tag)

            def handle_endtag(self, tag):
                if not stack or stack.pop() != tag:
                    ok[0] = False

        P().feed(text)
        return ok[0] and not stack


def _player(page: str) -> dict:
    """The first player of ``page``: its HTML, the texts a reader and a screen
    reader get (title, controls with the text of their label, buttons, note,
    alt text; each with its lang attribute) and its JSON data."""
    from bs4 import BeautifulSoup

    start = page.index('<div class="lipattn-player"')
    end = page.index("</script></div>", page.index('class="lp-data"', start)) + 15
    html = page[start:end]
    soup = BeautifulSoup(html, "html.parser")
    root = soup.div

    def said(el) -> tuple[str, str | None]:
        lang = next((p.get("lang") for p in [el, *el.parents] if p.get("lang")), None)
        return el.get_text().strip(), lang

    controls = []
    for ctl in root.select(".lp-control"):
        if ctl.name == "input":  # a slider: its label holds its name and its output
            label = ctl.find_parent("label")
            controls.append(("slider", said(label.span), ctl["aria-valuetext"],
                             label.output.get_text()))
        else:
            controls.append(("choice", said(ctl.legend),
                             [said(r.find_parent("label")) for r in ctl.select("input")]))
    return {"html": html, "lang": root.get("lang"), "title": said(root.select_one(".lp-title")),
            "labelledby": soup.find(id=root["aria-labelledby"]).get_text(),
            "controls": controls, "frame": root["data-frame"],
            "presets": [said(b) for b in root.select("button.lp-preset")],
            "try": said(root.select_one(".lp-presets span")),
            "group": root.select_one(".lp-presets")["aria-label"],
            "note": said(root.select_one(".lp-note")),
            "alt": root.select_one("img.lp-frame")["alt"],
            "data": json.loads(root.select_one("script.lp-data").string)}


def _tags(text: str) -> Counter:
    return Counter(re.findall(r"</?[a-z][^>]*>", text))


@pytest.mark.parametrize("domain", [EXPLORERS_DOMAIN, FIGURES_DOMAIN])
def test_the_explorers_and_figures_catalogues_are_complete(domain: str):
    """explorers.po (the players' texts) and figures.po (the figures' alt
    texts) are translated: no untranslated, fuzzy or obsolete entry, markup
    and HTML tags kept, ``{n}`` kept."""
    po = LOCALE / f"{domain}.po"
    assert po.is_file(), f"no {domain}.po: run `make html-en`, then `make gettext`"
    problems = po_problems(po)
    for msg in _read(po):
        if msg.id and msg.string:
            if _tags(msg.id) != _tags(msg.string):
                problems.append(f"HTML tags not kept in {msg.id[:60]!r}")
            if msg.string.count("{n}") != msg.id.count("{n}"):
                problems.append(f"{{n}} not kept in {msg.id[:60]!r}")
    assert not problems, f"{domain}.po:\n  " + "\n  ".join(problems[:20])


@pytest.mark.book
@pytest.mark.parametrize("domain", [EXPLORERS_DOMAIN, FIGURES_DOMAIN])
def test_the_explorers_and_figures_catalogues_are_in_step_with_the_english(
        domain: str, built_html: Path, tmp_path: Path):
    """Every text of the English site's players (explorers.po) and every alt
    text of its figures (figures.po) is in the catalogue (else the English
    changed, or an explorer or figure was added, and `make gettext` was not
    run)."""
    from lipattn.book.sphinxext import explorers_pot, figures_pot

    pot = tmp_path / f"{domain}.pot"
    if domain == FIGURES_DOMAIN:
        assert figures_pot(built_html / "_images", pot) > 0
    else:
        assert explorers_pot(built_html, pot) > 0
    missing = missing_messages(pot, LOCALE / f"{domain}.po")
    assert not missing, (f"{domain}.po lacks texts of the English site (`make gettext`, "
                         f"then translate): {missing[:5]}")


def _check_translated_player(zh: dict, en: dict, lang: str) -> None:
    """The fixture explorer's player translated from ``_TINY_ZH`` ("curve" has
    no translation) against its English player: the same controls, frames and
    data but for the texts."""
    assert _Tags.balanced(zh["html"])
    assert en["lang"] is None and zh["lang"] == lang
    assert en["title"] == ("A tiny explorer: y = a·x", None)
    assert zh["title"] == ("小探索器：y = a·x", lang) and zh["labelledby"] == "小探索器：y = a·x"
    assert en["controls"][0] == ("slider", ("slope a", None), "1", "1")
    assert zh["controls"] == [("slider", ("斜率 a", lang), "1", "1"),
                              ("choice", ("形状", lang), [("直线", lang), ("curve", "en")])]
    assert zh["presets"] == [("陡的直线", lang)] and zh["try"] == ("试试：", lang)
    assert zh["group"] == "试一个预设"
    assert zh["note"] == ("预先计算的播放器：构建本书时由 lipattn 渲染的 6 帧。", lang)
    assert en["alt"] == "A tiny explorer: y = a·x: slope a 1, shape line"
    assert zh["alt"] == "小探索器：y = a·x: 斜率 a 1, 形状 直线"  # as the script writes it
    assert zh["frame"] == en["frame"]
    d_en, d_zh = en["data"], zh["data"]
    assert d_zh["title"] == "小探索器：y = a·x" and d_zh["names"] == ["斜率 a", "形状"]
    assert d_zh["labels"] == [["0.5", "1", "2"], ["直线", "curve"]]
    assert d_en["names"] == ["slope a", "shape"] and d_en["labels"][1] == ["line", "curve"]
    for key in ("shape", "frames", "mime"):
        assert d_zh[key] == d_en[key], key
    assert len(d_zh["urls"]) == len(d_en["urls"]) == len(set(d_en["frames"]))


def test_explorer_texts_come_from_the_explorers_catalogue(tmp_path: Path):
    """The players' texts are set in code (the explorers' declarations), not in
    the page: `make gettext` collects them from the English build's pages
    (explorers.pot), and the translation's players take them from
    explorers.po (fuzzy or empty entries stay English, marked lang="en");
    the frames and the data the script needs are untouched."""
    from lipattn.book.sphinxext import alt_catalogue, explorers_pot, rewrite_page

    ns: dict = {}
    cell = _NOTEBOOK.split("from lipattn.book.widgets import Explorer, Slider")[1]
    exec("import numpy as np\nfrom lipattn.book.widgets import Explorer, Slider"
         + cell.split("Tiny()")[0], ns)
    player = ns["Tiny"]().player_html()
    page = ('<div id="pst-skip-link" class="skip-link d-print-none"><a href="#main-content">'
            "Skip to main content</a></div><main>" + player + "<p>After.</p></main>")
    site = tmp_path / "site"
    (site / "chapters").mkdir(parents=True)
    english = rewrite_page(page, site / "chapters", site / "_static", None)
    (site / "chapters" / "p.html").write_text(english, encoding="utf-8")
    (site / "zh" / "chapters").mkdir(parents=True)  # a translation's site is skipped
    (site / "zh" / ".buildinfo").write_text("")
    (site / "zh" / "chapters" / "p.html").write_text(english.replace("slope a", "zh only"))
    pot = tmp_path / "explorers.pot"
    assert explorers_pot(site, pot) == len(_TINY_MESSAGES)
    assert _messages(pot) == _TINY_MESSAGES

    po = _po(tmp_path / "explorers.po", {k: v for k, v in _TINY_ZH.items() if k != "line"},
             '#, fuzzy\nmsgid "line"\nmsgstr "直线"\n')
    table = alt_catalogue(po)
    assert "line" not in table and table["shape"] == "形状"
    zh_site = tmp_path / "zh"
    zh = rewrite_page(page, zh_site, zh_site / "_static", None, {}, table, "zh-Hans")
    assert rewrite_page(zh, zh_site, zh_site / "_static", None, {}, table, "zh-Hans") == zh
    got, en = _player(zh), _player(english)
    # the fuzzy "line" stays English, marked so, everywhere it shows
    assert got["controls"][1] == ("choice", ("形状", "zh-Hans"), [("line", "en"), ("curve", "en")])
    assert got["alt"] == "小探索器：y = a·x: 斜率 a 1, 形状 line"
    table["line"] = "直线"
    zh = rewrite_page(page, zh_site, zh_site / "_static", None, {}, table, "zh-Hans")
    _check_translated_player(_player(zh), en, "zh-Hans")
    assert '<a class="lp-skip-explorer" href="#explorer-tiny">跳到第一个探索器</a>' in zh
    assert "<p>After.</p></main>" in zh and zh.count('class="lipattn-player"') == 1
    assert _Tags.balanced(zh) and _Tags.balanced(english)
    # the English build's player is left as it was written
    again = rewrite_page(page, site / "chapters", site / "_static", None)
    assert _player(again)["html"] == en["html"]
    with pytest.raises(ValueError, match="lang"):
        rewrite_page(page, zh_site, zh_site / "_static", None, {}, table)
