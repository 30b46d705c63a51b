"""The interview answers (lipattn/book/interview.py and chapters/interview/*.yml)."""

from __future__ import annotations

import re
import shutil

import pytest
import yaml
from markdown_it import MarkdownIt

from lipattn.book import interview as iv

CJK = re.compile(r"[\u4e00-\u9fff]")
MATH = re.compile(r"\$\$.*?\$\$|\$[^$]*\$|`[^`]*`", re.S)


def _zh_texts():
    """Every Chinese text of every answer, with its location."""
    for stem in iv.CHAPTERS:
        for where, field in iv._bilingual_fields(iv.load(stem)):
            texts = field["zh"] if isinstance(field["zh"], list) else [field["zh"]]
            for t in texts:
                yield f"{stem}: {where}", t


def test_every_chapter_has_a_complete_answer_in_both_languages():
    for stem in iv.CHAPTERS:
        data = iv.load(stem)
        assert len(data["points"]["en"]) == len(data["points"]["zh"]) == 5
        assert data["follow_ups"] and data["names"], stem
        words = len(data["spoken"]["en"].split())
        assert 60 <= words <= 90, f"{stem}: the spoken answer has {words} words"
        chars = len(CJK.findall(data["spoken"]["zh"]))
        assert 100 <= chars <= 200, f"{stem}: the Chinese spoken answer has {chars} characters"
        for where, field in iv._bilingual_fields(data):
            zh = field["zh"] if isinstance(field["zh"], str) else " ".join(field["zh"])
            assert CJK.search(zh), f"{stem}: {where} has no Chinese"


def test_the_chinese_is_up_to_date_with_the_english():
    """The staleness check: each Chinese text records the hash of the English
    it was translated from. Changing the English fails this test until the
    Chinese is updated and its zh_from set to the new hash."""
    stale = [s for stem in iv.CHAPTERS for s in iv.stale_fields(stem)]
    assert not stale, "\n".join(stale)


def test_the_staleness_check_can_fail(tmp_path):
    for stem in iv.CHAPTERS:
        shutil.copy(iv.FOLDER / f"{stem}.yml", tmp_path)
    stem = iv.CHAPTERS[2]
    path = tmp_path / f"{stem}.yml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert iv.stale_fields(stem, tmp_path) == []
    data["points"]["en"][3] += " Changed."
    data["follow_ups"][0]["a"].pop("zh")
    path.write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False), encoding="utf-8")
    stale = iv.stale_fields(stem, tmp_path)
    assert len(stale) == 2
    assert "points: the English changed" in stale[0]
    assert iv.en_hash(data["points"]["en"]) in stale[0]
    assert "follow_ups[0].a needs both" in stale[1]


def test_en_hash_is_the_sha256_of_the_text():
    import hashlib

    assert iv.en_hash(" ab \n") == hashlib.sha256(b"ab").hexdigest()[:12]
    assert iv.en_hash(["a", "b"]) == hashlib.sha256(b"a\nb").hexdigest()[:12]
    with pytest.raises(TypeError, match="text must be"):
        iv.en_hash(3)


def _tokens(markdown: str):
    return MarkdownIt("commonmark").parse(markdown)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_rendered_answer_has_the_spoken_version_first_and_a_real_list(lang):
    for stem in iv.CHAPTERS:
        data = iv.load(stem)
        text = iv.answer(stem, lang)
        assert text.startswith(f"**{iv._LABELS[lang]['spoken']}**")
        assert data["spoken"][lang].strip() in text.split("\n\n")[0]
        toks = _tokens(text)
        ordered = [t for t in toks if t.type == "ordered_list_open"]
        assert len(ordered) == 1
        items = [t for t in toks if t.type == "list_item_open" and t.level == 1]
        n_bullets = len(data["follow_ups"]) + len(data["names"])
        assert len(items) == 5 + n_bullets, stem
        assert f"$$\n{data['whiteboard']}\n$$" in text
        order = [text.index(f"**{iv._LABELS[lang][p]}**") for p in iv.PARTS]
        assert order == sorted(order)
    only = iv.answer(iv.CHAPTERS[0], lang, parts=("spoken",))
    assert "\n\n" not in only


def test_chinese_typography():
    """Full-width punctuation next to Chinese, nothing after a full-width
    colon, no italics on Chinese, no pointers a candidate cannot say, and
    残差 only in 残差连接 and 残差流 (res X is 偏离量)."""
    for where, text in _zh_texts():
        prose = MATH.sub("M", text)
        assert not re.search(r"[\u4e00-\u9fff][,;:()!?]|[,;:()!?][\u4e00-\u9fff]", prose), \
            (where, text)
        assert not re.search(r"[：；，。] ", prose), (where, text)
        assert not re.search(r"\*[^*]*[\u4e00-\u9fff][^*]*\*(?!\*)", prose.replace("**", "")), \
            where
        assert not re.search(r"本章|这里|我们的|第 ?\d ?章|详见", prose), (where, text)
        assert not re.search(r"残差(?!连接|流)", prose), (where, text)
    zh = iv.answer(iv.CHAPTERS[0], "zh")
    assert zh.startswith("**30 秒回答**：") and "：** " not in zh and "** " not in zh


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_bold_run_closes(lang):
    """CommonMark closes ``**`` only when it is right-flanking: a Chinese
    label or question ending in full-width punctuation and followed by a
    Chinese character would print its asterisks. Parse the rendered answers
    and check that no ``*`` is left in the text."""
    from conftest import ROOT

    from lipattn.book import audit

    sheet = "review_zh" if lang == "zh" else "review"
    texts = {stem: iv.answer(stem, lang) for stem in iv.CHAPTERS}
    texts["traps"] = audit.traps(lang)
    texts[sheet] = (ROOT / "chapters" / f"{sheet}.md").read_text(encoding="utf-8")
    for stem, text in texts.items():
        tokens = _tokens(text)
        for tok in tokens:
            for child in tok.children or []:
                if child.type == "text":
                    assert "*" not in MATH.sub("M", child.content), (stem, child.content)


def test_english_has_no_pointers_a_candidate_cannot_say():
    for stem in iv.CHAPTERS:
        text = iv.answer(stem, "en")
        assert not re.search(r"this chapter|the chapter|our experiment|next chapter|Chapter \d",
                             text, re.I), stem


def test_cited_names_are_the_checked_ones():
    """The names interviewers quote, each with its venue."""
    names = " ".join(n["en"] for stem in iv.CHAPTERS for n in iv.load(stem)["names"])
    for needle in ("Dong, Cordonnier & Loukas (ICML 2021)", "Liu et al. (EMNLP 2020)",
                   "Liu et al. (ICLR 2020)", "RAdam", "Admin", "NormFormer", "DeepNorm",
                   "token uniformity", "over-smoothing"):
        assert needle in names, needle
    assert "过平滑" in " ".join(n["zh"] for n in iv.load("03_rank_collapse")["names"])


def test_q5_states_the_implementation_mechanism():
    points = " ".join(iv.load("05_spectral_normalisation")["points"]["en"])
    for needle in ("buffer", "one power step", "eval mode does not update",
                   r"(G - \langle G, W_{\mathrm{SN}}\rangle\,uv^\top)/\hat\sigma",
                   r"\hat\sigma = \|Wv\| \le \sigma_1", r"\ge 1"):
        assert needle in points, needle


def test_bad_inputs(tmp_path):
    with pytest.raises(ValueError, match="chapter must be one of"):
        iv.load("07_nothing")
    with pytest.raises(TypeError, match="chapter must be a string"):
        iv.answer(1)
    with pytest.raises(ValueError, match="lang must be one of"):
        iv.answer(iv.CHAPTERS[0], "fr")
    with pytest.raises(ValueError, match="parts must be"):
        iv.answer(iv.CHAPTERS[0], parts=("abstract",))
    with pytest.raises(ValueError, match="folder must hold .* answer file"):
        iv.load(iv.CHAPTERS[0], tmp_path)
    with pytest.raises(TypeError, match="folder must be a str or Path"):
        iv.load(iv.CHAPTERS[0], 1.5)
    for parts in (None, 1.5, "spoken"):
        with pytest.raises(ValueError, match="parts must be"):
            iv.answer(iv.CHAPTERS[0], parts=parts)
    (tmp_path / f"{iv.CHAPTERS[0]}.yml").write_text("spoken: {en: a, zh: b}\n")
    with pytest.raises(ValueError, match="missing parts"):
        iv.load(iv.CHAPTERS[0], tmp_path)
    assert iv.load(f"{iv.CHAPTERS[1]}.md") == iv.load(iv.CHAPTERS[1])


def test_every_search_term_is_on_the_chinese_sheet():
    """Each term of the Chinese search dictionary (the card's terms) appears
    in what the Chinese review sheet shows: its own text, the rendered
    answers, the traps and the quiz, so a site search for it finds the sheet
    (tests/test_browser.py searches the built site)."""
    from conftest import ROOT

    from lipattn.book import audit
    from lipattn.book.quiz import Quiz

    page = (ROOT / "chapters" / "review_zh.md").read_text(encoding="utf-8")
    picks = eval(re.search(r"^picks = (\[.*?\])", page, re.M).group(1))
    shown = [page, audit.traps("zh")]
    shown += [iv.question(s, "zh") + iv.answer(s, "zh") for s in iv.CHAPTERS]
    shown += [Quiz.from_yaml(ROOT / "chapters" / "quizzes" / f"{s}.yml", lang="zh",
                             select=[k])._repr_html_()
              for s, k in zip(iv.CHAPTERS, picks, strict=True)]
    shown = "\n".join(shown)
    terms = [line.split()[0] for line in
             (ROOT / "lib" / "lipattn" / "book" / "search_terms_zh.txt").read_text(encoding="utf-8")
             .splitlines() if line.strip()]
    assert len(terms) >= 20
    missing = [t for t in terms if t not in shown]
    assert not missing, missing
    # and the site's indexer makes each of them a search term of the sheet:
    # Sphinx's Chinese splitter is jieba's cut_for_search with this dictionary
    import logging

    import jieba

    jieba.setLogLevel(logging.WARNING)
    tokenizer = jieba.Tokenizer()
    with open(ROOT / "lib" / "lipattn" / "book" / "search_terms_zh.txt", "rb") as f:
        tokenizer.load_userdict(f)
    words = set(tokenizer.cut_for_search(MATH.sub(" ", shown)))
    assert not [t for t in terms if t not in words]
    assert "跳连" not in words  # control: the dropped synonym is nowhere on the sheet
    assert not re.search(r"残差(?!连接|流|缩放|”)", MATH.sub("M", shown))
