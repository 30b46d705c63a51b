"""`make bench`: the book's benchmarks (not timed tests).

- every explorer's ``render`` (compute + redraw in place + PNG encode):
  median and p95 over its slider grid, next to a naive redraw measured in the
  same run (a new figure per frame, saved as a tight-bbox PNG, as a plain
  ``ipywidgets.interact`` would do);
- the library routines' own benchmarks (``bench_*.py`` beside this file).

Targets: median <= 30 ms and p95 <= 60 ms per explorer.
"""

from __future__ import annotations

import importlib.util
import io
import sys
import time
from pathlib import Path

import numpy as np

from lipattn.widgets import EXPLORERS

MEDIAN_TARGET_MS = 30.0
P95_TARGET_MS = 60.0


def _naive_ms(factory, values: dict, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        ex = factory()
        ex.update(**(ex.defaults | values))
        buf = io.BytesIO()
        ex.fig.savefig(buf, format="png", bbox_inches="tight")
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times))


def bench_explorers(max_frames: int = 120, seed: int = 0) -> list[dict]:
    """Time every registered explorer; return one dict per explorer."""
    rng = np.random.default_rng(seed)
    rows = []
    for name, factory in EXPLORERS.items():
        ex = factory()
        grid = list(ex.grid())
        picks = [grid[i] for i in rng.permutation(len(grid))[:max_frames]]
        ex.render(**picks[0])  # warm-up
        times = []
        for values in picks * 2:
            t0 = time.perf_counter()
            ex.render(**values)
            times.append(time.perf_counter() - t0)
        ms = 1e3 * np.asarray(times)
        row = {
            "explorer": name,
            "frames": len(grid),
            "median_ms": float(np.median(ms)),
            "p95_ms": float(np.percentile(ms, 95)),
            "naive_ms": _naive_ms(factory, picks[0], repeats=5),
        }
        row["ok"] = row["median_ms"] <= MEDIAN_TARGET_MS and row["p95_ms"] <= P95_TARGET_MS
        rows.append(row)
        print(f"explorer {name:28s} render median {row['median_ms']:6.1f} ms  "
              f"p95 {row['p95_ms']:6.1f} ms  | naive redraw {row['naive_ms']:6.1f} ms  "
              f"| {row['frames']} frames  [{'ok' if row['ok'] else 'SLOW'}; targets "
              f"{MEDIAN_TARGET_MS:.0f}/{P95_TARGET_MS:.0f} ms]", flush=True)
    return rows


def _library_benchmarks() -> list[dict]:
    rows = []
    for path in sorted(Path(__file__).parent.glob("bench_*.py")):
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        print(f"--- {path.name}", flush=True)
        rows.extend(module.main())
    return rows


def main() -> int:
    print("--- explorers (render = compute + redraw + PNG encode)", flush=True)
    explorer_rows = bench_explorers()
    library_rows = _library_benchmarks()
    failed = [r["explorer"] for r in explorer_rows if not r["ok"]]
    failed += [r.get("name", "?") for r in library_rows if r.get("ok") is False]
    if failed:
        print(f"targets missed: {failed}")
        return 1
    print("all benchmark targets met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
