r"""How input perturbations propagate through a deep Transformer stack at initialisation.

A stack :math:`F = f_L \circ \dots \circ f_1` has the end-to-end Jacobian
:math:`J = J_L \cdots J_1` (chain rule, each :math:`J_l` taken at the state
entering layer :math:`l`), so

.. math:: \|J\|_2 \le \prod_{l=1}^L \|J_l\|_2 ,

the "product of per-layer Lipschitz constants". This module measures both
sides on the Post-LN and Pre-LN encoders of :mod:`lipattn.models.encoder`, built
from the library's layers (:func:`lipattn.models.encoder.as_layers`): the
end-to-end local constant :math:`\|J\|_2` (:func:`stack_lipschitz`) and the
layers' own local constants (:func:`layer_jacobian_norms`), each exact up to a
relative tolerance (default :math:`10^{-10}`): Golub–Kahan–Lanczos
(:func:`lipattn.jacobian_norm`) on the layers' closed-form Jacobian-vector
products and their adjoints, with its convergence certificate. No finite
differences and no dense Jacobian, so the size of X is not limited by memory;
:func:`stack_jacobian` forms the dense Jacobian (exact, one jvp per column)
for small X.

Residual scaling :math:`X + \alpha\,\mathrm{branch}(X)` is
:func:`scale_branches`: at initialisation the branches' output biases are 0,
so multiplying :math:`W_O` and :math:`W_2` by :math:`\alpha` multiplies both
branches by :math:`\alpha` exactly.

Norms are Frobenius on inputs and outputs (the Euclidean norm of the
row-major ``vec``), as in :mod:`lipattn.lipschitz`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .._blas import single_threaded
from .._validate import (
    as_bool,
    as_choice,
    as_count,
    as_counts,
    as_positive_float,
    as_real_array,
)
from ..lanczos import jacobian_norm
from ..layernorm import layer_norm_jacobian_norm
from ..models.encoder import as_layers, check_params, init_params

__all__ = ["scale_branches", "stack_lipschitz", "stack_jacobian", "layer_jacobian_norms",
           "Sensitivity", "input_sensitivity"]

_VARIANTS = ("post", "pre")


def _check_variant(variant: Any) -> str:
    return as_choice(variant, "variant", _VARIANTS)


#: Largest N * d of the dense Jacobians of :func:`stack_jacobian`: (N d)^2 entries.
MAX_JACOBIAN_SIDE = 2048


def scale_branches(params: Any, alpha: float) -> list[dict[str, Any]]:
    r"""The same model with both residual branches multiplied by ``alpha``.

    Multiplies :math:`W_O`, :math:`b_O`, :math:`W_2` and :math:`b_2` of every
    layer by :math:`\alpha`, so the attention and FFN outputs are multiplied
    by :math:`\alpha` exactly, for any parameters.

    Parameters
    ----------
    params : list of dict
        From :func:`lipattn.models.encoder.init_params`.
    alpha : float
        Positive branch scale.

    Returns
    -------
    list of dict
        New parameter dicts (the input is not modified).
    """
    check_params(params)
    alpha = as_positive_float(alpha, "alpha")
    return [p | {k: alpha * p[k] for k in ("W_O", "b_O", "W_2", "b_2")} for p in params]


def _run(params: Any, X: Any, variant: Any, final_norm: Any):
    """The stack as layers, run on X: (layers, states, stream) with stream[l] the
    input of element l of ``layers.layers`` and stream[-1] the output."""
    variant = _check_variant(variant)
    stack = as_layers(params, variant, final_norm=as_bool(final_norm, "final_norm"))
    X = as_real_array(X, "X", ndim=2, last_axis_min=2)
    if X.shape[1] != check_params(params):
        raise ValueError(f"X must have shape (N, d) with d = {check_params(params)} to match "
                         f"params; got shape {X.shape}")
    states, stream = [], [X]
    with np.errstate(over="ignore", invalid="ignore"):
        for layer in stack.layers:
            H, st = layer.forward(stream[-1])
            if not np.all(np.isfinite(H)):
                raise ValueError("params and X must keep the hidden states finite; they "
                                 f"overflow the {H.dtype} range (expected weights and inputs "
                                 "of moderate size)")
            states.append(st)
            stream.append(H)
    return stack, states, stream


def _norm(layer, state, shape, tol) -> float:
    return jacobian_norm(lambda E: layer.jvp(state, E), lambda G: layer.vjp(state, G), shape,
                         tol=tol).value


def stack_lipschitz(params: Any, X: Any, *, variant: str, final_norm: bool = True,
                    tol: float = 1e-10) -> float:
    r"""The exact local constant :math:`\|J\|_2 = \|DF(X)\|_2` of the whole stack.

    Golub–Kahan–Lanczos (:func:`lipattn.jacobian_norm`) on the jvp and vjp of
    :func:`lipattn.models.encoder.as_layers`: exact up to the relative tolerance
    ``tol`` (certified), or a :class:`~lipattn.lanczos.ConvergenceError`.

    Parameters
    ----------
    params : list of dict
        One model (no leading run axis).
    X : array_like, shape (N, d)
        Finite.
    variant : {"post", "pre"}
    final_norm : bool, default True
        For ``"pre"``, whether to include the final LayerNorm (``False``: the
        residual stream after the last layer).
    tol : float, default 1e-10

    Returns
    -------
    float
    """
    stack, states, stream = _run(params, X, variant, final_norm)
    return _norm(stack, states, stream[0].shape, tol)


def stack_jacobian(params: Any, X: Any, *, variant: str, final_norm: bool = True) -> np.ndarray:
    r"""Dense Jacobian of the stack's output with respect to its input.

    Column k is the stack's jvp (:func:`lipattn.models.encoder.as_layers`) in the
    k-th basis direction: exact up to rounding, :math:`Nd` products.

    Parameters
    ----------
    params : list of dict
        One model (no leading run axis).
    X : array_like, shape (N, d)
        With :math:`Nd \le` :data:`MAX_JACOBIAN_SIDE`.
    variant : {"post", "pre"}
    final_norm : bool, default True
        As in :func:`stack_lipschitz`.

    Returns
    -------
    ndarray, shape (N d, N d)
        :math:`\partial\,\mathrm{vec}\,F(X)/\partial\,\mathrm{vec}\,X`, row-major ``vec``.
    """
    stack, states, stream = _run(params, X, variant, final_norm)
    X = stream[0]
    if X.size > MAX_JACOBIAN_SIDE:
        raise ValueError(f"X must have N * d <= {MAX_JACOBIAN_SIDE} for a dense Jacobian "
                         f"(memory grows as (N d)^2); got shape {X.shape}")
    eye = np.eye(X.size).reshape(X.size, *X.shape)
    return np.stack([stack.jvp(states, e).ravel() for e in eye], axis=1)


def layer_jacobian_norms(params: Any, X: Any, *, variant: str,
                         tol: float = 1e-10) -> np.ndarray:
    r"""Each layer's local constant :math:`\|J_l\|_2` along the stack's own states.

    Layer :math:`l` is evaluated at the state entering it; for Pre-LN the final
    LayerNorm is not part of any layer. Exact up to the relative tolerance
    ``tol``, as :func:`stack_lipschitz`.

    Parameters
    ----------
    params : list of dict
    X : array_like, shape (N, d)
    variant : {"post", "pre"}
    tol : float, default 1e-10

    Returns
    -------
    ndarray, shape (L,)
    """
    stack, states, stream = _run(params, X, variant, False)
    return np.array([_norm(layer, st, stream[0].shape, tol)
                     for layer, st in zip(stack.layers, states, strict=True)])


@dataclass(frozen=True)
class Sensitivity:
    r"""Input sensitivity of random stacks at initialisation.

    Attributes
    ----------
    depths : ndarray, shape (D,)
    end_to_end : ndarray, shape (D, seeds)
        :math:`\|J\|_2` of the whole stack (with Pre-LN's final LayerNorm), exact
        up to a relative 1e-10 (:func:`stack_lipschitz`).
    relative : ndarray, shape (D, seeds)
        :math:`\|J\|_2\,\|X\|_F/\|F(X)\|_F`: the worst amplification of a
        *relative* input error into a relative output error.
    product : ndarray, shape (D, seeds)
        :math:`\prod_l \|J_l\|_2` (times the final LayerNorm's norm for Pre-LN,
        so that it bounds ``end_to_end``).
    layer_norms : ndarray, shape (seeds, max(depths))
        The per-layer :math:`\|J_l\|_2` of the deepest stack (exact, as
        :func:`layer_jacobian_norms`).
    """

    variant: str
    alpha: float
    depths: np.ndarray
    end_to_end: np.ndarray
    relative: np.ndarray
    product: np.ndarray
    layer_norms: np.ndarray


@single_threaded
def input_sensitivity(depths: Any, d: int = 16, *, variant: str, seeds: int = 3,
                      n_tokens: int = 8, alpha: float = 1.0) -> Sensitivity:
    r"""End-to-end local constants against products of per-layer ones, by depth.

    Models are :func:`lipattn.models.encoder.init_params` with seeds
    ``0, ..., seeds - 1`` (branches scaled by ``alpha``); inputs have i.i.d.
    :math:`N(0, 1)` entries. Every constant is exact up to a relative
    :math:`10^{-10}` (:func:`stack_lipschitz`, :func:`layer_jacobian_norms`; the
    final LayerNorm's in closed form).

    Parameters
    ----------
    depths : sequence of int
        Depths L >= 1.
    d : int
        Model dimension.
    variant : {"post", "pre"}
    seeds : int
    n_tokens : int
        Tokens N per input.
    alpha : float, default 1
        Residual-branch scale (:func:`scale_branches`).

    Returns
    -------
    Sensitivity
    """
    variant = _check_variant(variant)
    depths = np.array(as_counts(depths, "depths", 1, 1000, allow_scalar=True))
    d = as_count(d, "d", 3, 4096)
    seeds = as_count(seeds, "seeds", 1, 10**4)
    n_tokens = as_count(n_tokens, "n_tokens", 1, 4096)
    alpha = as_positive_float(alpha, "alpha")
    shape = (depths.size, seeds)
    e2e, rel, prod = np.zeros(shape), np.zeros(shape), np.zeros(shape)
    layer_norms = np.zeros((seeds, depths.max()))
    for i, L in enumerate(depths):
        for s in range(seeds):
            params = scale_branches(init_params(int(L), d, seed=s), alpha)
            X = np.random.default_rng([int(L), d, s]).standard_normal((n_tokens, d))
            stack, states, stream = _run(params, X, variant, True)
            e2e[i, s] = _norm(stack, states, X.shape, 1e-10)
            rel[i, s] = e2e[i, s] * np.linalg.norm(X) / np.linalg.norm(stream[-1])
            norms = np.array([_norm(stack.layers[l_], states[l_], X.shape, 1e-10)
                              for l_ in range(int(L))])
            final = 1.0
            if variant == "pre":  # the final LayerNorm acts token by token (closed form)
                final = float(layer_norm_jacobian_norm(stream[int(L)]).max())
            prod[i, s] = np.prod(norms) * final
            if L == depths.max():
                layer_norms[s] = norms
    return Sensitivity(variant, alpha, depths, e2e, rel, prod, layer_norms)
