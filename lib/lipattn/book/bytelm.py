r"""The book's byte-level language model: a GPT-2-layout decoder trained on real text.

Vocabulary 256 (token = UTF-8 byte, no tokenizer), trained in float32 numpy on
:func:`lipattn.book.corpus.stdlib_corpus`'s training part through
:mod:`lipattn.layers` (:class:`~lipattn.layers.CausalLM` around
:class:`~lipattn.models.GPT2`'s blocks) and :func:`lipattn.models.training.train_stack`,
then written as a Hugging Face ``GPT2LMHeadModel`` checkpoint
(:meth:`~lipattn.models.GPT2.save_pretrained`). Losses are reported in bits per
byte; the held-out loss is the mean over fixed, evenly spaced windows of the
held-out text, which the model never trains on.

Training computes the attention softmax in float32 (the attention layers'
``keep_float32``: the fast path); the written checkpoint is the same float32
weights, whatever precision a reader evaluates them in. Adam's schedule
(warm-up, then constant or a cosine to ``--min-lr``), decoupled weight decay and
gradient clipping are :func:`lipattn.models.training.train_stack`'s. ``--checkpoint-every
K`` writes intermediate checkpoints ``CKPT/step-XXXXXX/`` (``config.json`` +
``model.safetensors``) and the curves so far (``CKPT/progress.json``), so that
the constants can be measured through training.

Run ``python -m lipattn.book.bytelm --help``.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import time
from pathlib import Path

import numpy as np

from .._validate import as_count
from ..layers import CausalLM, Sequential, cross_entropy
from ..models import GPT2, random_state_dict
from ..models.training import train_stack
from .corpus import LICENCE, SOURCE, stdlib_corpus, unigram_entropy
from .lm import _windows, window_tokens

__all__ = ["build", "heldout_windows", "heldout_bits", "train", "main"]

LN2 = math.log(2.0)


def build(n_layer: int = 4, d: int = 128, n_head: int = 4, context: int = 128, *,
          seed: int = 0) -> tuple[GPT2, CausalLM]:
    """A freshly initialised float32 byte-level GPT-2 (GPT-2's init, std 0.02) and its
    trainable :class:`~lipattn.layers.CausalLM` (which shares its arrays); its
    attention computes the softmax in float32 (``keep_float32``, for training)."""
    context = as_count(context, "context", maximum=1 << 20)
    sd = random_state_dict("gpt2", n_layer, d, n_head, vocab=256, n_pos=context, seed=seed)
    m = GPT2.from_state_dict({k: v.astype(np.float32) for k, v in sd.items()}, n_head=n_head,
                             dtype=np.float32)
    for b in m.blocks:
        b.attn.keep_float32 = True
    return m, CausalLM(m.wte, m.wpe, Sequential(list(m.blocks) + [m.final]))


def _git_commit() -> str:
    """The commit of the source tree this module lives in, with ``+dirty`` for
    uncommitted changes under ``lib/``; ``"unknown"`` outside git."""
    here = Path(__file__).resolve().parent
    try:
        run = lambda *a: subprocess.run(["git", *a], cwd=here, capture_output=True,  # noqa: E731
                                        text=True, timeout=10, check=True).stdout.strip()
        head = run("rev-parse", "HEAD")
        dirty = run("status", "--porcelain", "--", str(here.parent))
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def heldout_windows(text: bytes, context: int, count: int) -> np.ndarray:
    """``count`` evenly spaced windows of ``context + 1`` bytes, shape (count, context + 1):
    :func:`lipattn.book.lm.window_tokens` with ``N = context + 1``."""
    return window_tokens(text, as_count(context, "context", maximum=1 << 20) + 1, count)


def heldout_bits(lm: CausalLM, windows: np.ndarray, batch: int = 16) -> float:
    """Mean next-byte cross-entropy in bits per byte over the windows (count, N + 1)."""
    if not isinstance(lm, CausalLM):
        raise TypeError(f"lm must be a CausalLM (as build returns); got {type(lm).__name__}")
    windows = _windows(windows, lm.wte.shape[0])
    top = 1 << 62 if lm.wpe is None else lm.wpe.shape[0] + 1
    if not 2 <= windows.shape[1] <= top:
        raise ValueError(f"windows must have 2 to context + 1 = {top} "
                         f"columns; got shape {windows.shape}")
    batch = as_count(batch, "batch")
    tot = 0.0
    for i in range(0, len(windows), batch):
        w = windows[i:i + batch]
        tot += cross_entropy(lm.forward(w[:, :-1])[0], w[:, 1:])[0] * len(w)
    return tot / len(windows) / LN2


def main(argv: list[str] | None = None) -> dict:
    """The command line: :func:`train`'s ``training.json`` dictionary."""
    return train(argv)[1]


def train(argv: list[str] | None = None) -> tuple[GPT2, dict]:
    """Train, evaluate on held-out text every ``--eval-every`` steps, write the checkpoint.

    With ``--out DIR``: ``DIR/config.json``, ``DIR/model.safetensors``,
    ``DIR/heldout.txt`` (the first ``--heldout-bytes`` of the held-out text) and
    ``DIR/training.json`` (arguments, git commit, per-step training bits/byte,
    gradient norm and learning rate, the held-out curve as (step, bits/byte)
    pairs, wall s/step and tokens/s of the training steps alone, without the
    evaluations and checkpoints). Returns the trained model (float32, its attention
    in training mode: ``keep_float32``) and the dictionary of ``training.json``.
    """
    ap = argparse.ArgumentParser(prog="python -m lipattn.book.bytelm", description=__doc__)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--decay", choices=("constant", "cosine"), default="constant",
                    help="learning rate after the warm-up")
    ap.add_argument("--min-lr", type=float, default=None,
                    help="the cosine's floor (default: 0.1 * lr)")
    ap.add_argument("--weight-decay", type=float, default=0.0,
                    help="decoupled (AdamW) weight decay of matrices and embeddings")
    ap.add_argument("--clip", type=float, default=None, help="global gradient-norm clip")
    ap.add_argument("--checkpoint-every", type=int, default=0,
                    help="write CKPT/step-XXXXXX/ every K steps (0: never)")
    ap.add_argument("--checkpoint-dir", type=Path, default=None,
                    help="directory of the intermediate checkpoints (default: --out)")
    ap.add_argument("--final-windows", type=int, default=0,
                    help="also evaluate the final model on this many held-out windows")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--eval-windows", type=int, default=64)
    ap.add_argument("--out", type=Path, default=None, help="checkpoint directory")
    ap.add_argument("--heldout-bytes", type=int, default=32768,
                    help="bytes of held-out text written to OUT/heldout.txt")
    a = ap.parse_args(argv)
    min_lr = 0.1 * a.lr if a.min_lr is None else a.min_lr
    ckpt_dir = a.checkpoint_dir if a.checkpoint_dir is not None else a.out
    if a.checkpoint_every < 0 or (a.checkpoint_every and ckpt_dir is None):
        ap.error("--checkpoint-every must be >= 0, and needs --out or --checkpoint-dir")
    commit = _git_commit()
    train, heldout = stdlib_corpus()
    H_uni = unigram_entropy(heldout)
    print(f"corpus: {SOURCE} ({LICENCE}); train {len(train)} B, held-out {len(heldout)} B, "
          f"held-out unigram entropy {H_uni:.4f} bits/byte (target <= {0.7 * H_uni:.4f})")
    m, lm = build(a.layers, a.d, a.heads, a.context, seed=a.seed)
    tr = np.frombuffer(train, np.uint8)
    rng = np.random.default_rng(a.seed)
    win = heldout_windows(heldout, a.context, a.eval_windows)
    N = a.context

    def batches(t: int):
        s = rng.integers(0, tr.size - N - 1, a.batch)
        w = tr[s[:, None] + np.arange(N + 1)].astype(np.int64)
        return w[:, :-1], w[:, 1:]

    curve = [(0, heldout_bits(lm, win))]
    print(f"step 0: held-out {curve[0][1]:.4f} bits/byte", flush=True)
    train_time, t_mark, opt, grad_norm, rates = [0.0], [time.perf_counter()], [], [], []
    train_bits: list[float] = []

    def record(s_step: float | None = None) -> dict:
        s_step = train_time[0] / max(1, len(train_bits)) if s_step is None else s_step
        return {"args": {k: str(v) for k, v in vars(a).items()}, "git_commit": commit,
                "corpus": SOURCE, "licence": LICENCE, "unigram_bits": H_uni,
                "train_bits": train_bits, "heldout_curve": curve, "grad_norm": grad_norm,
                "lr": rates, "s_per_step": s_step, "tokens_per_s": a.batch * N / s_step}

    def callback(t: int, loss: float) -> None:
        train_bits.append(loss / LN2)
        grad_norm.append(opt[0].grad_norm)
        rates.append(opt[0].rate)
        last = t + 1 == a.steps
        if (t + 1) % a.eval_every == 0 or last or (
                a.checkpoint_every and (t + 1) % a.checkpoint_every == 0):
            train_time[0] += time.perf_counter() - t_mark[0]
            if (t + 1) % a.eval_every == 0 or last:
                curve.append((t + 1, heldout_bits(lm, win)))
                print(f"step {t + 1}: train {np.mean(train_bits[-a.eval_every:]):.4f} "
                      f"(mean of the last {min(a.eval_every, t + 1)}), held-out "
                      f"{curve[-1][1]:.4f} bits/byte, lr {opt[0].rate:.2e}, |g| "
                      f"{opt[0].grad_norm:.3f}, {train_time[0] / (t + 1):.3f} s/step",
                      flush=True)
            if a.checkpoint_every and (t + 1) % a.checkpoint_every == 0:
                m.save_pretrained(Path(ckpt_dir) / f"step-{t + 1:06d}")
                (Path(ckpt_dir) / "progress.json").write_text(json.dumps(record()) + "\n")
            t_mark[0] = time.perf_counter()

    if a.checkpoint_every:
        m.save_pretrained(Path(ckpt_dir) / f"step-{0:06d}")
    t_mark[0] = time.perf_counter()
    losses = train_stack(lm, batches, cross_entropy, steps=a.steps, lr=a.lr, warmup=a.warmup,
                         schedule=a.decay, min_lr=min_lr, weight_decay=a.weight_decay,
                         clip=a.clip, callback=callback, optimizer=opt)
    assert np.array_equal(np.asarray(train_bits), losses / LN2)
    result = record(train_time[0] / a.steps)
    if a.final_windows:
        result["final_windows"] = a.final_windows
        result["final_heldout_bits"] = heldout_bits(
            lm, heldout_windows(heldout, a.context, a.final_windows))
        print(f"final: held-out {result['final_heldout_bits']:.4f} bits/byte over "
              f"{a.final_windows} windows", flush=True)
    if a.out is not None:
        m.save_pretrained(a.out)
        (Path(a.out) / "heldout.txt").write_bytes(heldout[: a.heldout_bytes])
        (Path(a.out) / "training.json").write_text(json.dumps(result) + "\n")
    return m, result


if __name__ == "__main__":
    main()
