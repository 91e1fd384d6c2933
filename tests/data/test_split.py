"""split_reco_train_test: recometrics' outputs and row orders, its minimums, determinism."""
import numpy as np
import pytest
import scipy.sparse as sp

import gpureco


@pytest.fixture
def X():
    rng = np.random.default_rng(5)
    dense = (rng.random((200, 60)) < rng.random((200, 1)) * 0.3) * rng.integers(1, 5, size=(200, 60))
    return sp.csr_array(dense.astype(np.float32))


def dense(M):
    return M.toarray()


def check_rows_split(X_rows, X_train, X_test, fraction):
    """Train and test partition each row's entries, test holding round(nnz * fraction) of them."""
    np.testing.assert_array_equal(dense(X_train) + dense(X_test), dense(X_rows))
    assert not np.any((dense(X_train) != 0) & (dense(X_test) != 0))
    for M in (X_train, X_test):
        assert M.has_sorted_indices and isinstance(M, sp.csr_array)


def test_all_mode(X):
    X_before = X.copy()
    X_train, X_test = gpureco.split_reco_train_test(X, "all", items_test_fraction=0.3, consider_cold_start=True)
    assert X_train.shape == X_test.shape == X.shape
    check_rows_split(X, X_train, X_test, 0.3)
    nnz = np.diff(X.indptr)
    n_test = np.diff(X_test.indptr)
    expected = np.floor(nnz * 0.3 + 0.5)
    eligible = (expected >= 1) & (nnz + 1 < 60) & (60 - (nnz - expected) >= 2)
    np.testing.assert_array_equal(n_test[eligible], expected[eligible])
    assert np.all(n_test[~eligible] == 0)  # a user that would break a minimum keeps everything in training
    np.testing.assert_array_equal(dense(X), dense(X_before))
    assert X_test.dtype == np.float32


@pytest.mark.parametrize("min_pos_test,min_items_pool,consider_cold_start", [(1, 2, False), (3, 45, False), (2, 2, True)])
def test_separated_mode_honours_minimums(X, min_pos_test, min_items_pool, consider_cold_start):
    X_train, X_test, X_rem, users = gpureco.split_reco_train_test(
        X, "separated", users_test_fraction=0.25, items_test_fraction=0.5, min_pos_test=min_pos_test,
        min_items_pool=min_items_pool, consider_cold_start=consider_cold_start, seed=3)
    assert np.all(np.diff(users) > 0) and users.size <= 50
    assert X_train.shape == X_test.shape == (users.size, 60)
    check_rows_split(X[users], X_train, X_test, 0.5)
    rest = np.setdiff1d(np.arange(200), users)
    np.testing.assert_array_equal(dense(X_rem), dense(X[rest]))  # the others, in their order
    n_test, n_train = np.diff(X_test.indptr), np.diff(X_train.indptr)
    assert np.all(n_test >= max(1, min_pos_test))
    assert np.all(60 - n_train >= min_items_pool)
    if not consider_cold_start:
        assert np.all(n_train > 0)


def test_number_of_test_users(X):
    _, _, _, users = gpureco.split_reco_train_test(X, users_test_fraction=0.1)
    assert users.size == 20
    _, _, _, users = gpureco.split_reco_train_test(X, users_test_fraction=0.5, max_test_users=7)
    assert users.size == 7
    _, _, _, users = gpureco.split_reco_train_test(X, users_test_fraction=None, max_test_users=13)
    assert users.size == 13
    with pytest.warns(UserWarning, match="less than one test user"):
        _, _, _, users = gpureco.split_reco_train_test(X, users_test_fraction=0.001)
    assert users.size == 1


def test_joined_mode_puts_test_users_first(X):
    X_train_s, X_test_s, X_rem, users_s = gpureco.split_reco_train_test(X, "separated", seed=4)
    X_train, X_test, users = gpureco.split_reco_train_test(X, "joined", seed=4)
    np.testing.assert_array_equal(users, users_s)
    np.testing.assert_array_equal(dense(X_test), dense(X_test_s))
    np.testing.assert_array_equal(dense(X_train), np.vstack([dense(X_train_s), dense(X_rem)]))
    assert X_train.shape == (200, 60)


def test_same_seed_same_split_other_seed_other_split(X):
    a = gpureco.split_reco_train_test(X, seed=1)
    b = gpureco.split_reco_train_test(X, seed=1)
    c = gpureco.split_reco_train_test(X, seed=2)
    for left, right in zip(a, b):
        np.testing.assert_array_equal(left if isinstance(left, np.ndarray) else dense(left),
                                      right if isinstance(right, np.ndarray) else dense(right))
    assert not np.array_equal(a[3], c[3])


def test_split_feeds_calc_reco_metrics(X):
    X_train, X_test, X_rem, users = gpureco.split_reco_train_test(X, users_test_fraction=0.3)
    rng = np.random.default_rng(0)
    df = gpureco.calc_reco_metrics(X_train, X_test, rng.standard_normal((users.size, 4)),
                                   rng.standard_normal((60, 4)), k=5)
    assert df.notna().all().all()  # every test user meets the minimums: no NaN, no warning
