"""lipattn/book/bytelm.py: a short retrain on this machine learns in the shipped run's
direction, and writes Hugging Face GPT-2 checkpoints that load back to the same model."""

import json

import numpy as np
import pytest

from lipattn.book import bytelm
from lipattn.models import load
from lipattn.models.checkpoint import read_header

GPT2_NAMES = {"transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight",
              "transformer.ln_f.bias"} | {
    f"transformer.h.{i}.{m}.{p}" for i in range(2)
    for m in ("ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj")
    for p in ("weight", "bias")}


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    """2 layers, d = 32, context 32, 240 steps of the shipped recipe (warm-up, cosine,
    weight decay, clipping): a few seconds."""
    tmp = tmp_path_factory.mktemp("bytelm")
    m, r = bytelm.train(["--layers", "2", "--d", "32", "--heads", "2", "--context", "32",
                         "--batch", "16", "--steps", "240", "--eval-every", "60",
                         "--eval-windows", "32", "--lr", "1e-2", "--warmup", "10",
                         "--decay", "cosine", "--weight-decay", "0.1", "--clip", "1.0",
                         "--checkpoint-every", "120", "--checkpoint-dir", str(tmp),
                         "--out", str(tmp / "final")])
    return tmp, m, r


def test_short_retrain_falls_well_below_the_unigram_entropy(short_run):
    _, _, r = short_run
    steps, bits = zip(*r["heldout_curve"], strict=True)
    assert steps == (0, 60, 120, 180, 240)
    assert bits[0] > 7.5                         # about 8 bits/byte at initialisation
    assert bits[-1] < 0.9 * r["unigram_bits"]    # uses context: below the unigram entropy
    assert bits[-1] < min(bits[:-1])
    assert len(r["train_bits"]) == len(r["lr"]) == len(r["grad_norm"]) == 240
    assert r["lr"][9] == 1e-2 and r["lr"][-1] == pytest.approx(1e-3)   # peak, then floor
    assert r["s_per_step"] > 0 and r["tokens_per_s"] == pytest.approx(16 * 32 / r["s_per_step"])


def test_checkpoints_are_gpt2_layout_and_load_to_the_same_logits(short_run):
    tmp, m, r = short_run
    assert sorted(p.name for p in tmp.glob("step-*")) == ["step-000000", "step-000120",
                                                          "step-000240"]
    for d in (tmp / "final", tmp / "step-000120"):
        assert set(read_header(d / "model.safetensors")[0]) - {"__metadata__"} == GPT2_NAMES
        cfg = json.loads((d / "config.json").read_text())
        assert (cfg["model_type"], cfg["vocab_size"], cfg["n_positions"], cfg["n_layer"]) == \
            ("gpt2", 256, 32, 2)
    assert json.loads((tmp / "final" / "training.json").read_text()) == json.loads(
        json.dumps(r))
    _, heldout = bytelm.stdlib_corpus()
    assert (tmp / "final" / "heldout.txt").read_bytes() == heldout[:32768]
    tokens = bytelm.heldout_windows(heldout, 32, 4)[:, :-1]
    back = load(tmp / "final", dtype=np.float32)

    def lm(g):
        wte, wpe = (np.asarray(a, dtype=np.float32) for a in (g.wte, g.wpe))
        return bytelm.CausalLM(wte, wpe, bytelm.Sequential(list(g.blocks) + [g.final]))

    ours = lm(m).forward(tokens)[0]
    # the decoder's own path (float64 softmax): embed, blocks and final norm, read-out
    wte = np.asarray(back.wte, dtype=np.float32)
    for i in range(len(tokens)):
        H = back.forward(back.embed(tokens[i]), final_norm=True)
        np.testing.assert_allclose(H @ wte.T, ours[i], rtol=1e-5, atol=1e-5)
    for b in back.blocks:                        # the training's float32 softmax: bit for bit
        b.attn.keep_float32 = True
    assert np.array_equal(lm(back).forward(tokens)[0], ours)
    w = bytelm.heldout_windows(heldout, 32, 32)
    assert bytelm.heldout_bits(lm(back), w) == r["heldout_curve"][-1][1]


def test_the_shipped_checkpoint_reproduces_its_heldout_number():
    """lib/lipattn/book/data/bytelm-stdlib loads with lipattn.models.load and, on the run's
    own evaluation windows, gives the held-out bits/byte that training.json records (up
    to the BLAS kernel's float32 rounding), below 0.7 x the unigram entropy."""
    from importlib.resources import files

    d = files("lipattn.book") / "data" / "bytelm-stdlib"
    r = json.loads((d / "training.json").read_text())
    a = r["args"]
    assert set(read_header(d / "model.safetensors")[0]) - {"__metadata__"} >= {
        "transformer.wte.weight", "transformer.h.3.attn.c_attn.weight"}
    m = load(d, dtype=np.float32)
    for b in m.blocks:
        b.attn.keep_float32 = True
    wte, wpe = (np.asarray(x, dtype=np.float32) for x in (m.wte, m.wpe))
    lm = bytelm.CausalLM(wte, wpe, bytelm.Sequential(list(m.blocks) + [m.final]))
    _, heldout = bytelm.stdlib_corpus()
    assert (d / "heldout.txt").read_bytes() == heldout[:32768]
    w = bytelm.heldout_windows(heldout, int(a["context"]), int(a["eval_windows"]))
    bits = bytelm.heldout_bits(lm, w)
    assert bits == pytest.approx(r["heldout_curve"][-1][1], abs=1e-4)
    assert bits < 0.7 * r["unigram_bits"]
