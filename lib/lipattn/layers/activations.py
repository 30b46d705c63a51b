r"""Elementwise activations with their derivatives: ReLU, GELU (exact and tanh), SiLU.

Each function returns ``(value, derivative)`` of the same shape; the jvp and
the vjp of an elementwise map are both multiplication by the derivative.

- :func:`relu`: :math:`\max(x, 0)`, derivative :math:`[x > 0]` (0 at 0).
- :func:`gelu_new`: Hugging Face's ``gelu_new`` (GPT-2),
  :math:`\tfrac12 x\,(1 + \tanh u)`, :math:`u = \sqrt{2/\pi}\,(x + 0.044715 x^3)`.
  Hugging Face's ``gelu_pytorch_tanh`` (Gemma) is the same function
  (``ACTIVATIONS["gelu_pytorch_tanh"] is gelu_new``).
- :func:`gelu`: the exact GELU, :math:`x\,\Phi(x) = \tfrac12 x\,(1 +
  \operatorname{erf}(x/\sqrt2))`, derivative :math:`\Phi(x) + x\,\varphi(x)`
  (Hugging Face's ``gelu``).
- :func:`silu`: :math:`x\,\sigma(x)` (Llama's ``silu``).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import ndtr

__all__ = ["relu", "gelu_new", "gelu", "silu", "ACTIVATIONS"]

_C = math.sqrt(2.0 / math.pi)
_A = 0.044715


def relu(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.maximum(x, 0), x > 0          # the derivative as a bool mask (multiplies exactly)


def gelu_new(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # Beyond |x| = 20, u > 300, so tanh u is +-1 to the last bit in float32 and float64
    # and (1 - t^2) x^3 < 1e-250: clipping x inside u and the derivative's second term
    # changes no value and keeps x^3 from overflowing (inf * 0 = NaN) for huge x.
    xc = np.clip(x, -20, 20)
    x2 = xc * xc
    t = np.tanh(_C * xc * (1 + _A * x2))
    y = 0.5 * x * (1 + t)
    dy = 0.5 * (1 + t) + 0.5 * xc * (1 - t * t) * _C * (1 + 3 * _A * x2)
    return y, dy


_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def gelu(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    cdf = ndtr(x).astype(x.dtype, copy=False)                  # Phi(x), no overflow
    z = np.minimum(np.abs(x), 40.0)                            # phi(40) < 1e-300: no overflow
    pdf = (_INV_SQRT_2PI * np.exp(-0.5 * z * z)).astype(x.dtype, copy=False)
    return x * cdf, cdf + x * pdf


def silu(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # sigma(x) = (1 + tanh(x/2))/2: no overflow for any finite x
    s = 0.5 * (1 + np.tanh(0.5 * x))
    return x * s, s * (1 + x * (1 - s))


#: Name -> function, as in Hugging Face's ``ACT2FN`` for the names used here.
ACTIVATIONS = {"relu": relu, "gelu_new": gelu_new, "gelu_pytorch_tanh": gelu_new, "gelu": gelu,
               "silu": silu}
