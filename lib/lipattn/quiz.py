"""Self-check quizzes that work on the static site and in Jupyter.

A quiz renders as plain HTML and CSS, with no JavaScript and no kernel:
each question is a group of radio buttons, and choosing an option reveals
whether it is right and why. The same HTML shows in JupyterLab and on the
website, so there is nothing to keep in sync. Math in the text is written
as ``\\(...\\)`` and typeset by MathJax on both.
"""

from __future__ import annotations

import html
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Option", "Question", "Quiz"]

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
"""


@dataclass(frozen=True)
class Option:
    """One answer: its text, whether it is right, and the explanation shown."""

    text: str
    correct: bool
    why: str


@dataclass(frozen=True)
class Question:
    """A single-choice question: exactly one option is correct."""

    prompt: str
    options: Sequence[Option]

    def __post_init__(self) -> None:
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

    def __init__(self, questions: Sequence[Question], title: str = "Self-check") -> None:
        if not questions or not all(isinstance(q, Question) for q in questions):
            raise TypeError("questions must be a non-empty sequence of Question")
        self.questions = tuple(questions)
        self.title = title

    @classmethod
    def from_yaml(cls, path: str | Path) -> Quiz:
        """Read a quiz from a YAML file.

        The file holds ``title`` and ``questions``, each with ``prompt`` and
        ``options`` (``text``, ``correct``, ``why``). Text is inserted as HTML,
        so it may contain markup and ``\\(...\\)`` math.
        """
        import yaml

        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        if not isinstance(data, dict) or not isinstance(data.get("questions"), list):
            raise ValueError(f"path must name a YAML file with a 'questions' list; got {path}")
        questions = [
            Question(q["prompt"], [Option(o["text"], bool(o["correct"]), o["why"])
                                   for o in q["options"]])
            for q in data["questions"]
        ]
        return cls(questions, title=data.get("title", "Self-check"))

    def _repr_html_(self) -> str:
        uid = next(_COUNTER)
        parts = [f"<style>{_CSS}</style>",
                 # MyST pages only typeset elements of these classes
                 '<div class="lipattn-quiz tex2jax_process mathjax_process">'
                 f"<p><b>{html.escape(self.title)}.</b> "
                 "Choose an answer to see whether it is right, and why.</p>"]
        for qi, q in enumerate(self.questions, start=1):
            group = f"lq{uid}-{qi}"
            parts.append(f'<div class="lq-q" role="radiogroup" aria-labelledby="{group}-p">'
                         f'<p class="lq-prompt" id="{group}-p">Q{qi}. {q.prompt}</p>')
            for oi, opt in enumerate(q.options):
                oid = f"{group}-{oi}"
                verdict = "Right." if opt.correct else "Not quite."
                cls = "ok" if opt.correct else "no"
                parts.append(
                    f'<div class="lq-opt"><input type="radio" name="{group}" id="{oid}" '
                    f'data-correct="{str(opt.correct).lower()}">'
                    f'<label for="{oid}">{chr(97 + oi)}) {opt.text}</label>'
                    f'<div class="lq-fb {cls}"><b>{verdict}</b> {opt.why}</div></div>'
                )
            parts.append("</div>")
        parts.append("</div>")
        return "".join(parts)
