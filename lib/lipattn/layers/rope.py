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
Hugging Face's float32 tables to float32 rounding, about 6e-8).
"""

from __future__ import annotations

import numpy as np

__all__ = ["rope_tables", "rope", "rope_transpose"]


def rope_tables(N: int, head_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """``(cos, sin)``, each shape (N, head_dim), for positions 0..N-1."""
    inv_freq = (np.float32(1.0) / (np.float32(theta) ** (
        np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(head_dim))))
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
