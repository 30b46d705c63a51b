r"""The attention masks of the real decoders (causal, sliding window, padding), as in HF.

:func:`attention_mask_matrix` is the one place where a model's boolean (N, N)
mask is built (True = query i may attend to key j), from

- causality: :math:`j \le i`;
- a sliding window of ``w`` keys (Mistral's and Gemma 2's ``sliding_window``):
  :math:`i - j < w`, so a query sees itself and the ``w - 1`` keys before it,
  as ``transformers.masking_utils.sliding_window_overlay`` (``kv_idx > q_idx -
  sliding_window``); a window of at least N changes nothing;
- padding (Hugging Face's ``attention_mask``, shape (N,), 1 for a real token
  and 0 for padding): padded *keys* are masked for every query, as
  ``padding_mask_function`` does. Queries at padded positions are computed like
  any other (their outputs are part of the map, as in Hugging Face).

A query row left with no key at all -- a padded position before the first
real token (left padding), or one whose window holds only padding -- is an
error: Hugging Face's output there depends on its attention backend (``eager``
averages every value row, because its ``finfo.min`` bias absorbs the logits;
``sdpa`` on torch >= 2.5 returns zero), so no single answer is right. Real
tokens never attend to padding, so their outputs do not depend on those
positions: drop them (for RoPE models the real tokens' outputs are unchanged
up to rounding, since RoPE enters the logits through relative positions).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["check_attention_mask", "attention_mask_matrix"]


def check_attention_mask(attention_mask: Any, N: int) -> np.ndarray | None:
    """Validate a padding mask for N tokens: None, or a bool array of shape (N,) (True = real).

    Accepts bools, integers or floats that are exactly 0 or 1 (a numpy array, a
    list, or a CPU torch tensor), with at least one real token.
    """
    if attention_mask is None:
        return None
    if isinstance(attention_mask, (str, bytes)):
        raise TypeError("attention_mask must be an array of shape (N,) of 0/1 (1 = real token, "
                        "0 = padding); got str")
    try:
        a = np.asarray(attention_mask)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise TypeError("attention_mask must be an array of shape (N,) of 0/1 (1 = real token, "
                        f"0 = padding); got {type(attention_mask).__name__}") from exc
    if a.dtype != bool and not (np.issubdtype(a.dtype, np.integer)
                                or np.issubdtype(a.dtype, np.floating)):
        raise TypeError("attention_mask must be an array of shape (N,) of 0/1 (1 = real token, "
                        f"0 = padding); got dtype {a.dtype}")
    if a.shape != (N,):
        hint = " (one sequence: pass attention_mask[0])" if a.shape == (1, N) else ""
        raise ValueError(f"attention_mask must have shape (N,) = ({N},), one entry per token"
                         f"{hint}; got shape {a.shape}")
    if a.dtype != bool:
        bad = ~((a == 0) | (a == 1))
        if bad.any():
            raise ValueError("attention_mask must hold only 0 (padding) and 1 (real token); "
                             f"got {a[bad][0]!r} at position {int(np.flatnonzero(bad)[0])}")
        a = a == 1
    if not a.any():
        raise ValueError("attention_mask must mark at least one real token (a 1); got all 0")
    return a


def attention_mask_matrix(N: int, *, attention_mask: np.ndarray | None = None,
                          sliding_window: int | None = None) -> np.ndarray:
    """The bool (N, N) mask: causal, within the sliding window, real keys only.

    Parameters
    ----------
    N : int
        Tokens.
    attention_mask : None or bool ndarray, shape (N,)
        Validated by :func:`check_attention_mask` (True = real token).
    sliding_window : None or int >= 1
        Keys a query sees, itself included (``i - j < sliding_window``).

    Raises
    ------
    ValueError
        For a query row with no key (see the module docstring), naming the rows.
    """
    i = np.arange(N)
    allowed = i[None, :] <= i[:, None]
    if sliding_window is not None:
        allowed &= (i[:, None] - i[None, :]) < sliding_window
    if attention_mask is not None:
        allowed &= attention_mask[None, :]
        empty = np.flatnonzero(~allowed.any(axis=1))
        if empty.size:
            first = int(np.argmax(attention_mask))
            where = ("before the first real token" if empty[-1] < first else
                     "with only padding in their sliding window" if empty[0] > first else
                     "before the first real token or with only padding in their sliding window")
            raise ValueError(
                f"attention_mask leaves the padded positions {empty.tolist()} ({where}) with no "
                "key to attend to; Hugging Face's output there depends on its attention backend "
                "(eager: the mean of all values; sdpa: zero), so it is not modelled. Drop those "
                "positions: real tokens never attend to padding, so their outputs do not "
                "depend on them")
    return allowed
