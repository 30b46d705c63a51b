r"""LayerNorm with gain and bias, and RMSNorm, row-wise over the last axis.

- LayerNorm (GPT-2): :math:`\mathrm{LN}(x) = g \odot (x - \bar x)/s + b`,
  :math:`s = \sqrt{\operatorname{var} x + \varepsilon}` (population variance);
  its Jacobian is :math:`\operatorname{diag}(g)\,(C - y y^\top/d)/s` with
  :math:`y = (x - \bar x)/s` (the mathematics of :mod:`lipattn.layernorm`,
  whose forward and adjoint this module reuses).
- RMSNorm (Llama; Gemma with ``offset=1``, gain :math:`1 + g`):
  :math:`\mathrm{RMS}(x) = g \odot x\, r`,
  :math:`r = 1/\sqrt{\overline{x^2} + \varepsilon}`; with :math:`y = x r`,
  its Jacobian is :math:`\operatorname{diag}(g)\, r\,(I - y y^\top/d)`.

Both inner Jacobians are symmetric, so one function is the jvp and the vjp.
Rows may carry leading batch axes, and ``g``, ``b`` leading axes that broadcast
against them. LayerNorm computes in the input's dtype by the library's one
LayerNorm (:func:`lipattn.layernorm._ln`: :math:`c/\sqrt{\overline{c^2} +
\varepsilon}` where the squares do not overflow, else the statistics of rows
divided by their largest entry, so no finite input overflows). RMSNorm
takes its statistics the same overflow-free way, in float64, then casts to the
input's dtype.
"""

from __future__ import annotations

import numpy as np

from .._validate import as_positive_float, as_real_float
from ..layernorm import _ln, _ln_plain_bwd
from .base import check_input, reduce_to, weight

__all__ = ["LayerNorm", "RMSNorm"]


class LayerNorm:
    """LayerNorm with gain ``g`` and bias ``b``, both shape (..., d); ``eps`` > 0."""

    def __init__(self, g: np.ndarray, b: np.ndarray, eps: float) -> None:
        self.g = weight(g, "g", (None,))
        self.b = weight(b, "b", (self.g.shape[-1],))
        self.eps = as_positive_float(eps, "eps")

    @property
    def params(self) -> dict[str, np.ndarray]:
        return {"g": self.g, "b": self.b}

    def forward(self, X: np.ndarray):
        check_input(X, self.g.shape[-1], "LayerNorm")
        y, inv_s = _ln(X, self.eps)
        return self.g * y + self.b, (y, inv_s)

    def jvp(self, state, E: np.ndarray) -> np.ndarray:
        return self.g * _ln_plain_bwd(E, *state)     # the inner Jacobian is symmetric

    def vjp(self, state, G: np.ndarray) -> np.ndarray:
        return _ln_plain_bwd(G * self.g, *state)

    def backward(self, state, G: np.ndarray):
        y = state[0]
        grads = {"g": reduce_to(G * y, self.g.shape), "b": reduce_to(G, self.b.shape)}
        return self.vjp(state, G), grads


def _rms_jvp(E: np.ndarray, y: np.ndarray, r: np.ndarray) -> np.ndarray:
    """r (I - y y^T / d) E row-wise; symmetric, so also the vjp."""
    return r * (E - y * np.mean(y * E, axis=-1, keepdims=True))


class RMSNorm:
    """RMSNorm with gain ``offset + g``, ``g`` of shape (..., d); ``eps`` > 0 (no centring,
    no bias).

    ``offset=1.0`` is Gemma's norm, whose stored weight w gives the gain
    :math:`1 + w` (Hugging Face's ``GemmaRMSNorm``); ``params`` and ``backward``'s
    grads are those of ``g`` (the same as the gain's).
    """

    def __init__(self, g: np.ndarray, eps: float, offset: float = 0.0) -> None:
        self.g = weight(g, "g", (None,))
        self.eps = as_positive_float(eps, "eps")
        self.offset = as_real_float(offset, "offset")

    @property
    def params(self) -> dict[str, np.ndarray]:
        return {"g": self.g}

    def _gain(self) -> np.ndarray:
        # computed at each call: an optimiser may update g in place
        return self.g + self.g.dtype.type(self.offset) if self.offset else self.g

    def forward(self, X: np.ndarray):
        check_input(X, self.g.shape[-1], "RMSNorm")
        x = X.astype(np.float64)
        big = np.max(np.abs(x), axis=-1, keepdims=True)
        big = np.where(big > 0, big, 1.0)
        rms_s = np.sqrt(np.mean((x / big) ** 2, axis=-1, keepdims=True))     # <= 1
        s = np.hypot(big * rms_s, np.sqrt(self.eps))                          # sqrt(ms + eps)
        y, r = (x / s).astype(X.dtype, copy=False), (1.0 / s).astype(X.dtype, copy=False)
        return self._gain() * y, (y, r)

    def jvp(self, state, E: np.ndarray) -> np.ndarray:
        return self._gain() * _rms_jvp(E, *state)

    def vjp(self, state, G: np.ndarray) -> np.ndarray:
        return _rms_jvp(self._gain() * G, *state)

    def backward(self, state, G: np.ndarray):
        return self.vjp(state, G), {"g": reduce_to(G * state[0], self.g.shape)}
