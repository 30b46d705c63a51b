r"""The decoder families as configurations: one :class:`Layout` and one block builder.

A family is a :class:`Layout` (which norm, which activation, which fused
projections, which biases, QK-norm, logit scale and soft-cap, RoPE, post-norms,
sliding windows) read from its ``config.json`` by :mod:`lipattn.models.families`;
:func:`build_block` turns one layer's Hugging Face tensors into a
:class:`~lipattn.models.decoder.Block` from :mod:`lipattn.layers`, and
:func:`parameter_shapes` lists the tensors and shapes a layout needs, so a
checkpoint's names and shapes are checked before any weight is read.
:class:`LazyBlocks` builds blocks on demand (with a bounded cache), so a model
larger than memory still gives one block's constant.

Tensor names are those of Hugging Face's base models (the ``model.`` /
``transformer.`` prefix of ``*ForCausalLM`` stripped):

- ``"gpt2"``: ``h.{i}.ln_1``, ``attn.c_attn`` (Conv1D, Q | K | V columns),
  ``attn.c_proj``, ``ln_2``, ``mlp.c_fc``, ``mlp.c_proj``; ``wte``, ``wpe``, ``ln_f``;
- ``"llama"``: ``layers.{i}.input_layernorm``,
  ``self_attn.{q,k,v,o}_proj`` (or a fused ``self_attn.qkv_proj``: Q | K | V rows),
  ``self_attn.{q,k}_norm``, ``post_attention_layernorm`` (the MLP's pre-norm, or
  with post-norms the attention's post-norm, then ``pre_feedforward_layernorm`` and
  ``post_feedforward_layernorm``), ``mlp.{gate,up,down}_proj`` (or a fused
  ``mlp.gate_up_proj``: gate | up rows); ``embed_tokens``, ``norm``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..layers import MLP, GatedMLP, LayerNorm, MultiHeadAttention, RMSNorm
from .decoder import Block

__all__ = ["Layout", "build_block", "build_final", "parameter_shapes", "LazyBlocks"]


@dataclass(frozen=True)
class Layout:
    """Everything a block needs from a config (the table of one family).

    ``style`` is "gpt2" (LayerNorm, Conv1D, MLP) or "llama" (RMSNorm, nn.Linear,
    gated MLP). ``sliding_windows`` has one entry per layer (int or None).
    """

    model_type: str
    style: str
    d_model: int
    n_layer: int
    n_head: int
    n_kv_head: int
    head_dim: int
    d_ff: int
    vocab: int
    eps: float
    act: str
    n_positions: int | None = None
    norm_offset: float = 0.0
    biases: frozenset = frozenset()       # of "q", "k", "v", "o"
    fused_qkv: bool = False
    fused_gate_up: bool = False
    qk_norm: bool = False
    post_norms: bool = False
    scale: float | None = None
    softcap: float | None = None
    rope_theta: float | None = None
    rope_scaling: dict | None = None
    sliding_windows: tuple = ()
    embed_scale: bool = False
    extra: dict = field(default_factory=dict)


Get = Callable[[str, tuple], np.ndarray]


def _norm_names(lay: Layout) -> tuple[str, ...]:
    if lay.style == "gpt2":
        return ("ln_1", "ln_2")
    if lay.post_norms:
        return ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                "post_feedforward_layernorm")
    return ("input_layernorm", "post_attention_layernorm")


def parameter_shapes(lay: Layout) -> dict[str, tuple[int, ...]]:
    """Every tensor the layout reads, with its shape (Hugging Face names, prefix stripped)."""
    d, dh, L, f = lay.d_model, lay.head_dim, lay.n_layer, lay.d_ff
    dq, dkv = lay.n_head * dh, lay.n_kv_head * dh
    out: dict[str, tuple[int, ...]] = {}
    if lay.style == "gpt2":
        out["wte.weight"], out["wpe.weight"] = (lay.vocab, d), (lay.n_positions, d)
        for i in range(L):
            p = f"h.{i}."
            for k in _norm_names(lay):
                out[p + k + ".weight"] = out[p + k + ".bias"] = (d,)
            out[p + "attn.c_attn.weight"], out[p + "attn.c_attn.bias"] = (d, 3 * d), (3 * d,)
            out[p + "attn.c_proj.weight"], out[p + "attn.c_proj.bias"] = (d, d), (d,)
            out[p + "mlp.c_fc.weight"], out[p + "mlp.c_fc.bias"] = (d, f), (f,)
            out[p + "mlp.c_proj.weight"], out[p + "mlp.c_proj.bias"] = (f, d), (d,)
        out["ln_f.weight"] = out["ln_f.bias"] = (d,)
        return out
    out["embed_tokens.weight"] = (lay.vocab, d)
    for i in range(L):
        p, a = f"layers.{i}.", f"layers.{i}.self_attn."
        for k in _norm_names(lay):
            out[p + k + ".weight"] = (d,)
        if lay.fused_qkv:
            out[a + "qkv_proj.weight"] = (dq + 2 * dkv, d)
        else:
            out[a + "q_proj.weight"], out[a + "k_proj.weight"] = (dq, d), (dkv, d)
            out[a + "v_proj.weight"] = (dkv, d)
        for k, n in (("q", dq), ("k", dkv), ("v", dkv), ("o", d)):
            if k in lay.biases:
                out[a + f"{k}_proj.bias"] = (n,)
        out[a + "o_proj.weight"] = (d, dq)
        if lay.qk_norm:
            out[a + "q_norm.weight"] = out[a + "k_norm.weight"] = (dh,)
        if lay.fused_gate_up:
            out[p + "mlp.gate_up_proj.weight"] = (2 * f, d)
        else:
            out[p + "mlp.gate_proj.weight"] = out[p + "mlp.up_proj.weight"] = (f, d)
        out[p + "mlp.down_proj.weight"] = (d, f)
    out["norm.weight"] = (d,)
    return out


def _rms(lay: Layout, g: np.ndarray) -> RMSNorm:
    if lay.norm_offset:
        return RMSNorm(g, lay.eps, offset=lay.norm_offset)
    return RMSNorm(g, lay.eps)


def _window(lay: Layout, i: int) -> int | None:
    return lay.sliding_windows[i] if lay.sliding_windows else None


def build_block(lay: Layout, get: Get, i: int, has: Callable[[str], bool] | None = None) -> Block:
    """Block ``i`` of the layout, its tensors read with ``get(name, shape)``.

    ``has(name)``, if given, says which attention biases are present (a state
    dict's own choice, :meth:`Llama.from_state_dict`) instead of ``lay.biases``.
    """
    d, dh, f = lay.d_model, lay.head_dim, lay.d_ff
    dq, dkv = lay.n_head * dh, lay.n_kv_head * dh
    if lay.style == "gpt2":
        p = f"h.{i}."
        W = get(p + "attn.c_attn.weight", (d, 3 * d))
        b = get(p + "attn.c_attn.bias", (3 * d,))
        W_Q, W_K, W_V = (np.ascontiguousarray(W[:, k * d:(k + 1) * d]) for k in range(3))
        opts = {} if lay.scale is None else {"scale": lay.scale}
        attn = MultiHeadAttention(
            W_Q, W_K, W_V, get(p + "attn.c_proj.weight", (d, d)), n_head=lay.n_head,
            b_Q=b[:d].copy(), b_K=b[d:2 * d].copy(), b_V=b[2 * d:].copy(),
            b_O=get(p + "attn.c_proj.bias", (d,)), mask="causal", **opts)
        mlp = MLP(get(p + "mlp.c_fc.weight", (d, f)), get(p + "mlp.c_fc.bias", (f,)),
                  get(p + "mlp.c_proj.weight", (f, d)), get(p + "mlp.c_proj.bias", (d,)),
                  act=lay.act)
        ln = [LayerNorm(get(p + k + ".weight", (d,)), get(p + k + ".bias", (d,)), lay.eps)
              for k in _norm_names(lay)]
        return Block(ln[0], attn, ln[1], mlp, sliding_window=_window(lay, i))

    p, a = f"layers.{i}.", f"layers.{i}.self_attn."
    lin = lambda name, shape: np.ascontiguousarray(get(name, shape).T)  # noqa: E731
    if lay.fused_qkv:
        W = lin(a + "qkv_proj.weight", (dq + 2 * dkv, d))
        W_Q, W_K, W_V = (np.ascontiguousarray(W[:, s]) for s in (
            slice(0, dq), slice(dq, dq + dkv), slice(dq + dkv, None)))
    else:
        W_Q, W_K = lin(a + "q_proj.weight", (dq, d)), lin(a + "k_proj.weight", (dkv, d))
        W_V = lin(a + "v_proj.weight", (dkv, d))
    bias = {}
    for k, n in (("q", dq), ("k", dkv), ("v", dkv), ("o", d)):
        name = a + f"{k}_proj.bias"
        if (has(name) if has is not None else k in lay.biases):
            bias["b_" + k.upper()] = get(name, (n,))
    opts = {}
    if lay.scale is not None:
        opts["scale"] = lay.scale
    if lay.softcap is not None:
        opts["softcap"] = lay.softcap
    if lay.qk_norm:
        opts["q_norm"] = _rms(lay, get(a + "q_norm.weight", (dh,)))
        opts["k_norm"] = _rms(lay, get(a + "k_norm.weight", (dh,)))
    if lay.rope_scaling is not None:
        opts["rope_scaling"] = lay.rope_scaling
    attn = MultiHeadAttention(W_Q, W_K, W_V, lin(a + "o_proj.weight", (d, dq)),
                              n_head=lay.n_head, n_kv_head=lay.n_kv_head, mask="causal",
                              rope_theta=lay.rope_theta, **bias, **opts)
    if lay.fused_gate_up:
        W = lin(p + "mlp.gate_up_proj.weight", (2 * f, d))
        W_g, W_u = np.ascontiguousarray(W[:, :f]), np.ascontiguousarray(W[:, f:])
    else:
        W_g, W_u = lin(p + "mlp.gate_proj.weight", (f, d)), lin(p + "mlp.up_proj.weight", (f, d))
    mlp = GatedMLP(W_g, W_u, lin(p + "mlp.down_proj.weight", (d, f)), act=lay.act)
    norms = [_rms(lay, get(p + k + ".weight", (d,))) for k in _norm_names(lay)]
    if lay.post_norms:
        return Block(norms[0], attn, norms[2], mlp, post_attention_norm=norms[1],
                     post_mlp_norm=norms[3], sliding_window=_window(lay, i))
    return Block(norms[0], attn, norms[1], mlp, sliding_window=_window(lay, i))


def build_final(lay: Layout, get: Get):
    """The final norm (``ln_f`` or ``norm``)."""
    d = lay.d_model
    if lay.style == "gpt2":
        return LayerNorm(get("ln_f.weight", (d,)), get("ln_f.bias", (d,)), lay.eps)
    return _rms(lay, get("norm.weight", (d,)))


class LazyBlocks(Sequence):
    """The blocks of a layout, built from the checkpoint when indexed.

    ``blocks[i]`` builds block i (reading its tensors) or returns it from a
    small cache; ``blocks[a:b]`` is the list of that range. The cache keeps the
    most recently used blocks while their weights total at most ``cache_bytes``
    (default 1 GiB; always at least the last block used), so a small model is
    read once, and a model larger than memory holds one block at a time: one
    block's constant needs one block's weights.
    """

    def __init__(self, lay: Layout, get: Get, cache_bytes: int = 2**30) -> None:
        self._lay, self._get = lay, get
        self.cache_bytes = cache_bytes
        self._cache: OrderedDict[int, tuple[Block, int]] = OrderedDict()

    def __len__(self) -> int:
        return self._lay.n_layer

    @property
    def cached(self) -> list[int]:
        """The indices of the blocks held in memory, least recently used first."""
        return list(self._cache)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        i = range(len(self))[index]
        if i in self._cache:
            self._cache.move_to_end(i)
            return self._cache[i][0]
        size = _block_bytes(self._lay)
        while self._cache and sum(n for _, n in self._cache.values()) + size > self.cache_bytes:
            self._cache.popitem(last=False)                 # free before reading the next
        block = build_block(self._lay, self._get, i)
        self._cache[i] = (block, size)
        return block


def _block_bytes(lay: Layout) -> int:
    """The bytes of one block's weights in float64 (an upper bound for float32)."""
    n = sum(int(np.prod(s)) for k, s in parameter_shapes(lay).items()
            if k.startswith(("h.0.", "layers.0.")))
    return 8 * n
