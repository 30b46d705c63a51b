"""The build's extension (lipattn/sphinxext.py): no stale outputs, local MathJax."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lipattn.sphinxext import inputs_hash


def test_hash_follows_content_and_ignores_caches(tmp_path: Path):
    (tmp_path / "lib" / "pkg").mkdir(parents=True)
    (tmp_path / "lib" / "pkg" / "m.py").write_text("x = 1\n")
    (tmp_path / "requirements.txt").write_text("numpy==1\n")
    watch = ["lib", "requirements.txt"]
    h0 = inputs_hash(tmp_path, watch)
    (tmp_path / "lib" / "pkg" / "__pycache__").mkdir()
    (tmp_path / "lib" / "pkg" / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"junk")
    assert inputs_hash(tmp_path, watch) == h0
    (tmp_path / "lib" / "pkg" / "m.py").write_text("x = 2\n")
    h1 = inputs_hash(tmp_path, watch)
    assert h1 != h0
    (tmp_path / "requirements.txt").write_text("numpy==2\n")
    assert inputs_hash(tmp_path, watch) != h1


def _build(src: Path, out: Path) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "html", "-q", str(src), str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return (out / "page.html").read_text()


def test_a_change_to_the_watched_library_re_executes_the_notebook(tmp_path: Path):
    """Build, change only the watched file, build again: the output must change.

    The notebook's code cell is identical in both builds, so jupyter-cache
    alone would serve the first output again.
    """
    src = tmp_path / "book"
    (src / "lib").mkdir(parents=True)
    (src / "lib" / "value.txt").write_text("first-value\n")
    (src / "conf.py").write_text(textwrap.dedent("""
        extensions = ["myst_nb", "lipattn.sphinxext"]
        nb_execution_mode = "cache"
        lipattn_watch = ["lib"]
        exclude_patterns = ["_build", "lib"]
    """))
    (src / "index.md").write_text("# Index\n\n```{toctree}\npage\n```\n")
    (src / "page.md").write_text(textwrap.dedent("""\
        ---
        jupytext:
          text_representation:
            extension: .md
            format_name: myst
        kernelspec:
          name: python3
          display_name: Python 3
        ---
        # Page

        Math: {math}`x^2`.

        ```{code-cell} ipython3
        print(open("lib/value.txt").read().strip().upper())
        ```
    """))
    out = src / "_build" / "html"
    assert "FIRST-VALUE" in _build(src, out)
    (src / "lib" / "value.txt").write_text("second-value\n")
    page = _build(src, out)
    assert "SECOND-VALUE" in page and "FIRST-VALUE" not in page
    # MathJax is served from the site itself.
    assert (out / "_static" / "mathjax" / "es5" / "tex-chtml.js").is_file()
    assert (out / "favicon.ico").read_bytes()[:4] == b"\x00\x00\x01\x00"  # an ICO file
    assert 'src="_static/mathjax/es5/tex-chtml.js' in page


def test_mathjax_subset_copies_only_what_pages_load(tmp_path: Path):
    import mathjax

    from lipattn.sphinxext import MATHJAX_FILES, mathjax_subset

    source = Path(mathjax.__file__).parent / "static" / "mathjax"
    out = mathjax_subset(source, tmp_path / "static")
    root = out / "mathjax"
    assert (root / "es5" / "tex-chtml.js").is_file()
    assert any((root / "es5" / "output" / "chtml" / "fonts" / "woff-v2").glob("*.woff"))
    assert not (root / "ts").exists() and not (root / "es5" / "sre").exists()
    assert not (root / "package-lock.json").exists() and not (root / "js").exists()
    size = sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
    assert size < 4e6, size
    assert len(MATHJAX_FILES) == len({m.split("/")[-1] for m in MATHJAX_FILES})
    # refilling is idempotent and drops stale files
    (root / "stale.js").write_text("x")
    mathjax_subset(source, tmp_path / "static")
    assert not (root / "stale.js").exists()


def test_pages_can_declare_their_own_language(tmp_path: Path):
    """lipattn_page_languages sets <html lang> on the pages it names only."""
    src = tmp_path / "book"
    src.mkdir()
    (src / "conf.py").write_text(textwrap.dedent("""
        extensions = ["myst_nb", "lipattn.sphinxext"]
        lipattn_watch = []
        exclude_patterns = ["_build"]
        lipattn_page_languages = {"page": "zh-Hans"}
    """))
    (src / "index.rst").write_text("Index\n=====\n\n.. toctree::\n\n   page\n")
    (src / "page.rst").write_text("页面\n====\n\n谱范数。\n")
    out = src / "_build" / "html"
    page = _build(src, out)
    assert '<html lang="zh-Hans"' in page
    index = (out / "index.html").read_text()
    assert '<html lang="en"' in index


def test_inputs_hash_rejects_a_string_and_missing_paths(tmp_path: Path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "a.py").write_text("x = 1\n")
    with pytest.raises(TypeError, match="^watch must be a list"):
        inputs_hash(tmp_path, "lib")  # would hash the letters 'l', 'i', 'b'
    with pytest.raises(ValueError, match=r"^watch\[1\] must exist"):
        inputs_hash(tmp_path, ["lib", "requirements.txt"])
    with pytest.raises(ValueError, match="^root must be an existing directory"):
        inputs_hash(tmp_path / "nope", ["lib"])
    assert inputs_hash(str(tmp_path), ["lib"]) == inputs_hash(tmp_path, ["lib"])
