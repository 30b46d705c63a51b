r"""GPT-2 (Hugging Face ``GPT2Model``) from its state dict, in numpy.

Block: :math:`x' = x + \mathrm{Attn}(\mathrm{LN}_1(x))`,
:math:`x'' = x' + \mathrm{MLP}(\mathrm{LN}_2(x'))`; ``ln_f`` after the last
block. Attention is causal, scaled by :math:`1/\sqrt{d_h}` with
:math:`d_h = d/\text{n\_head}`, with biases on Q, K, V and the output; the MLP
is :math:`\mathrm{gelu\_new}(x W_{fc} + b_{fc}) W_{proj} + b_{proj}` (the tanh
approximation). Weights are in Conv1D layout, :math:`y = x W + b`.

Not modelled: dropout (inference), ``scale_attn_by_inverse_layer_idx`` and
``reorder_and_upcast_attn`` (both off in GPT-2's configurations; a config.json
that sets them is refused by :func:`lipattn.models.load`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from .._validate import as_positive_float
from ._state import StateDict, check_dtype, check_heads
from .blocks import Layout, build_block, build_final
from .checkpoint import write_safetensors
from .decoder import Decoder

__all__ = ["GPT2"]

_IGNORE = (r"lm_head\.weight", r"h\.\d+\.attn\.bias", r"h\.\d+\.attn\.masked_bias")


class GPT2(Decoder):
    """GPT-2: build it with :meth:`from_state_dict`.

    Attributes (besides :class:`~lipattn.models.decoder.Decoder`'s)
    ------------------------------------------------------------------
    wte : ndarray or LazyTensor, shape (vocab, d)
    wpe : ndarray or LazyTensor, shape (n_positions, d)
        (:func:`lipattn.models.load` keeps them on disk and reads the rows asked for.)
    model_type : str
    """

    @classmethod
    def from_state_dict(cls, state: Any, *, n_head: int, eps: float = 1e-5,
                        dtype=np.float64) -> GPT2:
        """GPT-2 from the parameters of Hugging Face's ``GPT2Model.state_dict()``.

        Parameters
        ----------
        state : mapping of str to array_like
            Hugging Face names (``wte.weight``, ``wpe.weight``,
            ``h.{i}.ln_1.weight`` ...); a leading ``transformer.`` is stripped
            (``GPT2LMHeadModel``); ``lm_head.weight`` and the buffers
            ``h.{i}.attn.bias``, ``h.{i}.attn.masked_bias`` are ignored. Conv1D
            layout: ``attn.c_attn.weight`` (d, 3d) holds the Q | K | V column
            blocks, ``attn.c_proj.weight`` (d, d), ``mlp.c_fc.weight`` (d, d_ff),
            ``mlp.c_proj.weight`` (d_ff, d). Any other key is an error.
        n_head : int
            Number of heads; must divide d.
        eps : float, default 1e-5
            LayerNorm epsilon (``layer_norm_epsilon``).
        dtype : numpy.float64 (default) or numpy.float32
            Storage and computation dtype: float32 weights are computed in
            float64 by default ("Precision" in :mod:`lipattn.models.decoder`).

        Raises
        ------
        TypeError, ValueError
            A missing parameter (named), a wrong shape or a non-finite entry
            (named), an unknown key, n_head not dividing d.
        """
        dtype = check_dtype(dtype)
        eps = as_positive_float(eps, "eps")
        sd = StateDict(state, prefix="transformer.", ignore=_IGNORE, dtype=dtype)
        vocab_d = sd.shape_of("wte.weight")
        if len(vocab_d) != 2:
            raise ValueError(f"state['wte.weight'] must have shape (vocab, d); got {vocab_d}")
        d = vocab_d[1]
        n_head = check_heads(n_head, d)
        wte = sd.get("wte.weight", vocab_d)
        n_pos = sd.shape_of("wpe.weight")[0]
        wpe = sd.get("wpe.weight", (n_pos, d))
        L = sd.count_layers(r"h\.(\d+)\.")
        lay = Layout("gpt2", "gpt2", d, L, n_head, n_head, d // n_head,
                     sd.shape_of("h.0.mlp.c_fc.weight")[-1], vocab_d[0], eps, "gelu_new",
                     n_positions=n_pos)
        blocks = [build_block(lay, sd.get, i) for i in range(L)]
        final = build_final(lay, sd.get)
        sd.finish()
        model = cls(blocks, final, n_head=n_head, n_kv_head=n_head, dtype=dtype)
        model.wte, model.wpe, model.eps, model.model_type = wte, wpe, eps, "gpt2"
        return model

    def embed(self, tokens: Any) -> np.ndarray:
        """``wte[tokens] + wpe[0..N-1]``, shape (N, d), for token ids of shape (N,)."""
        t = _check_tokens(tokens, self.wte.shape[0])
        if t.size > self.wpe.shape[0]:
            raise ValueError(f"tokens must have at most n_positions = {self.wpe.shape[0]} "
                             f"entries; got {t.size}")
        return self.wte[t] + self.wpe[: t.size]


    def state_dict(self) -> dict[str, np.ndarray]:
        """The parameters under Hugging Face's ``GPT2LMHeadModel`` names (Conv1D layout).

        ``transformer.wte.weight``, ``transformer.wpe.weight``, per block
        ``transformer.h.{i}.ln_1.*``, ``attn.c_attn.*`` (Q | K | V columns),
        ``attn.c_proj.*``, ``ln_2.*``, ``mlp.c_fc.*``, ``mlp.c_proj.*``, and
        ``transformer.ln_f.*``; ``lm_head.weight`` is tied to ``wte`` and, as
        ``save_pretrained`` does, not stored. The inverse of :meth:`from_state_dict`.
        """
        sd = {"transformer.wte.weight": np.asarray(self.wte),
              "transformer.wpe.weight": np.asarray(self.wpe)}
        for i, blk in enumerate(self.blocks):
            a, m, p = blk.attn, blk.mlp, f"transformer.h.{i}."
            sd.update({
                p + "ln_1.weight": blk.norm_1.g, p + "ln_1.bias": blk.norm_1.b,
                p + "attn.c_attn.weight": np.concatenate([a.W_Q, a.W_K, a.W_V], axis=1),
                p + "attn.c_attn.bias": np.concatenate([a.b_Q, a.b_K, a.b_V]),
                p + "attn.c_proj.weight": a.W_O, p + "attn.c_proj.bias": a.b_O,
                p + "ln_2.weight": blk.norm_2.g, p + "ln_2.bias": blk.norm_2.b,
                p + "mlp.c_fc.weight": m.W_1, p + "mlp.c_fc.bias": m.b_1,
                p + "mlp.c_proj.weight": m.W_2, p + "mlp.c_proj.bias": m.b_2})
        sd["transformer.ln_f.weight"], sd["transformer.ln_f.bias"] = self.final.g, self.final.b
        return sd

    def save_pretrained(self, path: str | os.PathLike) -> Path:
        """Write a Hugging Face ``GPT2LMHeadModel`` checkpoint directory, in float32.

        ``config.json`` (the keys ``GPT2Config`` writes, ``tie_word_embeddings``
        true, ``n_positions`` = the rows of ``wpe``) and ``model.safetensors``
        (:meth:`state_dict`). Read back by :func:`lipattn.models.load` and by
        ``transformers.AutoModelForCausalLM.from_pretrained``. Returns the directory.
        """
        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        L = len(self.blocks)
        config = {
            "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
            "attn_pdrop": 0.1, "bos_token_id": None, "dtype": "float32", "embd_pdrop": 0.1,
            "eos_token_id": None, "initializer_range": 0.02,
            "layer_norm_epsilon": float(self.eps), "model_type": "gpt2",
            "n_embd": int(self.d_model), "n_head": int(self.n_head), "n_inner": None,
            "n_layer": L, "n_positions": int(self.wpe.shape[0]),
            "reorder_and_upcast_attn": False, "resid_pdrop": 0.1,
            "scale_attn_by_inverse_layer_idx": False, "scale_attn_weights": True,
            "summary_activation": None, "summary_first_dropout": 0.1,
            "summary_proj_to_labels": True, "summary_type": "cls_index",
            "summary_use_proj": True, "tie_word_embeddings": True, "use_cache": True,
            "vocab_size": int(self.wte.shape[0])}
        if L and self.blocks[0].mlp.W_1.shape[1] != 4 * self.d_model:
            config["n_inner"] = int(self.blocks[0].mlp.W_1.shape[1])
        (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        write_safetensors(out / "model.safetensors", self.state_dict(),
                          metadata={"format": "pt"})
        return out


def _check_tokens(tokens: Any, vocab: int) -> np.ndarray:
    if isinstance(tokens, (str, bytes)):
        raise TypeError("tokens must be a 1-D array of integer token ids; got str")
    t = np.asarray(tokens)
    if t.dtype == bool or not np.issubdtype(t.dtype, np.integer):
        raise TypeError(f"tokens must be a 1-D array of integer token ids; got dtype {t.dtype}")
    if t.ndim != 1 or t.size == 0:
        raise ValueError(f"tokens must be a non-empty 1-D array of token ids; got shape {t.shape}")
    if t.min() < 0 or t.max() >= vocab:
        raise ValueError(f"tokens must be ids in [0, vocab) = [0, {vocab}); got range "
                         f"[{t.min()}, {t.max()}]")
    return t
