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

from ._cpu_ranks import pair_scores, rank_test_items, tie_keys
from ._scores import checked_magnitudes, magnitudes, max_row_norm, row_entries, score_tolerance, select_top_k

class CpuRanking:
    """Ranks, pool minimum, maximum and non-finite flag for every evaluated user (and, when
    asked, the test entries' defined scores)."""

    def __init__(self, n_users, nnz_test, with_scores=False):
        self.ranks = np.zeros(nnz_test, dtype=np.int64)
        self.test_scores = np.full(nnz_test, np.nan) if with_scores else None
        self.pool_min = np.full(n_users, np.nan)
        self.pool_max = np.full(n_users, np.nan)
        self.nonfinite = np.zeros(n_users, dtype=np.uint8)

    def host(self):
        return self


def score_block(user_rows, B, biases, out):
    """Filter scores of the users whose factors are `user_rows` for every item: a (n_users,
    n_items) C-contiguous block in the factors' dtype, one user's scores a row (the biases
    alone, exactly, when there are no factors). `out` is a flat buffer reused from batch to
    batch: fresh pages cost more than the product at 1M items."""
    n_items = B.shape[0]
    scores = out[: n_items * user_rows.shape[0]].reshape(user_rows.shape[0], n_items)
    if B.shape[1] == 0:
        scores[:] = biases[None, :]
    else:
        with np.errstate(over="ignore", invalid="ignore"):  # overflows are settled by the defined score
            np.matmul(user_rows, B.T, out=scores)
            if biases.shape[0]:
                scores += biases.astype(scores.dtype)[None, :]
    return scores


def rank_users(problem, users, batch_size, nthreads, max_rank=0, overlap=True, tie_mode=0, with_scores=False):
    """Rank the test items of `users` (sorted int64 row indices), `batch_size` users at a time;
    with max_rank = K > 0, ranks above K are only known to be above K (reported as K + 1).
    With `overlap`, a batch's scores are computed while the threads rank the batch before (two
    blocks of scores: BLAS's threads work instead of spinning while the ranking runs); given
    scores are asked for once the batch before is ranked (a score function may return the same
    buffer every call).
    tie_mode 1 / 2: every test item ranks before / after the other pool items of its score
    (_cpu_ranks.rank_test_items); with_scores: also the test entries' defined scores."""
    result = CpuRanking(problem.n_users, problem.X_test.nnz, with_scores)
    train, test, n_items = problem.X_train, problem.X_test, problem.n_items
    given = problem.score_rows is not None  # the scores themselves: F = 0 factors, no error
    # a non-personalised model has no factors (F = 0): the scores are the biases
    A, B, biases, has_bias = _model(problem.A, problem.B, None if given else problem.item_biases, problem.n_users,
                                    n_items)
    # a non-finite factor or bias shows as a NaN/inf score; keep it out of the error bound
    item_abs_max, bias_abs_max, items_finite = checked_magnitudes(B, biases)
    item_norm_max = max_row_norm(B)
    starts = range(0, users.shape[0], batch_size)
    blocks = [np.empty(0 if given else n_items * min(batch_size, max(1, users.shape[0])), dtype=B.dtype)
              for _ in range(2 if overlap and len(starts) > 1 else 1)]
    with ThreadPoolExecutor(max_workers=nthreads) as pool:
        ranking = []
        for number, begin in enumerate(starts):
            batch = users[begin: begin + batch_size]
            if given:  # the caller's rows may be a buffer that the next call overwrites: ranked first
                for job in ranking:
                    job.result()
                scores = np.ascontiguousarray(problem.score_rows(batch))
                user_rows, items = np.zeros((batch.shape[0], 0), scores.dtype), np.zeros((n_items, 0), scores.dtype)
            else:
                user_rows, items = np.ascontiguousarray(A[batch]), B
                scores = score_block(user_rows, B, biases, blocks[number % len(blocks)])
            tol = (score_tolerance(user_rows, item_abs_max, bias_abs_max, B.dtype, item_norm_max=item_norm_max)
                   if B.shape[1] else np.zeros(batch.shape[0]))
            for job in ranking:  # the batch before: its block is free again
                job.result()
            bounds = np.linspace(0, batch.shape[0], min(nthreads, batch.shape[0]) + 1).astype(np.int64)
            ranking = [pool.submit(rank_test_items, scores, user_rows, items, biases, has_bias, items_finite, tol, batch,
                                   train.indptr, train.indices, test.indptr, test.indices, result.ranks,
                                   result.pool_min, result.pool_max, result.nonfinite, problem.seed,
                                   problem.break_ties_with_noise, max_rank, int(lo), int(hi), given, tie_mode,
                                   result.test_scores)
                       for lo, hi in zip(bounds[:-1], bounds[1:]) if hi > lo]
            if len(blocks) == 1:
                for job in ranking:
                    job.result()
        for job in ranking:
            job.result()
    return result


def _model(A, B, biases, n_users, n_items):
    """(A, B, biases, has_bias) with F = 0 factors for a non-personalised model."""
    if B is None:
        A, B = np.zeros((n_users, 0)), np.zeros((n_items, 0))
    has_bias = biases is not None
    return A, B, (biases if has_bias else np.zeros(0)), has_bias


def top_k(train, users, A, B, biases, k, seed, noise, batch_size):
    """(items, scores) of shape (len(users), k): each user's k best pool items by defined score,
    ties by key; -1 and NaN where fewer than k pool items have a non-NaN score.

    The k-th largest finite filter score tau of a row bounds the k-th largest defined score
    from below by tau - tol, so every item of the top k has a filter score >= tau - 2 tol:
    those candidates, and every item whose filter score is not finite (an overflow), get
    their defined scores and the best k are kept."""
    n_items = train.shape[1]
    A, B, biases, has_bias = _model(A, B, biases, train.shape[0], n_items)
    item_abs_max, bias_abs_max = magnitudes(B, biases)
    item_norm_max = max_row_norm(B)
    out_items = np.full((users.shape[0], k), -1, dtype=np.int64)
    out_scores = np.full((users.shape[0], k), np.nan)
    block = np.empty(n_items * min(batch_size, max(1, users.shape[0])), dtype=B.dtype)
    for begin in range(0, users.shape[0], batch_size):
        batch = users[begin: begin + batch_size]
        user_rows = np.ascontiguousarray(A[batch])
        rows = score_block(user_rows, B, biases, block).astype(np.float64)
        local, entry, _ = row_entries(np, train.indptr, batch)
        trained = np.zeros(rows.shape, dtype=bool)
        trained[local, train.indices[entry]] = True
        unsure = ~np.isfinite(rows) & ~trained  # the filter overflowed (or inf - inf): always a candidate
        known = np.where(trained | unsure, -np.inf, rows)
        tol = (score_tolerance(user_rows, item_abs_max, bias_abs_max, B.dtype, item_norm_max=item_norm_max)
               if B.shape[1] else np.zeros(batch.shape[0]))
        if k <= n_items:  # at least k items score >= kth - tol by the definition: a top-k item does too
            kth = -np.partition(-known, k - 1, axis=1)[:, k - 1]
        else:
            kth = np.full(batch.shape[0], -np.inf)
        local, item = np.nonzero(((known >= (kth - 2.0 * tol)[:, None]) & ~trained) | unsure)
        item = item.astype(np.int64)
        user = np.ascontiguousarray(batch[local])
        exact = pair_scores(user, item, A, B, biases, has_bias)
        keys = tie_keys(user, item, seed, noise)
        out_items[begin: begin + batch_size], out_scores[begin: begin + batch_size] = select_top_k(
            np, local, item, exact, keys, batch.shape[0], k)
    return out_items, out_scores
