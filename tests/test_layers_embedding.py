import numpy as np
import pytest

from lipattn.layers import CausalLM, Sequential, cross_entropy
from lipattn.models import GPT2, random_state_dict


def _lm(seed=0):
    sd = random_state_dict("gpt2", 2, 8, 2, vocab=11, n_pos=6, std=0.3, norm_std=0.2,
                           bias_std=0.1, seed=seed)
    m = GPT2.from_state_dict(sd, n_head=2)
    return CausalLM(m.wte, m.wpe, Sequential(list(m.blocks) + [m.final])), m


def test_cross_entropy_against_finite_differences():
    rng = np.random.default_rng(1)
    Z, y = rng.normal(size=(2, 3, 5)), rng.integers(0, 5, (2, 3))
    loss, dZ = cross_entropy(Z, y)
    p = np.exp(Z) / np.exp(Z).sum(-1, keepdims=True)
    assert np.isclose(loss, -np.log(np.take_along_axis(p, y[..., None], -1)).mean())
    E = rng.normal(size=Z.shape)
    h = 1e-6
    fd = (cross_entropy(Z + h * E, y)[0] - cross_entropy(Z - h * E, y)[0]) / (2 * h)
    assert np.isclose(fd, (dZ * E).sum(), rtol=1e-7)


def test_causal_lm_matches_gpt2_and_finite_differences():
    lm, m = _lm()
    rng = np.random.default_rng(2)
    t = rng.integers(0, 11, (3, 5))
    y = rng.integers(0, 11, (3, 5))
    logits, state = lm.forward(t)
    for b in range(3):  # the model's own forward pass, one sequence at a time
        H = m.forward(m.embed(t[b]), final_norm=True)
        assert np.allclose(logits[b], H @ m.wte.T, rtol=1e-12, atol=1e-12)
    _, G = cross_entropy(logits, y)
    _, grads = lm.backward(state, G)
    assert set(grads) == set(lm.params)
    h = 1e-6
    for k, p in lm.params.items():
        assert grads[k].shape == p.shape
        E = rng.normal(size=p.shape)
        p += h * E
        up = cross_entropy(lm.forward(t)[0], y)[0]
        p -= 2 * h * E
        down = cross_entropy(lm.forward(t)[0], y)[0]
        p += h * E
        assert np.isclose((up - down) / (2 * h), (grads[k] * E).sum(), rtol=1e-6, atol=1e-9), k
    assert not grads["wpe"][5:].any()  # positions beyond N get no gradient


def test_causal_lm_rejects_bad_tokens():
    lm, _ = _lm()
    with pytest.raises(ValueError, match="tokens must be ids in"):
        lm.forward(np.array([0, 11]))
    with pytest.raises(ValueError, match="n_pos = 6"):
        lm.forward(np.zeros(7, int))
    with pytest.raises(TypeError, match="tokens must be an integer array"):
        lm.forward(np.zeros(3))


def test_z_loss_against_finite_differences_and_closed_form():
    rng = np.random.default_rng(3)
    Z, y = 3 * rng.normal(size=(2, 4, 7)), rng.integers(0, 7, (2, 4))
    c = 0.37
    loss, dZ = cross_entropy(Z, y, z_loss=c)
    lse = np.log(np.exp(Z).sum(-1))                      # independent reference
    ce = (lse - np.take_along_axis(Z, y[..., None], -1)[..., 0]).mean()
    assert np.isclose(loss, ce + c * (lse ** 2).mean(), rtol=1e-12)
    assert np.array_equal(cross_entropy(Z, y, z_loss=0.0)[1], cross_entropy(Z, y)[1])
    h = 1e-6
    for _ in range(3):
        E = rng.normal(size=Z.shape)
        fd = (cross_entropy(Z + h * E, y, z_loss=c)[0]
              - cross_entropy(Z - h * E, y, z_loss=c)[0]) / (2 * h)
        assert np.isclose(fd, (dZ * E).sum(), rtol=1e-7)
    # the z-loss term alone pulls a shifted logit row back: its gradient sums to 2c logZ / M
    g_z = dZ - cross_entropy(Z, y)[1]
    assert np.allclose(g_z.sum(-1), 2 * c * lse / y.size, rtol=1e-10)


@pytest.mark.parametrize("bad", [-0.1, float("nan"), True, "0.1"])
def test_z_loss_rejects_bad_coefficients(bad):
    with pytest.raises(ValueError, match="z_loss"):
        cross_entropy(np.zeros((2, 3)), np.zeros(2, int), z_loss=bad)


def test_causal_lm_without_position_embedding_matches_finite_differences():
    from lipattn.layers import RMSNorm
    rng = np.random.default_rng(4)
    wte = rng.normal(size=(9, 4))
    lm = CausalLM(wte, None, Sequential([RMSNorm(1 + 0.1 * rng.normal(size=4), 1e-6)]))
    assert "wpe" not in lm.params and len(lm.params) == 2
    t, y = rng.integers(0, 9, (2, 12)), rng.integers(0, 9, (2, 12))
    logits, state = lm.forward(t)
    assert np.allclose(logits, lm.body.forward(wte[t])[0] @ wte.T)
    _, G = cross_entropy(logits, y, z_loss=0.1)
    _, grads = lm.backward(state, G)
    h = 1e-6
    for k, p in lm.params.items():
        E = rng.normal(size=p.shape)
        p += h * E
        up = cross_entropy(lm.forward(t)[0], y, z_loss=0.1)[0]
        p -= 2 * h * E
        down = cross_entropy(lm.forward(t)[0], y, z_loss=0.1)[0]
        p += h * E
        assert np.isclose((up - down) / (2 * h), (grads[k] * E).sum(), rtol=1e-6), k
