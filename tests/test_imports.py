"""The import graph of lipattn: no cycles, and the layout's direction.

The graph is read from the source with :mod:`ast`: an edge for every ``import``
of a lipattn module, at module level or inside a function (a lazy import is
still a dependency), to the module named and to any submodule imported from a
package (``from .layers import attention``). Tested:

- no cycle in the whole package, the book included (strongly connected
  components of size 1);
- the mathematics (every top-level module) imports neither the models (the
  book's encoder and its training included) nor the book;
- :mod:`lipattn.layers` imports only the mathematics below it;
- nothing outside :mod:`lipattn.book` imports it;
- the explorer mechanism (:mod:`lipattn.book.widgets`) imports no chapter's
  module and not the registry (:mod:`lipattn.book.explorers`) that collects them.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

import lipattn

ROOT = Path(lipattn.__file__).parent

#: The mathematics (issue 26): one module per concept, at the top level.
MATHEMATICS = ("softmax", "scaling", "quadrature", "init_gradients", "attention", "spectral",
               "compositions", "min_entropy", "collapse", "lanczos", "lipschitz", "bounds",
               "l2attention", "adversarial", "stabilisers", "layernorm")
#: What the layers may import: the mathematics below them, and the private helpers.
BELOW_LAYERS = ("_validate", "_blas", "softmax", "attention", "layernorm", "lanczos")
#: The models built from the layers: the real decoders, the book's encoder, its training
#: and the exact constants of its sublayers (the experiments on it are the book's).
MODELS = ("models",)


def _modules() -> dict[str, tuple[Path, bool]]:
    out = {}
    for f in ROOT.rglob("*.py"):
        parts = list(f.relative_to(ROOT.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (f, is_pkg)
    return out


@functools.cache
def _graph() -> dict[str, set[str]]:
    mods = _modules()
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, (f, is_pkg) in mods.items():
        here = m.split(".") if is_pkg else m.split(".")[:-1]
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here[:len(here) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                targets = [target, *(f"{target}.{a.name}" for a in node.names)]
            edges[m] |= {t for t in targets if t in mods and t != m}
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(root):
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def _reach(edges, start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for w in edges[todo.pop()]:
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


def _is(module: str, names) -> bool:
    return any(module == f"lipattn.{n}" or module.startswith(f"lipattn.{n}.") for n in names)


def test_the_cycle_finder_finds_cycles():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles_outside_the_book():
    edges = _graph()
    assert len(edges) > 30
    sub = {m: {w for w in ws if not _is(w, ("book",))} for m, ws in edges.items()
           if not _is(m, ("book",))}
    assert _cycles(sub) == []


def test_no_import_cycles_in_the_whole_package():
    edges = _graph()
    assert any(_is(m, ("book",)) for m in edges)
    assert _cycles(edges) == []


def test_every_top_level_module_is_listed_as_mathematics():
    """A new top-level module is mathematics and is checked as such, or it belongs
    in layers/, models/ or book/."""
    top = {m.removeprefix("lipattn.") for m in _graph() if m.count(".") == 1}
    assert top - {"_validate", "_blas", "layers", "models", "book"} == set(MATHEMATICS)


@pytest.mark.parametrize("module", MATHEMATICS)
def test_the_mathematics_imports_neither_the_models_nor_the_book(module):
    reach = _reach(_graph(), f"lipattn.{module}")
    bad = sorted(m for m in reach if _is(m, (*MODELS, "book")))
    assert bad == [], f"lipattn.{module} imports {bad}"


def test_nothing_outside_the_book_imports_it():
    edges = _graph()
    for m in edges:
        if not _is(m, ("book",)):
            bad = sorted(w for w in _reach(edges, m) if _is(w, ("book",)))
            assert bad == [], f"{m} imports {bad}"


def test_the_explorer_mechanism_imports_no_chapter_module():
    reach = _reach(_graph(), "lipattn.book.widgets")
    assert not any(_is(m, ("book.viz", "book.explorers")) for m in reach), sorted(reach)
    assert "lipattn.book.viz.softmax" in _reach(_graph(), "lipattn.book.explorers")


def test_the_layers_import_only_the_mathematics_below_them():
    edges = _graph()
    for m in edges:
        if _is(m, ("layers",)):
            bad = sorted(w for w in _reach(edges, m)
                         if not _is(w, ("layers", *BELOW_LAYERS)) and w != "lipattn")
            assert bad == [], f"{m} imports {bad}"
