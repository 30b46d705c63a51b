"""Tests of :mod:`lipattn.lanczos`: Golub-Kahan-Lanczos against dense SVDs on every
shape (both sides larger), scale invariance from 1e-200 to 1e200, the convergence
error, jacobian_norm on arbitrary shapes, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.sparse.linalg import LinearOperator, aslinearoperator

from lipattn import jacobian_norm
from lipattn.lanczos import ConvergenceError, LipschitzEstimate, golub_kahan_norm
from lipattn.lipschitz import local_lipschitz, local_lipschitz_info
from lipattn.spectral import matrix_with_spectrum


def problem(N, d, dk, dv, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((N, d)), rng.standard_normal((d, dk)),
            rng.standard_normal((d, dk)), rng.standard_normal((d, dv)))


def test_the_reported_case_d_v_below_d():
    """N = 3, d = 3, d_k = d_v = 1: the Jacobian is 3 x 9. The old loop started on the
    9-dimensional side, stopped after 3 steps and returned 1.266661 (24 % low)."""
    X, Wq, Wk, Wv = problem(3, 3, 1, 1, seed=172)
    dense = local_lipschitz(X, Wq, Wk, Wv, method="dense")
    for seed in range(5):
        from lipattn.lipschitz import attention_operator
        value, _ = golub_kahan_norm(attention_operator(X, Wq, Wk, Wv), seed=seed)
        assert abs(value - dense) <= 1e-12 * dense
    assert local_lipschitz(X, Wq, Wk, Wv, method="lanczos") == pytest.approx(dense, rel=1e-12)


@settings(max_examples=150, deadline=None)
@given(N=st.integers(1, 6), d=st.integers(1, 5), dk=st.integers(1, 5), dv=st.integers(1, 5),
       seed=st.integers(0, 10**6))
def test_lanczos_agrees_with_the_dense_svd_on_every_shape(N, d, dk, dv, seed):
    X, Wq, Wk, Wv = problem(N, d, dk, dv, seed)
    dense = local_lipschitz(X, Wq, Wk, Wv, method="dense")
    est = local_lipschitz_info(X, Wq, Wk, Wv, method="lanczos", tol=1e-12)
    assert abs(est.value - dense) <= 1e-9 * dense
    assert est.value <= dense * (1 + 1e-12)
    assert est.residual <= 1e-12


@settings(max_examples=80, deadline=None)
@given(m=st.integers(1, 40), n=st.integers(1, 40), seed=st.integers(0, 10**6),
       start=st.integers(0, 5))
def test_golub_kahan_on_random_matrices_of_every_shape(m, n, seed, start):
    A = np.random.default_rng(seed).standard_normal((m, n))
    value, products = golub_kahan_norm(A, tol=1e-12, seed=start)
    ref = np.linalg.norm(A, 2)
    assert abs(value - ref) <= 1e-9 * ref and products <= 2 * min(m, n)


@pytest.mark.parametrize("c", [1e-200, 1e-100, 1e-10, 1e10, 1e100, 1e200])
def test_scale_invariance_of_golub_kahan(c):
    A = matrix_with_spectrum([3.0, 2.9, 1.0, 0.5, 0.1], (30, 20), seed=1)
    base, _ = golub_kahan_norm(A)
    scaled, _ = golub_kahan_norm(c * A)
    assert scaled / c == pytest.approx(base, rel=1e-12)
    assert base == pytest.approx(3.0, rel=1e-10)


@pytest.mark.parametrize("c", [1e-200, 1e-50, 1e50, 1e200])
def test_scale_invariance_of_local_lipschitz_in_the_values(c):
    X, Wq, Wk, Wv = problem(12, 5, 3, 2, seed=4)   # lanczos on a 24 x 60 Jacobian
    base = local_lipschitz(X, Wq, Wk, Wv, method="dense")
    lanczos = local_lipschitz(X, Wq, Wk, c * Wv, method="lanczos")
    assert lanczos / c == pytest.approx(base, rel=1e-9)
    assert local_lipschitz(X, Wq, Wk, c * Wv, method="dense") / c == pytest.approx(base, rel=1e-12)


def test_unconverged_runs_raise_with_the_lower_bound():
    A = matrix_with_spectrum(np.linspace(1.0, 0.99, 40), (40, 40), seed=2)
    with pytest.raises(ConvergenceError, match="max_steps") as info:
        golub_kahan_norm(A, tol=1e-12, max_steps=3)
    assert 0 < info.value.value <= 1.0 and info.value.residual > 1e-12
    assert info.value.products == 6
    assert golub_kahan_norm(A, tol=1e-12)[0] == pytest.approx(1.0, rel=1e-12)


def test_zero_operator_and_seeds():
    assert golub_kahan_norm(np.zeros((4, 3)))[0] == 0.0
    A = np.random.default_rng(0).standard_normal((9, 7))
    vals = {round(golub_kahan_norm(A, seed=s)[0], 12) for s in range(5)}
    assert len(vals) == 1


def test_jacobian_norm_of_a_map_on_three_axis_arrays():
    """f(E) = M E along the middle axis, E of shape (2, 5, 3) -> (2, 4, 3): the norm is ||M||_2."""
    M = np.random.default_rng(3).standard_normal((4, 5))
    est = jacobian_norm(lambda E: np.einsum("ij,ajb->aib", M, E),
                        lambda G: np.einsum("ij,aib->ajb", M, G), (2, 5, 3), out_shape=(2, 4, 3))
    assert isinstance(est, LipschitzEstimate) and est.method == "lanczos"
    assert est.value == pytest.approx(np.linalg.norm(M, 2), rel=1e-10)
    assert est.products > 0 and est.residual <= 1e-10


def test_bad_input():
    A = np.eye(3)
    with pytest.raises(TypeError, match="op"):
        golub_kahan_norm("A")
    with pytest.raises(TypeError, match="op"):
        golub_kahan_norm(lambda v: v)
    with pytest.raises(ValueError, match="op"):
        golub_kahan_norm(np.ones(3))
    with pytest.raises(ValueError, match="op"):
        golub_kahan_norm(np.array([[1.0, np.nan]]))
    for tol in (0.0, -1.0, 1.0, 1e300, 1e-300):
        with pytest.raises(ValueError, match="tol"):
            golub_kahan_norm(A, tol=tol)
    with pytest.raises(TypeError, match="tol"):
        golub_kahan_norm(A, tol="1e-8")
    with pytest.raises(ValueError, match="seed"):
        golub_kahan_norm(A, seed=-1)
    with pytest.raises(TypeError, match="seed"):
        golub_kahan_norm(A, seed=1.5)
    with pytest.raises(ValueError, match="max_steps"):
        golub_kahan_norm(A, max_steps=0)
    inf_op = LinearOperator((3, 3), matvec=lambda v: np.full(3, np.inf),
                            rmatvec=lambda v: v, dtype=float)
    with pytest.raises(ValueError, match="non-finite"):
        golub_kahan_norm(inf_op)
    with pytest.raises(TypeError, match="jvp"):
        jacobian_norm(None, lambda G: G, (3,))
    with pytest.raises(TypeError, match="vjp"):
        jacobian_norm(lambda E: E, 3, (3,))
    with pytest.raises(ValueError, match="shape"):
        jacobian_norm(lambda E: E, lambda G: G, (3, 0))
    with pytest.raises(TypeError, match="shape"):
        jacobian_norm(lambda E: E, lambda G: G, "3")
    with pytest.raises(ValueError, match="jvp must return"):
        jacobian_norm(lambda E: E[:2], lambda G: G, (3,))
    assert golub_kahan_norm(aslinearoperator(2 * A))[0] == pytest.approx(2.0)


def test_invariant_subspaces_and_low_rank_operators():
    """A rank-2 operator: the Krylov space is exhausted after two steps (alpha or beta
    vanishes up to rounding) and the value is exact."""
    for shape in ((30, 20), (20, 30)):
        A = matrix_with_spectrum([5.0, 2.0], shape, seed=3)
        value, products = golub_kahan_norm(A, tol=1e-13)
        assert value == pytest.approx(5.0, rel=1e-13) and products <= 8
    eye = np.eye(6)
    assert golub_kahan_norm(eye)[0] == pytest.approx(1.0, rel=1e-15)


def test_a_wrong_adjoint_or_a_complex_operator_is_an_error():
    M = np.random.default_rng(4).standard_normal((5, 4))
    with pytest.raises(ValueError, match="not the adjoint"):
        jacobian_norm(lambda E: M @ E, lambda G: 2 * M.T @ G, (4,), out_shape=(5,))
    with pytest.raises(ValueError, match="not the adjoint"):
        golub_kahan_norm(LinearOperator((5, 4), matvec=lambda v: M @ v,
                                        rmatvec=lambda u: M[:4, :].T @ u[:4], dtype=float))
    with pytest.raises(TypeError, match="real"):
        golub_kahan_norm(aslinearoperator(M + 1j))
    with pytest.raises(ValueError, match="vjp returned non-finite"):
        jacobian_norm(lambda E: M @ E, lambda G: np.full(4, np.nan), (4,), out_shape=(5,))
