r"""The layers of real Transformers, each written once with its forward, jvp and vjp.

- :mod:`~lipattn.layers.base` -- the layer protocol, :class:`Sequential`,
  :class:`Residual`, and :func:`layer_lipschitz` (the exact local constant of
  any layer);
- :mod:`~lipattn.layers.attention` -- masked multi-head self-attention with
  biases, grouped-query heads, RoPE, a logit scale and soft-cap, and per-head
  norms of queries and keys, each head at its own size, around the
  one attention core (:func:`attention_core`, optionally soft-capped, and its
  jvp and vjp with respect to Q, K, V on batched heads), which the book's
  encoder and :mod:`lipattn.stabilisers` use too;
- :mod:`~lipattn.layers.rope` -- rotary position embeddings (Hugging Face's
  ``rotate_half`` convention, and Llama 3.1's frequency scaling);
- :mod:`~lipattn.layers.norms` -- LayerNorm with gain and bias, RMSNorm (with
  Gemma's 1 + w gain as ``offset=1``);
- :mod:`~lipattn.layers.mlp` and :mod:`~lipattn.layers.activations` -- the
  GPT-2 MLP, the gated MLP, and ReLU, GELU (exact and tanh) and SiLU;
- :mod:`~lipattn.layers.embedding` -- :class:`CausalLM` (token and position
  embeddings, any body, the tied readout) and :func:`cross_entropy`, to train a
  language model with :func:`lipattn.models.training.train_stack`.

Layers work on ``X`` of shape (..., N, d) -- one sequence, or leading batch axes
against which the parameters' own leading axes broadcast -- in the dtype of their
weights and inputs, and give, besides jvp and vjp, ``backward`` (the parameter
gradients) and ``params`` (see :mod:`~lipattn.layers.base`); they do not
validate entries (the models and the public functions of :mod:`lipattn.lipschitz`
do). The models built from them live in
:mod:`lipattn.models`.
"""

from .activations import ACTIVATIONS, gelu, gelu_new, relu, silu
from .attention import (
    AttentionState,
    CoreState,
    MultiHeadAttention,
    attention_core,
    attention_core_jvp,
    attention_core_vjp,
    attention_logits,
    softmax_jvp,
)
from .base import (
    Layer,
    Residual,
    Sequential,
    layer_jacobian,
    layer_lipschitz,
    linear,
    linear_t,
    reduce_to,
    wgrad,
)
from .embedding import CausalLM, cross_entropy
from .mlp import MLP, GatedMLP
from .norms import LayerNorm, RMSNorm
from .rope import rope, rope_inv_freq, rope_tables, rope_transpose

__all__ = ["Layer", "Sequential", "Residual", "layer_lipschitz", "layer_jacobian",
           "MultiHeadAttention",
           "attention_core", "attention_core_jvp", "attention_core_vjp", "attention_logits",
           "CoreState", "AttentionState", "linear", "linear_t", "reduce_to", "wgrad",
           "softmax_jvp", "LayerNorm", "RMSNorm", "MLP", "GatedMLP", "ACTIVATIONS", "relu",
           "gelu_new", "gelu", "silu", "rope", "rope_inv_freq", "rope_tables", "rope_transpose",
           "CausalLM", "cross_entropy"]
