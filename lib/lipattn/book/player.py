"""The static frame player's script and style sheet, inlined into every explorer's HTML.

:meth:`lipattn.book.widgets.Explorer.player_html` writes the player: the sliders as
``<input type=range>`` controls (radio buttons for categories), the preset buttons
and the frames; this script swaps the frames as a reader moves a control, and the
style sheet lays the controls out for the text column and for a phone.
"""

from __future__ import annotations

__all__: list[str] = []  # the two constants are private to lipattn.book.widgets

_PLAYER_JS = """
(function () {
  var root = document.currentScript.parentElement;
  if (root.lpReady) { return; }
  root.lpReady = true;
  var data = JSON.parse(root.querySelector("script.lp-data").textContent);
  var img = root.querySelector("img.lp-frame");
  var status = root.querySelector(".lp-status");
  var controls = root.querySelectorAll(".lp-control");
  var loaded = {};
  function src(k) {
    return data.urls ? data.urls[k] : "data:" + data.mime + ";base64," + data.images[k];
  }
  function index(c) {
    if (c.tagName === "INPUT") { return parseInt(c.value, 10); }
    var on = c.querySelector("input:checked");
    return on ? parseInt(on.value, 10) : 0;
  }
  function setIndex(c, k) {
    if (c.tagName === "INPUT") { c.value = String(k); return; }
    var r = c.querySelectorAll("input");
    for (var j = 0; j < r.length; j++) { r[j].checked = (j === k); }
  }
  function flatOf(ks) {
    var flat = 0;
    for (var i = 0; i < ks.length; i++) { flat = flat * data.shape[i] + ks[i]; }
    return flat;
  }
  function prefetch(ks) {
    if (!data.urls) { return; }
    for (var i = 0; i < ks.length; i++) {
      for (var step = -1; step <= 1; step += 2) {
        var nb = ks.slice(); nb[i] += step;
        if (nb[i] < 0 || nb[i] >= data.shape[i]) { continue; }
        var k = data.frames[flatOf(nb)];
        if (!loaded[k]) { loaded[k] = true; (new Image()).src = src(k); }
      }
    }
  }
  function show() {
    var ks = [], said = [];
    for (var i = 0; i < controls.length; i++) {
      var k = index(controls[i]);
      ks.push(k);
      var text = data.labels[i][k];
      if (controls[i].tagName === "INPUT") {
        controls[i].parentElement.querySelector("output").textContent = text;
        controls[i].setAttribute("aria-valuetext", text);
      }
      said.push(data.names[i] + " " + text);
    }
    var flat = flatOf(ks), k = data.frames[flat];
    loaded[k] = true;
    img.src = src(k);
    img.alt = data.title + ": " + said.join(", ");
    if (status) { status.textContent = said.join(", "); }
    root.setAttribute("data-frame", String(flat));
    prefetch(ks);
  }
  for (var i = 0; i < controls.length; i++) {
    controls[i].addEventListener("input", show);
    controls[i].addEventListener("change", show);
  }
  var presets = root.querySelectorAll("button.lp-preset");
  for (var p = 0; p < presets.length; p++) {
    presets[p].addEventListener("click", function (ev) {
      var set = JSON.parse(ev.currentTarget.getAttribute("data-set"));
      for (var i = 0; i < controls.length; i++) { setIndex(controls[i], set[i]); }
      show();
    });
  }
  function warm() {
    root.removeEventListener("pointerenter", warm);
    root.removeEventListener("focusin", warm);
    var ks = [];
    for (var i = 0; i < controls.length; i++) { ks.push(index(controls[i])); }
    prefetch(ks);
  }
  root.addEventListener("pointerenter", warm);
  root.addEventListener("focusin", warm);
})();
"""

_PLAYER_CSS = """
.lipattn-player { border: 1px solid #d0d7de; border-radius: 6px; padding: 0.6em 0.8em;
  margin: 0.8em 0; }
.lipattn-player .lp-title { font-weight: 600; margin-bottom: 0.3em; }
.lipattn-player .lp-controls { display: flex; flex-wrap: wrap; gap: 0.4em 1.6em;
  margin-bottom: 0.4em; }
.lipattn-player label.lp-slider { display: flex; align-items: center; gap: 0.5em;
  font-size: 0.92em; }
.lipattn-player fieldset.lp-choice { border: 0; padding: 0; margin: 0; display: flex;
  flex-wrap: wrap; align-items: center; gap: 0.2em 0.9em; font-size: 0.92em; }
.lipattn-player fieldset.lp-choice legend { float: left; padding: 0; margin: 0 0.3em 0 0;
  width: auto; font-size: 1em; font-weight: normal; line-height: inherit; }
.lipattn-player input[type=range] { width: 13em; }
.lipattn-player output { font-family: var(--pst-font-family-monospace, monospace);
  min-width: 4.5em; }
.lipattn-player .lp-presets { display: flex; flex-wrap: wrap; gap: 0.3em 0.5em;
  align-items: center; margin-bottom: 0.4em; font-size: 0.92em; }
.lipattn-player button.lp-preset { border: 1px solid #8c959f; border-radius: 4px;
  background: transparent; color: inherit; padding: 0.1em 0.6em; cursor: pointer; }
.lipattn-player .lp-frame-box { overflow-x: auto; margin: 0 -0.8em; }
.lipattn-player img.lp-frame { max-width: 100%; height: auto; display: block;
  background: #fff; }
.lipattn-player .lp-status { position: absolute; width: 1px; height: 1px; overflow: hidden;
  clip: rect(0 0 0 0); white-space: nowrap; }
.lipattn-player .lp-note { font-size: 0.8em; margin-top: 0.2em; }
"""
