"""Each convention of docs/peers.md against the peer library itself (skipped where it is not
installed; the hand-worked values of tests/test_reference.py always run)."""
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import gpureco


def problem(seed, n_users=25, n_items=30):
    """Graded test items (floats: ranx truncates them), distinct scores (no tie: a peer's tie
    order is its own), no training items (every item is in the pool)."""
    rng = np.random.default_rng(seed)
    X_test = np.where(rng.random((n_users, n_items)) < 0.15, rng.integers(1, 4, (n_users, n_items)) + 0.5, 0.0)
    X_test[np.arange(n_users), rng.integers(0, n_items, n_users)] = 2.0
    X_test[0, :4] = [0.5, 1.0, 0.0, 0.0]  # 0.5 is below ranx's relevance 1
    scores = rng.permutation(n_users * n_items).reshape(n_users, n_items) / 7.0
    return X_test, scores


def ours(scores, X_test, metrics, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return gpureco.evaluate(scores, sp.csr_array(X_test), metrics=metrics, device="cpu", output="numpy",
                                min_items_pool=0, **kw)


@pytest.mark.parametrize("seed", range(3))
def test_ranx(seed):
    ranx = pytest.importorskip("ranx")
    X_test, scores = problem(seed)
    n_users, n_items = X_test.shape
    # every item judged (value 0: judged non-relevant), so that bpref's negatives are the pool's
    qrels = ranx.Qrels({str(u): {f"{i:03d}": float(X_test[u, i]) for i in range(n_items)} for u in range(n_users)})
    run = ranx.Run({str(u): {f"{i:03d}": float(scores[u, i]) for i in range(n_items)} for u in range(n_users)})
    names = {"precision@5": "P@5", "recall@5": "R@5", "map@5": "AP@5", "ndcg@5": "NDCG@5", "dcg@5": "DCG@5",
             "f1@5": "F1@5", "mrr@5": "RR@5", "hit_rate@5": "Hit@5", "r-precision": "RPrec", "bpref": "bpref",
             "rbp.8": f"RBP@{n_items}"}
    theirs = ranx.evaluate(qrels, run, list(names), return_mean=False)
    got = ours(scores, X_test, list(names.values()), convention="ranx", persistence=0.8)
    users = [int(q) for q in qrels.get_query_ids()]
    for metric, column in names.items():
        np.testing.assert_allclose(got[column][users], theirs[metric], rtol=1e-12, atol=1e-15, err_msg=metric)


@pytest.mark.parametrize("seed", range(3))
def test_sklearn(seed):
    metrics = pytest.importorskip("sklearn.metrics")
    X_test, scores = problem(seed)
    got = ours(scores, X_test, ["NDCG@5", "NDCG@30", "ROC_AUC", "PR_AUC"], convention="sklearn")
    for u in range(X_test.shape[0]):
        relevant = X_test[u] > 0
        for k in (5, 30):
            want = metrics.ndcg_score(X_test[u][None], scores[u][None], k=k)
            assert got[f"NDCG@{k}"][u] == pytest.approx(want, rel=1e-12)
        assert got["ROC_AUC"][u] == pytest.approx(metrics.roc_auc_score(relevant, scores[u]), rel=1e-12)
        assert got["PR_AUC"][u] == pytest.approx(metrics.average_precision_score(relevant, scores[u]), rel=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_torchmetrics(seed):
    torch = pytest.importorskip("torch")
    F = pytest.importorskip("torchmetrics.functional.retrieval")
    X_test, scores = problem(seed)
    got = ours(scores, X_test, ["P@5", "R@5", "AP@5", "NDCG@5", "RR@5", "Hit@5"], convention="torchmetrics")
    functions = {"P@5": F.retrieval_precision, "R@5": F.retrieval_recall, "AP@5": F.retrieval_average_precision,
                 "NDCG@5": F.retrieval_normalized_dcg, "RR@5": F.retrieval_reciprocal_rank,
                 "Hit@5": F.retrieval_hit_rate}
    for u in range(X_test.shape[0]):
        preds = torch.tensor(scores[u])
        for column, function in functions.items():
            target = torch.tensor(X_test[u] if column == "NDCG@5" else X_test[u] > 0)
            want = float(function(preds, target, top_k=5))
            assert got[column][u] == pytest.approx(want, rel=1e-6, abs=1e-7), column  # float32 results
