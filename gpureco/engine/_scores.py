"""The score of a factor model and the error bound of the fast (BLAS / cuBLAS) scores.

A score is defined as the float64 sum of a[u,f] * b[j,f] in order f = 0 .. F-1, plus the
item's bias (_cpu_ranks.exact_score, kernels/common.cuh gr_exact_score: the same numbers).
BLAS and cuBLAS compute it much faster but round depending on the batch, the tiling and
the threads; both backends use those scores only as a filter within the bound below, and
settle every closer comparison with the defined score. Also the pieces of ranking both
backends share (order keys, top-K selection, CSR row entries). Written over numpy or cupy.
"""
from __future__ import annotations

import numpy as np

from ._backend import array_module


def _gamma(n, unit_roundoff):
    """Higham's gamma_n = n u / (1 - n u): the relative error bound of n rounded operations."""
    return n * unit_roundoff / (1.0 - n * unit_roundoff)


_CHUNK_BYTES = 4 << 20  # temporaries of `magnitudes`: a few chunks of this size, not copies of B


def _finite_abs_max(xp, X):
    """(max over the rows of X of |X| where finite (0 where none), column by column for a 2-d X;
    whether every value is finite), computed a chunk of rows at a time (neither depends on the
    order)."""
    out = xp.zeros(X.shape[1:], dtype=xp.float64)
    finite = True
    rows = max(1, _CHUNK_BYTES // max(1, X[:1].nbytes))
    for begin in range(0, X.shape[0], rows):
        part = X[begin: begin + rows]  # (CuPy's max takes no `initial`: the zeros above stand in)
        ok = xp.isfinite(part)
        finite = finite and bool(ok.all())
        out = xp.maximum(out, xp.where(ok, xp.abs(part), 0).max(axis=0).astype(xp.float64))
    return out, finite


def magnitudes(B, biases):
    """Per factor, max_j |B[j, f]|, and max_j |bias_j|, over finite values (float64)."""
    return checked_magnitudes(B, biases)[:2]


def checked_magnitudes(B, biases):
    """magnitudes(B, biases), and whether every item factor is finite."""
    xp = array_module(B, biases)
    item_abs_max, items_finite = _finite_abs_max(xp, B)
    return item_abs_max, float(_finite_abs_max(xp, biases)[0]), items_finite


def score_tolerance(user_rows, item_abs_max, bias_abs_max, dtype, tf32=False):
    """Per user, a bound on |fast score - defined score| for every item (doubled for safety).

    Both are dot products of F terms plus a bias, rounded in `dtype` (any order) and in
    float64 (in order): each is within gamma_(F+2) * (sum_f |a_f| max_j |b_jf| + max |bias|)
    of the real value; underflow adds at most one smallest normal number per term. With
    TF32 tensor cores the float32 inputs are first cut to 10 mantissa bits (relative error
    below 2**-10 each, rounded or truncated), which widens the bound accordingly.
    """
    xp = array_module(user_rows)
    n_factors = user_rows.shape[1]
    with np.errstate(over="ignore"):  # an infinite bound is still a bound: every comparison goes to the definition
        scale = xp.abs(user_rows.astype(xp.float64)) @ item_abs_max + bias_abs_max
    finfo = np.finfo(dtype)
    gamma = _gamma(n_factors + 2, float(finfo.eps) / 2)
    if tf32:
        gamma = (1.0 + 2.0**-10) ** 2 * (1.0 + gamma) - 1.0
    gamma += _gamma(n_factors + 2, 2.0**-53)
    return 2.0 * (gamma * scale + (n_factors + 2) * float(finfo.tiny))


def order_key(xp, x):
    """float64 -> uint64, increasing with x (-0.0 and 0.0 alike); kernels/common.cuh gr_order_key."""
    bits = (x + 0.0).view(xp.uint64)
    return xp.where((bits >> xp.uint64(63)).astype(bool), ~bits, bits | xp.uint64(1 << 63))


def select_top_k(xp, local, items, scores, keys, n_rows, k):
    """The k best (score desc, key asc) candidates of each row; NaN scores are never chosen.
    Shared by both backends: (items, scores) of shape (n_rows, k), -1 / NaN padded."""
    keep = ~xp.isnan(scores)
    local, items, scores, keys = local[keep], items[keep], scores[keep], keys[keep]
    order = xp.lexsort(xp.stack([keys.astype(xp.uint64), ~order_key(xp, scores), local.astype(xp.uint64)]))
    local, items, scores = local[order], items[order], scores[order]
    per_row = xp.bincount(local, minlength=n_rows)
    position = xp.arange(local.shape[0]) - (xp.cumsum(per_row) - per_row)[local]
    chosen = position < k
    out_items = xp.full((n_rows, k), -1, dtype=xp.int64)
    out_scores = xp.full((n_rows, k), xp.nan)
    out_items[local[chosen], position[chosen]] = items[chosen]
    out_scores[local[chosen], position[chosen]] = scores[chosen] + 0.0
    return out_items, out_scores


def row_entries(xp, indptr, rows):
    """The stored entries of the CSR rows `rows`, in order: (row, entry, offsets) where row[i]
    is the position in `rows` of entry i's row, entry[i] its index in the CSR arrays, and
    offsets (len(rows) + 1) where each row's entries begin."""
    start = indptr[rows]
    offsets = xp.concatenate([xp.zeros(1, dtype=xp.int64), xp.cumsum(indptr[rows + 1] - start)])
    n = xp.arange(int(offsets[-1]))
    row = xp.searchsorted(offsets[1:], n, side="right")
    return row, start[row] + n - offsets[row], offsets
