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
