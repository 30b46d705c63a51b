"""Figures and experiments of the scaling-and-saturation chapter (its explorers are
:mod:`lipattn.book.viz.scaling_explorers`).

Everything is computed with :mod:`lipattn.scaling` and :mod:`lipattn.softmax`;
this module only arranges it. Randomness comes from
``np.random.default_rng(seed)``, with common random numbers across ``d``:
the query at head dimension ``d`` is the first ``d`` coordinates of one fixed
Gaussian vector, so ``||q||^2`` is exactly ``chi^2_d`` at every ``d`` and the
pictures change smoothly as ``d`` moves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, NullLocator

from ..._validate import as_bool, as_count, as_int_at_least, as_seed
from ...init_gradients import gradient_norms_fast
from ...quadrature import two_token_asymptotes, two_token_expectations, two_token_expectations_d
from ...scaling import saturation_stats, saturation_stats_from_logits
from ...softmax import entropy, softmax, softmax_jacobian_norm
from .. import plotting
from .._check import as_counts, as_reals, as_result

__all__ = [
    "fig_mechanism",
    "D_GRID",
    "mean_inverse_chi",
    "nested_logits",
    "fig_intuition",
    "SaturationCurves",
    "saturation_curves",
    "fig_saturation_curves",
    "two_token_sigma_table",
    "fig_two_token_sigma",
    "jac_norm_samples",
    "fig_jac_distribution",
    "fixed_sigma_profile",
    "fig_nonmonotone",
    "gradient_curves",
    "fig_gradients",
    "logit_step_gain",
    "fig_rem",
]

#: Head dimensions on the d axis: 1, 2, 4, ..., 4096.
D_GRID: tuple[int, ...] = tuple(2**k for k in range(13))

_SCALED_COLOR, _UNSCALED_COLOR = "C0", "C1"


def _log2_axis(ax, ds=D_GRID) -> None:
    """Log-2 d axis with ticks at 1, 4, 16, ..., 4096."""
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator([d for d in ds if math.log2(d) % 2 == 0]))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([str(d) for d in ds if math.log2(d) % 2 == 0])
    ax.set_xlim(ds[0] / 1.3, ds[-1] * 1.3)


def mean_inverse_chi(d: int) -> float:
    """``E[1 / ||q||]`` for ``q ~ N(0, I_d)``: ``Gamma((d-1)/2) / (sqrt 2 Gamma(d/2))``, d >= 2.

    (For ``d = 1`` the mean is infinite.)
    """
    d = as_int_at_least(d, "d", 2)
    return math.exp(math.lgamma(0.5 * (d - 1)) - math.lgamma(0.5 * d)) / math.sqrt(2.0)


# --------------------------------------------------------------------------
# Common random numbers: nested queries and fixed key directions
# --------------------------------------------------------------------------
@lru_cache(maxsize=4, typed=True)
def _base_draws(queries: int, max_keys: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``||q_{1:d}||^2`` at every d of D_GRID, shape (queries, 13), and key directions,
    shape (queries, max_keys)."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((queries, D_GRID[-1]))
    r2 = np.cumsum(z * z, axis=1)[:, np.array(D_GRID) - 1]
    g = rng.standard_normal((queries, max_keys))
    r2.setflags(write=False)
    g.setflags(write=False)
    return r2, g


def _grid_d(d, name: str) -> int:
    """``d`` if it is an integer of :data:`D_GRID`, or raise."""
    d = as_count(d, name)
    if d not in D_GRID:
        raise ValueError(f"{name} must be one of {D_GRID}; got {d!r}")
    return d


def _grid_ds(ds, name: str) -> tuple[int, ...]:
    """``ds``, a non-empty sequence of entries of :data:`D_GRID`, or raise."""
    ds = as_counts(ds, name, maximum=D_GRID[-1])
    for d in ds:
        _grid_d(d, f"each entry of {name}")
    return ds


def nested_logits(d: int, n_keys: int, scaled: bool, queries: int = 2000,
                  seed: int = 0) -> np.ndarray:
    """Exact-in-distribution logits with common random numbers across ``d``.

    Row ``i`` is ``c ||q_i|| g_i`` where ``q_i`` is the first ``d`` coordinates
    of a fixed standard Gaussian vector in ``R^4096`` (so ``||q_i||^2 ~
    chi^2_d``) and ``g_i ~ N(0, I_N)`` is fixed, ``c = 1/sqrt(d)`` or 1. Given
    ``q_i`` these are i.i.d. ``N(0, c^2 ||q_i||^2)``, the law of
    :func:`lipattn.scaling.sample_logits`; only the coupling across ``d``
    differs.

    Parameters
    ----------
    d : int
        One of :data:`D_GRID`.
    n_keys : int
        Number of keys N, 1 <= N <= 1024.
    scaled : bool
        Divide by ``sqrt(d)``.
    queries : int
        Number of queries (rows), 2 <= queries <= 2000.
    seed : int
        Seed of the common draws.

    Returns
    -------
    ndarray, shape (queries, n_keys)
    """
    d = _grid_d(d, "d")
    n_keys = as_int_at_least(n_keys, "n_keys", 1)
    if n_keys > 1024:
        raise ValueError(f"n_keys must be at most 1024; got {n_keys}")
    queries = as_int_at_least(queries, "queries", 2)
    if queries > 2000:
        raise ValueError(f"queries must be at most 2000; got {queries}")
    scaled = as_bool(scaled, "scaled")
    r2, g = _base_draws(2000, 1024, as_seed(seed))
    r = np.sqrt(r2[:queries, D_GRID.index(d)])
    if scaled:
        r = r / math.sqrt(d)
    return r[:, None] * g[:queries, :n_keys]


def fig_intuition(ds: tuple[int, ...] = (4, 64, 1024), n_keys: int = 64, seed: int = 0) -> Figure:
    """One query's sorted attention weights over 64 keys, scaled and unscaled, at a few d."""
    ds = _grid_ds(ds, "ds")
    if len(ds) != 3:
        raise ValueError(f"ds must have 3 entries (one colour each); got {len(ds)}")
    n_keys, seed = as_int_at_least(n_keys, "n_keys", 1, 1024), as_seed(seed)
    fig, axes = plotting.figure(2, width=8.4, height=3.0, sharey=True)
    rank = np.arange(1, n_keys + 1)
    for ax, scaled, title in zip(axes, (True, False), ("with $1/\\sqrt{d_k}$", "without scaling"),
                                 strict=True):
        for d, color in zip(ds, ("C2", "C3", "C4"), strict=True):
            p = np.sort(softmax(nested_logits(d, n_keys, scaled, queries=2, seed=seed)[0]))[::-1]
            ax.plot(rank, np.maximum(p, 1e-300), "o-", ms=3, color=color, label=f"$d_k$ = {d}")
        ax.axhline(1 / n_keys, color=plotting.ONE_COLOR, ls=":", lw=1, label="uniform 1/N")
        ax.set_yscale("log")
        ax.set_ylim(1e-12, 2)
        ax.set_xlim(0.5, 24.5)
        ax.set_xlabel("key, sorted by attention weight (top 24 of N = 64)")
        ax.set_title(title)
    axes[0].set_ylabel("attention weight $p_j$ (log axis)")
    axes[1].legend(loc="lower right")
    return fig


# --------------------------------------------------------------------------
# Saturation curves against d
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class SaturationCurves:
    """Monte-Carlo saturation statistics against d, for one N and both scalings.

    Attributes
    ----------
    d : ndarray, shape (D,)
    n_keys : int
    stats : dict
        ``stats[scaled][field]`` and ``stats[scaled][field + "_se"]`` are
        ndarrays of shape (D,), for ``scaled`` in (True, False) and ``field``
        in ("entropy", "max_p", "jac_norm"), from
        :func:`lipattn.scaling.saturation_stats`.
    """

    d: np.ndarray
    n_keys: int
    stats: dict


_FIELDS = ("entropy", "max_p", "jac_norm")


def saturation_curves(n_keys: int, ds: tuple[int, ...] = D_GRID, samples: int = 10_000,
                      seed: int = 0) -> SaturationCurves:
    """:func:`lipattn.scaling.saturation_stats` at each d, scaled and unscaled."""
    n_keys = as_int_at_least(n_keys, "n_keys", 1, 10**5)
    ds = as_counts(ds, "ds", maximum=10**5)
    samples = as_count(samples, "samples", maximum=10**8 // n_keys)  # cost O(samples N)
    seed = as_seed(seed)
    out: dict = {}
    for scaled in (True, False):
        rows = [saturation_stats(d, n_keys, scaled, samples, seed=seed + 7919 * k)
                for k, d in enumerate(ds)]
        out[scaled] = {f: np.array([getattr(r, f) for r in rows])
                       for f in (*_FIELDS, *(f + "_se" for f in _FIELDS))}
    return SaturationCurves(np.asarray(ds), int(n_keys), out)


def fig_saturation_curves(curves: list[SaturationCurves]) -> Figure:
    """E[H], 1 - E[max p] and E||J||_2 against d, log-log, scaled vs unscaled.

    Error bars are +-2 standard errors. For N = 2 the exact values
    (:func:`lipattn.quadrature.two_token_expectations_d`) are drawn as thin
    black lines and, without scaling, the leading asymptote averaged over
    ``||q||`` as a dashed grey line.
    """
    if not isinstance(curves, (list, tuple)) or not curves:
        raise TypeError("curves must be a non-empty list of SaturationCurves (as returned by "
                        f"saturation_curves); got {type(curves).__name__} {curves!r:.40}")
    for c in curves:
        as_result(c, "each entry of curves", cls=SaturationCurves, producer="saturation_curves")
    fig, axes = plotting.figure(3, width=8.4, height=3.3)
    markers = {2: "s", 8: "^", 64: "o", 256: "D"}
    labels = (r"$\mathbb{E}[H(p)]$ (nats)", r"$1 - \mathbb{E}[\max_j p_j]$",
              r"$\mathbb{E}\,\|J\|_2$")
    for cur in curves:
        mk = markers.get(cur.n_keys, "o")
        for scaled, color in ((True, _SCALED_COLOR), (False, _UNSCALED_COLOR)):
            st = cur.stats[scaled]
            for ax, f in zip(axes, _FIELDS, strict=True):
                y = 1 - st[f] if f == "max_p" else st[f]
                ax.errorbar(cur.d, y, yerr=2 * st[f + "_se"], fmt=mk + "-", ms=4, lw=1,
                            color=color, capsize=2, mfc="white" if cur.n_keys == 2 else color,
                            label=f"N = {cur.n_keys}, {'scaled' if scaled else 'unscaled'}")
        if cur.n_keys == 2:
            dd = np.array(D_GRID)
            for scaled in (True, False):
                ex = [two_token_expectations_d(int(d), scaled) for d in dd]
                for ax, f in zip(axes, _FIELDS, strict=True):
                    y = np.array([getattr(e, f) for e in ex])
                    ax.plot(dd, 1 - y if f == "max_p" else y, color="k", lw=0.8,
                            label="N = 2 exact (quadrature)" if scaled else None)
            lead = np.array([mean_inverse_chi(int(d)) for d in dd[1:]]) / math.sqrt(math.pi)
            for ax, const in zip(axes, (math.pi**2 / 6, math.log(2), 1.0), strict=True):
                ax.plot(dd[1:], const * lead, "--", color=plotting.ONE_COLOR, lw=1.2,
                        label=r"N = 2 asymptote, $\mathbb{E}[c/(\sqrt{\pi}\,\|q\|)]$")
    for ax, lab in zip(axes, labels, strict=True):
        _log2_axis(ax)
        ax.set_yscale("log")
        ax.set_xlabel("head dimension $d_k$")
        ax.set_title(lab)
    handles, labs = axes[0].get_legend_handles_labels()
    fig.legend(handles, labs, loc="outside lower center", ncol=3, fontsize=8.5)
    return fig


# --------------------------------------------------------------------------
# Two keys at a fixed sigma: exact, asymptotes and Monte Carlo
# --------------------------------------------------------------------------
def two_token_sigma_table(sigmas: np.ndarray) -> dict[str, np.ndarray]:
    """Exact and asymptotic E||J||_2 and E[H] for two i.i.d. N(0, sigma^2) logits."""
    sigmas = as_reals(sigmas, "sigmas", positive=True)
    if sigmas.size > 10**4:
        raise ValueError(f"sigmas must have at most 10**4 entries; got {sigmas.size}")
    ex = [two_token_expectations(float(s)) for s in sigmas]
    a1 = [two_token_asymptotes(float(s), terms=1) for s in sigmas]
    a2 = [two_token_asymptotes(float(s), terms=2) for s in sigmas]
    out = {"sigma": sigmas}
    for f in ("jac_norm", "entropy"):
        out[f] = np.array([getattr(e, f) for e in ex])
        out[f + "_1"] = np.array([getattr(e, f) for e in a1])
        out[f + "_2"] = np.array([getattr(e, f) for e in a2])
    return out


def fig_two_token_sigma(table: dict[str, np.ndarray], mc_sigmas: tuple[float, ...] = (0.3, 1, 3,
                        10, 30, 100), samples: int = 20_000, seed: int = 0) -> Figure:
    """N = 2: exact quadrature, the two asymptotes (which are bounds) and Monte Carlo."""
    table = as_result(table, "table", ("sigma", "jac_norm", "entropy"),
                      producer="two_token_sigma_table")
    mc_sigmas = as_reals(mc_sigmas, "mc_sigmas", positive=True, maximum=1e6)
    samples = as_count(samples, "samples", maximum=10**7 // max(mc_sigmas.size, 1))
    fig, axes = plotting.figure(3, width=8.4, height=3.4)
    s = table["sigma"]
    rng = np.random.default_rng(as_seed(seed))
    g = rng.standard_normal((samples, 2))
    mc = [saturation_stats_from_logits(sig * g) for sig in mc_sigmas]
    for ax, f, title in zip(axes[:2], ("jac_norm", "entropy"),
                            (r"$\mathbb{E}\,\|J\|_2$, N = 2", r"$\mathbb{E}[H]$ (nats), N = 2"),
                            strict=True):
        ax.plot(s, table[f], color="k", label="exact (quadrature)")
        lead = r"$1/(\sqrt{\pi}\sigma)$" if f == "jac_norm" else r"$\pi^{3/2}/(6\sigma)$"
        ax.plot(s, table[f + "_1"], "--", color="C0", label="upper bound (one term)")
        ax.text(0.97, 0.97, f"one term: {lead}", transform=ax.transAxes, ha="right",
                va="top", fontsize=9)
        ok = table[f + "_2"] > 0
        ax.plot(s[ok], table[f + "_2"][ok], ":", color="C1", lw=2.2,
                label="lower bound (two terms)")
        ax.errorbar(mc_sigmas, [getattr(m, f) for m in mc],
                    yerr=[2 * getattr(m, f + "_se") for m in mc], fmt="o", color="C2", ms=4,
                    capsize=2, label="Monte Carlo ±2 se")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(r"logit standard deviation $\sigma$")
        ax.set_ylim(1e-3, 2)
        ax.set_title(title)
    handles, labs = axes[0].get_legend_handles_labels()
    fig.legend(handles, labs, loc="outside lower center", ncol=4, fontsize=8.5)
    big = s >= 1
    for f, color, lab in (("jac_norm", "C0", r"$\|J\|_2$"), ("entropy", "C1", "$H$")):
        rel = np.abs(table[f + "_1"][big] / table[f][big] - 1)
        axes[2].plot(s[big], rel, color=color, label=f"1-term, {lab}")
        rel2 = np.abs(table[f + "_2"][big] / table[f][big] - 1)
        axes[2].plot(s[big], np.maximum(rel2, 1e-16), ":", color=color, lw=2.2,
                     label=f"2-term, {lab}")
    axes[2].axhline(0.01, color=plotting.ONE_COLOR, ls="--", lw=1, label="1 %")
    axes[2].set_xscale("log")
    axes[2].set_yscale("log")
    axes[2].set_ylim(1e-9, 10)
    axes[2].set_xlabel(r"$\sigma$")
    axes[2].set_title("relative error")
    axes[2].legend(loc="lower left", fontsize=8, ncol=1)
    return fig


def fig_mechanism(sigmas: tuple[float, ...] = (1.0, 3.0, 10.0)) -> Figure:
    """Why E||J||_2 ~ 1/sigma for two keys: the density of the gap against the
    window 1/(1 + cosh Delta) in which ||J||_2 is not small.

    Left: ``1/(1 + cosh Delta)`` (height 1/2, width about 2) and the density of
    ``Delta ~ N(0, 2 sigma^2)`` at each sigma. Right: their product, whose area
    is ``E||J||_2``; the density is nearly flat over the window, at height
    ``1/(2 sqrt(pi) sigma)``, so the area is about ``2 / (2 sqrt(pi) sigma)``.
    """
    sigmas = as_reals(sigmas, "sigmas", positive=True, maximum=1e6)
    if sigmas.size > 6:
        raise ValueError(f"sigmas must have at most 6 entries (one colour each); got {sigmas.size}")
    fig, (ax1, ax2) = plotting.figure(2, width=8.4, height=3.1)
    x = np.linspace(-12.0, 12.0, 1201)
    window = 1.0 / (1.0 + np.cosh(x))
    ax1.plot(x, window, color="k", lw=2, label=r"$\|J\|_2 = 1/(1+\cosh\Delta)$")
    for sig, color in zip(sigmas, ("C0", "C1", "C2", "C3"), strict=False):
        dens = np.exp(-x * x / (4.0 * sig * sig)) / (2.0 * math.sqrt(math.pi) * sig)
        ax1.plot(x, dens, color=color, ls="--", label=rf"density of $\Delta$, $\sigma = {sig:g}$")
        prod = dens * window
        area = float(two_token_expectations(sig).jac_norm)
        ax2.fill_between(x, prod, color=color, alpha=0.35,
                         label=rf"$\sigma = {sig:g}$: area {area:.3f}, "
                               rf"$1/(\sqrt{{\pi}}\sigma)$ = {1 / (math.sqrt(math.pi) * sig):.3f}")
        ax2.plot(x, prod, color=color, lw=1)
    ax1.set_xlabel(r"gap $\Delta = s_1 - s_2$")
    ax1.set_ylim(0, 0.55)
    ax1.legend(loc="upper right", fontsize=7.5)
    ax1.set_title("the window and the spread of the gap", fontsize=10)
    ax2.set_xlabel(r"gap $\Delta$")
    ax2.set_xlim(-6, 6)
    ax2.set_ylim(0, 0.21)
    ax2.legend(loc="upper center", fontsize=7.5)
    ax2.set_title(r"their product: area = $\mathbb{E}\,\|J\|_2$", fontsize=10)
    return fig


# --------------------------------------------------------------------------
# The distribution of ||J||_2 over queries
# --------------------------------------------------------------------------
def jac_norm_samples(d: int, n_keys: int, scaled: bool, queries: int = 2000,
                     seed: int = 0) -> np.ndarray:
    """``||J||_2`` of each of ``queries`` random queries (exact per query), shape (queries,)."""
    return np.asarray(softmax_jacobian_norm(nested_logits(d, n_keys, scaled, queries, seed)))


def fig_jac_distribution(n_keys: int = 64, ds: tuple[int, ...] = (16, 256, 4096),
                         queries: int = 2000, seed: int = 0) -> Figure:
    """Histograms of ||J||_2 over queries (unscaled) and its quantiles against d."""
    ds = _grid_ds(ds, "ds")
    if len(ds) != 3:
        raise ValueError(f"ds must have 3 entries (one colour each); got {len(ds)}")
    n_keys = as_int_at_least(n_keys, "n_keys", 1, 1024)
    queries = as_int_at_least(queries, "queries", 2, 2000)
    seed = as_seed(seed)
    fig, (ax1, ax2) = plotting.figure(2, width=8.4, height=3.2)
    edges = np.linspace(0, 0.5, 41)
    for d, color in zip(ds, ("C2", "C3", "C4"), strict=True):
        j = jac_norm_samples(d, n_keys, False, queries, seed)
        counts, _ = np.histogram(j, bins=edges)
        ax1.stairs(np.maximum(counts / j.size, 1e-9), edges, color=color, lw=1.6,
                   label=f"unscaled, $d_k$ = {d} (mean {j.mean():.3f})")
    j = jac_norm_samples(ds[-1], n_keys, True, queries, seed)
    counts, _ = np.histogram(j, bins=edges)
    ax1.stairs(np.maximum(counts / j.size, 1e-9), edges, color=_SCALED_COLOR, lw=1.2, ls="--",
               label=f"scaled, $d_k$ = {ds[-1]} (mean {j.mean():.3f})")
    ax1.set_yscale("log")
    ax1.set_ylim(0.5 / queries, 1.5)
    ax1.set_xlim(0, 0.5)
    ax1.set_xlabel(r"$\|J\|_2$ of one query")
    ax1.set_ylabel("share of queries per bin (log)")
    ax1.set_title(f"N = {n_keys}, {queries} queries")
    ax1.legend(loc="upper right", fontsize=8)
    qs = {"99th percentile": 99, "90th percentile": 90, "median": 50, "10th percentile": 10}
    dd = np.array(D_GRID)
    samples = np.array([jac_norm_samples(int(d), n_keys, False, queries, seed) for d in dd])
    for (lab, q), color in zip(qs.items(), ("C4", "C3", "C2", "C5"), strict=True):
        ax2.plot(dd, np.percentile(samples, q, axis=1), "o-", ms=3, color=color, label=lab)
    ax2.plot(dd, samples.mean(axis=1), "k--", lw=1.4, label="mean")
    ax2.axhline(0.5, color=plotting.HALF_COLOR, ls="--", lw=1, label="1/2 (sup)")
    _log2_axis(ax2)
    ax2.set_yscale("log")
    ax2.set_ylim(1e-6, 0.8)
    ax2.set_xlabel("head dimension $d_k$ (no scaling)")
    ax2.set_ylabel(r"$\|J\|_2$ across queries")
    ax2.set_title("quantiles over queries")
    ax2.legend(loc="lower left", fontsize=8, ncol=2)
    return fig


# --------------------------------------------------------------------------
# Non-monotone E||J||_2: rise, then 1/sigma decay
# --------------------------------------------------------------------------
def fixed_sigma_profile(n_keys: int, sigmas: np.ndarray, samples: int = 4000,
                        seed: int = 0) -> dict[str, np.ndarray]:
    """E||J||_2, E[p_(1)] and E[p_(2)] for N i.i.d. N(0, sigma^2) logits (common draws).

    Returns arrays of shape (len(sigmas),) under ``"sigma"``, ``"jac_norm"``,
    ``"jac_norm_se"``, ``"p1"``, ``"p2"``.
    """
    n_keys = as_int_at_least(n_keys, "n_keys", 2, 10**5)
    samples = as_int_at_least(samples, "samples", 2, 10**7 // n_keys)
    sigmas = as_reals(sigmas, "sigmas", positive=True)
    if sigmas.size > 10**4:
        raise ValueError(f"sigmas must have at most 10**4 entries; got {sigmas.size}")
    g = np.random.default_rng(as_seed(seed)).standard_normal((samples, n_keys))
    out = {k: [] for k in ("jac_norm", "jac_norm_se", "p1", "p2")}
    for sig in sigmas:
        st = saturation_stats_from_logits(sig * g)
        top2 = -np.partition(-softmax(sig * g), 1, axis=1)[:, :2]
        out["jac_norm"].append(st.jac_norm)
        out["jac_norm_se"].append(st.jac_norm_se)
        out["p1"].append(top2[:, 0].mean())
        out["p2"].append(top2[:, 1].mean())
    return {"sigma": sigmas} | {k: np.array(v) for k, v in out.items()}


def fig_nonmonotone(curves: dict[int, np.ndarray], profile: dict[str, np.ndarray],
                    n_keys: int = 64) -> Figure:
    """Left: unscaled E||J||_2 against d for several N. Right: the mechanism at fixed sigma."""
    curves = as_result(curves, "curves")
    profile = as_result(profile, "profile", ("sigma", "jac_norm", "jac_norm_se", "p1", "p2"),
                        producer="fixed_sigma_profile")
    n_keys = as_count(n_keys, "n_keys")
    fig, (ax1, ax2) = plotting.figure(2, width=8.4, height=3.3)
    dd = np.array(D_GRID)
    for (n, (mean, se)), color in zip(curves.items(), ("C0", "C2", "C1", "C4", "C5"),
                                      strict=False):
        ax1.errorbar(dd, mean, yerr=2 * se, fmt="o-", ms=3.5, capsize=2, color=color,
                     label=f"N = {n}")
        ax1.axhline(1 / n, color=color, ls=":", lw=1)
    _log2_axis(ax1)
    ax1.set_yscale("log")
    ax1.set_xlabel("head dimension $d_k$ (no scaling)")
    ax1.set_ylabel(r"$\mathbb{E}\,\|J\|_2$")
    ax1.set_title("rise, then fall (dotted: 1/N)")
    ax1.legend(loc="lower left", ncol=2, fontsize=8.5)
    s = profile["sigma"]
    ax2.plot(s, profile["p1"], color="C3", label=r"$\mathbb{E}\,p_{(1)}$ (upper bound)")
    ax2.plot(s, profile["jac_norm"], color="k", lw=2.2, label=r"$\mathbb{E}\,\|J\|_2$")
    ax2.plot(s, profile["p2"], color="C2", label=r"$\mathbb{E}\,p_{(2)}$ (lower bound)")
    ax2.axhline(1 / n_keys, color=plotting.ONE_COLOR, ls=":", lw=1, label="1/N")
    peak = int(np.argmax(profile["jac_norm"]))
    ax2.axvline(s[peak], color="k", lw=0.8, ls="--")
    ax2.set_xscale("log")
    ax2.set_yscale("log")
    ax2.set_ylim(5e-3, 1.2)
    ax2.set_xlabel(r"logit standard deviation $\sigma$")
    ax2.set_title(f"N = {n_keys}: p(2) ≤ ‖J‖₂ ≤ p(1); peak at σ ≈ {s[peak]:.2g}")
    ax2.legend(loc="upper left", fontsize=8)
    return fig


# --------------------------------------------------------------------------
# What actually vanishes: gradient norms
# --------------------------------------------------------------------------
def gradient_curves(n_keys: int = 64, ds: tuple[int, ...] = D_GRID, samples: int = 20_000,
                    seed: int = 0) -> dict:
    """:func:`lipattn.init_gradients.gradient_norms_fast` at each d, scaled and unscaled.

    Returns ``{"d": ndarray, True: {...}, False: {...}}``; each inner dict maps
    ``logits, query, keys, values`` and their ``_se`` to arrays of shape
    (len(ds),) (means and standard errors), and ``<name>_q`` to arrays of
    shape (len(ds), 3), the 10 %, 50 % and 90 % quantiles.
    """
    n_keys = as_int_at_least(n_keys, "n_keys", 1, 10**5)
    ds = as_counts(ds, "ds", maximum=10**5)
    samples = as_int_at_least(samples, "samples", 2, 10**8 // n_keys)  # cost O(samples N)
    seed = as_seed(seed)
    out: dict = {"d": np.asarray(ds)}
    names = ("logits", "query", "keys", "values")
    fields = (*names, *(n + "_se" for n in names), *(n + "_q" for n in names))
    for scaled in (True, False):
        rows = [gradient_norms_fast(d, n_keys, scaled, samples, seed=seed + 104729 * k)
                for k, d in enumerate(ds)]
        out[scaled] = {f: np.array([getattr(r, f) for r in rows]) for f in fields}
    return out


def fig_gradients(grads: dict, n_keys: int = 64) -> Figure:
    """Gradient norms against d: median with a 10-90 % band, and the mean.

    One panel per gradient, scaled against unscaled. The median and the band
    show the typical query; the mean (open markers) is carried by a few.
    """
    grads = as_result(grads, "grads", ("d", True, False), producer="gradient_curves")
    n_keys = as_count(n_keys, "n_keys")
    fig, axes = plotting.figure(3, width=8.4, height=3.3, sharex=True)
    dd = grads["d"]
    panels = {"logits": r"logits $\|\partial L/\partial s\|$",
              "query": r"query $\|\partial L/\partial q\|$ ($\propto W_Q$)",
              "values": r"values $\|\partial L/\partial V\|_F$"}
    floor = 1e-8
    for ax, (name, title) in zip(axes, panels.items(), strict=True):
        for scaled, color, ls, lab in ((True, _SCALED_COLOR, "-", r"with $1/\sqrt{d_k}$"),
                                       (False, _UNSCALED_COLOR, "--", "unscaled")):
            q = np.maximum(grads[scaled][name + "_q"], floor)
            ax.fill_between(dd, q[:, 0], q[:, 2], color=color, alpha=0.18, lw=0)
            ax.plot(dd, q[:, 1], ls, color=color, lw=1.6, label=f"median, {lab}")
            ax.plot(dd, grads[scaled][name], "o", ms=4, mfc="none", color=color,
                    label=f"mean, {lab}")
        _log2_axis(ax)
        ax.set_yscale("log")
        ax.set_ylim(floor, 1e2)
        ax.set_xlabel("head dimension $d_k$")
        ax.set_title(title, fontsize=10)
    axes[0].set_ylabel(f"norm, N = {n_keys} (band: 10-90 %)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=4, fontsize=8.5)
    return fig


def logit_step_gain(d: int, n_keys: int, scaled: bool, samples: int = 200,
                    seed: int = 0) -> float:
    """Mean ``||delta s|| / ||dL/ds||`` for a unit-rate gradient step on the query.

    A step ``q -> q - eta dL/dq`` with ``dL/dq = c K^T dL/ds`` moves the logits
    ``s = c K q`` by ``delta s = -eta c^2 K K^T dL/ds``; this returns the
    sample mean of ``c^2 ||K K^T dL/ds|| / ||dL/ds||`` (``eta = 1``), with
    ``K`` drawn explicitly (cost ``O(samples N d)``), ``u = V g ~ N(0, I_N)``.
    For ``d >> N``, ``K K^T ~ d I`` and the gain is about ``c^2 d``: 1 with
    scaling, ``d`` without.
    """
    d = as_count(d, "d", maximum=10**5)
    n_keys = as_int_at_least(n_keys, "n_keys", 2, 10**5)
    scaled = as_bool(scaled, "scaled")
    samples = as_count(samples, "samples", maximum=max(1, 10**8 // (n_keys * d)))
    rng = np.random.default_rng(as_seed(seed))
    c = 1 / math.sqrt(d) if scaled else 1.0
    q = rng.standard_normal((samples, d))
    k = rng.standard_normal((samples, n_keys, d))
    u = rng.standard_normal((samples, n_keys))
    p = softmax(c * np.einsum("snd,sd->sn", k, q))
    ds = p * (u - np.sum(p * u, axis=1, keepdims=True))
    kkt_ds = np.einsum("snd,smd,sm->sn", k, k, ds)
    return float(np.mean(c * c * np.linalg.norm(kkt_ds, axis=1) / np.linalg.norm(ds, axis=1)))


# --------------------------------------------------------------------------
# The random-energy-model approximation (optional, an approximation)
# --------------------------------------------------------------------------
def fig_rem(n_keys_list: tuple[int, ...] = (64, 1024), samples: int = 400,
            seed: int = 0) -> Figure:
    """E[H] of N i.i.d. N(0, sigma^2) logits (Monte Carlo) against ln N - sigma^2 / 2."""
    from ...quadrature import rem_entropy_approx

    n_keys_list = as_counts(n_keys_list, "n_keys_list", minimum=2, maximum=10**5)
    if len(n_keys_list) > 2:
        raise ValueError(f"n_keys_list must have at most 2 entries (one colour each); "
                         f"got {len(n_keys_list)}")
    samples = as_count(samples, "samples", maximum=10**6 // max(n_keys_list))
    fig, ax = plotting.figure(1, width=6.5, height=3.3)
    sig = np.linspace(0.05, 6.0, 60)
    rng = np.random.default_rng(as_seed(seed))
    for n, color in zip(n_keys_list, ("C0", "C1"), strict=False):
        g = rng.standard_normal((samples, n))
        h = np.array([entropy(softmax(s * g)).mean() for s in sig])
        ax.plot(sig, h, color=color, label=f"N = {n}, Monte Carlo")
        ax.plot(sig, [rem_entropy_approx(float(s), n) for s in sig], "--", color=color,
                label=rf"N = {n}, $\ln N - \sigma^2/2$ (approximation)")
        ax.axvline(math.sqrt(2 * math.log(n)), color=color, ls=":", lw=1)
    ax.set_xlabel(r"logit standard deviation $\sigma$ (dotted: $\sqrt{2\ln N}$)")
    ax.set_ylabel(r"$\mathbb{E}[H(p)]$ (nats)")
    ax.set_ylim(0, 7.3)
    ax.legend(loc="upper right", fontsize=8)
    return fig
