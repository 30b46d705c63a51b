"""The explorer registry (lipattn/book/explorers.py) and the declarative explorer form
(lipattn/book/widgets.py)."""

from __future__ import annotations

import importlib
import pkgutil

import pytest
from matplotlib.figure import Figure

import lipattn.book.viz
from lipattn.book import explorers
from lipattn.book.widgets import Explorer, Slider


def test_every_explorer_of_every_chapter_module_is_registered():
    """A module of lipattn.book.viz that defines an explorer is in MODULES, and every
    explorer it defines is in EXPLORERS under its name, its class being the factory."""
    found = {}
    for info in pkgutil.iter_modules(lipattn.book.viz.__path__):
        module = importlib.import_module(f"lipattn.book.viz.{info.name}")
        for obj in vars(module).values():
            if (isinstance(obj, type) and issubclass(obj, Explorer)
                    and obj.__module__ == module.__name__):
                assert module in explorers.MODULES, module.__name__
                found[obj.name] = obj
    assert found == explorers.EXPLORERS
    assert len(found) >= 12


def test_two_explorers_with_one_name_are_refused():
    with pytest.raises(ValueError, match="two explorers are named 'softmax-logits'"):
        explorers._registry(explorers.MODULES + explorers.MODULES[:1])


class _Toy(Explorer, name="toy", title="A toy", size=(4.0, 2.0)):
    """Two sliders declared as class attributes."""

    b = Slider((1, 2, 3), default=2)
    a = Slider(("x", "y"), label="the letter")

    def setup(self, fig: Figure):
        ax = fig.subplots()
        ax.set_xlim(0, 4)
        (self._line,) = ax.plot([0], [0])
        return [self._line]

    def update(self, a: str, b: int) -> None:
        self._line.set_data([0, b], [0, 1 if a == "x" else 2])


def test_the_declarative_form_sets_the_sliders_in_order_and_the_keywords():
    assert [s.name for s in _Toy.slider_specs] == ["b", "a"]
    assert (_Toy.name, _Toy.title, _Toy.width, _Toy.height) == ("toy", "A toy", 4.0, 2.0)
    ex = _Toy()
    assert ex.sliders == {"b": (1, 2, 3), "a": ("x", "y")}
    assert ex.defaults == {"b": 2, "a": "x"}
    assert ex.render(a="y")[:4] == b"\x89PNG"

    class Sub(_Toy):  # declares no slider: inherits them, and the keywords
        presets = {"three": {"b": 3}}

    assert Sub.slider_specs == _Toy.slider_specs and Sub.name == "toy"


def test_the_declarative_form_refuses_what_would_not_render():
    with pytest.raises(TypeError, match="declares no Slider"):
        class NoSliders(Explorer, name="none"):
            pass
    with pytest.raises(TypeError, match=r"update must take the sliders \['a', 'b'\]"):
        class Mismatch(Explorer, name="mismatch"):
            a = Slider((1, 2))
            b = Slider((1, 2))

            def update(self, a: int) -> None:
                pass
    with pytest.raises(TypeError, match="may not be named 'title'"):
        class Shadow(Explorer, name="shadow"):
            title = Slider((1, 2))
    # Python 3.11 wraps an error of __set_name__ in a RuntimeError; 3.12 raises it as is
    with pytest.raises((TypeError, RuntimeError)) as info:
        class Renamed(Explorer, name="renamed"):
            a = Slider((1, 2), name="b")
    error = info.value.__cause__ or info.value
    assert isinstance(error, TypeError) and "use the same one" in str(error)
