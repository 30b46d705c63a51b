"""Figures, experiments and the explorer of the real-Transformers chapter.

The mathematics is in :mod:`lipattn.layers`, :mod:`lipattn.models`,
:mod:`lipattn.stabilisers` and :mod:`lipattn.lipschitz`; this module builds
random models the way GPT-2 and Llama are initialised (Hugging Face's
``_init_weights``), computes exact constants with them and draws figures.
Randomness comes from ``np.random.default_rng(seed)``; small-matrix work runs
with one BLAS thread (:func:`lipattn._blas.single_threaded`).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from matplotlib.figure import Figure

from ... import adversarial, l2attention
from ..._blas import single_threaded
from ..._validate import as_choice, as_count, as_int_at_least, as_real_array, as_seed, as_tol
from ...layers import MultiHeadAttention, layer_lipschitz
from ...models import GPT2, Llama, random_state_dict
from ...models.decoder import Decoder
from ...stabilisers import StabilisedAttention, sigma_reparam
from .. import plotting
from .._check import as_counts, as_reals, as_result
from ..widgets import Explorer, Slider

__all__ = ["random_model", "branch_constants", "head_constants", "gqa_attention", "gqa_bounds",
           "depth_profile", "fig_depth", "VARIANTS", "variant_layer", "variant_constant",
           "scale_curves", "fig_variants", "StabiliserExplorer"]


# --------------------------------------------------------------------------
# random models, initialised as the published code does (random_state_dict)
# --------------------------------------------------------------------------
def random_model(layout: str, L: int, d: int, n_head: int, seed: int = 0,
                 init_depth: int | None = None):
    """A GPT-2 (``"gpt2"``) or Llama (``"llama"``, RoPE, eps 1e-6) model at initialisation.

    ``init_depth``: GPT-2's residual rescaling as for a model of that depth.
    """
    layout = as_choice(layout, "layout", ("gpt2", "llama"))
    L, d = as_count(L, "L", maximum=1000), as_count(d, "d", maximum=4096)
    n_head, seed = as_count(n_head, "n_head", maximum=d), as_seed(seed)
    if d % n_head:
        raise ValueError(f"n_head must divide d = {d}; got {n_head}")
    if init_depth is not None:
        init_depth = as_count(init_depth, "init_depth", maximum=10**6)
    if layout == "gpt2":
        return GPT2.from_state_dict(random_state_dict("gpt2", L, d, n_head, seed=seed,
                                                      init_depth=init_depth), n_head=n_head)
    if layout == "llama":
        return Llama.from_state_dict(random_state_dict("llama", L, d, n_head, seed=seed),
                                     n_head=n_head, n_kv_head=n_head)
    raise ValueError(f"layout must be 'gpt2' or 'llama'; got {layout!r}")


@single_threaded
def branch_constants(model, H: np.ndarray, *, tol: float = 1e-6) -> dict:
    """Exact constants of block 0: each branch (without the residual) and the whole block.

    Keys ``attention`` (x -> Attn(Norm_1(x)) at H), ``mlp`` (x' -> MLP(Norm_2(x'))
    at the stream between the sublayers) and ``block``; exact up to the relative
    tolerance ``tol``.
    """
    if not isinstance(model, Decoder):
        raise TypeError(f"model must be a GPT2 or Llama model (see random_model); "
                        f"got {type(model).__name__}")
    H, tol = as_real_array(H, "H", ndim=2), as_tol(tol)
    if H.shape[1] != model.d_model:
        raise ValueError(f"H must have shape (N, {model.d_model}); got shape {H.shape}")
    out = {branch: model.sublayer_lipschitz(H, 0, branch=branch, tol=tol)
           for branch in ("attention", "mlp")}
    out["block"] = model.local_lipschitz(H, stop=1, tol=tol)
    return out


@single_threaded
def head_constants(attn: MultiHeadAttention, X: np.ndarray, *, tol: float = 1e-8) -> dict:
    r"""Per-head constants of one attention layer at its input X, and the two bounds.

    Returns ``L_h`` (head h with its rows of W_O, shape (h,)), ``c_h`` (head h
    without W_O), ``exact`` (the layer without b_O), ``sum`` (the sum of the
    L_h) and ``sqrt_form`` (:math:`\|W_O\|_2\sqrt{\sum_h c_h^2}`).
    """
    if not isinstance(attn, MultiHeadAttention):
        raise TypeError(f"attn must be a MultiHeadAttention; got {type(attn).__name__}")
    X, tol = as_real_array(X, "X", ndim=2), as_tol(tol)
    heads = [attn.head(i) for i in range(attn.n_head)]
    L_h = np.array([layer_lipschitz(h, X, tol=tol).value for h in heads])
    bare = [MultiHeadAttention(h.W_Q, h.W_K, h.W_V, None, b_Q=h.b_Q, b_K=h.b_K, b_V=h.b_V,
                               mask=h.mask, rope_theta=h.rope_theta) for h in heads]
    c_h = np.array([layer_lipschitz(h, X, tol=tol).value for h in bare])
    exact = layer_lipschitz(attn, X, tol=tol).value
    return {"L_h": L_h, "c_h": c_h, "exact": exact, "sum": float(L_h.sum()),
            "sqrt_form": float(np.linalg.norm(attn.W_O, 2) * np.sqrt(np.sum(c_h ** 2)))}


def gqa_attention(n_kv_head: int, *, d: int = 64, n_head: int = 8, N: int = 8,
                  seed: int = 0) -> tuple[MultiHeadAttention, np.ndarray]:
    """The attention layer of a random one-block Llama with ``n_kv_head`` key/value heads.

    Built by :class:`lipattn.models.Llama` from :func:`lipattn.models.random_state_dict`
    (Hugging Face's Llama initialisation, RoPE :math:`\\theta = 10^4`, causal mask),
    and its input :math:`\\mathrm{RMSNorm}_1(H)` at the embedded tokens ``arange(N)``.
    Returns ``(attn, X)``.
    """
    d, N = as_count(d, "d", maximum=4096), as_count(N, "N", maximum=10**4)
    n_head = as_count(n_head, "n_head", maximum=d)
    n_kv_head, seed = as_count(n_kv_head, "n_kv_head", maximum=n_head), as_seed(seed)
    if d % n_head or n_head % n_kv_head:
        raise ValueError(f"n_head must divide d and n_kv_head must divide n_head; got d = {d}, "
                         f"n_head = {n_head}, n_kv_head = {n_kv_head}")
    model = Llama.from_state_dict(random_state_dict("llama", 1, d, n_head, n_kv_head=n_kv_head,
                                                    vocab=max(64, N), seed=seed),
                                  n_head=n_head, n_kv_head=n_kv_head)
    block = model.blocks[0]
    return block.attn, block.norm_1.forward(model.embed(np.arange(N)))[0]


@single_threaded
def gqa_bounds(n_kv_heads, seeds, *, d: int = 64, n_head: int = 8, N: int = 8,
               tol: float = 1e-8) -> np.ndarray:
    """The heads theorem's sum bound and its grouped form against the exact constant.

    For each ``n_kv_head`` and seed, the layer of :func:`gqa_attention`; every constant
    exact up to the relative tolerance ``tol`` (:func:`lipattn.layers.layer_lipschitz`).

    Returns
    -------
    ndarray, shape (len(n_kv_heads), len(seeds), 3)
        ``[..., 0]`` the exact constant, ``[..., 1]`` the sum over query heads of
        the constants of :meth:`~lipattn.layers.MultiHeadAttention.head`, ``[..., 2]``
        the sum over key/value heads of those of
        :meth:`~lipattn.layers.MultiHeadAttention.kv_group`.
    """
    n_head = as_count(n_head, "n_head", maximum=4096)
    kvs = as_counts(n_kv_heads, "n_kv_heads", maximum=n_head)
    sds = as_counts(seeds, "seeds", minimum=0)
    tol = as_tol(tol)
    out = np.zeros((len(kvs), len(sds), 3))
    for a_, kv in enumerate(kvs):
        for b_, s in enumerate(sds):
            attn, X = gqa_attention(kv, d=d, n_head=n_head, N=N, seed=s)
            parts = ([attn], [attn.head(i) for i in range(attn.n_head)],
                     [attn.kv_group(j) for j in range(kv)])
            out[a_, b_] = [sum(layer_lipschitz(lay, X, tol=tol).value for lay in p)
                           for p in parts]
    return out


@single_threaded
def depth_profile(layout: str, L: int, depths, *, d: int = 64, n_head: int = 4, N: int = 8,
                  seed: int = 0, tol: float = 1e-6) -> dict:
    """Exact constant of blocks 0..l-1 against the product of the per-block constants.

    One model of depth L (initialised for depth L), tokens ``arange(N)``.
    Returns ``depths``, ``exact`` and ``product`` (arrays over depths) and
    ``blocks`` (the L per-block constants at the stream entering each block).
    """
    depths = np.array(as_counts(depths, "depths", maximum=as_count(L, "L", maximum=1000)))
    N, tol = as_count(N, "N", maximum=10**4), as_tol(tol)
    model = random_model(layout, L, d, n_head, seed)
    H = model.embed(np.arange(N))
    blocks, X = [], H
    for i in range(L):
        blocks.append(model.local_lipschitz(X, start=i, stop=i + 1, tol=tol))
        X = model.forward(X, start=i, stop=i + 1)
    exact = np.array([model.local_lipschitz(H, stop=int(k), tol=tol) for k in depths])
    product = np.array([np.prod(blocks[:k]) for k in depths])
    return {"depths": depths, "exact": exact, "product": product, "blocks": np.array(blocks)}


def fig_depth(profiles: dict) -> Figure:
    """Log-log: exact end-to-end constant and product bound against depth, per layout."""
    profiles = as_result(profiles, "profiles", producer="a dict of layout -> depth_profile runs")
    fig, ax = plotting.figure(1, width=8.4, height=3.4)
    names = {"gpt2": "GPT-2 layout", "llama": "Llama layout"}
    for k, (layout, runs) in enumerate(profiles.items()):
        dep = runs[0]["depths"]
        ex = np.median([r["exact"] for r in runs], axis=0)
        pr = np.median([r["product"] for r in runs], axis=0)
        ax.loglog(dep, ex, "o-", ms=4, color=f"C{k}", label=f"{names[layout]}: exact")
        ax.loglog(dep, pr, "s--", ms=4, color=f"C{k}", alpha=0.7,
                  label=f"{names[layout]}: product of block constants")
    ax.set_xlabel("number of blocks l")
    ax.set_ylabel(r"$\|DF_{1..l}(H)\|_2$ (median over seeds)")
    ax.legend(fontsize=8, loc="upper left")
    return fig


# --------------------------------------------------------------------------
# stabilisers: the constant against the input scale
# --------------------------------------------------------------------------
#: The attention variants compared, in the order of the figure's legend.
VARIANTS = ("standard", "linear", "sigma", "softcap", "qknorm", "l2")
_LABELS = {"standard": r"dot product, $1/\sqrt{d_k}$", "linear": r"muP, $1/d_k$",
           "sigma": "sigmaReparam", "softcap": "soft-cap 50 (Gemma 2)",
           "qknorm": r"QK-RMSNorm, $\varepsilon = 10^{-6}$", "l2": "L2 attention"}
#: The same labels in plain text, for the explorer's controls (no TeX there).
_PLAIN = {"standard": "dot product, 1/\u221ad\u2096", "linear": "\u03bcP, 1/d\u2096",
          "sigma": "\u03c3Reparam", "softcap": "soft-cap 50 (Gemma 2)",
          "qknorm": "QK-RMSNorm, \u03b5 = 1e-6", "l2": "L2 attention"}
#: Colour, line style and marker of each variant (coinciding curves stay visible).
_STYLE = {"standard": ("#1f77b4", "-", "o"), "linear": ("#ff7f0e", "-", "s"),
          "sigma": ("#2ca02c", "--", "^"), "softcap": ("#d62728", ":", "v"),
          "qknorm": ("#9467bd", "-", "D"), "l2": ("#8c564b", "-", "o")}


def variant_layer(name: str, W_Q: np.ndarray, W_K: np.ndarray, W_V: np.ndarray):
    """The single-head layer of a variant (not for ``"l2"``, see :func:`variant_constant`)."""
    name = as_choice(name, "name", tuple(v for v in VARIANTS if v != "l2"))
    if name == "sigma":
        return StabilisedAttention(*(sigma_reparam(W) for W in (W_Q, W_K, W_V)))
    opts = {"standard": {}, "linear": {"scale": "linear"}, "softcap": {"softcap": 50.0},
            "qknorm": {"qk_norm": "rms", "qk_norm_eps": 1e-6}}
    if name not in opts:
        raise ValueError(f"name must be one of {list(VARIANTS)}; got {name!r}")
    return StabilisedAttention(W_Q, W_K, W_V, **opts[name])


def variant_constant(name: str, X: np.ndarray, W_Q, W_K, W_V) -> float:
    """Exact local constant of a variant at X (L2 attention ties W_K = W_Q)."""
    name = as_choice(name, "name", VARIANTS)
    X = as_real_array(X, "X", ndim=2)
    if name == "l2":
        return l2attention.l2_local_lipschitz(X, W_Q, W_V, method="lanczos")
    layer = variant_layer(name, W_Q, W_K, W_V)
    return layer_lipschitz(layer, X, tol=1e-9).value


def _family(family: str, d: int, N: int, seed: int):
    """Unit-scale tokens and weights of an input family."""
    if family == "two-sided":
        return adversarial.two_sided_tokens(1.0, N, d), np.eye(d), np.eye(d), np.eye(d)
    if family != "random":
        raise ValueError(f"family must be 'random' or 'two-sided'; got {family!r}")
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, d))
    X /= np.linalg.norm(X, axis=1).max()
    W = [rng.standard_normal((d, d)) / math.sqrt(d) for _ in range(3)]
    return X, *W


@single_threaded
def scale_curves(family: str, ts, *, d: int = 4, N: int = 6, seed: int = 0) -> dict:
    """name -> exact constants at t X_0 over ``ts``, for every variant in :data:`VARIANTS`.

    ``family``: ``"random"`` (Gaussian tokens with largest norm 1, Gaussian
    weights / sqrt d) or ``"two-sided"`` (t (0, e_1, -e_1, ...), identity weights).
    """
    family = as_choice(family, "family", ("random", "two-sided"))
    ts = as_reals(ts, "ts", positive=True)
    if ts.size > 1000:
        raise ValueError(f"ts must have at most 1000 scales; got {ts.size}")
    d, N = as_count(d, "d", maximum=256), as_int_at_least(N, "N", 2, 1000)
    X, *W = _family(family, d, N, as_seed(seed))
    return {v: np.array([variant_constant(v, t * X, *W) for t in ts]) for v in VARIANTS}


def fig_variants(ts, curves: dict) -> Figure:
    """Two log-log panels: every variant's exact constant against t, one per family."""
    ts = as_reals(ts, "ts", positive=True)
    curves = as_result(curves, "curves", ("random", "two-sided"),
                       producer="scale_curves, per family")
    for family in ("random", "two-sided"):
        c = as_result(curves[family], f"curves[{family!r}]", VARIANTS, producer="scale_curves")
        for v in VARIANTS:
            if np.shape(c[v]) != ts.shape:
                raise ValueError(f"curves[{family!r}][{v!r}] must have one value per entry of "
                                 f"ts, shape {ts.shape}; got shape {np.shape(c[v])}")
    fig, axes = plotting.figure(2, width=8.4, height=3.5, sharey=True)
    for ax, (family, c) in zip(axes, curves.items(), strict=True):
        for v in VARIANTS:
            color, ls, marker = _STYLE[v]
            ax.loglog(ts, c[v], ls=ls, marker=marker, ms=3, lw=1.3, color=color,
                      label=_LABELS[v])
        ax.set_title(f"{family} tokens", fontsize=9.5)
        ax.set_xlabel("input scale t (largest token norm)")
    axes[0].set_ylabel("exact local constant")
    axes[0].legend(fontsize=7, loc="upper left")
    return fig


# --------------------------------------------------------------------------
# the explorer
# --------------------------------------------------------------------------
_T_GRID = (0.1, 0.3, 1.0, 2.0, 4.0, 8.0, 16.0, 64.0)
_FAMILIES = ("random", "two-sided")


@lru_cache(maxsize=1, typed=True)
def _explorer_data() -> dict:
    return {f: scale_curves(f, _T_GRID, N=3 if f == "two-sided" else 6,
                            d=2 if f == "two-sided" else 4) for f in _FAMILIES}


def _attention(name: str, X, W_Q, W_K, W_V) -> np.ndarray:
    if name == "l2":
        return l2attention.l2_attention_matrix(X, W_Q)
    core, _, _ = variant_layer(name, W_Q, W_K, W_V).forward(X)[1]
    return core.P[0]


class StabiliserExplorer(
        Explorer, name="stabilisers-t", size=(8.4, 3.2),
        title="Exact local constant of attention variants against the input scale t"):
    """Input scale t, input family and attention variant: exact constants and P."""

    t = Slider(_T_GRID, label="input scale t", default=8.0)
    family = Slider(_FAMILIES, label="input family", default="two-sided")
    variant = Slider(VARIANTS, label="highlighted variant", default="qknorm",
                     fmt=lambda v: _PLAIN[v])
    presets = {"two-sided, QK-norm, t = 0.1": {"family": "two-sided", "variant": "qknorm",
                                                "t": 0.1},
               "two-sided, QK-norm, t = 64": {"family": "two-sided", "variant": "qknorm",
                                               "t": 64.0},
               "random, QK-norm, t = 64": {"family": "random", "variant": "qknorm", "t": 64.0}}

    def setup(self, fig: Figure):
        self._data = _explorer_data()
        ax, ax_p = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.7, 1]})
        t = np.array(_T_GRID)
        self._lines = {}
        for v in VARIANTS:
            color, ls, marker = _STYLE[v]
            (line,) = ax.plot(t, np.ones_like(t), ls=ls, marker=marker, ms=2.5, lw=1.0,
                              color=color, label=_LABELS[v])
            self._lines[v] = line
        (self._dot,) = ax.plot([1.0], [1.0], "o", ms=9, mfc="none", mec="k", mew=1.5)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(t[0] / 1.3, t[-1] * 1.3)
        ax.set_ylim(0.05, 1e5)
        ax.set_xlabel("input scale t")
        ax.set_ylabel("exact local constant")
        ax.legend(loc="upper left", fontsize=7, ncol=2)
        self._title = fig.suptitle(" ", fontsize=9)
        self._img = plotting.attention_panel(
            fig, ax_p, "attention matrix of the highlighted variant", fontsize=8.5)
        return [*self._lines.values(), self._dot, self._title, self._img]

    def update(self, t: float, family: str, variant: str) -> None:
        c = self._data[family]
        k = _T_GRID.index(t)
        for v, line in self._lines.items():
            line.set_ydata(c[v])
            line.set_linewidth(2.6 if v == variant else 0.9)
            line.set_alpha(1.0 if v == variant else 0.45)
        self._dot.set_data([t], [c[variant][k]])
        X, *W = _family(family, 2 if family == "two-sided" else 4,
                        3 if family == "two-sided" else 6, 0)
        self._img.set_data(_attention(variant, t * X, *W))
        self._title.set_text(f"{family} tokens, t = {t:g}: {_LABELS[variant]} has constant "
                             f"{c[variant][k]:.3g} (dot product: {c['standard'][k]:.3g})")
