"""Tests of ``python -m lipattn.models report`` (:mod:`lipattn.models.report`).

The command runs in a subprocess on tiny random models; every number of its
table (and of ``--json``) is checked against the model API computed here
(:meth:`~lipattn.models.Decoder.local_lipschitz`, ``sublayer_lipschitz``,
``head_lipschitz``); the figure, the progress bar, ``--text`` through a
``tokenizers`` file written here, and the errors are checked too.

The checkpoint is read through the command's one boundary,
``lipattn.models.load(path, dtype=...)``. Until that reader is present the
subprocess installs a stand-in for it (an ``.npz`` state dict plus its head
count, read with ``from_state_dict``): the command is tested, not the reader.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from test_models import gpt2_state, llama_state

from lipattn.models import GPT2, Llama
from lipattn.models.report import format_report, layer_report

STANDIN = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    import numpy as np
    import lipattn.models as models

    def load(path, *, dtype=np.float64):
        meta = json.loads((Path(path) / "standin.json").read_text())
        state = dict(np.load(Path(path) / "state.npz"))
        cls = {"gpt2": models.GPT2, "llama": models.Llama}[meta.pop("family")]
        return cls.from_state_dict(state, dtype=dtype, **meta)

    models.load = load
    from lipattn.models.report import main
    sys.exit(main(sys.argv[1:]))
""")


def _checkpoint(tmp_path: Path, family: str) -> tuple[Path, object]:
    if family == "gpt2":
        st, meta = gpt2_state(L=3), {"n_head": 2}
        model = GPT2.from_state_dict(st, **meta)
    else:
        st, meta = llama_state(L=2), {"n_head": 4, "n_kv_head": 2}
        model = Llama.from_state_dict(st, **meta)
    path = tmp_path / family
    path.mkdir()
    np.savez(path / "state.npz", **st)
    (path / "standin.json").write_text(json.dumps({"family": family} | meta))
    return path, model


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", STANDIN, *args], capture_output=True,
                          text=True, timeout=300)


def _numbers(line: str) -> list[float]:
    return [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?(?:e[+-]\d+)?", line)]


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_report_table_matches_the_api(tmp_path, family):
    path, model = _checkpoint(tmp_path, family)
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
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_text_is_tokenized_with_the_checkpoints_tokenizer(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    path, model = _checkpoint(tmp_path, "gpt2")
    vocab = {w: i for i, w in enumerate("[UNK] the cat sat on a mat".split())}
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
    assert res.returncode == 1 and "tokens must be ids in [0, vocab) = [0, 11)" in res.stderr
    assert "Traceback" not in res.stderr
    res = _run("report", str(path))
    assert res.returncode == 2 and "--tokens" in res.stderr
    res = _run("report", str(tmp_path / "missing"), "--tokens", "1")
    assert res.returncode == 1 and "error:" in res.stderr and "Traceback" not in res.stderr


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
