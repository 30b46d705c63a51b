"""lipattn: the helper library of *Lipschitz continuity and spectral norms of
Transformer self-attention*.

The mathematics, one module per concept:

- :mod:`lipattn.softmax` -- the softmax, its Jacobian and the Jacobian's norms;
- :mod:`lipattn.scaling` -- the 1/sqrt(d) scaling and softmax saturation, by Monte Carlo;
- :mod:`lipattn.quadrature` -- the same without sampling: exact two-key quadrature, asymptotes;
- :mod:`lipattn.init_gradients` -- gradients of one attention read-out at initialisation;
- :mod:`lipattn.attention` -- single-head self-attention, tokens as rows;
- :mod:`lipattn.spectral` -- power iteration, its rate, exact spectral norms;
- :mod:`lipattn.compositions` -- the product of spectral norms against a ReLU network's constant;
- :mod:`lipattn.min_entropy` -- the entropy floor: the least softmax entropy at a logit norm;
- :mod:`lipattn.collapse` -- rank collapse: residuals, the cubic bound, deep stacks;
- :mod:`lipattn.lanczos` -- Golub-Kahan-Lanczos: the spectral norm of any map given by
  its jvp and vjp (:func:`lipattn.jacobian_norm`), with a convergence certificate;
- :mod:`lipattn.lipschitz` -- the attention Jacobian and its exact local Lipschitz constant;
- :mod:`lipattn.bounds` -- upper bounds on that constant (local, on a ball, Kim et al.'s L2
  bounds) and the audited formula that is not one;
- :mod:`lipattn.l2attention` -- L2 self-attention, its Jacobian and exact local constant;
- :mod:`lipattn.adversarial` -- the adversarial inputs: two-sided and sink tokens;
- :mod:`lipattn.layers` -- the layers of real Transformers (masked multi-head attention with
  biases, grouped-query heads, RoPE and QK-norms; LayerNorm, RMSNorm; the GPT-2 and gated
  MLPs), each with its forward pass, jvp, vjp and parameter gradients, batched;
- :mod:`lipattn.layernorm` -- LayerNorm's Jacobian and its norms;
- :mod:`lipattn.models` -- GPT-2 and Llama from Hugging Face state dicts: forward passes and
  exact local constants of stacks, blocks, sublayers and heads; and the book's own
  Post-/Pre-LN encoder (:mod:`lipattn.models.encoder`, a stack of :mod:`lipattn.layers`),
  Adam through the layers' backward (:mod:`lipattn.models.training`: sequence reversal,
  any stack) and the exact constants of the encoder's attention sublayers
  (:mod:`lipattn.models.encoder_sublayers`);
- :mod:`lipattn.book` -- the book's machinery, including the chapters' experiments on the
  encoder (:mod:`lipattn.book.prenorm`; :mod:`lipattn.book.sensitivity`, input sensitivity
  of deep stacks: end-to-end vs per-layer Jacobians).

The package's layout follows the architecture: the mathematics above (one module
per concept), the layers and models built from it (:mod:`lipattn.layers`,
:mod:`lipattn.models`), and the book's own machinery -- explorers, figures,
quizzes, interview answers, the audit, the shipped trained weights and the Sphinx
extension -- in :mod:`lipattn.book`, which nothing outside it imports.

Conventions: tokens are rows, softmax acts on the last axis, and ``vec`` is
row-major throughout.
"""

from .lanczos import LipschitzEstimate, jacobian_norm

__all__ = ["jacobian_norm", "LipschitzEstimate"]
__version__ = "0.1.0"
