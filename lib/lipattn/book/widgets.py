"""Explorers: one definition, two renderings.

An explorer is a small object defined by

- ``sliders``: an ordered mapping *name -> the values that slider can take*;
- ``render(**values)``: recompute with :mod:`lipattn` and redraw one
  matplotlib figure *in place*, returning the frame as PNG bytes.

It is shown in two ways from the same ``render``:

- **in a live kernel**, as ipywidgets sliders driving an ``ipywidgets.Image``
  that receives the PNG bytes of every new frame;
- **on the static site**, as a precomputed *frame player*: the same sliders as
  HTML ``<input type=range>`` controls that swap frames rendered at build time
  for every slider position (the full grid when there are several sliders).

Displaying an explorer emits one output whose mime bundle carries both: the
widget view and ``text/html``. The book's ``_config.yml`` tells myst-nb to
prefer ``text/html``, so the website shows the player while JupyterLab shows
the live widget.

Speed comes from blitting: the axes, ticks and labels are drawn once into a
cached background; a frame restores that background and draws only the
artists that change (axis limits are fixed per explorer), then encodes the
RGBA buffer with a fast PNG setting. The live frame is drawn at
:data:`LIVE_DPR` device pixels per CSS pixel and the static frames at
:data:`~lipattn.book.plotting.DPR`: the *same* figure, whose layout is frozen in
inches, switches its dpi (one cached background per resolution), so both show
the same artists at the same CSS size, in the same place. Measured (CPU time
per frame, issue 30): computing takes under 1 ms; at ``DPR`` = 2 the PNG took
17-26 ms (four times the pixels of a ``DPR`` = 1 frame) and drawing the changed
artists 5-17 ms, most of it text layout (3-5 ms per new readout string, at any
dpi). At ``LIVE_DPR`` the PNG, unfiltered, takes about 3 ms.

An explorer is declared as a class, dataclass-style: its name, title and size
as class keywords, its sliders as class attributes in slider order, each named
by its attribute (the keyword of ``render`` and ``update`` it sets)::

    class SaturationExplorer(Explorer, name="softmax-saturation", size=(8.4, 3.0),
                             title="Saturation: scale the logits z = a·z₀"):
        scale = Slider(SCALES, label="logit scale a", default=SCALES[10])
        presets = {"saturated: a = 50": {"scale": SCALES[-1]}}

        def setup(self, fig): ...
        def update(self, scale): ...

The book's explorers are collected by name in
:data:`lipattn.book.explorers.EXPLORERS`, so that tests and benchmarks can
iterate over all of them; this module, which the chapters' modules import,
imports none of them.
"""

from __future__ import annotations

import base64
import hashlib
import html
import inspect
import io
import itertools
import json
import struct
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from matplotlib.artist import Artist
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from PIL import Image

from . import plotting
from ._check import as_text
from .player import _PLAYER_CSS, _PLAYER_JS

__all__ = ["Slider", "Explorer", "LIVE_DPR"]

_COUNTER = itertools.count()

#: Device pixels per CSS pixel of the live figure in a kernel. A live frame is
#: shown at the same CSS size as the static player's (text no smaller); it is
#: drawn at one device pixel per CSS pixel, which keeps a slider's redraw and its
#: PNG under the 30 ms target of ``make bench``. The static frames, rendered
#: once at build time, stay at :data:`~lipattn.book.plotting.DPR`.
LIVE_DPR = 1


def _png_chunk(tag: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))


def _png(rgba: np.ndarray) -> bytes:
    """PNG bytes of an RGBA frame, ndarray of uint8, shape (h, w, 4), as RGB.

    Every row is stored unfiltered (PNG filter type 0) and deflated at zlib
    level 1: about half the time of Pillow's ``compress_level=1``, which tries
    the five PNG filters on every row, for a file of the same size (a frame is
    mostly flat colour, which deflate compresses well without a filter).
    """
    h, w = rgba.shape[:2]
    rows = np.zeros((h, 1 + 3 * w), np.uint8)  # a 0 (no filter) before each row
    rows[:, 1:].reshape(h, w, 3)[...] = rgba[..., :3]
    header = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)  # 8-bit RGB, not interlaced
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", header)
            + _png_chunk(b"IDAT", zlib.compress(rows, 1)) + _png_chunk(b"IEND", b""))


def _default_fmt(value: Any) -> str:
    if isinstance(value, (bool, np.bool_)):
        return "on" if value else "off"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return f"{float(value):.3g}"
    return str(value)


def _same(a: Any, b: Any) -> bool:
    """Whether slider value ``a`` is ``b``, kind for kind (see :meth:`Slider.index`)."""
    if a is b:
        return True
    bools = (bool, np.bool_)
    if isinstance(a, bools) or isinstance(b, bools):
        return isinstance(a, bools) and isinstance(b, bools) and bool(a) == bool(b)
    reals = (int, float, np.integer, np.floating)
    if isinstance(a, reals) or isinstance(b, reals):
        return isinstance(a, reals) and isinstance(b, reals) and a == b
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a == b
    try:
        return bool(type(a) is type(b) and a == b)
    except (TypeError, ValueError):  # arrays and the like are no slider value
        return False


@dataclass(frozen=True)
class Slider:
    """One slider of an explorer.

    Declared as a class attribute of an :class:`Explorer`, whose name it takes
    (``scale = Slider(...)``); or built with ``name`` given.

    Parameters
    ----------
    values : sequence
        The values the slider can take, in slider order (at least 2).
    label : str, optional
        What the reader sees next to the slider (defaults to ``name``).
    default : object, optional
        Initial value; must be one of ``values`` (defaults to the first).
    fmt : callable, optional
        Formats a value for display.
    kind : {"auto", "range", "choice"}, optional
        ``"range"`` shows a slider, ``"choice"`` a group of radio buttons (for
        categories, whose order means nothing). ``"auto"`` (the default) picks
        ``"choice"`` when every value is a string or a bool.
    name : str, optional
        Keyword of ``render`` that this slider sets; a class attribute's name
        when it is declared in an :class:`Explorer`.
    """

    values: Sequence[Any]
    label: str | None = None
    default: Any = None
    fmt: Callable[[Any], str] = field(default=_default_fmt)
    kind: str = "auto"
    name: str | None = None

    def __post_init__(self) -> None:
        if self.name is not None:
            as_text(self.name, "name")
        if isinstance(self.values, (str, bytes, Mapping)) or not isinstance(
                self.values, (Sequence, np.ndarray)):
            raise TypeError(f"values must be a sequence of the slider's values; "
                            f"got {type(self.values).__name__}")
        if self.label is not None:
            as_text(self.label, "label")
        if not callable(self.fmt):
            raise TypeError(f"fmt must be a callable that formats a value; "
                            f"got {type(self.fmt).__name__}")
        what = "a slider" if self.name is None else f"slider {self.name!r}"
        if len(self.values) < 2:
            raise ValueError(f"{what} needs at least 2 values; got {len(self.values)}")
        if self.default is not None and self.index(self.default) < 0:
            raise ValueError(f"{what}: default {self.default!r} is not among its values")
        if self.kind not in ("auto", "range", "choice"):
            raise ValueError(f"{what}: kind must be 'auto', 'range' or 'choice'; "
                             f"got {self.kind!r}")

    def __set_name__(self, owner: type, attr: str) -> None:
        if self.name is not None and self.name != attr:
            raise TypeError(f"slider {self.name!r} is declared as {owner.__name__}.{attr}; "
                            f"leave its name out or use the same one")
        object.__setattr__(self, "name", attr)

    def index(self, value: Any) -> int:
        """Position of ``value`` among the slider's values, or -1.

        A bool matches only a bool, a string only a string and a number only a
        number (not a bool): ``True`` is not the value 1, nor an array any value.
        """
        for i, v in enumerate(self.values):
            if _same(v, value):
                return i
        return -1

    @property
    def initial(self) -> Any:
        return self.values[0] if self.default is None else self.default

    @property
    def text(self) -> str:
        return self.label or self.name

    @property
    def is_choice(self) -> bool:
        """Whether the control is a group of radio buttons (categories)."""
        if self.kind != "auto":
            return self.kind == "choice"
        return all(isinstance(v, (str, bool, np.bool_)) for v in self.values)


class Explorer:
    """Base class of every explorer.

    A subclass gives ``name``, ``title`` and ``size`` (width and height in
    inches) as class keywords and its sliders as :class:`Slider` class
    attributes (:attr:`slider_specs`, in the order they are declared; a subclass
    of an explorer that declares none inherits its sliders, as it inherits the
    keywords and ``presets``), and implements

    - :meth:`setup` -- build the axes and artists of ``self.fig`` with fixed
      limits, returning the artists that change between frames;
    - :meth:`update` -- recompute with :mod:`lipattn` and set the data of
      those artists for the given slider values.

    Everything else (blitting, PNG encoding, the live widget, the static
    player) lives here.

    ``presets`` (optional) maps a button's label to slider values, for the
    "Try:" recipes of the text: ``{"saturate": {"scale": 50.0}}``. Sliders a
    preset leaves out go back to their defaults. Both the live widget and the
    static player show one button per preset.

    Frames are drawn for the text column like every figure
    (:mod:`lipattn.book.plotting`): at most :data:`~lipattn.book.plotting.COLUMN_IN`
    wide, at :data:`~lipattn.book.plotting.DPR` device pixels per CSS pixel, with
    no text below :data:`~lipattn.book.plotting.MIN_FONT_PT`.
    """

    name: str = "explorer"
    title: str = ""
    slider_specs: tuple[Slider, ...] = ()
    presets: Mapping[str, Mapping[str, Any]] = {}
    width: float = 9.0
    height: float = 3.2

    def __init_subclass__(cls, *, name: str | None = None, title: str | None = None,
                          size: tuple[float, float] | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if name is not None:
            cls.name = as_text(name, "name")
        if title is not None:
            cls.title = as_text(title, "title")
        if size is not None:
            width, height = size
            cls.width, cls.height = float(width), float(height)
        own = tuple(v for v in vars(cls).values() if isinstance(v, Slider))
        for s in own:
            if hasattr(Explorer, s.name):
                raise TypeError(f"{cls.__name__}: a slider may not be named {s.name!r}, "
                                f"an attribute of every explorer")
        if own:
            cls.slider_specs = own
        if not cls.slider_specs:
            raise TypeError(f"{cls.__name__} declares no Slider")
        keywords = [p for p in inspect.signature(cls.update).parameters.values()
                    if p.name != "self"]
        names = {s.name for s in cls.slider_specs}
        if cls.update is not Explorer.update and {p.name for p in keywords} != names:
            raise TypeError(f"{cls.__name__}.update must take the sliders {sorted(names)} "
                            f"as keywords; it takes {[p.name for p in keywords]}")

    def __init__(self) -> None:
        plotting.use_style()
        self.fig = Figure(figsize=(min(self.width, plotting.COLUMN_IN), self.height),
                          dpi=plotting.CSS_PX_PER_IN * plotting.DPR, layout="constrained")
        self.canvas = FigureCanvasAgg(self.fig)
        self._specs = {s.name: s for s in self.slider_specs}
        for label, values in self.presets.items():
            if not isinstance(label, str) or not label:
                raise ValueError(f"{self.name}: preset labels must be non-empty strings; "
                                 f"got {label!r}")
            self._check(values)
        self.artists: list[Artist] = list(self.setup(self.fig))
        for a in self.artists:
            a.set_animated(True)
        # Layout once with the first frame's data, then freeze the layout so
        # that later frames cannot move the axes.
        self.update(**self.defaults)
        self.min_font_pt = plotting.legible(self.fig)
        self.canvas.draw()
        self.fig.set_layout_engine("none")
        # One background per resolution, both drawn now from the same frozen
        # layout; the figure rests at the live resolution.
        self._backgrounds: dict[float, Any] = {}
        for dpi in (self.site_dpi, self.live_dpi):
            self._at(dpi)

    # -- to be provided by subclasses -------------------------------------
    def setup(self, fig: Figure) -> Iterable[Artist]:  # pragma: no cover - abstract
        raise NotImplementedError

    def update(self, **values: Any) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    # -- the definition ----------------------------------------------------
    @property
    def sliders(self) -> dict[str, tuple[Any, ...]]:
        """name -> the values that slider can take (in slider order)."""
        return {s.name: tuple(s.values) for s in self.slider_specs}

    @property
    def defaults(self) -> dict[str, Any]:
        """name -> the initial value of each slider."""
        return {s.name: s.initial for s in self.slider_specs}

    def _check(self, values: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(values, Mapping):
            raise TypeError(f"{self.name}: slider values must be a mapping; "
                            f"got {type(values).__name__}")
        unknown = set(values) - set(self._specs)
        if unknown:
            raise TypeError(
                f"{self.name}.render got unknown slider(s) {sorted(unknown)}; "
                f"expected some of {list(self._specs)}"
            )
        full = self.defaults | dict(values)
        for key, val in full.items():
            if self._specs[key].index(val) < 0:
                raise ValueError(
                    f"{key} must be one of the slider's values {list(self._specs[key].values)}; "
                    f"got {val!r}"
                )
        return full

    def _indices(self, values: Mapping[str, Any]) -> list[int]:
        """Slider positions of ``values`` (defaults for the sliders left out)."""
        full = self._check(values)
        return [s.index(full[s.name]) for s in self.slider_specs]

    # -- one frame ---------------------------------------------------------
    @property
    def site_dpi(self) -> float:
        """dpi of the static player's frames (:data:`~lipattn.book.plotting.DPR`)."""
        return float(plotting.CSS_PX_PER_IN * plotting.DPR)

    @property
    def live_dpi(self) -> float:
        """dpi of the live frames that :meth:`render` returns (:data:`LIVE_DPR`)."""
        return float(plotting.CSS_PX_PER_IN * LIVE_DPR)

    def _at(self, dpi: float) -> Any:
        """Put the figure at ``dpi`` and return its cached background there.

        The layout is frozen in figure coordinates and every size is in points,
        so only the pixel grid changes; the background (everything but
        :attr:`artists`, which are animated) is drawn once per resolution.
        """
        if self.fig.dpi != dpi:
            self.fig.set_dpi(dpi)
        if dpi not in self._backgrounds:
            self.canvas.draw()
            self._backgrounds[dpi] = self.canvas.copy_from_bbox(self.fig.bbox)
        return self._backgrounds[dpi]

    def _draw_at(self, dpi: float, values: Mapping[str, Any]) -> None:
        self.update(**self._check(values))
        self.canvas.restore_region(self._at(dpi))
        for a in self.artists:
            self.fig.draw_artist(a)

    def draw(self, **values: Any) -> None:
        """Update the artists for ``values`` and blit them onto the live canvas
        (at :attr:`live_dpi`)."""
        self._draw_at(self.live_dpi, values)

    def rgba(self) -> np.ndarray:
        """The current frame, ndarray of uint8, shape (height, width, 4)."""
        return np.asarray(self.canvas.buffer_rgba())

    def render(self, **values: Any) -> bytes:
        """Recompute, redraw in place and return the live frame as PNG bytes.

        The frame is drawn at :attr:`live_dpi`: the picture of
        :meth:`frame_for_site` at the same values, on a coarser pixel grid.
        Sliders left out keep their default values. Unknown names raise
        ``TypeError``; values that the slider cannot take raise ``ValueError``.
        """
        self.draw(**values)
        return _png(self.rgba())

    def frame_for_site(self, **values: Any) -> bytes:
        """The frame for the static player, encoded once at build time.

        The picture that :meth:`render` draws, at :attr:`site_dpi` (sharp on
        HiDPI screens), reduced to a 128-colour palette (octree, no dithering)
        and stored as lossless WebP: about a fifth of the PNG's size, which
        keeps a chapter with its frames under 3 MB.
        """
        self._draw_at(self.site_dpi, values)
        palette = Image.fromarray(self.rgba()[..., :3]).quantize(
            128, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
        buf = io.BytesIO()
        palette.save(buf, format="WEBP", lossless=True, quality=50, method=2)
        return buf.getvalue()

    @property
    def css_size(self) -> tuple[int, int]:
        """Width and height of a frame in CSS pixels (live and static alike)."""
        w, h = self.fig.get_size_inches()
        return round(w * plotting.CSS_PX_PER_IN), round(h * plotting.CSS_PX_PER_IN)

    def grid(self) -> Iterable[dict[str, Any]]:
        """Every combination of slider values, row-major in slider order."""
        names = [s.name for s in self.slider_specs]
        for combo in itertools.product(*(s.values for s in self.slider_specs)):
            yield dict(zip(names, combo, strict=True))

    # -- static rendering --------------------------------------------------
    def player_html(self) -> str:
        """The self-contained frame player (HTML, CSS and a few lines of JS).

        Frames are inlined (base64 WebP) so that the player works in any
        notebook front end; the book's build (:mod:`lipattn.book.sphinxext`) moves
        them into separate, cacheable files that the page fetches only when a
        reader moves a control (or the player comes into view).
        """
        images: list[str] = []
        seen: dict[str, int] = {}
        frames: list[int] = []
        for values in self.grid():
            data = self.frame_for_site(**values)
            key = hashlib.sha1(data).hexdigest()
            if key not in seen:
                seen[key] = len(images)
                images.append(base64.b64encode(data).decode("ascii"))
            frames.append(seen[key])
        specs = self.slider_specs
        shape = [len(s.values) for s in specs]
        labels = [[s.fmt(v) for v in s.values] for s in specs]
        start = [s.index(s.initial) for s in specs]
        flat = int(np.ravel_multi_index(start, shape))
        payload = {"shape": shape, "labels": labels, "frames": frames, "images": images,
                   "mime": "image/webp", "names": [s.text for s in specs], "title": self.title}
        uid = f"lp-{self.name}-{next(_COUNTER)}"
        esc = html.escape
        controls = []
        for i, (s, k) in enumerate(zip(specs, start, strict=True)):
            if s.is_choice:
                radios = "".join(
                    f'<label><input type="radio" name="{uid}-{esc(s.name)}" value="{j}"'
                    f'{" checked" if j == k else ""}> {esc(labels[i][j])}</label>'
                    for j in range(len(s.values)))
                controls.append(
                    f'<fieldset class="lp-choice lp-control" data-name="{esc(s.name)}">'
                    f"<legend>{esc(s.text)}</legend>{radios}</fieldset>")
            else:
                controls.append(
                    f'<label class="lp-slider"><span>{esc(s.text)}</span>'
                    f'<input class="lp-range lp-control" type="range" min="0" '
                    f'max="{len(s.values) - 1}" step="1" value="{k}" data-name="{esc(s.name)}" '
                    f'aria-valuetext="{esc(labels[i][k])}">'
                    f"<output>{esc(labels[i][k])}</output></label>")
        presets = "".join(
            f'<button type="button" class="lp-preset" '
            f'data-set="{esc(json.dumps(self._indices(vals)))}">'
            f"{esc(label)}</button>"
            for label, vals in self.presets.items())
        if presets:
            presets = (f'<div class="lp-presets" role="group" aria-label="Try a preset">'
                       f"<span>Try:</span>{presets}</div>")
        css_w, css_h = self.css_size
        min_font_px = self.min_font_pt * plotting.CSS_PX_PER_IN / 72
        phone = plotting.phone_min_width(css_w, min_font_px)
        said = ", ".join(f"{s.text} {labels[i][k]}"
                         for i, (s, k) in enumerate(zip(specs, start, strict=True)))
        n_frames = len(frames)
        return (
            f"<style>{_PLAYER_CSS}</style>"
            f'<div class="lipattn-player" id="explorer-{esc(self.name)}" role="group" '
            f'aria-labelledby="{uid}-title" data-explorer="{esc(self.name)}" data-frame="{flat}">'
            f'<div class="lp-title" id="{uid}-title">{esc(self.title)}</div>'
            f"{presets}"
            f'<div class="lp-controls">{"".join(controls)}</div>'
            f'<div class="lp-frame-box"><img class="lp-frame" width="{css_w}" height="{css_h}" '
            f'data-min-font-px="{min_font_px:.2f}" style="--lp-phone-min: {phone}px" '
            f'alt="{esc(self.title)}: {esc(said)}" '
            f'src="data:image/webp;base64,{images[frames[flat]]}"></div>'
            f'<div class="lp-status" aria-live="polite"></div>'
            f'<div class="lp-note">Precomputed player: {n_frames} frames rendered by '
            f"<code>lipattn</code> when the book was built. Run the page as a notebook "
            f"for the live widget.</div>"
            f'<script type="application/json" class="lp-data">{json.dumps(payload)}</script>'
            f"<script>{_PLAYER_JS}</script>"
            f"</div>"
        )

    # -- live rendering ----------------------------------------------------
    def widget(self):
        """The live ipywidgets view: one selection slider per slider and an Image.

        The Image receives the PNG bytes that :meth:`render` returns: the
        static player's frames, drawn at :data:`LIVE_DPR` and shown at the same
        CSS width.
        """
        import ipywidgets as w

        css_w = self.css_size[0]
        image = w.Image(value=self.render(), format="png",
                        layout=w.Layout(width=f"{css_w}px", max_width="100%", height="auto"))
        controls = {}
        for s in self.slider_specs:
            options = [(s.fmt(v), v) for v in s.values]
            common = {"options": options, "value": s.initial, "description": s.text,
                      "style": {"description_width": "initial"}}
            controls[s.name] = (w.RadioButtons(**common) if s.is_choice else w.SelectionSlider(
                continuous_update=True, layout=w.Layout(width="22em"), **common))

        def redraw(_change: Any) -> None:
            image.value = self.render(**{k: c.value for k, c in controls.items()})

        for ctl in controls.values():
            ctl.observe(redraw, names="value")

        def preset(values: Mapping[str, Any]) -> Callable[[Any], None]:
            def click(_button: Any) -> None:
                for key, value in self._check(values).items():
                    controls[key].value = value
            return click

        buttons = []
        for label, values in self.presets.items():
            button = w.Button(description=label, layout=w.Layout(width="auto"))
            button.on_click(preset(values))
            buttons.append(button)
        rows = [w.HTML(f"<b>{html.escape(self.title)}</b>")]
        if buttons:
            rows.append(w.HBox([w.Label("Try:"), *buttons], layout=w.Layout(flex_flow="row wrap")))
        rows += [w.HBox(list(controls.values()), layout=w.Layout(flex_flow="row wrap")), image]
        return w.VBox(rows)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        bundle: dict[str, Any] = {"text/plain": f"<{type(self).__name__} explorer {self.name!r}>"}
        try:
            import ipywidgets  # noqa: F401
            from IPython import get_ipython
        except ImportError:  # pragma: no cover - the book's environment has both
            get_ipython = None  # type: ignore[assignment]
        if get_ipython is not None and get_ipython() is not None and hasattr(
            get_ipython(), "kernel"
        ):
            view = self.widget()._repr_mimebundle_()
            if view:
                bundle.update(view)
        bundle["text/html"] = self.player_html()
        return bundle
