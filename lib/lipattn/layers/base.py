r"""The layer protocol and its two compositions, :class:`Sequential` and :class:`Residual`.

A *layer* maps hidden states ``X`` of shape ``(..., N, d_in)`` to ``(..., N,
d_out)`` (leading batch axes allowed; its parameters may carry leading axes that
broadcast against them by numpy's matmul rules, e.g. weights (R, 1, d, d)
against X (R, B, N, d) run R models on B sequences each) and provides

- ``forward(X) -> (Y, state)``: the output and everything its derivatives reuse;
- ``jvp(state, E) -> dY``: the Jacobian-vector product :math:`Df(X)[E]`;
- ``vjp(state, G) -> dX``: the adjoint, :math:`Df(X)^\top[G]`, so that
  :math:`\langle Df(X)[E], G\rangle = \langle E, Df(X)^\top[G]\rangle`;
- ``backward(state, G) -> (dX, grads)``: ``dX = vjp(state, G)`` and, for each
  parameter, the gradient of :math:`\langle G, Y\rangle` with respect to it,
  of the parameter's shape (summed over the axes it was broadcast along), in
  one pass;
- ``params``: name -> the parameter arrays themselves (not copies), the keys of
  ``grads``, so that an optimiser updating them in place updates the layer.

Products are closed forms, exact up to rounding; they never form a Jacobian
and cost about one forward pass each (the forward state is computed once).
:func:`layer_lipschitz` is the exact local Lipschitz constant
:math:`\|Df(X)\|_2` of any layer (Frobenius norms), by
:func:`lipattn.jacobian_norm`; :func:`layer_jacobian` is the dense Jacobian
(one jvp per input coordinate), for small layers and independent checks.
``vec`` is row-major throughout.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from .._validate import as_count, as_real_array
from ..lanczos import LipschitzEstimate, jacobian_norm

__all__ = ["Layer", "Sequential", "Residual", "layer_lipschitz", "layer_jacobian", "linear",
           "linear_t", "reduce_to", "wgrad"]


def weight(W: Any, name: str, shape: tuple) -> np.ndarray:
    """A layer's parameter, validated: finite, real, with trailing shape ``shape``
    (None = any length), after any leading axes that broadcast against the batch
    axes of the input (numpy matmul rules).

    float32 arrays are kept as they are (float32 models); anything else becomes
    float64 (float64 arrays are kept, not copied).
    """
    arr = as_real_array(W, name, min_ndim=len(shape))
    tail = arr.shape[arr.ndim - len(shape):]
    if any(s is not None and s != a for s, a in zip(shape, tail, strict=True)):
        want = "(" + ", ".join("n" if s is None else str(s) for s in shape) + ("," if len(
            shape) == 1 else "") + ")"
        raise ValueError(f"{name} must have shape (..., {want[1:]} (leading axes broadcast); "
                         f"got shape {arr.shape}")
    return W if isinstance(W, np.ndarray) and W.dtype == np.float32 else arr


def check_input(X: np.ndarray, d: int, owner: str) -> None:
    """A cheap shape check for the hot path (layers do not re-validate entries)."""
    if not isinstance(X, np.ndarray) or X.ndim < 2 or X.shape[-1] != d:
        raise ValueError(f"{owner}.forward's X must be an ndarray of shape (..., N, {d}); got "
                         f"{getattr(X, 'shape', type(X).__name__)}")


# ---------------------------------------------------------------------------
# the three products every layer's weights need, on batched inputs
# ---------------------------------------------------------------------------
def linear(H: np.ndarray, W: np.ndarray) -> np.ndarray:
    """``H @ W`` for H (..., N, m) and W (..., m, n), with the token rows of each
    weight's batch merged into one matmul.

    Numerically ``H @ W``; merging the (broadcast) batch axes makes one BLAS
    call per weight instead of one per sequence. A 2-D ``W`` (one model) takes
    every row of H in one call.
    """
    if W.ndim == 2:
        if H.ndim == 2:
            return H @ W
        return (H.reshape(-1, H.shape[-1]) @ W).reshape(*H.shape[:-1], W.shape[-1])
    k = W.ndim - 2  # W: (*R, 1, ..., 1, m, n) against H: (*R, *B, N, m)
    r = next((i for i in range(k) if W.shape[i] == 1), k)
    if H.ndim == W.ndim and all(n == 1 for n in W.shape[r:k]) and H.shape[:r] == W.shape[:r]:
        out = H.reshape(*H.shape[:r], -1, H.shape[-1]) @ W.reshape(*W.shape[:r], *W.shape[-2:])
        return out.reshape(*H.shape[:-1], W.shape[-1])
    return H @ W


def linear_t(G: np.ndarray, W: np.ndarray) -> np.ndarray:
    """``G @ W^T`` (the adjoint of :func:`linear` in H), batched as :func:`linear`."""
    return linear(G, np.swapaxes(W, -1, -2))


def reduce_to(g: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum ``g`` over the axes along which an array of ``shape`` was broadcast."""
    extra = g.ndim - len(shape)
    if extra > 0:
        g = g.sum(axis=tuple(range(extra)))
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    return g.sum(axis=axes, keepdims=True) if axes else g


def wgrad(H: np.ndarray, dY: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The gradient of a weight of ``shape`` used as ``linear(H, W)`` for the
    output cotangent ``dY``: :math:`\\sum H^\\top dY` over the axes W was
    broadcast along (one matmul per weight, the rows of every sequence merged)."""
    if H.ndim == 2:
        return H.T @ dY
    lead = H.shape[:-2]
    wl = (1,) * (len(lead) - (len(shape) - 2)) + tuple(shape[:-2])
    keep = [i for i, (n, w) in enumerate(zip(lead, wl, strict=True)) if w != 1]
    red = [i for i in range(len(lead)) if i not in keep]
    order = [*keep, *red, len(lead), len(lead) + 1]
    kshape = [lead[i] for i in keep]
    H2 = np.transpose(H, order).reshape(*kshape, -1, H.shape[-1])
    D2 = np.transpose(dY, order).reshape(*kshape, -1, dY.shape[-1])
    return (np.swapaxes(H2, -1, -2) @ D2).reshape(shape)


class Layer(Protocol):
    """What every layer provides (see the module docstring)."""

    @property
    def params(self) -> dict[str, np.ndarray]: ...

    def forward(self, X: np.ndarray) -> tuple[np.ndarray, Any]: ...

    def jvp(self, state: Any, E: np.ndarray) -> np.ndarray: ...

    def vjp(self, state: Any, G: np.ndarray) -> np.ndarray: ...

    def backward(self, state: Any, G: np.ndarray
                 ) -> tuple[np.ndarray, dict[str, np.ndarray]]: ...


class Sequential:
    """The composition ``layers[-1] o ... o layers[0]`` (applied left to right).

    ``names`` (default ``"0"``, ``"1"``, ...) prefix the layers' parameter
    names: ``params`` and ``backward``'s grads are keyed ``f"{name}.{key}"``.
    """

    def __init__(self, layers: list, names: list[str] | None = None) -> None:
        self.layers = list(layers)
        self.names = [str(i) for i in range(len(self.layers))] if names is None else [
            str(n) for n in names]
        if len(self.names) != len(self.layers) or len(set(self.names)) != len(self.names):
            raise ValueError(f"names must be {len(self.layers)} distinct names, one per layer; "
                             f"got {names!r}")

    @property
    def params(self) -> dict[str, np.ndarray]:
        return {f"{n}.{k}": v for n, layer in zip(self.names, self.layers, strict=True)
                for k, v in layer.params.items()}

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

    def backward(self, state: list, G: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        parts = []
        for n, layer, st in zip(self.names[::-1], self.layers[::-1], state[::-1], strict=True):
            G, g = layer.backward(st, G)
            parts.append((n, g))
        return G, {f"{n}.{k}": v for n, g in parts[::-1] for k, v in g.items()}  # params' order


class Residual:
    """``X + branch(X)``: the Jacobian is ``I + D branch``; the branch's parameters."""

    def __init__(self, branch: Any) -> None:
        self.branch = branch

    @property
    def params(self) -> dict[str, np.ndarray]:
        return self.branch.params

    def forward(self, X: np.ndarray) -> tuple[np.ndarray, Any]:
        Y, st = self.branch.forward(X)
        return X + Y, st

    def jvp(self, state: Any, E: np.ndarray) -> np.ndarray:
        return E + self.branch.jvp(state, E)

    def vjp(self, state: Any, G: np.ndarray) -> np.ndarray:
        return G + self.branch.vjp(state, G)

    def backward(self, state: Any, G: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        dX, grads = self.branch.backward(state, G)
        return G + dX, grads


def _check_layer(layer: Any) -> None:
    for method in ("forward", "jvp", "vjp"):
        if not callable(getattr(layer, method, None)):
            raise TypeError(f"layer must have forward, jvp and vjp methods; got "
                            f"{type(layer).__name__} without {method}")


def layer_jacobian(layer: Any, X: np.ndarray, *, max_entries: int = 10**7) -> np.ndarray:
    r"""The dense Jacobian :math:`Df(X)` of a layer, row-major ``vec`` on both sides.

    Column k is ``layer.jvp(state, E_k)`` for the k-th coordinate matrix
    :math:`E_k` of X's shape (exact up to rounding; no differencing), so its
    spectral norm is :func:`layer_lipschitz`'s value computed another way.

    Parameters
    ----------
    layer : a layer (``forward``, ``jvp``, ``vjp``)
    X : array_like, shape (N, d)
        Finite.
    max_entries : int, default 1e7
        Refuse Jacobians with more entries (memory).

    Returns
    -------
    J : ndarray, shape (N * d_out, N * d)
    """
    _check_layer(layer)
    max_entries = as_count(max_entries, "max_entries")
    X = weight(X, "X", (None, None))
    Y, state = layer.forward(X)
    if X.size * Y.size > max_entries:
        raise ValueError(f"the Jacobian would have {X.size * Y.size} entries, more than "
                         f"max_entries = {max_entries}; got X of shape {X.shape}")
    eye = np.eye(X.size, dtype=Y.dtype)
    return np.stack([layer.jvp(state, e.reshape(X.shape)).ravel() for e in eye], axis=1)


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
    _check_layer(layer)
    X = weight(X, "X", (None, None))
    Y, state = layer.forward(X)
    dtype = Y.dtype
    return jacobian_norm(lambda E: layer.jvp(state, E.astype(dtype, copy=False)),
                         lambda G: layer.vjp(state, G.astype(dtype, copy=False)),
                         X.shape, out_shape=Y.shape, tol=tol, seed=seed)
