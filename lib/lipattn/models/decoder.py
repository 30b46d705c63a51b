r"""A pre-norm decoder built from :mod:`lipattn.layers`: what every family shares.

Block l maps the residual stream :math:`x` (shape (N, d)) to

.. math::

    x' = x + \mathrm{Attn}(\mathrm{Norm}_1(x)), \qquad
    x'' = x' + \mathrm{MLP}(\mathrm{Norm}_2(x')),

with causal multi-head attention (Gemma 2 adds a norm at the end of each
branch, :class:`Block`'s post-norms); a final norm follows the last block.
:class:`Decoder` holds the blocks and gives the forward pass, Jacobian-vector
and vector-Jacobian products, and exact local Lipschitz constants (the
spectral norm of the Jacobian with respect to the hidden states, Frobenius
norms on both sides) of any range of blocks, of each sublayer and of each
head. Constants are computed matrix-free by Golub–Kahan–Lanczos
(:func:`lipattn.jacobian_norm`): exact up to the relative tolerance ``tol``
(certified residual), or a :class:`lipattn.lanczos.ConvergenceError`.

Precision
---------
By default weights and computations are float64: a float32 (or float16) state
dict, as exported from most checkpoints, is converted exactly to float64, so
the forward pass, the products and the constants are computed in float64.
``dtype=numpy.float32`` stores the weights and runs the forward pass and every product in float32
(half the memory, faster matmuls); the Lanczos recursion itself stays in
float64. The products then carry relative errors of about 1e-7, so constants
are accurate to about 1e-6 relative: a float32 model raises every ``tol`` below
1e-5 to 1e-5 (the certified residual is reported in
:meth:`Decoder.local_lipschitz_info`).

Masks
-----
Every method takes ``attention_mask`` (shape (N,), 1 for a real token, 0 for
padding; Hugging Face's convention: padded *keys* are masked, padded queries
are computed and are part of the map). Each block's attention mask is causal,
restricted to the block's ``sliding_window`` (an int or None; a query sees
itself and the ``sliding_window - 1`` keys before it) and to the real keys,
built per call by :func:`lipattn.models.masks.attention_mask_matrix` on
shallow copies of the blocks (the model is never changed, so calls may
interleave). A padded query with no real key to attend to (left padding) is
an error, see :mod:`lipattn.models.masks`.

Singular vectors and the per-token view
---------------------------------------
The ``_info`` methods return :class:`lipattn.lanczos.LipschitzEstimate`'s
whose ``input_direction`` v and ``output_direction`` u, shape (N, d) each and
unit norm, satisfy :math:`J v = \sigma u` (to the certified residual): v is
the most sensitive perturbation of the hidden states and u the response.
:meth:`Decoder.token_sensitivity` is the norm of v per token, and
:meth:`Decoder.row_lipschitz` the constant of the map to one output row (one
token's output, e.g. the last one, which predicts the next token).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from .._validate import as_bool, as_int_at_least, as_real_array, as_seed
from ..lanczos import LipschitzEstimate, _check_tol, jacobian_norm
from ..layers import MultiHeadAttention, Residual, Sequential
from .masks import attention_mask_matrix, check_attention_mask

__all__ = ["Block", "Decoder"]

#: The smallest tol of a float32 model (smaller ones are raised to it).
FLOAT32_TOL = 1e-5


class Block(Sequential):
    """One pre-norm block: ``Residual(norm_1, attn)`` then ``Residual(norm_2, mlp)``.

    Attributes ``norm_1``, ``attn``, ``norm_2``, ``mlp`` are the layers;
    ``attention_branch`` (``norm_1`` then ``attn``) and ``mlp_branch`` the
    residual branches. Gemma 2's post-norms (``post_attention_norm``,
    ``post_mlp_norm``, None otherwise) end their branch:
    :math:`x' = x + \\mathrm{Norm}_a(\\mathrm{Attn}(\\mathrm{Norm}_1(x)))`,
    :math:`x'' = x' + \\mathrm{Norm}_m(\\mathrm{MLP}(\\mathrm{Norm}_2(x')))`.
    ``sliding_window`` (int or None) is the attention's window: query t sees the
    keys t - w < s <= t (Hugging Face's ``sliding_window``), or the whole causal
    prefix for None; the masks are built per call ("Masks" in the module docstring).
    """

    def __init__(self, norm_1, attn, norm_2, mlp, *, post_attention_norm=None,
                 post_mlp_norm=None, sliding_window: int | None = None) -> None:
        self.norm_1, self.attn, self.norm_2, self.mlp = norm_1, attn, norm_2, mlp
        self.post_attention_norm, self.post_mlp_norm = post_attention_norm, post_mlp_norm
        self.sliding_window = sliding_window
        self.attention_branch = Sequential(
            [norm_1, attn] + ([post_attention_norm] if post_attention_norm is not None else []))
        self.mlp_branch = Sequential(
            [norm_2, mlp] + ([post_mlp_norm] if post_mlp_norm is not None else []))
        super().__init__([Residual(self.attention_branch), Residual(self.mlp_branch)])


def _with_mask(obj: Any, mask: np.ndarray, memo: dict) -> Any:
    """A shallow copy of a layer tree whose attention layers carry ``mask``.

    Containers (Sequential, Residual, Block and their subclasses) are copied
    with their attributes remapped through ``memo``, so that a layer reachable
    along several paths (``block.attn`` and ``block.attention_branch``) has one
    copy; weights are shared, nothing of the original is changed.
    """
    key = id(obj)
    if key in memo:
        return memo[key]
    if isinstance(obj, MultiHeadAttention):
        new = copy.copy(obj)
        new.mask = mask
        memo[key] = new
        return new
    if not isinstance(obj, (Sequential, Residual)):
        return obj
    new = copy.copy(obj)
    memo[key] = new
    for name, value in vars(obj).items():
        if isinstance(value, list):
            setattr(new, name, [_with_mask(x, mask, memo) for x in value])
        elif isinstance(value, (MultiHeadAttention, Sequential, Residual)):
            setattr(new, name, _with_mask(value, mask, memo))
    return new


class Decoder:
    """A stack of :class:`Block`'s and a final norm; the base of GPT2 and Llama.

    Attributes
    ----------
    blocks : list of Block
    final : layer
        The final norm (``ln_f`` or ``norm``).
    n_layer, d_model, n_head, n_kv_head, head_dim : int
    dtype : numpy dtype
        float64 (default) or float32, see the module docstring.
    """

    def __init__(self, blocks: list[Block], final, *, n_head: int, n_kv_head: int,
                 dtype, d_model: int | None = None, head_dim: int | None = None) -> None:
        # blocks: a list, or a sequence that builds them on demand
        # (lipattn.models.blocks.LazyBlocks, with d_model and head_dim given)
        self.blocks, self.final = blocks, final
        self.n_layer = len(blocks)
        self.n_head, self.n_kv_head = n_head, n_kv_head
        self.dtype = np.dtype(dtype)
        self.d_model = int(blocks[0].attn.W_Q.shape[0]) if d_model is None else d_model
        self.head_dim = self.d_model // n_head if head_dim is None else head_dim

    def __repr__(self) -> str:
        parts = [f"n_layer={self.n_layer}", f"d_model={self.d_model}", f"n_head={self.n_head}",
                 f"n_kv_head={self.n_kv_head}", f"head_dim={self.head_dim}"]
        model_type = getattr(self, "model_type", None)
        if model_type is not None:
            parts.insert(0, f"model_type={model_type!r}")
        # the windows without building lazily loaded blocks: from load's layout, or the list
        if isinstance(self.blocks, list):
            windows = [getattr(b, "sliding_window", None) for b in self.blocks]
        else:
            windows = list(getattr(getattr(self, "layout", None), "sliding_windows", ()))
        if any(w is not None for w in windows):
            parts.append("sliding_window="
                         + (repr(windows[0]) if len(set(windows)) == 1 else repr(windows)))
        parts.append(f"dtype={self.dtype.name}")
        return f"{type(self).__name__}({', '.join(parts)})"

    # -- validation -------------------------------------------------------------
    def _check_H(self, H: Any, name: str = "H") -> np.ndarray:
        H = as_real_array(H, name, ndim=2)
        if H.shape[1] != self.d_model:
            raise ValueError(f"{name} must have shape (N, d) = (N, {self.d_model}) to match "
                             f"the model; got shape {H.shape}")
        return H.astype(self.dtype, copy=False)

    def _range(self, start: Any, stop: Any, final_norm: Any) -> tuple[int, int, bool]:
        start = as_int_at_least(start, "start", 0)
        if start > self.n_layer:
            raise ValueError(f"start must be in [0, n_layer] = [0, {self.n_layer}]; got {start}")
        stop = self.n_layer if stop is None else as_int_at_least(stop, "stop", 0)
        if not start <= stop <= self.n_layer:
            raise ValueError(f"stop must be in [start, n_layer] = [{start}, {self.n_layer}]; "
                             f"got {stop}")
        return start, stop, as_bool(final_norm, "final_norm")

    def _layer_index(self, layer: Any) -> int:
        layer = as_int_at_least(layer, "layer", 0)
        if layer >= self.n_layer:
            raise ValueError(f"layer must be in [0, n_layer) = [0, {self.n_layer}); got {layer}")
        return layer

    def _tol(self, tol: Any) -> float:
        tol = _check_tol(tol)
        return max(tol, FLOAT32_TOL) if self.dtype == np.float32 else tol

    def _block(self, i: int, N: int, pad: np.ndarray | None) -> Block:
        """Block i for N tokens: itself, or a masked copy (padding, a window shorter than N)."""
        block = self.blocks[i]
        window = getattr(block, "sliding_window", None)
        if pad is None and (window is None or window >= N):
            return block
        mask = attention_mask_matrix(N, attention_mask=pad, sliding_window=window)
        return _with_mask(block, mask, {})

    def _map(self, start: int, stop: int, final_norm: bool, N: int,
             pad: np.ndarray | None) -> Sequential:
        return Sequential([self._block(i, N, pad) for i in range(start, stop)]
                          + ([self.final] if final_norm else []))

    def _norm(self, layer, X: np.ndarray, tol: float, seed: int,
              row: int | None = None) -> LipschitzEstimate:
        """Lanczos on ``layer`` at X (or on its output row ``row`` alone)."""
        Y, state = layer.forward(X)
        dt = self.dtype
        jvp = lambda E: layer.jvp(state, E.astype(dt, copy=False))  # noqa: E731
        vjp = lambda G: layer.vjp(state, G.astype(dt, copy=False))  # noqa: E731
        out_shape = Y.shape
        if row is not None:
            full_jvp, full_vjp, out_shape = jvp, vjp, Y.shape[1:]

            def jvp(E):
                return full_jvp(E)[row]

            def vjp(g):
                G = np.zeros(Y.shape, dtype=dt)
                G[row] = g
                return full_vjp(G)
        return jacobian_norm(jvp, vjp, X.shape, out_shape=out_shape, tol=tol, seed=seed)

    def _setup(self, H: Any, attention_mask: Any, tol: Any = None,
               seed: Any = 0) -> tuple[np.ndarray, np.ndarray | None, float | None, int]:
        H = self._check_H(H)
        pad = check_attention_mask(attention_mask, H.shape[0])
        tol = None if tol is None else self._tol(tol)
        seed = as_seed(seed)
        return H, pad, tol, seed

    # -- the public API -----------------------------------------------------------
    def forward(self, H: Any, *, start: int = 0, stop: int | None = None,
                final_norm: bool = False, attention_mask: Any = None) -> np.ndarray:
        """Blocks ``start..stop-1`` applied to hidden states H, then the final norm if asked.

        Parameters
        ----------
        H : array_like, shape (N, d)
            The residual stream entering block ``start`` (e.g. :meth:`embed`'s output
            for ``start = 0``), finite.
        start, stop : int
            ``0 <= start <= stop <= n_layer``; ``stop=None`` means ``n_layer``.
        final_norm : bool
            Apply ``ln_f`` / ``norm`` at the end.
        attention_mask : array_like, shape (N,), optional
            1 for a real token, 0 for padding (Hugging Face's convention:
            padded keys are masked; see "Masks" in the module docstring).
            Default: every token is real.

        Returns
        -------
        ndarray, shape (N, d), in the model's dtype
        """
        H, pad, _, _ = self._setup(H, attention_mask)
        return self._map(*self._range(start, stop, final_norm), H.shape[0], pad).forward(H)[0]

    def _product(self, H: Any, V: Any, name: str, start, stop, final_norm, attention_mask,
                 adjoint: bool):
        H, pad, _, _ = self._setup(H, attention_mask)
        V = self._check_H(V, name)
        if V.shape != H.shape:
            raise ValueError(f"{name} must have the shape of H, {H.shape}; got shape {V.shape}")
        layer = self._map(*self._range(start, stop, final_norm), H.shape[0], pad)
        state = layer.forward(H)[1]
        return layer.vjp(state, V) if adjoint else layer.jvp(state, V)

    def jvp(self, H: Any, E: Any, *, start: int = 0, stop: int | None = None,
            final_norm: bool = False, attention_mask: Any = None) -> np.ndarray:
        """The Jacobian-vector product of :meth:`forward` at H in the direction E, (N, d)."""
        return self._product(H, E, "E", start, stop, final_norm, attention_mask, adjoint=False)

    def vjp(self, H: Any, G: Any, *, start: int = 0, stop: int | None = None,
            final_norm: bool = False, attention_mask: Any = None) -> np.ndarray:
        """The vector-Jacobian product (adjoint) of :meth:`forward` at H, (N, d) -> (N, d)."""
        return self._product(H, G, "G", start, stop, final_norm, attention_mask, adjoint=True)

    def local_lipschitz_info(self, H: Any, *, start: int = 0, stop: int | None = None,
                             final_norm: bool = False, attention_mask: Any = None,
                             tol: float = 1e-10, seed: int = 0) -> LipschitzEstimate:
        """:meth:`local_lipschitz` with its certificate and singular vectors.

        Returns
        -------
        LipschitzEstimate
            ``value``, ``products``, the certified relative ``residual``, and
            ``input_direction`` v, ``output_direction`` u, each of shape (N, d)
            and unit norm (Frobenius), with :meth:`jvp` (H, v) = value * u (to
            the residual): v is the most sensitive perturbation of H.
        """
        H, pad, tol, seed = self._setup(H, attention_mask, tol, seed)
        layer = self._map(*self._range(start, stop, final_norm), H.shape[0], pad)
        return self._norm(layer, H, tol, seed)

    def local_lipschitz(self, H: Any, *, start: int = 0, stop: int | None = None,
                        final_norm: bool = False, attention_mask: Any = None,
                        tol: float = 1e-10, seed: int = 0) -> float:
        r"""The exact local Lipschitz constant of :meth:`forward`'s map at H.

        :math:`\|D F(H)\|_2` for F = blocks ``start..stop-1`` (then the final norm
        if ``final_norm``), Frobenius norms on inputs and outputs, by
        Golub–Kahan–Lanczos on the closed-form jvp and vjp: one forward pass,
        then two products per step, each costing about one forward pass.

        Parameters
        ----------
        H : array_like, shape (N, d)
        start, stop, final_norm, attention_mask
            As in :meth:`forward`.
        tol : float, default 1e-10
            Relative residual tolerance in [1e-14, 1) (at least 1e-5 for a
            float32 model, see the module docstring).
        seed : int, default 0
            Seed (>= 0) of Lanczos's random start.

        Returns
        -------
        float
            Exact up to the relative tolerance tol (a singular value lies within
            tol of it; that it is the largest rests on the random start: another
            ``seed`` gives the same value to within tol).
        """
        return self.local_lipschitz_info(H, start=start, stop=stop, final_norm=final_norm,
                                         attention_mask=attention_mask, tol=tol,
                                         seed=seed).value

    def token_sensitivity(self, H: Any, *, start: int = 0, stop: int | None = None,
                          final_norm: bool = False, attention_mask: Any = None,
                          tol: float = 1e-10, seed: int = 0) -> np.ndarray:
        """The norm per token of the most sensitive input direction, shape (N,).

        ``numpy.linalg.norm(info.input_direction, axis=1)`` for ``info =``
        :meth:`local_lipschitz_info` (same arguments): how much of the
        perturbation of H that the map amplifies most sits on each token. The
        squares sum to 1.
        """
        info = self.local_lipschitz_info(H, start=start, stop=stop, final_norm=final_norm,
                                         attention_mask=attention_mask, tol=tol, seed=seed)
        return np.linalg.norm(info.input_direction, axis=1)

    def _row(self, row: Any, N: int) -> int:
        if isinstance(row, bool) or not isinstance(row, (int, np.integer)):
            raise TypeError(f"row must be an integer token position; got {type(row).__name__}")
        if not -N <= row < N:
            raise ValueError(f"row must be in [-N, N) = [{-N}, {N}) (negative counts from "
                             f"the end, as in numpy); got {row}")
        return int(row) % N

    def row_lipschitz_info(self, H: Any, row: int, *, start: int = 0, stop: int | None = None,
                           final_norm: bool = False, attention_mask: Any = None,
                           tol: float = 1e-10, seed: int = 0) -> LipschitzEstimate:
        """:meth:`row_lipschitz` with its certificate and singular vectors.

        ``input_direction`` has shape (N, d) (zero after ``row``: causal),
        ``output_direction`` shape (d,). The map has fewer outputs than inputs,
        so Lanczos runs on its adjoint: ``vjp`` of u is ``value * v`` up to
        rounding, and ``J v = value * u`` to the certified residual.
        """
        H, pad, tol, seed = self._setup(H, attention_mask, tol, seed)
        row = self._row(row, H.shape[0])
        layer = self._map(*self._range(start, stop, final_norm), H.shape[0], pad)
        return self._norm(layer, H, tol, seed, row=row)

    def row_lipschitz(self, H: Any, row: int, *, start: int = 0, stop: int | None = None,
                      final_norm: bool = False, attention_mask: Any = None,
                      tol: float = 1e-10, seed: int = 0) -> float:
        r"""The exact local constant of the map from H to one output row (one token's output).

        :math:`\|D F(H)_{r,:}\|_2` for :math:`F` as in :meth:`local_lipschitz`:
        the spectral norm of the (d, N d) block of rows of the Jacobian that
        belong to output token ``row`` (``row=-1``: the last token, the one
        that predicts the next). At most :meth:`local_lipschitz`.

        Parameters
        ----------
        H : array_like, shape (N, d)
        row : int
            Token position in [-N, N) (negative counts from the end).
        start, stop, final_norm, attention_mask, tol, seed
            As in :meth:`local_lipschitz`.

        Returns
        -------
        float
            Exact up to tol.
        """
        return self.row_lipschitz_info(H, row, start=start, stop=stop, final_norm=final_norm,
                                       attention_mask=attention_mask, tol=tol, seed=seed).value

    def block_input(self, H: Any, layer: int, *, attention_mask: Any = None) -> np.ndarray:
        """The residual stream entering block ``layer`` from H entering block 0."""
        return self.forward(H, stop=self._layer_index(layer), attention_mask=attention_mask)

    def sublayer_lipschitz_info(self, H: Any, layer: int, *, branch: str = "attention",
                                residual: bool = False, attention_mask: Any = None,
                                tol: float = 1e-10, seed: int = 0) -> LipschitzEstimate:
        """:meth:`sublayer_lipschitz` with its certificate and singular vectors ((N, d) each)."""
        H, pad, tol, seed = self._setup(H, attention_mask, tol, seed)
        block = self._block(self._layer_index(layer), H.shape[0], pad)
        if branch not in ("attention", "mlp"):
            raise ValueError(f"branch must be 'attention' or 'mlp'; got {branch!r}")
        residual = as_bool(residual, "residual")
        X = H
        if branch == "mlp":
            X = block.layers[0].forward(H)[0]
            f = block.mlp_branch
        else:
            f = block.attention_branch
        return self._norm(Residual(f) if residual else f, X, tol, seed)

    def sublayer_lipschitz(self, H: Any, layer: int, *, branch: str = "attention",
                           residual: bool = False, attention_mask: Any = None,
                           tol: float = 1e-10, seed: int = 0) -> float:
        r"""Exact local constant of one branch of block ``layer``, with or without the residual.

        ``H`` is the residual stream *entering block* ``layer`` (see
        :meth:`block_input`). ``branch="attention"``: the map
        :math:`x \mapsto \mathrm{Attn}(\mathrm{Norm}_1(x))` at :math:`x = H`
        (``residual=True``: :math:`x + \dots`). ``branch="mlp"``:
        :math:`x' \mapsto \mathrm{MLP}(\mathrm{Norm}_2(x'))` at the stream
        :math:`x' = H + \mathrm{Attn}(\mathrm{Norm}_1(H))` between the two
        sublayers (``residual=True``: :math:`x' + \dots`). ``attention_mask``,
        ``tol`` and ``seed`` as in :meth:`local_lipschitz`.

        Returns
        -------
        float
            Exact up to tol, as in :meth:`local_lipschitz`.
        """
        return self.sublayer_lipschitz_info(H, layer, branch=branch, residual=residual,
                                            attention_mask=attention_mask, tol=tol,
                                            seed=seed).value

    def head_lipschitz_info(self, H: Any, layer: int, *, include_norm: bool = True,
                            attention_mask: Any = None, tol: float = 1e-10,
                            seed: int = 0) -> list[LipschitzEstimate]:
        """:meth:`head_lipschitz` with certificates and singular vectors: one
        :class:`~lipattn.lanczos.LipschitzEstimate` per head (directions (N, d))."""
        H, pad, tol, seed = self._setup(H, attention_mask, tol, seed)
        block = self._block(self._layer_index(layer), H.shape[0], pad)
        include_norm = as_bool(include_norm, "include_norm")
        X = H if include_norm else block.norm_1.forward(H)[0]
        out = []
        for i in range(self.n_head):
            head = block.attn.head(i)
            f = Sequential([block.norm_1, head]) if include_norm else head
            out.append(self._norm(f, X, tol, seed))
        return out

    def head_lipschitz(self, H: Any, layer: int, *, include_norm: bool = True,
                       attention_mask: Any = None, tol: float = 1e-10,
                       seed: int = 0) -> np.ndarray:
        r"""Exact local constants of every attention head of block ``layer``, shape (n_head,).

        Head i's map is its contribution :math:`P_i V_{i'} W_O^{(i)}` to the
        attention output (its block of rows of :math:`W_O`, without
        :math:`b_O`), so the attention output is the sum over heads plus
        :math:`b_O`. With ``include_norm`` (default) it is taken as a function
        of the stream H entering the block (through :math:`\mathrm{Norm}_1`);
        otherwise of the attention's input :math:`\mathrm{Norm}_1(H)`. Each head
        is computed at its own size (d x d_head weights). In a block with a
        post-attention norm (Gemma 2), the heads are measured before it: that norm
        acts on the sum of the heads, so no head has a contribution of its own after
        it. ``attention_mask``, ``tol`` and ``seed`` as in :meth:`local_lipschitz`.
        """
        return np.array([e.value for e in self.head_lipschitz_info(
            H, layer, include_norm=include_norm, attention_mask=attention_mask, tol=tol,
            seed=seed)])
