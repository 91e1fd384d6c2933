"""evaluate_lists' linear paths (lists numbered in one pass when the users come in order, given
ranks checked without a sort) give the numbers of the general ones (grouped by pandas, ranked
by sorting)."""
import numpy as np
import pandas as pd
import pytest

import gpureco

METRICS = ["P", "TP", "R", "AP", "TAP", "NDCG", "Hit", "RR"]


def _lists(rng, n_lists=300, length=8, n_items=60):
    users = np.repeat(rng.permutation(n_lists * 3)[:n_lists], length)
    items = np.concatenate([rng.permutation(n_items)[:length] for _ in range(n_lists)])
    recs = pd.DataFrame({"user": users, "item": items, "rank": np.tile(np.arange(1, length + 1), n_lists)})
    truth = pd.DataFrame({"user": rng.choice(users, 900), "item": rng.integers(0, n_items, 900),
                          "rating": rng.integers(1, 6, 900)}).drop_duplicates(["user", "item"])
    return recs, truth


@pytest.mark.parametrize("include_missing", [False, True])
def test_users_in_order_or_not_ranks_or_scores(rng, include_missing):
    recs, truth = _lists(rng)
    kw = dict(metrics=METRICS, k=[3, 8], include_missing=include_missing)
    want = gpureco.evaluate_lists(recs.sample(frac=1.0, random_state=1), truth, **kw)  # grouped by pandas
    for variant in (recs.sort_values(["user", "rank"]),  # users in order: numbered in one pass
                    recs.sort_values(["user", "rank"], ascending=[True, False]),
                    recs.sort_values("user").assign(rank=lambda f: f["rank"].astype(float)),
                    recs.sort_values("user").assign(rank=lambda f: f["rank"].astype(np.int32)),
                    recs.sort_values("user").assign(score=lambda f: -f.pop("rank") / 3.0)):
        pd.testing.assert_frame_equal(gpureco.evaluate_lists(variant, truth, **kw), want)


@pytest.mark.parametrize("ranks, message", [
    ([1, 2, 2], r"ranks \[1, 2, 2\]"), ([1, 2, 4], r"ranks \[1, 2, 4\]"), ([0, 1, 2], r"ranks \[0, 1, 2\]"),
    ([1, 2, 2.5], r"ranks \[1, 2, 2.5\]"), ([1, 3, 2], None)])
def test_given_ranks_must_be_one_to_n(ranks, message):
    recs = pd.DataFrame({"user": [5, 5, 5, 7], "item": [1, 2, 3, 1], "rank": ranks + [1]})
    truth = pd.DataFrame({"user": [5, 7], "item": [3, 1]})
    if message is None:
        out = gpureco.evaluate_lists(recs, truth, metrics=["RR@3"])
        assert out["RR@3"].tolist() == [0.5, 1.0]
    else:
        with pytest.raises(ValueError, match=r"the list of user 5 has " + message + r" \(1 lists are wrong\)"):
            gpureco.evaluate_lists(recs, truth, metrics=["RR@3"])
