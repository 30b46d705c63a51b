"""Build the book's translated edition, or regenerate its message catalogues.

The English site is built by ``jupyter-book build .`` into ``_build/html``.
The translation (``lipattn_translation`` in ``_config.yml``, e.g. Chinese,
``language: zh_CN``, folder ``zh``) is the same Jupyter Book configuration
built by Sphinx with ``language`` set, into ``_build/html/<folder>``, with its
own doctrees (``_build/.doctrees-<language>``) and the English build's
execution cache (``_build/.jupyter_cache``): the sources are the same, so every
notebook is a cache hit and nothing is executed again. Sphinx compiles
``locale/<language>/LC_MESSAGES/**/*.po`` into ``.mo`` files and translates
each page from its catalogue; untranslated text stays English.

Usage (from the book's root; the Makefile's ``html-zh`` and ``gettext``)::

    python -m lipattn.book.edition build [-n] [-W] [--keep-going]
    python -m lipattn.book.edition gettext     # .pot files, then sphinx-intl update

``gettext`` also collects the figures' alt texts from the English build
(``_build/html/_images``) into ``figures.pot`` (catalogue ``figures.po``), and
the explorers' texts (titles, controls, presets, notes of the players on the
English pages, ``_build/html``) into ``explorers.pot`` (``explorers.po``).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["translation_config", "build", "pot", "main"]


def translation_config(root: Path | str = ".") -> dict[str, Any]:
    """``sphinx.config.lipattn_translation`` of the book's ``_config.yml``.

    Parameters
    ----------
    root : Path or str
        The book's folder (holding ``_config.yml``).

    Returns
    -------
    dict
        ``language``, ``folder``, ``lang``, ``label``, ``list`` (as written).
    """
    import yaml

    path = Path(root) / "_config.yml"
    if not path.is_file():
        raise ValueError(f"root must hold _config.yml; {str(path)!r} does not exist")
    cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    tr = ((cfg.get("sphinx") or {}).get("config") or {}).get("lipattn_translation") or {}
    if not tr.get("language") or not tr.get("folder"):
        raise ValueError(f"{path}: sphinx.config.lipattn_translation needs language and folder")
    return tr


def _sphinx(root: Path, outdir: Path, doctrees: Path, builder: str, overrides: dict,
            warningiserror: bool = False, keep_going: bool = False) -> int:
    from jupyter_book.sphinx import build_sphinx

    root = root.resolve()
    overrides = {"external_toc_path": (root / "_toc.yml").as_posix(),
                 "latex_individualpages": False, **overrides}
    return build_sphinx(root, outdir, noconfig=True, path_config=str(root / "_config.yml"),
                        confoverrides=overrides, doctreedir=doctrees, builder=builder,
                        warningiserror=warningiserror, keep_going=keep_going)


def build(root: Path | str = ".", nitpicky: bool = False, warningiserror: bool = False,
          keep_going: bool = False) -> int:
    """Build the translated edition into ``_build/html/<folder>``.

    Returns
    -------
    int
        Sphinx's exit status (0: success).
    """
    root = Path(root).resolve()
    tr = translation_config(root)
    out = root / "_build"
    overrides: dict[str, Any] = {"language": tr["language"], "lipattn_build_dir": str(out)}
    if nitpicky:
        overrides["nitpicky"] = True
    return _sphinx(root, out / "html" / tr["folder"], out / f".doctrees-{tr['language']}",
                   "html", overrides, warningiserror, keep_going)


def pot(root: Path | str, build_dir: Path | str) -> Path:
    """The message templates (``.pot``, one per page) of the current English
    source, with notebooks not executed (outputs are not translated).

    Parameters
    ----------
    root : Path or str
        The book's folder.
    build_dir : Path or str
        A scratch build folder (created; nothing else is written).

    Returns
    -------
    Path
        The folder holding ``<docname>.pot``.
    """
    root, build_dir = Path(root).resolve(), Path(build_dir).resolve()
    out = build_dir / "gettext"
    status = _sphinx(root, out, build_dir / ".doctrees", "gettext",
                     {"nb_execution_mode": "off", "lipattn_build_dir": str(build_dir)})
    if status != 0:
        raise RuntimeError(f"the gettext build failed (status {status})")
    return out


def main(argv: list[str] | None = None) -> int:
    """The command line (module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m lipattn.book.edition")
    parser.add_argument("command", choices=["build", "gettext"])
    parser.add_argument("-n", action="store_true", help="nitpicky (as jupyter-book -n)")
    parser.add_argument("-W", action="store_true", help="warnings are errors")
    parser.add_argument("--keep-going", action="store_true")
    args = parser.parse_args(argv)
    root = Path.cwd()
    if args.command == "build":
        return build(root, args.n, args.W, args.keep_going)
    tr = translation_config(root)
    scratch = root / "_build" / "gettext-build"
    shutil.rmtree(scratch, ignore_errors=True)
    templates = pot(root, scratch)
    images = root / "_build" / "html" / "_images"
    if images.is_dir():  # the figures' alt texts, from the English build
        from .sphinxext import FIGURES_DOMAIN, figures_pot

        n = figures_pot(images, templates / f"{FIGURES_DOMAIN}.pot")
        print(f"{n} figure alt texts in {FIGURES_DOMAIN}.pot")
    else:
        print("no English build: figures.pot (alt texts) not regenerated (make html-en first)")
    site = root / "_build" / "html"
    if (site / "index.html").is_file():  # the explorers' texts, from the English build
        from .sphinxext import EXPLORERS_DOMAIN, explorers_pot

        n = explorers_pot(site, templates / f"{EXPLORERS_DOMAIN}.pot")
        print(f"{n} explorer texts in {EXPLORERS_DOMAIN}.pot")
    else:
        print("no English build: explorers.pot not regenerated (make html-en first)")
    return subprocess.call([sys.executable, "-m", "sphinx_intl", "update", "-p", str(templates),
                            "-l", tr["language"], "-d", "locale", "-w", "0"])


if __name__ == "__main__":
    sys.exit(main())
