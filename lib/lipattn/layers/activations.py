r"""Elementwise activations with their derivatives: ReLU, GELU (tanh approximation), SiLU.

Each function returns ``(value, derivative)`` of the same shape; the jvp and
the vjp of an elementwise map are both multiplication by the derivative.

- :func:`relu`: :math:`\max(x, 0)`, derivative :math:`[x > 0]` (0 at 0).
- :func:`gelu_new`: Hugging Face's ``gelu_new`` (GPT-2),
  :math:`\tfrac12 x\,(1 + \tanh u)`, :math:`u = \sqrt{2/\pi}\,(x + 0.044715 x^3)`.
- :func:`silu`: :math:`x\,\sigma(x)` (Llama's ``silu``).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["relu", "gelu_new", "silu", "ACTIVATIONS"]

_C = math.sqrt(2.0 / math.pi)
_A = 0.044715


def relu(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.maximum(x, 0), x > 0          # the derivative as a bool mask (multiplies exactly)


def gelu_new(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x2 = x * x
    t = np.tanh(_C * x * (1 + _A * x2))
    y = 0.5 * x * (1 + t)
    dy = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * _C * (1 + 3 * _A * x2)
    return y, dy


def silu(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # sigma(x) = (1 + tanh(x/2))/2: no overflow for any finite x
    s = 0.5 * (1 + np.tanh(0.5 * x))
    return x * s, s * (1 + x * (1 - s))


#: Name -> function, as in Hugging Face's ``ACT2FN`` for the names used here.
ACTIVATIONS = {"relu": relu, "gelu_new": gelu_new, "silu": silu}
