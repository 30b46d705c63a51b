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
   the site stays small. Sphinx copies static files only when it writes
   pages; a build with nothing out of date (``make html`` twice, ``make test``
   then ``make book``) copies nothing. So nothing is deleted before a build:
   at the end of every build, whether it wrote pages or not, the site's copy
   is made equal to the subset (missing or changed files copied, files of an
   earlier subset removed).
5. **No files that pages never load.** The theme ships JavaScript source maps
   (``*.map``, read only by a browser's developer tools) and gettext
   catalogues (``_static/locales``, used when Sphinx builds, not by pages);
   together about 4 MB, they are removed from the built site.
6. **A page's own language.** Sphinx sets one ``<html lang>`` for the whole
   site. Pages named in ``lipattn_page_languages`` (docname -> BCP 47 tag, e.g.
   ``chapters/review_zh: zh-Hans``) get their own, so browsers pick fonts,
   line breaking and hyphenation for that language.
7. **Light pages** (:func:`finish_site`). Explorer frames, inlined by the
   kernel as base64, are moved into separate cacheable files
   ``_static/frames/<explorer>/<hash>.webp`` that the player fetches when a
   control moves; figures get their CSS size (from the PNG's metadata, see
   :mod:`lipattn.book.plotting`), alt text, lazy loading and a phone width;
   Font Awesome's 1.5 MB ``fontawesome.js`` is replaced by inline SVG icons
   for the few icons the pages use; build reports (tracebacks with local
   paths) are moved out of the site to ``_build/reports``.
8. **Run it yourself.** Each chapter is offered as a notebook (``.ipynb``,
   written by jupytext at build time) in the download menu, and every
   chapter ends with a line on how to run it locally; the repository button
   shows only when ``repository.url`` is set in ``_config.yml``.
9. **A build that stops half-way is finished by the next.** Sphinx writes
   the search index and the indices after the pages, and this extension
   rewrites the pages after that, so a build stopped in between (Ctrl-C, a
   failing handler) leaves a site whose pages are all up to date for Sphinx
   but incomplete. A build that ends records that in the doctree folder
   (:data:`COMPLETE_MARK`); a build that finds no such record for its output
   folder writes every page again.
10. **Chinese search terms.** With ``html_search_language: zh`` Sphinx splits
   text into words with jieba. Its general dictionary cuts the book's terms
   (谱范数, 雅可比矩阵, …) into pieces that a whole-term query no longer
   matches, so the book's terms (``search_terms_zh.txt`` beside this module)
   are loaded as a jieba user dictionary, unless ``html_search_options``
   names another; jieba's progress messages are silenced.
11. **A second language (Sphinx gettext).** ``lipattn_translation`` names
   the translated edition (``language``, e.g. ``zh_CN``; its ``folder``
   under the English site, e.g. ``zh``; its BCP 47 ``lang`` and its
   ``label``; the file ``list`` of pages whose catalogue is complete). The
   build whose ``language`` is that one (``python -m lipattn.book.edition``)
   writes into ``_build/html/<folder>`` and keeps its own doctrees, but
   shares the English build's execution cache (``lipattn_build_dir``: the
   build folder both use), so no notebook runs twice. Every page links to
   its twin in the other language (a header button); in the translation,
   pages not on the list carry a short notice that they are not yet
   translated, and their English body is marked ``lang="en"``. Glue roles
   in translated text (``{glue:text}`key```, parsed again by Sphinx from
   the catalogue, without the notebook) become myst-nb's pending glue
   references to the page itself, resolved from its glue data like a
   cross-document paste. A ``{glue:md} key`` or ``{glue} key`` directive pastes
   ``key_zh`` (for the language ``zh``) where the page glued one. The English
   build leaves the translation's folder
   alone (:func:`finish_site` skips nested sites) and vice versa. Figure alt
   text is set in code (:func:`lipattn.book.plotting.set_alt`), so it is not
   in the pages' catalogues: ``make gettext`` collects the English build's
   alt texts into ``figures.pot`` (:func:`figures_pot`), translated in
   ``<locale>/<language>/LC_MESSAGES/figures.po``; the translation's figures
   take their alt text from there (:func:`alt_catalogue`), else the English.
   The explorers' players are written by the kernel too (their texts are in
   the explorers' declarations): ``make gettext`` collects every
   word-bearing text of the English pages' players (title, control names,
   value texts, presets, note; :func:`explorers_pot`) into
   ``explorers.pot`` (``explorers.po``), and the translation's players show
   those texts translated, in their HTML and in the data their script reads
   (frames untouched); texts without a translation stay English, marked
   ``lang="en"``.
"""

from __future__ import annotations

import base64
import hashlib
import html as _html
import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["MATHJAX_FILES", "COMPLETE_MARK", "UNTRANSLATED_NOTICE", "FIGURES_DOMAIN",
           "EXPLORERS_DOMAIN", "figures_pot", "explorers_pot", "alt_catalogue", "inputs_hash",
           "mathjax_subset", "sync_tree", "finish_site", "rewrite_page", "is_translation",
           "translated_pages", "setup"]

#: Paths under MathJax's ``static/mathjax`` folder that the site ships.
MATHJAX_FILES = (
    "LICENSE",
    "es5/tex-chtml.js",
    "es5/output/chtml/fonts/woff-v2",
    "es5/input/tex/extensions",
    "es5/ui",
    "es5/a11y/assistive-mml.js",
)

#: File in the doctree folder that records the output folder of the last build that ended.
COMPLETE_MARK = "lipattn-complete"

_WATCHED_SUFFIXES = {".py", ".mplstyle", ".css", ".js", ".txt", ".toml", ".cfg", ".yml",
                     ".npz"}


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


def sync_tree(source: Path, dest: Path) -> int:
    """Make ``dest`` hold exactly the files of ``source`` (idempotent).

    Files missing from ``dest`` or differing from ``source`` (size or bytes)
    are copied; files and folders of ``dest`` that ``source`` does not have
    are removed. Nothing that ``source`` holds is ever absent from ``dest``
    for longer than its own copy takes.

    Parameters
    ----------
    source : Path
        An existing directory.
    dest : Path
        The directory to update (created if missing).

    Returns
    -------
    int
        The number of files copied or removed (0 when ``dest`` was already equal).
    """
    source, dest = Path(source), Path(dest)
    if not source.is_dir():
        raise ValueError(f"source must be an existing directory; got {str(source)!r}")
    changed = 0
    want = {p.relative_to(source) for p in source.rglob("*") if p.is_file()}
    for rel in sorted(want):
        src, out = source / rel, dest / rel
        if out.is_dir():
            shutil.rmtree(out)
        if (not out.is_file() or out.stat().st_size != src.stat().st_size
                or out.read_bytes() != src.read_bytes()):
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, out)
            changed += 1
    if dest.is_dir():
        for p in sorted(dest.rglob("*"), reverse=True):  # children before their folders
            rel = p.relative_to(dest)
            if p.is_dir() and not p.is_symlink():
                if not any(p.iterdir()):
                    p.rmdir()
            elif rel not in want:
                p.unlink()
                changed += 1
    return changed


def _build_root(app: Any) -> Path:
    """The build folder (``_build``): ``lipattn_build_dir`` if set, else the
    output folder's parent (``_build/html`` -> ``_build``)."""
    given = getattr(app.config, "lipattn_build_dir", "")
    return Path(given) if given else Path(app.outdir).parent


def _translation(config: Any) -> dict:
    """``lipattn_translation`` with its defaults, or {} when there is none."""
    tr = dict(config.lipattn_translation or {})
    if not tr:
        return {}
    for key in ("language", "folder"):
        if not isinstance(tr.get(key), str) or not tr[key]:
            raise ValueError(f"lipattn_translation[{key!r}] must be a non-empty string; "
                             f"got {tr.get(key)!r}")
    tr.setdefault("lang", tr["language"].replace("_", "-"))
    tr.setdefault("label", tr["language"])
    return tr


def is_translation(config: Any) -> bool:
    """Is this the build of the translated edition (its ``language``)?"""
    tr = _translation(config)
    return bool(tr) and (config.language or "") == tr["language"]


def translated_pages(path: Path | str) -> list[str]:
    """The docnames listed in a translated-pages file (one a line; blank
    lines and ``#`` comments ignored); [] when the file does not exist."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a path (str or Path); got {type(path).__name__}")
    path = Path(path)
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.append(line)
    return out


def _config_inited(app: Any, config: Any) -> None:
    root = Path(app.srcdir)
    digest = inputs_hash(root, config.lipattn_watch)
    app.lipattn_inputs_hash = digest
    build = _build_root(app)
    base = Path(config.nb_execution_cache_path or build / ".jupyter_cache")
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
    static = mathjax_subset(source, build / "lipattn-mathjax")
    # The site's own copy is left alone here: a build with nothing out of
    # date copies no static files, so what is deleted now would stay missing.
    # build-finished makes it equal to the subset (_finish).
    app.lipattn_mathjax = static / "mathjax"
    config.html_static_path = [*config.html_static_path, str(static)]
    config.mathjax_path = "mathjax/es5/tex-chtml.js"

    if str(config.html_search_language or "").startswith("zh"):
        _chinese_search(config)
    prompts = _CODE_PROMPTS.get(_language(config))
    if prompts is not None:
        config.nb_code_prompt_show, config.nb_code_prompt_hide = prompts

    # the repository button whenever there is a repository to link to
    opts = dict(config.html_theme_options or {})
    if opts.get("repository_url"):
        opts["use_repository_button"] = True
    tr = _translation(config)
    app.lipattn_translated = set()
    if tr:
        # the other-language button, first among the header's buttons
        config.templates_path = [*config.templates_path,
                                 str(Path(__file__).with_name("templates"))]
        opts.setdefault("article_header_end",
                        ["lipattn-language.html", "article-header-buttons.html"])
        if tr.get("list"):
            app.lipattn_translated = set(translated_pages(root / tr["list"]))
    config.html_theme_options = opts


def _chinese_search(config: Any) -> None:
    import logging

    import jieba

    jieba.setLogLevel(logging.WARNING)
    options = dict(config.html_search_options or {})
    options.setdefault("dict", str(Path(__file__).with_name("search_terms_zh.txt")))
    config.html_search_options = options


def _builder_inited(app: Any) -> None:
    """Was the last HTML build into this output folder finished? Read the
    record, then clear it until this build ends (:func:`_finish`)."""
    if app.builder.format != "html":
        return
    mark = Path(app.doctreedir) / COMPLETE_MARK
    app.lipattn_resume = mark.is_file() and mark.read_text(encoding="utf-8") == str(app.outdir)
    mark.unlink(missing_ok=True)


def _nb_output_folder(app: Any) -> None:
    """A translation's site sits inside the English one (``_build/html/zh``):
    myst-nb's output folder (``<outdir>/../jupyter_execute``) would be inside
    the English site; it goes beside the English one instead."""
    build, out = _build_root(app), Path(app.outdir)
    config = getattr(app.env, "mystnb_config", None)
    if config is not None and out.parent.resolve() != build.resolve():
        folder = build / f"jupyter_execute-{out.name}"
        app.env.mystnb_config = config.copy(output_folder=str(folder.resolve()))


def _env_get_outdated(app: Any, env: Any, added: set, changed: set, removed: set) -> list[str]:
    digest = app.lipattn_inputs_hash
    # pages that joined or left the translated list get their notice changed
    listed = getattr(app, "lipattn_translated", set())
    flipped = listed ^ getattr(env, "lipattn_translated", set())
    env.lipattn_translated = set(listed)
    if is_translation(app.config):  # a new alt or explorer text: every page written again
        stamp = "".join(hashlib.sha256(po.read_bytes()).hexdigest() if po.is_file() else "-"
                        for po in (_figures_po(app), _figures_po(app, EXPLORERS_DOMAIN)))
        if getattr(env, "lipattn_figures_po", "") != stamp:
            env.lipattn_figures_po = stamp
            flipped = set(env.found_docs)
    if getattr(env, "lipattn_inputs_hash", None) == digest and getattr(app, "lipattn_resume", True):
        return sorted(flipped & env.found_docs)
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


_PLAYER_RE = re.compile(r'<div class="lipattn-player"[^>]*data-explorer="([^"]+)"')
_DATA_RE = re.compile(r'(<script type="application/json" class="lp-data">)(.*?)(</script>)', re.S)
_FRAME_RE = re.compile(r'(<img class="lp-frame"[^>]*?)src="data:image/webp;base64,([^"]+)"')
_IMG_RE = re.compile(r'<img ([^>]*?)src="([^"]+\.png)"([^>]*?)\s*/?>')
_ICON_RE = re.compile(r'<(i|span) class="([^"]*\bfa-[a-z0-9-]+[^"]*)"([^>]*)>\s*</\1>')
_PACKS = {"fab": "fab", "fa-brands": "fab", "far": "far", "fa-regular": "far",
          "fas": "fas", "fa-solid": "fas", "fa": "fas"}
#: Widest viewport (CSS px) that gets a figure's narrow, stacked variant.
_PHONE_MAX = 600
#: The note at the end of every chapter, by language (the translation's own, else English).
_RUN_LOCALLY = {
    "en": ('<aside class="lp-run-locally d-print-none" aria-label="Run this page">'
           "<strong>Run this page yourself.</strong> Download it as a notebook "
           '(<a href="{ipynb}">.ipynb</a>, also in the download menu at the top), or clone '
           "the book's repository{repo} and run <code>make lab</code>: every chapter opens "
           "as a notebook with live explorers (Python 3.11+, nothing else to install by "
           "hand).</aside>"),
    "zh": ('<aside class="lp-run-locally d-print-none" aria-label="自己运行本页">'
           "<strong>自己运行本页。</strong>可以把本页下载为 notebook"
           '（<a href="{ipynb}">.ipynb</a>，页面顶部的下载菜单里也有），或者克隆本书的'
           "代码仓库{repo}，然后运行 <code>make lab</code>：每一章都会作为 notebook 打开，"
           "其中的交互演示可以实时重新计算（需要 Python 3.11+，其他都不必手动安装）。</aside>"),
}
#: myst-nb's prompts of a collapsed code cell in the translation, by language
#: (its own "Show code cell {type}" would put an English word in the button).
_CODE_PROMPTS = {"zh": ("展开代码单元", "收起代码单元")}


def _write_frame(static: Path, explorer: str, data: bytes) -> str:
    """Write one frame (content-addressed) and return its path under ``_static``."""
    rel = f"frames/{explorer}/{hashlib.sha256(data).hexdigest()[:20]}.webp"
    out = static / rel
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
    return rel


def _frames_out(page: str, prefix: str, static: Path) -> str:
    starts = [m.start() for m in _PLAYER_RE.finditer(page)]
    if not starts:
        return page
    pieces, last = [page[:starts[0]]], len(page)
    for a, b in zip(starts, [*starts[1:], last], strict=True):
        seg = page[a:b]
        name = re.sub(r"[^A-Za-z0-9_-]", "_", _PLAYER_RE.match(seg).group(1))
        m = _DATA_RE.search(seg)
        if m is not None:
            payload = json.loads(m.group(2))
            if "images" in payload:
                urls = [prefix + _write_frame(static, name, base64.b64decode(img))
                        for img in payload.pop("images")]
                payload["urls"] = urls
                seg = seg[:m.start(2)] + json.dumps(payload) + seg[m.end(2):]

        def _img(fm: re.Match, name: str = name) -> str:
            url = prefix + _write_frame(static, name, base64.b64decode(fm.group(2)))
            return f'{fm.group(1)}loading="lazy" decoding="async" src="{url}"'

        seg = _FRAME_RE.sub(_img, seg)
        pieces.append(seg)
    return "".join(pieces)


def _figure_meta(path: Path) -> dict[str, str] | None:
    from PIL import Image

    try:
        with Image.open(path) as im:
            text = dict(getattr(im, "text", {}) or {})
            size = im.size
    except OSError:
        return None
    if "lipattn:css-width" not in text or "lipattn:min-text-px" not in text:
        return None  # not drawn by lipattn.book.plotting, or before it measured glyphs
    text["size"] = f"{size[0]}x{size[1]}"
    return text


def _split_narrow(wide: Path, narrow: Path) -> None:
    """Move the phone variant out of the wide PNG's metadata into its own file
    (so the desktop image does not carry it), leaving a note of its name."""
    from PIL import Image
    from PIL.PngImagePlugin import PngInfo

    with Image.open(wide) as im:
        im.load()
        text = dict(im.text)
        narrow.write_bytes(base64.b64decode(text.pop("lipattn:narrow")))
        info = PngInfo()
        for key, value in text.items():
            info.add_text(key, value)
        info.add_text("lipattn:narrow-src", narrow.name)
        im.save(wide, format="PNG", pnginfo=info, optimize=True)


def _figures(page: str, page_dir: Path, alt_text: Any = None) -> str:
    from . import plotting

    def fix(m: re.Match) -> str:
        before, src, after = m.groups()
        if "data-min-font-px" in m.group(0):  # rewritten by an earlier build
            return m.group(0)
        meta = _figure_meta((page_dir / src).resolve())
        if meta is None:
            return m.group(0)
        attrs = before + after
        w_px, h_px = (int(v) for v in meta["size"].split("x"))
        css_w = int(meta["lipattn:css-width"])
        css_h = round(h_px * css_w / w_px)
        font = float(meta["lipattn:min-text-px"])
        alt = re.search(r'alt="([^"]*)"', attrs)
        if alt is None or alt.group(1).endswith(".png"):
            attrs = re.sub(r'\s*alt="[^"]*"', "", attrs)
            text = meta.get("lipattn:alt", "")
            if alt_text is not None:
                text = alt_text.get(text, text)
            attrs += f' alt="{_html.escape(text)}"'
        cls = re.search(r'class="([^"]*)"', attrs)
        if cls:
            attrs = attrs.replace(cls.group(0), f'class="{cls.group(1)} lp-fig"')
        else:
            attrs += ' class="lp-fig"'
        phone = plotting.phone_min_width(css_w, font)
        narrow = ""
        nsrc = src[:-4] + "-narrow.png"
        if "lipattn:narrow" in meta:  # the panels stacked for a phone
            _split_narrow((page_dir / src).resolve(), (page_dir / nsrc).resolve())
            meta["lipattn:narrow-src"] = nsrc
        if "lipattn:narrow-src" in meta:
            from PIL import Image

            with Image.open(page_dir / nsrc) as im:
                nw_px, nh_px = im.size
            n_w = int(meta["lipattn:narrow-css-width"])
            n_h = round(nh_px * n_w / nw_px)
            n_font = float(meta["lipattn:narrow-min-text-px"])
            phone = plotting.phone_min_width(n_w, n_font)
            narrow = (f'<source media="(max-width: {_PHONE_MAX}px)" srcset="{nsrc}" '
                      f'width="{n_w}" height="{n_h}">')
            attrs += (f' data-narrow-width="{n_w}" data-narrow-min-font-px="{n_font:.2f}"')
        img = (f'<img {attrs.strip()} src="{src}" width="{css_w}" height="{css_h}" '
               f'loading="lazy" decoding="async" data-min-font-px="{font:.2f}" '
               f'style="--lp-phone-min: {phone}px" />')
        return f'<picture class="lp-picture">{narrow}{img}</picture>' if narrow else img

    return _IMG_RE.sub(fix, page)


def _icon_table(fa_js: Path) -> dict[tuple[str, str], tuple[int, int, str]]:
    """(pack, name) -> (width, height, SVG path) from Font Awesome's JS bundle."""
    text = fa_js.read_text(encoding="utf-8")
    ends = sorted((m.start(), _PACKS[m.group(1)])
                  for m in re.finditer(r'\bd\("(fab|far|fas)",p\)', text))
    table: dict[tuple[str, str], tuple[int, int, str]] = {}
    icon = re.compile(r'(?:"([a-z0-9-]+)"|\b([a-z0-9]+)):\[(\d+),(\d+),\[([^\]]*)\],'
                      r'"[0-9a-f]+",("(?:[^"\\]|\\.)*"|\[[^\]]*\])\]')
    for m in icon.finditer(text):
        pack = next((p for end, p in ends if end > m.start()), None)
        if pack is None:
            continue
        path = json.loads(m.group(6))
        path = path if isinstance(path, str) else " ".join(path)
        names = [m.group(1) or m.group(2)]
        names += [a.strip('"') for a in m.group(5).split(",") if a.startswith('"')]
        for name in names:
            table.setdefault((pack, name), (int(m.group(3)), int(m.group(4)), path))
    return table


def _icons(page: str, table: dict) -> str:
    def svg(m: re.Match) -> str:
        classes = m.group(2).split()
        pack = next((_PACKS[c] for c in classes if c in _PACKS), "fas")
        names = [c[3:] for c in classes if c.startswith("fa-") and c not in _PACKS]
        for name in names:
            if (pack, name) in table:
                w, h, d = table[(pack, name)]
                return (f'<svg class="svg-inline--fa {" ".join(classes)}" aria-hidden="true" '
                        f'focusable="false" role="img" viewBox="0 0 {w} {h}"{m.group(3)}>'
                        f'<path fill="currentColor" d="{d}"></path></svg>')
        return m.group(0)

    return _ICON_RE.sub(svg, page)


def rewrite_page(page: str, page_dir: Path, static: Path, icons: dict | None,
                 alt_text: dict | None = None, player_text: dict | None = None,
                 lang: str | None = None) -> str:
    """The built HTML of one page, made light (see the module docstring, item 7).

    Parameters
    ----------
    page : str
        The page's HTML.
    page_dir : Path
        The folder holding the page (relative URLs are resolved from it).
    static : Path
        The site's ``_static`` folder (frames are written under it).
    icons : dict or None
        :func:`_icon_table`, or None to leave icons alone.
    alt_text : dict or None
        English alt text -> the alt text to show (a translation's,
        :func:`alt_catalogue`); texts it lacks stay English.
    player_text : dict or None
        The same for the explorers' players (:func:`explorers_pot`): their
        texts it lacks stay English, marked ``lang="en"``.
    lang : str or None
        The BCP 47 tag of the translation (required with ``player_text``).
    """
    prefix = Path(os.path.relpath(static, page_dir)).as_posix() + "/"
    page = _frames_out(page, prefix, static)
    page = _figures(page, page_dir, alt_text)
    if player_text is not None:
        if not lang:
            raise ValueError("lang (the translation's language tag) is required with "
                             "player_text")
        page = _each_player(page, lambda p: _player_texts(p, player_text.get, lang))
    if icons is not None:
        page = _icons(page, icons)
        page = re.sub(
            r'\s*<script defer src="[^"]*_static/scripts/fontawesome\.js[^"]*"></script>', "", page)
    # the visible text "Search Ctrl+K" is the search buttons' name (axe:
    # label-content-name-mismatch with aria-label="Search", or a translation's "搜索")
    page = re.sub(r'(<button class="btn search-button-field[^"]*"[^>]*?) aria-label="[^"]*"',
                  r"\1", page)
    # the bibliography: a list of list items (role doc-biblioentry is deprecated,
    # and a list needs listitem children: axe aria-required-children)
    page = page.replace('role="doc-biblioentry"', 'role="listitem"')
    first = re.search(r'<div class="lipattn-player" id="(explorer-[^"]+)"', page)
    if first is not None and "lp-skip-explorer" not in page:
        said = (player_text or {}).get(_SKIP_EXPLORER)
        mark = ' lang="en"' if player_text is not None and not said else ""
        link = (f'<a class="lp-skip-explorer" href="#{first.group(1)}"{mark}>'
                f"{_html.escape(said or _SKIP_EXPLORER)}</a>")
        page = re.sub(r'(<a href="#main-content">[^<]*</a>)(</div>)',
                      lambda m: m.group(1) + link + m.group(2), page, count=1)
    return page


def finish_site(outdir: Path, reports_dest: Path | None = None,
                alt_text: dict | None = None, player_text: dict | None = None,
                lang: str | None = None) -> None:
    """Post-process the built site in place (module docstring, item 7).

    Folders holding their own site (a ``.buildinfo``, e.g. a translation's
    ``zh/``) are left alone. ``reports_dest``: where build reports go
    (default ``<outdir>/../reports``); ``alt_text``, ``player_text`` and
    ``lang``: a translation's texts (:func:`rewrite_page`)."""
    outdir = Path(outdir)
    reports = outdir / "reports"
    if reports.is_dir():  # tracebacks with local paths: not part of the site
        dest = reports_dest or outdir.parent / "reports"
        shutil.rmtree(dest, ignore_errors=True)
        shutil.move(str(reports), str(dest))
    static = outdir / "_static"
    # another site inside this one (a translation's, ``zh/``) is its build's
    nested = _nested_sites(outdir)
    fa_js = static / "scripts" / "fontawesome.js"
    icons = _icon_table(fa_js) if fa_js.is_file() else None
    used: set[Path] = set()
    for f in sorted(outdir.rglob("*.html")):
        if any(f.is_relative_to(n) for n in nested):
            continue
        text = f.read_text(encoding="utf-8")
        new = rewrite_page(text, f.parent, static, icons, alt_text, player_text, lang)
        if new != text:
            f.write_text(new, encoding="utf-8")
        used.update((f.parent / u).resolve()
                    for u in re.findall(r'[^"]*_static/frames/[^"]+\.webp', new))
    # pages that Sphinx did not rewrite keep their frames; frames no page uses go
    for frame in (static / "frames").rglob("*.webp") if (static / "frames").is_dir() else ():
        if frame.resolve() not in used:
            frame.unlink()
    if icons is not None:
        for leftover in (fa_js, fa_js.with_name("fontawesome.js.LICENSE.txt")):
            leftover.unlink(missing_ok=True)


#: The catalogue (domain) of the figures' alt texts, beside the pages' catalogues.
FIGURES_DOMAIN = "figures"


def figures_pot(images: Path | str, pot: Path | str) -> int:
    """Write the alt texts of the figures in ``images`` (an English build's
    ``_images``: PNGs drawn by :mod:`lipattn.book.plotting`) as a message
    template ``pot``; returns the number of messages."""
    from babel.messages.catalog import Catalog
    from babel.messages.pofile import write_po
    from PIL import Image

    images = Path(images)
    if not images.is_dir():
        raise ValueError(f"images must be an existing folder (build the English site "
                         f"first); got {str(images)!r}")
    cat = Catalog(fuzzy=False)
    for png in sorted(images.glob("*.png")):
        with Image.open(png) as im:
            alt = dict(getattr(im, "text", {}) or {}).get("lipattn:alt")
        if alt:
            cat.add(alt)
    with open(pot, "wb") as f:
        write_po(f, cat, width=0, omit_header=False)
    return len(cat)


def alt_catalogue(po: Path | str) -> dict[str, str]:
    """English alt text -> translation, from ``po`` (translated entries that
    are not fuzzy); {} when the file does not exist."""
    from babel.messages.pofile import read_po

    po = Path(po)
    if not po.is_file():
        return {}
    with open(po, "rb") as f:
        cat = read_po(f)
    return {m.id: m.string for m in cat if m.id and m.string and not m.fuzzy}


def _figures_po(app: Any, domain: str = FIGURES_DOMAIN) -> Path:
    """The translation's catalogue of ``domain`` (the figures' alt texts, or
    :data:`EXPLORERS_DOMAIN`)."""
    dirs = app.config.locale_dirs or ["locales"]
    return (Path(app.srcdir) / dirs[0] / app.config.language / "LC_MESSAGES"
            / f"{domain}.po")


#: The catalogue (domain) of the explorers' texts: the static players' titles,
#: control names, word-bearing values, preset buttons and notes.
EXPLORERS_DOMAIN = "explorers"

_WORDS = re.compile(r"[A-Za-z]{2}")  # a text without two Latin letters in a row is math
_NOTE_COUNT = "{n}"  # the number of frames in a player's note, in its message
_SKIP_EXPLORER = "Skip to the first explorer"  # the skip link of a page with explorers
_SKIP_RE = re.compile(r'<a class="lp-skip-explorer"[^>]*>([^<]*)</a>')


def _each_player(page: str, fix: Callable[[str], str]) -> str:
    """``page`` with each explorer player's HTML (from its opening ``<div>``
    to the end of its script, as :meth:`lipattn.book.widgets.Explorer.player_html`
    writes it) replaced by ``fix(player)``."""
    out, pos = [], 0
    for m in _PLAYER_RE.finditer(page):
        if m.start() < pos:
            continue
        data = _DATA_RE.search(page, m.end())
        end = -1 if data is None else page.find("</script></div>", data.start())
        if end < 0:
            continue
        end += len("</script></div>")
        out += [page[pos:m.start()], fix(page[m.start():end])]
        pos = end
    return "".join(out) + page[pos:]


def _player_texts(player: str, say: Callable[[str], str | None],
                  lang: str | None = None) -> str:
    """One player's HTML with every word-bearing text ``t`` (title, control
    names and legends, value texts, preset buttons and their group's name,
    the note, and the same strings in its ``lp-data`` JSON) shown as
    ``say(t)``; texts that ``say`` returns None for stay as they are. The
    note's message holds ``{n}`` for its number of frames.

    With ``lang`` (the translation's BCP 47 tag) the player is marked as
    being in that language, the elements left in English ``lang="en"``, and
    the frame's alt text is rebuilt from the translated strings, as the
    player's script does; a player already marked is returned unchanged.
    Without it (collecting the messages) nothing is marked."""
    root = re.match(r"<div ([^>]*)>", player)
    if root is None or (lang is not None and re.search(r'\blang="', root.group(1))):
        return player
    data = _DATA_RE.search(player)
    payload = json.loads(data.group(2))
    esc = _html.escape

    def tr(text: str) -> tuple[str, bool]:
        if not _WORDS.search(text):
            return text, True
        new = say(text)
        return (text, False) if new is None else (new, True)

    def marked(tag: str, ok: bool) -> str:
        return tag if ok or lang is None else tag + ' lang="en"'

    def elem(pattern: str) -> Callable[[str], str]:
        """Translate the text (group ``t``) of the element whose opening tag,
        without its ``>``, is group ``tag`` (``pre``: markup before the text)."""
        def fix(m: re.Match) -> str:
            text, ok = tr(_html.unescape(m.group("t")))
            return f'{marked(m.group("tag"), ok)}>{m.group("pre") or ""}{esc(text)}'
        return lambda s: re.sub(pattern + r"(?=<)", fix, s)

    def attr(name: str) -> Callable[[str], str]:
        def fix(m: re.Match) -> str:
            return f'{m.group(1)}{esc(tr(_html.unescape(m.group(2)))[0])}"'
        return lambda s: re.sub(rf'(\s{name}=")([^"]*)"', fix, s)

    head, tail = player[:data.start()], player[data.start():]
    # the note: {n} stands for its number of frames
    count = str(len(payload.get("frames", ())))

    def note(m: re.Match) -> str:
        inner = re.sub(rf"(?<![\d.]){count}(?![\d.])", _NOTE_COUNT, m.group(2), count=1)
        text, ok = tr(inner)
        return f"{marked(m.group(1), ok)}>{text.replace(_NOTE_COUNT, count)}{m.group(3)}"

    head = re.sub(r'(<div class="lp-note")>(.*?)(</div>)', note, head, flags=re.S)
    for fix in (elem(r'(?P<tag><div class="lp-title"[^>]*)>(?P<pre>)(?P<t>[^<]*)'),
                elem(r'(?P<tag><div class="lp-presets"[^>]*><span)>(?P<pre>)(?P<t>[^<]*)'),
                elem(r'(?P<tag><button [^>]*class="lp-preset"[^>]*)>(?P<pre>)(?P<t>[^<]*)'),
                elem(r"(?P<tag><legend)>(?P<pre>)(?P<t>[^<]*)"),
                elem(r'(?P<tag><label)>(?P<pre><input type="radio"[^>]*> )(?P<t>[^<]*)'),
                elem(r'(?P<tag><label class="lp-slider"><span)>(?P<pre>)(?P<t>[^<]*)'),
                elem(r"(?P<tag><output)>(?P<pre>)(?P<t>[^<]*)"),
                attr("aria-valuetext"), attr("aria-label"), attr("title")):
        head = fix(head)
    payload["title"] = tr(payload.get("title", ""))[0]
    payload["names"] = [tr(n)[0] for n in payload.get("names", ())]
    payload["labels"] = [[tr(v)[0] for v in vs] for vs in payload.get("labels", ())]
    if lang is None:
        return player
    flat = re.search(r'\bdata-frame="(\d+)"', root.group(1))
    if flat is not None and payload.get("shape"):
        ks, rest = [], int(flat.group(1))
        for n in reversed(payload["shape"]):  # the flat index, row-major
            ks.insert(0, rest % n)
            rest //= n
        said = ", ".join(f"{n} {vs[k]}" for n, vs, k in
                         zip(payload["names"], payload["labels"], ks, strict=True))
        head = re.sub(r'(<img class="lp-frame"[^>]*?\salt=")[^"]*"',
                      lambda m: f'{m.group(1)}{esc(payload["title"])}: {esc(said)}"', head)
    head = f'<div {root.group(1)} lang="{esc(lang)}">' + head[root.end():]
    body = json.dumps(payload).replace("</", "<\\/")
    return head + tail[:data.start(2) - data.start()] + body + tail[data.end(2) - data.start():]


def _nested_sites(site: Path) -> list[Path]:
    """Folders inside ``site`` holding a site of their own (a translation's ``zh/``)."""
    return [p.parent for p in site.glob("*/**/.buildinfo")]


def explorers_pot(site: Path | str, pot: Path | str) -> int:
    """Write the word-bearing texts of the explorers' players on the pages of
    ``site`` (an English build's HTML folder; a translation's site inside it
    is skipped) as a message template ``pot``; returns the number of
    messages. Numbers and math (no two Latin letters in a row) are left out;
    each message's comment names its explorers."""
    from babel.messages.catalog import Catalog
    from babel.messages.pofile import write_po

    site = Path(site)
    if not site.is_dir():
        raise ValueError(f"site must be an existing folder (build the English site "
                         f"first); got {str(site)!r}")
    nested = _nested_sites(site)
    found: dict[str, list[str]] = {}  # message -> its explorers, in order of appearance

    def collect(player: str) -> str:
        name = _PLAYER_RE.match(player).group(1)
        return _player_texts(player, lambda text: found.setdefault(text, []).append(name))

    for f in sorted(site.rglob("*.html")):
        if not any(f.is_relative_to(n) for n in nested):
            page = f.read_text(encoding="utf-8")
            _each_player(page, collect)
            for m in _SKIP_RE.finditer(page):
                found.setdefault(_html.unescape(m.group(1)), [])
    cat = Catalog(fuzzy=False)
    for text, names in found.items():
        notes = [f"{_NOTE_COUNT}: the number of frames (keep it); HTML: keep its tags"
                 ] if _NOTE_COUNT in text else []
        where = ("explorers: " + ", ".join(dict.fromkeys(names)) if names
                 else "the link that skips to a page's first explorer")
        cat.add(text, auto_comments=[*notes, where])
    with open(pot, "wb") as out:
        write_po(out, cat, width=0, omit_header=False)
    return len(cat)


def _reports_dest(app: Any) -> Path:
    build, out = _build_root(app), Path(app.outdir)
    if out.parent.resolve() == build.resolve():
        return build / "reports"
    return build / f"reports-{out.name}"


def _finish(app: Any, exception: Exception | None) -> None:
    if app.builder.format != "html":
        return
    reports = Path(app.outdir) / "reports"
    if exception is not None:
        if reports.is_dir():
            dest = _reports_dest(app)
            shutil.rmtree(dest, ignore_errors=True)
            shutil.move(str(reports), str(dest))
        return
    sync_tree(app.lipattn_mathjax, Path(app.outdir) / "_static" / "mathjax")
    if is_translation(app.config):
        alt = alt_catalogue(_figures_po(app))
        players = alt_catalogue(_figures_po(app, EXPLORERS_DOMAIN))
        lang = _translation(app.config)["lang"]
    else:
        alt = players = lang = None
    finish_site(Path(app.outdir), _reports_dest(app), alt, players, lang)
    (Path(app.doctreedir) / COMPLETE_MARK).write_text(str(app.outdir), encoding="utf-8")


def _notebook_download(app: Any, pagename: str, templatename: str, context: dict,
                       doctree: Any) -> None:
    """Write the page's notebook (.ipynb, no outputs) and offer it for download."""
    if doctree is None or app.builder.format != "html":
        return
    src = Path(app.env.doc2path(pagename))
    if src.suffix != ".md" or "kernelspec:" not in src.read_text(encoding="utf-8")[:2000]:
        return
    import jupytext

    rel = f"{pagename}.ipynb"
    out = Path(app.outdir) / "_sources" / rel
    out.parent.mkdir(parents=True, exist_ok=True)
    jupytext.write(jupytext.read(src), out, fmt="ipynb")
    context["ipynb_source"] = rel
    repo = (app.config.html_theme_options or {}).get("repository_url") or ""
    link = f' (<a href="{_html.escape(repo)}">{_html.escape(repo)}</a>)' if repo else ""
    href = f"{context['pathto']('_sources', 1)}/{rel}"
    note = _RUN_LOCALLY.get(_language(app.config), _RUN_LOCALLY["en"])
    context["body"] = context.get("body", "") + note.format(ipynb=href, repo=link)


def _page_language(app: Any, pagename: str, templatename: str, context: dict,
                   doctree: Any) -> None:
    lang = app.config.lipattn_page_languages.get(pagename)
    if lang:
        context["language"] = lang  # the theme's <html lang="{{ language }}">


#: The notice on a page of the translation that is not translated yet, by language.
UNTRANSLATED_NOTICE = {
    "zh": ("本页尚未译成中文，以下是英文原文。"
           '<a href="{twin}" hreflang="en" lang="en">English</a>'),
}


def _language(config: Any) -> str:
    """The build's language code: the translation's (``"zh"`` for ``zh-Hans``)
    in the translation's build, else ``"en"``."""
    if not is_translation(config):
        return "en"
    return _translation(config)["lang"].split("-")[0].lower()


def _twin(app: Any, pagename: str) -> dict | None:
    """The other-language twin of ``pagename``: its URL (relative to the
    page), its language tag and the button's label."""
    tr = _translation(app.config)
    if not tr:
        return None
    up = "../" * pagename.count("/")
    if is_translation(app.config):
        up += "../" * (tr["folder"].strip("/").count("/") + 1)
        return {"url": f"{up}{pagename}.html", "lang": "en", "label": "English",
                "title": "English version of this page"}
    return {"url": f"{up}{tr['folder'].strip('/')}/{pagename}.html", "lang": tr["lang"],
            "label": tr["label"], "title": tr.get("title", tr["label"])}


def _language_links(app: Any, pagename: str, templatename: str, context: dict,
                    doctree: Any) -> None:
    """The twin button (template ``lipattn-language.html``) and, in the
    translation, the not-yet-translated notice."""
    twin = _twin(app, pagename)
    if twin is None:
        return
    context["lipattn_twin"] = twin
    if not is_translation(app.config):
        return
    tr = _translation(app.config)
    own = app.config.lipattn_page_languages.get(pagename, "")
    context["language"] = own or tr["lang"]
    native = own.split("-")[0] == tr["lang"].split("-")[0]  # written in that language
    if doctree is None or native or pagename in app.lipattn_translated:
        return
    notice = UNTRANSLATED_NOTICE.get(_language(app.config))
    if notice is None:
        notice = 'Not yet translated: <a href="{twin}" hreflang="en">English</a>.'
    context["body"] = (
        f'<div class="admonition note lp-untranslated" role="note">'
        f'<p>{notice.format(twin=_html.escape(twin["url"]))}</p></div>'
        f'<div lang="en">{context.get("body", "")}</div>')


def _translated_glue_roles(app: Any) -> None:
    """``{glue:text}`` in translated text: a pending glue reference to the
    page itself (module docstring, item 11)."""
    from myst_nb.ext.glue.roles import PasteTextRole
    from myst_nb.ext.glue.utils import (
        PendingGlueReferenceError,
        create_pending_glue_ref,
        glue_warning,
    )

    class TranslatedPasteText(PasteTextRole):
        def run(self):  # type: ignore[no-untyped-def]
            env = getattr(self.document.settings, "env", None)
            if "nb_renderer" in self.document or env is None:
                return super().run()
            # as PasteTextRole: ``key`` or ``key:format``
            key, sep, fmt = self.text.rpartition(":")
            if not sep:
                key, fmt = self.text, "s"
            if "::" in key or key.endswith(":"):
                return super().run()  # a paste from another page: myst-nb's own
            own = "/" + Path(env.doc2path(env.docname)).relative_to(env.srcdir).as_posix()
            try:
                ref = create_pending_glue_ref(self.document, self.source, self.line, own,
                                              key, inline=True, gtype="text", fmt_spec=fmt)
            except PendingGlueReferenceError as exc:
                return [], [glue_warning(str(exc), self.document, self.line)]
            return [ref], []

    app.add_role_to_domain("glue", "text", TranslatedPasteText(), override=True)

    from myst_nb.ext.glue.directives import PasteAnyDirective, PasteMarkdownDirective
    from myst_nb.ext.glue.utils import RetrievalError, retrieve_glue_data

    def own_language(directive: Any, key: str) -> str:
        """``key_<lang>`` in the translation's build where the page glued
        one (the same data rendered in that language), else ``key``."""
        config = directive.state.document.settings.env.config
        if not is_translation(config):
            return key
        own = key + "_" + _language(config)
        try:
            retrieve_glue_data(directive.document, own)
        except RetrievalError:
            return key
        return own

    class TranslatedPasteMarkdown(PasteMarkdownDirective):
        """``{glue:md} key`` pastes :func:`own_language`'s key: ``key_zh`` in
        the Chinese build (the audit's boxes, the interview answers). The
        English build pastes ``key`` as ever."""

        def run(self):  # type: ignore[no-untyped-def]
            self.arguments = [own_language(self, self.arguments[0]), *self.arguments[1:]]
            return super().run()

    class TranslatedPasteAny(PasteAnyDirective):
        """``{glue} key`` (any mime type: the chapters' HTML quizzes) pastes
        :func:`own_language`'s key likewise; a paste from another page
        (``:doc:``) is myst-nb's own."""

        def run(self):  # type: ignore[no-untyped-def]
            if "doc" not in self.options:
                self.arguments = [own_language(self, self.arguments[0]), *self.arguments[1:]]
            return super().run()

    app.add_directive_to_domain("glue", "md", TranslatedPasteMarkdown, override=True)
    app.add_directive_to_domain("glue", "any", TranslatedPasteAny, override=True)
    app.add_directive("glue", TranslatedPasteAny, override=True)


def setup(app: Any) -> dict[str, Any]:
    """Register the extension with Sphinx."""
    app.add_config_value("lipattn_watch", ["lib", "requirements.txt"], "env")
    app.add_config_value("lipattn_build_dir", "", "env")
    app.add_config_value("lipattn_translation", {}, "html")
    app.connect("config-inited", _config_inited, priority=900)
    app.connect("builder-inited", _builder_inited)
    app.connect("builder-inited", _nb_output_folder, priority=600)  # after myst-nb's
    if "myst_nb" in app.extensions:
        _translated_glue_roles(app)
    app.connect("env-get-outdated", _env_get_outdated)
    # before myst-nb's own handler (priority 500) adds the page's scripts
    app.connect("html-page-context", _drop_widget_state, priority=400)
    app.connect("build-finished", _write_root_favicon)
    app.connect("build-finished", _prune_site)
    app.connect("build-finished", _finish)
    # before the book theme's header buttons (priority 500) read ipynb_source
    app.connect("html-page-context", _notebook_download, priority=450)
    app.add_config_value("lipattn_page_languages", {}, "html")
    app.connect("html-page-context", _page_language)
    app.connect("html-page-context", _language_links, priority=460)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
