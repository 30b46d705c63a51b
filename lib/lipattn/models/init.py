r"""Random state dicts with Hugging Face's names and shapes, initialised as the published code.

:func:`random_state_dict` gives what ``GPT2Model(config).state_dict()`` or
``LlamaModel(config).state_dict()`` holds right after Hugging Face's
``_init_weights`` (as numpy arrays), ready for
:meth:`lipattn.models.GPT2.from_state_dict` or
:meth:`lipattn.models.Llama.from_state_dict`; optionally with random
non-trivial norm gains and biases, which tests need (at initialisation every
gain is 1 and every bias 0, so those terms of the derivatives would go untested).
"""

from __future__ import annotations

import math

import numpy as np

from .._validate import as_choice, as_int_at_least, as_positive_float, as_seed

__all__ = ["random_state_dict"]

#: Largest number of entries of a state dict (8 GB of float64).
MAX_ENTRIES = 10**9


def random_state_dict(layout: str, n_layer: int, d_model: int, n_head: int, *,
                      n_kv_head: int | None = None, d_ff: int | None = None, vocab: int = 64,
                      n_pos: int = 64, std: float = 0.02, init_depth: int | None = None,
                      norm_std: float = 0.0, bias_std: float = 0.0,
                      seed: int = 0) -> dict[str, np.ndarray]:
    r"""A random GPT-2 or Llama state dict (float64 arrays), Hugging Face's names.

    ``"gpt2"`` (``GPT2PreTrainedModel._init_weights``): every weight, ``wte``
    and ``wpe`` included, :math:`N(0, \text{std}^2)`; the residual projections
    ``attn.c_proj.weight`` and ``mlp.c_proj.weight``
    :math:`N(0, \text{std}^2/(2\,\text{init\_depth}))`; biases 0; LayerNorm
    gains 1 and biases 0. Conv1D layout (in, out).

    ``"llama"`` (``LlamaPreTrainedModel._init_weights``): every projection and
    ``embed_tokens`` :math:`N(0, \text{std}^2)`, no residual rescaling (Hugging
    Face's Llama has none), RMSNorm gains 1, no biases. nn.Linear layout
    (out, in); ``k_proj``, ``v_proj`` have ``n_kv_head * d_model / n_head`` rows.

    Parameters
    ----------
    layout : {"gpt2", "llama"}
    n_layer, d_model, n_head : int
        Blocks, width and query heads; ``n_head`` divides ``d_model``.
    n_kv_head : int, optional
        Llama's key/value heads (divides ``n_head``); default ``n_head``. Not
        for ``"gpt2"``.
    d_ff : int, optional
        MLP width: default 4 d (GPT-2's ``n_inner``), or for Llama the multiple
        of 64 nearest 8 d / 3 (at least 64).
    vocab, n_pos : int
        Embedding rows (``n_pos``: GPT-2's positions only).
    std : float, default 0.02
        ``initializer_range``.
    init_depth : int, optional
        GPT-2's depth of the residual rescaling (default ``n_layer``; a larger
        value gives the first blocks of a deeper model). Not for ``"llama"``.
    norm_std : float, default 0
        Norm gains become :math:`1 + N(0, \text{norm\_std}^2)` and GPT-2's
        LayerNorm biases :math:`N(0, \text{norm\_std}^2)`: 0 keeps the
        initialisation.
    bias_std : float, default 0
        GPT-2's linear biases :math:`N(0, \text{bias\_std}^2)` (0: the
        initialisation). Not for ``"llama"`` (no biases).
    seed : int, default 0
        Seed of ``np.random.default_rng``.

    Returns
    -------
    dict of str to ndarray
        Without the ``transformer.`` / ``model.`` prefixes, ``lm_head`` and
        GPT-2's ``attn.bias`` buffers (``from_state_dict`` ignores them).

    Raises
    ------
    TypeError, ValueError
        Naming the argument: an unknown layout, counts below 1, ``n_head`` not
        dividing ``d_model``, ``n_kv_head`` not dividing ``n_head``, a negative
        or non-finite std, an option the layout does not have, or more than
        :data:`MAX_ENTRIES` entries.
    """
    layout = as_choice(layout, "layout", ("gpt2", "llama"))
    L = as_int_at_least(n_layer, "n_layer", 1)
    d = as_int_at_least(d_model, "d_model", 1)
    h = as_int_at_least(n_head, "n_head", 1)
    if d % h:
        raise ValueError(f"n_head must divide d_model = {d}; got n_head = {h}")
    std = as_positive_float(std, "std")
    norm_std = as_positive_float(norm_std, "norm_std", allow_zero=True)
    bias_std = as_positive_float(bias_std, "bias_std", allow_zero=True)
    vocab = as_int_at_least(vocab, "vocab", 1)
    n_pos = as_int_at_least(n_pos, "n_pos", 1)
    rng = np.random.default_rng(as_seed(seed))
    normal = lambda sd, *s: sd * rng.standard_normal(s) if sd > 0 else np.zeros(s)  # noqa: E731
    gain = lambda: 1.0 + normal(norm_std, d)                                        # noqa: E731
    if layout == "gpt2":
        if n_kv_head is not None:
            raise ValueError("n_kv_head is a Llama option; GPT-2 has n_kv_head = n_head")
        d_ff = 4 * d if d_ff is None else as_int_at_least(d_ff, "d_ff", 1)
        depth = L if init_depth is None else as_int_at_least(init_depth, "init_depth", 1)
        _check_size(vocab * d + n_pos * d + L * (4 * d * d + 2 * d * d_ff))
        res = std / math.sqrt(2 * depth)
        st = {"wte.weight": normal(std, vocab, d), "wpe.weight": normal(std, n_pos, d)}
        for i in range(L):
            p = f"h.{i}."
            st |= {p + "ln_1.weight": gain(), p + "ln_1.bias": normal(norm_std, d),
                   p + "attn.c_attn.weight": normal(std, d, 3 * d),
                   p + "attn.c_attn.bias": normal(bias_std, 3 * d),
                   p + "attn.c_proj.weight": normal(res, d, d),
                   p + "attn.c_proj.bias": normal(bias_std, d),
                   p + "ln_2.weight": gain(), p + "ln_2.bias": normal(norm_std, d),
                   p + "mlp.c_fc.weight": normal(std, d, d_ff),
                   p + "mlp.c_fc.bias": normal(bias_std, d_ff),
                   p + "mlp.c_proj.weight": normal(res, d_ff, d),
                   p + "mlp.c_proj.bias": normal(bias_std, d)}
        return st | {"ln_f.weight": gain(), "ln_f.bias": normal(norm_std, d)}
    if init_depth is not None:
        raise ValueError("init_depth is a GPT-2 option; Llama's initialisation has no "
                         "residual rescaling")
    if bias_std:
        raise ValueError(f"bias_std must be 0 for 'llama' (no biases); got {bias_std!r}")
    kv = h if n_kv_head is None else as_int_at_least(n_kv_head, "n_kv_head", 1)
    if h % kv:
        raise ValueError(f"n_kv_head must divide n_head = {h}; got n_kv_head = {kv}")
    d_ff = 64 * max(1, round(8 * d / 3 / 64)) if d_ff is None else as_int_at_least(d_ff, "d_ff",
                                                                                   1)
    dkv = kv * d // h
    _check_size(vocab * d + L * (2 * d * d + 2 * dkv * d + 3 * d * d_ff))
    st = {"embed_tokens.weight": normal(std, vocab, d)}
    for i in range(L):
        p, a = f"layers.{i}.", f"layers.{i}.self_attn."
        st |= {p + "input_layernorm.weight": gain(), a + "q_proj.weight": normal(std, d, d),
               a + "k_proj.weight": normal(std, dkv, d), a + "v_proj.weight": normal(std, dkv, d),
               a + "o_proj.weight": normal(std, d, d),
               p + "post_attention_layernorm.weight": gain(),
               p + "mlp.gate_proj.weight": normal(std, d_ff, d),
               p + "mlp.up_proj.weight": normal(std, d_ff, d),
               p + "mlp.down_proj.weight": normal(std, d, d_ff)}
    return st | {"norm.weight": gain()}


def _check_size(n: int) -> None:
    if n > MAX_ENTRIES:
        raise ValueError(f"n_layer, d_model, d_ff, vocab and n_pos must give at most "
                         f"{MAX_ENTRIES:.0e} entries (memory); got {n}")
