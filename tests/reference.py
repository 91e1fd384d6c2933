"""Slow, obvious reference implementations: one user at a time, sort the pool, walk the list.

Written from docs/metrics.md without looking at the engine; the tests compare against these.
"""
import math

import numpy as np

from gpureco.engine._cpu_ranks import tie_keys

NAMES = ("P@K", "TP@K", "R@K", "AP@K", "TAP@K", "NDCG@K", "Hit@K", "RR@K", "ROC_AUC", "PR_AUC")


def defined_scores(A, B, item_biases=None):
    """Scores as docs/metrics.md defines them: float64 products of the factors summed in the
    order f = 0 .. F-1, plus the bias (an independent implementation of the engine's rule)."""
    A, B = np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64)
    scores = np.zeros((A.shape[0], B.shape[0]))
    with np.errstate(invalid="ignore", over="ignore"):
        for f in range(A.shape[1]):
            scores = scores + np.outer(A[:, f], B[:, f])
        if item_biases is not None:
            scores = scores + np.asarray(item_biases, dtype=np.float64)
    return scores


def _gain(value, gain):
    return {"linear": value, "exponential": math.expm1(value * math.log(2.0)), "binary": float(value > 0)}[gain]


def reference_user(scores, train, test, k, tie_key, gain="linear"):
    """Metrics of one user at cut-off k, or None where the whole user is NaN by rules 4-5.

    scores: float array over all items; train: set of items; test: {item: value};
    tie_key: function item -> key (smaller key wins a tie).
    """
    pool = [i for i in range(len(scores)) if i not in train]
    pool_scores = [scores[i] for i in pool]
    if any(not math.isfinite(s) for s in pool_scores):
        return None
    if min(pool_scores) == max(pool_scores):
        return None
    ranking = sorted(pool, key=lambda i: (-scores[i], tie_key(i)))
    hit = [1 if i in test else 0 for i in ranking]
    n_t, n_pool = len(test), len(pool)
    n_neg = n_pool - n_t
    top = hit[:k]
    hits = sum(top)
    prec_at = [sum(hit[: i + 1]) / (i + 1) for i in range(len(hit))]
    ap_sum = sum(prec_at[i] for i in range(min(k, n_pool)) if hit[i])
    dcg = sum(_gain(test[ranking[i]], gain) / math.log2(i + 2) for i in range(min(k, n_pool)) if hit[i])
    ideal = sorted((_gain(v, gain) for v in test.values() if v > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    first = next((i for i, h in enumerate(hit) if h), None)
    # ROC-AUC by counting ordered (positive, negative) pairs
    above = 0
    negatives_seen = 0
    for h in hit:
        if h:
            above += n_neg - negatives_seen
        else:
            negatives_seen += 1
    out = {
        "P@K": hits / k, "TP@K": hits / min(k, n_t), "R@K": hits / n_t,
        "AP@K": ap_sum / n_t, "TAP@K": ap_sum / min(k, n_t),
        "NDCG@K": dcg / idcg if idcg > 0 else math.nan,
        "Hit@K": float(hits > 0),
        "RR@K": 1.0 / (first + 1) if first is not None and first < k else 0.0,
        "ROC_AUC": above / (n_t * n_neg) if n_neg else math.nan,
        "PR_AUC": sum(prec_at[i] for i in range(n_pool) if hit[i]) / n_t,
    }
    if n_neg == 0:
        out = {name: (v if name == "NDCG@K" else math.nan) for name, v in out.items()}
    if n_pool <= k:
        for name in ("P@K", "TP@K", "R@K", "Hit@K"):
            out[name] = math.nan
    return out


def reference_metrics(X_train, X_test, scores, k, *, min_pos_test=1, min_items_pool=2,
                      consider_cold_start=True, noise=False, seed=1, gain="linear"):
    """{name: per-user array} for dense X_train, X_test (0 = no interaction) and dense scores."""
    X_train, X_test, scores = np.asarray(X_train), np.asarray(X_test), np.asarray(scores, dtype=np.float64)
    n_users, n_items = X_test.shape
    out = {name: np.full(n_users, np.nan) for name in NAMES}
    for u in range(n_users):
        train = set(np.flatnonzero(X_train[u]).tolist())
        test = {int(i): float(X_test[u, i]) for i in np.flatnonzero(X_test[u])}
        n_pool = n_items - len(train)
        if len(test) < max(1, min_pos_test) or n_pool < min_items_pool or (not train and not consider_cold_start):
            continue
        keys = tie_keys(np.full(n_items, u, dtype=np.int64), np.arange(n_items, dtype=np.int64), seed, noise)
        values = reference_user(scores[u], train, test, k, lambda i: int(keys[i]), gain)
        if values is None:
            continue
        for name, value in values.items():
            out[name][u] = value
    return out
