"""gpureco.dask.evaluate_lists: lists and truth partitioned by user give the single-machine frame."""
import numpy as np
import pandas as pd
import pytest

from dask_helpers import local_client, quietly

import gpureco

dd = pytest.importorskip("dask.dataframe")
gdask = pytest.importorskip("gpureco.dask")


@pytest.fixture(scope="module")
def client():
    with local_client() as client:
        yield client


def lists(seed=0, n_users=60, n_items=30, length=6):
    """Two runs of ranked lists (some users without truth), and truth with ratings (some users
    without lists, some without a positive rating)."""
    rng = np.random.default_rng(seed)
    rows = []
    for run in ("als", "pop"):
        for user in range(n_users):
            items = rng.choice(n_items, size=rng.integers(1, length + 1), replace=False)
            rows += [(run, user, f"i{item}", rank + 1) for rank, item in enumerate(items)]
    recs = pd.DataFrame(rows, columns=["model", "user", "item", "rank"])
    truth = pd.DataFrame([(user, f"i{item}", float(rng.integers(0, 3)))
                          for user in range(5, n_users + 8) for item in rng.choice(n_items, size=3, replace=False)],
                         columns=["user", "item", "rating"])
    return recs, truth


@pytest.mark.parametrize("npartitions", [None, 1, 4])
def test_the_single_machine_frame(client, npartitions):
    recs, truth = lists()
    one = recs[recs["model"] == "als"].drop(columns="model")
    for given, kwargs in ((one, dict(include_missing=True)), (recs, dict(group_by="model"))):
        expected = quietly(gpureco.evaluate_lists, given, truth, metrics=["P", "NDCG", "RR"], k=[3, 5], **kwargs)
        got = quietly(gdask.evaluate_lists, dd.from_pandas(given, npartitions=3), dd.from_pandas(truth, npartitions=2),
                      metrics=["P", "NDCG", "RR"], k=[3, 5], npartitions=npartitions, **kwargs)
        # Dask stores the run names as Arrow strings (its dataframe.convert-string): the index dtype may differ
        pd.testing.assert_frame_equal(got, expected, check_exact=True, check_index_type=False)
        assert got.index.equals(expected.index)
        assert got.attrs == expected.attrs and got.attrs["lists_without_truth"] > 0


def test_truth_as_a_pandas_frame_and_integer_dtypes_that_differ(client):
    recs, truth = lists(seed=1)
    recs = recs[recs["model"] == "pop"].drop(columns="model").astype({"user": np.int32})
    expected = gpureco.evaluate_lists(recs, truth, metrics=["AP@4"])
    got = gdask.evaluate_lists(dd.from_pandas(recs, npartitions=2), truth, metrics=["AP@4"], npartitions=3)
    pd.testing.assert_frame_equal(got, expected, check_exact=True)


def test_user_ids_as_floats_in_one_frame_and_ints_in_the_other(client):
    """User 1 and user 1.0 are one user, as on one machine: they meet in one partition (the float ids were hashed as
    floats, the ints as int64: every list was left without its truth)."""
    recs, truth = lists(seed=2)
    recs = recs[recs["model"] == "als"].drop(columns="model")
    truth = truth.astype({"user": np.float64})
    expected = gpureco.evaluate_lists(recs, truth, metrics=["P@3", "RR@3"])
    got = gdask.evaluate_lists(dd.from_pandas(recs, npartitions=2), truth, metrics=["P@3", "RR@3"], npartitions=4)
    pd.testing.assert_frame_equal(got, expected, check_exact=True)
    assert got.attrs == expected.attrs


def test_errors(client):
    recs, truth = lists()
    with pytest.raises(ValueError, match="include_missing=True with 'group_by' is not supported on Dask"):
        gdask.evaluate_lists(dd.from_pandas(recs, npartitions=2), truth, group_by="model", include_missing=True)
    with pytest.raises(ValueError, match="ROC_AUC"):  # checked on the client, before any work
        gdask.evaluate_lists(dd.from_pandas(recs, npartitions=2), truth, metrics=["ROC_AUC"], group_by="model")
    twice = pd.concat([recs, recs.iloc[[0]]])
    with pytest.raises(ValueError, match=r"^partition \d+ \(users \d+ to \d+\): 'recs' has 1 duplicate"):
        gdask.evaluate_lists(dd.from_pandas(twice, npartitions=2), truth, group_by="model", npartitions=4)
    with pytest.raises(TypeError, match="'recs' must be a Dask or pandas DataFrame; got list"):
        gdask.evaluate_lists([1, 2], truth)


@pytest.mark.parametrize("options", [dict(convention="lenskit"), dict(convention="replay"),
                                     dict(ties="last", relevance_threshold=1.0), dict(convention="ranx")])
def test_conventions_are_the_single_machine_ones(client, options):
    recs, truth = lists()
    one = recs[recs["model"] == "als"].drop(columns="model")
    expected = quietly(gpureco.evaluate_lists, one, truth, metrics=["P", "R", "AP", "NDCG"], k=[3, 5], **options)
    got = quietly(gdask.evaluate_lists, dd.from_pandas(one, npartitions=3), truth, metrics=["P", "R", "AP", "NDCG"],
                  k=[3, 5], **options)
    pd.testing.assert_frame_equal(got, expected, check_exact=True, check_index_type=False)
    plain = quietly(gpureco.evaluate_lists, one, truth, metrics=["P", "R", "AP", "NDCG"], k=[3, 5])
    assert not plain.equals(got)  # each option set changes some number here
