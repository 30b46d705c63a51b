"""lipattn.book.captions: the figure captions of code cells, as catalogue messages."""

from __future__ import annotations

import pytest

from lipattn.book.captions import caption_message, caption_messages, catalogue

PAGE = """
```{code-cell} ipython3
---
mystnb:
  figure:
    caption: |
      Left: the norm against $\\sigma$, with the
      bound of {prf:ref}`thm-x`.

      Right: a second paragraph.
    name: fig-a
---
x = 1
```

Text with caption: | in it is not a caption.

```{code-cell} ipython3
---
mystnb:
  figure:
    caption: |
      One line.
    name: fig-b
---
```
"""


def test_caption_messages_are_the_blocks_joined_by_spaces():
    assert caption_messages(PAGE) == [
        "Left: the norm against $\\sigma$, with the bound of {prf:ref}`thm-x`. "
        "Right: a second paragraph.", "One line."]
    assert caption_message("  a\n  b  \n") == "a b"
    with pytest.raises(TypeError, match="text"):
        caption_messages(b"bytes")
    with pytest.raises(TypeError, match="caption"):
        caption_message(None)


def test_catalogue_keeps_translated_non_fuzzy_entries(tmp_path):
    po = tmp_path / "p.po"
    po.write_text('msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n\n'
                  'msgid "One line."\nmsgstr "一行。"\n\n'
                  '#, fuzzy\nmsgid "Old."\nmsgstr "旧。"\n\n'
                  'msgid "Empty."\nmsgstr ""\n', encoding="utf-8")
    assert catalogue(po) == {"One line.": "一行。"}
    assert catalogue(tmp_path / "missing.po") == {}


def test_every_chapter_caption_is_found():
    """Every ``caption: |`` line of the chapters yields one message."""
    from conftest import CHAPTERS

    for path in CHAPTERS:
        text = path.read_text(encoding="utf-8")
        assert len(caption_messages(text)) == text.count("caption: |"), path.name
