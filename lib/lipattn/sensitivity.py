r"""How input perturbations propagate through a deep Transformer stack at initialisation.

A stack :math:`F = f_L \circ \dots \circ f_1` has the end-to-end Jacobian
:math:`J = J_L \cdots J_1` (chain rule, each :math:`J_l` taken at the state
entering layer :math:`l`), so

.. math:: \|J\|_2 \le \prod_{l=1}^L \|J_l\|_2 ,

the "product of per-layer Lipschitz constants". This module measures both
sides on the Post-LN and Pre-LN encoders of :mod:`lipattn.transformer`:
the end-to-end local constant :math:`\|J\|_2`, estimated from a dense Jacobian
by central differences of :func:`lipattn.transformer.forward` (all directions
in one batched call; not exact: its error is that of the differences, about
:math:`10^{-9}` relative on the audit's stacks), and the product of the layers'
own local constants, estimated the same way. The 2-norms of those Jacobians are
exact (dense SVD).

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

from ._blas import single_threaded
from ._validate import as_bool, as_choice, as_count, as_positive_float, as_real_array, as_step
from .transformer import check_params, forward, init_params, residual_stream, stack_params

__all__ = ["scale_branches", "stack_jacobian", "layer_jacobian_norms", "Sensitivity",
           "input_sensitivity"]

_VARIANTS = ("post", "pre")


def _check_variant(variant: Any) -> str:
    return as_choice(variant, "variant", _VARIANTS)


#: Largest N * d of the dense Jacobians: (N d)^2 entries, 2 N d forward passes.
MAX_JACOBIAN_SIDE = 2048


def _check_point(X: Any, h: Any) -> tuple[np.ndarray, float]:
    """X of shape (N, d) with N d <= MAX_JACOBIAN_SIDE, and a meaningful step h."""
    X = as_real_array(X, "X", ndim=2, last_axis_min=2)
    if X.size > MAX_JACOBIAN_SIDE:
        raise ValueError(f"X must have N * d <= {MAX_JACOBIAN_SIDE} for a dense Jacobian "
                         f"(memory grows as (N d)^2); got shape {X.shape}")
    return X, as_step(h, "h", float(np.max(np.abs(X))))


def scale_branches(params: Any, alpha: float) -> list[dict[str, Any]]:
    r"""The same model with both residual branches multiplied by ``alpha``.

    Multiplies :math:`W_O`, :math:`b_O`, :math:`W_2` and :math:`b_2` of every
    layer by :math:`\alpha`, so the attention and FFN outputs are multiplied
    by :math:`\alpha` exactly, for any parameters.

    Parameters
    ----------
    params : list of dict
        From :func:`lipattn.transformer.init_params`.
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


def _directions(N: int, d: int, h: float) -> np.ndarray:
    """The 2 N d central-difference perturbations, shape (2 N d, N, d)."""
    E = h * np.eye(N * d).reshape(N * d, N, d)
    return np.concatenate([E, -E])


def _from_differences(Y: np.ndarray, h: float) -> np.ndarray:
    """Dense Jacobian (out, in) from outputs at X + E and X - E, shape (2 n, ..., N, d)."""
    n = Y.shape[0] // 2
    diff = (Y[:n] - Y[n:]) / (2.0 * h)  # (n, ..., N, d)
    return np.moveaxis(diff.reshape(n, *diff.shape[1:-2], -1), 0, -1)


def stack_jacobian(params: Any, X: Any, *, variant: str, final_norm: bool = True,
                   h: float = 1e-5) -> np.ndarray:
    r"""Dense Jacobian of the stack's output with respect to its input.

    Central differences in every one of the :math:`Nd` input directions, run as
    one batch: an estimate, not the exact Jacobian. The truncation error is
    :math:`O(h^2)` and the rounding error :math:`O(\epsilon/h)`; at the default
    step, entries agree with a ten times smaller step to about :math:`10^{-9}`
    relative on the audit's stacks (depth up to 48).

    Parameters
    ----------
    params : list of dict
        One model (no leading run axis).
    X : array_like, shape (N, d)
    variant : {"post", "pre"}
    final_norm : bool, default True
        For ``"pre"``, whether to include the final LayerNorm (``False``: the
        residual stream after the last layer).
    h : float
        Step of the central differences: positive, and at least 1e-12 times the
        largest entry of ``X`` (if that exceeds 1), or only rounding noise is left.

    Returns
    -------
    ndarray, shape (N d, N d)
        :math:`\partial\,\mathrm{vec}\,F(X)/\partial\,\mathrm{vec}\,X`, row-major ``vec``.
    """
    check_params(params)
    variant = _check_variant(variant)
    final_norm = as_bool(final_norm, "final_norm")
    X, h = _check_point(X, h)
    Xb = X + _directions(*X.shape, h)
    if variant == "pre" and not final_norm:
        Y = residual_stream(params, Xb, variant=variant)[-1]
    else:
        Y = forward(params, Xb, variant=variant)
    return _from_differences(Y, h)


def layer_jacobian_norms(params: Any, X: Any, *, variant: str, h: float = 1e-5) -> np.ndarray:
    r"""Each layer's local constant :math:`\|J_l\|_2` along the stack's own states.

    Layer :math:`l` is evaluated at the state entering it (``residual_stream``);
    for Pre-LN the final LayerNorm is not part of any layer. All layers run as
    one batch (a leading run axis).

    Parameters
    ----------
    params : list of dict
    X : array_like, shape (N, d)
    variant : {"post", "pre"}
    h : float
        Step of the central differences, as in :func:`stack_jacobian`.

    Returns
    -------
    ndarray, shape (L,)
    """
    check_params(params)
    variant = _check_variant(variant)
    X, h = _check_point(X, h)
    if len(params) * X.size > 8 * MAX_JACOBIAN_SIDE:
        raise ValueError(f"params and X must have layers * N * d <= {8 * MAX_JACOBIAN_SIDE} "
                         f"(memory); got {len(params)} layers and X of shape {X.shape}")
    states = np.stack(residual_stream(params, X, variant=variant)[:-1])  # (L, N, d)
    layers = stack_params([[p] for p in params], batch_axes=1)
    Xb = states[:, None] + _directions(*X.shape, h)[None]  # (L, 2Nd, N, d)
    Y = residual_stream(layers, Xb, variant=variant)[-1]
    J = _from_differences(np.moveaxis(Y, 1, 0), h)  # (L, Nd, Nd)
    return np.linalg.norm(J, 2, axis=(-2, -1))


@dataclass(frozen=True)
class Sensitivity:
    r"""Input sensitivity of random stacks at initialisation.

    Attributes
    ----------
    depths : ndarray, shape (D,)
    end_to_end : ndarray, shape (D, seeds)
        :math:`\|J\|_2` of the whole stack (with Pre-LN's final LayerNorm), from
        the central-difference Jacobian of :func:`stack_jacobian`.
    relative : ndarray, shape (D, seeds)
        :math:`\|J\|_2\,\|X\|_F/\|F(X)\|_F`: the worst amplification of a
        *relative* input error into a relative output error.
    product : ndarray, shape (D, seeds)
        :math:`\prod_l \|J_l\|_2` (times the final LayerNorm's norm for Pre-LN,
        so that it bounds ``end_to_end``).
    layer_norms : ndarray, shape (seeds, max(depths))
        The per-layer :math:`\|J_l\|_2` of the deepest stack.
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

    Models are :func:`lipattn.transformer.init_params` with seeds
    ``0, ..., seeds - 1`` (branches scaled by ``alpha``); inputs have i.i.d.
    :math:`N(0, 1)` entries.

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
    from .layernorm import layer_norm_jacobian_norm

    variant = _check_variant(variant)
    if isinstance(depths, (str, bytes)) or np.ndim(depths) > 1 or np.size(depths) == 0:
        raise TypeError(f"depths must be an int or a non-empty sequence of ints; got {depths!r}")
    depths = np.array([as_count(L, f"depths[{i}]", 1, 1000)
                       for i, L in enumerate(np.atleast_1d(depths).tolist())])
    d = as_count(d, "d", 3, MAX_JACOBIAN_SIDE)
    seeds = as_count(seeds, "seeds", 1, 10**4)
    n_tokens = as_count(n_tokens, "n_tokens", 1, MAX_JACOBIAN_SIDE)
    if d * n_tokens > MAX_JACOBIAN_SIDE:
        raise ValueError(f"d * n_tokens must be at most {MAX_JACOBIAN_SIDE} (dense Jacobians); "
                         f"got d = {d}, n_tokens = {n_tokens}")
    alpha = as_positive_float(alpha, "alpha")
    shape = (depths.size, seeds)
    e2e, rel, prod = np.zeros(shape), np.zeros(shape), np.zeros(shape)
    layer_norms = np.zeros((seeds, depths.max()))
    for i, L in enumerate(depths):
        for s in range(seeds):
            params = scale_branches(init_params(int(L), d, seed=s), alpha)
            X = np.random.default_rng([int(L), d, s]).standard_normal((n_tokens, d))
            e2e[i, s] = np.linalg.norm(stack_jacobian(params, X, variant=variant), 2)
            rel[i, s] = e2e[i, s] * np.linalg.norm(X) / np.linalg.norm(
                forward(params, X, variant=variant))
            norms = layer_jacobian_norms(params, X, variant=variant)
            final = 1.0
            if variant == "pre":  # the final LayerNorm acts token by token
                last = residual_stream(params, X, variant=variant)[-1]
                final = float(layer_norm_jacobian_norm(last).max())
            prod[i, s] = np.prod(norms) * final
            if L == depths.max():
                layer_norms[s] = norms
    return Sensitivity(variant, alpha, depths, e2e, rel, prod, layer_norms)
