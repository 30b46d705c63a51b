import json

import numpy as np

from lipattn.layers import CausalLM, Sequential
from lipattn.models import GPT2, load, random_state_dict
from lipattn.models.checkpoint import read_header


def test_gpt2_save_pretrained_round_trip(tmp_path):
    sd = random_state_dict("gpt2", 2, 16, 4, vocab=256, n_pos=12, std=0.2, norm_std=0.3,
                           bias_std=0.1, seed=3)
    m = GPT2.from_state_dict({k: v.astype(np.float32) for k, v in sd.items()}, n_head=4,
                             dtype=np.float32)
    m.save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert (cfg["vocab_size"], cfg["n_positions"], cfg["n_embd"], cfg["n_layer"],
            cfg["n_head"], cfg["tie_word_embeddings"]) == (256, 12, 16, 2, 4, True)
    header, _ = read_header(tmp_path / "model.safetensors")
    assert set(header) == {"transformer." + k for k in sd}  # HF names, no lm_head (tied)
    assert header["transformer.h.0.attn.c_attn.weight"]["shape"] == [16, 48]  # Conv1D
    back = load(tmp_path, dtype=np.float32)
    for k, v in sd.items():  # every tensor is written exactly (float32)
        assert np.array_equal(np.asarray(back.state_dict()["transformer." + k]),
                              v.astype(np.float32)), k
    lm = CausalLM(m.wte, m.wpe, Sequential(list(m.blocks) + [m.final]))
    t = np.random.default_rng(0).integers(0, 256, 12)
    ours = lm.forward(t)[0]
    H = back.forward(back.embed(t), final_norm=True)
    assert np.array_equal(H @ np.asarray(back.wte, dtype=np.float32).T, ours)
    back64 = load(tmp_path)  # float64 computation of the same weights
    H64 = back64.forward(back64.embed(t), final_norm=True) @ np.asarray(back64.wte).T
    assert np.allclose(H64, ours, rtol=0, atol=1e-5 * np.abs(H64).max())
