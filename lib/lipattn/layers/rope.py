r"""Rotary position embeddings (RoPE), Hugging Face's default convention.

For a head vector :math:`x \in \mathbb R^{d_h}` (``d_h`` even) at position
:math:`t`, with :math:`\theta_i = \text{theta}^{-2i/d_h}` (``inv_freq``,
:math:`i = 0, \dots, d_h/2 - 1`) and the angles
:math:`\phi = t\,(\theta, \theta)` (the frequencies repeated, not interleaved),

.. math::

    R_t x = x \odot \cos\phi + \operatorname{rot}(x) \odot \sin\phi, \qquad
    \operatorname{rot}(x_1, x_2) = (-x_2, x_1)

(``rotate_half``: the first half of the vector pairs with the second). Each
:math:`R_t` is a rotation, so its adjoint is its inverse,
:math:`R_t^\top x = x \odot \cos\phi - \operatorname{rot}(x) \odot \sin\phi`.

The tables follow Hugging Face's ``LlamaRotaryEmbedding``, which computes
``inv_freq`` and the angles in float32 even for a float64 model; the cosines
and sines of those angles are then taken in float64 (they agree with
Hugging Face's float32 tables to float32 rounding, about 6e-8). ``inv_freq`` itself equals
torch's bit for bit: the float32 power is rounded once from float64, as torch's
correctly rounded float32 ``pow`` gives it (numpy's float32 ``pow`` is 1 ulp off on
about one entry in ten).

Llama 3.1's scaling (``rope_type="llama3"``, :func:`rope_inv_freq` with
``scaling``) rescales the frequencies, also in float32 as Hugging Face's
``_compute_llama3_parameters``: with the wavelengths
:math:`\lambda_i = 2\pi/\theta_i`, the context :math:`L` =
``original_max_position_embeddings``, factor :math:`s`, and
:math:`\lambda_{lo} = L/\text{low\_freq\_factor}`,
:math:`\lambda_{hi} = L/\text{high\_freq\_factor}`: :math:`\theta_i` is kept
where :math:`\lambda_i < \lambda_{hi}`, divided by :math:`s` where
:math:`\lambda_i > \lambda_{lo}`, and in between interpolated,
:math:`(1 - a)\,\theta_i/s + a\,\theta_i` with
:math:`a = (L/\lambda_i - \text{low})/(\text{high} - \text{low})`.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["rope_tables", "rope_inv_freq", "rope", "rope_transpose", "LLAMA3_KEYS"]

#: The parameters of ``rope_type="llama3"`` scaling.
LLAMA3_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


def rope_inv_freq(head_dim: int, theta: float, scaling: dict | None = None) -> np.ndarray:
    """The float32 frequencies ``inv_freq``, shape (head_dim / 2,).

    ``scaling``: None, or ``{"rope_type": "llama3", "factor": ..., "low_freq_factor": ...,
    "high_freq_factor": ..., "original_max_position_embeddings": ...}`` (validated by the
    caller: factor >= 1, high_freq_factor > low_freq_factor > 0).
    """
    f32 = np.float32
    expo = np.arange(0, head_dim, 2, dtype=np.int64).astype(f32) / f32(head_dim)
    # torch's float32 pow is correctly rounded; numpy's float32 pow is not (1 ulp off on
    # about 1 entry in 10), so the power is taken in float64 and rounded once
    power = (np.float64(f32(theta)) ** expo.astype(np.float64)).astype(f32)
    inv_freq = f32(1.0) / power
    if scaling is None:
        return inv_freq
    if scaling.get("rope_type") != "llama3":
        raise ValueError(f"scaling must be None or a llama3 rope scaling; got {scaling!r}")
    factor, low, high, old = (float(scaling[k]) for k in LLAMA3_KEYS)
    low_wavelen, high_wavelen = old / low, old / high
    wavelen = f32(2 * math.pi) / inv_freq                       # float32, as torch's
    scaled = np.where(wavelen > low_wavelen, inv_freq / f32(factor), inv_freq).astype(f32)
    smooth = ((f32(old) / wavelen - f32(low)) / f32(high - low)).astype(f32)
    smoothed = ((1 - smooth) * scaled / f32(factor) + smooth * scaled).astype(f32)
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, scaled).astype(f32)


def rope_tables(N: int, head_dim: int, theta: float,
                scaling: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(cos, sin)``, each shape (N, head_dim), for positions 0..N-1 (``scaling``: see
    :func:`rope_inv_freq`)."""
    inv_freq = rope_inv_freq(head_dim, theta, scaling)
    angles = np.arange(N, dtype=np.float32)[:, None] * inv_freq[None, :]
    emb = np.concatenate([angles, angles], axis=-1).astype(np.float64)
    return np.cos(emb), np.sin(emb)


def _rotate_half(x: np.ndarray) -> np.ndarray:
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """:math:`R_t x` for x of shape (..., N, head_dim); linear in x."""
    return x * cos + _rotate_half(x) * sin


def rope_transpose(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """:math:`R_t^\\top x`, the adjoint (and inverse) of :func:`rope`."""
    return x * cos - _rotate_half(x) * sin
