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

from .._validate import as_real_array
from ..lanczos import LipschitzEstimate, jacobian_norm

__all__ = ["Layer", "Sequential", "Residual", "layer_lipschitz"]


def weight(W: Any, name: str, shape: tuple) -> np.ndarray:
    """A layer's parameter, validated: finite, real, of ``shape`` (None = any length).

    float32 arrays are kept as they are (float32 models); anything else becomes float64.
    """
    arr = as_real_array(W, name, ndim=len(shape))
    if any(s is not None and s != a for s, a in zip(shape, arr.shape, strict=True)):
        want = "(" + ", ".join("n" if s is None else str(s) for s in shape) + ("," if len(
            shape) == 1 else "") + ")"
        raise ValueError(f"{name} must have shape {want}; got shape {arr.shape}")
    return W if isinstance(W, np.ndarray) and W.dtype == np.float32 else arr


def check_input(X: np.ndarray, d: int, owner: str) -> None:
    """A cheap shape check for the hot path (layers do not re-validate entries)."""
    if not isinstance(X, np.ndarray) or X.ndim != 2 or X.shape[1] != d:
        raise ValueError(f"{owner}.forward's X must be an ndarray of shape (N, {d}); got "
                         f"{getattr(X, 'shape', type(X).__name__)}")


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

    Parameters
    ----------
    layer : a layer (``forward``, ``jvp``, ``vjp``)
    X : array_like, shape (N, d)
        Finite; float64 (or float32 for a float32 layer, whose products are
        then accurate to about 1e-7).
    tol : float, default 1e-10
    seed : int, default 0

    Returns
    -------
    LipschitzEstimate
    """
    for method in ("forward", "jvp", "vjp"):
        if not callable(getattr(layer, method, None)):
            raise TypeError(f"layer must have forward, jvp and vjp methods; got "
                            f"{type(layer).__name__} without {method}")
    X = weight(X, "X", (None, None))
    Y, state = layer.forward(X)
    dtype = Y.dtype
    return jacobian_norm(lambda E: layer.jvp(state, E.astype(dtype, copy=False)),
                         lambda G: layer.vjp(state, G.astype(dtype, copy=False)),
                         X.shape, out_shape=Y.shape, tol=tol, seed=seed)
