r"""The two MLPs of decoder blocks, weights in the "x @ W" layout (in, out).

- :class:`MLP` (GPT-2, and the book's encoder with ReLU):
  :math:`F(x) = \phi(x W_1 + b_1) W_2 + b_2`.
- :class:`GatedMLP` (Llama): :math:`F(x) = \bigl(\phi(x W_g) \odot x W_u\bigr) W_d`.

:math:`\phi` is an activation of :mod:`lipattn.layers.activations` (value and
derivative). Biases do not enter the derivatives.
"""

from __future__ import annotations

import numpy as np

from .activations import ACTIVATIONS
from .base import check_input, weight


def _activation(act):
    if act not in ACTIVATIONS:
        raise ValueError(f"act must be one of {sorted(ACTIVATIONS)}; got {act!r}")
    return ACTIVATIONS[act]

__all__ = ["MLP", "GatedMLP"]


class MLP:
    """``act(X @ W_1 + b_1) @ W_2 + b_2``; ``act`` a name in ``ACTIVATIONS``."""

    def __init__(self, W_1, b_1, W_2, b_2, act: str = "gelu_new") -> None:
        self.W_1 = weight(W_1, "W_1", (None, None))
        self.b_1 = weight(b_1, "b_1", (self.W_1.shape[1],))
        self.W_2 = weight(W_2, "W_2", (self.W_1.shape[1], None))
        self.b_2 = weight(b_2, "b_2", (self.W_2.shape[1],))
        self.act = _activation(act)

    def forward(self, X: np.ndarray):
        check_input(X, self.W_1.shape[0], "MLP")
        h, dh = self.act(X @ self.W_1 + self.b_1)
        return h @ self.W_2 + self.b_2, dh

    def jvp(self, dh, E: np.ndarray) -> np.ndarray:
        return (dh * (E @ self.W_1)) @ self.W_2

    def vjp(self, dh, G: np.ndarray) -> np.ndarray:
        return (dh * (G @ self.W_2.T)) @ self.W_1.T


class GatedMLP:
    """``(act(X @ W_g) * (X @ W_u)) @ W_d``; ``act`` a name in ``ACTIVATIONS`` (default SiLU)."""

    def __init__(self, W_g, W_u, W_d, act: str = "silu") -> None:
        self.W_g = weight(W_g, "W_g", (None, None))
        self.W_u = weight(W_u, "W_u", self.W_g.shape)
        self.W_d = weight(W_d, "W_d", (self.W_g.shape[1], None))
        self.act = _activation(act)

    def forward(self, X: np.ndarray):
        check_input(X, self.W_g.shape[0], "GatedMLP")
        a, da = self.act(X @ self.W_g)
        b = X @ self.W_u
        return (a * b) @ self.W_d, (a, da, b)

    def jvp(self, state, E: np.ndarray) -> np.ndarray:
        a, da, b = state
        return (da * (E @ self.W_g) * b + a * (E @ self.W_u)) @ self.W_d

    def vjp(self, state, G: np.ndarray) -> np.ndarray:
        a, da, b = state
        dh = G @ self.W_d.T
        return (dh * b * da) @ self.W_g.T + (dh * a) @ self.W_u.T
