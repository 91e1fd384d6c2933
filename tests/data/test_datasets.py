"""gpureco.datasets.make_interactions: determinism and the statistics its docstring states."""
import numpy as np
import pandas as pd
import pytest

from gpureco.datasets import make_interactions

START = 1_700_000_000


@pytest.fixture(scope="module")
def default():
    return make_interactions()


def test_same_arguments_same_frame_and_seed_matters():
    a = make_interactions(300, 200, 20, seed=3)
    pd.testing.assert_frame_equal(a, make_interactions(300, 200, 20, seed=3))
    assert not a.equals(make_interactions(300, 200, 20, seed=4))


def test_default_size_columns_and_dtypes(default):
    assert list(default.columns) == ["user", "item", "value", "timestamp"]
    assert [str(t) for t in default.dtypes] == ["int64", "int64", "float64", "int64"]
    assert abs(len(default) - 300_000) < 0.05 * 300_000
    assert default["user"].nunique() == 10_000
    assert default["item"].between(0, 2_999).all()


def test_counts_within_bounds_and_pairs_unique():
    df = make_interactions(500, 100, 12, min_per_user=4, seed=1)
    counts = df.groupby("user").size()
    assert len(counts) == 500 and counts.min() >= 4 and counts.max() <= 50
    assert not df.duplicated(["user", "item"]).any()


def test_timestamps_strictly_increasing_per_user_within_a_year(default):
    assert (default["user"].diff().fillna(0) >= 0).all()  # sorted by user
    same_user = default["user"].diff() == 0
    assert (default["timestamp"].diff()[same_user] > 0).all()
    assert default["timestamp"].min() >= START and default["timestamp"].max() <= START + 366 * 86_400


def test_grades_and_their_link_with_tastes(default):
    assert set(default["value"].unique()) == {1.0, 2.0, 3.0, 4.0, 5.0}
    # the grade is not independent of the item: popular-with-taste items get higher grades on average
    by_item = default.groupby("item")["value"].mean()
    assert by_item.std() > 0.1


def test_popularity_is_skewed(default):
    counts = default["item"].value_counts().to_numpy()  # descending
    counts = np.concatenate([counts, np.zeros(3_000 - counts.size)])
    assert counts[:300].sum() / counts.sum() > 0.40
    assert counts[1_500:].sum() / counts.sum() < 0.20
    flat = make_interactions(2_000, 300, 20, popularity_exponent=0.0, taste_strength=0.0, seed=1)
    flat_counts = flat["item"].value_counts().to_numpy()
    assert flat_counts[:30].sum() / flat_counts.sum() < 0.15  # no skew without popularity


@pytest.mark.parametrize("kwargs, match", [
    ({"n_users": 0}, "'n_users' must be an int in the range"),
    ({"n_items": 10, "min_per_user": 6}, "'min_per_user'"),
    ({"mean_per_user": -1}, "'mean_per_user' must be a number in \\[0, 1e300\\]; got -1"),
    ({"mean_per_user": 2}, "'mean_per_user' must be at least min_per_user"),
    ({"seed": -1}, "'seed'"),
])
def test_errors_name_the_parameter(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_interactions(**{"n_users": 10, "n_items": 50, "mean_per_user": 8, **kwargs})


def test_a_low_rank_model_beats_most_popular_at_the_default_size(default):
    import gpureco
    from gpureco.cli._demo import most_popular, pure_svd
    train, test = gpureco.split_last_per_user(default, fraction=0.2)
    X_train, X_test, _ = gpureco.to_csr(train, test)
    A, B = pure_svd(X_train, 16, 0)
    svd = gpureco.calc_reco_metrics(X_train, X_test, A, B, k=10, ndcg=True)["NDCG@10"].mean()
    pop = gpureco.calc_reco_metrics(X_train, X_test, None, None, item_biases=most_popular(X_train), k=10)["NDCG@10"]
    assert svd > pop.mean() + 0.02
