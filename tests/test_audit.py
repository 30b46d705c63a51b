"""The audit's data structure and its renderings (lipattn/book/audit.py)."""

from __future__ import annotations

import re

import pytest
from conftest import ROOT
from markdown_it import MarkdownIt

from lipattn.book import audit
from lipattn.book.audit import CLAIMS, VERDICTS, Claim, Part

CHAPTERS = ROOT / "chapters"


def _table_rows(markdown: str) -> list[list[str]]:
    """Cells of a MyST list-table, parsed by markdown-it (the parser MyST uses):
    the directive's body is a list of rows, each a list of cells."""
    lines = markdown.splitlines()
    assert lines[0] == "```{list-table}" and lines[-1] == "```"
    body = "\n".join(line for line in lines[1:-1] if not line.startswith(":"))
    rows, depth = [], 0
    for tok in MarkdownIt("commonmark").parse(body):
        if tok.type == "bullet_list_open":
            depth += 1
        elif tok.type == "bullet_list_close":
            depth -= 1
        elif tok.type == "list_item_open" and depth == 1:
            rows.append([])
        elif tok.type == "inline" and depth == 2:
            rows[-1].append(tok.content)
    return rows


def test_the_card_has_eight_claims_with_known_verdicts():
    assert [c.number for c in CLAIMS] == list(range(1, 9))
    for c in CLAIMS:
        assert c.parts and all(p.verdict in VERDICTS for p in c.parts)
        assert (CHAPTERS / f"{c.chapter}.md").is_file()
        assert set(c.trap) == {"en", "zh"}
        assert re.search(r"[\u4e00-\u9fff]", c.trap["zh"]), c.number


def test_table_has_one_row_per_claim_matching_the_data():
    table = audit.verdict_table()
    assert ":widths: 50 16 34" in table.splitlines()[:4]
    rows = _table_rows(table)
    assert rows[0] == ["The card says", "Verdict", "The truth, and where it is proved"]
    body = rows[1:]
    assert len(body) == len(CLAIMS)
    for row, c in zip(body, CLAIMS, strict=True):
        assert len(row) == 3
        assert row[0].startswith(f"**{{ref}}`{c.number} <audit-claim-{c.number}>`** ")
        for p in c.parts:
            assert p.says in row[0]
            assert f"**{p.verdict}**" in row[1]
        assert row[2].startswith(c.short)
        assert f"{{doc}}`Ch. {int(c.chapter[:2])} <{c.chapter}>`" in row[2]
        for ref in c.refs:
            assert f"{{prf:ref}}`{ref}`" in row[2]


def test_multi_part_verdicts_are_numbered_in_claim_and_verdict():
    two = next(c for c in CLAIMS if len(c.parts) == 2)
    row = _table_rows(audit.verdict_table((two,)))[1]
    assert "** (1) " in row[0] and " (2) " in row[0]
    assert row[1] == f"**{two.parts[0].verdict}** (1); **{two.parts[1].verdict}** (2)"


def test_box_repeats_the_tables_row():
    for c in CLAIMS:
        box = audit.claim_box(c.number)
        assert all(line.startswith(">") for line in box.splitlines())
        assert c.correct in box and f"{{doc}}`{c.chapter}`" in box
        for p in c.parts:
            assert p.says in box and p.verdict in box and p.size in box


def test_one_scale_for_every_verdict():
    """Every verdict has one definition, the page shows it from the data, and every
    part says how large its discrepancy is (the verdict says only what kind)."""
    assert tuple(audit.SCALE) == VERDICTS
    lines = audit.scale_list().splitlines()
    assert [line.split("**")[1] for line in lines] == list(VERDICTS)
    page = (CHAPTERS / "audit.md").read_text(encoding="utf-8")
    assert "audit.scale_list(" in page
    for c in CLAIMS:
        for p in c.parts:
            assert p.size.strip() and not re.search(r"\d\.\d", p.size), (c.number, p.size)
    with pytest.raises(ValueError, match="size"):
        Part("x", "false", " ")


def test_audit_page_has_one_section_per_claim_in_order():
    """Headings name the claims' topics and carry the labels the table links to;
    each section shows its box and asserts the data structure's verdicts."""
    page = (CHAPTERS / "audit.md").read_text(encoding="utf-8")
    found = re.findall(r"^\(audit-claim-(\d)\)=\n## Claim (\d): (.+)$", page, re.M)
    assert [(int(a), int(b), t) for a, b, t in found] == [
        (c.number, c.number, c.topic) for c in CLAIMS]
    for c in CLAIMS:
        assert f"```{{glue:md}} box_{c.number}\n:format: myst\n```" in page
        assert f"audit.claim({c.number}).verdicts == {c.verdicts!r}".replace("'", "\"") in page


def test_traps_one_line_per_claim_per_language():
    en, zh = audit.traps("en").splitlines(), audit.traps("zh").splitlines()
    assert len(en) == len(zh) == len(CLAIMS)
    for line_en, line_zh, c in zip(en, zh, CLAIMS, strict=True):
        assert line_en.startswith(f"{c.number}. ") and c.trap["en"] in line_en
        assert c.trap["zh"] in line_zh and f"<audit-claim-{c.number}>" in line_zh
    assert "**错误**" in audit.traps("zh") and "**false**" not in audit.traps("zh")


def test_interview_answer_renders_the_bilingual_source():
    """The chapters' sections and the review sheets render the same source."""
    from lipattn.book import interview

    for stem in interview.CHAPTERS:
        for lang in ("en", "zh"):
            assert audit.interview_answer(stem, lang) == interview.answer(stem, lang)
        assert audit.interview_answer(CHAPTERS / f"{stem}.md") == interview.answer(stem)
        page = (CHAPTERS / f"{stem}.md").read_text(encoding="utf-8")
        section = page.split("## Interview answer\n", 1)[1].split("\n## ", 1)[0]
        # glued in both languages (the Chinese edition pastes interview_zh)
        assert f'stem = "{stem}"' in section and "interview_answer(stem, lang)" in section
        assert 'glue("interview", answer["en"]' in section
        assert 'glue("interview_zh", answer["zh"]' in section
        assert "tags: [remove-cell]" in section
        assert "```{glue:md} interview\n:format: myst\n```" in section
        assert section.count("```{code-cell}") == 1 and ">" not in section.replace("->", "")
    with pytest.raises(ValueError, match="chapter must be one of"):
        audit.interview_answer("audit")


def test_bad_inputs():
    with pytest.raises(ValueError, match="verdict must be one of"):
        Part("x", "maybe", "s")
    with pytest.raises(ValueError, match="says must be"):
        Part(" ", "true", "s")
    with pytest.raises(ValueError, match="parts must not be empty"):
        Claim(9, "t", (), "c", "s", "01_softmax_jacobian", (), {"en": "e", "zh": "z"})
    with pytest.raises(ValueError, match="trap must have"):
        Claim(9, "t", (Part("x", "true", "s"),), "c", "s", "01_softmax_jacobian", (),
              {"en": "e"})
    good = dict(number=9, topic="t", parts=(Part("x", "true", "s"),), correct="c", short="s",
                chapter="01_softmax_jacobian", refs=(), trap={"en": "e", "zh": "z"})
    for arg, bad in (("number", "one"), ("number", 1.0), ("number", True), ("number", 0),
                     ("topic", None), ("correct", 1), ("short", b"s"), ("chapter", "ch"),
                     ("parts", "x"), ("refs", "thm"), ("refs", (1,)), ("trap", None),
                     ("trap", {"en": None, "zh": "z"})):
        with pytest.raises((TypeError, ValueError), match=arg):
            Claim(**good | {arg: bad})
    with pytest.raises(ValueError, match="number must be one of"):
        audit.claim(9)
    with pytest.raises(TypeError, match="number must be an int"):
        audit.claim("1")
    with pytest.raises(TypeError, match="claims must be"):
        audit.verdict_table(())
    with pytest.raises(ValueError, match="lang must be one of"):
        audit.traps("fr")


def test_review_sheets_agree():
    """Both sheets: every chapter's question and answer rendered from the
    bilingual source in the sheet's language, the same chapters, the traps
    from lipattn.book.audit, the same quiz questions; no visible code cell before
    the first question."""
    from lipattn.book import interview

    en = (CHAPTERS / "review.md").read_text(encoding="utf-8")
    zh = (CHAPTERS / "review_zh.md").read_text(encoding="utf-8")
    for page, lang in ((en, "en"), (zh, "zh")):
        cards = re.findall(r'^card\("([0-9a-z_]+)", "([a-z]+)"\)$', page, re.M)
        assert cards == [(stem, lang) for stem in interview.CHAPTERS]
        first = page.split("```{code-cell} ipython3\n", 1)[1]
        assert first.startswith(":tags: [remove-cell]") or first.startswith("---\ntags: [remove")
    docs = [re.findall(r"\{doc\}`(?:[^`<]*<)?([^`>]+)>?`", page) for page in (en, zh)]
    chapters = {c.chapter for c in CLAIMS} | {"audit"} | set(interview.CHAPTERS)
    assert chapters <= set(docs[0]) and chapters <= set(docs[1])
    assert 'audit.traps("{lang}")' not in en
    assert 'glue("traps", Markdown(audit.traps("en"))' in en
    assert 'glue("traps_zh", Markdown(audit.traps("zh"))' in zh
    picks = [re.search(r"^picks = (\[.*?\])", page, re.M).group(1) for page in (en, zh)]
    assert picks[0] == picks[1]


def test_review_pages_do_not_point_at_a_chapter():
    """A review page is not a chapter: neither the sheet nor the quiz
    questions it draws say "this chapter", 本章 or 这里."""
    from lipattn.book.quiz import Quiz

    pattern = re.compile(r"\bthis chapter\b|\bthe chapter\b|本章|这里|\bthis page\b", re.I)
    for name, lang in (("review", "en"), ("review_zh", "zh")):
        page = (CHAPTERS / f"{name}.md").read_text(encoding="utf-8")
        assert not pattern.search(page), name
        picks = eval(re.search(r"^picks = (\[.*?\])", page, re.M).group(1))
        stems = re.findall(r'^card\("([0-9a-z_]+)"', page, re.M)
        for stem, k in zip(stems, picks, strict=True):
            q = Quiz.from_yaml(CHAPTERS / "quizzes" / f"{stem}.yml", lang=lang, select=[k])
            html = q._repr_html_()
            assert not pattern.search(html), (stem, k)
        assert not pattern.search(audit.traps(lang))


def test_traps_quote_the_card_and_use_full_width_punctuation():
    zh = audit.traps("zh")
    for c, line in zip(CLAIMS, zh.splitlines(), strict=True):
        assert line.startswith(f"{c.number}. 卡片：“")
        if len(c.parts) > 1:
            assert "（1）" in line and "（2）" in line and "(1)" not in line
    prose = re.sub(r"\$[^$]*\$|`[^`]*`", "M", zh)
    assert not re.search(r"[\u4e00-\u9fff][,;:()]|[,;:()][\u4e00-\u9fff]", prose)
    assert not re.search(r"[：；，。] ", prose) and "详见" not in prose
    assert not re.search(r"残差(?!连接|流|缩放)", prose)
    assert "放大效应" not in prose.split("预热")[1][:20]  # not "warm-up is the amplification"
    for c, line in zip(CLAIMS, audit.traps("en").splitlines(), strict=True):
        for p in c.parts:
            assert p.says in line


def _math(text: str) -> list[str]:
    return sorted(re.sub(r"\s+", "", m) for m in re.findall(r"\$[^$]+\$", text))


def test_chinese_scale_table_and_boxes_follow_the_english():
    """The Chinese renderings (the audit page's ``*_zh`` glue) have the same
    claims, verdicts, formulas and links as the English ones, full-width
    punctuation, and every bold span closes under CommonMark."""
    from mdit_py_plugins.dollarmath import dollarmath_plugin

    md = MarkdownIt("commonmark").use(dollarmath_plugin)
    words = audit._VERDICT_WORDS["zh"]
    rows_en = _table_rows(audit.verdict_table())
    rows_zh = _table_rows(audit.verdict_table(lang="zh"))
    assert len(rows_zh) == len(rows_en) == len(CLAIMS) + 1
    for c, en, zh in zip(CLAIMS, rows_en[1:], rows_zh[1:], strict=True):
        assert _math(" ".join(en)) == _math(" ".join(zh))
        assert re.findall(r"\{[a-z:]+\}`[^`]*<([^>]+)>`|\{prf:ref\}`([^`]+)`", en[2]) == \
            re.findall(r"\{[a-z:]+\}`[^`]*<([^>]+)>`|\{prf:ref\}`([^`]+)`", zh[2])
        assert [words[v] for v in c.verdicts] == re.findall(r"\*\*([^*]+)\*\*", zh[1])
    for c in CLAIMS:
        en, zh = audit.claim_box(c.number), audit.claim_box(c.number, "zh")
        assert _math(en) == _math(zh)
        assert zh.count("\n") == en.count("\n")
        assert all(f"{{prf:ref}}`{r}`" in zh for r in c.refs)
    scale = audit.scale_list("zh").splitlines()
    assert [re.match(r"- \*\*(.+?)\*\*：", s).group(1) for s in scale] == [
        words[v] for v in VERDICTS]
    for text in (audit.scale_list("zh"), audit.verdict_table(lang="zh"),
                 *(audit.claim_box(c.number, "zh") for c in CLAIMS)):
        for tok in md.parse(text):
            for t in tok.children or ():
                assert t.type != "text" or "*" not in t.content, t.content
        prose = re.sub(r"\$[^$]*\$|`[^`]*`", "M", text)
        assert not re.search(r"[\u4e00-\u9fff][,;:()]|[,;:()][\u4e00-\u9fff]", prose)
        assert not re.search(r"残差(?!连接|流|缩放)", prose)
    for f in (audit.scale_list, lambda lang: audit.verdict_table(lang=lang),
              lambda lang: audit.claim_box(1, lang)):
        with pytest.raises(ValueError, match="lang must be one of"):
            f("fr")
    assert audit.scale_list() == audit.scale_list("en")
