"""The CPU backend: BLAS score blocks as a filter, exact ranks by the kernel in _cpu_ranks.pyx.

A score is defined as the float64 sum of a[u,f] * b[j,f] in order f = 0 .. F-1, plus the
item's bias (_cpu_ranks.exact_score). BLAS gives the same numbers only up to rounding that
depends on the batch, the user order and the threads, so the kernel uses its scores with a
rigorous error bound (`score_tolerance`) and computes the exact score of an item only when
a comparison falls within that bound. Results are therefore the same for every batching.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ._cpu_ranks import rank_test_items

THREAD_ROWS = 8  # score rows each ranking thread holds (GROUP in _cpu_ranks.pyx)


class CpuRanking:
    """Ranks, pool minimum, maximum and non-finite flag for every evaluated user."""

    def __init__(self, n_users, nnz_test):
        self.ranks = np.zeros(nnz_test, dtype=np.int64)
        self.pool_min = np.full(n_users, np.nan)
        self.pool_max = np.full(n_users, np.nan)
        self.nonfinite = np.zeros(n_users, dtype=np.uint8)


def _gamma(n, unit_roundoff):
    """Higham's gamma_n = n u / (1 - n u): the relative error bound of n rounded operations."""
    return n * unit_roundoff / (1.0 - n * unit_roundoff)


def score_tolerance(user_rows, item_abs_max, bias_abs_max, dtype):
    """Per user, a bound on |BLAS score - exact score| for every item (doubled for safety).

    Both are dot products of F terms plus a bias, rounded in `dtype` (any order) and in
    float64 (in order): each is within gamma_(F+2) * (sum_f |a_f| max_j |b_jf| + max |bias|)
    of the real value; underflow adds at most one smallest normal number per term.
    """
    n_factors = user_rows.shape[1]
    scale = np.abs(user_rows.astype(np.float64)) @ item_abs_max + bias_abs_max
    finfo = np.finfo(dtype)
    gamma = _gamma(n_factors + 2, float(finfo.eps) / 2) + _gamma(n_factors + 2, 2.0**-53)
    return 2.0 * (gamma * scale + (n_factors + 2) * float(finfo.tiny))


def score_block(A, B, biases, users, out):
    """Filter scores of `users` for every item: an (n_items, n_users) C-contiguous block in the
    factors' dtype (the biases alone, exactly, when there are no factors). `out` is a flat
    buffer reused from batch to batch: fresh pages cost more than the product at 1M items."""
    n_items = B.shape[0]
    scores = out[: n_items * users.shape[0]].reshape(n_items, users.shape[0])
    if B.shape[1] == 0:
        scores[:] = biases[:, None]
    else:
        np.matmul(B, A[users].T, out=scores)
        if biases.shape[0]:
            scores += biases.astype(scores.dtype)[:, None]
    return scores


def rank_users(problem, users, batch_size, nthreads, max_rank=0):
    """Rank the test items of `users` (sorted int64 row indices), `batch_size` users at a time;
    with max_rank = K > 0, ranks above K are only known to be above K (reported as K + 1)."""
    result = CpuRanking(problem.n_users, problem.X_test.nnz)
    train, test, n_items = problem.X_train, problem.X_test, problem.n_items
    A, B = problem.A, problem.B
    if B is None:  # a non-personalised model: no factors (F = 0), the scores are the biases
        A, B = np.zeros((problem.n_users, 0)), np.zeros((n_items, 0))
    has_bias = problem.item_biases is not None
    biases = problem.item_biases if has_bias else np.zeros(0)
    # a non-finite factor or bias shows as a NaN/inf score; keep it out of the error bound
    item_abs_max = np.where(np.isfinite(B), np.abs(B), 0).max(axis=0, initial=0).astype(np.float64)
    bias_abs_max = float(np.where(np.isfinite(biases), np.abs(biases), 0).max(initial=0))
    block = np.empty(n_items * min(batch_size, max(1, users.shape[0])), dtype=B.dtype)
    rows = [np.empty(THREAD_ROWS * n_items, dtype=B.dtype) for _ in range(nthreads)]
    with ThreadPoolExecutor(max_workers=nthreads) as pool:
        for begin in range(0, users.shape[0], batch_size):
            batch = users[begin: begin + batch_size]
            scores = score_block(A, B, biases, batch, block)
            user_rows = np.ascontiguousarray(A[batch])
            tol = score_tolerance(user_rows, item_abs_max, bias_abs_max, B.dtype) if B.shape[1] else np.zeros(batch.shape[0])
            bounds = np.linspace(0, batch.shape[0], min(nthreads, batch.shape[0]) + 1).astype(np.int64)
            jobs = [pool.submit(rank_test_items, scores, user_rows, B, biases, has_bias, tol, batch,
                                train.indptr, train.indices, test.indptr, test.indices, result.ranks,
                                result.pool_min, result.pool_max, result.nonfinite, problem.seed,
                                problem.break_ties_with_noise, max_rank, rows[thread], int(lo), int(hi))
                    for thread, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])) if hi > lo]
            for job in jobs:
                job.result()
    return result
