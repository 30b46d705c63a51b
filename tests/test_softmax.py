"""Tests of :mod:`lipattn.softmax` against independent references.

References: central finite differences, sympy's symbolic Jacobian, mpmath at
high precision, ``numpy.linalg.eigvalsh`` of the full Jacobian, brute-force
row sums, closed forms (n = 2, ties, uniform p) and invariants (symmetry,
PSD, zero row sums, rank, interlacing). Warnings are errors (pyproject.toml).
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from lipattn.softmax import entropy, softmax, softmax_jacobian, softmax_jacobian_norm

SETTINGS = settings(max_examples=200, deadline=None, derandomize=True, database=None)

moderate = st.lists(
    st.floats(-30.0, 30.0, allow_nan=False, allow_infinity=False), min_size=1, max_size=24
)
wide = st.lists(
    st.floats(-1e300, 1e300, allow_nan=False, allow_infinity=False), min_size=1, max_size=12
)
# Few distinct values: exact ties, near-ties and huge gaps.
tied = st.lists(
    st.sampled_from([0.0, 0.0, -1.0, -1e-12, 1e-12, 3.0, 3.0, -40.0, -1e3, 50.0]),
    min_size=1,
    max_size=16,
)
any_logits = st.one_of(moderate, wide, tied)
temperatures = st.floats(1e-3, 1e3, allow_nan=False, allow_infinity=False)

# Hand-picked adversarial logits: ties, near-ties, nearly one-hot p, huge
# spreads, subnormal probabilities, n = 1 and n = 2.
ADVERSARIAL = [
    [0.0],
    [0.0, 0.0],
    [0.0, 1.0],
    [1.0, 0.0],
    [0.0, 0.0, 0.0],
    [0.0, 1e-12, -5.0],
    [1e-12, 0.0, -5.0],
    [0.0, -1e-15, -1e-15],
    [0.0, -3e-16],
    [0.0, -1e-16, -2.0],
    [0.0, 0.0, -5.0],
    [0.0, 0.0, -1e3, -1e3],
    [50.0, 0.0, 0.0],
    [0.0, 50.0, 0.0, 0.0],
    [50.0, 0.0],
    [40.0, 0.0, -1e-10, -2e-10, -3e-10, -1.0],
    [46.0, 0.0, 0.0, 1e-9],
    [10.0, 9.999999, 0.0, -3.0],
    [3.0, 1.0, 1.0, 1.0, 1.0],
    [5.0, 0.0, 0.0, 0.0, 0.0, -1e-8],
    [700.0, 0.0],
    [740.0, 0.0, -1.0],
    [800.0, 0.0, 0.0],
    [1e300, -1e300, 0.0],
    [-1e300, 1e300, 1e300],
    [1.7e308, -1.7e308, 0.0],
    list(np.linspace(0.0, 1e-9, 7)),
    list(np.arange(20.0)),
    list(-(np.arange(30.0) ** 2)),
]


def _fd_jacobian(z: np.ndarray, temperature: float, h: float = 1e-6) -> np.ndarray:
    """Central finite differences of ``softmax(z / temperature)``."""
    n = z.size
    jac = np.empty((n, n))
    for j in range(n):
        e = np.zeros(n)
        e[j] = h
        plus = softmax(z + e, temperature=temperature)
        minus = softmax(z - e, temperature=temperature)
        jac[:, j] = (plus - minus) / (2 * h)
    return jac


def _max_abs_row_sum(jac: np.ndarray) -> np.ndarray:
    return np.abs(jac).sum(axis=-1).max(axis=-1)


# ---------------------------------------------------------------- softmax


@SETTINGS
@given(z=moderate, temperature=st.floats(0.2, 10.0))
def test_softmax_matches_direct_formula(z, temperature):
    z = np.array(z)
    direct = np.exp(z / temperature) / np.exp(z / temperature).sum()
    np.testing.assert_allclose(softmax(z, temperature=temperature), direct, rtol=1e-12, atol=1e-300)


@SETTINGS
@given(z=any_logits, temperature=st.one_of(temperatures, st.sampled_from([1e-300, 1e300])))
def test_softmax_is_a_probability_vector_for_any_finite_logits(z, temperature):
    p = softmax(z, temperature=temperature)
    assert p.shape == (len(z),)
    assert np.all(np.isfinite(p)) and np.all(p >= 0.0)
    assert abs(p.sum() - 1.0) <= 1e-14
    assert p[int(np.argmax(z))] == p.max()


@pytest.mark.parametrize(
    "z",
    [
        [1e300, -1e300],
        [-1e300, 1e300, 0.0],
        [1.7e308, -1.7e308, 1.7e308],
        [-1.7e308, -1.7e308],
        [1e300, 1e300 * (1 - 1e-15), -1e300],
    ],
)
@pytest.mark.parametrize("temperature", [1e-300, 1.0, 1e300, 1.7e308])
def test_extreme_logits_are_finite_and_warning_free(z, temperature):
    p = softmax(z, temperature=temperature)
    assert np.all(np.isfinite(p)) and abs(p.sum() - 1.0) <= 1e-15
    if temperature >= 1.0:
        jac = softmax_jacobian(z, temperature=temperature)
        assert np.all(np.isfinite(jac))
        for order in (2, np.inf):
            assert np.isfinite(softmax_jacobian_norm(z, order, temperature=temperature))


def test_extreme_logits_values():
    np.testing.assert_array_equal(softmax([1e300, -1e300]), [1.0, 0.0])
    np.testing.assert_array_equal(softmax([1.7e308, -1.7e308, 1.7e308]), [0.5, 0.0, 0.5])
    # A huge temperature flattens any finite logits: here z / tau = +-1e300 / 1.7e308.
    p_first = 1.0 / (1.0 + math.exp(-2e300 / 1.7e308))
    np.testing.assert_allclose(
        softmax([1e300, -1e300], temperature=1.7e308), [p_first, 1.0 - p_first], rtol=1e-15
    )
    assert softmax([1e300, -1e300], temperature=1.7e308)[0] > 0.5
    # A tiny temperature sharpens any distinct logits into a one-hot vector.
    np.testing.assert_array_equal(softmax([1e-300, 0.0, 1e-300], temperature=1e-310), [0.5, 0, 0.5])


@SETTINGS
@given(z=moderate, c=st.floats(-100.0, 100.0))
def test_softmax_is_invariant_to_adding_a_constant(z, c):
    z = np.array(z)
    np.testing.assert_allclose(softmax(z + c), softmax(z), rtol=0, atol=1e-12)


def test_softmax_axis_and_temperature():
    z = np.random.default_rng(0).standard_normal((3, 5, 4))
    np.testing.assert_allclose(
        softmax(z, axis=1), np.moveaxis(softmax(np.moveaxis(z, 1, -1)), -1, 1)
    )
    np.testing.assert_allclose(softmax(z, axis=0), softmax(z, axis=-3))
    np.testing.assert_allclose(softmax(z, temperature=2.5), softmax(z / 2.5), rtol=1e-14)
    np.testing.assert_allclose(softmax(z, axis=0).sum(axis=0), 1.0, rtol=1e-15)


# ---------------------------------------------------------------- Jacobian


@SETTINGS
@given(
    z=st.lists(st.floats(-10.0, 10.0), min_size=1, max_size=6),
    temperature=st.floats(0.3, 5.0),
)
def test_jacobian_matches_central_finite_differences(z, temperature):
    z = np.array(z)
    np.testing.assert_allclose(
        softmax_jacobian(z, temperature=temperature), _fd_jacobian(z, temperature), atol=1e-8
    )


@pytest.fixture(scope="module")
def sympy_jacobian():
    """Symbolic Jacobian of softmax(z / tau) for n = 3, and a numeric version."""
    tau = sympy.symbols("tau", positive=True)
    zs = sympy.symbols("z0:3", real=True)
    expo = [sympy.exp(zi / tau) for zi in zs]
    p = sympy.Matrix([e / sum(expo) for e in expo])
    jac = p.jacobian(zs)
    return tau, zs, p, jac, sympy.lambdify((zs, tau), jac, modules="mpmath")


def test_jacobian_symbolic_form(sympy_jacobian):
    """sympy: the Jacobian of softmax(z/tau) is (diag(p) - p p^T) / tau."""
    tau, _, p, jac, _ = sympy_jacobian
    closed = (sympy.diag(*p) - p * p.T) / tau
    assert sympy.simplify(jac - closed) == sympy.zeros(3, 3)


@pytest.mark.parametrize(
    "z, temperature",
    [
        ([0.0, 0.0, 0.0], 1.0),
        ([1.0, -2.0, 0.5], 1.0),
        ([1.0, -2.0, 0.5], 0.25),
        ([3.0, 3.0, -7.0], 4.0),
        ([20.0, 0.0, -1.0], 1.0),
        ([0.0, 1e-12, -5.0], 0.7),
    ],
)
def test_jacobian_matches_sympy(sympy_jacobian, z, temperature):
    *_, numeric = sympy_jacobian
    with mpmath.workdps(40):
        ref = numeric([mpmath.mpf(v) for v in z], mpmath.mpf(temperature)).tolist()
        ref = np.array(ref, dtype=float)
    got = softmax_jacobian(z, temperature=temperature)
    np.testing.assert_allclose(got, ref, rtol=1e-13, atol=1e-16)


@SETTINGS
@given(z=st.one_of(moderate, tied))
def test_jacobian_is_symmetric_psd_with_zero_row_sums(z):
    jac = softmax_jacobian(z)
    np.testing.assert_array_equal(jac, jac.T)
    assert np.linalg.eigvalsh(jac)[0] >= -1e-15
    np.testing.assert_allclose(jac @ np.ones(len(z)), 0.0, atol=1e-14)


@SETTINGS
@given(z=st.lists(st.floats(-5.0, 5.0), min_size=1, max_size=12))
def test_jacobian_has_rank_n_minus_1_when_p_is_positive(z):
    assert np.linalg.matrix_rank(softmax_jacobian(z)) == len(z) - 1


def test_nearly_one_hot_jacobian_diagonal_is_relatively_accurate():
    # p = (1 - e, e) with e = exp(-50) / (1 + exp(-50)): J_11 = p_1 p_2 = e (1 - e).
    jac = softmax_jacobian([50.0, 0.0])
    e = math.exp(-50.0) / (1.0 + math.exp(-50.0))
    np.testing.assert_allclose(
        jac, [[e * (1 - e), -e * (1 - e)], [-e * (1 - e), e * (1 - e)]], rtol=1e-15
    )


# ---------------------------------------------------------------- norms


@SETTINGS
@given(z=any_logits, temperature=temperatures)
def test_spectral_norm_matches_eigvalsh(z, temperature):
    ref = np.linalg.eigvalsh(softmax_jacobian(z, temperature=temperature))[-1]
    got = softmax_jacobian_norm(z, 2, temperature=temperature)
    assert abs(got - ref) <= 1e-10 * max(1.0, 1.0 / temperature)


@pytest.mark.parametrize("z", ADVERSARIAL, ids=range(len(ADVERSARIAL)))
@pytest.mark.parametrize("temperature", [1.0, 0.1, 7.0])
def test_spectral_norm_matches_eigvalsh_adversarial(z, temperature):
    ref = np.linalg.eigvalsh(softmax_jacobian(z, temperature=temperature))[-1]
    assert abs(softmax_jacobian_norm(z, 2, temperature=temperature) - ref) <= 1e-12 / temperature


@pytest.mark.parametrize("kind", ["normal", "wide", "tied-top", "near-tie", "one-hot", "plateau"])
def test_spectral_norm_matches_eigvalsh_n1024(kind):
    rng = np.random.default_rng(7)
    z = rng.standard_normal(1024) * (30.0 if kind == "wide" else 2.0)
    if kind == "tied-top":
        z[[3, 500]] = z.max() + 1.0
    elif kind == "near-tie":
        z[3] = z.max() + 1.0
        z[500] = z[3] - 1e-13
    elif kind == "one-hot":
        z[3] = z.max() + 60.0
    elif kind == "plateau":
        z[:] = 0.0
        z[0] = 1e-3
    ref = np.linalg.eigvalsh(softmax_jacobian(z))[-1]
    assert abs(softmax_jacobian_norm(z) - ref) <= 1e-13


@pytest.mark.parametrize("kind", ["normal", "wide", "one-hot", "near-tie"])
def test_spectral_norm_n4096_certificate(kind):
    """At n = 4096, where eigvalsh takes ~20 s, certify lam without the secular solver.

    By interlacing, the largest eigenvalue of diag(p) - p p^T lies in
    [p_(2), p_(1)] and the second largest is at most p_(2). So lam is certified
    if lam > p_(2) and v = p / (p - lam) satisfies J v = lam v (checked with
    the full matrix); for a near-tie the bracket alone pins lam to 1e-10.
    The benchmark compares with eigvalsh at this size.
    """
    rng = np.random.default_rng(4096)
    z = rng.standard_normal(4096) * (20.0 if kind == "wide" else 2.0)
    if kind == "one-hot":
        z[9] = z.max() + 30.0
    elif kind == "near-tie":
        z[9] = z.max() + 1.0
        z[10] = z[9] - 1e-10
    lam = float(softmax_jacobian_norm(z))
    p = softmax(z)
    p_second = np.sort(p)[-2]
    assert p_second <= lam <= p.max()
    if kind == "near-tie":
        assert p.max() - p_second < 1e-10
        return
    assert lam > p_second
    v = p / (p - lam)
    residual = softmax_jacobian(z) @ v - lam * v
    assert np.linalg.norm(residual) <= 1e-13 * lam * np.linalg.norm(v)


def test_spectral_norm_n4096_closed_forms():
    n = 4096
    assert softmax_jacobian_norm(np.zeros(n)) == 1.0 / n
    z = np.full(n, -1e3)
    z[[17, 4000]] = 0.0
    assert softmax_jacobian_norm(z) == 0.5


@pytest.mark.parametrize(
    "z, dps",
    [
        ([0.0, -50.0, -50.0], 60),
        ([0.0, -40.0, -40.0000000001, -41.0], 60),
        ([-1e-12, 0.0, -5.0], 40),
        ([0.0, -1e-15, -3.0, -3.0], 40),
        ([0.0, -30.0, -29.9, -29.8, -25.0], 40),
        ([0.0, -1.0, -1.0, -1.0, -1e-3], 40),
    ],
)
def test_spectral_norm_relative_accuracy_vs_mpmath(z, dps):
    """Full relative precision, even for nearly one-hot p and near-ties.

    The largest logit is 0 so that the shifted logits z - max z are exact and
    only the secular solver is tested (rounding z - max z perturbs p_i by a
    relative eps |z_i - max z|, as for any softmax).
    """
    with mpmath.workdps(dps):
        zm = [mpmath.mpf(v) for v in z]
        w = [mpmath.exp(v - max(zm)) for v in zm]
        p = [v / sum(w) for v in w]
        n = len(p)
        m = mpmath.matrix(n, n)
        for i in range(n):
            for j in range(n):
                m[i, j] = (p[i] if i == j else 0) - p[i] * p[j]
        ref = max(mpmath.eigsy(m, eigvals_only=True))
        got = float(softmax_jacobian_norm(z))
        assert abs(mpmath.mpf(got) - ref) <= 4e-16 * ref


@pytest.mark.parametrize("gap", [5.0, 20.0, 36.0, 50.0, 100.0, 300.0, 700.0])
def test_spectral_norm_n2_closed_form(gap):
    """n = 2: the eigenvalues are 0 and 2 p_1 p_2 (relative accuracy, vs mpmath)."""
    with mpmath.workdps(40):
        e = mpmath.exp(-mpmath.mpf(gap))
        ref = 2 * e / (1 + e) ** 2
        for z in ([gap, 0.0], [0.0, gap], [gap - 3.0, -3.0]):
            got = float(softmax_jacobian_norm(z))
            assert abs(mpmath.mpf(got) - ref) <= 4e-16 * ref


@SETTINGS
@given(z=any_logits, temperature=temperatures)
def test_spectral_norm_is_at_most_one_half_over_tau(z, temperature):
    assert softmax_jacobian_norm(z, 2, temperature=temperature) <= 0.5 / temperature


@pytest.mark.parametrize(
    "z",
    [
        [0.0, 0.0, -1e3, -1e3],
        [5.0, 5.0] + [-1e300] * 10,
        [0.0, 0.0, -40.0],
        [7.0, -1e3, 7.0, -1e3, -1e3],
    ],
)
def test_two_tied_logits_approach_the_sup(z):
    assert softmax_jacobian_norm(z) >= 0.5 - 1e-12
    assert softmax_jacobian_norm(z, temperature=4.0) <= 0.5 / 4.0


def test_spectral_norm_exact_values():
    assert softmax_jacobian_norm([0.0, 0.0]) == 0.5
    assert softmax_jacobian_norm([3.0, 3.0], temperature=2.0) == 0.25
    for n in (2, 3, 5, 16, 100):
        assert softmax_jacobian_norm(np.full(n, 1.5)) == 1.0 / n
    assert softmax_jacobian_norm([4.0]) == 0.0
    assert softmax_jacobian_norm([4.0], np.inf) == 0.0


@SETTINGS
@given(z=any_logits)
def test_spectral_norm_is_between_the_two_largest_probabilities(z):
    p = np.sort(softmax(z))
    lam = softmax_jacobian_norm(z)
    assert lam <= p[-1]
    if p.size >= 2:
        assert lam >= p[-2]


@SETTINGS
@given(z=any_logits, temperature=temperatures)
def test_inf_norm_matches_brute_force_row_sums(z, temperature):
    jac = softmax_jacobian(z, temperature=temperature)
    got = softmax_jacobian_norm(z, np.inf, temperature=temperature)
    np.testing.assert_allclose(got, _max_abs_row_sum(jac), rtol=1e-13, atol=1e-300)


@pytest.mark.parametrize("z", ADVERSARIAL, ids=range(len(ADVERSARIAL)))
def test_inf_norm_matches_brute_force_adversarial(z):
    got = softmax_jacobian_norm(z, ord=np.inf)
    np.testing.assert_allclose(got, _max_abs_row_sum(softmax_jacobian(z)), rtol=1e-13, atol=1e-300)


def test_batched_shapes_and_per_row_values():
    rng = np.random.default_rng(3)
    z = rng.standard_normal((3, 4, 5)) * 4.0
    z[0, 0] = [1.0, 1.0, 0.0, -2.0, 0.5]  # a tie in one row
    z[1, 2] = [60.0, 0.0, 0.0, -1.0, 0.0]  # a nearly one-hot row
    z[2, 3] = [0.0, 1e-12, -5.0, -5.0, -5.0]  # a near-tie
    jac = softmax_jacobian(z, temperature=0.5)
    assert jac.shape == (3, 4, 5, 5)
    for order in (2, np.inf):
        norms = softmax_jacobian_norm(z, order, temperature=0.5)
        assert norms.shape == (3, 4)
        for idx in np.ndindex(3, 4):
            np.testing.assert_allclose(
                norms[idx], softmax_jacobian_norm(z[idx], order, temperature=0.5), rtol=1e-15
            )
            np.testing.assert_allclose(
                jac[idx], softmax_jacobian(z[idx], temperature=0.5), rtol=1e-15
            )
    assert softmax_jacobian_norm(np.zeros((2, 3, 1))).shape == (2, 3)
    assert softmax_jacobian(np.zeros((2, 1))).shape == (2, 1, 1)


def test_return_conventions():
    for order in (2, np.inf):
        out = softmax_jacobian_norm([1.0, 2.0, 3.0], order)
        assert isinstance(out, np.ndarray) and out.shape == () and out.dtype == np.float64
    h = entropy([0.5, 0.5])
    assert isinstance(h, np.ndarray) and h.shape == ()
    assert softmax([1, 2, 3]).dtype == np.float64


# ---------------------------------------------------------------- entropy


def test_entropy_closed_forms():
    for n in (1, 2, 3, 10, 1000):
        assert entropy(np.full(n, 1.0 / n)) == pytest.approx(math.log(n), rel=1e-14, abs=1e-15)
    for n in (1, 2, 7):
        one_hot = np.zeros(n)
        one_hot[n // 2] = 1.0
        h = entropy(one_hot)
        assert h == 0.0 and not np.signbit(h)


@SETTINGS
@given(weights=st.lists(st.floats(0.0, 10.0), min_size=2, max_size=30).filter(lambda w: sum(w) > 0))
def test_entropy_matches_masked_direct_formula(weights):
    p = np.array(weights) / sum(weights)
    mask = p > 0
    ref = -np.sum(p[mask] * np.log(p[mask]))
    assert entropy(p) == pytest.approx(ref, rel=1e-12, abs=1e-15)
    assert 0.0 <= entropy(p) <= math.log(p.size) + 1e-12


def test_entropy_batched_and_axis():
    p = softmax(np.random.default_rng(1).standard_normal((4, 6)), axis=0)
    h = entropy(p, axis=0)
    assert h.shape == (6,)
    np.testing.assert_allclose(h, [entropy(p[:, j]) for j in range(6)], rtol=1e-15)
    np.testing.assert_allclose(entropy(p.T), h, rtol=1e-15)


@pytest.mark.parametrize(
    "p",
    [[0.5, 0.6], [0.2, 0.2], [1.5, -0.5], [-1e-300, 1.0], [[0.5, 0.5], [0.3, 0.3]]],
)
def test_entropy_rejects_non_probability_input(p):
    with pytest.raises(ValueError, match=r"^p must be a probability array"):
        entropy(p)


# ---------------------------------------------------------------- errors

BAD_ARRAYS = [
    ([], ValueError),
    ([[1.0], []], TypeError),
    (np.zeros((0, 3)), ValueError),
    (np.zeros((3, 0)), ValueError),
    (3.0, ValueError),
    ([1.0, np.nan], ValueError),
    ([1.0, np.inf], ValueError),
    ([-np.inf, 0.0], ValueError),
    ("1.0", TypeError),
    (None, TypeError),
    ([True, False], TypeError),
    ([1 + 2j, 0], TypeError),
    ([object(), 1.0], TypeError),
]
BAD_TEMPERATURES = [
    (0.0, ValueError),
    (-1.0, ValueError),
    (np.nan, ValueError),
    (np.inf, ValueError),
    ("1", TypeError),
    (None, TypeError),
    (True, TypeError),
]
BAD_AXES = [
    (1, ValueError),
    (-2, ValueError),
    (1.0, TypeError),
    ("0", TypeError),
    (None, TypeError),
]
BAD_ORDS = [1, -np.inf, 3, 0, "inf", "fro", None, True, 2.5, [2]]

FUNCTIONS_OF_Z = [
    lambda z: softmax(z),
    lambda z: softmax_jacobian(z),
    lambda z: softmax_jacobian_norm(z),
    lambda z: softmax_jacobian_norm(z, np.inf),
]
FUNCTIONS_OF_TEMPERATURE = [
    lambda t: softmax([1.0, 2.0], temperature=t),
    lambda t: softmax_jacobian([1.0, 2.0], temperature=t),
    lambda t: softmax_jacobian_norm([1.0, 2.0], temperature=t),
    lambda t: softmax_jacobian_norm([1.0, 2.0], np.inf, temperature=t),
]


# logits may be -inf (masked), so the message differs, and [-inf, 0] is valid
BAD_LOGITS = [(b, e) for b, e in BAD_ARRAYS if not (isinstance(b, list) and -np.inf in b)]


@pytest.mark.parametrize("func", FUNCTIONS_OF_Z, ids=["softmax", "jac", "norm2", "norminf"])
@pytest.mark.parametrize("bad, exc", BAD_LOGITS)
def test_bad_z_is_rejected_naming_z(func, bad, exc):
    with pytest.raises(exc, match=r"^z must be a real array of finite or -inf"):
        func(bad)


@pytest.mark.parametrize("func", FUNCTIONS_OF_Z, ids=["softmax", "jac", "norm2", "norminf"])
@pytest.mark.parametrize("bad, match", [
    ([1.0, np.inf], "NaN or \\+inf"),
    ([np.nan, -np.inf], "NaN or \\+inf"),
    ([-np.inf, -np.inf], "at least one finite"),
    ([[0.0, -np.inf], [-np.inf, -np.inf]], "1 slice"),
])
def test_masks_keep_rejecting_nan_plus_inf_and_fully_masked_rows(func, bad, match):
    with pytest.raises(ValueError, match=f"^z must .*{match}"):
        func(bad)


def test_fully_masked_slice_along_another_axis_is_rejected():
    z = np.array([[0.0, -np.inf], [1.0, -np.inf]])  # column 1 is all masked
    assert np.allclose(softmax(z, axis=-1), [[1, 0], [1, 0]])
    with pytest.raises(ValueError, match="along axis -2"):
        softmax(z, axis=0)


def _masked_batch(rng, rows, n, scale):
    z = scale * rng.standard_normal((rows, n))
    mask = rng.random((rows, n)) < 0.5
    mask[np.arange(rows), rng.integers(0, n, rows)] = False  # one unmasked per row
    return np.where(mask, -np.inf, z), mask


@pytest.mark.parametrize("temperature", [1.0, 0.3, 7.0])
@pytest.mark.parametrize("scale", [0.1, 3.0, 40.0])
def test_masked_rows_equal_the_unmasked_sub_vector(scale, temperature):
    """Per-row masks in one batch, against each row's unmasked sub-vector
    computed on its own (no -inf involved): p, J, and both norms."""
    rng = np.random.default_rng(int(10 * scale + temperature))
    z, mask = _masked_batch(rng, 200, 9, scale)
    p = softmax(z, temperature=temperature)
    jac = softmax_jacobian(z, temperature=temperature)
    n2 = softmax_jacobian_norm(z, temperature=temperature)
    ninf = softmax_jacobian_norm(z, np.inf, temperature=temperature)
    for i in range(z.shape[0]):
        keep = ~mask[i]
        sub = z[i, keep]
        assert np.all(p[i, mask[i]] == 0.0)
        np.testing.assert_allclose(p[i, keep], softmax(sub, temperature=temperature),
                                   rtol=1e-14, atol=1e-300)
        assert np.all(jac[i][mask[i]] == 0.0) and np.all(jac[i][:, mask[i]] == 0.0)
        np.testing.assert_allclose(jac[i][np.ix_(keep, keep)],
                                   softmax_jacobian(sub, temperature=temperature),
                                   rtol=1e-13, atol=1e-300)
        for got, order in ((n2[i], 2), (ninf[i], np.inf)):
            want = float(softmax_jacobian_norm(sub, order, temperature=temperature))
            assert got == pytest.approx(want, rel=1e-13, abs=1e-300), (i, order)
    # and against a dense eigensolver on the unmasked block
    dense = np.array([np.linalg.eigvalsh(jac[i][np.ix_(~mask[i], ~mask[i])])[-1]
                      for i in range(z.shape[0])])
    np.testing.assert_allclose(n2, dense, rtol=1e-9, atol=1e-15)


def test_causal_mask():
    """Row i of a causal (lower-triangular) mask attends to tokens 0..i."""
    rng = np.random.default_rng(0)
    n = 12
    z = 2.0 * rng.standard_normal((n, n))
    causal = np.where(np.tril(np.ones((n, n), dtype=bool)), z, -np.inf)
    norms = softmax_jacobian_norm(causal)
    assert norms[0] == 0.0  # one token: p = 1, J = 0
    for i in range(1, n):
        assert norms[i] == pytest.approx(float(softmax_jacobian_norm(z[i, : i + 1])),
                                         rel=1e-13)
    assert np.allclose(softmax(causal).sum(axis=1), 1.0)
    # a single unmasked pair at a tie gives the two-logit maximum 1/2
    assert float(softmax_jacobian_norm([3.0, -np.inf, 3.0, -np.inf])) == 0.5


@pytest.mark.parametrize("bad, exc", BAD_ARRAYS)
def test_bad_p_is_rejected_naming_p(bad, exc):
    with pytest.raises(exc, match=r"^p must be a finite real array"):
        entropy(bad)


@pytest.mark.parametrize(
    "func", FUNCTIONS_OF_TEMPERATURE, ids=["softmax", "jac", "norm2", "norminf"]
)
@pytest.mark.parametrize("bad, exc", BAD_TEMPERATURES)
def test_bad_temperature_is_rejected_naming_temperature(func, bad, exc):
    with pytest.raises(exc, match=r"^temperature must be a finite positive real number"):
        func(bad)


@pytest.mark.parametrize("bad", BAD_ORDS, ids=repr)
def test_bad_ord_is_rejected_naming_ord(bad):
    with pytest.raises(ValueError, match=r"^ord must be 2 or numpy.inf"):
        softmax_jacobian_norm([1.0, 2.0], bad)


@pytest.mark.parametrize("bad, exc", BAD_AXES)
def test_bad_axis_is_rejected_naming_axis(bad, exc):
    with pytest.raises(exc, match=r"^axis must be an integer in \[-1, 0\]"):
        softmax([1.0, 2.0], axis=bad)
    with pytest.raises(exc, match=r"^axis must be an integer in \[-1, 0\]"):
        entropy([0.5, 0.5], axis=bad)


def test_no_nan_or_warning_on_degenerate_but_valid_input():
    for z in ([0.0], [[0.0]], [5] * 3, np.zeros((2, 2, 1))):
        for out in (
            softmax(z),
            softmax_jacobian(z),
            softmax_jacobian_norm(z),
            softmax_jacobian_norm(z, np.inf),
            entropy(softmax(z)),
        ):
            assert np.all(np.isfinite(out))


def test_jacobian_beyond_float64_raises_overflow_error():
    # a tie: p = (1/2, 1/2, 0), so J_00 = 1 / (4 tau), beyond float64 for tau = 1e-310
    z = np.array([1.0, 1.0, 0.0])
    for f in (softmax_jacobian, softmax_jacobian_norm):
        with pytest.raises(OverflowError, match="temperature"):
            f(z, temperature=1e-310)
    assert softmax_jacobian(z, temperature=1e-300)[0, 0] == pytest.approx(0.25e300, rel=1e-15)
    assert float(softmax_jacobian_norm(z, temperature=1e-300)) == pytest.approx(0.5e300,
                                                                              rel=1e-15)


# -- keep_float32: the float32 fast path for training float32 models ----------
def test_keep_float32_computes_float32_softmax_to_single_precision():
    rng = np.random.default_rng(3)
    z = (rng.standard_normal((6, 40)) * 20).astype(np.float32)
    z[2, 5:] = -np.inf                                       # a masked row tail
    p32 = softmax(z, keep_float32=True)
    assert p32.dtype == np.float32 and np.all(p32[2, 5:] == 0)
    p64 = softmax(z)                                         # float64 of the same logits
    np.testing.assert_allclose(p32, p64, rtol=2e-5, atol=1e-30)
    np.testing.assert_allclose(p32.sum(axis=-1), 1, rtol=1e-6)
    # the same code path on float32 data: exp of clipped, scaled differences
    d = np.maximum(0.5 * z - (0.5 * z).max(-1, keepdims=True), np.float32(-400)) * 2
    with np.errstate(under="ignore"):
        w = np.exp(d)
    assert np.array_equal(p32, w / w.sum(-1, keepdims=True))


def test_keep_float32_leaves_every_other_input_in_float64_bit_for_bit():
    rng = np.random.default_rng(4)
    z = rng.standard_normal((5, 9)) * 1e3
    for kw in ({"axis": 0}, {"temperature": 0.01}, {}):
        assert np.array_equal(softmax(z, keep_float32=True, **kw), softmax(z, **kw))
        assert softmax(z, keep_float32=True, **kw).dtype == np.float64
    zi = rng.integers(-5, 5, (3, 4))
    assert np.array_equal(softmax(zi, keep_float32=True), softmax(zi))
    with pytest.raises(TypeError, match="keep_float32"):
        softmax(z, keep_float32=1)
    with pytest.raises(ValueError, match="z must"):
        softmax(np.array([np.nan, 1.0], np.float32), keep_float32=True)
    with pytest.raises(ValueError, match="z must"):
        softmax(np.full(3, -np.inf, np.float32), keep_float32=True)
