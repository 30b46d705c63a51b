"""The build's extension (lipattn/book/sphinxext.py): no stale outputs, local MathJax."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lipattn.book.sphinxext import inputs_hash


def test_hash_follows_content_and_ignores_caches(tmp_path: Path):
    (tmp_path / "lib" / "pkg").mkdir(parents=True)
    (tmp_path / "lib" / "pkg" / "m.py").write_text("x = 1\n")
    (tmp_path / "requirements.txt").write_text("numpy==1\n")
    watch = ["lib", "requirements.txt"]
    h0 = inputs_hash(tmp_path, watch)
    (tmp_path / "lib" / "pkg" / "__pycache__").mkdir()
    (tmp_path / "lib" / "pkg" / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"junk")
    assert inputs_hash(tmp_path, watch) == h0
    (tmp_path / "lib" / "pkg" / "m.py").write_text("x = 2\n")
    h1 = inputs_hash(tmp_path, watch)
    assert h1 != h0
    (tmp_path / "requirements.txt").write_text("numpy==2\n")
    assert inputs_hash(tmp_path, watch) != h1


def _build(src: Path, out: Path) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "html", "-q", str(src), str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return (out / "page.html").read_text()


def test_a_change_to_the_watched_library_re_executes_the_notebook(tmp_path: Path):
    """Build, change only the watched file, build again: the output must change.

    The notebook's code cell is identical in both builds, so jupyter-cache
    alone would serve the first output again.
    """
    src = tmp_path / "book"
    (src / "lib").mkdir(parents=True)
    (src / "lib" / "value.txt").write_text("first-value\n")
    (src / "conf.py").write_text(textwrap.dedent("""
        extensions = ["myst_nb", "lipattn.book.sphinxext"]
        nb_execution_mode = "cache"
        lipattn_watch = ["lib"]
        exclude_patterns = ["_build", "lib"]
    """))
    (src / "index.md").write_text("# Index\n\n```{toctree}\npage\n```\n")
    (src / "page.md").write_text(textwrap.dedent("""\
        ---
        jupytext:
          text_representation:
            extension: .md
            format_name: myst
        kernelspec:
          name: python3
          display_name: Python 3
        ---
        # Page

        Math: {math}`x^2`.

        ```{code-cell} ipython3
        print(open("lib/value.txt").read().strip().upper())
        ```
    """))
    out = src / "_build" / "html"
    assert "FIRST-VALUE" in _build(src, out)
    (src / "lib" / "value.txt").write_text("second-value\n")
    page = _build(src, out)
    assert "SECOND-VALUE" in page and "FIRST-VALUE" not in page
    # MathJax is served from the site itself.
    assert (out / "_static" / "mathjax" / "es5" / "tex-chtml.js").is_file()
    assert (out / "favicon.ico").read_bytes()[:4] == b"\x00\x00\x01\x00"  # an ICO file
    assert 'src="_static/mathjax/es5/tex-chtml.js' in page


def _sphinx(src: Path, out: Path, **env: str) -> subprocess.CompletedProcess:
    import os

    return subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "html", str(src), str(out)],
        capture_output=True, text=True, timeout=300, env={**os.environ, **env},
    )


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _typesets(out: Path, page: str) -> None:
    """The page loads MathJax from a file of the site that is the whole
    subset (combined component and its fonts), and holds its formulas."""
    import re

    import mathjax

    from lipattn.book.sphinxext import MATHJAX_FILES

    html = (out / page).read_text(encoding="utf-8")
    srcs = re.findall(r'<script[^>]+src="([^"?]*mathjax[^"?]*)', html)
    assert srcs == ["_static/mathjax/es5/tex-chtml.js"], srcs
    dist = Path(mathjax.__file__).parent / "static" / "mathjax"
    assert (out / srcs[0]).read_bytes() == (dist / "es5" / "tex-chtml.js").read_bytes()
    root = out / "_static" / "mathjax"
    for rel in MATHJAX_FILES:  # each file, and each folder with all its files
        want = (dist / rel).rglob("*") if (dist / rel).is_dir() else [dist / rel]
        for f in want:
            if f.is_file():
                assert (root / f.relative_to(dist)).is_file(), f.relative_to(dist)
    assert r"\(x^2 + 1\)" in html and r"\sum_{i=1}^n" in html


def test_a_second_build_and_an_interrupted_one_leave_a_complete_site(tmp_path: Path):
    """`make html` twice, `make test` then `make book`: the second build has
    nothing out of date, so Sphinx copies no static files; the site must still
    have its MathJax, unchanged. A build stopped after writing its pages
    (Ctrl-C) is finished by the next one, although Sphinx finds nothing out of
    date, and a damaged MathJax copy is repaired by a build with nothing to do."""
    src = tmp_path / "book"
    src.mkdir()
    (src / "conf.py").write_text(textwrap.dedent("""
        import os
        extensions = ["myst_nb", "lipattn.book.sphinxext"]
        myst_enable_extensions = ["dollarmath"]
        lipattn_watch = []
        exclude_patterns = ["_build"]

        def _stop(app):
            raise KeyboardInterrupt  # as Ctrl-C would

        def setup(app):  # a stop after the pages, before the search index
            if os.environ.get("LP_STOP"):
                app.connect("html-collect-pages", _stop)
    """))
    (src / "index.md").write_text("# Index\n\n```{toctree}\npage\n```\n")
    (src / "page.md").write_text("# Page\n\nInline $x^2 + 1$ and\n\n$$\n\\sum_{i=1}^n i\n$$\n")
    out = src / "_build" / "html"
    mathjax = out / "_static" / "mathjax"

    first = _sphinx(src, out)
    assert first.returncode == 0, first.stderr
    _typesets(out, "page.html")
    site = _files(out)
    subset = _files(src / "_build" / "lipattn-mathjax" / "mathjax")
    assert _files(mathjax) == subset and len(subset) > 50

    second = _sphinx(src, out)  # nothing changed: Sphinx writes and copies nothing
    assert second.returncode == 0, second.stderr
    assert "no targets are out of date" in second.stdout, second.stdout[-2000:]
    assert _files(out) == site  # the site is exactly as the first build left it
    _typesets(out, "page.html")

    # A build stopped by Ctrl-C after writing the pages, before the search
    # index: for Sphinx the next build has nothing to do, and the index would
    # stay stale; the extension has it written again.
    (src / "page.md").write_text((src / "page.md").read_text() + "\nZanzibar.\n")
    stopped = _sphinx(src, out, LP_STOP="1")
    assert stopped.returncode != 0 and "Interrupted" in stopped.stderr, stopped.stderr
    assert "Zanzibar" in (out / "page.html").read_text()
    assert "zanzibar" not in (out / "searchindex.js").read_text()
    resumed = _sphinx(src, out)
    assert resumed.returncode == 0, resumed.stderr
    assert "no targets are out of date" not in resumed.stdout
    assert "zanzibar" in (out / "searchindex.js").read_text()
    _typesets(out, "page.html")
    assert _files(mathjax) == subset

    # A damaged copy (a font missing, a file of an older subset) is repaired by
    # a build with nothing to do.
    font = next(mathjax.rglob("*.woff"))
    font.unlink()
    (mathjax / "es5" / "stale.js").write_text("old")
    repair = _sphinx(src, out)
    assert repair.returncode == 0 and "no targets are out of date" in repair.stdout
    assert _files(mathjax) == subset
    _typesets(out, "page.html")


def test_sync_tree_copies_what_differs_and_removes_what_source_lacks(tmp_path: Path):
    from lipattn.book.sphinxext import sync_tree

    a, b = tmp_path / "a", tmp_path / "b"
    (a / "x" / "y").mkdir(parents=True)
    (a / "top.txt").write_text("1")
    (a / "x" / "y" / "deep.txt").write_text("22")
    assert sync_tree(a, b) == 2 and _files(b) == _files(a)
    assert sync_tree(a, b) == 0  # idempotent
    (b / "top.txt").write_text("9")        # same size, other bytes
    (b / "x" / "old.txt").write_text("o")  # not in the source
    (b / "gone").mkdir()
    (b / "x" / "y" / "deep.txt").unlink()
    assert sync_tree(a, b) == 3 and _files(b) == _files(a) and not (b / "gone").exists()
    with pytest.raises(ValueError, match="^source must be an existing directory"):
        sync_tree(tmp_path / "nope", b)


def test_mathjax_subset_copies_only_what_pages_load(tmp_path: Path):
    import mathjax

    from lipattn.book.sphinxext import MATHJAX_FILES, mathjax_subset

    source = Path(mathjax.__file__).parent / "static" / "mathjax"
    out = mathjax_subset(source, tmp_path / "static")
    root = out / "mathjax"
    assert (root / "es5" / "tex-chtml.js").is_file()
    assert any((root / "es5" / "output" / "chtml" / "fonts" / "woff-v2").glob("*.woff"))
    assert not (root / "ts").exists() and not (root / "es5" / "sre").exists()
    assert not (root / "package-lock.json").exists() and not (root / "js").exists()
    size = sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
    assert size < 4e6, size
    assert len(MATHJAX_FILES) == len({m.split("/")[-1] for m in MATHJAX_FILES})
    # refilling is idempotent and drops stale files
    (root / "stale.js").write_text("x")
    mathjax_subset(source, tmp_path / "static")
    assert not (root / "stale.js").exists()


def test_pages_can_declare_their_own_language(tmp_path: Path):
    """lipattn_page_languages sets <html lang> on the pages it names only."""
    src = tmp_path / "book"
    src.mkdir()
    (src / "conf.py").write_text(textwrap.dedent("""
        extensions = ["myst_nb", "lipattn.book.sphinxext"]
        lipattn_watch = []
        exclude_patterns = ["_build"]
        lipattn_page_languages = {"page": "zh-Hans"}
    """))
    (src / "index.rst").write_text("Index\n=====\n\n.. toctree::\n\n   page\n")
    (src / "page.rst").write_text("页面\n====\n\n谱范数。\n")
    out = src / "_build" / "html"
    page = _build(src, out)
    assert '<html lang="zh-Hans"' in page
    index = (out / "index.html").read_text()
    assert '<html lang="en"' in index


def test_rewrite_page_moves_frames_out_and_sizes_figures(tmp_path: Path):
    """Frames leave the page as content-addressed files; a figure gets its CSS
    size, alt text and phone width from its PNG's metadata (lipattn.book.plotting)."""
    import base64
    import json

    from PIL import Image

    from lipattn.book import plotting
    from lipattn.book.sphinxext import rewrite_page

    site = tmp_path / "site"
    (site / "chapters").mkdir(parents=True)
    (site / "_images").mkdir()
    static = site / "_static"
    fig, ax = plotting.figure(width=8.4, height=2.0)
    ax.plot([0, 1], [0, 1], label="a line")
    ax.set_xlabel("time t")
    ax.legend(fontsize=6)  # raised to the minimum
    (site / "_images" / "f.png").write_bytes(plotting.figure_png(fig))
    frame_a, frame_b = b"RIFF-frame-a", b"RIFF-frame-b"
    payload = {"images": [base64.b64encode(f).decode() for f in (frame_a, frame_b)],
               "frames": [0, 1], "shape": [2]}
    page = (
        '<div class="lipattn-player" id="explorer-x" data-explorer="x">'
        f'<img class="lp-frame" width="688" src="data:image/webp;base64,{payload["images"][0]}">'
        f'<script type="application/json" class="lp-data">{json.dumps(payload)}</script></div>'
        '<img alt="../_images/f.png" src="../_images/f.png" />'
    )
    out = rewrite_page(page, site / "chapters", static, icons=None)
    assert "data:image" not in out
    files = sorted((static / "frames" / "x").iterdir())
    assert sorted(f.read_bytes() for f in files) == sorted([frame_a, frame_b])
    data = json.loads(out.split('class="lp-data">')[1].split("</script>")[0])
    assert "images" not in data
    assert [(site / "chapters" / u).resolve().read_bytes() for u in data["urls"]] == [
        frame_a, frame_b]
    img = out[out.index('<img alt='):]
    with Image.open(site / "_images" / "f.png") as im:
        w_px, h_px = im.size
    col = round(plotting.COLUMN_IN * plotting.CSS_PX_PER_IN)
    assert w_px == 2 * col  # drawn at the column width, 2x
    assert f'width="{col}"' in img and f'height="{round(h_px / 2)}"' in img
    assert 'loading="lazy"' in img and "time t" in img and "../_images/f.png\"" in img
    font = float(img.split('data-min-font-px="')[1].split('"')[0])
    assert abs(font - 8 * 100 / 72) < 0.01  # the 6-pt legend raised to 8 pt
    phone = int(img.split("--lp-phone-min: ")[1].split("px")[0])
    assert abs(phone * font / col - 9.0) < 0.02  # its smallest text at 9 px on a phone


def test_icons_become_inline_svg(tmp_path: Path):
    from lipattn.book.sphinxext import _icon_table, _icons

    js = tmp_path / "fa.js"
    js.write_text('x={github:[496,512,[],"f09b","M1 1"]};d("fab",p);'
                  'y={bars:[448,512,["navicon"],"f0c9","M2 2"],file:[384,512,[],"f15b","M3 3"]};'
                  'd("fas",p);')
    table = _icon_table(js)
    assert table[("fab", "github")] == (496, 512, "M1 1")
    assert table[("fas", "navicon")] == (448, 512, "M2 2")
    out = _icons('<i class="fa-solid fa-bars fa-lg"></i><span class="fas fa-nothing"></span>',
                 table)
    assert out.startswith('<svg class="svg-inline--fa fa-solid fa-bars fa-lg"')
    assert 'viewBox="0 0 448 512"' in out and 'd="M2 2"' in out
    assert out.endswith('<span class="fas fa-nothing"></span>')  # unknown icons stay


def test_multi_panel_figures_get_a_stacked_phone_variant(tmp_path: Path):
    """A figure with panels side by side gets a phone variant with the panels
    stacked (358 px wide), served by <picture> below 600 px; rewriting a
    rewritten page changes nothing (Sphinx leaves unchanged pages alone)."""
    from PIL import Image

    from lipattn.book import plotting
    from lipattn.book.sphinxext import rewrite_page

    site = tmp_path / "site"
    (site / "chapters").mkdir(parents=True)
    (site / "_images").mkdir()
    fig, (a, b) = plotting.figure(2, width=8.4, height=3.0)
    a.plot([0, 1], [1, 0])
    b.bar([1, 2], [2, 3])
    a.set_title("left panel")
    (site / "_images" / "g.png").write_bytes(plotting.figure_png(fig))
    assert [ax.get_position().x0 < 0.5 for ax in (a, b)] == [True, False]  # fig untouched
    page = '<img alt="../_images/g.png" src="../_images/g.png" />'
    out = rewrite_page(page, site / "chapters", site / "_static", icons=None)
    assert out.startswith('<picture class="lp-picture"><source media="(max-width: 600px)"')
    assert rewrite_page(out, site / "chapters", site / "_static", icons=None) == out
    with Image.open(site / "_images" / "g.png") as im:  # the desktop image no longer carries it
        assert "lipattn:narrow" not in im.text and im.text["lipattn:narrow-src"] == "g-narrow.png"
    with Image.open(site / "_images" / "g-narrow.png") as im:
        w, h = im.size
    assert w == 2 * round(plotting.PHONE_COLUMN_IN * 100) and h > w  # stacked: taller than wide
    assert f'width="{w // 2}"' in out
    assert float(out.split('data-narrow-min-font-px="')[1].split('"')[0]) >= 11.0


def test_inputs_hash_rejects_a_string_and_missing_paths(tmp_path: Path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "a.py").write_text("x = 1\n")
    with pytest.raises(TypeError, match="^watch must be a list"):
        inputs_hash(tmp_path, "lib")  # would hash the letters 'l', 'i', 'b'
    with pytest.raises(ValueError, match=r"^watch\[1\] must exist"):
        inputs_hash(tmp_path, ["lib", "requirements.txt"])
    with pytest.raises(ValueError, match="^root must be an existing directory"):
        inputs_hash(tmp_path / "nope", ["lib"])
    assert inputs_hash(str(tmp_path), ["lib"]) == inputs_hash(tmp_path, ["lib"])


def test_quiz_and_interview_files_and_shipped_weights_re_key_the_cache(tmp_path: Path):
    """The pages render quizzes and interview answers from YAML and load shipped
    weights (.npz): a change to any of them must re-execute the pages."""
    for sub in ("lib/pkg/data", "chapters/quizzes", "chapters/interview"):
        (tmp_path / sub).mkdir(parents=True)
    files = {"lib/pkg/data/w.npz": b"\x00\x01", "chapters/quizzes/q.yml": b"a: 1\n",
             "chapters/interview/i.yml": b"b: 1\n"}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    watch = ["lib", "chapters/quizzes", "chapters/interview"]
    seen = {inputs_hash(tmp_path, watch)}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data + b"2")
        seen.add(inputs_hash(tmp_path, watch))
    assert len(seen) == 1 + len(files)


def test_the_book_watches_its_quiz_and_interview_sources():
    import yaml

    config = yaml.safe_load((Path(__file__).parents[1] / "_config.yml").read_text())
    watch = config["sphinx"]["config"]["lipattn_watch"]
    assert {"lib", "requirements.txt", "chapters/quizzes", "chapters/interview"} <= set(watch)


@pytest.mark.parametrize("label", ["Search", "搜索"])
def test_the_search_button_is_named_by_its_visible_text(tmp_path: Path, label: str):
    """axe label-content-name-mismatch: the button shows "Search Ctrl+K" (or
    its translation), so an aria-label, in any language, is dropped."""
    from lipattn.book.sphinxext import rewrite_page

    page = (f'<button class="btn search-button-field search-button__button" title="{label}" '
            f'aria-label="{label}" data-bs-toggle="tooltip"><span>{label}</span></button>')
    out = rewrite_page(page, tmp_path, tmp_path / "_static", None)
    assert "aria-label" not in out and f'title="{label}"' in out
