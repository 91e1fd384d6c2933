"""The evaluation engine: a validated Problem (the data) and Request (what to compute) in,
per-user metrics and NaN counts out.

Backend-independent: a backend (_cpu or _gpu) only has to rank the test items of the
evaluated users and report their pool statistics; the metrics are computed from those by
_metrics.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from . import _backend, _cpu
from ._metrics import metrics_from_ranks, nan_reasons
from ._registry import GAIN_METRICS, K_BOUND_IN_POOL, NAN_REASONS, WHOLE_POOL
from ._scores import row_entries
from ._ties import metrics_with_average_ties

DEFAULT_MAX_MEMORY = 256 * 2**20  # bytes of CPU score buffers (cpu_plan)
CPU_BLOCK_BYTES, CPU_BLOCK_USERS = 48 * 2**20, 64  # the CPU score block's size where the budget allows


@dataclass
class Problem:
    """A validated evaluation: interactions, and either a factor model or given scores."""
    X_train: object  # canonical CSR (see _validation.as_csr)
    X_test: object
    A: np.ndarray | None
    B: np.ndarray | None
    item_biases: np.ndarray | None
    seed: int
    break_ties_with_noise: bool
    device: tuple = ("cpu", None)  # _backend.resolve_device's answer; A, B, item_biases live there
    tf32: bool = False
    score_rows: object = None  # given scores instead of factors: user ids -> float64 (n, n_items) rows
    cache: dict = field(default_factory=dict)  # the GPU backend's copy of X_train, kept by an Evaluator

    @property
    def n_users(self):
        return self.X_test.shape[0]

    @property
    def n_items(self):
        return self.X_test.shape[1]


def cpu_plan(n_items, itemsize, max_memory=None, batch_size=None):
    """(users per CPU score block, blocks) for rows of `itemsize`-byte scores. A block is about
    CPU_BLOCK_BYTES (the cache holds it between the product and the ranking) but at least
    CPU_BLOCK_USERS users (the product reads every item's factors once a block); two such
    blocks where `max_memory` holds them (one is scored while the other is ranked), else one,
    as large as the budget allows up to that size (the ranking threads read the rows in place).
    An explicit budget below one user's row is an error; the default (DEFAULT_MAX_MEMORY) grows
    to that minimum for huge catalogues. `batch_size`, when given, is taken as it is."""
    row_bytes = max(1, n_items * itemsize)
    if max_memory is None:
        max_memory = max(DEFAULT_MAX_MEMORY, row_bytes)
    elif max_memory < row_bytes:
        raise ValueError(f"'max_memory' must be at least {row_bytes} bytes for {n_items} items (one user's row of "
                         f"{itemsize}-byte scores); got {max_memory}.")
    users = batch_size if batch_size is not None else max(CPU_BLOCK_USERS, CPU_BLOCK_BYTES // row_bytes)
    if 2 * users * row_bytes <= max_memory:
        return users, 2
    return (batch_size if batch_size is not None else min(users, max_memory // row_bytes)), 1


def on_device(problem):
    """The context of the problem's CUDA device (none for the CPU)."""
    return _backend.device_context(problem.device)


@dataclass(frozen=True)
class Request:
    """What to compute, validated: registry columns, cut-offs, the NaN options, the NDCG gain,
    and the resources (threads, batch size, workspace bytes; None: the backend's default)."""
    names: tuple
    cutoffs: np.ndarray
    min_pos_test: int = 1
    min_items_pool: int = 2
    consider_cold_start: bool = True
    gain: str = "linear"
    convention: object = None  # a _registry.Convention; None: gpureco's
    persistence: float = 0.8  # RBP's p
    tie_mode: int = 0  # _conventions.TIE_MODES: 0 ties by key, 1 optimistic, 2 pessimistic, 3 average
    nthreads: int = 1
    batch_size: int | None = None
    max_memory: int | None = None


def run(problem, request, users=None, warn=True):
    """({name: per-user values}, {NaN rule: number of users}): the metrics of `request.names`
    at `request.cutoffs` (2-d arrays (n_users, n_cut) for @K metrics, 1-d for the AUCs), with
    one warning for the users whose metrics are NaN (unless not `warn`). NumPy arrays on either
    backend: the metrics are always computed on the host (see _metrics); the front doors copy
    them to a device when asked. `users` (sorted, distinct int64 rows): only those users, one
    row each in that order; a user's values do not depend on which other users are evaluated."""
    with on_device(problem):
        values, counts = _evaluate(problem, request, users)
    if warn:
        warn_nan(counts, problem.n_users if users is None else users.shape[0], stacklevel=4)  # at the caller's call
    return values, counts


def _evaluate(problem, request, rows=None):
    names, cutoffs, max_memory = request.names, request.cutoffs, request.max_memory
    min_pos_test, min_items_pool = request.min_pos_test, request.min_items_pool
    consider_cold_start = request.consider_cold_start
    rows = np.arange(problem.n_users, dtype=np.int64) if rows is None else rows  # the users evaluated
    n_test = np.diff(problem.X_test.indptr)[rows]
    n_train = np.diff(problem.X_train.indptr)[rows]
    n_pool = problem.n_items - n_train
    no_scores = np.zeros(rows.shape[0])
    reason = nan_reasons(n_test, n_pool, n_train, np.zeros(rows.shape[0], bool), no_scores, no_scores + 1,
                         min_pos_test, min_items_pool, consider_cold_start)
    users = rows[reason == 0]  # only these need scores
    # ties="average" ranks twice, each test item before and after the other items of its score
    modes = (1, 2) if request.tie_mode == 3 else (request.tie_mode,)
    parts = []  # (reason, values) of the users `rows` in each part of the rows, in order

    def consume(lo, hi, ranking, last=None):
        parts.append(_part_metrics(problem, request, rows, n_test, n_pool, n_train, lo, hi, ranking, last))

    if problem.device[0] == "gpu":
        from . import _gpu
        scorer = (_gpu.GivenScores(problem.score_rows) if problem.score_rows is not None
                  else _gpu.FactorScores(problem.A, problem.B, problem.item_biases, problem.tf32))
        rankings = [_gpu.rank_users(problem, users, scorer, request.batch_size, max_memory or _gpu.DEFAULT_MAX_MEMORY,
                                    mode, with_scores=modes == (1, 2) and mode == 1,
                                    consume=consume if len(modes) == 1 else None)  # a batch's metrics as the next runs
                    for mode in modes]
    else:
        # given scores: the caller's rows and their float64 conversion, a batch ranked and the next
        itemsize = 16 if problem.score_rows is not None else 8 if problem.B is None else problem.B.dtype.itemsize
        batch_size, blocks = cpu_plan(problem.n_items, itemsize, max_memory, request.batch_size)
        # without the AUCs, no metric looks past the largest cut-off: ranks beyond it need not be exact
        # (RPrec looks at the top |T|; bpref and the AUCs at the whole pool; ties="average" at the
        # whole tie group that a cut-off falls into)
        # (a K past the catalogue gives exact ranks, as K = n_items does: its heap would hold K scores)
        max_rank = 0 if set(WHOLE_POOL) & set(names) or len(modes) == 2 else int(min(max(cutoffs), problem.n_items))
        max_rank = max(max_rank, int(n_test.max(initial=0))) if max_rank and "RPrec" in names else max_rank
        rankings = [_cpu.rank_users(problem, users, batch_size, request.nthreads, max_rank, overlap=blocks == 2,
                                    tie_mode=mode, with_scores=modes == (1, 2) and mode == 1) for mode in modes]
    if not parts:  # all rows at once
        consume(0, problem.n_users, *(ranking.host() for ranking in rankings))
    reason = np.concatenate([part[0] for part in parts])
    values = {name: np.concatenate([part[1][name] for part in parts]) for name in parts[0][1]}
    ndcg_nan = np.isnan(values["NDCG@K"][:, 0]) if "NDCG@K" in values else None
    counts = nan_counts(set(values), reason, n_pool, n_test, int(max(cutoffs, default=0)), ndcg_nan)
    return values, counts


def _part_metrics(problem, request, rows, n_test, n_pool, n_train, lo, hi, ranking, last=None):
    """(reason, values) of the users `rows` (sorted) that lie in lo .. hi - 1, from `ranking`:
    the ranks, pool statistics (and test scores) of those rows and their test entries, on the
    host (last: ties="average"'s second ranking). Each user's are computed alone: the same
    numbers for any parts."""
    a, b = np.searchsorted(rows, [lo, hi])
    indptr, part = problem.X_test.indptr, slice(a, b)
    r, e_lo = rows[part], int(indptr[lo])
    # integers from here on: the metrics are computed on the host, in one defined order
    nonfinite = ranking.nonfinite[r - lo].astype(bool)
    pool_min, pool_max = ranking.pool_min[r - lo], ranking.pool_max[r - lo]
    ranks, gains = ranking.ranks, problem.X_test.data[e_lo: int(indptr[hi])]
    if last is not None:
        last, scores = last.ranks, ranking.test_scores
    if b - a < hi - lo:  # the test entries of `r`, in their order
        entries = row_entries(np, indptr, r)[1]
        ranks, gains = ranks[entries - e_lo], problem.X_test.data[entries]
        if last is not None:
            last, scores = last[entries - e_lo], scores[entries - e_lo]
    n_test, n_pool, n_train = n_test[part], n_pool[part], n_train[part]
    reason = nan_reasons(n_test, n_pool, n_train, nonfinite, pool_min, pool_max, request.min_pos_test,
                         request.min_items_pool, request.consider_cold_start)
    cutoffs = np.asarray(request.cutoffs, dtype=np.int64)
    if last is not None:
        values = metrics_with_average_ties(ranks, last, scores, gains.astype(np.float64), n_test, n_pool, cutoffs,
                                           request.names, reason == 0, gain=request.gain,
                                           convention=request.convention, persistence=request.persistence)
    else:
        values = metrics_from_ranks(ranks, gains.astype(np.float64), n_test, n_pool, cutoffs, request.names,
                                    reason == 0, gain=request.gain, convention=request.convention,
                                    persistence=request.persistence)
    return reason, values


def host_array(x):
    """x as a NumPy array (a copy from the device for CuPy arrays)."""
    return x if isinstance(x, np.ndarray) else x.get()


def nan_counts(names, reason, n_pool, n_test, max_k, ndcg_nan=None):
    """Users per NaN rule: whole-user rules 1-5 (first that applies), then partial rules 6-8
    (host arrays; ndcg_nan: whether each user's NDCG is NaN, when NDCG was computed)."""
    counts = {code: int(np.sum(reason == code)) for code in range(1, 6)}
    ok = reason == 0
    counts[6] = int(np.sum(ok & (n_pool == n_test))) if set(names) - set(GAIN_METRICS) else 0
    counts[7] = int(np.sum(ok & (n_pool <= max_k) & (n_pool > n_test))) if set(K_BOUND_IN_POOL) & set(names) else 0
    # NDCG of a valid user is NaN only by rule 8 (no positive gain), at every cut-off alike
    counts[8] = int(np.sum(ok & ndcg_nan)) if ndcg_nan is not None else 0
    return {code: n for code, n in counts.items() if n}


def warn_nan(counts, n_users, stacklevel):
    """One warning for the whole call, with the number of users under each NaN rule (stacklevel:
    the frame of the caller's own call)."""
    if not counts:
        return
    whole = sum(n for code, n in counts.items() if code <= 5)
    lines = "; ".join(f"rule {code} ({NAN_REASONS[code]}): {n} user{'s' if n > 1 else ''}"
                      for code, n in sorted(counts.items()))
    warnings.warn(f"gpureco: {whole} of {n_users} users have every metric NaN. Users with NaN metrics, by rule "
                  f"of docs/metrics.md: {lines}.", RuntimeWarning, stacklevel=stacklevel)


def top_k(problem, users, k, batch_size=None, max_memory=None):
    """(items, scores) of shape (len(users), k): each of `users`' k best pool items by defined
    score (ties by key), -1 and NaN past the pool's non-NaN items; CuPy arrays on the GPU
    backend. The pool is the complement of problem.X_train."""
    with on_device(problem):
        if problem.device[0] == "gpu":
            from . import _gpu
            scorer = _gpu.FactorScores(problem.A, problem.B, problem.item_biases, problem.tf32, top_k=True)
            return _gpu.top_k(problem.X_train, users, scorer, k, problem.seed, problem.break_ties_with_noise,
                              batch_size, max_memory or _gpu.DEFAULT_MAX_MEMORY)
        rows = batch_size or max(1, int((max_memory or DEFAULT_MAX_MEMORY) // (24 * max(1, problem.n_items))))
        return _cpu.top_k(problem.X_train, users, problem.A, problem.B, problem.item_biases, k, problem.seed,
                          problem.break_ties_with_noise, rows)
