"""Every accuracy metric, once, as a function of the ranks of the test items.

The one routine that turns integers (ranks, |T|, pool sizes) into the floats gpureco
returns, for both backends and for evaluate_lists. It runs on the host, with NumPy, in an
operation order written down here, so its numbers are the same for any backend, batch size,
user order, thread count and run (docs/architecture.md, the determinism rule):

- the entries are put in (user, rank) order; ranks are distinct within a valid user, so
  any sort gives that order;
- every per-user or per-cut-off sum adds its terms one after another in that order:
  np.bincount with weights and np.cumsum, which NumPy computes with sequential loops
  (never a pairwise, parallel or atomic reduction: CuPy's bincount adds with float atomics
  in arrival order, its cumsum is a parallel scan, and NumPy's np.sum is pairwise);
- the NDCG discounts divide by log2(i + 1) read from a table of correctly rounded values
  (`log2_table`), not from a vectorised log2, whose last bit depends on the CPU's SIMD
  (and on the GPU, on CUDA's libdevice);
- everything else is one IEEE-754 operation per element (+, -, *, /), correctly rounded.
  The one exception is gain="exponential" with non-integer X_test values: 2**g - 1 is
  then NumPy's float power on the host (integer values are exact).

The formulas are those of docs/metrics.md; a user's metrics are NaN for the reasons listed
there (_registry.NAN_REASONS), which `nan_reasons` and `metrics_from_ranks` apply.
"""
from __future__ import annotations

import functools
from decimal import Context, Decimal

import numpy as np

from ._registry import K_BOUND_IN_POOL


@functools.lru_cache(maxsize=8)
def _log2_table_of_size(size, wide_type=np.longdouble):
    """float64 log2(i) for i = 0 .. size - 1, each the double nearest to the exact value
    (entries 0 and 1: 0.0). Computed in long double, where that is wider than double;
    the few values whose rounding that cannot decide (and every value where long double
    is double) are settled with 40-digit decimals."""
    table = np.zeros(size)
    i = np.arange(2, size, dtype=np.int64)
    if not i.size:
        return table
    wide = np.log2(i.astype(wide_type))
    near = wide.astype(np.float64)
    # the error of log2l is a few units in its last place; any value that close to a
    # midpoint between two doubles may round either way
    error = 8 * np.finfo(wide_type).eps * wide
    up = (near.astype(wide_type) + np.nextafter(near, np.inf).astype(wide_type)) / 2
    down = (near.astype(wide_type) + np.nextafter(near, -np.inf).astype(wide_type)) / 2
    unsure = (np.abs(wide - up) <= error) | (np.abs(wide - down) <= error)
    context = Context(prec=40)
    ln2 = context.ln(Decimal(2))
    for position in np.flatnonzero(unsure):
        near[position] = float(context.divide(context.ln(Decimal(int(i[position]))), ln2))
    table[2:] = near
    return table


def log2_table(n):
    """Correctly rounded float64 log2(i) for i = 0 .. n (at least), cached per process."""
    return _log2_table_of_size(1 << max(4, int(n + 1).bit_length()))


def nan_reasons(n_test, n_pool, n_train, nonfinite, pool_min, pool_max,
                min_pos_test, min_items_pool, consider_cold_start):
    """Per user, the first of the whole-user NaN rules 1-5 that applies (0: none)."""
    rules = [
        n_test < max(1, min_pos_test),
        n_pool < min_items_pool,
        (n_train == 0) & (not consider_cold_start),
        nonfinite,
        pool_min == pool_max,
    ]
    reason = np.zeros(n_test.shape[0], dtype=np.int8)
    for code in range(len(rules), 0, -1):
        reason[rules[code - 1]] = code
    return reason


def metrics_from_ranks(ranks, gains, n_test, n_pool, cutoffs, names, valid, gain="linear"):
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
    user = np.repeat(np.arange(n_users, dtype=np.int64), n_test)
    ranks = np.where(valid[user], ranks, 1).astype(np.int64)
    if gain == "exponential":  # 2**g exactly (ldexp) for integer g; NumPy's power otherwise
        whole = gains == np.floor(gains)
        exponent = np.where(whole, np.clip(gains, -1100, 1100), 0).astype(np.int64)
        gains = np.where(whole, np.ldexp(1.0, exponent), np.power(2.0, np.where(whole, 0.0, gains))) - 1.0
    elif gain == "binary":
        gains = (gains > 0).astype(np.float64)

    # entries by (user, rank): j is the number of test items ranked at or above each one
    max_rank = int(n_pool.max()) if n_users else 0
    order = np.argsort(user * (max_rank + 1) + ranks)
    rank_int = ranks[order]
    rank = rank_int.astype(np.float64)
    g = gains[order]
    first_of_user = (np.cumsum(n_test) - n_test)[user]  # entry index where each entry's user starts
    j_int = np.arange(user.shape[0], dtype=np.int64) - first_of_user + 1
    j = j_int.astype(np.float64)

    def by_cutoff(weights, positions):
        """Per user and cut-off k: the sum of weights of the entries with position <= k."""
        slot = np.searchsorted(cutoffs, positions, side="left")
        flat = np.bincount(user * (n_cut + 1) + slot, weights=weights, minlength=n_users * (n_cut + 1))
        return np.cumsum(flat.reshape(n_users, n_cut + 1).astype(np.float64), axis=1)[:, :n_cut]

    def per_user(weights):
        return np.bincount(user, weights=weights, minlength=n_users).astype(np.float64)

    k = cutoffs[None, :].astype(np.float64)
    n_t = n_test[:, None].astype(np.float64)
    n_neg = (n_pool - n_test).astype(np.float64)
    out = {}
    with np.errstate(divide="ignore", invalid="ignore"):
        hits = by_cutoff(None, rank) if {"P@K", "TP@K", "R@K", "Hit@K"} & set(names) else None
        if {"AP@K", "TAP@K"} & set(names):
            ap_sum = by_cutoff(j / rank, rank)
        for name in names:
            if name == "P@K":
                out[name] = hits / k
            elif name == "TP@K":
                out[name] = hits / np.minimum(k, n_t)
            elif name == "R@K":
                out[name] = hits / n_t
            elif name == "AP@K":
                out[name] = ap_sum / n_t
            elif name == "TAP@K":
                out[name] = ap_sum / np.minimum(k, n_t)
            elif name == "Hit@K":
                out[name] = (hits > 0).astype(np.float64)
            elif name == "RR@K":
                out[name] = by_cutoff(np.where(j == 1, 1.0 / rank, 0.0), rank)
            elif name == "NDCG@K":
                # the ideal list: positive gains in descending order (negative ones go last)
                ideal = np.lexsort(np.stack([-gains, user]))
                g_ideal = np.maximum(gains[ideal], 0.0)
                # NDCG is scale-free: divide by the user's largest gain so no sum overflows
                scale = g_ideal[first_of_user]
                scale = np.where(scale > 0, scale, 1.0)
                # discounts past the largest cut-off fall in the dropped slot of by_cutoff
                last = int(cutoffs[-1]) + 1
                log2 = log2_table(last)
                dcg = by_cutoff(g / scale / log2[np.minimum(rank_int + 1, last)], rank)
                idcg = by_cutoff(g_ideal / scale / log2[np.minimum(j_int + 1, last)], j)  # ideal item j at rank j
                ndcg = dcg / idcg
                ndcg[per_user((g > 0).astype(np.float64)) == 0] = np.nan  # rule 8
                out[name] = ndcg
            elif name == "ROC_AUC":
                n_tv = n_test.astype(np.float64)
                out[name] = 1.0 - (per_user(rank) - n_tv * (n_tv + 1.0) / 2.0) / (n_tv * n_neg)
            elif name == "PR_AUC":
                out[name] = per_user(j / rank) / n_test.astype(np.float64)
    for name, values in out.items():
        values[~valid] = np.nan  # rules 1-5
        if name != "NDCG@K":
            values[n_neg == 0] = np.nan  # rule 6
        if name in K_BOUND_IN_POOL:
            values[n_pool[:, None] <= cutoffs[None, :]] = np.nan  # rule 7
    return out
