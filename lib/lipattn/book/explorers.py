"""The book's explorers by name: the registry the chapters, tests and benchmarks use.

Every :class:`~lipattn.book.widgets.Explorer` subclass defined in one of the
chapters' modules (:data:`MODULES`, in chapter order) is in :data:`EXPLORERS`
under its ``name``; a test checks that every module of :mod:`lipattn.book.viz`
that defines an explorer is listed. The registry imports the chapters' modules,
and they import only the mechanism (:mod:`lipattn.book.widgets`), so the
import graph has no cycle.
"""

from __future__ import annotations

from types import ModuleType

from .viz import (
    collapse_explorers,
    lipschitz,
    lm,
    prenorm,
    real,
    scaling_explorers,
    softmax,
    spectral,
    spectral_normalisation,
)
from .widgets import Explorer

__all__ = ["MODULES", "EXPLORERS", "get_explorer"]

#: The modules that define the chapters' explorers, in chapter order.
MODULES: tuple[ModuleType, ...] = (softmax, scaling_explorers, collapse_explorers, prenorm,
                                   spectral, spectral_normalisation, lipschitz, real, lm)


def _defined_in(module: ModuleType) -> list[type[Explorer]]:
    """The explorer classes that ``module`` defines (not those it imports)."""
    return [obj for obj in vars(module).values()
            if isinstance(obj, type) and issubclass(obj, Explorer)
            and obj.__module__ == module.__name__]


def _registry(modules: tuple[ModuleType, ...]) -> dict[str, type[Explorer]]:
    out: dict[str, type[Explorer]] = {}
    for module in modules:
        for cls in _defined_in(module):
            if cls.name in out:
                raise ValueError(f"two explorers are named {cls.name!r}: "
                                 f"{out[cls.name].__qualname__} and {cls.__qualname__}")
            out[cls.name] = cls
    return out


#: name -> the explorer's class; calling it builds a fresh explorer.
EXPLORERS: dict[str, type[Explorer]] = _registry(MODULES)


def get_explorer(name: str) -> Explorer:
    """Build a fresh explorer by its name (one of :data:`EXPLORERS`)."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a str; got {type(name).__name__}")
    if name not in EXPLORERS:
        raise ValueError(f"name must be one of {sorted(EXPLORERS)}; got {name!r}")
    return EXPLORERS[name]()
