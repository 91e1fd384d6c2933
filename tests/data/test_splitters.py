"""The splitters' guarantees: disjoint and complete, proportions, minimums, time order, seeds."""
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

import gpureco
from gpureco.datasets import make_interactions


@pytest.fixture(scope="module")
def frame():
    df = make_interactions(400, 150, 12, min_per_user=2, seed=2)
    # string ids and a shuffled row order: nothing may depend on integer ids or sorted rows
    df = df.assign(user="u" + df["user"].astype(str), item="i" + df["item"].astype(str))
    return df.sample(frac=1.0, random_state=0)


@pytest.fixture(scope="module")
def matrix(frame):
    X, _ = gpureco.to_csr(frame)
    return X


def pairs(df):
    return set(zip(df["user"], df["item"]))


def assert_partition(data, train, test):
    """Each interaction is on exactly one side, ids and values untouched."""
    if isinstance(data, pd.DataFrame):
        assert not set(train.index) & set(test.index)
        pd.testing.assert_frame_equal(pd.concat([train, test]).loc[data.index], data)
    else:
        assert train.shape == test.shape == data.shape
        assert train.multiply(test).nnz == 0
        assert abs(train + test - data).max() == 0


def per_user(df):
    return df.groupby("user").size()


@pytest.mark.parametrize("kind", ["frame", "matrix"])
def test_leave_k_out(kind, frame, matrix):
    data = frame if kind == "frame" else matrix
    train, test = gpureco.split_leave_k_out(data, k=2, min_train=3, seed=7)
    assert_partition(data, train, test)
    if kind == "matrix":
        counts, n_test = np.diff(data.indptr), np.diff(test.indptr)
        n_train = np.diff(train.indptr)
    else:
        counts = per_user(frame)
        n_test = per_user(test).reindex(counts.index, fill_value=0).to_numpy()
        n_train = per_user(train).reindex(counts.index, fill_value=0).to_numpy()
        counts = counts.to_numpy()
    np.testing.assert_array_equal(n_test, np.where(counts >= 5, 2, 0))
    assert (n_train[n_test > 0] >= 3).all()
    again = gpureco.split_leave_k_out(data, k=2, min_train=3, seed=7)
    other = gpureco.split_leave_k_out(data, k=2, min_train=3, seed=8)
    if kind == "frame":
        assert test.equals(again[1]) and not test.equals(other[1])
    else:
        assert abs(test - again[1]).max() == 0 and abs(test - other[1]).max() > 0


def test_last_n_per_user_respects_time(frame):
    train, test = gpureco.split_last_per_user(frame, n=2, min_train=2)
    assert_partition(frame, train, test)
    counts = per_user(frame)
    expected = pd.Series(np.where(counts >= 4, 2, 0), index=counts.index)
    pd.testing.assert_series_equal(per_user(test).reindex(counts.index, fill_value=0), expected, check_names=False)
    latest_train = train.groupby("user")["timestamp"].max()
    earliest_test = test.groupby("user")["timestamp"].min()
    assert (earliest_test > latest_train.reindex(earliest_test.index)).all()


def test_last_fraction_per_user(frame):
    train, test = gpureco.split_last_per_user(frame, fraction=0.25, min_train=1)
    assert_partition(frame, train, test)
    counts = per_user(frame)
    wanted = np.clip(np.floor(counts * 0.25 + 0.5), 1, counts - 1)
    pd.testing.assert_series_equal(per_user(test).reindex(counts.index, fill_value=0),
                                   wanted.astype(np.int64), check_names=False)
    assert (per_user(train).reindex(counts.index) >= 1).all()


def test_last_per_user_ties_follow_row_order():
    df = pd.DataFrame({"user": [1, 1, 1], "item": ["a", "b", "c"], "timestamp": [5, 5, 1]})
    train, test = gpureco.split_last_per_user(df, n=1)
    assert list(test["item"]) == ["b"] and list(train["item"]) == ["a", "c"]


def test_time_cutoff_value_and_fraction(frame):
    cutoff = int(frame["timestamp"].quantile(0.8))
    train, test = gpureco.split_time_cutoff(frame, cutoff)
    assert_partition(frame, train, test)
    assert train["timestamp"].max() < cutoff <= test["timestamp"].min()
    train, test = gpureco.split_time_cutoff(frame, fraction=0.2)
    assert_partition(frame, train, test)
    assert train["timestamp"].max() < test["timestamp"].min()
    assert abs(len(test) - 0.2 * len(frame)) <= 1  # the timestamps are distinct enough here


def test_time_cutoff_fraction_is_not_fooled_by_rounding():
    data = pd.DataFrame({"user": np.arange(100) % 7, "item": np.arange(100), "timestamp": np.arange(100)})
    for fraction, want in ((0.42, 42), (0.07, 7), (0.29, 29)):  # 100 * (1 - 0.42) is 58.000...01 in floats
        train, test = gpureco.split_time_cutoff(data, fraction=fraction)
        assert len(test) == want


def test_time_cutoff_with_datetimes():
    df = pd.DataFrame({"user": [1, 1, 2, 2], "item": [1, 2, 1, 3],
                       "timestamp": pd.to_datetime(["2024-01-01", "2024-03-01", "2024-02-01", "2024-04-01"])})
    train, test = gpureco.split_time_cutoff(df, pd.Timestamp("2024-02-15"))
    assert list(test.index) == [1, 3]
    with pytest.raises(TypeError, match="'cutoff' must be comparable with the 'timestamp' column"):
        gpureco.split_time_cutoff(df, "not a time at all")


@pytest.mark.parametrize("kind", ["frame", "matrix"])
def test_k_fold_users(kind, frame, matrix):
    data = frame if kind == "frame" else matrix
    folds = gpureco.split_k_fold_users(data, n_folds=4, items_test_fraction=0.3, min_train=1, seed=5)
    assert len(folds) == 4
    test_users = []
    for train, test in folds:
        assert_partition(data, train, test)
        if kind == "frame":
            users = set(test["user"])
            counts = per_user(frame)[sorted(users)]
            n_test = per_user(test)[sorted(users)]
        else:
            n_test_all = np.diff(test.indptr)
            users = set(np.flatnonzero(n_test_all))
            counts, n_test = np.diff(data.indptr)[sorted(users)], n_test_all[sorted(users)]
        expected = np.clip(np.floor(np.asarray(counts) * 0.3 + 0.5), 1, np.asarray(counts) - 1)
        np.testing.assert_array_equal(np.asarray(n_test), expected)
        test_users.append(users)
    sizes = [len(u) for u in test_users]
    assert max(sizes) - min(sizes) <= 1
    assert sum(sizes) == len(set().union(*test_users))  # each user tests in one fold only
    assert len(set().union(*test_users)) == 400  # every user has >= 2 interactions here
    again = gpureco.split_k_fold_users(data, n_folds=4, items_test_fraction=0.3, min_train=1, seed=5)
    if kind == "frame":
        assert all(a[1].equals(b[1]) for a, b in zip(folds, again))


def test_to_csr_shares_one_mapping_and_from_csr_inverts(frame):
    train, test = gpureco.split_leave_k_out(frame, seed=1)
    X_train, X_test, ids = gpureco.to_csr(train, test)
    assert X_train.shape == X_test.shape == (400, len(ids.items))
    assert ids.users.is_monotonic_increasing and ids.users.is_unique
    back = gpureco.from_csr(X_test, ids)
    assert pairs(back) == pairs(test)
    assert gpureco.to_csr(test, ids=ids)[0].shape == X_test.shape


@pytest.mark.parametrize("call, error, match", [
    (lambda f: gpureco.split_leave_k_out(f, k=0), ValueError, "'k' must be an int in the range"),
    (lambda f: gpureco.split_last_per_user(f), ValueError, "exactly one of 'n' and 'fraction'"),
    (lambda f: gpureco.split_last_per_user(f, n=1, fraction=0.5), ValueError, "exactly one of 'n' and 'fraction'"),
    (lambda f: gpureco.split_last_per_user(f, fraction=1.5), ValueError, "'fraction' must be a float"),
    (lambda f: gpureco.split_time_cutoff(f), ValueError, "exactly one of 'cutoff' and 'fraction'"),
    (lambda f: gpureco.split_k_fold_users(f, n_folds=1), ValueError, "'n_folds' must be an int"),
    (lambda f: gpureco.split_k_fold_users(f.head(3), n_folds=5), ValueError, "'n_folds' must be at most"),
    (lambda f: gpureco.split_leave_k_out(f.drop(columns="item")), ValueError, r"must have the column\(s\) 'item'"),
    (lambda f: gpureco.split_last_per_user(f.drop(columns="timestamp"), n=1), ValueError, "'timestamp'"),
    (lambda f: gpureco.split_last_per_user(sp.csr_array(np.eye(3)), n=1), TypeError, "a sparse matrix holds no time"),
    (lambda f: gpureco.split_leave_k_out(pd.concat([f, f.head(1)])), ValueError, "each \\(user, item\\) pair once"),
    # a column of numbers and strings sorts by type, not time: refused, as is a cut-off per row
    (lambda f: gpureco.split_last_per_user(f.assign(timestamp=[5, "3"] + [4] * (len(f) - 2)), n=1), TypeError,
     "'data' column 'timestamp' must hold times or numbers of one type, which sort in time; got values of types "
     "int, str"),
    (lambda f: gpureco.split_time_cutoff(f.assign(timestamp=[pd.Timestamp(2020, 1, 1), "2020-01-02"] * (len(f) // 2)
                                                  + [pd.Timestamp(2020, 1, 3)] * (len(f) % 2)), fraction=0.3),
     TypeError, "'timestamp' must hold times or numbers of one type, which sort in time; got values of types "
     "Timestamp, str"),
    (lambda f: gpureco.split_time_cutoff(f, cutoff=np.array([15, 16])), TypeError,
     r"'cutoff' must be one time or number, for every user; got ndarray of shape \(2,\)"),
    (lambda f: gpureco.split_time_cutoff(f, cutoff=f["timestamp"]), TypeError,
     r"'cutoff' must be one time or number, for every user; got Series of shape"),
])
def test_errors(call, error, match, frame):
    with pytest.raises(error, match=match):
        call(frame)


def test_to_csr_keeps_ids_that_pandas_would_merge():
    """int64 ids in one frame and uint64 in another: pandas' concat makes them float64, in which
    2**60 and 2**60 + 1 are one number; they stay two users (and a float id equal to an int id is it)."""
    a = pd.DataFrame({"user": np.array([2**60, 2**60 + 1], np.int64), "item": [0, 1]})
    b = pd.DataFrame({"user": np.array([2**60 + 1], np.uint64), "item": [2]})
    X_a, X_b, ids = gpureco.to_csr(a, b)
    assert list(ids.users) == [2**60, 2**60 + 1]
    np.testing.assert_array_equal(X_a.toarray(), [[1, 0, 0], [0, 1, 0]])
    np.testing.assert_array_equal(X_b.toarray(), [[0, 0, 0], [0, 0, 1]])
    nullable = (a.assign(user=a["user"].astype("Int64")), b.assign(user=b["user"].astype("UInt64")))
    assert list(gpureco.to_csr(*nullable)[2].users) == [2**60, 2**60 + 1]  # (pandas: Float64)
    c = pd.DataFrame({"user": np.array([5, 7], np.int32), "item": [0, 1]})  # a lossless mix keeps its dtype
    assert gpureco.to_csr(c, a.assign(user=[7, 9]))[2].users.dtype == np.int64


def test_missing_id_error_names_the_row():
    df = pd.DataFrame({"user": [1, None, 2], "item": [1, 2, 3]})
    with pytest.raises(ValueError, match="column 'user' has 1 missing values, the first at row 1"):
        gpureco.split_leave_k_out(df)
    with pytest.raises(ValueError, match="1 missing user ids, the first at row 1"):
        gpureco.to_csr(df)


@pytest.mark.parametrize("k", [10**6, 10**30, 2**80])
def test_a_k_past_every_users_rows_keeps_them_in_training(frame, matrix, k):
    """k (or n) beyond any user's rows: every row in training, as for k = their most rows + 1 (10**30 overflowed
    NumPy's int64 in the subtraction from each user's count)."""
    most = int(per_user(frame).max())
    for data in (frame, matrix):
        train, test = gpureco.split_leave_k_out(data, k)
        expected_train, _ = gpureco.split_leave_k_out(data, most + 1)
        assert_partition(data, train, test)
        assert (len(test) if isinstance(data, pd.DataFrame) else test.nnz) == 0
        if isinstance(data, pd.DataFrame):
            pd.testing.assert_frame_equal(train, expected_train)
    train, test = gpureco.split_last_per_user(frame, k, min_train=0)  # no user has k rows to give
    assert len(train) == len(frame) and len(test) == 0


def test_time_cutoff_of_no_rows_by_fraction(frame):
    train, test = gpureco.split_time_cutoff(frame.iloc[:0], fraction=0.3)
    assert len(train) == len(test) == 0 and list(train.columns) == list(frame.columns)
