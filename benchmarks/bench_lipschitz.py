"""Benchmark: the exact local Lipschitz constant of self-attention, matrix-free.

1. N = 96, d = d_k = d_v = 48: ``local_lipschitz(method="lanczos")`` (Golub–Kahan
   bidiagonalisation on closed-form jvp/vjp) against the dense Jacobian plus
   its SVD, timed in the same run; they must agree to 1e-8 and the matrix-free
   path must be at least 100 times faster.
2. N = 1024, d = 128: the matrix-free constant (time and number of products),
   against a power iteration (Chapter 5's ``power_iteration``) on the same
   operator run until its estimate changes by less than 1e-13 relative; they
   must agree to 1e-8. The dense Jacobian would be (N d)^2 doubles.

Run with ``python benchmarks/bench_lipschitz.py`` (about a minute).
"""

from __future__ import annotations

import math
import time

import numpy as np

from lipattn.lipschitz import attention_jacobian, attention_operator, local_lipschitz_info
from lipattn.spectral import power_iteration

TARGET_SPEEDUP = 100.0
TOLERANCE = 1e-8


def _problem(N: int, d: int, seed: int):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, d))
    Ws = [rng.standard_normal((d, d)) / math.sqrt(d) for _ in range(3)]
    return X, Ws


def small_case(seed: int = 0) -> dict:
    X, (Wq, Wk, Wv) = _problem(96, 48, seed)
    local_lipschitz_info(X, Wq, Wk, Wv, method="lanczos")  # warm-up
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        fast = local_lipschitz_info(X, Wq, Wk, Wv, method="lanczos")
        times.append(time.perf_counter() - t0)
    fast_s = float(np.median(times))
    t0 = time.perf_counter()
    dense = float(np.linalg.norm(attention_jacobian(X, Wq, Wk, Wv), 2))
    dense_s = time.perf_counter() - t0
    rel = abs(fast.value - dense) / dense
    speedup = dense_s / fast_s
    ok = speedup >= TARGET_SPEEDUP and rel <= TOLERANCE
    print(f"local_lipschitz N=96 d=48: matrix-free {fast_s * 1e3:.1f} ms ({fast.products} "
          f"products) vs dense Jacobian + SVD {dense_s:.2f} s -> {speedup:.0f}x "
          f"(target >= {TARGET_SPEEDUP:.0f}x); relative difference {rel:.1e} "
          f"[{'ok' if ok else 'MISSED'}]", flush=True)
    return {"name": "local_lipschitz N=96 d=48", "lanczos_ms": fast_s * 1e3,
            "products": fast.products, "dense_s": dense_s, "speedup": speedup,
            "rel_diff": rel, "ok": ok}


def large_case(seed: int = 1) -> dict:
    N, d = 1024, 128
    X, (Wq, Wk, Wv) = _problem(N, d, seed)
    t0 = time.perf_counter()
    fast = local_lipschitz_info(X, Wq, Wk, Wv, method="lanczos")
    fast_s = time.perf_counter() - t0
    op = attention_operator(X, Wq, Wk, Wv)
    t0 = time.perf_counter()
    run = power_iteration(op, 40)
    sigmas = list(run.sigma)
    while abs(sigmas[-1] - sigmas[-2]) > 1e-13 * sigmas[-1] and len(sigmas) < 1000:
        run = power_iteration(op, 20, u0=run.u)   # continue from the last vector
        sigmas += list(run.sigma)
    power_s = time.perf_counter() - t0
    rel = abs(fast.value - sigmas[-1]) / sigmas[-1]
    dense_gb = (N * d) ** 2 * 8 / 1e9
    ok = rel <= TOLERANCE
    print(f"local_lipschitz N=1024 d=128: {fast_s:.1f} s, {fast.products} products; converged "
          f"power iteration {len(sigmas)} steps ({2 * len(sigmas)} products, {power_s:.0f} s); "
          f"relative "
          f"difference {rel:.1e} (target <= {TOLERANCE:.0e}) [{'ok' if ok else 'MISSED'}]; "
          f"the dense Jacobian would take {dense_gb:.0f} GB", flush=True)
    return {"name": "local_lipschitz N=1024 d=128", "lanczos_s": fast_s,
            "products": fast.products, "power_steps": len(sigmas),
            "power_s": power_s, "rel_diff": rel, "dense_gb": dense_gb, "ok": ok}


def main() -> list[dict]:
    """Run both cases, print one line each and return the numbers."""
    return [small_case(), large_case()]


if __name__ == "__main__":
    main()
