"""gpureco.dask.calc_reco_metrics, evaluate and top_k on a LocalCluster: the single-machine numbers bit
for bit, for any partitioning, from client-side matrices, Dask arrays and partitioned Parquet."""
import math
import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from dask_helpers import local_client, problem, quietly

import gpureco

dd = pytest.importorskip("dask.dataframe")
da = pytest.importorskip("dask.array")
gdask = pytest.importorskip("gpureco.dask")


@pytest.fixture(scope="module")
def client():
    with local_client() as client:
        yield client


@pytest.fixture(scope="module")
def data():
    return problem()


def interaction_frames(X, path, n_files):
    """X's entries as user,item,value Parquet files in `path`, read back as a Dask DataFrame."""
    frame = gpureco.from_csr(X).sample(frac=1, random_state=0)  # users in no order, across the files
    path.mkdir()
    for i, rows in enumerate(np.array_split(np.arange(len(frame)), n_files)):
        frame.iloc[rows].to_parquet(path / f"part-{i}.parquet", index=False)
    return dd.read_parquet(str(path))


@pytest.mark.parametrize("partition_size", [None, 1, 7, 120, 1000])
def test_calc_reco_metrics_is_the_single_machine_run(client, data, partition_size):
    X_train, X_test, A, B, biases = data
    options = dict(k=4, item_biases=biases, all_metrics=True, cumulative=True, gain="exponential")
    expected = quietly(gpureco.calc_reco_metrics, X_train, X_test, A, B, **options)
    got = quietly(gdask.calc_reco_metrics, X_train, X_test, A, B, partition_size=partition_size, **options)
    pd.testing.assert_frame_equal(got, expected, check_exact=True)
    assert got.attrs["nan_reasons"] == expected.attrs["nan_reasons"] != {}


def test_one_worker_and_float32_factors(data):
    X_train, X_test, A, B, _ = data
    A, B = A.astype(np.float32) / 3, B.astype(np.float32) / 7
    expected = quietly(gpureco.calc_reco_metrics, X_train, X_test, A, B, k=5, roc_auc=True)
    with local_client(n_workers=1, processes=False) as one:
        got = quietly(gdask.calc_reco_metrics, X_train, X_test, A, B, k=5, roc_auc=True, client=one)
    pd.testing.assert_frame_equal(got, expected, check_exact=True)


def test_dask_array_factors_and_dask_output(client, data):
    X_train, X_test, A, B, _ = data
    expected = quietly(gpureco.calc_reco_metrics, X_train, X_test, A, B, k=3, ndcg=True, recall=True)
    got = quietly(gdask.calc_reco_metrics, X_train, X_test, da.from_array(A, chunks=(50, 3)), B, k=3, recall=True,
                  output="dask")
    assert isinstance(got, dd.DataFrame)
    assert got.divisions == (0, 50, 100, 119)  # the partitions follow A's chunks
    pd.testing.assert_frame_equal(got.compute(), expected, check_exact=True, check_index_type=False)


def test_interactions_from_partitioned_parquet(client, data, tmp_path):
    X_train, X_test, A, B, _ = data
    train = interaction_frames(X_train, tmp_path / "train", 3)
    test = interaction_frames(X_test, tmp_path / "test", 4)
    expected = quietly(gpureco.calc_reco_metrics, X_train, X_test, A, B, k=5, all_metrics=True)
    got = quietly(gdask.calc_reco_metrics, train, test, da.from_array(A, chunks=(33, 3)), B, k=5, all_metrics=True)
    pd.testing.assert_frame_equal(got, expected, check_exact=True)
    # A with an empty row chunk: no partition of its own (a repeated edge was no division of the frames' set_index)
    chunked = da.from_array(A, chunks=((40, 0, 50, 30), 3))
    got = quietly(gdask.calc_reco_metrics, train, test, chunked, B, k=5, all_metrics=True)
    pd.testing.assert_frame_equal(got, expected, check_exact=True)
    # no matrix says how many users there are, without A
    got = quietly(gdask.calc_reco_metrics, train, test, None, None, k=5, item_biases=np.arange(40.0), n_users=120)
    pd.testing.assert_frame_equal(got, quietly(gpureco.calc_reco_metrics, X_train, X_test, None, None, k=5,
                                               item_biases=np.arange(40.0)), check_exact=True)
    # a score function with frames: the numbers of users and items are given
    got = quietly(gdask.evaluate, lambda users: A[users] @ B.T, test, train, metrics=["NDCG@4"], n_users=120, n_items=40)
    pd.testing.assert_frame_equal(got, quietly(gpureco.evaluate, A @ B.T, X_test, X_train, metrics=["NDCG@4"]),
                                  check_exact=True)
    for got, expected in zip(gdask.top_k(A, B, 4, train), gpureco.top_k(A, B, 4, X_train)):
        np.testing.assert_array_equal(got, expected)


def test_one_warning_for_the_whole_run_at_the_callers_line(client, data):
    X_train, X_test, A, B, _ = data
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = gdask.calc_reco_metrics(X_train, X_test, A, B, partition_size=10)
    nan_warnings = [w for w in caught if "have every metric NaN" in str(w.message)]
    assert len(nan_warnings) == 1
    assert nan_warnings[0].filename == __file__
    assert f"{got.attrs['nan_reasons']['rule 1']} of 120 users" in str(nan_warnings[0].message)


def test_evaluate_with_a_score_function_gets_global_user_ids(client, data):
    X_train, X_test, A, B, biases = data
    asked = []

    def score_fn(users):
        return A[users] @ B.T + biases

    expected = quietly(gpureco.evaluate, lambda users: asked.append(users) or score_fn(users), X_test, X_train,
                       metrics=["NDCG@5", "ROC_AUC", "RR@3"])
    got = quietly(gdask.evaluate, score_fn, X_test, X_train, metrics=["NDCG@5", "ROC_AUC", "RR@3"], partition_size=25)
    pd.testing.assert_frame_equal(got, expected, check_exact=True)
    assert np.concatenate(asked).max() > 100  # the last partition's users were asked by their global ids


def test_evaluate_with_score_matrices(client, data):
    X_train, X_test, A, B, _ = data
    scores = A @ B.T
    expected = quietly(gpureco.evaluate, scores, X_test, X_train, metrics=["P", "AP"], k=[2, 5])
    for given in (scores, da.from_array(scores, chunks=(45, 40))):
        got = quietly(gdask.evaluate, given, X_test, X_train, metrics=["P", "AP"], k=[2, 5])
        pd.testing.assert_frame_equal(got, expected, check_exact=True)


def test_top_k_is_the_single_machine_lists(client, data):
    X_train, _, A, B, biases = data
    expected = gpureco.top_k(A, B, 6, X_train, biases)
    for got in (gdask.top_k(A, B, 6, X_train, biases, partition_size=17),
                [x.compute() for x in gdask.top_k(da.from_array(A, chunks=(64, 3)), B, 6, X_train, biases,
                                                  output="dask")]):
        for g, e in zip(got, expected):
            np.testing.assert_array_equal(g, e)
    # a non-personalised model: the users are the rows of X_train
    items, _ = gdask.top_k(None, None, 3, X_train, biases, partition_size=50)
    np.testing.assert_array_equal(items, gpureco.top_k(None, None, 3, X_train, biases)[0])


def test_summarize_and_the_evaluators_summary(client, data):
    X_train, X_test, A, B, _ = data
    scores = A @ B.T / 3
    per_user = quietly(gdask.evaluate, scores, X_test, X_train, metrics=["NDCG@5", "P@3"], output="dask",
                       partition_size=13)
    expected = gpureco.summarize(quietly(gpureco.evaluate, scores, X_test, X_train, metrics=["NDCG@5", "P@3"]))
    pd.testing.assert_frame_equal(gdask.summarize(per_user), expected, check_exact=True)
    evaluator = gpureco.Evaluator(X_test, X_train, metrics=["NDCG@5", "P@3"], device="cpu")
    evaluator(scores)
    assert gdask.summary(per_user, counts=True) == evaluator.summary(counts=True)


def test_summary_merges_exactly():
    """Values whose float sum depends on the order and the grouping: every partitioning gives the
    correctly rounded sum over the count, as the Evaluator does (math.fsum)."""
    values = np.array([1e16, 1.0, -1e16, 1.0, 0.1, 0.2, 0.3, np.nan] * 50)
    kept = values[~np.isnan(values)]
    assert sum(kept.tolist()) != math.fsum(kept.tolist())  # a plain float sum loses the 1.0s next to 1e16
    frame = pd.DataFrame({"x": values, "y": np.arange(400.0)})
    for npartitions in (1, 3, 8):
        got = gdask.summary(dd.from_pandas(frame, npartitions=npartitions), counts=True)
        assert got == {"x": math.fsum(kept.tolist()) / 350, "y": 199.5, "users": 400.0, "nan_users": 50.0,
                       "n_x": 350.0, "n_y": 400.0}


def test_the_partition_that_fails_is_named(client, data):
    X_train, X_test, A, B, _ = data
    test = gpureco.from_csr(X_test)
    test.loc[test.index[-1], "user"] = 500  # beyond the 120 users: lands in the last partition
    with pytest.raises(ValueError, match=r"partition 3 \(users 90 to 119\): 'X_test' has 1 user indices outside "
                                         r"\[90, 119\], for example 500"):
        quietly(gdask.calc_reco_metrics, X_train, dd.from_pandas(test, npartitions=2), A, B, partition_size=30)
    overlap = X_test.tolil()
    overlap[64, X_train[[64]].indices[0]] = 1.0  # also a training item of user 64
    with pytest.raises(ValueError, match=r"partition 2 \(users 60 to 89\): 'X_test' and 'X_train' share 1"):
        quietly(gdask.calc_reco_metrics, X_train, sp.csr_array(overlap), A, B, partition_size=30)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(k=0), ValueError, "'k'"),
    (dict(break_ties_with_noise=True), ValueError, "break_ties_with_noise=True is not supported on Dask"),
    (dict(as_df=False), TypeError, "no option 'as_df'"),
    (dict(output="numpy"), ValueError, "'output'"),
    (dict(partition_size=0), ValueError, "'partition_size' must be an int >= 1"),
    (dict(n_users=7), ValueError, "the same number of users"),
])
def test_errors_before_any_work(client, data, kwargs, error, message):
    X_train, X_test, A, B, _ = data
    with pytest.raises(error, match=message) as raised:
        gdask.calc_reco_metrics(X_train, X_test, A, B, **kwargs)
    assert not str(raised.value).startswith("partition ")  # checked on the client, before any partition ran


def test_errors_of_the_other_functions(client, data):
    X_train, X_test, A, B, _ = data
    with pytest.raises(ValueError, match="number of items is unknown: pass 'n_items'"):
        gdask.evaluate(lambda users: None, dd.from_pandas(gpureco.from_csr(X_test), npartitions=1), n_users=120)
    with pytest.raises(ValueError, match="number of users is unknown: every user-side input is a Dask DataFrame; pass 'n_users'"):
        gdask.calc_reco_metrics(None, dd.from_pandas(gpureco.from_csr(X_test), npartitions=1), None, B)
    with pytest.raises(ValueError, match=r"'output' must be one of \['numpy', 'dask'\]|'output'"):
        gdask.top_k(A, B, 3, output="pandas")
    with pytest.raises(TypeError, match="'client' must be a distributed.Client"):
        gdask.calc_reco_metrics(X_train, X_test, A, B, client="tcp://localhost:8786")


def test_user_ids_index_the_pandas_output(client, data):
    X_train, X_test, A, B, _ = data
    ids = [f"u{i}" for i in range(120)]
    expected = quietly(gpureco.calc_reco_metrics, X_train, X_test, A, B, k=3, user_ids=ids)
    got = quietly(gdask.calc_reco_metrics, X_train, X_test, A, B, k=3, user_ids=ids, partition_size=50)
    pd.testing.assert_frame_equal(got, expected, check_exact=True)
    assert got.index.name == "user" and got.index[-1] == "u119"
    with pytest.raises(ValueError, match="'user_ids' needs output='pandas'"):
        gdask.evaluate(A @ B.T, X_test, user_ids=ids, output="dask")
    with pytest.raises(ValueError, match="'user_ids' must hold one id per row"):
        gdask.evaluate(A @ B.T, X_test, user_ids=ids[:5])
    with pytest.raises(TypeError, match="gpureco.dask.top_k has no option 'user_ids'"):
        gdask.top_k(A, B, 3, user_ids=ids)
