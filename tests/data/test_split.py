"""split_reco_train_test: recometrics' outputs and row orders, its minimums, determinism."""
import warnings

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
    X_train, X_test = gpureco.split_reco_train_test(X, "all", items_test_fraction=0.3, min_pos_test=3)
    assert X_train.shape == X_test.shape == X.shape
    check_rows_split(X, X_train, X_test, 0.3)
    nnz = np.diff(X.indptr)
    n_test = np.diff(X_test.indptr)
    # every user, whatever the minimums (as recometrics): round(nnz * 0.3), halves up
    np.testing.assert_array_equal(n_test, np.floor(nnz * 0.3 + 0.5))
    assert np.any((n_test > 0) & (n_test < 3))  # min_pos_test=3 did not apply
    np.testing.assert_array_equal(dense(X), dense(X_before))
    assert X_test.dtype == np.float32


@pytest.mark.parametrize("min_pos_test,min_items_pool,consider_cold_start", [(1, 2, False), (3, 45, False), (2, 2, True)])
def test_separated_mode_honours_minimums(X, min_pos_test, min_items_pool, consider_cold_start):
    X_rem, X_train, X_test, users = gpureco.split_reco_train_test(
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
    X_rem, X_train_s, X_test_s, users_s = gpureco.split_reco_train_test(X, "separated", seed=4)
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
    X_rem, X_train, X_test, users = gpureco.split_reco_train_test(X, users_test_fraction=0.3)
    rng = np.random.default_rng(0)
    df = gpureco.calc_reco_metrics(X_train, X_test, rng.standard_normal((users.size, 4)),
                                   rng.standard_normal((60, 4)), k=5)
    assert df.notna().all().all()  # every test user meets the minimums: no NaN, no warning


# --- recometrics' own split, as its code behaves -------------------------------------------------

recometrics = pytest.importorskip("recometrics")


def graded_activity(n_users=300, n_items=30, seed=0):
    """Users with 0 .. n_items interactions each: every minimum is met by some and missed by others."""
    rng = np.random.default_rng(seed)
    X = np.zeros((n_users, n_items))
    for user in range(n_users):
        X[user, rng.choice(n_items, user % (n_items + 1), replace=False)] = 1 + user % 3
    return sp.csr_array(X)


GRID = [(fraction, pool, pos, cold) for fraction in (0.2, 0.3, 0.5, 0.7) for pool in (0, 2, 5, 29)
        for pos in (0, 1, 2, 4) for cold in (False, True)]


@pytest.mark.parametrize("fraction,min_items_pool,min_pos_test,cold", GRID)
def test_recometrics_grid_same_outputs_types_test_users_and_items(fraction, min_items_pool, min_pos_test, cold):
    """Against the installed recometrics: the same outputs in the same order and types, the same
    set of possible test users (asking for more users than qualify returns every one that
    does) and the same number of test items for each; only the random choices differ."""
    X = graded_activity()
    kw = dict(users_test_fraction=0.99, max_test_users=None, items_test_fraction=fraction,
              min_items_pool=min_items_pool, min_pos_test=min_pos_test, consider_cold_start=cold, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            theirs = recometrics.split_reco_train_test(X.copy(), **kw)
        except RuntimeError as error:  # no user qualifies: gpureco says so too, as a ValueError
            assert "criteria" in str(error)
            with pytest.raises(ValueError, match="No user meets the criteria"):
                gpureco.split_reco_train_test(X, **kw)
            return
        mine = gpureco.split_reco_train_test(X, **kw)
    assert [type(a) for a in mine] == [type(a) for a in theirs]
    assert [(a.shape, a.dtype) for a in mine] == [(a.shape, a.dtype) for a in theirs]
    np.testing.assert_array_equal(mine[3], theirs[3])
    for (rem, train, test, users) in (mine, theirs):
        np.testing.assert_array_equal(dense(rem), dense(X[np.setdiff1d(np.arange(300), users)]))
        np.testing.assert_array_equal(dense(train + test), dense(X[users]))
    np.testing.assert_array_equal(np.diff(mine[2].indptr), np.diff(theirs[2].indptr))


@pytest.mark.parametrize("split_type", ["all", "joined", "separated"])
@pytest.mark.parametrize("fraction", [0.1, 0.25, 0.5, 0.75])
def test_recometrics_split_types_and_rounding(split_type, fraction):
    X = graded_activity(n_users=25, n_items=30, seed=2)  # 25 users x 0.1 = 2.5 test users: 2, as Python rounds
    kw = dict(split_type=split_type, users_test_fraction=fraction, items_test_fraction=fraction, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = recometrics.split_reco_train_test(X.copy(), **kw)
        mine = gpureco.split_reco_train_test(X, **kw)
    assert len(mine) == len(theirs)
    assert [(type(a), a.shape, a.dtype) for a in mine] == [(type(a), a.shape, a.dtype) for a in theirs]
    if split_type == "all":  # every user split, no minimum applied: the same test counts
        np.testing.assert_array_equal(np.diff(mine[1].indptr), np.diff(theirs[1].indptr))
