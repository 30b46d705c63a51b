"""Tests of ``python -m lipattn.models report`` (:mod:`lipattn.models.report`).

The command runs in a subprocess on tiny random checkpoints written in Hugging
Face's layout by ``test_models_load`` (config.json + safetensors, float32 or
bfloat16) and read by :func:`lipattn.models.load`; every number of its table
(and of ``--json``) is checked against the model API computed here
(:meth:`~lipattn.models.Decoder.local_lipschitz`, ``sublayer_lipschitz``,
``head_lipschitz``); the figure, the progress bar, ``--text`` through a
``tokenizers`` file written here, and the errors (a refusal of ``load``
included) are checked too.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import numpy as np
import pytest
from test_models import gpt2_state
from test_models_load import build

from lipattn.models import GPT2, load
from lipattn.models.report import format_report, layer_report


def _checkpoint(tmp_path, family: str, code: str = "F32", **over):
    _, path, _ = build(tmp_path, family, code, **over)
    return path, load(path)


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lipattn.models", *args], capture_output=True,
                          text=True, timeout=300)


def _numbers(line: str) -> list[float]:
    return [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?(?:e[+-]\d+)?", line)]


@pytest.mark.parametrize("family,code", [("gpt2", "F32"), ("llama", "BF16"),
                                         ("gemma2", "BF16")])
def test_report_table_matches_the_api(tmp_path, family, code):
    # gemma2 with a window of 3 on layer 0 (N = 7 > 3): the masks reach the command too
    over = {"sliding_window": 3} if family == "gemma2" else {}
    path, model = _checkpoint(tmp_path, family, code, **over)
    tokens = [3, 1, 4, 1, 5, 9, 2]
    out_json, out_png = tmp_path / "r.json", tmp_path / "r.png"
    res = _run("report", str(path), "--tokens", ",".join(map(str, tokens)), "--tol", "1e-8",
               "--json", str(out_json), "--plot", str(out_png))
    assert res.returncode == 0, res.stderr
    H = model.embed(tokens)
    kw = dict(tol=1e-8)
    rows = [ln for ln in res.stdout.splitlines() if re.match(r"^\s+\d+\s+\d", ln)]
    assert len(rows) == model.n_layer
    stream, blocks = H, []
    for layer, line in enumerate(rows):
        nums = _numbers(line)
        heads = model.head_lipschitz(stream, layer, **kw)
        want = [layer, model.local_lipschitz(stream, start=layer, stop=layer + 1, **kw),
                model.sublayer_lipschitz(stream, layer, branch="attention", **kw),
                model.sublayer_lipschitz(stream, layer, branch="mlp", **kw),
                heads.max(), heads.argmax()]
        np.testing.assert_allclose(nums, want, rtol=1e-5)
        blocks.append(want[1])
        stream = model.forward(stream, start=layer, stop=layer + 1)
    text = res.stdout
    stack = _numbers(re.search(r"without the final norm\s+(\S+)", text).group(1))[0]
    final = _numbers(re.search(r"stack with the final norm\s+(\S+)", text).group(1))[0]
    prod = _numbers(re.search(r"product of the block constants\s+(\S+)", text).group(1))[0]
    assert stack == pytest.approx(model.local_lipschitz(H, **kw), rel=1e-5)
    assert final == pytest.approx(model.local_lipschitz(H, final_norm=True, **kw), rel=1e-5)
    assert prod == pytest.approx(math.prod(blocks), rel=1e-5)
    assert stack <= prod * (1 + 1e-6)                       # submultiplicative
    assert repr(model) in text
    rep = json.loads(out_json.read_text())
    assert rep["tokens"] == tokens and rep["n_tokens"] == 7
    assert rep["block"] == pytest.approx(blocks, rel=1e-9)
    assert rep["stack_final_norm"] == pytest.approx(final, rel=1e-5)
    assert rep["model"] == repr(model) and f"model_type='{family}'" in rep["model"]
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_text_is_tokenized_with_the_checkpoints_tokenizer(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    path, model = _checkpoint(tmp_path, "gpt2")
    vocab = {w: i for i, w in enumerate("[UNK] the cat sat on a mat".split())}   # ids < 20
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.save(str(path / "tokenizer.json"))
    a = _run("report", str(path), "--text", "the cat sat on a mat", "--no-progress",
             "--json", str(tmp_path / "a.json"))
    b = _run("report", str(path), "--tokens", "1,2,3,4,5,6", "--json", str(tmp_path / "b.json"))
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    ra, rb = (json.loads((tmp_path / f"{k}.json").read_text()) for k in "ab")
    assert ra["tokens"] == [1, 2, 3, 4, 5, 6] and ra["block"] == rb["block"]


def test_errors_are_named_without_tracebacks(tmp_path):
    path, _ = _checkpoint(tmp_path, "gpt2")
    res = _run("report", str(path), "--text", "hello")
    assert res.returncode == 2 and "tokenizer.json" in res.stderr
    res = _run("report", str(path), "--tokens", "1,x")
    assert res.returncode == 2 and "--tokens must be comma-separated integer ids" in res.stderr
    res = _run("report", str(path), "--tokens", "1,99")
    assert res.returncode == 1 and "tokens must be ids in [0, vocab) = [0, 20)" in res.stderr
    assert "Traceback" not in res.stderr
    res = _run("report", str(path))
    assert res.returncode == 2 and "--tokens" in res.stderr
    res = _run("report", str(tmp_path / "missing"), "--tokens", "1")
    assert res.returncode == 1 and "error:" in res.stderr and "Traceback" not in res.stderr
    refused = build(tmp_path / "r", "gpt2", scale_attn_by_inverse_layer_idx=True)[1]
    res = _run("report", str(refused), "--tokens", "1,2")
    assert res.returncode == 1 and "NotImplementedError" in res.stderr
    assert "scale_attn_by_inverse_layer_idx" in res.stderr and "Traceback" not in res.stderr


def test_layer_report_progress_bar_and_format(capsys):
    st = gpt2_state(L=2)
    model = GPT2.from_state_dict(st, n_head=2)
    H = model.embed([1, 2, 3])
    rep = layer_report(model, H, progress=True)
    err = capsys.readouterr().err
    assert "exact constants" in err and "/10 " in err       # 4 per layer + 2 stacks
    assert rep["block_product"] == pytest.approx(rep["block"][0] * rep["block"][1])
    table = format_report(rep, "title")
    assert table.splitlines()[0] == "title" and "product of the block constants" in table
    quiet = layer_report(model, H, progress=False)
    assert capsys.readouterr().err == "" and quiet == rep


def test_float32_report_agrees_with_float64(tmp_path):
    path, _ = _checkpoint(tmp_path, "llama", "BF16")
    runs = {}
    for dt in ("float64", "float32"):
        res = _run("report", str(path), "--tokens", "1,2,3,4,5", "--dtype", dt,
                   "--json", str(tmp_path / f"{dt}.json"))
        assert res.returncode == 0, res.stderr
        runs[dt] = json.loads((tmp_path / f"{dt}.json").read_text())
    assert "dtype=float32" in runs["float32"]["model"]
    for key in ("block", "attention", "mlp", "top_head"):
        np.testing.assert_allclose(runs["float32"][key], runs["float64"][key], rtol=1e-4)
    assert runs["float32"]["stack"] == pytest.approx(runs["float64"]["stack"], rel=1e-4)
