/* The book's site-wide behaviour (loaded on every page by _config.yml). */
(function () {
  "use strict";
  var root = document.documentElement;

  /* Scroll boxes that overflow (wide formulas, figures on a phone) take keyboard focus. */
  function focusable() {
    var boxes = document.querySelectorAll(
      'mjx-container[display="true"], mjx-container.lp-wide-inline, .cell_output,' +
      ' .lipattn-player .lp-frame-box,' +
      ' .pst-scrollable-table-container, div.math');
    for (var i = 0; i < boxes.length; i++) {
      var b = boxes[i], style = getComputedStyle(b);
      var scrolls = b.scrollWidth > b.clientWidth + 1 &&
        (style.overflowX === "auto" || style.overflowX === "scroll");
      if (scrolls && !b.hasAttribute("tabindex")) {
        b.setAttribute("tabindex", "0");
        b.classList.add("lp-scroll");
      } else if (!scrolls && b.classList.contains("lp-scroll")) {
        b.removeAttribute("tabindex");
        b.classList.remove("lp-scroll");
      }
    }
  }

  /* Formulas slightly too wide for the column are scaled to fit (down to 80 %). */
  function fitMath() {
    var eqs = document.querySelectorAll('mjx-container[display="true"]');
    for (var i = 0; i < eqs.length; i++) {
      var e = eqs[i];
      e.style.fontSize = "";
      var ratio = e.clientWidth / e.scrollWidth;
      if (ratio < 1 && ratio >= 0.8) { e.style.fontSize = (100 * ratio - 1).toFixed(1) + "%"; }
    }
    /* Inline formulas wider than their line's whole column (MathJax 3 does not
       break them; on a phone they would run past the column and be clipped):
       scaled to fit down to 80 %, else they become a small scroll box of their
       own. Formulas in closed folds are measured when the fold opens. */
    var inl = document.querySelectorAll('mjx-container[jax="CHTML"]:not([display="true"])');
    for (var j = 0; j < inl.length; j++) {
      var m = inl[j], block = m.parentElement && m.parentElement.closest(
        "p, li, dd, dt, td, th, figcaption, .admonition, details, div");
      if (!block || !m.getClientRects().length) { continue; }
      m.style.fontSize = "";
      m.classList.remove("lp-wide-inline");
      var cs = getComputedStyle(block);
      var avail = block.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
      var w = m.getBoundingClientRect().width;
      if (avail <= 0 || w <= avail + 1) { continue; }
      if (avail / w >= 0.8) { m.style.fontSize = (100 * avail / w - 1).toFixed(1) + "%"; }
      else { m.classList.add("lp-wide-inline"); }
    }
  }

  function mathDone() {
    if (window.lpMathDoneAt === undefined) { window.lpMathDoneAt = performance.now(); }
    fitMath();
    root.classList.add("lp-math-done");
    focusable();
  }

  /* Solution and dropdown toggles are named after what they show. */
  function nameToggles() {
    var buttons = document.querySelectorAll("button.toggle-button");
    for (var i = 0; i < buttons.length; i++) {
      var b = buttons[i], box = b.closest(".admonition, .dropdown, details");
      var title = box && box.querySelector(".admonition-title, summary");
      var text = title ? title.textContent.replace(/\s+/g, " ").trim() : "";
      if (text) { b.setAttribute("aria-label", "Show or hide: " + text); }
    }
  }

  /* myst-nb's code toggles carry aria-label="Toggle hidden content" beside the
     visible "Show code cell source": the visible text is the better name. */
  function unlabelSummaries() {
    var s = document.querySelectorAll("details > summary[aria-label]");
    for (var i = 0; i < s.length; i++) {
      if (s[i].textContent.trim()) { s[i].removeAttribute("aria-label"); }
    }
  }

  /* Every part of the page sits in a landmark (axe "region"): the book's
     title above the sidebar's navigation is a link home, outside any landmark
     in the theme's markup; it becomes a small navigation landmark of its own. */
  function landmarkBrand() {
    var brands = document.querySelectorAll(".bd-sidebar-primary .navbar-brand");
    for (var i = 0; i < brands.length; i++) {
      var item = brands[i].closest(".sidebar-primary-item") || brands[i];
      if (!item.closest("nav, [role=navigation], header, footer, main, aside")) {
        item.setAttribute("role", "navigation");
        item.setAttribute("aria-label", "Book title");
      }
    }
  }

  function ready() {
    landmarkBrand();
    nameToggles();
    unlabelSummaries();
    if (!document.querySelector('script[src*="mathjax"]')) { mathDone(); return; }
    var waited = 0;
    (function wait() {
      if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
        MathJax.startup.promise.then(mathDone, mathDone);
      } else if ((waited += 50) > 15000) {
        mathDone();
      } else { setTimeout(wait, 50); }
    })();
  }

  /* Folded proofs (sphinx-design dropdowns, native <details>) print open:
     every closed one opens before printing and closes again afterwards.
     Folded code cells (myst-nb's hide-input) stay folded on paper. */
  var openedForPrint = [];
  window.addEventListener("beforeprint", function () {
    var boxes = document.querySelectorAll("details.sd-dropdown:not([open])");
    for (var i = 0; i < boxes.length; i++) {
      boxes[i].setAttribute("open", "");
      openedForPrint.push(boxes[i]);
    }
  });
  window.addEventListener("afterprint", function () {
    while (openedForPrint.length) { openedForPrint.pop().removeAttribute("open"); }
  });

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", function () { setTimeout(ready, 0); });
  } else { setTimeout(ready, 0); }
  var timer = null;
  /* A fold opening shows formulas that could not be measured while closed. */
  document.addEventListener("toggle", function (ev) {
    if (ev.target.open && root.classList.contains("lp-math-done")) { fitMath(); focusable(); }
  }, true);
  window.addEventListener("resize", function () {
    clearTimeout(timer);
    timer = setTimeout(function () { if (root.classList.contains("lp-math-done")) { fitMath(); focusable(); } }, 150);
  });

  /* Search ranking: a page or section whose title holds every word of the
     query comes first ("spectral norm" -> the chapter on spectral norms,
     not one that mentions LayerNorm); partial matches count less. */
  if (typeof Scorer !== "undefined" && !Scorer.lpTuned) {
    var words = (new URLSearchParams(location.search).get("q") || "").toLowerCase()
      .split(/\s+/).filter(function (w) { return w.length > 1; });
    Scorer.lpTuned = true;
    Scorer.partialTitle = 3;
    Scorer.partialTerm = 1;
    Scorer.score = function (result) {
      var title = String(result[1] || "").toLowerCase(), score = result[4];
      var all = words.length > 0 && words.every(function (w) { return title.indexOf(w) >= 0; });
      return all ? score + 20 : score;
    };
  }

  /* A formula's source as plain text for a snippet: \|W\|_2 -> ||W||_2. */
  var SYMBOLS = { leq: "≤", le: "≤", geq: "≥", ge: "≥", approx: "≈", to: "→", infty: "∞",
    cdot: "·", times: "×", sqrt: "√", ell: "ℓ", partial: "∂", sigma: "σ", alpha: "α",
    lambda: "λ", tau: "τ", rho: "ρ", varepsilon: "ε", epsilon: "ε", Delta: "Δ", mu: "μ",
    pi: "π", top: "ᵀ", dots: "…", ldots: "…", in: "∈", ne: "≠", sum: "Σ", max: "max",
    min: "min", log: "log", exp: "exp", softmax: "softmax", diag: "diag" };
  function plainTeX(tex) {
    return tex.replace(/^\s*(\\\(|\\\[|\$\$?)/, "").replace(/(\\\)|\\\]|\$\$?)\s*$/, "")
      .replace(/\\\|/g, "||").replace(/\\[,;!: ]/g, " ")
      .replace(/\\(left|right|big|Big|bigg|Bigg)\b/g, "")
      .replace(/\\(mathrm|mathbb|mathbf|operatorname|text|mathcal)\{([^}]*)\}/g, "$2")
      .replace(/\\([A-Za-z]+)/g, function (m, name) { return SYMBOLS[name] || name; })
      .replace(/[{}]/g, "").replace(/\s+/g, " ").trim();
  }

  /* Search snippets: prose only, no raw TeX, code, players or quizzes. */
  if (typeof Search !== "undefined" && Search.htmlToText && !Search.lpClean) {
    var toText = Search.htmlToText;
    Search.lpClean = true;
    Search.htmlToText = function (htmlString, anchor) {
      var doc = new DOMParser().parseFromString(htmlString, "text/html");
      doc.querySelectorAll(".cell_input, .cell_output, pre, .lipattn-player, " +
        ".lipattn-quiz, .lp-run-locally, .bd-sidebar-secondary, .bd-header-article, " +
        ".prev-next-area, .bd-footer-article, .toggle-button, .copybtn, nav, " +
        "#jb-print-docs-body").forEach(function (el) { el.remove(); });
      doc.querySelectorAll(".math").forEach(function (el) {
        el.replaceWith(doc.createTextNode(plainTeX(el.textContent)));
      });
      return toText(doc.documentElement.outerHTML, anchor);
    };
  }
})();
