"""The CPU backend: score blocks by BLAS, ranks by the one-pass kernel in _cpu_ranks.pyx.

Scores are computed in float64 as B @ A[users].T (items x users) with at least two users
per call. In that layout OpenBLAS's dgemm gives every user the same bits whatever the
batch size, the user order and the thread count; sgemm, the users x items layout and
one-user calls (gemv) do not (measured; tests/test_properties.py checks it). float32
factors are widened exactly, so their scores are the float64 dot products.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ._cpu_ranks import rank_test_items

SCORE_DTYPE = np.float64
THREAD_ROWS = 8  # score rows each ranking thread holds (GROUP in _cpu_ranks.pyx)


class CpuRanking:
    """Ranks, pool minimum, maximum and non-finite flag for every evaluated user."""

    def __init__(self, n_users, nnz_test):
        self.ranks = np.zeros(nnz_test, dtype=np.int64)
        self.pool_min = np.full(n_users, np.nan)
        self.pool_max = np.full(n_users, np.nan)
        self.nonfinite = np.zeros(n_users, dtype=np.uint8)


def score_block(A, B, item_biases, users, out):
    """Scores of `users` for every item, as an (n_items, n_users) float64 C-contiguous block.

    A, B and item_biases are float64 (A may be of any float type; its rows are widened).
    `out` is a flat float64 buffer of at least n_items * max(2, n_users) values, reused from
    batch to batch: fresh pages cost more than the product itself for large catalogues.
    """
    n_cols = max(2, users.shape[0])
    n_items = B.shape[0] if B is not None else item_biases.shape[0]
    scores = out[: n_items * n_cols].reshape(n_items, n_cols)
    if A is None:
        scores[:] = item_biases[:, None]
    else:
        rows = A[users if users.shape[0] > 1 else np.repeat(users, 2)].astype(SCORE_DTYPE)
        np.matmul(B, rows.T, out=scores)
        if item_biases is not None:
            scores += item_biases[:, None]
    return scores if users.shape[0] > 1 else np.ascontiguousarray(scores[:, :1])


def rank_users(problem, users, batch_size, nthreads, max_rank=0):
    """Rank the test items of `users` (sorted int64 row indices), `batch_size` users at a time;
    with max_rank = K > 0, ranks above K are only known to be above K (reported as K + 1)."""
    result = CpuRanking(problem.n_users, problem.X_test.nnz)
    train, test = problem.X_train, problem.X_test
    B = None if problem.B is None else problem.B.astype(SCORE_DTYPE, copy=False)
    biases = None if problem.item_biases is None else problem.item_biases.astype(SCORE_DTYPE, copy=False)
    n_items = problem.n_items
    block = np.empty(n_items * max(2, min(batch_size, users.shape[0])), dtype=SCORE_DTYPE)
    rows = [np.empty(THREAD_ROWS * n_items, dtype=SCORE_DTYPE) for _ in range(nthreads)]
    with ThreadPoolExecutor(max_workers=nthreads) as pool:
        for begin in range(0, users.shape[0], batch_size):
            batch = users[begin: begin + batch_size]
            scores = score_block(problem.A, B, biases, batch, block)
            bounds = np.linspace(0, batch.shape[0], min(nthreads, batch.shape[0]) + 1).astype(np.int64)
            jobs = [pool.submit(rank_test_items, scores, batch, train.indptr, train.indices,
                                test.indptr, test.indices, result.ranks, result.pool_min,
                                result.pool_max, result.nonfinite, problem.seed,
                                problem.break_ties_with_noise, max_rank, rows[thread], int(lo), int(hi))
                    for thread, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])) if hi > lo]
            for job in jobs:
                job.result()
    return result
