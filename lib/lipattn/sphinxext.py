"""Sphinx extension used by the book's build (listed in ``_config.yml``).

It does what ``_config.yml`` alone cannot:

1. **No stale outputs.** jupyter-cache keys a notebook on its code cells
   only, so a change to ``lib/`` or ``requirements.txt`` would leave old
   outputs in the book. This extension hashes the watched inputs
   (``lipattn_watch``) and points myst-nb's execution cache at a folder named
   by that hash, and marks every document outdated when the hash changes,
   so the chapters are executed again with the new library.
2. **No widget state on the site.** The site shows each explorer's player
   (``text/html``); the live widgets' saved state, which myst-nb would embed
   in the page (with every PNG again) for a widget manager the site does not
   load, is dropped.
3. **A root ``favicon.ico``.** The redirect page ``index.html`` has no icon
   link, so browsers ask for ``/favicon.ico``; a 404 there is a console error.
4. **MathJax served from the site, and only what the pages load.** MathJax 3
   comes from the ``django-static-mathjax`` package (pinned in
   ``requirements.txt``). The package holds the whole distribution (43 MB:
   TypeScript sources, two builds, the speech-rule engine); the pages load
   one combined component, ``es5/tex-chtml.js``, its web fonts, and on
   demand the TeX extensions (``\\require``/autoload), the menu's small
   ``ui`` components and the assistive-MathML component. Only those files
   (:data:`MATHJAX_FILES`, about 3 MB) are copied into
   ``_build/html/_static/mathjax``, so formulas typeset without internet and
   the site stays small.
5. **No files that pages never load.** The theme ships JavaScript source maps
   (``*.map``, read only by a browser's developer tools) and gettext
   catalogues (``_static/locales``, used when Sphinx builds, not by pages);
   together about 4 MB, they are removed from the built site.
6. **A page's own language.** Sphinx sets one ``<html lang>`` for the whole
   site. Pages named in ``lipattn_page_languages`` (docname -> BCP 47 tag, e.g.
   ``chapters/review_zh: zh-Hans``) get their own, so browsers pick fonts,
   line breaking and hyphenation for that language.
7. **Chinese search terms.** With ``html_search_language: zh`` Sphinx splits
   text into words with jieba. Its general dictionary cuts the book's terms
   (谱范数, 雅可比矩阵, …) into pieces that a whole-term query no longer
   matches, so the book's terms (``search_terms_zh.txt`` beside this module)
   are loaded as a jieba user dictionary, unless ``html_search_options``
   names another; jieba's progress messages are silenced.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

__all__ = ["MATHJAX_FILES", "inputs_hash", "mathjax_subset", "setup"]

#: Paths under MathJax's ``static/mathjax`` folder that the site ships.
MATHJAX_FILES = (
    "LICENSE",
    "es5/tex-chtml.js",
    "es5/output/chtml/fonts/woff-v2",
    "es5/input/tex/extensions",
    "es5/ui",
    "es5/a11y/assistive-mml.js",
)

_WATCHED_SUFFIXES = {".py", ".mplstyle", ".css", ".js", ".txt", ".toml", ".cfg"}


def inputs_hash(root: Path | str, watch: list[str]) -> str:
    """SHA-256 over the watched files and folders under ``root``.

    Parameters
    ----------
    root : Path or str
        The book's source folder (an existing directory).
    watch : list of str
        Files or folders relative to ``root``, each existing (a missing one
        would silently drop out of the hash); folders contribute every file
        with a source-like suffix, in sorted order, skipping caches. A single
        string is rejected: it is not a list of paths.

    Returns
    -------
    str
        The hex digest (64 characters).
    """
    if not isinstance(root, (str, os.PathLike)):
        raise TypeError(f"root must be a path (str or Path); got {type(root).__name__}")
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"root must be an existing directory; got {str(root)!r}")
    if isinstance(watch, (str, bytes, os.PathLike)) or not isinstance(watch, (list, tuple)):
        raise TypeError(f"watch must be a list of paths relative to root; got "
                        f"{type(watch).__name__} {watch!r}")
    for i, entry in enumerate(watch):
        if not isinstance(entry, (str, os.PathLike)):
            raise TypeError(f"watch[{i}] must be a path (str or Path); got "
                            f"{type(entry).__name__}")
        if not (root / entry).exists():
            raise ValueError(f"watch[{i}] must exist under root {str(root)!r}; got "
                             f"{str(entry)!r}, which does not")
    digest = hashlib.sha256()
    for entry in watch:
        path = root / entry
        files = [path] if path.is_file() else sorted(
            p for p in path.rglob("*")
            if p.is_file() and p.suffix in _WATCHED_SUFFIXES and "__pycache__" not in p.parts
            and not any(part.endswith(".egg-info") for part in p.parts)
        )
        for f in files:
            digest.update(f.relative_to(root).as_posix().encode())
            digest.update(b"\0")
            digest.update(f.read_bytes())
            digest.update(b"\0")
    return digest.hexdigest()


def mathjax_subset(source: Path, target: Path) -> Path:
    """Copy :data:`MATHJAX_FILES` from ``source`` into ``target/mathjax``.

    Parameters
    ----------
    source : Path
        MathJax's distribution folder (with ``es5/tex-chtml.js`` inside).
    target : Path
        A static folder for Sphinx; it is emptied and refilled, and ends up
        holding ``mathjax/<the files>``.

    Returns
    -------
    Path
        ``target``, to be appended to ``html_static_path``.
    """
    dest = target / "mathjax"
    if dest.exists():
        shutil.rmtree(dest)
    for rel in MATHJAX_FILES:
        src, out = source / rel, dest / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, out)
        else:
            shutil.copy2(src, out)
    return target


def _config_inited(app: Any, config: Any) -> None:
    root = Path(app.srcdir)
    digest = inputs_hash(root, config.lipattn_watch)
    app.lipattn_inputs_hash = digest
    base = Path(config.nb_execution_cache_path or Path(app.outdir).parent / ".jupyter_cache")
    # One cache folder per state of the library; drop the folders of older states.
    if base.name.startswith("lib-"):
        base = base.parent
    if base.is_dir():
        for old in base.glob("lib-*"):
            if old.name != f"lib-{digest[:16]}":
                shutil.rmtree(old, ignore_errors=True)
    config.nb_execution_cache_path = str(base / f"lib-{digest[:16]}")

    import mathjax  # from django-static-mathjax

    source = Path(mathjax.__file__).parent / "static" / "mathjax"
    static = mathjax_subset(source, Path(app.outdir).parent / "lipattn-mathjax")
    # files of an earlier, complete copy would otherwise stay in the site
    shutil.rmtree(Path(app.outdir) / "_static" / "mathjax", ignore_errors=True)
    config.html_static_path = [*config.html_static_path, str(static)]
    config.mathjax_path = "mathjax/es5/tex-chtml.js"

    if str(config.html_search_language or "").startswith("zh"):
        _chinese_search(config)


def _chinese_search(config: Any) -> None:
    import logging

    import jieba

    jieba.setLogLevel(logging.WARNING)
    options = dict(config.html_search_options or {})
    options.setdefault("dict", str(Path(__file__).with_name("search_terms_zh.txt")))
    config.html_search_options = options


def _env_get_outdated(app: Any, env: Any, added: set, changed: set, removed: set) -> list[str]:
    digest = app.lipattn_inputs_hash
    if getattr(env, "lipattn_inputs_hash", None) == digest:
        return []
    env.lipattn_inputs_hash = digest
    return sorted(env.found_docs)


def _drop_widget_state(app: Any, pagename: str, *args: Any) -> None:
    from myst_nb.sphinx_ import NbMetadataCollector

    if app.env is not None and pagename in NbMetadataCollector.get_doc_data(app.env):
        NbMetadataCollector.get_js_files(app.env, pagename).pop("ipywidgets_state", None)


def _write_root_favicon(app: Any, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    from PIL import Image, ImageDraw

    icon = Image.new("RGB", (32, 32), "#1f77b4")
    ImageDraw.Draw(icon).text((11, 8), "L", fill="white")
    icon.save(Path(app.outdir) / "favicon.ico", format="ICO", sizes=[(32, 32)])


def _prune_site(app: Any, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    static = Path(app.outdir) / "_static"
    for f in static.rglob("*.map"):
        f.unlink()
    shutil.rmtree(static / "locales", ignore_errors=True)


def _page_language(app: Any, pagename: str, templatename: str, context: dict,
                   doctree: Any) -> None:
    lang = app.config.lipattn_page_languages.get(pagename)
    if lang:
        context["language"] = lang  # the theme's <html lang="{{ language }}">


def setup(app: Any) -> dict[str, Any]:
    """Register the extension with Sphinx."""
    app.add_config_value("lipattn_watch", ["lib", "requirements.txt"], "env")
    app.connect("config-inited", _config_inited, priority=900)
    app.connect("env-get-outdated", _env_get_outdated)
    # before myst-nb's own handler (priority 500) adds the page's scripts
    app.connect("html-page-context", _drop_widget_state, priority=400)
    app.connect("build-finished", _write_root_favicon)
    app.connect("build-finished", _prune_site)
    app.add_config_value("lipattn_page_languages", {}, "html")
    app.connect("html-page-context", _page_language)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
