"""convention="recbole" against RecBole's own hand-computed expectations.

RecBole is not installed (it pulls in torch, ray, ...): its unit test of the top-K metrics is
rebuilt here as data. The source: RUCAIBox/RecBole, tests/metrics/test_topk_metrics.py at tag
v1.2.1 (commit 9a6f63d8d4a5b989fe27955a833f813a6d86041e; unchanged on master up to 7b02be5e,
2025-02-24), which checks recbole/evaluator/metrics.py's `metric_info` of Hit, MRR, MAP, Recall,
NDCG and Precision. Its input, per user, is whether each of the top 3 items is relevant
(`pos_idx`) and the number of relevant items (`pos_len`); its expectations are each metric at
K = 1, 2, 3 (columns). Here each user's relevant items beyond the top 3 sit at ranks 5, 6, ...
(outside every cut-off), and the scores are tie-free. gpureco gives RecBole's numbers bit for
bit (its test compares with ==).
"""
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

import gpureco

log2 = np.log2

# RecBole's pos_idx and pos_len
TOP_3_HITS = np.array([[0, 0, 0], [1, 1, 1], [1, 0, 1], [0, 0, 1]])
N_RELEVANT = np.array([1, 3, 4, 2])

# RecBole's expected values, as written in its test (rows: users; columns: K = 1, 2, 3)
EXPECTED = {
    "Hit": [[0, 0, 0], [1, 1, 1], [1, 1, 1], [0, 0, 1]],
    "NDCG": [[0, 0, 0], [1, 1, 1],
             [1, (1 / log2(2) / (1 / log2(2) + 1 / log2(3))),
              ((1 / log2(2) + 1 / log2(4)) / (1 / log2(2) + 1 / log2(3) + 1 / log2(4)))],
             [0, 0, (1 / log2(4) / (1 / log2(2) + 1 / log2(3)))]],
    "RR": [[0, 0, 0], [1, 1, 1], [1, 1, 1], [0, 0, 1 / 3]],  # RecBole's MRR
    "AP": [[0, 0, 0], [1, 1, 1], [1, (1 / 2), (1 / 3) * ((1 / 1) + (2 / 3))], [0, 0, (1 / 3) * (1 / 2)]],  # its MAP
    "R": [[0, 0, 0], [1 / 3, 2 / 3, 3 / 3], [1 / 4, 1 / 4, 2 / 4], [0, 0, 1 / 2]],
    "P": [[0, 0, 0], [1 / 1, 2 / 2, 3 / 3], [1 / 1, 1 / 2, 2 / 3], [0, 0, 1 / 3]],
}
N_ITEMS = 12


def relevant_ranks():
    """Each user's relevant items as ranks (1-based): the hits of the top 3, then ranks 5, 6, ..."""
    ranks = []
    for hits, n in zip(TOP_3_HITS, N_RELEVANT):
        top = [i + 1 for i in np.flatnonzero(hits)]
        ranks.append(top + list(range(5, 5 + n - len(top))))
    return ranks


def as_inputs():
    """(scores, X_test): item i has the score N_ITEMS - i in every row (item 0 ranks first)."""
    scores = np.tile(np.arange(N_ITEMS, 0, -1, dtype=np.float64), (len(N_RELEVANT), 1))
    rows = [u for u, ranks in enumerate(relevant_ranks()) for _ in ranks]
    items = [r - 1 for ranks in relevant_ranks() for r in ranks]
    X_test = sp.csr_array((np.ones(len(rows)), (rows, items)), shape=(len(N_RELEVANT), N_ITEMS))
    return scores, X_test


def test_the_data_is_recboles():
    scores, X_test = as_inputs()
    np.testing.assert_array_equal(np.diff(X_test.indptr), N_RELEVANT)
    top_3 = np.argsort(-scores, axis=1, kind="stable")[:, :3]
    np.testing.assert_array_equal(np.take_along_axis(X_test.toarray(), top_3, axis=1), TOP_3_HITS)


@pytest.mark.parametrize("metric", list(EXPECTED))
def test_evaluate_gives_recboles_numbers(metric):
    scores, X_test = as_inputs()
    got = gpureco.evaluate(scores, X_test, metrics=metric, k=[1, 2, 3], device="cpu", convention="recbole")
    np.testing.assert_array_equal(got.to_numpy(), np.array(EXPECTED[metric], dtype=np.float64))


@pytest.mark.parametrize("metric", list(EXPECTED))
def test_evaluate_lists_gives_recboles_numbers(metric):
    """The same lists given as top-3 lists (RecBole's rec.topk holds only the top max(K))."""
    ranks = relevant_ranks()
    recs = pd.DataFrame({"user": np.repeat(np.arange(4), 3), "item": np.tile(np.arange(3), 4),
                         "rank": np.tile(np.arange(1, 4), 4)})
    truth = pd.DataFrame({"user": [u for u, r in enumerate(ranks) for _ in r],
                          "item": [i - 1 for r in ranks for i in r]})
    got = gpureco.evaluate_lists(recs, truth, metrics=metric, k=[1, 2, 3], include_missing=True,
                                 convention="recbole")
    np.testing.assert_array_equal(got.to_numpy(), np.array(EXPECTED[metric], dtype=np.float64))


def test_recbole_differs_from_gpureco_where_recbole_says():
    """MAP divides by min(|T|, K) (user 2 at K=3: 3, not 4) and NDCG has binary gains over the
    ideal min(|T|, K) positions; P, R, Hit and RR are gpureco's."""
    scores, X_test = as_inputs()
    X_graded = X_test.copy()
    X_graded.data = np.arange(1.0, X_graded.nnz + 1)  # graded values: RecBole reads only "relevant"
    metrics = ["P@3", "R@3", "AP@3", "NDCG@3", "Hit@3", "RR@3"]
    recbole = gpureco.evaluate(scores, X_graded, metrics=metrics, device="cpu", convention="recbole")
    ours = gpureco.evaluate(scores, X_graded, metrics=metrics, device="cpu")
    pd.testing.assert_frame_equal(recbole[["P@3", "R@3", "Hit@3", "RR@3"]], ours[["P@3", "R@3", "Hit@3", "RR@3"]])
    assert recbole.loc[2, "AP@3"] == pytest.approx((1 + 2 / 3) / 3)
    assert ours.loc[2, "AP@3"] == pytest.approx((1 + 2 / 3) / 4)
    np.testing.assert_allclose(recbole["NDCG@3"], np.array(EXPECTED["NDCG"])[:, 2], rtol=1e-15)
    assert not np.allclose(ours["NDCG@3"], recbole["NDCG@3"])
