"""Gradients of one attention read-out at initialisation, with and without the 1/sqrt(d) scaling.

Setting as in :mod:`lipattn.scaling` (Chapter 2): a query ``q ~ N(0, I_d)``, keys
and values ``K, V`` with i.i.d. ``N(0, 1)`` entries, shape (n_keys, d), and an
upstream gradient ``g``; the loss is ``L = g . o`` with
``o = softmax(c K q)^T V`` and ``c = 1/sqrt(d)`` (scaled) or 1. The gradients with
respect to the logits, the query, the keys and the values are exact per sample
(closed forms, tested against finite differences); :func:`gradient_norms` (from
explicit q, K, V) and :func:`gradient_norms_fast` (sampled exactly in ``O(N)`` per
draw, :func:`gradient_samples`) report Monte-Carlo means with standard errors
``std / sqrt(samples)`` and the quantiles :data:`QUANTILES` of these heavy-tailed
norms (:class:`GradientNorms`).

Randomness comes only from ``np.random.default_rng(seed)``, where ``seed`` may be
an ``int`` or an existing ``np.random.Generator``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .scaling import _as_rng, _check_sampling_args, _chunk_size, _mean_se
from .softmax import softmax

__all__ = [
    "GradientNorms",
    "QUANTILES",
    "gradient_norms",
    "gradient_norms_fast",
    "gradient_samples",
]

#: Quantile levels reported by :class:`GradientNorms` (10 %, median, 90 %).
QUANTILES: tuple[float, float, float] = (0.1, 0.5, 0.9)


@dataclass(frozen=True)
class GradientNorms:
    """Mean and quantiles of the gradient norms of one attention read-out.

    The norms are heavy-tailed without scaling: most queries get a vanishing
    query gradient while a few near-tie queries get a large one, so the mean
    alone is misleading. Each ``*_q`` field holds the 10 %, 50 % and 90 %
    quantiles (:data:`QUANTILES`) of the per-sample norms.

    Attributes
    ----------
    logits : float
        ``E ||dL/ds||``, shape of the gradient (N,).
    query : float
        ``E ||dL/dq||``, shape (d,). The gradient for a query projection
        ``q = W_Q x`` is ``(dL/dq) x^T`` with norm ``||dL/dq|| ||x||``, so it
        is proportional to this one.
    keys : float
        ``E ||dL/dK||``, shape (N, d); equals ``c ||dL/ds|| ||q||`` per sample.
    values : float
        ``E ||dL/dV||``, shape (N, d); equals ``||p|| ||g|| = ||p||``.
    logits_se, query_se, keys_se, values_se : float
        Standard errors ``std / sqrt(n_samples)`` of the means.
    logits_q, query_q, keys_q, values_q : tuple of 3 floats
        Sample quantiles at :data:`QUANTILES` (the middle one is the median).
    n_samples : int
        Number of independent (q, K, V, g) draws.
    """

    logits: float
    query: float
    keys: float
    values: float
    logits_se: float
    query_se: float
    keys_se: float
    values_se: float
    logits_q: tuple[float, float, float]
    query_q: tuple[float, float, float]
    keys_q: tuple[float, float, float]
    values_q: tuple[float, float, float]
    n_samples: int




def _attention_loss(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray, scaled: bool
) -> np.ndarray:
    """``L = g . o``, ``o = softmax(c K q)^T V``, shape (B,); q, g (B, d), K, V (B, N, d)."""
    c = 1.0 / math.sqrt(q.shape[-1]) if scaled else 1.0
    p = softmax(np.einsum("bnd,bd->bn", k, q) * c, axis=-1)
    return np.einsum("bn,bnd,bd->b", p, v, g)


def _attention_gradients(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray, scaled: bool
) -> dict[str, np.ndarray]:
    """Exact gradients of ``L = g . o`` for a batch of single-query read-outs.

    Shapes: ``q`` (B, d), ``k`` and ``v`` (B, N, d), ``g`` (B, d). With
    ``c = 1/sqrt(d)`` or 1, ``s = c K q``, ``p = softmax(s)``, ``u = V g``:

    - ``dL/ds = J u = p * (u - p . u)``, shape (B, N);
    - ``dL/dq = c K^T dL/ds``, shape (B, d);
    - ``dL/dK = c (dL/ds) q^T``, shape (B, N, d);
    - ``dL/dV = p g^T``, shape (B, N, d).

    Also returns ``s`` and ``p``.
    """
    c = 1.0 / math.sqrt(q.shape[-1]) if scaled else 1.0
    s = np.einsum("bnd,bd->bn", k, q) * c
    p = softmax(s, axis=-1)
    u = np.einsum("bnd,bd->bn", v, g)
    ds = p * (u - np.sum(p * u, axis=-1, keepdims=True))
    return {
        "s": s,
        "p": p,
        "logits": ds,
        "query": c * np.einsum("bnd,bn->bd", k, ds),
        "keys": c * ds[:, :, None] * q[:, None, :],
        "values": p[:, :, None] * g[:, None, :],
    }


def _gradient_summary(parts: dict[str, list[np.ndarray]], samples: int) -> GradientNorms:
    """Means, standard errors and quantiles of per-sample norms, chunk lists by field."""
    names = ("logits", "query", "keys", "values")
    x = {name: np.concatenate(parts[name]) for name in names}
    stats = {name: _mean_se(x[name]) for name in names}
    quant = {f"{name}_q": tuple(float(v) for v in np.quantile(x[name], QUANTILES))
             for name in names}
    return GradientNorms(**{name: m for name, (m, _) in stats.items()},
                         **{f"{name}_se": se for name, (_, se) in stats.items()},
                         **quant, n_samples=samples)


def gradient_norms(
    d: int,
    n_keys: int,
    scaled: bool = True,
    samples: int = 2_000,
    seed: int | np.random.Generator = 0,
) -> GradientNorms:
    """Mean gradient norms of one attention read-out at initialisation.

    Each sample draws ``q ~ N(0, I_d)``, keys and values ``K, V`` with i.i.d.
    ``N(0, 1)`` entries, shape (n_keys, d), and an upstream gradient
    ``g = dL/do`` uniform on the unit sphere of ``R^d``; the loss is
    ``L = g . o`` with ``o = softmax(s)^T V`` and ``s = K q / sqrt(d)``
    (``scaled``) or ``K q``. ``K`` and ``V`` are drawn explicitly, so the cost
    is ``O(samples * n_keys * d)`` (batched, chunked to bound memory).

    Why a unit ``g``: the gradients are linear in ``g`` and, for
    ``g ~ N(0, I_d)``, ``||g||`` is independent of ``g / ||g||``; so a
    Gaussian ``g`` would multiply every mean norm by exactly
    ``E||g|| ~ sqrt(d)`` and hide the ``d``-dependence that comes from the
    softmax.

    What is certain (used in the tests): ``u = V g ~ N(0, I_N)`` independent of
    ``s``, so ``E||dL/ds||^2 = E||J(s)||_F^2``; ``||dL/dV|| = ||p||``; and,
    splitting each key into its part along ``q`` and the rest,
    ``E[||dL/dq||^2 | s, u, q] = c^2 (d - 1) ||dL/ds||^2 + (s . dL/ds)^2 /
    ||q||^2``. So in mean square the query gradient is at least ``(d - 1)``
    times the logit gradient without scaling and ``(d - 1) / d`` times it
    with scaling (the second term is the part along ``q``).

    Parameters
    ----------
    d, n_keys, scaled, samples, seed
        As in :func:`sample_logits`.

    Returns
    -------
    GradientNorms
        Monte-Carlo means of ``||dL/ds||``, ``||dL/dq||``, ``||dL/dK||_F``
        and ``||dL/dV||_F`` with standard errors ``std / sqrt(samples)``.
    """
    d, n_keys, scaled, samples = _check_sampling_args(d, n_keys, scaled, samples, explicit_d=True)
    rng = _as_rng(seed)
    chunk = _chunk_size(4 * n_keys * d)
    norms: dict[str, list[np.ndarray]] = {"logits": [], "query": [], "keys": [], "values": []}
    for start in range(0, samples, chunk):
        b = min(chunk, samples - start)
        q = rng.standard_normal((b, d))
        k = rng.standard_normal((b, n_keys, d))
        v = rng.standard_normal((b, n_keys, d))
        g = rng.standard_normal((b, d))
        g /= np.linalg.norm(g, axis=-1, keepdims=True)
        grads = _attention_gradients(q, k, v, g, scaled)
        for name, parts in norms.items():
            parts.append(np.sqrt(np.sum(grads[name].reshape(b, -1) ** 2, axis=-1)))
    return _gradient_summary(norms, samples)


def _logit_gradient(p: np.ndarray, u: np.ndarray) -> np.ndarray:
    """``J u = p * (u - p . u)`` per row, shape (B, N), accurate for one-hot ``p``.

    For the top entry ``t``, ``u_t - p . u = sum_{j != t} p_j (u_t - u_j)`` is
    formed without the cancellation of ``u_t - p . u`` when ``p_t ~ 1``, so
    tiny gradients keep their relative accuracy.
    """
    top = np.argmax(p, axis=-1)[:, None]
    u_top = np.take_along_axis(u, top, axis=-1)
    rest = p.copy()
    np.put_along_axis(rest, top, 0.0, axis=-1)
    centred_top = np.sum(rest * (u_top - u), axis=-1, keepdims=True)  # u_t - p . u
    centred = (u - u_top) + centred_top  # u_i - p . u
    np.put_along_axis(centred, top, centred_top, axis=-1)
    return p * centred


def gradient_samples(
    d: int,
    n_keys: int,
    scaled: bool = True,
    samples: int = 20_000,
    seed: int | np.random.Generator = 0,
) -> dict[str, np.ndarray]:
    """Per-query gradient norms of one attention read-out, sampled exactly in ``O(N)``.

    Same setting and same distribution as :func:`gradient_norms`, without
    forming ``q``, ``K`` or ``V``. Write ``q = r qhat`` with ``r^2 ~ chi^2_d``
    and split each key into ``a_j = k_j . qhat`` and the rest, orthogonal to
    ``q``. Then ``a ~ N(0, I_N)``, the logits are ``s = c r a``, the
    orthogonal parts are i.i.d. ``N(0, I - qhat qhat^T)`` independent of
    ``a``, and ``u = V g ~ N(0, I_N)`` is independent of both (``g`` is a
    unit vector independent of ``V``). So with ``ds = p * (u - p . u)``:

    - ``||dL/dq||^2 = c^2 ((a . ds)^2 + ||ds||^2 w)``, ``w ~ chi^2_{d-1}``
      (``w = 0`` for ``d = 1``), because the orthogonal part of
      ``K^T ds`` is ``N(0, ||ds||^2 (I - qhat qhat^T))`` given ``ds``;
    - ``||dL/dK|| = c ||ds|| r`` and ``||dL/dV|| = ||p||``.

    Parameters
    ----------
    d, n_keys, scaled, samples, seed
        As in :func:`sample_logits`.

    Returns
    -------
    dict of ndarray, each of shape (samples,)
        ``"logits"``, ``"query"``, ``"keys"``, ``"values"``: the four norms
        per query. And where the gradients go: ``"logit_sum"``, the sum
        ``1^T dL/ds`` (0 up to rounding, since ``J 1 = 0``);
        ``"logit_top2"``, the share of ``||dL/ds||^2`` on the two keys with the
        largest weights; ``"logit_top2_sum"``, ``|ds_(1) + ds_(2)| / (|ds_(1)|
        + |ds_(2)|)`` on those two keys (near 0 when they carry opposite
        signs); ``"value_top"``, the share ``max_j p_j^2 / ||p||^2`` of
        ``||dL/dV||_F^2`` on the key with the largest weight. The shares are
        ``nan``-free: a row with ``dL/ds = 0`` exactly counts as share 1 and
        sum 0.
    """
    d, n_keys, scaled, samples = _check_sampling_args(d, n_keys, scaled, samples)
    rng = _as_rng(seed)
    c = 1.0 / math.sqrt(d) if scaled else 1.0
    r = np.sqrt(rng.chisquare(d, size=samples))
    w = rng.chisquare(d - 1, size=samples) if d > 1 else np.zeros(samples)
    names = ("logits", "query", "keys", "values", "logit_sum", "logit_top2",
             "logit_top2_sum", "value_top")
    out: dict[str, list[np.ndarray]] = {name: [] for name in names}
    chunk = _chunk_size(3 * n_keys)
    for start in range(0, samples, chunk):
        stop = min(samples, start + chunk)
        a = rng.standard_normal((stop - start, n_keys))
        u = rng.standard_normal((stop - start, n_keys))
        p = softmax((c * r[start:stop, None]) * a, axis=-1)
        ds = _logit_gradient(p, u)
        ds2 = np.sum(ds * ds, axis=-1)
        ds_norm = np.sqrt(ds2)
        out["logits"].append(ds_norm)
        out["query"].append(c * np.sqrt(np.sum(a * ds, axis=-1) ** 2
                                        + ds2 * w[start:stop]))
        out["keys"].append(c * ds_norm * r[start:stop])
        p2 = np.sum(p * p, axis=-1)
        out["values"].append(np.sqrt(p2))
        out["logit_sum"].append(np.sum(ds, axis=-1))
        order = np.argsort(-p, axis=-1)[:, :2] if n_keys > 1 else np.zeros((stop - start, 1),
                                                                              dtype=int)
        top = np.take_along_axis(ds, order, axis=-1)
        safe = np.where(ds2 > 0.0, ds2, 1.0)
        out["logit_top2"].append(np.where(ds2 > 0.0, np.sum(top * top, axis=-1) / safe, 1.0))
        den = np.sum(np.abs(top), axis=-1)
        out["logit_top2_sum"].append(
            np.abs(np.sum(top, axis=-1)) / np.where(den > 0.0, den, 1.0))
        out["value_top"].append(np.max(p, axis=-1) ** 2 / p2)
    return {name: np.concatenate(parts) for name, parts in out.items()}


def gradient_norms_fast(
    d: int,
    n_keys: int,
    scaled: bool = True,
    samples: int = 20_000,
    seed: int | np.random.Generator = 0,
) -> GradientNorms:
    """The statistics of :func:`gradient_norms`, sampled exactly in ``O(N)`` per draw.

    The means, standard errors and quantiles of the per-query norms of
    :func:`gradient_samples` (see there for the exact sampler).

    Parameters
    ----------
    d, n_keys, scaled, samples, seed
        As in :func:`sample_logits`.

    Returns
    -------
    GradientNorms
        Monte-Carlo means with standard errors ``std / sqrt(samples)``, and
        quantiles.
    """
    x = gradient_samples(d, n_keys, scaled, samples, seed)
    return _gradient_summary({name: [x[name]] for name in
                              ("logits", "query", "keys", "values")}, samples)
