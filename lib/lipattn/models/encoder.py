r"""A small Transformer encoder in numpy, Post-LN and Pre-LN, built from :mod:`lipattn.layers`.

A teaching implementation, not a framework: every layer's forward pass, Jacobian
products and parameter gradients are those of :mod:`lipattn.layers`
(:func:`as_layers` is the stack); this module holds the wrappers that record the
residual stream, and is the encoder's one public interface: it re-exports the
parameters' layout, initialisation and validation from
:mod:`lipattn.models.encoder_params`. Tokens are rows: the hidden
states of a sequence are :math:`X \in \mathbb R^{N \times d}`. One layer is

- *attention*: per head :math:`h`, :math:`P_h = \operatorname{softmax}\bigl(
  H W_Q^{(h)} (H W_K^{(h)})^\top/\sqrt{d_h}\bigr)` (rows; bidirectional, no
  mask), :math:`A = [P_1 H W_V^{(1)}, \dots] W_O + b_O`, where the head
  blocks :math:`W_Q^{(h)}` are consecutive column blocks of width
  :math:`d_h = d/\text{heads}` (scores, softmax and :math:`P V`, and their
  derivatives with respect to Q, K, V, are
  :func:`lipattn.layers.attention.attention_core` and its vjp, shared with
  :class:`~lipattn.layers.MultiHeadAttention`; this module adds the projections
  and the weight gradients);
- *FFN*: :math:`F = \operatorname{relu}(H W_1 + b_1) W_2 + b_2`;
- *LayerNorm* with gain and bias, :math:`\mathrm{LN}_{g,b}(x) = g \odot
  \mathrm{LN}(x) + b` (:mod:`lipattn.layernorm`, :math:`\varepsilon = 10^{-5}`);
- optionally *QK-norm* (a layer's ``"qk_norm": True``): every head's query and
  key rows are replaced by :math:`\mathrm{LN}(q)`, :math:`\mathrm{LN}(k)` over
  their :math:`d_h` entries (unit gain, no bias, the same :math:`\varepsilon`)
  before the scores, so that every logit is at most :math:`\sqrt{d_h}` in size.

The two variants (:cite:t:`xiong2020layer`):

- ``"post"``: :math:`X \leftarrow \mathrm{LN}_1(X + A(X))`, then
  :math:`X \leftarrow \mathrm{LN}_2(X + F(X))`;
- ``"pre"``: :math:`X \leftarrow X + A(\mathrm{LN}_1(X))`, then
  :math:`X \leftarrow X + F(\mathrm{LN}_2(X))`, and after the last layer a final
  LayerNorm *without* gain or bias.

Parameters are a list with one dict per layer, holding the arrays named in
:data:`PARAM_NAMES`, the int ``"heads"`` and optionally the bool ``"qk_norm"``
(absent: False). Every array may carry extra
leading axes that broadcast against the batch axes of ``X`` (numpy matmul
rules): weights of shape ``(R, 1, d, d)`` and ``X`` of shape ``(R, B, N, d)``
run ``R`` independent models on ``B`` sequences each, which is how
:mod:`lipattn.models.training` trains many runs at once. Gradients are summed over
the axes a parameter is broadcast along, so they have the parameter's shape.
Computations run in numpy's promoted dtype of ``X`` and the parameters:
float32 when both are float32 (as in training), float64 otherwise.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validate import as_bool, as_choice, as_real_array, as_seed, as_step
from ..collapse import relative_residual
from ..layers import MLP, LayerNorm, MultiHeadAttention, Residual, Sequential, attention_logits
from .encoder_params import (
    EPS,
    MATRICES,
    PARAM_NAMES,
    SETTINGS,
    VARIANTS,
    check_params,
    init_params,
    stack_params,
)

__all__ = ["PARAM_NAMES", "MATRICES", "init_params", "forward", "backward", "as_layers",
           "residual_stream", "attention_inputs", "token_diversity", "check_params", "stack_params",
           "gradient_check"]


def _check(params: Any, X: Any, variant: Any) -> np.ndarray:
    as_choice(variant, "variant", VARIANTS)
    d = check_params(params)
    checked = as_real_array(X, "X", min_ndim=2)
    if checked.shape[-1] != d:
        raise ValueError(f"X must have shape (..., N, d) with d = {d} to match params; "
                         f"got shape {checked.shape}")
    return X if isinstance(X, np.ndarray) and X.dtype == np.float32 else checked


# ---------------------------------------------------------------------------
# the encoder as a Sequential of lipattn.layers
# ---------------------------------------------------------------------------
def _overflow(dtype) -> str:
    return ("params and X must keep the attention logits finite; they overflow the "
            f"{np.dtype(dtype)} range (X or the hidden states are too large for this variant; "
            "only Pre-LN normalises them before attention)")


def _dtype(params: Any) -> np.dtype:
    """The dtype the layers compute in for float32 or float64 inputs: the parameters'."""
    return np.result_type(*(np.asarray(p[k]).dtype for p in params for k in PARAM_NAMES),
                          np.float32)


def _attention(p: dict[str, Any], dtype, copy_transposes: bool = True) -> MultiHeadAttention:
    """Layer l's attention sublayer (with its unit-gain QK-LayerNorms if ``qk_norm``)."""
    heads = int(p["heads"])
    norms = {}
    if p.get("qk_norm", False):
        norms = {k: LayerNorm(None, None, EPS) for k in ("q_norm", "k_norm")}
    attn = MultiHeadAttention(p["W_Q"], p["W_K"], p["W_V"], p["W_O"], n_head=heads,
                              b_O=p["b_O"], **norms)
    attn.overflow = _overflow(dtype)
    attn.copy_transposes = copy_transposes
    return attn


def _block(p: dict[str, Any], variant: str, dtype, copy_transposes: bool) -> Sequential:
    """Layer l: ``"post"`` [Residual(attn), ln1, Residual(ffn), ln2]; ``"pre"``
    [Residual([ln1, attn]), Residual([ln2, ffn])]. Parameter keys end in
    ``attn.W_Q``, ``ln1.g``, ``ffn.W_1``, ... (see :func:`_param_name`)."""
    attn = _attention(p, dtype, copy_transposes)
    ffn = MLP(p["W_1"], p["b_1"], p["W_2"], p["b_2"], act="relu")
    ln1, ln2 = (LayerNorm(p[f"ln{j}_g"], p[f"ln{j}_b"], EPS) for j in (1, 2))
    if variant == "post":
        return Sequential([Residual(attn), ln1, Residual(ffn), ln2],
                          names=["attn", "ln1", "ffn", "ln2"])
    return Sequential([Residual(Sequential([ln1, attn], names=["ln1", "attn"])),
                       Residual(Sequential([ln2, ffn], names=["ln2", "ffn"]))],
                      names=["a", "f"])


def _model(params: Any, variant: str, *, final_norm: bool = True, dtype: Any = None,
           copy_transposes: bool = True) -> Sequential:
    """The encoder: layer l is element l (a :func:`_block`), then for ``"pre"`` (and
    ``final_norm``) the final LayerNorm without gain or bias (``"final"``). The
    layers hold the arrays of ``params`` themselves. ``dtype``: the computation's
    dtype, named in the overflow message (default: the parameters'). ``copy_transposes``:
    the attention layers' (False where each forward pass is differentiated once)."""
    dtype = _dtype(params) if dtype is None else dtype
    out = [_block(p, variant, dtype, copy_transposes) for p in params]
    names = [str(i) for i in range(len(params))]
    if variant == "pre" and final_norm:
        out.append(LayerNorm(None, None, EPS))
        names.append("final")
    return Sequential(out, names=names)


def _param_name(key: str) -> str:
    """A block's parameter key -> its name in PARAM_NAMES."""
    parts = key.split(".")
    owner, leaf = parts[-2], parts[-1]
    return f"{owner}_{leaf}" if owner.startswith("ln") else leaf


def _to_caches(states: list, variant: str) -> tuple:
    """Block states -> (attention, LN_1, FFN, LN_2) states: ``[0][0]`` is the
    attention's input H, ``[0][1]`` its core, ``[1][1]``/``[3][1]`` the LNs' 1/s."""
    if variant == "post":
        return tuple(states)
    (cl1, ca), (cl2, cf) = states
    return ca, cl1, cf, cl2


def _from_caches(cache: tuple, variant: str) -> list:
    ca, cl1, cf, cl2 = cache
    return list(cache) if variant == "post" else [[cl1, ca], [cl2, cf]]


def _run(model: Sequential, X: np.ndarray, variant: str, keep: bool = True):
    """Forward pass of :func:`_model`'s encoder; returns (out, caches, stream) with
    ``caches = (layer caches or [], final LN state or None)`` and ``stream[l]`` the
    input of layer l (the last entry: the output of the last layer, before the final
    LayerNorm)."""
    L = len(model.layers) - (model.names[-1] == "final")
    caches, stream = [], []
    for block in model.layers[:L]:
        stream.append(X)
        X, st = block.forward(X)
        if keep:
            caches.append(_to_caches(st, variant))
    stream.append(X)
    final = None
    if L < len(model.layers):
        X, final = model.layers[L].forward(X)
    return X, (caches, final), stream


def _run_backward(model: Sequential, caches, grad_out: np.ndarray, variant: str,
                  settings: list[dict[str, Any]]):
    """Returns (grads, grad_X, dstream) for :func:`_run`'s caches: grads in
    PARAM_NAMES (plus ``settings[l]``), dstream[l] the gradient at stream[l]."""
    layer_caches, final = caches
    L = len(layer_caches)
    dX = grad_out
    if final is not None:
        dX = model.layers[L].vjp(final, dX)
    grads: list[dict[str, Any]] = [{} for _ in range(L)]
    dstream = [dX]
    for l_ in range(L - 1, -1, -1):
        dX, g = model.layers[l_].backward(_from_caches(layer_caches[l_], variant), dX)
        named = {_param_name(k): v for k, v in g.items()}
        grads[l_] = {k: named[k] for k in PARAM_NAMES} | settings[l_]
        dstream.append(dX)
    return grads, dX, dstream[::-1]


def _settings(params) -> list[dict[str, Any]]:
    return [{k: p[k] for k in SETTINGS if k in p} for p in params]


def _forward(params, X, variant, keep=True):
    """Forward pass; returns (out, caches, stream) with stream[l] the input of layer l."""
    model = _model(params, variant, dtype=np.result_type(X, _dtype(params)),
                   copy_transposes=False)
    return _run(model, X, variant, keep)


def _attn_fwd(H, p):
    """Layer ``p``'s attention sublayer at its input H: (output, state)."""
    return _attention(p, np.result_type(H, _dtype([p]))).forward(H)


def _attn_logits(cache):
    """The logits S (..., heads, N, N) of a forward pass, recomputed from its cache."""
    core = cache[1]
    return attention_logits(core.Q, core.K, scale=core.scale)


def _finite(arrays, what: str):
    """Raise a clear error unless every array is finite (after an overflow)."""
    for a in arrays:
        if not np.all(np.isfinite(a)):
            raise ValueError(f"params and X must keep the {what} finite; they overflow the "
                             f"{a.dtype} range (expected weights and inputs of moderate size)")


def _forward_checked(params, X, variant, keep=True):
    """:func:`_forward` for the public functions: overflow becomes a clear ValueError
    instead of warnings and inf/NaN outputs (training calls ``_forward`` itself)."""
    with np.errstate(over="ignore", invalid="ignore"):
        out = _forward(params, X, variant, keep)
    _finite([out[0], *out[2]], "hidden states")
    return out


def _backward(params, caches, grad_out, variant):
    """Returns (grads, grad_X, dstream): dstream[l] is the gradient at stream[l]."""
    return _run_backward(_model(params, variant, copy_transposes=False), caches, grad_out,
                         variant, _settings(params))


# ---------------------------------------------------------------------------
# public API
# ---------------------------------------------------------------------------
def forward(params: Any, X: Any, *, variant: str) -> np.ndarray:
    """The encoder's output.

    Parameters
    ----------
    params : list of dict
        From :func:`init_params` (arrays may carry broadcasting leading axes).
    X : array_like, shape (..., N, d)
        Input tokens as rows, finite.
    variant : {"post", "pre"}

    Returns
    -------
    Y : ndarray, shape (..., N, d)
        The last layer's output; for ``"pre"``, after the final LayerNorm.
        float32 if ``X`` and the parameters are float32, else float64.

    Raises
    ------
    TypeError, ValueError
        Bad ``params`` (naming the entry, e.g. ``params[0]['b_1']``), ``X`` or
        ``variant``; and a ValueError where the attention logits or the hidden
        states overflow the dtype. Pre-LN handles ``X`` of any size within the range (its LayerNorms
        rescale rows whose squares would overflow); Post-LN's logits grow like
        ``|X|^2``, so it raises for ``|X|`` beyond about 1e154.
    """
    X = _check(params, X, variant)
    return _forward_checked(params, X, variant, keep=False)[0]


def backward(params: Any, X: Any, grad_out: Any, *, variant: str
             ) -> tuple[list[dict[str, Any]], np.ndarray]:
    r"""Gradients of a loss :math:`\ell(\text{forward}(X))`, by the layers' ``backward``.

    Parameters
    ----------
    params : list of dict
    X : array_like, shape (..., N, d)
    grad_out : array_like, shape (..., N, d)
        :math:`\partial\ell/\partial Y` at :math:`Y = ` ``forward(params, X)``.
    variant : {"post", "pre"}

    Returns
    -------
    grads : list of dict
        :math:`\partial\ell/\partial\theta` with the keys and shapes of ``params``
        (``"heads"`` and ``"qk_norm"`` copied).
    grad_X : ndarray, shape (..., N, d)
        :math:`\partial\ell/\partial X`.
    """
    X = _check(params, X, variant)
    G = as_real_array(grad_out, "grad_out", min_ndim=2)
    _, caches, _ = _forward_checked(params, X, variant)
    if G.shape != X.shape:
        raise ValueError(f"grad_out must have the output's shape {X.shape}; got {G.shape}")
    with np.errstate(over="ignore", invalid="ignore"):
        grads, gX = _backward(params, caches, G.astype(X.dtype, copy=False), variant)[:2]
    _finite([gX, *(g[k] for g in grads for k in PARAM_NAMES)], "gradients")
    return grads, gX


def as_layers(params: Any, variant: str, *, final_norm: bool = True) -> Any:
    r"""The encoder as a :class:`lipattn.layers.Sequential` of the library's layers.

    Layer l is a :class:`~lipattn.layers.Sequential` of
    :class:`~lipattn.layers.Residual`, :class:`~lipattn.layers.LayerNorm`,
    :class:`~lipattn.layers.MultiHeadAttention` (bidirectional, ``heads`` heads,
    output bias ``b_O``, and with ``qk_norm`` the unit-gain per-head LayerNorms
    as its ``q_norm``, ``k_norm``) and :class:`~lipattn.layers.MLP` (ReLU):

    - ``"post"``: ``[Residual(attention), LN_1, Residual(FFN), LN_2]``, named
      ``attn, ln1, ffn, ln2``;
    - ``"pre"``: ``[Residual(Sequential([LN_1, attention])),
      Residual(Sequential([LN_2, FFN]))]``, named ``a, f`` (and within them
      ``ln1, attn`` and ``ln2, ffn``).

    This *is* the encoder: :func:`forward` and :func:`backward` run these layers
    (their forward passes, and their ``backward`` for the parameter gradients),
    so ``as_layers(params, variant).forward(X)[0]`` equals :func:`forward` bit for
    bit, and the layers' jvp and vjp are the encoder's exact Jacobian products
    with respect to X.

    Parameters
    ----------
    params : list of dict
        One model from :func:`init_params`: matrices (d, d), (d, d_ff),
        (d_ff, d) and vectors, without leading run axes.
    variant : {"post", "pre"}
    final_norm : bool, default True
        For ``"pre"``, append the final LayerNorm (no gain or bias) as the last
        element; ``False`` ends at the residual stream. Ignored for ``"post"``.

    Returns
    -------
    Sequential
        ``.layers`` holds the L layers in order, then (``"pre"``,
        ``final_norm``) the final LayerNorm. Float64 unless the parameters are
        float32 arrays (then the layers compute in float32).
    """
    as_choice(variant, "variant", VARIANTS)
    final_norm = as_bool(final_norm, "final_norm")
    check_params(params)
    for i, p in enumerate(params):
        for k in PARAM_NAMES:
            if np.ndim(p[k]) != (2 if k.startswith("W_") else 1):
                raise ValueError(f"params[{i}][{k!r}] must have no leading run axes (one "
                                 f"model); got shape {np.shape(p[k])}")
    return _model(params, variant, final_norm=final_norm)


def residual_stream(params: Any, X: Any, *, variant: str) -> list[np.ndarray]:
    """The hidden states between layers.

    Returns
    -------
    stream : list of L + 1 ndarrays, shape (..., N, d)
        ``stream[0]`` is ``X`` and ``stream[l]`` the output of layer ``l``; for
        ``"pre"`` the last entry is *before* the final LayerNorm, so it shows the
        residual stream's growth.
    """
    X = _check(params, X, variant)
    return _forward_checked(params, X, variant, keep=False)[2]


def attention_inputs(params: Any, X: Any, *, variant: str) -> list[np.ndarray]:
    r"""The input :math:`H` of each layer's attention sublayer.

    For ``"pre"``, :math:`H = \mathrm{LN}_1(X_l)` (gain and bias included);
    for ``"post"``, :math:`H = X_l`, the residual stream entering layer
    :math:`l`. The sublayer then outputs
    ``self_attention(H, W_Q, W_K, W_V @ W_O) + b_O`` when ``heads == 1``.

    Parameters
    ----------
    params : list of dict
    X : array_like, shape (..., N, d)
    variant : {"post", "pre"}

    Returns
    -------
    inputs : list of L ndarrays, shape (..., N, d)
    """
    X = _check(params, X, variant)
    return [layer[0][0] for layer in _forward_checked(params, X, variant)[1][0]]


def gradient_check(params: Any, X: Any, *, variant: str, seed: int = 0,
                   h: float = 1e-6) -> float:
    """Largest error of :func:`backward` against central finite differences.

    The loss is a random linear read-out ``sum(G * forward(params, X))``; every
    entry of every parameter and of ``X`` is perturbed by ``±h`` (cost: two
    forward passes per entry, so use a tiny model: at most 1e5 entries).

    Parameters
    ----------
    params : list of dict
    X : array_like, shape (..., N, d)
    variant : {"post", "pre"}
    seed : int, default 0
        Seed of the read-out ``G`` (an int >= 0).
    h : float, default 1e-6
        The finite-difference step: positive, and at least 1e-12 times the
        largest entry of ``params`` and ``X`` (if that exceeds 1), since a smaller
        step leaves only rounding noise.

    Returns
    -------
    float
        max |backward - finite difference| over all entries, divided by the
        largest gradient entry (not divided when every gradient entry is 0).
    """
    X = np.array(_check(params, X, variant), dtype=float)
    seed = as_seed(seed)
    size = X.size + sum(np.size(p[k]) for p in params for k in PARAM_NAMES)
    if size > 10**5:
        raise ValueError(f"params and X must have at most 1e5 entries in all for "
                         f"gradient_check (two forward passes each); got {size}")
    big = max(float(np.max(np.abs(X))),
              *(float(np.max(np.abs(p[k]), initial=0.0)) for p in params for k in PARAM_NAMES))
    h = as_step(h, "h", big)
    G = np.random.default_rng(seed).standard_normal(X.shape)
    params = [{k: (v if k in SETTINGS else np.array(v, dtype=float)) for k, v in p.items()}
              for p in params]
    grads, gX = backward(params, X, G, variant=variant)
    pairs = [(p[k], g[k]) for p, g in zip(params, grads, strict=True) for k in PARAM_NAMES]
    worst, scale = 0.0, 0.0
    for arr, g in [*pairs, (X, gX)]:
        for idx in np.ndindex(arr.shape):
            old = arr[idx]
            arr[idx] = old + h
            up = np.sum(G * _forward(params, X, variant, keep=False)[0])
            arr[idx] = old - h
            down = np.sum(G * _forward(params, X, variant, keep=False)[0])
            arr[idx] = old
            worst = max(worst, abs((up - down) / (2 * h) - g[idx]))
        scale = max(scale, float(np.abs(g).max()))
    return worst / scale if scale > 0 else worst


def token_diversity(X: Any) -> np.ndarray:
    r"""Relative distance from rank one, :math:`\|X - \mathbf 1\bar x^\top\|_F/\|X\|_F`.

    The relative residual of the rank-collapse chapter, under the name this
    chapter uses: :func:`lipattn.collapse.relative_residual`.

    Parameters
    ----------
    X : array_like, shape (..., N, d)
        Tokens as rows; :math:`\bar x` is the mean token.

    Returns
    -------
    ratio : ndarray, shape (...)
        In [0, 1]: 0 when every token is the same, 1 when the mean token is 0.
        0 for an all-zero X.
    """
    return relative_residual(X)
