"""Every chapter executes from a fresh kernel without error or warning; none
is stored with outputs."""

from __future__ import annotations

import math
import re
import subprocess

import jupytext
import nbformat
import pytest
from conftest import CHAPTERS, ROOT
from nbclient import NotebookClient

NOTEBOOKS = [p for p in CHAPTERS if "```{code-cell}" in p.read_text()]


def test_the_chapters_are_found():
    expected = {"intro", "01_softmax_jacobian", "02_scaling_saturation", "03_rank_collapse",
                "05_spectral_normalisation", "06_attention_lipschitz", "07_real_transformers",
                "08_trained_language_model", "audit", "review", "review_zh"}
    assert expected <= {p.stem for p in NOTEBOOKS}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_chapter_executes_cleanly(path):
    nb = jupytext.read(path)
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            assert out.output_type != "error", out
            if out.output_type == "stream":
                assert out.name != "stderr", f"stderr in {path.name}: {out.text[:500]}"
    numbers = _check_glued_numbers(nb, path.name)
    markdown = [o for c in nb.cells for o in c.get("outputs", [])
                if any(k.endswith("text/markdown") for k in o.get("data", {}))]
    assert numbers or markdown or "glue(" not in path.read_text(), "no glued number was found"


_NUMBER = re.compile(r"^(?:np\.float64\()?([-+0-9.eEinfa]+)\)?$")


def glued_numbers(nb) -> dict[str, float]:
    """The numbers a notebook glues (myst-nb ``glue``), by name."""
    out = {}
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            scrap = o.get("metadata", {}).get("scrapbook", {})
            name = scrap.get("name")
            text = o.get("data", {}).get(scrap.get("mime_prefix", "") + "text/plain", "")
            match = _NUMBER.match(text.strip()) if name else None
            if match:
                out[name] = float(match.group(1))
    return out


def _check_glued_numbers(nb, filename: str) -> dict[str, float]:
    """Every glued number is finite, and one named "..._gap..." is positive:
    a gap printed as 0 beside "never reached" contradicts the text."""
    for cell in nb.cells:  # myst-nb formats Python numbers, not numpy scalars
        for o in cell.get("outputs", []):
            for key, text in o.get("data", {}).items():
                if key.startswith("application/papermill.record/") and key.endswith("plain"):
                    assert not str(text).startswith("np."), (
                        f"{filename}: glue a Python number, not {text}")
    numbers = glued_numbers(nb)
    for name, value in numbers.items():
        assert math.isfinite(value), f"{filename}: glued {name} = {value}"
        if "gap" in name:
            assert value > 0, f"{filename}: glued gap {name} = {value} is not positive"
    return numbers


def test_glue_check_catches_a_zero_gap():
    """Negative control: the check fails on a gap that rounds to zero."""
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("")
    prefix = "application/papermill.record/"  # what myst_nb.glue writes
    cell.outputs = [nbformat.v4.new_output(
        "display_data", data={prefix + "text/plain": "np.float64(0.0)"},
        metadata={"scrapbook": {"name": "tie_40_gap", "mime_prefix": prefix}})]
    nb.cells.append(cell)
    assert glued_numbers(nb) == {"tie_40_gap": 0.0}
    with pytest.raises(AssertionError, match="not np.float64"):
        _check_glued_numbers(nb, "x.md")
    cell.outputs[0]["data"][prefix + "text/plain"] = "0.0"
    with pytest.raises(AssertionError, match="tie_40_gap"):
        _check_glued_numbers(nb, "x.md")


def test_no_notebook_outputs_in_git():
    files = subprocess.run(["git", "ls-files", "*.ipynb", "**/*.ipynb"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    for f in files:
        nb = nbformat.read(ROOT / f, as_version=4)
        assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), f


def test_chapters_are_myst_notebooks_with_a_jupytext_header():
    for path in NOTEBOOKS:
        head = path.read_text().split("\n", 12)
        assert head[0] == "---" and any("format_name: myst" in h for h in head), path.name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_code_cells_fit_the_page(path):
    """Code lines of at most 75 characters fit the site's code blocks without
    a scroll bar; cells stay short (the library does the work)."""
    nb = jupytext.read(path)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        lines = cell.source.splitlines()
        long = [line for line in lines if len(line) > 75]
        assert not long, f"{path.name}: lines over 75 characters: {long}"
        assert len(lines) <= 20, f"{path.name}: a {len(lines)}-line cell:\n{cell.source}"
