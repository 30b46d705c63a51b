r"""The layer protocol and its two compositions, :class:`Sequential` and :class:`Residual`.

A *layer* maps hidden states ``X`` of shape ``(N, d_in)`` to ``(N, d_out)``
and provides three methods:

- ``forward(X) -> (Y, state)``: the output and everything its derivatives reuse;
- ``jvp(state, E) -> dY``: the Jacobian-vector product :math:`Df(X)[E]`;
- ``vjp(state, G) -> dX``: the adjoint, :math:`Df(X)^\top[G]`, so that
  :math:`\langle Df(X)[E], G\rangle = \langle E, Df(X)^\top[G]\rangle`.

Products are closed forms, exact up to rounding; they never form a Jacobian
and cost about one forward pass each (the forward state is computed once).
:func:`layer_lipschitz` is the exact local Lipschitz constant
:math:`\|Df(X)\|_2` of any layer (Frobenius norms), by
:func:`lipattn.jacobian_norm`. ``vec`` is row-major throughout.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from ..lanczos import LipschitzEstimate, jacobian_norm

__all__ = ["Layer", "Sequential", "Residual", "layer_lipschitz"]


class Layer(Protocol):
    """What every layer provides (see the module docstring)."""

    def forward(self, X: np.ndarray) -> tuple[np.ndarray, Any]: ...

    def jvp(self, state: Any, E: np.ndarray) -> np.ndarray: ...

    def vjp(self, state: Any, G: np.ndarray) -> np.ndarray: ...


class Sequential:
    """The composition ``layers[-1] o ... o layers[0]`` (applied left to right)."""

    def __init__(self, layers: list) -> None:
        self.layers = list(layers)

    def forward(self, X: np.ndarray) -> tuple[np.ndarray, list]:
        states = []
        for layer in self.layers:
            X, st = layer.forward(X)
            states.append(st)
        return X, states

    def jvp(self, state: list, E: np.ndarray) -> np.ndarray:
        for layer, st in zip(self.layers, state, strict=True):
            E = layer.jvp(st, E)
        return E

    def vjp(self, state: list, G: np.ndarray) -> np.ndarray:
        for layer, st in zip(self.layers[::-1], state[::-1], strict=True):
            G = layer.vjp(st, G)
        return G


class Residual:
    """``X + branch(X)``: the Jacobian is ``I + D branch``."""

    def __init__(self, branch: Any) -> None:
        self.branch = branch

    def forward(self, X: np.ndarray) -> tuple[np.ndarray, Any]:
        Y, st = self.branch.forward(X)
        return X + Y, st

    def jvp(self, state: Any, E: np.ndarray) -> np.ndarray:
        return E + self.branch.jvp(state, E)

    def vjp(self, state: Any, G: np.ndarray) -> np.ndarray:
        return G + self.branch.vjp(state, G)


def layer_lipschitz(layer: Any, X: np.ndarray, *, tol: float = 1e-10,
                    seed: int = 0) -> LipschitzEstimate:
    r"""The exact local Lipschitz constant :math:`\|Df(X)\|_2` of a layer at X.

    One forward pass, then Golub–Kahan–Lanczos on the layer's jvp and vjp
    (:func:`lipattn.jacobian_norm`; exact up to the relative tolerance tol).
    ``X`` is used as given (validate it first).
    """
    Y, state = layer.forward(X)
    dtype = Y.dtype
    return jacobian_norm(lambda E: layer.jvp(state, E.astype(dtype, copy=False)),
                         lambda G: layer.vjp(state, G.astype(dtype, copy=False)),
                         X.shape, out_shape=Y.shape, tol=tol, seed=seed)
