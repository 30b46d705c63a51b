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
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validate import as_bool, as_int_at_least, as_real_array
from ..lanczos import LipschitzEstimate, _check_tol, jacobian_norm
from ..layers import Residual, Sequential

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
    prefix for None.
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

    def _map(self, start: int, stop: int, final_norm: bool) -> Sequential:
        return Sequential(self.blocks[start:stop] + ([self.final] if final_norm else []))

    def _norm(self, layer, X: np.ndarray, tol: float) -> LipschitzEstimate:
        Y, state = layer.forward(X)
        dt = self.dtype
        return jacobian_norm(lambda E: layer.jvp(state, E.astype(dt, copy=False)),
                             lambda G: layer.vjp(state, G.astype(dt, copy=False)),
                             X.shape, out_shape=Y.shape, tol=tol)

    # -- the public API -----------------------------------------------------------
    def forward(self, H: Any, *, start: int = 0, stop: int | None = None,
                final_norm: bool = False) -> np.ndarray:
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

        Returns
        -------
        ndarray, shape (N, d), in the model's dtype
        """
        H = self._check_H(H)
        return self._map(*self._range(start, stop, final_norm)).forward(H)[0]

    def _product(self, H: Any, V: Any, name: str, start, stop, final_norm, adjoint: bool):
        H = self._check_H(H)
        V = self._check_H(V, name)
        if V.shape != H.shape:
            raise ValueError(f"{name} must have the shape of H, {H.shape}; got shape {V.shape}")
        layer = self._map(*self._range(start, stop, final_norm))
        state = layer.forward(H)[1]
        return layer.vjp(state, V) if adjoint else layer.jvp(state, V)

    def jvp(self, H: Any, E: Any, *, start: int = 0, stop: int | None = None,
            final_norm: bool = False) -> np.ndarray:
        """The Jacobian-vector product of :meth:`forward` at H in the direction E, (N, d)."""
        return self._product(H, E, "E", start, stop, final_norm, adjoint=False)

    def vjp(self, H: Any, G: Any, *, start: int = 0, stop: int | None = None,
            final_norm: bool = False) -> np.ndarray:
        """The vector-Jacobian product (adjoint) of :meth:`forward` at H, (N, d) -> (N, d)."""
        return self._product(H, G, "G", start, stop, final_norm, adjoint=True)

    def local_lipschitz_info(self, H: Any, *, start: int = 0, stop: int | None = None,
                             final_norm: bool = False,
                             tol: float = 1e-10) -> LipschitzEstimate:
        """:meth:`local_lipschitz` with the number of products and the certified residual."""
        H = self._check_H(H)
        layer = self._map(*self._range(start, stop, final_norm))
        return self._norm(layer, H, self._tol(tol))

    def local_lipschitz(self, H: Any, *, start: int = 0, stop: int | None = None,
                        final_norm: bool = False, tol: float = 1e-10) -> float:
        r"""The exact local Lipschitz constant of :meth:`forward`'s map at H.

        :math:`\|D F(H)\|_2` for F = blocks ``start..stop-1`` (then the final norm
        if ``final_norm``), Frobenius norms on inputs and outputs, by
        Golub–Kahan–Lanczos on the closed-form jvp and vjp: one forward pass,
        then two products per step, each costing about one forward pass.

        Parameters
        ----------
        H : array_like, shape (N, d)
        start, stop, final_norm
            As in :meth:`forward`.
        tol : float, default 1e-10
            Relative residual tolerance in [1e-14, 1) (at least 1e-5 for a
            float32 model, see the module docstring).

        Returns
        -------
        float
            Exact up to the relative tolerance tol (a singular value lies within
            tol of it; that it is the largest rests on the random start).
        """
        return self.local_lipschitz_info(H, start=start, stop=stop, final_norm=final_norm,
                                         tol=tol).value

    def block_input(self, H: Any, layer: int) -> np.ndarray:
        """The residual stream entering block ``layer`` from H entering block 0."""
        return self.forward(H, stop=self._layer_index(layer))

    def sublayer_lipschitz(self, H: Any, layer: int, *, branch: str = "attention",
                           residual: bool = False, tol: float = 1e-10) -> float:
        r"""Exact local constant of one branch of block ``layer``, with or without the residual.

        ``H`` is the residual stream *entering block* ``layer`` (see
        :meth:`block_input`). ``branch="attention"``: the map
        :math:`x \mapsto \mathrm{Attn}(\mathrm{Norm}_1(x))` at :math:`x = H`
        (``residual=True``: :math:`x + \dots`). ``branch="mlp"``:
        :math:`x' \mapsto \mathrm{MLP}(\mathrm{Norm}_2(x'))` at the stream
        :math:`x' = H + \mathrm{Attn}(\mathrm{Norm}_1(H))` between the two
        sublayers (``residual=True``: :math:`x' + \dots`).

        Returns
        -------
        float
            Exact up to tol, as in :meth:`local_lipschitz`.
        """
        H = self._check_H(H)
        block = self.blocks[self._layer_index(layer)]
        if branch not in ("attention", "mlp"):
            raise ValueError(f"branch must be 'attention' or 'mlp'; got {branch!r}")
        residual = as_bool(residual, "residual")
        tol = self._tol(tol)
        X = H
        if branch == "mlp":
            X = block.layers[0].forward(H)[0]
            f = block.mlp_branch
        else:
            f = block.attention_branch
        return self._norm(Residual(f) if residual else f, X, tol).value

    def head_lipschitz(self, H: Any, layer: int, *, include_norm: bool = True,
                       tol: float = 1e-10) -> np.ndarray:
        r"""Exact local constants of every attention head of block ``layer``, shape (n_head,).

        Head i's map is its contribution :math:`P_i V_{i'} W_O^{(i)}` to the
        attention output (its block of rows of :math:`W_O`, without
        :math:`b_O`), so the attention output is the sum over heads plus
        :math:`b_O`. With ``include_norm`` (default) it is taken as a function
        of the stream H entering the block (through :math:`\mathrm{Norm}_1`);
        otherwise of the attention's input :math:`\mathrm{Norm}_1(H)`. Each head
        is computed at its own size (d x d_head weights).
        """
        H = self._check_H(H)
        block = self.blocks[self._layer_index(layer)]
        include_norm = as_bool(include_norm, "include_norm")
        tol = self._tol(tol)
        X = H if include_norm else block.norm_1.forward(H)[0]
        out = np.empty(self.n_head)
        for i in range(self.n_head):
            head = block.attn.head(i)
            f = Sequential([block.norm_1, head]) if include_norm else head
            out[i] = self._norm(f, X, tol).value
        return out
