r"""Experiments of the Pre-LN vs Post-LN chapter: gradients at initialisation,
depth scaling, and the amplification effect.

Every experiment draws ``seeds`` independent models (``init_params`` with
seeds ``0, 1, ...``) and inputs with i.i.d. :math:`N(0, 1)` entries, and runs
them as one batch (a leading seed axis). The loss at initialisation is a
random linear read-out :math:`\ell = \langle G, Y\rangle` with
:math:`G_{ij} \sim N(0, 1)`, so ``grad_out = G``: it exercises every output
direction equally and has no preferred scale.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .._blas import single_threaded
from .._validate import (
    as_choice,
    as_count,
    as_counts,
    as_positive_float,
    as_real_array,
    scale_of,
)
from ..models.encoder import MATRICES, _backward, _forward, init_params, stack_params
from ..models.training import TrainResult

__all__ = ["InitProfile", "init_profile", "last_layer_gradients", "fit_power",
           "fit_log", "amplification", "encoder_layer", "layer_jacobian_norms",
           "scaled_updates", "intervention_runs"]


@dataclass
class InitProfile:
    r"""Per-layer statistics at initialisation, one row per seed.

    Attributes
    ----------
    grad : ndarray, shape (seeds, L, 6)
        Frobenius norm of the gradient of each weight matrix, in the order of
        :data:`lipattn.models.encoder.MATRICES`.
    second_moment : ndarray, shape (seeds, L + 1)
        Mean squared entry of the residual stream entering each layer (and, last,
        of the final stream, before Pre-LN's final LayerNorm).
    diversity : ndarray, shape (seeds, L + 1)
        Token diversity of the same states.
    stream_grad : ndarray, shape (seeds, L + 1)
        Frobenius norm of the loss gradient with respect to those states.
    inv_s : ndarray, shape (seeds, L, 2)
        :math:`1/s = \|J\|_2` of the two LayerNorms of each layer (their
        Jacobian norm without gain, :mod:`lipattn.layernorm`), mean over tokens.
    final_inv_s : ndarray, shape (seeds,)
        The same for Pre-LN's final LayerNorm (NaN-free; zeros for Post-LN).
    """

    variant: str
    grad: np.ndarray
    second_moment: np.ndarray
    diversity: np.ndarray
    stream_grad: np.ndarray
    inv_s: np.ndarray
    final_inv_s: np.ndarray


def _check_counts(layers: int, d: int, seeds: int, n_tokens: int) -> tuple[int, int, int, int]:
    """Validate the sizes of a batch of models; at most 5e8 weights and 5e8 activations
    (4 GB each in float64: Chapter 4's largest batch, 48 models of 48 layers at d = 64,
    holds 1.1e8 weights)."""
    layers = as_count(layers, "layers", 1)
    d = as_count(d, "d", 2)
    seeds = as_count(seeds, "seeds", 1)
    n_tokens = as_count(n_tokens, "n_tokens", 1)
    cap = 5 * 10**8
    if seeds * layers * 12 * d * d > cap or seeds * layers * n_tokens * max(n_tokens, 4 * d) \
            > cap:
        raise ValueError(f"layers, d, seeds, n_tokens must give at most 5e8 weights and "
                         f"activations (memory); got layers = {layers}, d = {d}, "
                         f"seeds = {seeds}, n_tokens = {n_tokens}")
    return layers, d, seeds, n_tokens


def _check_depths(depths) -> list[int]:
    return as_counts(depths, "depths", 1)


def _models(layers: int, d: int, seeds: int, heads: int) -> list[dict]:
    return stack_params([init_params(layers, d, heads=heads, seed=s) for s in range(seeds)])


def _inputs(layers: int, d: int, seeds: int, n_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """The inputs X and read-out weights G of :func:`init_profile` (one draw per seed)."""
    rng = np.random.default_rng([layers, d, n_tokens])
    return rng.standard_normal((seeds, n_tokens, d)), rng.standard_normal((seeds, n_tokens, d))


@single_threaded
def init_profile(layers: int, d: int, variant: str, *, seeds: int = 8, n_tokens: int = 16,
                 heads: int = 1) -> InitProfile:
    """Gradient norms, residual-stream size and token diversity at initialisation.

    Parameters
    ----------
    layers, d : int
        Depth L and model dimension.
    variant : {"post", "pre"}
    seeds : int
        Independent models (and inputs).
    n_tokens : int
        Tokens N per input.

    Returns
    -------
    InitProfile
    """
    from ..models.encoder import token_diversity
    layers, d, seeds, n_tokens = _check_counts(layers, d, seeds, n_tokens)
    as_choice(variant, "variant", ("post", "pre"))
    P = _models(layers, d, seeds, heads)
    X, G = _inputs(layers, d, seeds, n_tokens)
    _, caches, stream = _forward(P, X, variant)
    grads, _, dstream = _backward(P, caches, G, variant)
    gn = np.stack([[np.linalg.norm(g[k], axis=(-2, -1)) for k in MATRICES] for g in grads])
    layer_caches, final = caches
    inv_s = np.array([[c[1][1].mean(axis=(-2, -1)), c[3][1].mean(axis=(-2, -1))]
                      for c in layer_caches])  # (L, 2, seeds)
    final_inv_s = final[1].mean(axis=(-2, -1)) if final is not None else np.zeros(seeds)
    return InitProfile(
        variant, np.moveaxis(gn, -1, 0),
        np.stack([np.mean(x**2, axis=(-2, -1)) for x in stream], axis=1),
        np.stack([token_diversity(x) for x in stream], axis=1),
        np.stack([np.linalg.norm(g, axis=(-2, -1)) for g in dstream], axis=1),
        np.moveaxis(inv_s, -1, 0), final_inv_s)


def last_layer_gradients(depths, d: int, *, seeds: int = 8, matrix: str = "W_2",
                         n_tokens: int = 16) -> dict[str, np.ndarray]:
    """The last layer's gradient norm for each depth and both variants.

    Returns
    -------
    dict
        ``"post"``, ``"pre"`` -> ndarray, shape (len(depths), seeds).
    """
    j = MATRICES.index(as_choice(matrix, "matrix", MATRICES))
    depths = _check_depths(depths)
    for L in depths:
        _check_counts(L, d, seeds, n_tokens)
    return {v: np.array([init_profile(L, d, v, seeds=seeds, n_tokens=n_tokens).grad[:, -1, j]
                         for L in depths]) for v in ("post", "pre")}


def _check_fit(x, y, *, y_positive: bool) -> tuple[np.ndarray, np.ndarray]:
    """x, y as finite 1-D arrays of one shape, at least 3 points, x > 0 with at
    least two distinct values (otherwise no slope is defined), y > 0 if asked."""
    x = as_real_array(x, "x", ndim=1)
    y = as_real_array(y, "y", ndim=1)
    if y.shape != x.shape:
        raise ValueError(f"y must have the shape of x, {x.shape}; got shape {y.shape}")
    if x.size < 3:
        raise ValueError(f"x must have at least 3 points for a fit with a standard error; "
                         f"got {x.size}")
    if np.any(x <= 0):
        raise ValueError("x must be positive (it is fitted on a log scale); got "
                         f"{float(x[x <= 0][0])!r}")
    if np.all(x == x[0]):
        raise ValueError(f"x must have at least two distinct values, or no slope is defined; "
                         f"got every entry {float(x[0])!r}")
    if y_positive and np.any(y <= 0):
        raise ValueError("y must be positive (it is fitted on a log scale); got "
                         f"{float(y[y <= 0][0])!r}")
    return x, y


def fit_power(x, y) -> tuple[float, float, float]:
    r"""Least-squares fit of :math:`\log y = a + b \log x`.

    Parameters
    ----------
    x, y : array_like, shape (n,)
        Finite and positive, n >= 3, with at least two distinct ``x``.

    Returns
    -------
    b, a, se_b : float
        Exponent, intercept and the exponent's standard error.
    """
    x, y = _check_fit(x, y, y_positive=True)
    lx, ly = np.log(x), np.log(y)
    A = np.stack([np.ones_like(lx), lx], axis=1)
    coef, res, *_ = np.linalg.lstsq(A, ly, rcond=None)
    sigma2 = float(res[0]) / (lx.size - 2) if res.size else 0.0
    se = float(np.sqrt(sigma2 / np.sum((lx - lx.mean()) ** 2)))
    return float(coef[1]), float(coef[0]), se


def fit_log(x, y) -> tuple[float, float, float]:
    r"""Least-squares fit of :math:`y = a + b \ln x`.

    Parameters
    ----------
    x : array_like, shape (n,)
        Finite and positive, n >= 3, with at least two distinct values.
    y : array_like, shape (n,)
        Finite, with a positive mean.

    Returns
    -------
    b, a, rel : float
        Slope, intercept, and the r.m.s. residual divided by the mean of ``y``.
    """
    x, y = _check_fit(x, y, y_positive=False)
    c = scale_of(y)  # fit y / c (a power of two: exact), so that no square overflows
    ys = y / c
    if not np.mean(ys) > 0:
        raise ValueError(f"y must have a positive mean (the residual is relative to it); "
                         f"got mean {float(np.mean(ys)) * c!r}")
    lx = np.log(x)
    A = np.stack([np.ones_like(lx), lx], axis=1)
    coef, *_ = np.linalg.lstsq(A, ys, rcond=None)
    rel = float(np.sqrt(np.mean((A @ coef - ys) ** 2)) / np.mean(ys))
    return float(coef[1]) * c, float(coef[0]) * c, rel


@single_threaded
def amplification(depths, d: int, *, seeds: int = 8, size: float = 1e-3,
                  kind: str = "sign", n_tokens: int = 16, directions: int = 4
                  ) -> dict[str, np.ndarray]:
    r"""Output change under a small perturbation of every weight matrix.

    Each weight matrix :math:`W` (the six of every layer; not biases or gains)
    moves by :math:`\Delta W = -\eta\, S` with :math:`\eta` = ``size`` and

    - ``kind="sign"``: :math:`S = \operatorname{sign}(\partial\ell/\partial W)`,
      the first step of Adam with learning rate :math:`\eta` on the random
      read-out loss :math:`\ell`;
    - ``kind="random"``: :math:`S` with i.i.d. :math:`\pm 1` entries, the same
      size in a random direction.

    Parameters
    ----------
    depths : sequence of int
    d : int
    seeds : int
    size : float
        :math:`\eta`, the change of every entry, in (0, 1]. For Xavier-uniform weights
        the relative change is :math:`\eta` over the entries' r.m.s., i.e.
        :math:`\eta\sqrt d` for a d x d matrix and :math:`\eta\sqrt{5d/2}` for
        :math:`W_1, W_2`.
    kind : {"sign", "random"}
    directions : int
        For ``"random"``, the number of random perturbations per model whose
        results are averaged (``"sign"`` has one direction, the gradient's).

    Returns
    -------
    dict
        ``"post"``, ``"pre"`` -> ndarray, shape (len(depths), seeds): the mean
        squared entry of :math:`F(\theta + \Delta) - F(\theta)`.
    """
    directions = as_count(directions, "directions", 1, 10**4)
    size = as_positive_float(size, "size")
    if size > 1.0:
        raise ValueError(f"size must be a small step, at most 1 (the weights' entries are "
                         f"of order 1/sqrt(d)); got {size!r}")
    as_choice(kind, "kind", ("sign", "random"))
    depths = _check_depths(depths)
    for L in depths:
        _check_counts(L, d, seeds, n_tokens)
    out = {}
    for v in ("post", "pre"):
        rows = []
        for L in depths:
            P = _models(L, d, seeds, 1)
            rng = np.random.default_rng([L, d, 7])
            X = rng.standard_normal((seeds, n_tokens, d))
            Y, caches, _ = _forward(P, X, v)
            change = np.zeros(seeds)
            reps = 1 if kind == "sign" else directions
            for _ in range(reps):
                if kind == "sign":
                    grads, _, _ = _backward(P, caches, rng.standard_normal(Y.shape), v)
                    steps = [{k: np.sign(g[k]) for k in MATRICES} for g in grads]
                else:
                    steps = [{k: rng.choice([-1.0, 1.0], size=np.shape(p[k]))
                              for k in MATRICES} for p in P]
                Q = [p | {k: p[k] - size * s[k] for k in MATRICES}
                     for p, s in zip(P, steps, strict=True)]
                Y2 = _forward(Q, X, v, keep=False)[0]
                change += np.mean((Y2 - Y) ** 2, axis=(-2, -1)) / reps
            rows.append(change)
        out[v] = np.array(rows)
    return out


def encoder_layer(p: dict, variant: str):
    r"""One layer of the book's encoder (:mod:`lipattn.models.encoder`) as a
    :mod:`lipattn.layers` composition, with exact ``forward``, ``jvp`` and ``vjp``.

    Post-LN: :math:`\mathrm{LN}_2(H + F(H))` with :math:`H = \mathrm{LN}_1(X + A(X))`;
    Pre-LN: :math:`H + F(\mathrm{LN}_2 H)` with :math:`H = X + A(\mathrm{LN}_1 X)`
    (the final LayerNorm is not part of any layer).

    Parameters
    ----------
    p : dict
        One layer's parameters (:data:`lipattn.models.encoder.PARAM_NAMES` and
        ``"heads"``), without run axes: ``W_Q`` of shape (d, d), ``b_O`` of shape (d,), ...
    variant : {"post", "pre"}

    Returns
    -------
    lipattn.layers.Sequential
        Maps hidden states of shape (N, d) to (N, d).
    """
    from ..models.encoder import as_layers
    as_choice(variant, "variant", ("post", "pre"))
    if not isinstance(p, dict) or not p:
        raise TypeError("p must be one layer's parameter dict (W_Q, ..., b_2 and 'heads'); "
                        f"got {type(p).__name__ if not isinstance(p, dict) else 'an empty dict'}")
    try:
        return as_layers([p], variant, final_norm=False).layers[0]
    except (TypeError, ValueError) as exc:  # as_layers names the entry params[0][key]
        raise type(exc)(str(exc).replace("params[0]", "p")) from None


@single_threaded
def layer_jacobian_norms(layers: int, d: int, variant: str, *, seeds: int = 8,
                         n_tokens: int = 16, heads: int = 1) -> np.ndarray:
    r"""Exact spectral norm of each layer's Jacobian along the stream, at initialisation.

    The models and inputs are :func:`init_profile`'s. Layer :math:`l` maps the
    state :math:`X_l` entering it to :math:`X_{l+1}`; its Jacobian
    :math:`J_l` acts on the whole state (all tokens: attention mixes them),
    with Frobenius norms on both sides. Since
    :math:`\partial\ell/\partial X_l = J_l^\top\,\partial\ell/\partial X_{l+1}`,
    :math:`\|J_l\|_2` is an upper bound on the layer's backward gain
    :math:`\|\partial\ell/\partial X_l\|_F/\|\partial\ell/\partial X_{l+1}\|_F` for
    every read-out.

    Returns
    -------
    ndarray, shape (seeds, layers)
        :math:`\|J_l\|_2`, exact up to a relative 1e-10 (Golub–Kahan–Lanczos on the
        layer's jvp and vjp, :func:`lipattn.layers.layer_lipschitz`, with its
        certificate; a ``ConvergenceError`` otherwise).
    """
    from ..layers import layer_lipschitz
    from ..models.encoder import residual_stream
    layers, d, seeds, n_tokens = _check_counts(layers, d, seeds, n_tokens)
    as_choice(variant, "variant", ("post", "pre"))
    P = _models(layers, d, seeds, heads)
    X, _ = _inputs(layers, d, seeds, n_tokens)
    stream = residual_stream(P, X, variant=variant)
    out = np.zeros((seeds, layers))
    for l_, p in enumerate(P):
        for s in range(seeds):
            ps = {k: v if k == "heads" else v[s] if k.startswith("W_") else v[s].reshape(-1)
                  for k, v in p.items()}
            out[s, l_] = layer_lipschitz(encoder_layer(ps, variant), stream[l_][s]).value
    return out


def scaled_updates(scales: dict) -> Callable:
    """A ``step_hook`` for :func:`lipattn.models.training.train_reversal` that rescales
    chosen updates during the first steps: an intervention on early training.

    Parameters
    ----------
    scales : dict
        Maps a run index (int) to a triple ``(names, steps, factor)``: for that
        run, the updates of the parameters named in ``names`` (weight names of
        :data:`lipattn.models.encoder.PARAM_NAMES`, or ``"embed"``, ``"pos"``,
        ``"unembed"``; ``None`` for every parameter) are multiplied by ``factor``
        (a finite real >= 0; 0 freezes them) at steps ``0, ..., steps - 1``; or, if
        ``factor`` is a sequence of ``steps`` such reals, by ``factor[t]`` at step
        ``t`` (a schedule: a short warm-up, :func:`lipattn.models.optim.radam_rectification`).
        Runs not listed are left alone.

    Returns
    -------
    callable
        ``hook(t, step)``, for ``train_reversal(..., step_hook=hook)``.
    """
    if not isinstance(scales, dict):
        raise TypeError(f"scales must be a dict run -> (names, steps, factor); got "
                        f"{type(scales).__name__}")
    spec = {}
    for r, v in scales.items():
        r = as_count(r, "scales' run index", 0)
        if not isinstance(v, tuple) or len(v) != 3:
            raise TypeError(f"scales[{r}] must be a triple (names, steps, factor); got {v!r}")
        names, steps, factor = v
        if names is not None and (isinstance(names, str) or not all(
                isinstance(n, str) for n in names)):
            raise TypeError(f"scales[{r}]'s names must be None or a sequence of str; got "
                            f"{names!r}")
        steps = as_count(steps, f"scales[{r}]'s steps", 0)
        if np.ndim(factor) == 0:
            factor = [as_positive_float(factor, f"scales[{r}]'s factor", allow_zero=True)] * steps
        else:
            factor = as_real_array(factor, f"scales[{r}]'s factor")
            if factor.shape != (steps,) or np.any(factor < 0):
                raise ValueError(f"scales[{r}]'s factor must be a non-negative real or a "
                                 f"sequence of steps = {steps} of them; got shape "
                                 f"{factor.shape}")
        spec[r] = (None if names is None else frozenset(names), steps,
                   np.asarray(factor, dtype=np.float32))

    def hook(t: int, step: dict) -> None:
        for key, view in step.items():
            name = key[2] if key[0] == "blocks" else key[0]
            for r, (names, steps, factor) in spec.items():
                if t < steps and (names is None or name in names):
                    view[r] *= factor[t]
    return hook


def intervention_runs(interventions: dict, seeds, *, variant: str = "post", lr: float = 1e-2,
                      warmup: int = 0, **train) -> tuple[list[str], TrainResult]:
    """Train the same runs under several interventions, as one vectorised batch.

    Parameters
    ----------
    interventions : dict
        Maps a label to ``(names, steps, factor)`` (see :func:`scaled_updates`),
        or to None for the unmodified run.
    seeds : sequence of int
        Every intervention is run with every seed (paired: same initialisation
        and batches).
    variant, lr, warmup
        As in :func:`lipattn.models.training.train_reversal`, the same for every run.
    **train
        Further keyword arguments of ``train_reversal`` (sizes, ``steps``).

    Returns
    -------
    labels : list of str, one per run
        Runs are ordered intervention-major: run ``i * len(seeds) + j`` is
        intervention ``i`` with seed ``seeds[j]``.
    result : TrainResult
    """
    from ..models.training import train_reversal
    if not isinstance(interventions, dict) or not interventions:
        raise TypeError(f"interventions must be a non-empty dict label -> (names, steps, "
                        f"factor) or None; got {interventions!r}")
    for label, v in interventions.items():
        if v is not None:
            try:
                scaled_updates({0: v})
            except (TypeError, ValueError) as exc:  # its messages name scales[0]
                raise type(exc)(f"interventions[{label!r}] is not a valid intervention: "
                                + str(exc).replace("scales[0]", "it")) from None
    seeds = as_counts(seeds, "seeds", 0, allow_scalar=True)
    n = len(seeds)
    labels = [lab for lab in interventions for _ in seeds]
    scales = {i * n + j: v for i, v in enumerate(interventions.values()) if v is not None
              for j in range(n)}
    res = train_reversal(variant, lr, warmup, seeds * len(interventions),
                         step_hook=scaled_updates(scales), **train)
    return labels, res
