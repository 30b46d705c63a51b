"""Self-check quizzes that work on the static site and in Jupyter.

A quiz renders as plain HTML and CSS, with no JavaScript and no kernel:
each question is a group of radio buttons, and choosing an option reveals
whether it is right and why. The same HTML shows in JupyterLab and on the
website, so there is nothing to keep in sync. Math in the text is written
as ``\\(...\\)`` and typeset by MathJax on both.

A YAML quiz can carry several languages without being copied: any text
field (``title``, ``prompt``, ``text``, ``why``) is either a string, used for
every language, or a mapping from a language code to the text, for example
``{en: "Which vector…", zh: "哪个向量…", zh_from: 1f0c…}``. As in the
interview answers (:mod:`lipattn.book.interview`), ``zh_from`` is the hash
of the English that the Chinese was translated from, so :func:`stale_fields`
names a text whose English changed after its translation; it also names a
plain string that holds English words (Latin letters outside ``\\(...\\)``
math), which every language would show. A plain string is for text that is
only math. :meth:`Quiz.from_yaml` picks one language,
:meth:`Quiz.combine` draws questions from several quizzes, and
:meth:`Quiz.glue_yaml` glues a quiz in every language for a book page, whose
Chinese edition pastes the Chinese one (:mod:`lipattn.book.sphinxext`).

The options of a YAML question are shuffled deterministically, by a hash of
the question's prompt (its English text, so every language gets the same
order), so that the right answer's position carries no information; a
question may fix another order with an integer ``seed``.

Feedback is announced to screen readers (each question's options sit in an
``aria-live`` region), and a printed page shows every right answer with its
explanation (the quiz's own ``@media print`` rules; the classes are
``lipattn-quiz``, ``lq-q``, ``lq-opt``, ``lq-correct`` and ``lq-fb``).
"""

from __future__ import annotations

import hashlib
import html
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._validate import as_bool, as_choice
from . import interview
from ._check import as_text

__all__ = ["Option", "Question", "Quiz", "LANGUAGES", "stale_fields"]

#: The interface strings of a quiz, per language code.
LANGUAGES: dict[str, dict[str, str]] = {
    "en": {"intro": "Choose an answer to see whether it is right, and why.",
           "right": "Right.", "wrong": "Not quite.", "q": "Q", "title": "Self-check", "stop": ". ",
           "space": " "},
    "zh": {"intro": "选择一个答案，查看它是否正确以及原因。",
           "right": "正确。", "wrong": "不对。", "q": "第 {n} 题：", "title": "自测", "stop": "：",
           "space": ""},
}

_COUNTER = itertools.count()

_CSS = """
.lipattn-quiz { margin: 1em 0; }
.lipattn-quiz .lq-q { border: 1px solid #d0d7de; border-radius: 6px;
  padding: 0.6em 1em 0.7em; margin: 0 0 1em; }
.lipattn-quiz .lq-prompt { font-weight: 600; margin: 0 0 0.4em; }
.lipattn-quiz .lq-opt { margin: 0.25em 0; display: flex; flex-wrap: wrap;
  align-items: baseline; gap: 0 0.4em; }
.lipattn-quiz .lq-opt label { cursor: pointer; flex: 1 1 0; min-width: 0; }
.lipattn-quiz .lq-opt .lq-fb { flex-basis: 100%; }
.lipattn-quiz .lq-fb { display: none; margin: 0.2em 0 0.4em 1.7em; padding: 0.3em 0.6em;
  border-left: 4px solid; font-size: 0.95em; }
.lipattn-quiz .lq-fb.ok { border-color: #2da44e; background: #eefbf1; }
.lipattn-quiz .lq-fb.no { border-color: #cf222e; background: #fff1f0; }
.lipattn-quiz input:checked ~ .lq-fb { display: block; }
@media print {
  .lipattn-quiz .lq-q { break-inside: avoid; }
  .lipattn-quiz input { display: none; }
  .lipattn-quiz .lq-opt.lq-correct label { font-weight: 700; }
  .lipattn-quiz .lq-opt.lq-correct label::after { content: " \\2713"; }
  .lipattn-quiz .lq-fb.ok { display: block !important; background: none; }
  .lipattn-quiz .lq-fb.no { display: none !important; }
}
"""


@dataclass(frozen=True)
class Option:
    """One answer: its text, whether it is right, and the explanation shown."""

    text: str
    correct: bool
    why: str

    def __post_init__(self) -> None:
        as_text(self.text, "text")
        as_bool(self.correct, "correct")
        as_text(self.why, "why", allow_empty=True)


@dataclass(frozen=True)
class Question:
    """A single-choice question: exactly one option is correct."""

    prompt: str
    options: Sequence[Option]

    def __post_init__(self) -> None:
        as_text(self.prompt, "prompt")
        if isinstance(self.options, (str, bytes)) or not isinstance(self.options, Sequence):
            raise TypeError(f"options must be a sequence of Option; "
                            f"got {type(self.options).__name__}")
        if not all(isinstance(o, Option) for o in self.options):
            raise TypeError("options must be a sequence of Option; got "
                            f"{sorted({type(o).__name__ for o in self.options})}")
        if len(self.options) < 2:
            raise ValueError(f"options must hold at least 2 answers; got {len(self.options)}")
        n_right = sum(bool(o.correct) for o in self.options)
        if n_right != 1:
            raise ValueError(f"options must have exactly one correct answer; got {n_right}")


class Quiz:
    """A list of single-choice questions, displayed as HTML.

    Parameters
    ----------
    questions : sequence of Question
    title : str
    """

    def __init__(self, questions: Sequence[Question], title: str | None = None,
                 lang: str = "en") -> None:
        if isinstance(questions, (str, bytes)) or not isinstance(questions, Sequence) \
                or not questions or not all(isinstance(q, Question) for q in questions):
            raise TypeError("questions must be a non-empty sequence of Question; "
                            f"got {type(questions).__name__}")
        lang = as_choice(lang, "lang", tuple(LANGUAGES))
        if title is not None:
            as_text(title, "title")
        self.questions = tuple(questions)
        self.lang = lang
        self.title = LANGUAGES[lang]["title"] if title is None else title

    @classmethod
    def from_yaml(cls, path: str | Path, lang: str = "en",
                  select: Sequence[int] | None = None) -> Quiz:
        """Read a quiz from a YAML file, in one language.

        The file holds ``title`` and ``questions``, each with ``prompt`` and
        ``options`` (``text``, ``correct``, ``why``). Text is inserted as HTML,
        so it may contain markup and ``\\(...\\)`` math. A text field may be a
        mapping from language codes to texts (see the module docstring).

        Parameters
        ----------
        path : str or Path
        lang : str, default "en"
            One of :data:`LANGUAGES`. A field given as a mapping must have it.
        select : sequence of int, optional
            Indices (from 0) of the questions to keep, in that order.
        """
        lang = as_choice(lang, "lang", tuple(LANGUAGES))
        data = _read(path)
        raw = data["questions"]
        if select is not None:
            if isinstance(select, (str, bytes)) or not isinstance(select, Sequence):
                raise TypeError(f"select must be a sequence of question indices; "
                                f"got {type(select).__name__}")
            bad = [i for i in select if isinstance(i, bool) or not isinstance(i, int)
                   or not 0 <= i < len(raw)]
            if bad or not select:
                raise ValueError(f"select must list question indices in [0, {len(raw)}); "
                                 f"got {list(select)}")
            raw = [raw[i] for i in select]

        def pick(value: Any, where: str) -> str:
            if isinstance(value, str):
                return value
            if isinstance(value, dict) and lang in value:
                return str(value[lang])
            raise ValueError(f"{path}: {where} has no text in language {lang!r}; "
                             f"expected a string or a mapping with key {lang!r}")

        questions = [
            Question(pick(q["prompt"], f"question {qi + 1}"), _shuffled(
                [Option(pick(o["text"], f"question {qi + 1}, option {oi + 1}"),
                        o["correct"],
                        pick(o["why"], f"question {qi + 1}, option {oi + 1}"))
                 for oi, o in enumerate(q["options"])], q))
            for qi, q in enumerate(raw)
        ]
        title = data.get("title")
        return cls(questions, title=None if title is None else pick(title, "title"), lang=lang)

    @classmethod
    def combine(cls, quizzes: Sequence[Quiz], title: str | None = None) -> Quiz:
        """One quiz from the questions of several, in order (same language)."""
        if isinstance(quizzes, (str, bytes)) or not isinstance(quizzes, Sequence) \
                or not quizzes or not all(isinstance(q, Quiz) for q in quizzes):
            raise TypeError("quizzes must be a non-empty sequence of Quiz; "
                            f"got {type(quizzes).__name__}")
        langs = {q.lang for q in quizzes}
        if len(langs) != 1:
            raise ValueError(f"quizzes must share one language; got {sorted(langs)}")
        return cls([x for q in quizzes for x in q.questions], title=title, lang=langs.pop())

    @classmethod
    def glue_yaml(cls, key: str, path: str | Path,
                  select: Sequence[int] | None = None) -> Quiz:
        """Glue a YAML quiz in every language, for a book page to paste.

        myst-nb's ``glue`` stores the English quiz under ``key`` and the
        quiz in each other language of :data:`LANGUAGES` under
        ``key_<code>`` (``key_zh``), without displaying them. The page
        pastes ``{glue} key``; the Chinese edition's build pastes
        ``key_zh`` there (:mod:`lipattn.book.sphinxext`), so the notebook
        runs once for both.

        Parameters
        ----------
        key : str
            The glue key, unique on the page.
        path, select
            As for :meth:`from_yaml`.

        Returns
        -------
        Quiz
            The English quiz, which Jupyter shows when the call ends a cell
            (on the page, tag the cell ``remove-output``: the paste shows it).
        """
        as_text(key, "key")
        if re.search(r"[\s:]", key):
            raise ValueError(f"key must be a glue key without spaces or colons; got {key!r}")
        quizzes = {lang: cls.from_yaml(path, lang=lang, select=select) for lang in LANGUAGES}
        from myst_nb import glue

        for lang, quiz in quizzes.items():
            glue(key if lang == "en" else f"{key}_{lang}", quiz, display=False)
        return quizzes["en"]

    def _repr_html_(self) -> str:
        uid = next(_COUNTER)
        words = LANGUAGES[self.lang]
        parts = [f"<style>{_CSS}</style>",
                 # MyST pages only typeset elements of these classes
                 f'<div class="lipattn-quiz tex2jax_process mathjax_process" lang="{self.lang}">'
                 f"<p><b>{html.escape(self.title)}{words['stop']}</b>"
                 f"<span class=\"lq-intro\">{words['intro']}</span></p>"]
        for qi, q in enumerate(self.questions, start=1):
            group = f"lq{uid}-{qi}"
            number = (words["q"].format(n=qi) if "{n}" in words["q"]
                      else f"{words['q']}{qi}.")
            parts.append(f'<div class="lq-q" role="radiogroup" aria-labelledby="{group}-p">'
                         f'<p class="lq-prompt" id="{group}-p">{number}{words["space"]}'
                         f'{q.prompt}</p><div class="lq-opts" aria-live="polite">')
            for oi, opt in enumerate(q.options):
                oid = f"{group}-{oi}"
                verdict = words["right"] if opt.correct else words["wrong"]
                cls = "ok" if opt.correct else "no"
                mark = " lq-correct" if opt.correct else ""
                parts.append(
                    f'<div class="lq-opt{mark}"><input type="radio" name="{group}" id="{oid}" '
                    f'data-correct="{str(opt.correct).lower()}">'
                    f'<label for="{oid}">{chr(97 + oi)}) {opt.text}</label>'
                    f'<div class="lq-fb {cls}"><b>{verdict}</b> {opt.why}</div></div>'
                )
            parts.append("</div></div>")
        parts.append("</div>")
        return "".join(parts)


def _read(path: str | Path) -> dict:
    """The parsed YAML of a quiz file, checked to hold a list of questions."""
    import yaml

    if not isinstance(path, (str, Path)):
        raise TypeError(f"path must be a str or Path; got {type(path).__name__}")
    if not Path(path).is_file():
        raise ValueError(f"path must name a YAML quiz file; got {path}")
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("questions"), list):
        raise ValueError(f"path must name a YAML file with a 'questions' list; got {path}")
    return data


_MATH = re.compile(r"\\\(.*?\\\)", re.S)
_TEXT_FIELDS = ("title", "prompt", "text", "why")


def _english_only(data: dict) -> list[tuple[str, str]]:
    """(place, text) of each plain-string text field with Latin letters
    outside ``\\(...\\)`` math: English that every language would show."""
    found = []

    def visit(node: Any, where: str) -> None:
        if isinstance(node, list):
            for i, item in enumerate(node):
                visit(item, f"{where}[{i}]")
        elif isinstance(node, dict):
            for key, value in node.items():
                place = f"{where}.{key}" if where else str(key)
                if key in _TEXT_FIELDS and isinstance(value, str):
                    if re.search(r"[A-Za-z]", _MATH.sub("", value)):
                        found.append((place, value))
                else:
                    visit(value, place)

    visit(data, "")
    return found


def stale_fields(path: str | Path) -> list[str]:
    """The texts of a YAML quiz whose Chinese is missing or out of date.

    A bilingual text is stale when its ``zh_from`` is not the hash of its
    ``en`` (:func:`lipattn.book.interview.stale_texts`, the interview
    answers' check); a plain string is reported when it holds English words
    (Latin letters outside ``\\(...\\)`` math), since every language shows it.

    Returns
    -------
    list of str
        One message per text, with the hash to set in ``zh_from`` (empty
        when every text is in both languages and up to date).
    """
    data = _read(path)
    name = Path(path).name
    out = interview.stale_texts(data, name)
    for where, text in _english_only(data):
        out.append(f"{name}: {where} is English only; make it {{en: ..., zh: ..., "
                   f"zh_from: {interview.en_hash(text)}}}")
    return out


def _shuffled(options: list[Option], item: dict) -> list[Option]:
    """The options in the question's own deterministic order.

    The order sorts the options by a SHA-256 of the question's key (its
    ``seed`` if given, else its English prompt) and the option's index, so it
    is the same in every language and on every machine.
    """
    prompt = item.get("prompt")
    if "seed" in item:
        seed = item["seed"]
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"a question's seed must be an integer; got {seed!r}")
        key = str(seed)
    elif isinstance(prompt, dict):
        key = str(prompt.get("en", next(iter(prompt.values()))))
    else:
        key = str(prompt)
    order = sorted(range(len(options)),
                   key=lambda i: hashlib.sha256(f"{key}\n{i}".encode()).hexdigest())
    return [options[i] for i in order]
