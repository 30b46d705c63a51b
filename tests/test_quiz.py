"""Self-check quizzes (lipattn/book/quiz.py)."""

import hashlib
import re
from collections import Counter
from pathlib import Path

import pytest

from lipattn.book.quiz import Option, Question, Quiz


def _quiz() -> Quiz:
    return Quiz([
        Question("1 + 1?", [Option("2", True, "arithmetic"), Option("3", False, "off by one")]),
        Question("Colour?", [Option("red", False, "no"), Option("blue", True, "yes"),
                             Option("green", False, "no")]),
    ])


def test_html_has_one_radio_group_per_question_and_feedback_per_option():
    html = _quiz()._repr_html_()
    groups = set(re.findall(r'type="radio" name="([^"]+)"', html))
    assert len(groups) == 2
    assert html.count('type="radio"') == 5
    assert html.count('class="lq-fb ok"') == 2
    assert html.count('class="lq-fb no"') == 3
    assert html.count('data-correct="true"') == 2
    assert "<script" not in html  # works without JavaScript


def test_two_quizzes_on_a_page_do_not_share_radio_groups():
    a, b = _quiz()._repr_html_(), _quiz()._repr_html_()
    ga = set(re.findall(r'name="([^"]+)"', a))
    gb = set(re.findall(r'name="([^"]+)"', b))
    assert not ga & gb


def test_questions_need_exactly_one_right_answer():
    with pytest.raises(ValueError, match="exactly one correct"):
        Question("?", [Option("a", True, ""), Option("b", True, "")])
    with pytest.raises(ValueError, match="exactly one correct"):
        Question("?", [Option("a", False, ""), Option("b", False, "")])
    with pytest.raises(ValueError, match="at least 2"):
        Question("?", [Option("a", True, "")])
    with pytest.raises(TypeError, match="questions"):
        Quiz([])


@pytest.mark.parametrize("field, bad", [("text", None), ("text", ""), ("text", 1),
                                        ("correct", "no"), ("correct", 1), ("correct", None),
                                        ("why", None), ("why", b"x")])
def test_options_refuse_fields_of_the_wrong_kind(field, bad):
    """Option(correct='no') was a right answer (bool('no') is True), and
    Option(text=None) rendered as 'None'."""
    with pytest.raises((TypeError, ValueError), match=field):
        Option(**{"text": "a", "correct": True, "why": "b"} | {field: bad})


def test_a_yaml_correct_must_be_a_boolean(tmp_path):
    path = tmp_path / "q.yml"
    path.write_text("questions:\n  - prompt: p\n    options:\n"
                    "      - {text: a, correct: 'no', why: w}\n"
                    "      - {text: b, correct: true, why: w}\n")
    with pytest.raises(TypeError, match="correct must be True or False; got str"):
        Quiz.from_yaml(path)


BILINGUAL = """
title: {en: Self-check, zh: 自测}
questions:
  - prompt: {en: 'One?', zh: '一？'}
    options:
      - {text: '1', correct: true, why: {en: 'yes', zh: '对'}}
      - {text: '2', correct: false, why: {en: 'no', zh: '错'}}
  - prompt: 'Shared \\(x\\)'
    options:
      - {text: a, correct: false, why: {en: 'no'}}
      - {text: b, correct: true, why: {en: 'yes'}}
"""


def test_yaml_language_fields_pick_one_language(tmp_path):
    path = tmp_path / "q.yml"
    path.write_text(BILINGUAL, encoding="utf-8")
    en = Quiz.from_yaml(path)
    assert en.title == "Self-check" and en.questions[0].prompt == "One?"
    assert en.questions[1].prompt == r"Shared \(x\)"  # a plain string serves every language
    zh = Quiz.from_yaml(path, lang="zh", select=[0])
    assert zh.title == "自测" and zh.questions[0].prompt == "一？"
    assert sorted(o.why for o in zh.questions[0].options) == sorted(["对", "错"])
    page = zh._repr_html_()
    assert 'lang="zh"' in page and "正确。" in page and "第 1 题：一？" in page
    assert "Right." not in page
    # a field without the requested language is an error naming it
    with pytest.raises(ValueError, match="question 2, option 1 has no text in language 'zh'"):
        Quiz.from_yaml(path, lang="zh")
    with pytest.raises(ValueError, match="lang must be one of"):
        Quiz.from_yaml(path, lang="fr")
    with pytest.raises(ValueError, match="select must list"):
        Quiz.from_yaml(path, select=[2])


def test_combine_concatenates_questions_of_one_language(tmp_path):
    path = tmp_path / "q.yml"
    path.write_text(BILINGUAL, encoding="utf-8")
    both = Quiz.combine([Quiz.from_yaml(path, select=[1]), _quiz()], title="All")
    assert [q.prompt for q in both.questions] == [r"Shared \(x\)", "1 + 1?", "Colour?"]
    assert both._repr_html_().count('class="lq-q"') == 3
    with pytest.raises(ValueError, match="one language"):
        Quiz.combine([Quiz.from_yaml(path, lang="zh", select=[0]), _quiz()])
    with pytest.raises(TypeError, match="quizzes"):
        Quiz.combine([])


QUIZZES = sorted(Path(__file__).resolve().parents[1].glob("chapters/quizzes/*.yml"))
_ZERO_WIDTH = {"mathrm", "operatorname", "mathbb", "mathbf", "left", "right", "bigl", "bigr",
               "Bigl", "Bigr", "tfrac", "frac", "sqrt", "text", "quad", "qquad", "cdot"}


def _visible_length(text: str) -> int:
    """About how many characters an option shows: a TeX command that draws a
    symbol counts as one, layout commands and braces as none."""
    text = re.sub(r"\\[()]", "", text)
    text = re.sub(r"\\([A-Za-z]+)", lambda m: "" if m.group(1) in _ZERO_WIDTH else "x", text)
    return len(re.sub(r"[{}\s]", "", text))


def _book_questions(lang="en"):
    return [(path.stem, i, q) for path in QUIZZES
            for i, q in enumerate(Quiz.from_yaml(path, lang=lang).questions)]


def test_the_books_quizzes_cannot_be_gamed_by_position():
    """Over the book, the right answer is spread over a, b and c: each holds
    between a fifth and 45 % of the questions (a third is fair)."""
    questions = _book_questions()
    assert len(questions) >= 30 and len(QUIZZES) == 8
    where = Counter([o.correct for o in q.options].index(True) for _, _, q in questions)
    for k in range(3):
        assert 0.2 <= where[k] / len(questions) <= 0.45, where


def test_the_books_quizzes_cannot_be_gamed_by_length():
    """Picking the longest option scores no more than chance: the right
    answer is the longest (ties shared) in at most its fair share."""
    questions = _book_questions()
    longest = fair = 0.0
    for _, _, q in questions:
        lengths = [_visible_length(o.text) for o in q.options]
        right = [o.correct for o in q.options].index(True)
        if lengths[right] == max(lengths):
            longest += 1 / lengths.count(max(lengths))
        fair += 1 / len(lengths)
    assert longest <= fair, (longest, fair)


def test_visible_length_counts_symbols_not_markup():
    assert _visible_length(r"\(-\mathrm{lr}\cdot\operatorname{sign}(g)\)") == len("-lrsign(g)")
    assert _visible_length(r"\(\rho^4\)") == 3


def test_options_are_shuffled_deterministically_and_alike_in_both_languages(tmp_path):
    """The order is a hash of the English prompt: the same in every language
    and every run, and not the order of the file."""
    for path in QUIZZES:
        en, zh = Quiz.from_yaml(path), Quiz.from_yaml(path, lang="zh")
        again = Quiz.from_yaml(path)
        for a, b, c in zip(en.questions, zh.questions, again.questions, strict=True):
            assert [o.correct for o in a.options] == [o.correct for o in b.options]
            assert a.options == c.options
    # an independent re-implementation of the order on a small file
    path = tmp_path / "q.yml"
    path.write_text(BILINGUAL, encoding="utf-8")
    key = "One?"
    order = sorted(range(2), key=lambda i: hashlib.sha256(f"{key}\n{i}".encode()).hexdigest())
    texts = [o.text for o in Quiz.from_yaml(path).questions[0].options]
    assert texts == [["1", "2"][i] for i in order]
    seeded = BILINGUAL.replace("  - prompt: {en: 'One?'", "  - seed: 3\n    prompt: {en: 'One?'")
    path.write_text(seeded, encoding="utf-8")
    order = sorted(range(2), key=lambda i: hashlib.sha256(f"3\n{i}".encode()).hexdigest())
    assert [o.text for o in Quiz.from_yaml(path).questions[0].options] == [
        ["1", "2"][i] for i in order]
    path.write_text(seeded.replace("seed: 3", "seed: x"), encoding="utf-8")
    with pytest.raises(ValueError, match="seed must be an integer"):
        Quiz.from_yaml(path)


def test_feedback_is_announced_and_printed():
    page = _quiz()._repr_html_()
    assert page.count('aria-live="polite"') == 2  # one live region per question
    assert page.count('class="lq-opt lq-correct"') == 2
    css = page.split("@media print", 1)[1]
    assert ".lq-fb.ok { display: block !important" in css
    assert ".lq-opt.lq-correct label" in css


def test_quiz_text_says_nothing_a_review_page_contradicts():
    """Quiz questions are drawn into the review sheets, which are not
    chapters: no "this chapter", 本章, 这里 or chapter numbers; the Chinese
    uses 偏离量 for res X, never a bare 残差."""
    bad = re.compile(r"\bthis chapter\b|\bthe chapter\b|\bthe page\b|Chapter \d"
                     r"|本章|这里|第 ?\d ?章", re.I)
    for lang in ("en", "zh"):
        for stem, i, q in _book_questions(lang):
            text = " ".join([q.prompt] + [o.text + " " + o.why for o in q.options])
            assert not bad.search(text), (stem, i, lang)
            if lang == "zh":
                assert not re.search(r"残差(?!连接|流)", text), (stem, i)


# --- both languages, kept in step (as the interview answers) ---------------------

_MATH = re.compile(r"\\\(.*?\\\)", re.S)


def _h(text: str) -> str:
    """The zh_from of an English text, computed here (interview.en_hash's rule)."""
    return hashlib.sha256(text.strip().encode("utf-8")).hexdigest()[:12]


@pytest.mark.parametrize("path", QUIZZES, ids=[p.stem for p in QUIZZES])
def test_every_quiz_text_is_in_both_languages_and_up_to_date(path):
    """Every text with English words has a Chinese translated from its current
    English (zh_from); the test prints the hash to set after an English edit."""
    from lipattn.book import quiz

    stale = quiz.stale_fields(path)
    assert not stale, "\n".join(stale)


@pytest.mark.parametrize("path", QUIZZES, ids=[p.stem for p in QUIZZES])
def test_the_chinese_keeps_the_math_of_the_english(path):
    """Each translated text has the same \\(...\\) formulas as its English."""
    import yaml

    def texts(node, where=""):
        if isinstance(node, dict) and "en" in node:
            yield where, node
        elif isinstance(node, dict):
            for k, v in node.items():
                yield from texts(v, f"{where}.{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                yield from texts(v, f"{where}[{i}]")

    for where, field in texts(yaml.safe_load(path.read_text(encoding="utf-8"))):
        assert Counter(_MATH.findall(field["en"])) == Counter(_MATH.findall(field["zh"])), \
            (path.stem, where)


def test_the_quiz_staleness_check_can_fail(tmp_path):
    from lipattn.book import quiz

    en = "Which vector spans the null space?"
    good = (f"questions:\n  - prompt: {{en: '{en}', zh: '哪个向量张成零空间？', "
            f"zh_from: '{_h(en)}'}}\n    options:\n"
            "      - {text: '\\(\\mathbf 1\\)', correct: true, why: '\\(J\\mathbf 1 = 0\\)'}\n"
            "      - {text: '\\(p\\)', correct: false, why: {en: 'No.', zh: '不是。', "
            f"zh_from: '{_h('No.')}'}}}}\n")
    path = tmp_path / "q.yml"
    path.write_text(good, encoding="utf-8")
    assert quiz.stale_fields(path) == []  # math-only plain strings are shared
    assert Quiz.from_yaml(path, lang="zh").questions[0].prompt == "哪个向量张成零空间？"

    # the English changes, the Chinese does not: named, with the new hash
    path.write_text(good.replace(en, "Which vector spans the kernel?"), encoding="utf-8")
    (msg,) = quiz.stale_fields(path)
    assert "questions[0].prompt: the English changed" in msg
    assert _h("Which vector spans the kernel?") in msg
    # an English word in a plain string (outside the math) needs a Chinese
    path.write_text(good.replace("why: '\\(J\\mathbf 1 = 0\\)'",
                                 "why: 'Shift invariance: \\(J\\mathbf 1 = 0\\)'"),
                    encoding="utf-8")
    (msg,) = quiz.stale_fields(path)
    assert "questions[0].options[0].why is English only" in msg
    # a missing zh, and a missing zh_from
    path.write_text(good.replace(", zh: '不是。'", ""), encoding="utf-8")
    assert "options[1].why needs both 'en' and 'zh'" in quiz.stale_fields(path)[0]
    path.write_text(good.replace(f", zh_from: '{_h('No.')}'", ""), encoding="utf-8")
    assert "options[1].why has no zh_from" in quiz.stale_fields(path)[0]


def test_glue_yaml_glues_the_quiz_in_every_language(tmp_path, monkeypatch):
    """The English under the key, the Chinese under key_zh, nothing displayed;
    the English quiz is returned (for Jupyter)."""
    import myst_nb

    glued = []
    monkeypatch.setattr(myst_nb, "glue", lambda name, obj, display=True:
                        glued.append((name, obj, display)))
    path = tmp_path / "q.yml"
    path.write_text(BILINGUAL, encoding="utf-8")
    shown = Quiz.glue_yaml("quiz", path, select=[0])
    assert [(n, q.lang, d) for n, q, d in glued] == [("quiz", "en", False),
                                                     ("quiz_zh", "zh", False)]
    assert shown is glued[0][1] and shown.questions[0].prompt == "One?"
    assert glued[1][1].questions[0].prompt == "一？"
    with pytest.raises(ValueError, match="question 2, option 1 has no text in language 'zh'"):
        Quiz.glue_yaml("quiz2", path)  # every language is read before anything is glued
    assert len(glued) == 2
    with pytest.raises(ValueError, match="key must be a glue key"):
        Quiz.glue_yaml("my quiz", path)


@pytest.mark.parametrize("path", QUIZZES, ids=[p.stem for p in QUIZZES])
def test_every_chapter_pastes_its_quiz_in_the_pages_language(path):
    """The self-check cell glues the quiz in both languages (its own output
    is not on the page) and the page pastes it: the English build shows
    ``quiz``, the Chinese ``quiz_zh`` (lipattn.book.sphinxext)."""
    page = path.parents[1].joinpath(f"{path.stem}.md").read_text(encoding="utf-8")
    section = page.split("## Self-check\n", 1)[1]
    cell = section.split("```{code-cell} ipython3\n", 1)[1].split("```", 1)[0]
    assert f'Quiz.glue_yaml("quiz", "quizzes/{path.stem}.yml")' in cell
    assert "remove-output" in cell or "remove-cell" in cell
    assert "```{glue} quiz\n```" in section
    assert page.count('"quiz"') == 1 and "Quiz.from_yaml" not in page
