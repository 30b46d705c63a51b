"""Static checks of the built site (`make html` first; `make test` does)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.book

PAGES = ["chapters/intro.html", "chapters/01_softmax_jacobian.html",
         "chapters/02_scaling_saturation.html", "chapters/03_rank_collapse.html",
         "chapters/04_prenorm_postnorm.html",
         "chapters/05_spectral_normalisation.html", "chapters/06_attention_lipschitz.html",
         "chapters/07_real_transformers.html", "chapters/08_trained_language_model.html",
         "chapters/audit.html", "chapters/review.html", "chapters/review_zh.html",
         "chapters/references.html"]
MAX_PAGE_BYTES = 3 * 1024 * 1024
MAX_PAGE_HTML_BYTES = 600 * 1024
MAX_FRAME_BYTES = 40 * 1024 * 1024


def _page(html_dir: Path, rel: str) -> str:
    path = html_dir / rel
    assert path.is_file(), f"{rel} was not built"
    return path.read_text(encoding="utf-8")


@pytest.mark.parametrize("rel", PAGES)
def test_page_has_no_external_assets_and_no_widget_placeholders(built_html, rel):
    page = _page(built_html, rel)
    external = re.findall(r'<(?:script|link|img|iframe)[^>]+(?:src|href)="(https?:)?//[^"]+"', page)
    assert not external, external
    # raw roles left in the text mean a MyST role did not parse; base64 frames
    # are dropped first (they can spell "THEBE" by chance)
    page = re.sub(r"[A-Za-z0-9+/=]{200,}", "", page)
    for bad in ("Loading widget", "interactive(", "widget-state+json", "THEBE", "thebe",
                "{glue:", "{prf:", "{cite", "{ref}", "{doc}", "{math}"):
        assert bad not in page, bad
    if rel != "chapters/references.html":  # Sphinx loads MathJax on pages with math
        assert "_static/mathjax/es5/tex-chtml.js" in page
    assert "cdn.jsdelivr" not in page and "mathjax@" not in page


@pytest.mark.parametrize("rel", PAGES)
def test_page_weight_without_frames_and_figures(built_html, rel):
    """The page's HTML holds no inlined frame or image: frames and figures are
    separate files, fetched when needed (the browser test measures the load)."""
    page = _page(built_html, rel)
    assert "data:image/" not in page
    assert len(page.encode()) <= MAX_PAGE_HTML_BYTES, f"{rel}: {len(page) / 1e6:.2f} MB"


@pytest.mark.parametrize("rel", PAGES)
def test_figures_are_sized_described_and_lazy(built_html, rel):
    """Every image has its CSS size (no layout shift), alt text that is not a
    file path, lazy loading, and is encoded at 2x its CSS width (HiDPI)."""
    from PIL import Image

    page = _page(built_html, rel)
    for tag in re.findall(r"<img [^>]+>", page):
        attrs = dict(re.findall(r'([a-z-]+)="([^"]*)"', tag))
        assert "width" in attrs and "height" in attrs, tag[:120]
        assert attrs.get("alt") and not attrs["alt"].endswith((".png", ".webp")), tag[:160]
        assert attrs.get("loading") == "lazy", tag[:120]
        # the smallest glyph as drawn, scripts included (lipattn.book.plotting);
        # a PNG drawn before glyphs were measured has none and is left unsized
        assert "data-min-font-px" in attrs, f"figure text not measured: {tag[:160]}"
        assert float(attrs["data-min-font-px"]) >= 11.0, tag[:120]
        src = (built_html / Path(rel).parent / attrs["src"]).resolve()
        with Image.open(src) as im:
            assert im.size[0] == 2 * int(attrs["width"]), (src.name, im.size, attrs["width"])
    for tag in re.findall(r"<source [^>]+>", page):  # the stacked phone variants
        attrs = dict(re.findall(r'([a-z-]+)="([^"]*)"', tag))
        src = (built_html / Path(rel).parent / attrs["srcset"]).resolve()
        with Image.open(src) as im:
            assert im.size[0] == 2 * int(attrs["width"]) and "height" in attrs, tag[:120]


def test_frames_are_separate_cacheable_files(built_html):
    frames = list((built_html / "_static" / "frames").rglob("*.webp"))
    assert len(frames) >= 100
    assert sum(f.stat().st_size for f in frames) <= MAX_FRAME_BYTES
    ch1 = _page(built_html, PAGES[1])
    urls = re.findall(r'"(\.\./_static/frames/[^"]+\.webp)"', ch1)
    assert urls and all((built_html / "chapters" / u).resolve().is_file() for u in urls)


def test_build_reports_and_unused_assets_stay_out_of_the_site(built_html):
    assert not (built_html / "reports").exists()
    assert not list(built_html.rglob("*.err.log"))
    assert not (built_html / "_static" / "scripts" / "fontawesome.js").exists()
    for rel in PAGES:
        assert "fontawesome.js" not in _page(built_html, rel), rel


@pytest.mark.parametrize("rel", [p for p in PAGES if re.search(r"/0\d_", p)])
def test_chapters_offer_their_notebook(built_html, rel):
    """The download menu offers the chapter as a notebook written at build
    time, and the page says how to run it locally."""
    import nbformat

    page = _page(built_html, rel)
    nb_rel = f"_sources/{rel[:-5]}.ipynb"
    assert f"{nb_rel}" in page and 'class="lp-run-locally' in page
    nb = nbformat.read(built_html / nb_rel, as_version=4)
    nbformat.validate(nb)
    assert sum(c.cell_type == "code" for c in nb.cells) >= 3
    assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code")


def test_chapters_and_results_are_numbered(built_html):
    """Chapters are numbered in the sidebar, results per chapter (2.x in Chapter 2)."""
    ch2 = _page(built_html, PAGES[2])
    assert re.search(r'<a class="reference internal" href="01_softmax_jacobian.html">1\. ', ch2)
    # the results stated on the page (not references to other chapters')
    numbers = re.findall(r'<p class="admonition-title"><span class="caption-number">'
                         r'(?:Theorem|Lemma|Proposition|Corollary|Definition) (\d+)\.\d+', ch2)
    assert numbers and set(numbers) == {"2"}, sorted(set(numbers))
    # theorems, lemmas and propositions share one sequence: no number twice
    results = re.findall(r'<p class="admonition-title"><span class="caption-number">'
                         r'(?:Theorem|Lemma|Proposition|Corollary) (\d+\.\d+)', ch2)
    assert len(results) == len(set(results)) >= 2, results


def test_explorers_appear_as_players(built_html):
    ch1 = _page(built_html, PAGES[1])
    assert ch1.count('class="lipattn-player"') >= 2
    ch2 = _page(built_html, PAGES[2])
    assert ch2.count('class="lipattn-player"') >= 2
    ch3 = _page(built_html, "chapters/03_rank_collapse.html")
    assert ch3.count('class="lipattn-player"') >= 2
    ch6 = _page(built_html, "chapters/06_attention_lipschitz.html")
    assert ch6.count('class="lipattn-player"') >= 1
    ch5 = _page(built_html, "chapters/05_spectral_normalisation.html")
    assert ch5.count('class="lipattn-player"') >= 2
    ch4 = _page(built_html, "chapters/04_prenorm_postnorm.html")
    assert ch4.count('class="lipattn-player"') >= 2


def test_vendored_assets_are_not_injected_everywhere(built_html):
    """Only tex-chtml.js of MathJax is loaded by a page, not every MathJax file."""
    page = _page(built_html, PAGES[0])
    assert len(re.findall(r"mathjax/", page)) == 1


MAX_SHARED_BYTES = 7 * 1024 * 1024


@pytest.mark.parametrize("edition", ["", "zh"])
def test_whole_site_stays_small(built_html, edition):
    """What every page shares (theme, MathJax, search index: all of _build/html
    but the chapter pages and their figures) stays under 7 MB, so the site is
    that plus at most MAX_PAGE_BYTES per page (test_page_weight_with_its_frames_and_figures).
    MathJax is copied in part (lipattn.book.sphinxext.MATHJAX_FILES), not whole (43 MB).
    Each edition (English; Chinese in zh/) on its own."""
    site = built_html / edition
    files = [f for f in site.rglob("*") if f.is_file()
             and (edition or f.relative_to(site).parts[0] != "zh")]
    built_html = site
    mathjax = sum(f.stat().st_size for f in files if "_static/mathjax" in f.as_posix())
    assert mathjax < 4e6, f"MathJax takes {mathjax / 1e6:.1f} MB"
    unused = [f.name for f in files if f.suffix == ".map" or "_static/locales" in f.as_posix()]
    assert not unused, unused[:5]
    own = {"chapters", "_images"}
    shared = sum(f.stat().st_size for f in files
                 if f.relative_to(built_html).parts[0] not in own
                 and "_static/frames/" not in f.as_posix() and "_sources" not in f.as_posix())
    assert shared <= MAX_SHARED_BYTES, f"shared assets take {shared / 1e6:.1f} MB"
    pages = list((built_html / "chapters").glob("*.html"))
    total = sum(f.stat().st_size for f in files)
    limit = MAX_SHARED_BYTES + MAX_PAGE_BYTES * len(pages) + MAX_FRAME_BYTES
    assert total <= limit, f"{total / 1e6:.1f} MB"


def test_audit_and_review_sheets(built_html):
    """The audit has a section per claim; both sheets carry the combined quiz;
    the Chinese sheet declares its language and holds Chinese text."""
    audit = _page(built_html, "chapters/audit.html")
    assert len(set(re.findall(r'id="audit-claim-(\d)"', audit))) == 8
    assert audit.count("<tr") >= 9  # the verdict table: header + 8 claims
    en = _page(built_html, "chapters/review.html")
    zh = _page(built_html, "chapters/review_zh.html")
    assert '<html lang="zh-Hans"' in zh and '<html lang="en"' in en
    for term in ("谱范数", "雅可比矩阵", "秩崩溃", "综合自测", "第 1 题"):
        assert term in zh, term
    chapters = len(list((Path(__file__).parents[1] / "chapters" / "quizzes").glob("*.yml")))
    for page in (en, zh):
        assert page.count('class="lq-q"') == chapters   # one question per chapter
