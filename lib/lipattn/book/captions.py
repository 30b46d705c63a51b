r"""Figure captions in a translated edition (a Sphinx extension).

The chapters' figures are code cells whose metadata gives the caption::

    ```{code-cell} ipython3
    ---
    mystnb:
      figure:
        caption: |
          Left: the norm against ...
        name: fig-ch1-search
    ---

myst-nb builds the figure from that text when it renders the cell's output,
after Sphinx's gettext machinery has looked at the page, so the captions are
neither extracted into the catalogues nor translated. This extension closes
both gaps with the page's own catalogue (``locale/<language>/LC_MESSAGES/<page>.po``):

- in the **gettext** build, each caption (its lines joined by single spaces:
  :func:`caption_messages`) is added to the page's messages, so
  ``sphinx-intl update`` puts it in the ``.po`` beside the prose;
- in a build whose ``language`` is not English, myst-nb's figure builder
  (``create_figure_context``, as ``myst_nb.sphinx_`` imports it) is wrapped so that it
  receives the caption's translation from the page's catalogue (the same
  message) and parses that MyST instead. The notebook and its cell metadata
  are not touched, so the English build's execution cache still serves the
  outputs (jupyter-cache hashes the cells' metadata too); a caption with no
  (or a fuzzy) translation stays English.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["caption_messages", "caption_message", "catalogue", "setup"]

# ``caption: |`` in a code cell's YAML, then its block: lines indented deeper
# (or blank). The caption is the block's lines joined by spaces.
_CAPTION = re.compile(r"^(?P<indent>[ ]*)caption: \|[ \t]*\n"
                      r"(?P<body>(?:(?:(?P=indent)[ ]+\S.*)?\n)+)", re.M)


def caption_message(caption: str) -> str:
    """The catalogue message of a caption: its lines joined by single spaces."""
    if not isinstance(caption, str):
        raise TypeError(f"caption must be a str; got {type(caption).__name__}")
    return " ".join(caption.split())


def _check_text(text: Any) -> str:
    if not isinstance(text, str):
        raise TypeError(f"text must be a str (a page's MyST source); got {type(text).__name__}")
    return text


def caption_messages(text: str) -> list[str]:
    """The figure captions of a page's code cells, in page order.

    Parameters
    ----------
    text : str
        The page's MyST source.

    Returns
    -------
    list of str
        Each ``caption: |`` block's text, its lines joined by single spaces
        (the message a translator sees).
    """
    return [caption_message(m.group("body")) for m in _CAPTION.finditer(_check_text(text))]


def catalogue(po: Path | str) -> dict[str, str]:
    """msgid -> msgstr of a ``.po`` file: its translated, non-fuzzy entries ({} if absent)."""
    po = Path(po)
    if not po.is_file():
        return {}
    from babel.messages.pofile import read_po

    with po.open("rb") as f:
        cat = read_po(f)
    return {m.id: m.string for m in cat if m.id and m.string and not m.fuzzy}


def _is_translation(config: Any) -> bool:
    return (config.language or "en").split("_")[0].lower() != "en"


_CATALOGUES: dict[tuple[str, str], dict[str, str]] = {}


def _page_catalogue(env: Any, source: str) -> dict[str, str]:
    """The translated captions of the page whose source file is ``source``."""
    docname = env.path2doc(source)
    key = (str(env.srcdir), f"{env.config.language}/{docname}")
    if key not in _CATALOGUES:
        found: dict[str, str] = {}
        for d in env.config.locale_dirs or []:
            found.update(catalogue(Path(env.srcdir, d, env.config.language, "LC_MESSAGES",
                                        f"{docname}.po")))
        _CATALOGUES[key] = found
    return _CATALOGUES[key]


def _wrap_figure_context() -> None:
    from myst_nb import sphinx_

    original = sphinx_.create_figure_context      # imported there by name
    if getattr(original, "lipattn_translates", False):
        return

    @contextmanager
    def create_figure_context(self, figure_options, line):
        env = getattr(self, "sphinx_env", None)
        if (env is not None and isinstance(figure_options, dict)
                and figure_options.get("caption") and _is_translation(env.config)):
            msg = caption_message(str(figure_options["caption"]))
            new = _page_catalogue(env, self.document["source"]).get(msg)
            if new:
                figure_options = {**figure_options, "caption": new}
        with original(self, figure_options, line):
            yield

    create_figure_context.lipattn_translates = True
    sphinx_.create_figure_context = create_figure_context


def _doctree_resolved(app: Any, doctree: Any, docname: str) -> None:
    if app.builder.name != "gettext":
        return
    from docutils import nodes

    path = app.env.doc2path(docname)
    text = Path(path).read_text(encoding="utf-8")
    holder = nodes.container()
    for msg in caption_messages(text):
        para = nodes.paragraph(msg, msg)
        para.source, para.line = str(path), 1
        para.uid = ""        # the gettext catalogue takes only nodes with a uid
        holder += para
    if holder.children:
        doctree += holder


def setup(app: Any) -> dict:
    """Wrap myst-nb's figure builder; add the captions to the gettext build."""
    _wrap_figure_context()
    app.connect("doctree-resolved", _doctree_resolved)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
