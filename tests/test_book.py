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
         "chapters/07_real_transformers.html",
         "chapters/audit.html", "chapters/review.html", "chapters/review_zh.html",
         "chapters/references.html"]
MAX_PAGE_BYTES = 3 * 1024 * 1024


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
def test_page_weight_with_its_frames_and_figures(built_html, rel):
    """The page's HTML (frames are inlined) plus the images it alone uses."""
    page = _page(built_html, rel)
    images = set(re.findall(r'src="(?:\.\./)?(_images/[^"]+)"', page))
    total = len(page.encode()) + sum((built_html / i).stat().st_size for i in images)
    assert total <= MAX_PAGE_BYTES, f"{rel}: {total / 1e6:.2f} MB"


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


def test_whole_site_stays_small(built_html):
    """What every page shares (theme, MathJax, search index: all of _build/html
    but the chapter pages and their figures) stays under 7 MB, so the site is
    that plus at most MAX_PAGE_BYTES per page (test_page_weight_with_its_frames_and_figures).
    MathJax is copied in part (lipattn.sphinxext.MATHJAX_FILES), not whole (43 MB)."""
    files = [f for f in built_html.rglob("*") if f.is_file()]
    mathjax = sum(f.stat().st_size for f in files if "_static/mathjax" in f.as_posix())
    assert mathjax < 4e6, f"MathJax takes {mathjax / 1e6:.1f} MB"
    unused = [f.name for f in files if f.suffix == ".map" or "_static/locales" in f.as_posix()]
    assert not unused, unused[:5]
    own = {"chapters", "_images"}
    shared = sum(f.stat().st_size for f in files
                 if f.relative_to(built_html).parts[0] not in own)
    assert shared <= MAX_SHARED_BYTES, f"shared assets take {shared / 1e6:.1f} MB"
    pages = list((built_html / "chapters").glob("*.html"))
    total = sum(f.stat().st_size for f in files)
    assert total <= MAX_SHARED_BYTES + MAX_PAGE_BYTES * len(pages), f"{total / 1e6:.1f} MB"


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
    for page in (en, zh):
        assert page.count('class="lq-q"') == 6
