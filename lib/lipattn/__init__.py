"""lipattn: the helper library of *Lipschitz continuity and spectral norms of
Transformer self-attention*.

One module per concept:

- :mod:`lipattn.softmax` -- the softmax, its Jacobian and the Jacobian's norms;
- :mod:`lipattn.scaling` -- the 1/sqrt(d) scaling and softmax saturation;
- :mod:`lipattn.attention` -- single-head self-attention, tokens as rows;
- :mod:`lipattn.spectral` -- power iteration, its rate, exact spectral norms, the entropy floor;
- :mod:`lipattn.collapse` -- rank collapse: residuals, the cubic bound, deep stacks;
- :mod:`lipattn.lanczos` -- Golub-Kahan-Lanczos: the spectral norm of any map given by
  its jvp and vjp (:func:`lipattn.jacobian_norm`), with a convergence certificate;
- :mod:`lipattn.lipschitz` -- the attention Jacobian, exact local Lipschitz constants, bounds;
- :mod:`lipattn.layers` -- the layers of real Transformers (masked multi-head attention with
  biases, grouped-query heads and RoPE; LayerNorm, RMSNorm; the GPT-2 and gated MLPs), each
  with its forward pass, jvp and vjp;
- :mod:`lipattn.models` -- GPT-2 and Llama from Hugging Face state dicts: forward passes and
  exact local constants of stacks, blocks, sublayers and heads;
- :mod:`lipattn.layernorm`, :mod:`lipattn.transformer`, :mod:`lipattn.training`,
  :mod:`lipattn.prenorm` -- LayerNorm's Jacobian, a numpy Post-/Pre-LN encoder
  with a hand-written backward, Adam on sequence reversal, and the experiments;
- :mod:`lipattn.sensitivity` -- input sensitivity of deep stacks: end-to-end vs per-layer Jacobians;
- :mod:`lipattn.pretrained` -- the book's trained reversal encoders: shipped weights, the
  script that regenerates them, and the statements the chapters make about them;
- :mod:`lipattn.audit` -- the interview card's claims and verdicts, for the audit and review;
- :mod:`lipattn.interview` -- the chapters' interview answers, English and Chinese side by
  side in ``chapters/interview/*.yml``, with a staleness hash of the English;
- :mod:`lipattn.widgets` -- explorers: one definition, a live widget in a kernel
  and a precomputed frame player on the static site;
- :mod:`lipattn.plotting` -- the book's plot style;
- :mod:`lipattn.quiz` -- self-check quizzes that work with and without a kernel.

Conventions: tokens are rows, softmax acts on the last axis, and ``vec`` is
row-major throughout.
"""

from .lanczos import LipschitzEstimate, jacobian_norm

__all__ = ["jacobian_norm", "LipschitzEstimate"]
__version__ = "0.1.0"
