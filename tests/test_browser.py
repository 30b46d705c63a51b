"""The built pages in a real browser (Debian's headless Chromium).

Checks what a reader sees: formulas typeset, no request leaving the site,
no console errors, every explorer's player present and each slider changing
the displayed frame. Screenshots land in _build/screenshots for a human look.
"""

from __future__ import annotations

import functools
import json
import shutil
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

PAGES = {  # page -> least number of explorers on it
    "chapters/intro.html": 0,
    "chapters/01_softmax_jacobian.html": 2,
    "chapters/02_scaling_saturation.html": 2,
    "chapters/03_rank_collapse.html": 2,
    "chapters/06_attention_lipschitz.html": 1,
    "chapters/07_real_transformers.html": 1,
    "chapters/05_spectral_normalisation.html": 2,
    "chapters/04_prenorm_postnorm.html": 2,
    "chapters/audit.html": 0,
    "chapters/review.html": 0,
    "chapters/review_zh.html": 0,
    "chapters/references.html": 0,
}


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep test output clean
        pass


@pytest.fixture(scope="module")
def server(built_html: Path):
    handler = functools.partial(_QuietHandler, directory=str(built_html))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium = shutil.which("chromium")
    chromedriver = shutil.which("chromedriver")
    if not chromium or not chromedriver:
        pytest.fail("chromium and chromedriver are required: `make browser-deps` installs them")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
                 "--window-size=1280,1600",
                 f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    drv = webdriver.Chrome(service=Service(executable_path=chromedriver), options=opts)
    drv.set_page_load_timeout(60)
    yield drv
    drv.quit()


def _load(driver, url: str) -> None:
    driver.get_log("performance")  # drop entries of earlier pages
    driver.get_log("browser")
    driver.get(url)
    driver.set_script_timeout(60)
    driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "const hasMath = !!document.querySelector('script[src*=\"mathjax\"]');"
        "function wait() {"
        "  if (!hasMath && document.readyState === 'complete') { done(false); }"
        "  else if (window.MathJax && MathJax.startup && MathJax.startup.promise) {"
        "    MathJax.startup.promise.then(() => done(true));"
        "  } else { setTimeout(wait, 50); }"
        "} wait();"
    )


def _wait(driver, script: str, *args, timeout: float = 10.0):
    import time

    end = time.time() + timeout
    while time.time() < end:
        value = driver.execute_script(script, *args)
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for: {script}")


def _move_slider(driver, ctl) -> int:
    """Move a player's range control to its other end (0, or its max when it
    is at 0), as a reader's drag does (an input event); return the new index."""
    top = int(ctl.get_attribute("max"))
    target = 0 if int(ctl.get_attribute("value")) > 0 else top
    driver.execute_script(
        "arguments[0].value = arguments[1];"
        "arguments[0].dispatchEvent(new Event('input', {bubbles: true}));", ctl, target)
    return target


def _frame_requests(driver) -> list[str]:
    return driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
        ".filter(u => u.includes('/_static/frames/'))")


def _requests_leaving(driver, server: str) -> list[str]:
    urls = []
    for entry in driver.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg.get("method") == "Network.requestWillBeSent":
            urls.append(msg["params"]["request"]["url"])
    assert urls, "no requests were logged"
    # chrome:// and about: are the browser's own pages, not network requests.
    return [u for u in urls if not u.startswith((server, "data:", "blob:", "chrome:", "about:"))]


@pytest.mark.parametrize("page", ["index.html", "search.html", "genindex.html", "prf-prf.html"])
def test_other_pages_load_cleanly(driver, server, built_html, page):
    """The generated pages (redirect, search, indices) too: nothing from outside,
    no console errors."""
    assert (built_html / page).is_file()
    _load(driver, f"{server}/{page}")
    assert not _requests_leaving(driver, server)
    severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not severe, severe


@pytest.mark.parametrize("page", list(PAGES))
def test_page_in_chromium(driver, server, built_html, page):
    _load(driver, f"{server}/{page}")

    # 1. No request leaves the site.
    outside = _requests_leaving(driver, server)
    assert not outside, outside

    # 2. Every formula is typeset: no raw delimiters outside code, and MathJax ran.
    text = driver.execute_script(
        "const b = document.querySelector('main').cloneNode(true);"
        "b.querySelectorAll('pre, code, script, style, mjx-container').forEach(e => e.remove());"
        "return b.innerText;"
    )
    for raw in ("\\(", "\\)", "$$", "\\[", "\\begin{"):
        assert raw not in text, f"raw {raw!r} left untypeset on {page}"
    if page != "chapters/references.html":
        n_math = driver.execute_script("return document.querySelectorAll('mjx-container').length")
        assert n_math > 0
    errors = driver.execute_script(
        "return Array.from(document.querySelectorAll('mjx-merror')).map(e => e.textContent)")
    assert not errors, errors
    # Display formulas and code cells fit the text column (no horizontal scroll
    # bar) in a 1280-pixel-wide window.
    wide = driver.execute_script(
        "return Array.from(document.querySelectorAll('main mjx-container[display=\"true\"]'))"
        ".filter(e => e.scrollWidth > e.clientWidth + 2)"
        ".map(e => (e.closest('.math') || e).textContent.slice(0, 60))")
    assert not wide, f"display math wider than the column on {page}: {wide}"
    wide_code = driver.execute_script(
        "return Array.from(document.querySelectorAll('main div.cell pre'))"
        ".filter(e => e.scrollWidth > e.clientWidth + 2).map(e => e.textContent.slice(0, 60))")
    assert not wide_code, f"code wider than its block on {page}: {wide_code}"

    # 3. Every explorer has its player, and each control changes the frame,
    #    fetched from its own file only when asked for.
    players = driver.find_elements("css selector", ".lipattn-player")
    assert len(players) >= PAGES[page]
    assert "Loading widget" not in driver.page_source
    fetched = set(_frame_requests(driver))
    assert len(fetched) <= len(players), f"frames fetched before any interaction: {fetched}"
    for player in players:
        img = player.find_element("css selector", "img.lp-frame")
        for ctl in player.find_elements("css selector", ".lp-control"):
            before = img.get_attribute("src")
            frame_before = player.get_attribute("data-frame")
            driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", ctl)
            if ctl.tag_name == "input":
                _move_slider(driver, ctl)
                out = ctl.find_element("xpath", "following-sibling::output").text
                assert out and "nan" not in out.lower()
                assert ctl.get_attribute("aria-valuetext") == out
            else:
                radio = next(r for r in ctl.find_elements("css selector", "input[type=radio]")
                             if not r.is_selected())
                driver.execute_script("arguments[0].click()", radio)
            assert player.get_attribute("data-frame") != frame_before
            src = img.get_attribute("src")
            assert src != before, (
                f"control {ctl.get_attribute('data-name')} of "
                f"{player.get_attribute('data-explorer')} did not change the frame")
            assert "/_static/frames/" in src and not src.startswith("data:")
            _wait(driver, "return arguments[0].complete && arguments[0].naturalWidth > 0", img)
            assert src in _frame_requests(driver), "the new frame was not fetched"
        status = player.find_element("css selector", ".lp-status")
        assert status.get_attribute("aria-live") == "polite" and status.get_attribute("textContent")
        for button in player.find_elements("css selector", "button.lp-preset"):
            want = json.loads(button.get_attribute("data-set"))
            driver.execute_script("arguments[0].click()", button)
            shape = json.loads(player.find_element(
                "css selector", "script.lp-data").get_attribute("textContent"))["shape"]
            flat = 0
            for k, n in zip(want, shape, strict=True):
                flat = flat * n + k
            assert player.get_attribute("data-frame") == str(flat), button.text

    # 4. Quizzes: choosing an answer reveals its explanation, and only its own.
    for quiz in driver.find_elements("css selector", ".lipattn-quiz"):
        feedback = quiz.find_elements("css selector", ".lq-fb")
        assert feedback and not any(f.is_displayed() for f in feedback)
        for opt in quiz.find_elements("css selector", ".lq-opt")[:2]:
            driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", opt)
            opt.find_element("css selector", "label").click()
            assert opt.find_element("css selector", ".lq-fb").is_displayed()
        assert sum(f.is_displayed() for f in feedback) == 1  # radio: one answer at a time

    # 5. No console errors.
    severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not severe, severe

    shots = built_html.parent / "screenshots"
    shots.mkdir(exist_ok=True)
    driver.execute_script("window.scrollTo(0, 0)")
    driver.save_screenshot(str(shots / (Path(page).stem + ".png")))


# --- the reading experience (issue 19): weight, math, layout shift, figure text, axe ----

AXE = Path(__file__).with_name("vendor") / "axe-core-4.14.1.min.js"
AXE_SHA256 = "29348999450cdf2849a8e70b7912fc2da85a849da39c0d0d5394f51d4a9ed95c"
WIDTHS = {1280: 800, 390: 844}           # viewport width -> height (CSS px)
MIN_FIGURE_TEXT = {1280: 11.0, 390: 9.0}  # smallest figure text, CSS px
MAX_FIRST_LOAD = 1.5e6                    # bytes on the wire (gzip, as any static host sends)
MAX_FIRST_LOAD_RAW = 4.0e6                # bytes uncompressed
MAX_LAYOUT_SHIFT = 0.1
MAX_TYPESET_MS = 8000                     # localhost, two shared cores

_WATCH_JS = r"""
window.__lpRaw = []; window.__lpCLS = 0; window.__lpShifts = [];
new PerformanceObserver(l => l.getEntries().forEach(e => {
  if (!e.hadRecentInput) { window.__lpCLS += e.value;
    window.__lpShifts.push([Math.round(e.startTime), e.value.toFixed(3),
      (e.sources || []).map(s => s.node ? (s.node.nodeName + '.' +
        String(s.node.className || '').slice(0, 30)) : '?').slice(0, 3)]); } })
).observe({type: 'layout-shift', buffered: true});
(function poll() {
  const root = document.documentElement;
  if (document.body) {
    for (const e of document.querySelectorAll('.math')) {
      if (e.querySelector('mjx-container')) continue;
      const r = e.getBoundingClientRect();
      if (!r.width || r.bottom < 0 || r.top > innerHeight) continue;
      if (/[\\$]/.test(e.textContent) && getComputedStyle(e).visibility !== 'hidden') {
        window.__lpRaw.push(e.textContent.slice(0, 40));
      }
    }
  }
  if (!root.classList.contains('lp-math-done')) requestAnimationFrame(poll);
})();
"""


def _set_viewport(driver, width: int) -> None:
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": width, "height": WIDTHS[width], "deviceScaleFactor": 2,
        "mobile": width < 600})


def _local_file(built_html: Path, server: str, url: str) -> Path | None:
    from urllib.parse import unquote, urlsplit

    if not url.startswith(server):
        return None
    path = built_html / unquote(urlsplit(url).path).lstrip("/")
    return path if path.is_file() else None


@pytest.fixture()
def fresh(driver):
    """A cold load: no browser cache, the raw-TeX/layout-shift watcher installed
    before any page script; the viewport reset afterwards."""
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.setCacheDisabled", {"cacheDisabled": True})
    ident = driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument",
                                   {"source": _WATCH_JS})["identifier"]
    yield driver
    driver.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", {"identifier": ident})
    driver.execute_cdp_cmd("Network.setCacheDisabled", {"cacheDisabled": False})
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def _settle(driver) -> None:
    import time

    _wait(driver, "return document.readyState === 'complete' && "
                  "(document.documentElement.classList.contains('lp-math-done'))", timeout=30)
    time.sleep(0.5)


@pytest.mark.parametrize("width", list(WIDTHS))
@pytest.mark.parametrize("page", list(PAGES))
def test_reading_experience(fresh, server, built_html, page, width):
    """First load light, formulas never shown as TeX, no layout shift, figure
    text legible at the width shown."""
    import gzip

    driver = fresh
    _set_viewport(driver, width)
    driver.get(f"{server}/{page}")
    _settle(driver)
    assert driver.execute_script("return innerWidth") == width

    # the first load: every request of the page, on the wire
    urls = driver.execute_script(
        "return [location.href.split('#')[0]].concat("
        "performance.getEntriesByType('resource').map(e => e.name))")
    files = {u.split("?")[0]: _local_file(built_html, server, u.split("?")[0]) for u in urls}
    assert all(files.values()), [u for u, f in files.items() if f is None]
    raw = sum(f.stat().st_size for f in files.values())
    wire = sum(len(gzip.compress(f.read_bytes(), 6)) for f in files.values())
    assert wire <= MAX_FIRST_LOAD, f"{page} at {width} px: {wire / 1e6:.2f} MB gzipped"
    assert raw <= MAX_FIRST_LOAD_RAW, f"{page} at {width} px: {raw / 1e6:.2f} MB"
    assert not any(u.endswith("fontawesome.js") for u in files), "fontawesome.js is loaded"

    # formulas: typeset in time, never visible as raw TeX
    has_math = driver.execute_script("return !!document.querySelector('.math')")
    if has_math:
        ms = driver.execute_script("return window.lpMathDoneAt")
        assert ms is not None and ms <= MAX_TYPESET_MS, f"typeset at {ms} ms"
    raw_seen = driver.execute_script("return window.__lpRaw")
    assert not raw_seen, f"raw TeX was visible: {raw_seen[:3]}"

    # layout shift while the page loads and typesets
    cls = driver.execute_script("return window.__lpCLS")
    if cls > MAX_LAYOUT_SHIFT:
        # Seen once in a fresh clone's run (References at 1280 px, 0.33) and not
        # reproduced in a dozen loads since: report the shifts, measure once more.
        print(f"\nNOTE {page} at {width} px: layout shift {cls:.3f} on the first load: "
              f"{driver.execute_script('return window.__lpShifts')}; measured again")
        driver.get(f"{server}/{page}")
        _settle(driver)
        cls = driver.execute_script("return window.__lpCLS")
    assert cls <= MAX_LAYOUT_SHIFT, (f"cumulative layout shift {cls:.3f}: "
                                     f"{driver.execute_script('return window.__lpShifts')}")

    # figures and explorer frames: every image in the text is one of ours, and
    # its smallest glyph as drawn (sub- and superscripts included, measured by
    # lipattn.book.plotting when it was drawn), scaled to the width the page
    # shows it at, is at least 11 px on the desktop and 9 px on a phone
    sizes = driver.execute_script(
        "const phone = matchMedia('(max-width: 600px)').matches;"
        "return Array.from(document.querySelectorAll('main img')).map(i => {"
        "  const narrow = phone && i.dataset.narrowWidth;"
        "  const font = parseFloat(narrow ? i.dataset.narrowMinFontPx : i.dataset.minFontPx);"
        "  const w = parseFloat(narrow ? i.dataset.narrowWidth : i.getAttribute('width'));"
        "  return [i.className, font * i.getBoundingClientRect().width / w,"
        "          i.getAttribute('src')]; })")
    for cls_name, size, src in sizes:
        assert "lp-fig" in cls_name or "lp-frame" in cls_name, f"unsized figure {src}"
        assert size >= MIN_FIGURE_TEXT[width] - 0.05, (
            f"{src}: smallest text {size:.1f} px at {width} px")

    smallest = min((size for _, size, _ in sizes), default=float("nan"))
    print(f"\nMETRIC {page} {width}px: first load {wire / 1e6:.2f} MB gzip, "
          f"{raw / 1e6:.2f} MB raw, "
          f"{len(files)} requests; typeset {ms if has_math else 0:.0f} ms; CLS {cls:.3f}; "
          f"smallest figure text {smallest:.1f} px")

    # display math is never clipped: it fits, or scrolls and takes keyboard focus
    clipped = driver.execute_script(
        "return Array.from(document.querySelectorAll('mjx-container[display=\"true\"]'))"
        ".filter(e => e.scrollWidth > e.clientWidth + 2 && e.tabIndex < 0)"
        ".map(e => (e.closest('.math') || e).textContent.slice(0, 40))")
    assert not clipped, clipped

    # inline formulas, folded proofs opened: none runs past a box that clips it
    driver.execute_script("document.querySelectorAll('details').forEach(d => d.open = true)")
    _settle(driver)   # the folds' toggle events re-measure their formulas
    clipped = driver.execute_script(_INLINE_CLIPPED)
    assert not clipped, f"{page} at {width} px: inline formulas clipped: {clipped[:5]}"
    if width == 390:
        shots = built_html.parent / "screenshots"
        shots.mkdir(exist_ok=True)
        driver.save_screenshot(str(shots / (Path(page).stem + "-390.png")))


# Inline formulas whose right edge passes the right edge of the nearest ancestor
# that clips (overflow other than visible), or of the viewport; a box that scrolls
# and takes keyboard focus (.lp-scroll) is allowed to hold a wider formula.
_INLINE_CLIPPED = """
return Array.from(document.querySelectorAll('mjx-container:not([display="true"])'))
  .filter(e => e.getClientRects().length && !e.parentElement.closest('mjx-container'))
  .map(e => {
    let r = innerWidth, p = e.parentElement;
    for (; p && p !== document.body; p = p.parentElement) {
      if (p.classList.contains('lp-scroll')) { return null; }
      if (getComputedStyle(p).overflowX !== 'visible') {
        r = p.getBoundingClientRect().right; break; }
    }
    const over = e.getBoundingClientRect().right - r;
    return over > 1 ? [(e.closest('.math') || e).textContent.slice(0, 40), Math.round(over)]
                    : null; })
  .filter(x => x);
"""

_AXE_RUN = """
const done = arguments[arguments.length - 1];
axe.run(document, {resultTypes: ['violations']}).then(r => done(r.violations.map(v => ({
  id: v.id, impact: v.impact, n: v.nodes.length,
  where: v.nodes.slice(0, 3).map(n => n.target.join(' '))}))), e => done(String(e)));
"""


# Minor or moderate rules fixed once and held at 0 on every page: every node sits
# in a landmark (the book title is one, lipattn-site.js), no table header is empty.
AXE_HELD = ("region", "empty-table-header")


def test_axe_is_the_pinned_release():
    import hashlib

    assert hashlib.sha256(AXE.read_bytes()).hexdigest() == AXE_SHA256
    assert AXE.read_text(encoding="utf-8").startswith("/*! axe v4.14.1")


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize("width", list(WIDTHS))
@pytest.mark.parametrize("page", list(PAGES))
def test_axe_has_no_serious_violations(fresh, server, page, width, theme):
    """axe-core (pinned, vendored) finds no serious or critical violation."""
    import time

    driver = fresh
    _set_viewport(driver, width)
    driver.get(f"{server}/{page}")
    _settle(driver)
    driver.execute_script(
        "document.documentElement.dataset.theme = arguments[0];"
        "document.documentElement.dataset.mode = arguments[0];", theme)
    time.sleep(0.3)
    driver.execute_script(AXE.read_text(encoding="utf-8"))
    driver.set_script_timeout(120)
    found = driver.execute_async_script(_AXE_RUN)
    assert isinstance(found, list), found
    bad = [v for v in found if v["impact"] in ("serious", "critical") or v["id"] in AXE_HELD]
    assert not bad, bad


_GLYPH_JS = """
const text = arguments[0], font = getComputedStyle(document.querySelector('main p')).font;
function ink(s) {
  const c = document.createElement('canvas'); c.width = 64; c.height = 64;
  const g = c.getContext('2d'); g.font = font.replace(/\\d+(\\.\\d+)?px/, '40px');
  g.fillText(s, 4, 48); return Array.from(g.getImageData(0, 0, 64, 64).data).join(',');
}
const missing = ink('\\u0378');   // an unassigned code point: no font has it
return Array.from(text).map(ch => ink(ch) !== missing);
"""


def test_chinese_sheet_renders_cjk_glyphs(driver, server):
    """The Chinese page's text is drawn with real glyphs, not the missing-glyph
    box: each character's pixels differ from those of an unassigned code point
    (identical if no installed font has CJK glyphs)."""
    _load(driver, f"{server}/chapters/review_zh.html")
    assert driver.execute_script("return document.documentElement.lang") == "zh-Hans"
    text = driver.execute_script("return document.querySelector('main').innerText")
    for term in ("谱范数", "雅可比矩阵", "秩崩溃", "复习提纲"):
        assert term in text, term
    drawn = driver.execute_script(_GLYPH_JS, "谱范数雅可比矩阵秩崩溃")
    assert all(drawn), drawn
    assert driver.execute_script(_GLYPH_JS, "\u0379") == [False]  # the control: unassigned too


def test_audit_table_fits_the_column(driver, server):
    """The verdict table wraps inside the text column: no horizontal scroll bar."""
    _load(driver, f"{server}/chapters/audit.html")
    widths = driver.execute_script(
        "return Array.from(document.querySelectorAll('main table')).map(t => {"
        "  const box = t.closest('.pst-scrollable-table-container') || t.parentElement;"
        "  return [box.scrollWidth, box.clientWidth]; })")
    assert len(widths) == 1 and widths[0][0] <= widths[0][1] + 2, widths


def _search(driver, server, term: str, edition: str = "") -> list[str]:
    import time
    from urllib.parse import quote

    _load(driver, f"{server}/{edition}search.html?q={quote(term)}")
    found: list[str] = []
    for _ in range(100):
        found = [a.get_attribute("href") for a in
                 driver.find_elements("css selector", "#search-results ul.search li a")]
        if found:
            break
        time.sleep(0.1)
    return found


_TERMS_ZH = [line.split()[0] for line in  # the search dictionary: every card term
             (Path(__file__).resolve().parents[1] / "lib/lipattn/book/search_terms_zh.txt")
             .read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.mark.parametrize("term", list(dict.fromkeys(
    ["谱范数", "秩崩溃", "雅可比矩阵", "范数", "崩溃", *_TERMS_ZH])))
def test_search_finds_chinese_terms(driver, server, term):
    """The index splits Chinese text into words (jieba, html_search_language
    = zh), so the Chinese sheet is found by two-character words too, and by
    every term of the search dictionary (预热, 梯度消失, ...)."""
    found = _search(driver, server, term)
    assert any("chapters/review_zh.html" in url for url in found), found


@pytest.mark.parametrize("term,page", [("LayerNorm", "04_prenorm_postnorm"),
                                       ("Dobrushin", "03_rank_collapse"),
                                       ("normalisation", "05_spectral_normalisation")])
def test_search_still_finds_english_terms(driver, server, term, page):
    found = _search(driver, server, term)
    assert any(f"chapters/{page}.html" in url for url in found), found


def test_the_checks_can_fail(driver, tmp_path):
    """Negative control: a page that loads a script from another origin (a second
    loopback address) and logs an error is caught by the same checks."""
    (tmp_path / "bad.html").write_text(
        "<html><body><script>console.error('boom')</script>"
        '<script src="http://127.0.0.2:9/elsewhere.js"></script></body></html>')
    handler = functools.partial(_QuietHandler, directory=str(tmp_path))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        server = f"http://127.0.0.1:{httpd.server_address[1]}"
        driver.get_log("performance")
        driver.get_log("browser")
        driver.get(f"{server}/bad.html")
        assert _requests_leaving(driver, server) == ["http://127.0.0.2:9/elsewhere.js"]
        assert any("boom" in e["message"] for e in driver.get_log("browser")
                   if e["level"] == "SEVERE")
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_search_ranks_by_title_and_snippets_are_prose(driver, server):
    """"spectral norm" finds the chapter on spectral norms first (not the one
    that mentions LayerNorm), and no snippet shows raw TeX or code."""
    found = _search(driver, server, "spectral norm")
    assert found and "chapters/05_spectral_normalisation.html" in found[0], found[:3]
    assert not any("04_prenorm_postnorm" in u for u in found[:3]), found[:3]
    _wait(driver, "return document.querySelectorAll('#search-results p.context').length > 2")
    snippets = [p.text for p in driver.find_elements("css selector", "#search-results p.context")]
    for text in snippets:
        for raw in ("\\(", "\\[", "\\|", "\\frac", "import ", "glue("):
            assert raw not in text, (raw, text[:120])


FOLDED = {  # page -> least number of folded proofs on it
    "chapters/01_softmax_jacobian.html": 1,
    "chapters/02_scaling_saturation.html": 2,
    "chapters/03_rank_collapse.html": 3,
    "chapters/07_real_transformers.html": 3,
}


@pytest.mark.parametrize("page", list(FOLDED))
def test_folded_proofs(driver, server, page):
    """Long proofs fold in native <details> (sphinx-design dropdowns): closed at
    first, named after their result, math typeset inside, opened by the keyboard,
    and all open for printing (lipattn-site.js), closed again afterwards."""
    from selenium.webdriver.common.keys import Keys

    _load(driver, f"{server}/{page}")
    _wait(driver, "return document.documentElement.classList.contains('lp-math-done')")
    folds = driver.find_elements("css selector", "details.sd-dropdown.lp-proof-fold")
    assert len(folds) >= FOLDED[page]
    for fold in folds:
        assert fold.get_attribute("open") is None
        summary = fold.find_element("css selector", "summary")
        assert summary.get_attribute("textContent").strip().startswith("Proof of the ")
        assert fold.find_elements("css selector", "div.proof mjx-container")
    summary = folds[0].find_element("css selector", "summary")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", summary)
    summary.send_keys(Keys.ENTER)
    assert folds[0].get_attribute("open") is not None
    assert folds[0].find_element("css selector", "div.proof").is_displayed()
    summary.send_keys(Keys.ENTER)
    assert folds[0].get_attribute("open") is None
    folds[1 % len(folds)].find_element("css selector", "summary").send_keys(Keys.ENTER)
    was_open = driver.execute_script(
        "return Array.from(document.querySelectorAll('details')).map(d => d.open)")
    driver.execute_script("window.dispatchEvent(new Event('beforeprint'))")
    assert all(f.get_attribute("open") is not None for f in folds)
    driver.execute_script("window.dispatchEvent(new Event('afterprint'))")
    assert driver.execute_script(
        "return Array.from(document.querySelectorAll('details')).map(d => d.open)") == was_open


@pytest.mark.parametrize("page", ["chapters/04_prenorm_postnorm.html", "chapters/intro.html",
                                  "chapters/review_zh.html"])
def test_chinese_edition_page(driver, server, built_html, page):
    """A page of the Chinese edition (_build/html/zh, Sphinx gettext) declares
    its language, links to its English twin (and the twin back to it),
    typesets its formulas, and loads nothing from outside."""
    assert (built_html / "zh" / page).is_file(), "the Chinese edition is not built (make html-zh)"
    _load(driver, f"{server}/zh/{page}")
    assert driver.execute_script("return document.documentElement.lang") == "zh-Hans"
    link = driver.find_element("css selector", "a.lp-language")
    assert link.is_displayed()
    assert link.get_attribute("hreflang") == "en" and link.text.strip() == "English"
    assert link.get_attribute("href") == f"{server}/{page}"
    text = driver.execute_script(
        "const b = document.querySelector('main').cloneNode(true);"
        "b.querySelectorAll('pre, code, script, style, mjx-container').forEach(e => e.remove());"
        "return b.innerText;")
    for raw in ("\\(", "\\)", "$$", "\\["):
        assert raw not in text, f"raw {raw!r} left untypeset on zh/{page}"
    assert driver.execute_script("return document.querySelectorAll('mjx-container').length") > 0
    assert not driver.execute_script("return document.querySelectorAll('mjx-merror').length")
    assert not _requests_leaving(driver, server)
    severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not severe, severe

    _load(driver, f"{server}/{page}")
    back = driver.find_element("css selector", "a.lp-language")
    assert back.get_attribute("hreflang") == "zh-Hans" and back.text.strip() == "中文"
    assert back.get_attribute("href") == f"{server}/zh/{page}"


@pytest.mark.parametrize("page", ["chapters/01_softmax_jacobian.html",
                                  "chapters/08_trained_language_model.html"])
def test_chinese_chapter_has_its_quiz_and_interview_answer_in_chinese(driver, server, page):
    """The chapter's computed interview answer and quiz are glued in both
    languages: the zh page pastes the Chinese ones, the English page the
    English ones, each once."""
    for prefix, lang, label, other in (("zh/", "zh", "一分钟回答", "In under a minute."),
                                       ("", "en", "In under a minute.", "一分钟回答")):
        _load(driver, f"{server}/{prefix}{page}")
        quizzes = driver.find_elements("css selector", ".lipattn-quiz")
        assert len(quizzes) == 1, f"{prefix}{page}: {len(quizzes)} quizzes"
        assert quizzes[0].get_attribute("lang") == lang
        intro = quizzes[0].find_element("css selector", ".lq-intro").get_attribute("textContent")
        assert ("选择一个答案" in intro) == (lang == "zh"), intro
        prompt = quizzes[0].find_element("css selector", ".lq-prompt").text
        assert prompt.startswith("第 1 题：" if lang == "zh" else "Q1. "), prompt
        text = driver.execute_script("return document.querySelector('main').innerText")
        assert label in text and other not in text, f"{prefix}{page}: interview answer"
        feedback = quizzes[0].find_elements("css selector", ".lq-fb")
        opt = quizzes[0].find_element("css selector", ".lq-opt")
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", opt)
        opt.find_element("css selector", "label").click()
        assert sum(f.is_displayed() for f in feedback) == 1


@pytest.mark.parametrize("term", ["谱范数", "雅可比矩阵", "预热"])
def test_chinese_edition_search_finds_chinese_words(driver, server, term):
    """The Chinese edition's search index splits Chinese text with jieba."""
    found = _search(driver, server, term, edition="zh/")
    assert any("/zh/chapters/" in url for url in found), found


_CJK = "[\u3400-\u9fff]"


@pytest.mark.parametrize("page", ["chapters/01_softmax_jacobian.html",
                                  "chapters/04_prenorm_postnorm.html"])
def test_chinese_edition_explorers(driver, server, built_html, page):
    """The zh edition's players speak Chinese (from explorers.po) and still
    work: a control's new value text, its aria-valuetext and the frame's alt
    text come from the translated data, and the frame changes."""
    import re

    assert (built_html / "zh" / page).is_file(), "the Chinese edition is not built (make html-zh)"
    _load(driver, f"{server}/zh/{page}")
    players = driver.find_elements("css selector", ".lipattn-player")
    assert len(players) >= PAGES[page]
    for player in players:
        assert player.get_attribute("lang") == "zh-Hans"
        data = json.loads(player.find_element("css selector", "script.lp-data")
                          .get_attribute("textContent"))
        title = player.find_element("css selector", ".lp-title").text
        assert re.search(_CJK, title) and title == data["title"]
        img = player.find_element("css selector", "img.lp-frame")
        for i, ctl in enumerate(player.find_elements("css selector", ".lp-control")):
            frame = player.get_attribute("data-frame")
            driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", ctl)
            if ctl.tag_name == "input":
                name = ctl.find_element("xpath", "preceding-sibling::span").text
                k = _move_slider(driver, ctl)
                out = ctl.find_element("xpath", "following-sibling::output").text
                assert out == data["labels"][i][k] == ctl.get_attribute("aria-valuetext")
            else:
                name = ctl.find_element("css selector", "legend").text
                radios = ctl.find_elements("css selector", "input[type=radio]")
                k = next(j for j, r in enumerate(radios) if not r.is_selected())
                driver.execute_script("arguments[0].click()", radios[k])
                label = radios[k].find_element("xpath", "..").text.strip()
                assert label == data["labels"][i][k]
            assert name == data["names"][i]
            assert player.get_attribute("data-frame") != frame
            alt = img.get_attribute("alt")
            assert alt.startswith(data["title"] + ": ") and f"{name} {data['labels'][i][k]}" in alt
        # every text has its translation (explorers.po is complete): none left English
        left = player.find_elements("css selector", '[lang="en"]')
        assert not left, [e.text for e in left]
    severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not severe, severe
