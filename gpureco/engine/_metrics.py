"""Every accuracy metric, once, as a function of the ranks of the test items.

Written over an array namespace `xp` (numpy or cupy) so that both backends share it. The
formulas are those of docs/metrics.md; a user's metrics are NaN for the reasons listed
there (_registry.NAN_REASONS), which `nan_reasons` and `metrics_from_ranks` apply.
"""
from __future__ import annotations

import numpy as np

from ._registry import K_BOUND_IN_POOL


def nan_reasons(xp, n_test, n_pool, n_train, nonfinite, pool_min, pool_max,
                min_pos_test, min_items_pool, consider_cold_start):
    """Per user, the first of the whole-user NaN rules 1-5 that applies (0: none)."""
    rules = [
        n_test < max(1, min_pos_test),
        n_pool < min_items_pool,
        (n_train == 0) & (not consider_cold_start),
        nonfinite,
        pool_min == pool_max,
    ]
    reason = xp.zeros(n_test.shape[0], dtype=xp.int8)
    for code in range(len(rules), 0, -1):
        reason[rules[code - 1]] = code
    return reason


def metrics_from_ranks(xp, ranks, gains, n_test, n_pool, cutoffs, names, valid, gain="linear"):
    """The requested metrics of every user, at every cut-off.

    ranks : int64 (nnz_test,), the rank of each test entry in its user's pool, entries
        grouped by user in user order (CSR order); ignored for users where `valid` is False.
    gains : float64 (nnz_test,), the X_test values (NDCG gains before the `gain` transform).
    n_test, n_pool : int64 (n_users,).
    cutoffs : int64 (n_cut,), increasing; the K of each column.
    names : the registry columns wanted ("P@K", ..., "PR_AUC").
    valid : bool (n_users,), users to whom no whole-user NaN rule (1-5) applies.

    Returns {name: float64 array (n_users, n_cut) for @K metrics, (n_users,) for AUCs}.
    """
    n_users, n_cut = n_test.shape[0], cutoffs.shape[0]
    user = xp.repeat(xp.arange(n_users, dtype=xp.int64), n_test)
    ranks = xp.where(valid[user], ranks, 1).astype(xp.int64)
    if gain == "exponential":
        gains = 2.0 ** gains - 1.0
    elif gain == "binary":
        gains = (gains > 0).astype(xp.float64)

    # entries by (user, rank): j is the number of test items ranked at or above each one
    max_rank = int(n_pool.max()) if n_users else 0
    order = xp.argsort(user * (max_rank + 1) + ranks)
    rank = ranks[order].astype(xp.float64)
    g = gains[order]
    first_of_user = (xp.cumsum(n_test) - n_test)[user]  # entry index where each entry's user starts
    j = (xp.arange(user.shape[0], dtype=xp.int64) - first_of_user + 1).astype(xp.float64)

    def by_cutoff(weights, positions):
        """Per user and cut-off k: the sum of weights of the entries with position <= k."""
        slot = xp.searchsorted(cutoffs, positions, side="left")
        flat = xp.bincount(user * (n_cut + 1) + slot, weights=weights, minlength=n_users * (n_cut + 1))
        return xp.cumsum(flat.reshape(n_users, n_cut + 1).astype(xp.float64), axis=1)[:, :n_cut]

    def per_user(weights):
        return xp.bincount(user, weights=weights, minlength=n_users).astype(xp.float64)

    k = cutoffs[None, :].astype(xp.float64)
    n_t = n_test[:, None].astype(xp.float64)
    n_neg = (n_pool - n_test).astype(xp.float64)
    out = {}
    with np.errstate(divide="ignore", invalid="ignore"):
        hits = by_cutoff(None, rank) if {"P@K", "TP@K", "R@K", "Hit@K"} & set(names) else None
        if {"AP@K", "TAP@K"} & set(names):
            ap_sum = by_cutoff(j / rank, rank)
        for name in names:
            if name == "P@K":
                out[name] = hits / k
            elif name == "TP@K":
                out[name] = hits / xp.minimum(k, n_t)
            elif name == "R@K":
                out[name] = hits / n_t
            elif name == "AP@K":
                out[name] = ap_sum / n_t
            elif name == "TAP@K":
                out[name] = ap_sum / xp.minimum(k, n_t)
            elif name == "Hit@K":
                out[name] = (hits > 0).astype(xp.float64)
            elif name == "RR@K":
                out[name] = by_cutoff(xp.where(j == 1, 1.0 / rank, 0.0), rank)
            elif name == "NDCG@K":
                # the ideal list: positive gains in descending order (negative ones go last)
                ideal = xp.lexsort(xp.stack([-gains, user]))
                g_ideal = xp.maximum(gains[ideal], 0.0)
                # NDCG is scale-free: divide by the user's largest gain so no sum overflows
                scale = g_ideal[first_of_user]
                scale = xp.where(scale > 0, scale, 1.0)
                dcg = by_cutoff(g / scale / xp.log2(rank + 1.0), rank)
                idcg = by_cutoff(g_ideal / scale / xp.log2(j + 1.0), j)  # ideal item j sits at rank j
                ndcg = dcg / idcg
                ndcg[per_user((g > 0).astype(xp.float64)) == 0] = xp.nan  # rule 8
                out[name] = ndcg
            elif name == "ROC_AUC":
                n_tv = n_test.astype(xp.float64)
                out[name] = 1.0 - (per_user(rank) - n_tv * (n_tv + 1.0) / 2.0) / (n_tv * n_neg)
            elif name == "PR_AUC":
                out[name] = per_user(j / rank) / n_test.astype(xp.float64)
    for name, values in out.items():
        values[~valid] = xp.nan  # rules 1-5
        if name != "NDCG@K":
            values[n_neg == 0] = xp.nan  # rule 6
        if name in K_BOUND_IN_POOL:
            values[n_pool[:, None] <= cutoffs[None, :]] = xp.nan  # rule 7
    return out
