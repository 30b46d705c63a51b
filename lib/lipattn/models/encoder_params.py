r"""The parameters of the book's encoder (:mod:`lipattn.models.encoder`): their layout,
initialisation, validation and stacking.

A model's parameters are a list with one dict per layer, holding the arrays named in
:data:`PARAM_NAMES`, the int ``"heads"`` and optionally the bool ``"qk_norm"``
(absent: False); :func:`init_params` draws them, :func:`check_params` checks them
(errors name the entry, e.g. ``params[0]['b_1']``) and :func:`stack_params` stacks
several models along a leading "run" axis, which is how
:mod:`lipattn.models.training` trains many runs at once. :mod:`lipattn.models.encoder`
re-exports every name here: it is the encoder's one public interface.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._validate import as_count, as_real_array, as_seed

__all__ = ["PARAM_NAMES", "MATRICES", "init_params", "check_params", "stack_params"]


#: The arrays of one layer: attention weights and output bias, FFN weights and
#: biases, and the gains and biases of the layer's two LayerNorms (LN_1
#: before or after attention, LN_2 before or after the FFN).
PARAM_NAMES = ("W_Q", "W_K", "W_V", "W_O", "b_O", "W_1", "b_1", "W_2", "b_2",
               "ln1_g", "ln1_b", "ln2_g", "ln2_b")
#: The weight matrices, in the order the chapter's figures use.
MATRICES = ("W_Q", "W_K", "W_V", "W_O", "W_1", "W_2")
VARIANTS = ("post", "pre")
EPS = 1e-5
#: The entries of a layer's dict that are settings, not arrays.
SETTINGS = ("heads", "qk_norm")


def init_params(layers: int, d: int, *, heads: int = 1, d_ff: int | None = None,
                seed: int = 0, qk_norm: bool = False) -> list[dict[str, Any]]:
    r"""Xavier-uniform weights, zero biases, unit LayerNorm gains.

    Parameters
    ----------
    layers : int
        Number of layers L >= 1.
    d : int
        Model dimension, divisible by ``heads``.
    heads : int, default 1
        Number of attention heads; stored in every layer's dict as ``"heads"``.
    d_ff : int, optional
        Hidden width of the FFN; defaults to ``4 * d``.
    seed : int, default 0
        Seed of ``np.random.default_rng`` (an int >= 0).
    qk_norm : bool, default False
        Normalise each head's queries and keys (module docstring); stored as
        ``"qk_norm"`` in every layer's dict when True. The weights do not depend on it.

    The model must fit in memory: at most 1e8 weights in all.

    Returns
    -------
    params : list of ``layers`` dicts
        ``"W_Q"``, ``"W_K"``, ``"W_V"``, ``"W_O"``: shape (d, d);
        ``"W_1"``: (d, d_ff); ``"W_2"``: (d_ff, d); each entry uniform on
        :math:`\pm\sqrt{6/(\text{fan-in} + \text{fan-out})}`. ``"b_O"``, ``"b_2"``:
        zeros (d,); ``"b_1"``: zeros (d_ff,); ``"ln1_g"``, ``"ln2_g"``: ones (d,);
        ``"ln1_b"``, ``"ln2_b"``: zeros (d,). All float64.
    """
    layers = as_count(layers, "layers", 1)
    d = as_count(d, "d", 2)
    heads = as_count(heads, "heads", 1)
    if d % heads:
        raise ValueError(f"heads must divide d = {d}; got heads = {heads}")
    d_ff = 4 * d if d_ff is None else as_count(d_ff, "d_ff", 1)
    if not isinstance(qk_norm, (bool, np.bool_)):
        raise TypeError(f"qk_norm must be a bool; got {type(qk_norm).__name__}")
    if layers * d * (4 * d + 2 * d_ff) > 10**8:
        raise ValueError(f"layers, d, d_ff must give at most 1e8 weights (memory); got "
                         f"layers = {layers}, d = {d}, d_ff = {d_ff}")
    rng = np.random.default_rng(as_seed(seed))

    def xavier(m: int, n: int) -> np.ndarray:
        a = math.sqrt(6.0 / (m + n))
        return rng.uniform(-a, a, size=(m, n))

    params = []
    for _ in range(layers):
        p: dict[str, Any] = {k: xavier(d, d) for k in ("W_Q", "W_K", "W_V", "W_O")}
        p |= {"b_O": np.zeros(d), "W_1": xavier(d, d_ff), "b_1": np.zeros(d_ff),
              "W_2": xavier(d_ff, d), "b_2": np.zeros(d),
              "ln1_g": np.ones(d), "ln1_b": np.zeros(d),
              "ln2_g": np.ones(d), "ln2_b": np.zeros(d), "heads": heads}
        if qk_norm:
            p["qk_norm"] = True
        params.append(p)
    return params


# ---------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------
def check_params(params: Any, name: str = "params") -> int:
    """Check the structure, shapes and entries of ``params``; return the model dimension d.

    Every array must be a finite real array (float or int; not bool, complex,
    str or object); errors name the entry, e.g. ``params[0]['b_1']``.
    """
    if not isinstance(params, (list, tuple)) or not params or not all(
            isinstance(p, dict) for p in params):
        raise TypeError(f"{name} must be a non-empty list of dicts from init_params; got "
                        f"{type(params).__name__}")
    W_Q0 = as_real_array(params[0].get("W_Q", np.zeros((0, 0))), f"{name}[0]['W_Q']",
                         min_ndim=2)
    d = W_Q0.shape[-1]
    for i, p in enumerate(params):
        missing = [k for k in (*PARAM_NAMES, "heads") if k not in p]
        if missing:
            raise ValueError(f"{name}[{i}] is missing {missing}")
        for k in PARAM_NAMES:
            as_real_array(p[k], f"{name}[{i}][{k!r}]")
        heads = p["heads"]
        if isinstance(heads, bool) or not isinstance(heads, (int, np.integer)) or heads < 1 \
                or d % heads:
            raise ValueError(f"{name}[{i}]['heads'] must be a positive int dividing d = {d}; "
                             f"got {heads!r}")
        if not isinstance(p.get("qk_norm", False), (bool, np.bool_)):
            raise TypeError(f"{name}[{i}]['qk_norm'] must be a bool; got "
                            f"{type(p['qk_norm']).__name__}")
        d_ff = np.shape(p["W_1"])[-1]
        want = {"W_Q": (d, d), "W_K": (d, d), "W_V": (d, d), "W_O": (d, d), "b_O": (d,),
                "W_1": (d, d_ff), "b_1": (d_ff,), "W_2": (d_ff, d), "b_2": (d,),
                "ln1_g": (d,), "ln1_b": (d,), "ln2_g": (d,), "ln2_b": (d,)}
        for k, shape in want.items():
            got = np.shape(p[k])
            if got[len(got) - len(shape):] != shape or len(got) < len(shape):
                raise ValueError(f"{name}[{i}][{k!r}] must have trailing shape {shape}; "
                                 f"got shape {got}")
    return d


def stack_params(models: Any, *, batch_axes: int = 0) -> list[dict[str, Any]]:
    """Stack several models' params along a new leading "run" axis.

    Parameters
    ----------
    models : sequence of params
        Same layers and shapes each.
    batch_axes : int, default 0
        Singleton axes inserted after the run axis, so that weights of shape
        (R, 1, ..., d, d) broadcast against X of shape (R, B, ..., N, d).

    Returns
    -------
    params : list of dict
        Matrices of shape (R, *(1,) * batch_axes, m, n); vectors (biases and
        gains) of shape (R, *(1,) * batch_axes, 1, n), so that they broadcast
        over the token axis too.
    """
    if not isinstance(models, (list, tuple)) or not models:
        raise TypeError("models must be a non-empty sequence of params")
    for i, m in enumerate(models):
        check_params(m, f"models[{i}]")
    batch_axes = as_count(batch_axes, "batch_axes", 0, 32)
    if len({len(m) for m in models}) != 1:
        raise ValueError("models must all have the same number of layers; got "
                         f"{[len(m) for m in models]}")
    for l_, layer in enumerate(zip(*models, strict=True)):
        for k in SETTINGS:
            vals = [p.get(k, False) if k == "qk_norm" else int(p[k]) for p in layer]
            if len(set(vals)) != 1:
                raise ValueError(f"models must have the same {k} in each layer; got {k} = "
                                 f"{vals} in layer {l_}")
    out = []
    for layer in zip(*models, strict=True):
        p: dict[str, Any] = {k: layer[0][k] for k in SETTINGS if k in layer[0]}
        for k in PARAM_NAMES:
            a = np.stack([q[k] for q in layer])
            extra = batch_axes + (a.ndim == 2)  # vectors also skip the token axis
            p[k] = a.reshape(a.shape[:1] + (1,) * extra + a.shape[1:])
        out.append(p)
    return out
