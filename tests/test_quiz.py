"""Self-check quizzes (lipattn/quiz.py)."""

import re

import pytest

from lipattn.quiz import Option, Question, Quiz


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
    assert [o.why for o in zh.questions[0].options] == ["对", "错"]
    page = zh._repr_html_()
    assert 'lang="zh"' in page and "正确。" in page and "第 1 题" in page
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
