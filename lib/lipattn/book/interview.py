r"""The interview answers: one bilingual source per chapter, rendered as MyST.

Each chapter's answer lives in ``chapters/interview/<chapter>.yml``, English
and Chinese side by side. A file holds:

``question``
    The card's question.
``spoken``
    Under a minute of speech (60-90 English words, at most 200 Chinese
    characters): the expected answer first, then the precise statement, one
    caveat and one citation.
``points``
    The five-point written version, a list of five items.
``whiteboard``
    The first line a candidate writes (a formula; may be one string for both
    languages).
``follow_ups``
    A list of ``{q: ..., a: ...}``: what an interviewer asks next, with a
    short answer.
``names``
    The papers interviewers quote, each one line.

A bilingual field is a mapping ``{en: ..., zh: ..., zh_from: ...}``: the
English, the Chinese and a hash of the English that the Chinese was
translated from (:func:`en_hash`). When the English changes, the stored
hash no longer matches, so :func:`stale_fields` names the field until the
Chinese is brought up to date and the hash with it. A field that is the same
in both languages (a formula) is a plain string. The quizzes' YAML
(:mod:`lipattn.book.quiz`) uses the same fields and the same check
(:func:`stale_texts`).

:func:`answer` renders one chapter's answer in one language as MyST
Markdown (``$...$`` math), for a code cell whose output is rendered as MyST
(cell metadata ``mystnb: {markdown_format: myst}``) or for ``{glue:md}`` with
``:format: myst``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

__all__ = ["FOLDER", "PARTS", "CHAPTERS", "en_hash", "load", "stale_texts", "stale_fields",
           "answer", "question"]

#: Where the answers live.
FOLDER = Path(__file__).resolve().parents[3] / "chapters" / "interview"

#: The chapters with an interview answer, in the book's order.
CHAPTERS: tuple[str, ...] = ("01_softmax_jacobian", "02_scaling_saturation",
                             "03_rank_collapse", "04_prenorm_postnorm",
                             "05_spectral_normalisation", "06_attention_lipschitz",
                             "07_real_transformers", "08_trained_language_model")

#: The parts of an answer, in the order they are rendered.
PARTS: tuple[str, ...] = ("spoken", "points", "whiteboard", "follow_ups", "names")

_LANGS = ("en", "zh")

#: Labels of the rendered parts, per language. A Chinese label is followed by
#: a full-width colon outside the bold (CommonMark cannot close ``**`` between
#: a punctuation mark and a Chinese character), with nothing after it.
_LABELS = {
    "en": {"spoken": "In under a minute.", "points": "The five points.",
           "whiteboard": "On the whiteboard first:", "follow_ups": "Follow-ups.",
           "names": "Names interviewers quote."},
    "zh": {"spoken": "一分钟回答", "points": "五个要点", "whiteboard": "先在白板上写",
           "follow_ups": "常见追问", "names": "面试官常引用的文献"},
}


def en_hash(text: str | list[str]) -> str:
    """The hash of an English text that its Chinese records in ``zh_from``.

    Parameters
    ----------
    text : str or list of str
        A list (the five points) is hashed as its items joined by newlines.

    Returns
    -------
    str
        The first 12 hex digits of the SHA-256 of the UTF-8 text, with
        surrounding white space removed.
    """
    if isinstance(text, list) and all(isinstance(t, str) for t in text):
        text = "\n".join(t.strip() for t in text)
    if not isinstance(text, str):
        raise TypeError(f"text must be a string or a list of strings; got {type(text).__name__}")
    return hashlib.sha256(text.strip().encode("utf-8")).hexdigest()[:12]


def _check_chapter(chapter: str) -> str:
    if not isinstance(chapter, str):
        raise TypeError(f"chapter must be a string such as '01_softmax_jacobian'; "
                        f"got {type(chapter).__name__}")
    stem = Path(chapter).stem
    if stem not in CHAPTERS:
        raise ValueError(f"chapter must be one of {list(CHAPTERS)}; got {chapter!r}")
    return stem


def _check_lang(lang: str) -> None:
    if lang not in _LANGS:
        raise ValueError(f"lang must be one of {list(_LANGS)}; got {lang!r}")


def load(chapter: str, folder: str | Path | None = None) -> dict[str, Any]:
    """The answer of one chapter, as stored (both languages).

    Parameters
    ----------
    chapter : str
        One of :data:`CHAPTERS` (a file name such as ``"01_softmax_jacobian.md"``
        is accepted too).
    folder : str or Path, optional
        Where the YAML files are; default :data:`FOLDER`.

    Returns
    -------
    dict
        The parsed YAML, checked to have every part of :data:`PARTS` and
        five points in each language.
    """
    import yaml

    stem = _check_chapter(chapter)
    if folder is not None and not isinstance(folder, (str, Path)):
        raise TypeError(f"folder must be a str or Path; got {type(folder).__name__}")
    path = Path(FOLDER if folder is None else folder) / f"{stem}.yml"
    if not path.is_file():
        raise ValueError(f"folder must hold chapter {stem!r}'s answer file; expected {path}")
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of the parts {list(PARTS)}")
    missing = [p for p in ("question", *PARTS) if p not in data]
    if missing:
        raise ValueError(f"{path}: missing parts {missing}")
    for lang in _LANGS:
        points = _text(data["points"], lang, f"{path}: points")
        if not isinstance(points, list) or len(points) != 5:
            raise ValueError(f"{path}: points must list five items in {lang!r}")
    for i, item in enumerate(data["follow_ups"]):
        if not isinstance(item, dict) or set(item) != {"q", "a"}:
            raise ValueError(f"{path}: follow_ups[{i}] must be a mapping with keys q and a")
    return data


def _text(field: Any, lang: str, where: str) -> Any:
    """One language of a field: a plain string serves both languages."""
    if isinstance(field, str):
        return field
    if isinstance(field, dict) and lang in field:
        return field[lang]
    raise ValueError(f"{where} has no text in language {lang!r}")


def _bilingual_fields(data: Any, where: str = ""):
    """Every bilingual mapping in the data, with its location."""
    if isinstance(data, dict):
        if "en" in data or "zh" in data:
            yield where, data
            return
        for key, value in data.items():
            yield from _bilingual_fields(value, f"{where}.{key}" if where else str(key))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            yield from _bilingual_fields(value, f"{where}[{i}]")


def stale_texts(data: Any, name: str) -> list[str]:
    """The bilingual fields of parsed YAML whose Chinese is missing or out of date.

    A bilingual field (a mapping with ``en`` or ``zh``, anywhere in the data)
    is stale when it lacks ``en`` or ``zh``, or when its ``zh_from`` differs
    from :func:`en_hash` of its ``en``.

    Parameters
    ----------
    data : dict
        A parsed YAML file (an interview answer, a quiz).
    name : str
        What the messages call the file.

    Returns
    -------
    list of str
        One message per stale field, naming it by its place in the data
        (``points``, ``questions[2].options[0].why``) and giving the hash
        to set after updating the Chinese.
    """
    if not isinstance(data, dict):
        raise TypeError(f"data must be a mapping (a parsed YAML file); "
                        f"got {type(data).__name__}")
    if not data:
        raise ValueError("data must be a non-empty mapping (a parsed YAML file); got {}")
    if not isinstance(name, str) or not name.strip():
        raise TypeError(f"name must be a non-empty string; got {name!r}")
    stale = []
    for where, field in _bilingual_fields(data):
        if "en" not in field or "zh" not in field:
            stale.append(f"{name}: {where} needs both 'en' and 'zh'")
            continue
        now = en_hash(field["en"])
        if "zh_from" not in field:
            stale.append(f"{name}: {where} has no zh_from; check 'zh' against 'en', "
                         f"then set zh_from: {now}")
        elif not isinstance(field["zh_from"], str):  # YAML reads 0123 as a number
            stale.append(f"{name}: {where}: zh_from must be a string; "
                         f"write zh_from: '{now}' (quoted)")
        elif field["zh_from"] != now:
            stale.append(f"{name}: {where}: the English changed; update 'zh', "
                         f"then set zh_from: {now} (stored: {field.get('zh_from')})")
    return stale


def stale_fields(chapter: str, folder: str | Path | None = None) -> list[str]:
    """The fields whose Chinese was not translated from the current English.

    A bilingual field is stale when it lacks ``en`` or ``zh``, or when its
    ``zh_from`` differs from :func:`en_hash` of its ``en``
    (:func:`stale_texts`). After updating the Chinese, set ``zh_from`` to
    the hash that the message gives.

    Returns
    -------
    list of str
        One message per stale field (empty when the two languages agree).
    """
    return stale_texts(load(chapter, folder), chapter)


def question(chapter: str, lang: str = "en") -> str:
    """The card's question answered by a chapter (MyST Markdown)."""
    _check_lang(lang)
    return _text(load(chapter)["question"], lang, f"{chapter}: question").strip()


def answer(chapter: str, lang: str = "en", parts: tuple[str, ...] = PARTS) -> str:
    """One chapter's interview answer in one language, as MyST Markdown.

    Parameters
    ----------
    chapter : str
        One of :data:`CHAPTERS`.
    lang : {"en", "zh"}
    parts : tuple of str, default :data:`PARTS`
        Which parts to render, in the order of :data:`PARTS`.

    Returns
    -------
    str
        The spoken answer as a paragraph, the five points as a numbered
        list, the whiteboard line as display math, the follow-ups (question
        in bold, answer below it) and the names as bulleted lists; each part
        led by a bold label.
    """
    _check_lang(lang)
    if not isinstance(parts, (tuple, list)) or not parts or not all(
            isinstance(p, str) and p in PARTS for p in parts):
        raise ValueError(f"parts must be a non-empty tuple drawn from {PARTS}; got {parts!r}")
    data = load(chapter)
    labels = _LABELS[lang]
    sep = "" if lang == "zh" else " "
    colon = "：" if lang == "zh" else ""
    out = []

    def get(field: Any, where: str) -> Any:
        return _text(field, lang, f"{chapter}: {where}")

    for part in PARTS:
        if part not in parts:
            continue
        label = f"**{labels[part]}**{colon}"
        if part == "spoken":
            out.append(f"{label}{sep}{get(data['spoken'], 'spoken').strip()}")
        elif part == "points":
            items = get(data["points"], "points")
            out.append(label + "\n\n" + "\n".join(f"{i}. {t.strip()}"
                                                  for i, t in enumerate(items, 1)))
        elif part == "whiteboard":
            line = get(data["whiteboard"], "whiteboard").strip()
            out.append(f"{label}\n\n$$\n{line}\n$$")
        elif part == "follow_ups":
            # the question on its own line, the answer as a second paragraph
            items = [f"- **{get(f['q'], f'follow_ups[{i}].q').strip()}**\n\n"
                     f"  {get(f['a'], f'follow_ups[{i}].a').strip()}"
                     for i, f in enumerate(data["follow_ups"])]
            out.append(label + "\n\n" + "\n".join(items))
        elif part == "names" and data["names"]:
            items = [f"- {get(n, f'names[{i}]').strip()}" for i, n in enumerate(data["names"])]
            out.append(label + "\n\n" + "\n".join(items))
    return "\n\n".join(out)
