import numpy as np

from lipattn.book import bytelm
from lipattn.models import load


def test_bytelm_short_run_learns_and_writes_a_loadable_checkpoint(tmp_path):
    r = bytelm.main(["--layers", "1", "--d", "16", "--heads", "2", "--context", "16",
                     "--batch", "8", "--steps", "30", "--eval-every", "15",
                     "--eval-windows", "16", "--lr", "1e-2", "--warmup", "1",
                     "--out", str(tmp_path)])
    bits = [b for _, b in r["heldout_curve"]]
    assert [s for s, _ in r["heldout_curve"]] == [0, 15, 30]
    assert bits[0] > 7.5 and bits[-1] < bits[0] - 2  # 8 bits at init (uniform-ish), learns
    m = load(tmp_path, dtype=np.float32)
    _, heldout = bytelm.stdlib_corpus()
    assert (tmp_path / "heldout.txt").read_bytes() == heldout[:32768]
    w = bytelm.heldout_windows(heldout, 16, 16)
    lm = bytelm.CausalLM(np.asarray(m.wte, dtype=np.float32), np.asarray(m.wpe, np.float32),
                         bytelm.Sequential(list(m.blocks) + [m.final]))
    assert np.isclose(bytelm.heldout_bits(lm, w), bits[-1], rtol=1e-6)
