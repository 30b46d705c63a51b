"""The explorer mechanism (lipattn/book/widgets.py) and every registered explorer
(lipattn/book/explorers.py)."""

from __future__ import annotations

import io
import json
import re

import numpy as np
import pytest
from matplotlib.collections import Collection
from matplotlib.image import AxesImage
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from matplotlib.text import Text
from PIL import Image

from lipattn.book.explorers import EXPLORERS, get_explorer
from lipattn.book.widgets import Explorer, Slider

NAMES = sorted(EXPLORERS)


def artist_data(artist) -> np.ndarray:
    """The numbers an artist displays, whatever its kind."""
    if isinstance(artist, Rectangle):
        return np.array([artist.get_x(), artist.get_y(), artist.get_width(), artist.get_height()])
    if isinstance(artist, Line2D):
        return np.asarray(artist.get_xydata(), dtype=float)
    if isinstance(artist, AxesImage):
        return np.asarray(artist.get_array(), dtype=float)
    if isinstance(artist, Collection):
        return np.concatenate([np.asarray(p.vertices, float).ravel() for p in artist.get_paths()]
                              or [np.zeros(0)])
    if isinstance(artist, Text):
        text = artist.get_text()
        assert "nan" not in text.lower() and "inf" not in text.lower(), text
        return np.zeros(0)
    raise AssertionError(f"unexpected artist type {type(artist)}")


@pytest.fixture(scope="module", params=NAMES)
def explorer(request) -> Explorer:
    return get_explorer(request.param)


def test_registry_is_populated():
    assert {"softmax-logits", "softmax-saturation"} <= set(EXPLORERS)
    for name, factory in EXPLORERS.items():
        ex = factory()
        assert ex.name == name
        assert len(ex.sliders) >= 1
        assert all(len(v) >= 2 for v in ex.sliders.values())


def test_every_slider_value_renders_finite_data(explorer):
    """render runs at every grid point without a warning (warnings are errors)."""
    for values in explorer.grid():
        png = explorer.render(**values)
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        for artist in explorer.artists:
            assert np.all(np.isfinite(artist_data(artist))), (values, artist)


def test_every_slider_moves_the_picture(explorer):
    """Changing any single slider from its default changes the frame's pixels."""
    base = explorer.defaults
    ref = explorer.render(**base)
    ref_px = np.asarray(Image.open(io.BytesIO(ref)))
    for name, values in explorer.sliders.items():
        for v in values:
            if v != base[name]:
                px = np.asarray(Image.open(io.BytesIO(explorer.render(**(base | {name: v})))))
                assert px.shape == ref_px.shape
                assert np.any(px != ref_px), f"slider {name}={v!r} left the frame unchanged"


def test_render_is_in_place_and_blits(explorer):
    """The same figure is reused and its axes do not move between frames."""
    fig = explorer.fig
    boxes = [ax.get_position().bounds for ax in fig.axes]
    for values in list(explorer.grid())[:: max(1, len(list(explorer.grid())) // 5)]:
        explorer.render(**values)
    assert explorer.fig is fig
    assert [ax.get_position().bounds for ax in fig.axes] == boxes
    # Rendering the same values twice gives identical pixels (no accumulation).
    a = explorer.render(**explorer.defaults)
    explorer.render(**next(iter(explorer.grid())))
    b = explorer.render(**explorer.defaults)
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(a))),
                          np.asarray(Image.open(io.BytesIO(b))))


def test_player_html_has_every_frame_and_control(explorer):
    html = explorer.player_html()
    data = re.search(r'<script type="application/json" class="lp-data">(.*?)</script>', html, re.S)
    payload = json.loads(data.group(1))
    shape = [len(v) for v in explorer.sliders.values()]
    assert payload["shape"] == shape
    assert len(payload["frames"]) == int(np.prod(shape))
    assert max(payload["frames"]) < len(payload["images"])
    specs = explorer.slider_specs
    assert html.count('type="range"') == sum(not sp.is_choice for sp in specs)
    assert html.count('<fieldset class="lp-choice') == sum(sp.is_choice for sp in specs)
    for sp in specs:  # categories are radio buttons, one per value
        if sp.is_choice:
            assert html.count(f'name="{re.search(r"lp-[^ ]+-title", html).group(0)[:-6]}-'
                              f'{sp.name}"') == len(sp.values)
    assert "Loading widget" not in html
    # every control is labelled in words (more than one letter)
    assert all(len(sp.text.split()[0]) > 1 or len(sp.text.split()) > 1 for sp in specs)
    assert 'aria-live="polite"' in html


def test_frames_are_drawn_for_the_column(explorer):
    """Frames are 688 CSS px wide (or less), the static ones encoded at 2x and the
    live ones at LIVE_DPR, the same CSS size, with no text below 8 pt."""
    from lipattn.book.plotting import smallest_glyph_pt
    from lipattn.book.widgets import LIVE_DPR

    css_w, css_h = explorer.css_size
    assert css_w <= 688
    assert Image.open(io.BytesIO(explorer.frame_for_site())).size == (2 * css_w, 2 * css_h)
    assert Image.open(io.BytesIO(explorer.render())).size == (LIVE_DPR * css_w,
                                                              LIVE_DPR * css_h)
    assert explorer.min_font_pt >= 8.0
    texts = [t for t in explorer.fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    assert min(smallest_glyph_pt(t) for t in texts) >= 8.0


def test_presets_set_every_slider():
    """A preset's button sets the sliders it names and resets the others."""
    ex = get_explorer("scaling-d")
    html = ex.player_html()
    buttons = re.findall(r'<button type="button" class="lp-preset" data-set="([^"]+)">([^<]+)<',
                         html)
    assert len(buttons) == len(ex.presets) >= 2
    for (data, label), (name, values) in zip(buttons, ex.presets.items(), strict=True):
        idx = json.loads(data.replace("&quot;", '"'))
        assert label.replace("&#x27;", "'") == name
        for spec, k in zip(ex.slider_specs, idx, strict=True):
            assert spec.values[k] == values.get(spec.name, spec.initial)
    box = ex.widget()
    row = box.children[1]
    controls = box.children[2].children
    row.children[2].click()  # the second preset
    name, values = list(ex.presets.items())[1]
    assert {c.description: c.value for c in controls} == {
        sp.text: values.get(sp.name, sp.initial) for sp in ex.slider_specs}


def test_bad_presets_are_rejected():
    from lipattn.book.viz.softmax import SaturationExplorer

    class Bad(SaturationExplorer):
        presets = {"too big": {"scale": 1e9}}

    with pytest.raises(ValueError, match="scale must be one of"):
        Bad()


def test_mime_bundle_outside_a_kernel_has_the_player(explorer):
    bundle = explorer._repr_mimebundle_()
    assert "text/html" in bundle and "lipattn-player" in bundle["text/html"]
    assert "application/vnd.jupyter.widget-view+json" not in bundle  # no kernel here


def test_live_widget_uses_the_same_frames():
    ex = get_explorer("softmax-saturation")
    box = ex.widget()
    image = box.children[-1]
    slider = box.children[-2].children[0]
    values = ex.sliders["scale"]
    slider.value = values[-1]
    assert image.value == ex.render(scale=values[-1])


def test_bad_slider_values_are_rejected():
    ex = get_explorer("softmax-saturation")
    with pytest.raises(TypeError, match="unknown slider"):
        ex.render(nonsense=1)
    with pytest.raises(ValueError, match="scale must be one of"):
        ex.render(scale=-1.0)
    with pytest.raises(ValueError, match="name must be one of"):
        get_explorer("no-such-explorer")
    with pytest.raises(ValueError, match="at least 2 values"):
        Slider((1,), name="x")
    with pytest.raises(ValueError, match="default"):
        Slider((1, 2), name="x", default=3)
    for bad in (True, np.array([0.05, 1.0]), "1.0", None, np.nan):
        with pytest.raises(ValueError, match="scale must be one of"):
            ex.render(scale=bad)


def test_slider_values_match_kind_for_kind():
    """True is not the value 1 (nor False 0), a string not a number, an array no value."""
    s = Slider((0, 1, 2.0, "a", False), name="d")
    assert [s.index(v) for v in (0, 1, 2, 2.0, np.int64(1), np.float64(2.0), "a", False,
                                 np.bool_(False))] == [0, 1, 2, 2, 1, 2, 3, 4, 4]
    assert [s.index(v) for v in (True, "0", np.array([0, 1]), None, 0j, b"a")] == [-1] * 6
    for field, bad in (("name", 1), ("name", ""), ("label", 1), ("fmt", "x"),
                       ("values", "ab"), ("values", None)):
        with pytest.raises((TypeError, ValueError), match=field):
            Slider(**{"name": "s", "values": (1, 2)} | {field: bad})


def test_in_a_kernel_one_output_carries_the_widget_and_the_player():
    """Executed in a real kernel, an explorer's output holds both renderings;
    the book prefers text/html (the player), JupyterLab the widget view."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        'from lipattn.book.explorers import get_explorer\nget_explorer("softmax-saturation")')]
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    (out,) = nb.cells[0].outputs
    assert out.output_type == "execute_result"
    assert "lipattn-player" in out.data["text/html"]
    view = out.data["application/vnd.jupyter.widget-view+json"]
    assert view["model_id"] in nb.metadata["widgets"][
        "application/vnd.jupyter.widget-state+json"]["state"]


@pytest.mark.parametrize("name", sorted(EXPLORERS))
def test_explorer_text_stays_inside_its_frame(name):
    """No readout, title or label of a frame runs past the frame's edge (a long
    title was cut off at the right of the power-iteration player), at every
    slider's first and last value and at random positions. At the same
    positions every glyph of the frame (scripts included, as drawn: read from
    its SVG) is at least 11 CSS px where the site shows the frame on a 1280-px
    desktop (its own width, the column) and 9 px on a 390-px phone (the
    player's --lp-phone-min width, set from the explorer's declared smallest
    glyph, which must not overstate the drawn one)."""
    import itertools

    from conftest import drawn_glyph_pt

    from lipattn.book import plotting

    ex = get_explorer(name)
    specs = ex.slider_specs
    grid = list(itertools.product(*[list(s.values) for s in specs]))
    rng = np.random.default_rng(0)
    ends = [tuple(s.values[0] for s in specs), tuple(s.values[-1] for s in specs)]
    pick = ends + [grid[i] for i in rng.choice(len(grid), min(14, len(grid)), replace=False)]
    renderer = ex.fig.canvas.get_renderer()
    W, H = ex.fig.bbox.width, ex.fig.bbox.height
    out = set()
    for values in pick:
        ex.render(**dict(zip([s.name for s in specs], values, strict=True)))
        for t in ex.fig.findobj(Text):
            text = t.get_text().strip()
            # tick labels outside the view limits exist but are never drawn
            if not t.get_visible() or not text or "mathdefault" in text \
                    or text.lstrip("−-").replace(".", "").isdigit():
                continue
            bb = t.get_window_extent(renderer)
            if bb.x0 < -1 or bb.x1 > W + 1 or bb.y0 < -1 or bb.y1 > H + 1:
                out.add(text[:40])
    assert not out, f"{name}: text outside the frame: {sorted(out)}"

    css_w = ex.css_size[0]
    declared_px = ex.min_font_pt * plotting.CSS_PX_PER_IN / 72
    phone_w = plotting.phone_min_width(css_w, declared_px)  # as the player sets it
    small = {}
    for values in pick:  # after the checks above: saving an SVG redraws the figure
        ex.render(**dict(zip([s.name for s in specs], values, strict=True)))
        drawn_px = drawn_glyph_pt(ex.fig, ex.artists) * plotting.CSS_PX_PER_IN / 72
        assert drawn_px >= declared_px - 0.01, (values, drawn_px, declared_px)
        desktop, phone = drawn_px, drawn_px * max(phone_w, 358) / css_w
        if desktop < 11.0 or phone < 9.0 - 0.05:
            small[values] = (round(desktop, 1), round(phone, 1))
    assert not small, f"{name}: smallest glyph (desktop px, phone px) too small at {small}"

def _pixels(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"), dtype=float)


def _halve(px: np.ndarray) -> np.ndarray:
    """2x2 box average: a 2x frame seen on a 1x pixel grid."""
    h, w = px.shape[0] // 2, px.shape[1] // 2
    return px[:2 * h, :2 * w].reshape(h, 2, w, 2, 3).mean(axis=(1, 3))


@pytest.mark.parametrize("name", sorted(EXPLORERS))
def test_live_frame_is_the_static_frame_on_a_coarser_grid(name):
    """The live render (LIVE_DPR) and the static player's frame (DPR) draw the
    same artists with the same data: at each value, the live PNG matches the
    static frame averaged down to its size, and matches it better than the
    static frame of another slider value where those two differ."""
    from lipattn.book import plotting
    from lipattn.book.widgets import LIVE_DPR

    assert plotting.DPR == 2 * LIVE_DPR  # the comparison below halves the static frame
    ex = get_explorer(name)
    grid = list(ex.grid())
    first, last = grid[0], grid[-1]
    live = {k: _pixels(ex.render(**v)) for k, v in (("first", first), ("last", last))}
    site = {k: _halve(_pixels(ex.frame_for_site(**v))) for k, v in (("first", first),
                                                                    ("last", last))}
    # the live frame, drawn after the static ones, is unchanged by them
    assert np.array_equal(_pixels(ex.render(**first)), live["first"])
    assert live["first"].shape == site["first"].shape
    assert ex.css_size == live["first"].shape[1::-1]
    changed = np.abs(site["first"] - site["last"]).max(axis=2) > 60
    assert changed.sum() > 20, "the first and last grid points draw the same picture"
    for k, other in (("first", "last"), ("last", "first")):
        err = np.abs(live[k] - site[k]).max(axis=2)
        # most pixels agree to a few grey levels of 255 (edges differ by antialiasing
        # and the static frame's 128-colour palette)
        assert np.percentile(err, 75) < 10.0, (k, np.percentile(err, [50, 75, 90]))
        same = err[changed].mean()
        wrong = np.abs(live[k] - site[other]).max(axis=2)[changed].mean()
        assert same < 0.5 * wrong, (k, same, wrong)


def test_live_png_encodes_the_exact_pixels():
    """render's PNG (unfiltered rows, zlib level 1) decodes to the canvas's RGB."""
    from lipattn.book.widgets import _png

    ex = get_explorer("softmax-saturation")
    png = ex.render()
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(png))), ex.rgba()[..., :3])
    rng = np.random.default_rng(0)
    noise = rng.integers(0, 256, (7, 5, 4), dtype=np.uint8)
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(_png(noise)))), noise[..., :3])
