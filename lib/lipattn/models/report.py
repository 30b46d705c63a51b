"""``python -m lipattn.models report PATH``: a model's exact local constants, layer by layer.

For a checkpoint directory PATH (as ``save_pretrained`` writes it, read by
:func:`lipattn.models.load`) and one input sequence (``--tokens 1,2,3`` or
``--text "..."``, which needs the optional ``tokenizers`` package and PATH's
``tokenizer.json``), :func:`layer_report` computes, at the hidden states the
sequence produces:

- per block l, at the stream :math:`x_l` entering it: the block's constant,
  the attention branch :math:`x \\mapsto \\mathrm{Attn}(\\mathrm{Norm}_1(x))`
  and the MLP branch :math:`x' \\mapsto \\mathrm{MLP}(\\mathrm{Norm}_2(x'))`
  alone (no residual), and the largest head's constant (with its index);
- the whole stack without and with the final norm, and the product of the
  block constants (an upper bound on the stack without the final norm).

Every number is an exact local constant (spectral norm of the Jacobian,
Frobenius norms) up to the relative tolerance ``--tol``
(:meth:`lipattn.models.Decoder.local_lipschitz`). :func:`main` prints the
table, shows a progress bar on a terminal (tqdm), and writes a figure
(``--plot out.png``) and the numbers (``--json out.json``) when asked.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["layer_report", "format_report", "plot_report", "main"]


def layer_report(model: Any, H: np.ndarray, *, tol: float = 1e-6, seed: int = 0,
                 progress: bool | None = None) -> dict:
    """The per-layer and whole-stack constants of ``model`` at hidden states H.

    Parameters
    ----------
    model : lipattn.models.Decoder
    H : array_like, shape (N, d)
        The stream entering block 0 (``model.embed(tokens)``).
    tol : float, default 1e-6
        Relative tolerance of every constant.
    seed : int, default 0
        Lanczos's random start.
    progress : bool or None
        Show a tqdm progress bar on stderr (None: only on a terminal).

    Returns
    -------
    dict
        ``block``, ``attention``, ``mlp``, ``top_head`` (lists of floats,
        one per layer), ``top_head_index`` (ints), ``stack``,
        ``stack_final_norm``, ``block_product`` (floats), ``n_tokens``.
    """
    from tqdm import tqdm

    X = model._check_H(H)
    L = model.n_layer
    keys = ("block", "attention", "mlp", "top_head", "top_head_index")
    out: dict[str, Any] = {k: [] for k in keys}
    kw = dict(tol=tol, seed=seed)
    bar = tqdm(total=4 * L + 2, desc="exact constants", unit="constant", file=sys.stderr,
               disable=None if progress is None else not progress, leave=False)
    with bar:
        stream = X
        for layer in range(L):
            bar.set_postfix_str(f"block {layer}")
            out["block"].append(model.local_lipschitz(stream, start=layer, stop=layer + 1, **kw))
            bar.update()
            for branch in ("attention", "mlp"):
                out[branch].append(model.sublayer_lipschitz(stream, layer, branch=branch, **kw))
                bar.update()
            heads = model.head_lipschitz(stream, layer, **kw)
            out["top_head"].append(float(heads.max()))
            out["top_head_index"].append(int(heads.argmax()))
            bar.update()
            stream = model.forward(stream, start=layer, stop=layer + 1)
        bar.set_postfix_str("stack")
        out["stack"] = model.local_lipschitz(X, **kw)
        bar.update()
        out["stack_final_norm"] = model.local_lipschitz(X, final_norm=True, **kw)
        bar.update()
    out["block_product"] = float(math.prod(out["block"]))
    out["n_tokens"] = int(X.shape[0])
    return out


def format_report(rep: dict, title: str = "") -> str:
    """The table of :func:`layer_report`'s numbers, as printed by the command."""
    lines = [title] if title else []
    lines.append(f"exact local Lipschitz constants at N = {rep['n_tokens']} tokens "
                 "(spectral norms of the Jacobians, Frobenius norms)")
    head = f"{'layer':>5}  {'block':>12}  {'attention':>12}  {'mlp':>12}  {'top head':>12}  head"
    lines += [head, "-" * len(head)]
    for i, (b, a, m, t, ti) in enumerate(zip(rep["block"], rep["attention"], rep["mlp"],
                                             rep["top_head"], rep["top_head_index"],
                                             strict=True)):
        lines.append(f"{i:>5}  {b:>12.6g}  {a:>12.6g}  {m:>12.6g}  {t:>12.6g}  {ti:>4}")
    lines.append("(attention and mlp: the branch alone, without its residual)")
    L = len(rep["block"])
    lines += ["",
              f"{f'stack, blocks 0..{L - 1}, without the final norm':<48} {rep['stack']:>12.6g}",
              f"{'stack with the final norm':<48} {rep['stack_final_norm']:>12.6g}",
              f"{'product of the block constants':<48} {rep['block_product']:>12.6g}"
              "  (>= the stack without the final norm)"]
    return "\n".join(lines)


def plot_report(rep: dict, path: str | Path, title: str = "") -> None:
    """A figure of :func:`layer_report`'s per-layer constants (log scale), saved to ``path``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.9, 3.6), dpi=150, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    layers = np.arange(len(rep["block"]))
    for key, label, marker in (("block", "block", "o"), ("attention", "attention branch", "s"),
                               ("mlp", "MLP branch", "^"), ("top_head", "largest head", "v")):
        ax.plot(layers, rep[key], marker=marker, label=label)
    ax.set_yscale("log")
    ax.set_xlabel("layer")
    ax.set_ylabel("local Lipschitz constant (spectral norm)")
    ax.set_xticks(layers)
    ax.set_title((title + "\n" if title else "")
                 + f"stack {rep['stack']:.4g}, with final norm {rep['stack_final_norm']:.4g}, "
                 f"product of blocks {rep['block_product']:.4g}", fontsize=9)
    ax.legend(fontsize=8)
    fig.savefig(path)


def _tokens(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[int]:
    if args.tokens is not None:
        try:
            ids = [int(t) for t in args.tokens.replace(" ", "").split(",") if t]
        except ValueError:
            parser.error(f"--tokens must be comma-separated integer ids; got {args.tokens!r}")
        if not ids:
            parser.error("--tokens must hold at least one id")
        return ids
    try:
        from tokenizers import Tokenizer
    except ImportError:
        parser.error("--text needs the optional package 'tokenizers' (pip install tokenizers); "
                     "or pass token ids with --tokens 1,2,3")
    file = Path(args.path) / "tokenizer.json"
    if not file.is_file():
        parser.error(f"--text needs {file} (a tokenizers file, as save_pretrained writes it); "
                     "or pass token ids with --tokens 1,2,3")
    ids = Tokenizer.from_file(str(file)).encode(args.text).ids
    if not ids:
        parser.error(f"--text {args.text!r} gives no tokens")
    return ids


def _load(path: str, dtype) -> Any:
    """The one boundary to the checkpoint reader: ``lipattn.models.load(path) -> Decoder``."""
    from lipattn import models

    return models.load(path, dtype=dtype)


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module docstring); returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m lipattn.models",
        description="Exact local Lipschitz constants of a Hugging Face decoder checkpoint.")
    sub = parser.add_subparsers(dest="command", required=True)
    rp = sub.add_parser("report", help="per-layer and whole-stack constants at one sequence",
                        description=__doc__.split("\n\n")[0])
    rp.add_argument("path", help="checkpoint directory (config.json + *.safetensors)")
    src = rp.add_mutually_exclusive_group(required=True)
    src.add_argument("--tokens", help="comma-separated token ids, e.g. 1,2,3")
    src.add_argument("--text", help="text, tokenized with PATH/tokenizer.json (needs tokenizers)")
    rp.add_argument("--tol", type=float, default=1e-6,
                    help="relative tolerance of every constant (default 1e-6)")
    rp.add_argument("--seed", type=int, default=0, help="Lanczos's random start (default 0)")
    rp.add_argument("--dtype", choices=("float64", "float32"), default="float64",
                    help="computation dtype (default float64; float32 halves memory)")
    rp.add_argument("--plot", metavar="OUT.png", help="write a figure of the per-layer constants")
    rp.add_argument("--json", metavar="OUT.json", help="write the numbers as JSON")
    rp.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    tokens = _tokens(args, parser)
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            parser.error("--plot needs matplotlib (pip install 'lipattn[book]')")
    try:
        model = _load(args.path, np.dtype(args.dtype).type)
        H = model.embed(np.asarray(tokens))
        rep = layer_report(model, H, tol=args.tol, seed=args.seed,
                           progress=False if args.no_progress else None)
    except (OSError, ValueError, TypeError, NotImplementedError) as exc:
        # a refusal or a bad input, named by the library: no traceback
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    title = f"{model!r} from {args.path}"
    print(format_report(rep, title))
    if args.json:
        Path(args.json).write_text(json.dumps(rep | {"model": repr(model), "tokens": tokens},
                                              indent=1))
    if args.plot:
        plot_report(rep, args.plot, title=repr(model))
    return 0
