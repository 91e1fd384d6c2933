"""Slow, obvious reference implementations: one user at a time, sort the pool, walk the list.

Written from docs/metrics.md without looking at the engine; the tests compare against these.
"""
import math

import numpy as np

from gpureco.engine._cpu_ranks import tie_keys
from gpureco.engine._registry import CONVENTIONS, Convention

NAMES = ("P@K", "TP@K", "R@K", "AP@K", "TAP@K", "NDCG@K", "Hit@K", "RR@K", "ROC_AUC", "PR_AUC")
EXTRA_NAMES = ("DCG@K", "F1@K", "RBP@K", "RPrec", "bpref", "ListAUC@K")  # beyond recometrics' ten


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


def reference_user(scores, train, test, k, tie_key, gain="linear", convention=None, persistence=0.8):
    """Metrics of one user at cut-off k, or None where the whole user is NaN by rules 4-5.

    scores: float array over all items; train: set of items; test: {item: value};
    tie_key: function item -> key (smaller key wins a tie).
    convention: a gpureco Convention (docs/peers.md): its discount, denominators, gain and RBP
    weights (its relevance rule and tie order are the caller's `test` and `tie_key`).
    """
    convention = convention or Convention()
    gain = convention.gain or gain
    if convention.discount == "log2(max(i,2))":
        def discount(i):  # LensKit: position i (0-based) at rank i + 1
            return math.log2(max(i + 1, 2))
    else:
        def discount(i):
            return math.log2(i + 2)
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
    dcg = sum(_gain(test[ranking[i]], gain) / discount(i) for i in range(min(k, n_pool)) if hit[i])
    ideal = sorted((_gain(v, gain) for v in test.values() if v > 0), reverse=True)[:k]
    idcg = sum(g / discount(i) for i, g in enumerate(ideal))
    shown = min(k, n_pool)  # the list, cut at K, holds the whole pool at most
    weight = [test.get(ranking[i], 0.0) if convention.rbp == "graded" else 1.0 for i in range(len(hit))]
    rbp = (1 - persistence) * sum(weight[i] * persistence ** i for i in range(min(k, n_pool)) if hit[i])
    # bpref: each test item loses the share of (at most |T|) negatives ranked above it
    above, bpref = 0, 0.0
    for h in hit:
        if h:
            bpref += 1 - min(above, n_t) / min(n_t, n_neg) if n_neg else math.nan
        else:
            above += 1
    first = next((i for i, h in enumerate(hit) if h), None)
    # ListAUC (RePlay's RocAuc): count every (non-relevant above relevant) pair inside the list cut at K
    listed = hit[:shown]
    listed_hits = sum(listed)
    wrong = sum(1 for a in range(shown) for b in range(a + 1, shown) if not listed[a] and listed[b])
    if listed_hits == 0:
        list_auc = 0.0
    elif wrong == 0:
        list_auc = 1.0
    else:
        list_auc = 1 - wrong / (listed_hits * (shown - listed_hits))
    # ROC-AUC by counting ordered (positive, negative) pairs
    above = 0
    negatives_seen = 0
    for h in hit:
        if h:
            above += n_neg - negatives_seen
        else:
            negatives_seen += 1
    out = {
        "P@K": hits / (shown if convention.precision == "list" else k), "TP@K": hits / min(k, n_t),
        "R@K": hits / {"T": n_t, "list": min(n_t, shown), "K": min(n_t, k)}[convention.recall],
        "AP@K": {"T": ap_sum / n_t, "list": ap_sum / min(n_t, shown), "K": ap_sum / min(n_t, k),
                 "hits": ap_sum / hits if hits else 0.0}[convention.ap],
        "TAP@K": ap_sum / min(k, n_t),
        "NDCG@K": dcg / idcg if idcg > 0 else math.nan,
        "Hit@K": float(hits > 0),
        "RR@K": 1.0 / (first + 1) if first is not None and first < k else 0.0,
        "ROC_AUC": above / (n_t * n_neg) if n_neg else math.nan,
        "PR_AUC": sum(prec_at[i] for i in range(n_pool) if hit[i]) / n_t,
        "DCG@K": dcg, "F1@K": 2 * hits / (k + n_t), "RBP@K": rbp,
        "RPrec": sum(hit[:n_t]) / n_t, "bpref": bpref / n_t, "ListAUC@K": list_auc,
    }
    if n_neg == 0:
        out = {name: (v if name in ("NDCG@K", "DCG@K") else math.nan) for name, v in out.items()}
    if n_pool <= k:
        for name in ("P@K", "TP@K", "R@K", "Hit@K", "F1@K"):
            out[name] = math.nan
    return out


def reference_metrics(X_train, X_test, scores, k, *, min_pos_test=1, min_items_pool=2,
                      consider_cold_start=True, noise=False, seed=1, gain="linear", convention="gpureco",
                      ties=None, relevance_threshold=None, persistence=0.8):
    """{name: per-user array} for dense X_train, X_test (0 = no interaction) and dense scores,
    with the options of gpureco.evaluate (convention, ties, relevance_threshold, persistence)."""
    convention = CONVENTIONS[convention]
    last = (ties or convention.ties) == "last"
    X_train, X_test, scores = np.asarray(X_train), np.asarray(X_test), np.asarray(scores, dtype=np.float64)
    n_users, n_items = X_test.shape
    out = {name: np.full(n_users, np.nan) for name in NAMES + EXTRA_NAMES}
    for u in range(n_users):
        train = set(np.flatnonzero(X_train[u]).tolist())
        test = {int(i): float(X_test[u, i]) for i in np.flatnonzero(X_test[u])}
        if convention.relevant == "integer>=1":  # ranx: int(value) >= 1, with gain int(value)
            test = {i: float(math.trunc(value)) for i, value in test.items() if math.trunc(value) >= 1}
        if relevance_threshold is not None:
            test = {i: value for i, value in test.items() if value >= relevance_threshold}
        n_pool = n_items - len(train)
        if len(test) < max(1, min_pos_test) or n_pool < min_items_pool or (not train and not consider_cold_start):
            continue
        keys = tie_keys(np.full(n_items, u, dtype=np.int64), np.arange(n_items, dtype=np.int64), seed, noise)
        values = reference_user(scores[u], train, test, k, (lambda i: -i) if last else (lambda i: int(keys[i])), gain,
                                convention, persistence)
        if values is None:
            continue
        for name, value in values.items():
            out[name][u] = value
    return out
