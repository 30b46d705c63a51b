r"""The two MLPs of decoder blocks, weights in the "x @ W" layout (in, out).

- :class:`MLP` (GPT-2, and the book's encoder with ReLU):
  :math:`F(x) = \phi(x W_1 + b_1) W_2 + b_2`.
- :class:`GatedMLP` (Llama): :math:`F(x) = \bigl(\phi(x W_g) \odot x W_u\bigr) W_d`.

:math:`\phi` is an activation of :mod:`lipattn.layers.activations` (value and
derivative). Biases do not enter the input derivatives. Inputs may carry leading
batch axes and the weights leading axes that broadcast against them;
``backward`` gives the weight gradients summed over the broadcast axes.
"""

from __future__ import annotations

import numpy as np

from .activations import ACTIVATIONS
from .base import check_input, linear, linear_t, reduce_to, weight, wgrad


def _activation(act):
    if act not in ACTIVATIONS:
        raise ValueError(f"act must be one of {sorted(ACTIVATIONS)}; got {act!r}")
    return ACTIVATIONS[act]

__all__ = ["MLP", "GatedMLP"]


class MLP:
    """``act(X @ W_1 + b_1) @ W_2 + b_2``; ``act`` a name in ``ACTIVATIONS``."""

    def __init__(self, W_1, b_1, W_2, b_2, act: str = "gelu_new") -> None:
        self.W_1 = weight(W_1, "W_1", (None, None))
        self.b_1 = weight(b_1, "b_1", (self.W_1.shape[-1],))
        self.W_2 = weight(W_2, "W_2", (self.W_1.shape[-1], None))
        self.b_2 = weight(b_2, "b_2", (self.W_2.shape[-1],))
        self.act = _activation(act)

    @property
    def params(self) -> dict[str, np.ndarray]:
        return {"W_1": self.W_1, "b_1": self.b_1, "W_2": self.W_2, "b_2": self.b_2}

    def forward(self, X: np.ndarray):
        check_input(X, self.W_1.shape[-2], "MLP")
        h, dh = self.act(linear(X, self.W_1) + self.b_1)
        return linear(h, self.W_2) + self.b_2, (X, h, dh)

    def jvp(self, state, E: np.ndarray) -> np.ndarray:
        return linear(state[2] * linear(E, self.W_1), self.W_2)

    def vjp(self, state, G: np.ndarray) -> np.ndarray:
        return linear_t(linear_t(G, self.W_2) * state[2], self.W_1)

    def backward(self, state, G: np.ndarray):
        X, h, dh = state
        dZ = linear_t(G, self.W_2) * dh
        grads = {"W_1": wgrad(X, dZ, self.W_1.shape), "b_1": reduce_to(dZ, self.b_1.shape),
                 "W_2": wgrad(h, G, self.W_2.shape), "b_2": reduce_to(G, self.b_2.shape)}
        return linear_t(dZ, self.W_1), grads


class GatedMLP:
    """``(act(X @ W_g) * (X @ W_u)) @ W_d``; ``act`` a name in ``ACTIVATIONS`` (default SiLU)."""

    def __init__(self, W_g, W_u, W_d, act: str = "silu") -> None:
        self.W_g = weight(W_g, "W_g", (None, None))
        self.W_u = weight(W_u, "W_u", self.W_g.shape[-2:])
        self.W_d = weight(W_d, "W_d", (self.W_g.shape[-1], None))
        self.act = _activation(act)

    @property
    def params(self) -> dict[str, np.ndarray]:
        return {"W_g": self.W_g, "W_u": self.W_u, "W_d": self.W_d}

    def forward(self, X: np.ndarray):
        check_input(X, self.W_g.shape[-2], "GatedMLP")
        a, da = self.act(linear(X, self.W_g))
        b = linear(X, self.W_u)
        h = a * b
        return linear(h, self.W_d), (X, a, da, b, h)

    def jvp(self, state, E: np.ndarray) -> np.ndarray:
        _, a, da, b, _ = state
        return linear(da * linear(E, self.W_g) * b + a * linear(E, self.W_u), self.W_d)

    def _pre(self, state, G):
        """The cotangents at X @ W_g and X @ W_u."""
        _, a, da, b, _ = state
        dh = linear_t(G, self.W_d)
        return dh * b * da, dh * a

    def vjp(self, state, G: np.ndarray) -> np.ndarray:
        dg, du = self._pre(state, G)
        return linear_t(dg, self.W_g) + linear_t(du, self.W_u)

    def backward(self, state, G: np.ndarray):
        X, h = state[0], state[4]
        dg, du = self._pre(state, G)
        grads = {"W_g": wgrad(X, dg, self.W_g.shape), "W_u": wgrad(X, du, self.W_u.shape),
                 "W_d": wgrad(h, G, self.W_d.shape)}
        return linear_t(dg, self.W_g) + linear_t(du, self.W_u), grads
