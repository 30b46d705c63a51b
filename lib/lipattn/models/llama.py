r"""Llama (Hugging Face ``LlamaModel``) from its state dict, in numpy; the class of
every RMSNorm / gated-MLP family :func:`lipattn.models.load` reads.

Block: :math:`x' = x + \mathrm{Attn}(\mathrm{RMS}_1(x))`,
:math:`x'' = x' + \mathrm{MLP}(\mathrm{RMS}_2(x'))`; ``norm`` after the last
block. Attention is causal with grouped-query heads (query head i uses
key/value head ``i // (n_head / n_kv_head)``, as ``repeat_kv``), Hugging
Face's default RoPE on queries and keys (``rotate_half``,
``inv_freq = theta^(-2i/head_dim)``, positions 0..N-1; see
:mod:`lipattn.layers.rope` for the float32 tables), scaled by
:math:`1/\sqrt{d_h}`; the MLP is
:math:`(\mathrm{silu}(x W_g^\top) \odot x W_u^\top) W_d^\top`. Projections
are in ``nn.Linear`` layout (out, in): :math:`y = x W^\top`.

Hugging Face's ``LlamaRMSNorm`` normalises in float32 even in a float64
model; here everything is float64, so forward passes agree with a float64
Hugging Face model to about 1e-7, not to float64 rounding (to about 1e-15
once its norms and RoPE tables are kept in float64).

:meth:`Llama.from_state_dict` builds the plain Llama layout from the numbers
given (no RoPE scaling, ``head_dim = d / n_head``, no MLP biases); attention
biases are read when present. :func:`lipattn.models.load` reads the rest of
the family from ``config.json`` -- llama3 RoPE scaling, ``head_dim``, and the
Mistral, Qwen 2/3, Gemma 1/2 and Phi-3 options (:mod:`lipattn.models.families`)
-- and returns a ``Llama`` too, with ``model_type`` set.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validate import as_positive_float
from ._state import StateDict, check_dtype, check_heads
from .blocks import Layout, build_block, build_final
from .decoder import Decoder
from .gpt2 import _check_tokens

__all__ = ["Llama"]

_IGNORE = (r"lm_head\.weight", r"(layers\.\d+\.self_attn\.)?rotary_emb\.inv_freq")


class Llama(Decoder):
    """Llama: build it with :meth:`from_state_dict`.

    Attributes (besides :class:`~lipattn.models.decoder.Decoder`'s)
    ------------------------------------------------------------------
    embed_tokens : ndarray or LazyTensor, shape (vocab, d)
        (:func:`lipattn.models.load` keeps it on disk and reads the rows asked for.)
    rope_theta : float
    embed_scale : float or None
        Gemma's :math:`\\sqrt d` (None for the other families).
    model_type : str
    """

    @classmethod
    def from_state_dict(cls, state: Any, *, n_head: int, n_kv_head: int,
                        rope_theta: float = 10000.0, eps: float = 1e-6,
                        dtype=np.float64) -> Llama:
        """Llama from the parameters of Hugging Face's ``LlamaModel.state_dict()``.

        Parameters
        ----------
        state : mapping of str to array_like
            Hugging Face names: ``embed_tokens.weight``;
            ``layers.{i}.input_layernorm.weight``;
            ``layers.{i}.self_attn.{q,k,v,o}_proj.weight``;
            ``layers.{i}.post_attention_layernorm.weight``;
            ``layers.{i}.mlp.{gate,up,down}_proj.weight``; ``norm.weight``. A
            leading ``model.`` is stripped (``LlamaForCausalLM``);
            ``lm_head.weight`` and the old buffer ``rotary_emb.inv_freq`` are
            ignored; ``self_attn.{q,k,v,o}_proj.bias`` are used when present.
            Any other key is an error. ``nn.Linear`` layout (out, in).
        n_head : int
            Query heads; must divide d (head_dim = d / n_head, even).
        n_kv_head : int
            Key/value heads; must divide n_head.
        rope_theta : float, default 10000.0
        eps : float, default 1e-6
            RMSNorm epsilon (``rms_norm_eps``).
        dtype : numpy.float64 (default) or numpy.float32
            Storage and computation dtype: float32 weights are computed in
            float64 by default ("Precision" in :mod:`lipattn.models.decoder`).

        Raises
        ------
        TypeError, ValueError
            A missing parameter (named), a wrong shape or a non-finite entry
            (named), an unknown key, n_head not dividing d, n_kv_head not
            dividing n_head, an odd head_dim.
        """
        dtype = check_dtype(dtype)
        eps = as_positive_float(eps, "eps")
        rope_theta = as_positive_float(rope_theta, "rope_theta")
        sd = StateDict(state, prefix="model.", ignore=_IGNORE, dtype=dtype)
        vocab_d = sd.shape_of("embed_tokens.weight")
        if len(vocab_d) != 2:
            raise ValueError("state['embed_tokens.weight'] must have shape (vocab, d); "
                             f"got {vocab_d}")
        d = vocab_d[1]
        n_head = check_heads(n_head, d)
        n_kv_head = check_heads(n_kv_head, n_head, "n_kv_head")
        dh = d // n_head
        if dh % 2:
            raise ValueError(f"head_dim = d / n_head = {dh} must be even for RoPE; "
                             f"got d = {d}, n_head = {n_head}")
        emb = sd.get("embed_tokens.weight", vocab_d)
        L = sd.count_layers(r"layers\.(\d+)\.")
        lay = Layout("llama", "llama", d, L, n_head, n_kv_head, dh,
                     sd.shape_of("layers.0.mlp.gate_proj.weight")[0], vocab_d[0], eps, "silu",
                     rope_theta=rope_theta)
        blocks = [build_block(lay, sd.get, i, has=sd.__contains__) for i in range(L)]
        final = build_final(lay, sd.get)
        sd.finish()
        model = cls(blocks, final, n_head=n_head, n_kv_head=n_kv_head, dtype=dtype)
        model.embed_tokens, model.rope_theta, model.eps = emb, rope_theta, eps
        model.embed_scale, model.model_type = None, "llama"
        return model

    def embed(self, tokens: Any) -> np.ndarray:
        """``embed_tokens[tokens]``, shape (N, d), for token ids of shape (N,).

        Gemma's (``embed_scale`` not None) are multiplied by :math:`\\sqrt d`
        computed in the model's dtype, as Hugging Face computes it in the hidden
        states' dtype.
        """
        E = self.embed_tokens[_check_tokens(tokens, self.embed_tokens.shape[0])]
        scale = getattr(self, "embed_scale", None)
        return E if scale is None else E * scale
