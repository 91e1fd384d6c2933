"""Property tests: the numbers do not depend on batching, threads or user order; cumulative
columns equal single-k values; perfect rankings score 1."""
import warnings

import numpy as np
from hypothesis import given, settings, strategies as st

import gpureco
import pytest
import scipy.sparse as sp

from conftest import random_problem, to_csr
from reference import defined_scores, reference_metrics

ALL = ("P@K", "TP@K", "R@K", "AP@K", "TAP@K", "NDCG@K", "Hit@K", "RR@K", "ROC_AUC", "PR_AUC")


def run(X_train, X_test, A, B, auc=True, **kw):
    """All metrics; with auc=False the @K ones only (ranked only up to K by the engine)."""
    metrics = dict(all_metrics=True) if auc else dict(
        precision=True, trunc_precision=True, recall=True, average_precision=True,
        trunc_average_precision=True, ndcg=True, hit=True, rr=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return gpureco.calc_reco_metrics(to_csr(X_train), to_csr(X_test), A, B, as_df=False, **metrics, **kw)


problems = st.builds(
    lambda seed, ties, f32, n_items: random_problem(np.random.default_rng(seed), n_users=25, n_items=n_items,
                                                    n_factors=5, integer_factors=ties, graded=True,
                                                    dtype=np.float32 if f32 else np.float64),
    st.integers(0, 10**6), st.booleans(), st.booleans(), st.integers(6, 60))


@settings(max_examples=40, deadline=None)
@given(problems, st.integers(1, 30), st.integers(1, 4), st.integers(1, 8), st.booleans())
def test_same_numbers_for_any_batch_size_and_threads(problem, batch_size, nthreads, k, noise):
    X_train, X_test, A, B = problem
    k = min(k, X_test.shape[1])
    base = run(X_train, X_test, A, B, k=k, batch_size=1000, nthreads=1, break_ties_with_noise=noise)
    other = run(X_train, X_test, A, B, k=k, batch_size=batch_size, nthreads=nthreads, break_ties_with_noise=noise)
    top_k = run(X_train, X_test, A, B, False, k=k, batch_size=batch_size, nthreads=nthreads,
                break_ties_with_noise=noise)
    for name in ALL:
        np.testing.assert_array_equal(base[name], other[name], err_msg=name)
        if name in top_k:  # ranking only up to K gives the same @K metrics
            np.testing.assert_array_equal(base[name], top_k[name], err_msg=name)


@settings(max_examples=30, deadline=None)
@given(problems, st.randoms(use_true_random=False), st.integers(1, 8))
def test_same_numbers_for_any_user_order(problem, random, k):
    X_train, X_test, A, B = problem
    k = min(k, X_test.shape[1])
    order = list(range(X_test.shape[0]))
    random.shuffle(order)
    base = run(X_train, X_test, A, B, k=k, batch_size=7)
    shuffled = run(X_train[order], X_test[order], A[order], B, k=k, batch_size=7)
    for name in ALL:
        np.testing.assert_array_equal(base[name][order], shuffled[name], err_msg=name)


@settings(max_examples=30, deadline=None)
@given(problems, st.integers(1, 10))
def test_cumulative_equals_single_k(problem, k):
    X_train, X_test, A, B = problem
    k = min(k, X_test.shape[1])
    cumulative = run(X_train, X_test, A, B, k=k, cumulative=True)
    for kk in range(1, k + 1):
        single = run(X_train, X_test, A, B, k=kk)
        for name in ALL:
            column = cumulative[name][:, kk - 1] if cumulative[name].ndim == 2 else cumulative[name]
            np.testing.assert_array_equal(column, single[name], err_msg=f"{name}@{kk}")  # bit for bit


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 6))
def test_perfect_rankings_score_one(seed, k):
    rng = np.random.default_rng(seed)
    n_users, n_items = 20, 30
    X_train, X_test, _, _ = random_problem(rng, n_users=n_users, n_items=n_items, graded=True)
    # a score matrix that puts every test item first, in order of decreasing value
    scores = rng.random((n_users, n_items)) + 10.0 * (X_test > 0) + X_test
    A, B = scores, np.eye(n_items)
    out = run(X_train, X_test, A, B, k=k)
    n_test = (X_test > 0).sum(axis=1)
    ok = (n_test > 0) & (n_test < n_items - (X_train > 0).sum(axis=1))
    for name in ("TP@K", "TAP@K", "NDCG@K", "Hit@K", "RR@K", "ROC_AUC", "PR_AUC"):
        np.testing.assert_allclose(out[name][ok], 1.0, rtol=1e-12, err_msg=name)
    full = ok & (n_test >= k)  # P@K is 1 only where the user has at least k test items
    np.testing.assert_allclose(out["P@K"][full], 1.0, rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_blas_rounding_never_shows(dtype):
    """BLAS rounds a user's scores differently with its position in the block (last item rows,
    thread boundaries, F >= 17): exact ties between items must still be ranked as defined."""
    rng = np.random.default_rng(0)
    n_users, n_items, F = 67, 3001, 64
    A = rng.standard_normal((n_users, F)).astype(dtype)
    B = rng.standard_normal((n_items, F)).astype(dtype)
    B[10], B[11], B[12] = B[3000], B[750], B[2999]  # exact ties with the last items and a middle one
    rows = np.repeat(np.arange(n_users), 3)
    X_test = sp.csr_array((np.ones(rows.size), (rows, np.tile([750, 3000, 2999], n_users))), shape=(n_users, n_items))
    want = reference_metrics(np.zeros((n_users, n_items)), X_test.toarray(), defined_scores(A, B), 10)
    perm = rng.permutation(n_users)
    for batch_size, nthreads, order in ((64, 1, None), (2, 2, None), (5, 3, perm), (None, 1, perm)):
        rows_ = np.arange(n_users) if order is None else order
        for auc in (True, False):
            got = run(np.zeros((n_users, n_items)), X_test[rows_], A[rows_], B, auc, k=10,
                      batch_size=batch_size, nthreads=nthreads)
            for name, values in got.items():
                if name != "K":
                    np.testing.assert_allclose(values, want[name][rows_], rtol=1e-12, err_msg=f"{name} {batch_size}")
