"""Benchmark: exact local Lipschitz constants of real decoder blocks (lipattn.models).

1. One GPT-2-small-width block (d = 768, 12 heads, d_ff = 3072, N = 256,
   float64, causal): the time of one forward pass, of one Jacobian-vector
   product and of one vector-Jacobian product (forward state reused), and the
   total time of the exact block constant (Golub–Kahan–Lanczos at tol 1e-10)
   with its number of products. Target: each product costs at most twice a
   forward pass (no loops over tokens or heads; batched matmuls).
2. Optional, longer (set ``LIPATTN_BENCH_LONG=1``): the constant of a whole
   12-layer stack at d = 768, N = 128 (GPT-2 small), to show it takes minutes.

The weights are random, initialised as GPT-2 is
(:func:`lipattn.models.random_state_dict`: entries N(0, 0.02^2), the residual
projections scaled by 1/sqrt(2 L)), with non-trivial LayerNorm gains
1 + N(0, 0.1^2), LayerNorm biases N(0, 0.1^2) and linear biases N(0, 0.02^2);
the hidden states are N(0, 1). The machine's load average is printed first
(the times are wall-clock times). Run with
``python benchmarks/bench_models.py``.
"""

from __future__ import annotations

import os
import time

import numpy as np

from lipattn.models import GPT2, random_state_dict

PRODUCT_TARGET = 2.0   # product time / forward time


def gpt2_state(L: int, seed: int = 0) -> dict:
    """A random GPT-2-small-width state dict (Hugging Face's names), see the module docstring."""
    return random_state_dict("gpt2", L, 768, 12, vocab=50, n_pos=1024, norm_std=0.1,
                             bias_std=0.02, seed=seed)


def _times_s(f, repeats: int = 7) -> tuple[float, float]:
    """(minimum, median) wall time over ``repeats`` runs after a warm-up. On a
    shared machine the minimum is the cost, the median shows the contention."""
    f()   # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return float(np.min(times)), float(np.median(times))


def block_case(N: int = 256, seed: int = 0) -> dict:
    model = GPT2.from_state_dict(gpt2_state(1, seed=seed), n_head=12)
    rng = np.random.default_rng(seed + 1)
    H = rng.standard_normal((N, 768))
    E, G = rng.standard_normal((2, N, 768))
    block = model.blocks[0]
    _, state = block.forward(H)
    fwd = _times_s(lambda: block.forward(H))
    jvp = _times_s(lambda: block.jvp(state, E))
    vjp = _times_s(lambda: block.vjp(state, G))
    t0 = time.perf_counter()
    est = model.local_lipschitz_info(H, start=0, stop=1, tol=1e-10)
    total = time.perf_counter() - t0
    ratio = max(jvp[0], vjp[0]) / fwd[0]
    ok = ratio <= PRODUCT_TARGET
    ms = lambda t: f"{t[0] * 1e3:.0f} ms (median {t[1] * 1e3:.0f})"     # noqa: E731
    print(f"GPT-2 block d=768 h=12 N={N} float64: forward {ms(fwd)}, jvp {ms(jvp)}, vjp "
          f"{ms(vjp)}; product / forward {ratio:.2f} (target <= {PRODUCT_TARGET:.1f}) "
          f"[{'ok' if ok else 'MISSED'}]; exact block constant {est.value:.6f} in {total:.1f} s "
          f"({est.products} products, {total / est.products * 1e3:.0f} ms each with the "
          f"Lanczos overhead; certified relative residual {est.residual:.1e})", flush=True)
    return {"name": f"GPT-2 block N={N}", "forward_ms": fwd[0] * 1e3, "jvp_ms": jvp[0] * 1e3,
            "vjp_ms": vjp[0] * 1e3, "ratio": ratio, "constant": est.value,
            "constant_s": total, "products": est.products, "ok": ok}


def stack_case(N: int = 128, L: int = 12, seed: int = 0) -> dict:
    model = GPT2.from_state_dict(gpt2_state(L, seed=seed), n_head=12)
    H = np.random.default_rng(seed + 1).standard_normal((N, 768))
    t0 = time.perf_counter()
    model.forward(H)
    fwd = time.perf_counter() - t0
    t0 = time.perf_counter()
    est = model.local_lipschitz_info(H, tol=1e-10)
    total = time.perf_counter() - t0
    print(f"GPT-2 stack L={L} d=768 N={N} float64: forward {fwd:.2f} s; exact constant "
          f"{est.value:.6f} in {total:.0f} s ({est.products} products, {total / 60:.1f} min)",
          flush=True)
    return {"name": f"GPT-2 stack L={L} N={N}", "forward_s": fwd, "constant": est.value,
            "constant_s": total, "products": est.products}


def main() -> list[dict]:
    """The block case; the 12-layer stack too when LIPATTN_BENCH_LONG=1."""
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average (1, 5, 15 min): {load}; {os.cpu_count()} CPUs", flush=True)
    rows = [block_case()]
    if os.environ.get("LIPATTN_BENCH_LONG") == "1":
        rows.append(stack_case())
    else:
        print("(the 12-layer stack at N=128: set LIPATTN_BENCH_LONG=1)", flush=True)
    return rows


if __name__ == "__main__":
    main()
