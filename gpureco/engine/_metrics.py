"""Every accuracy metric, once, as a function of the ranks of the test items.

The one routine that turns integers (ranks, |T|, pool sizes) into the floats gpureco
returns, for both backends and for evaluate_lists. It runs on the host, in an operation
order written down here and in _metrics_loop.pyx, so its numbers are the same for any
backend, batch size, user order, thread count and run (docs/architecture.md, the
determinism rule):

- each user's test entries are taken in rank order (ranks are distinct within a user);
- every sum is a running sum over them in that order, one addition after another, and a
  metric at cut-off K is read off when the sum has taken every entry of rank <= K (so it
  does not depend on the other cut-offs asked for); never a pairwise, parallel or atomic
  reduction (CuPy's bincount adds with float atomics in arrival order, its cumsum is a
  parallel scan, NumPy's np.sum is pairwise);
- the NDCG discounts divide by log2(i + 1) (or a convention's discount) read from a table
  of correctly rounded values (`log2_table`, `discount_table`); RBP's persistence**(i - 1)
  comes from repeated multiplication (`persistence_powers`), not from pow, not from a vectorised log2, whose last bit depends on the CPU's SIMD
  (and on the GPU, on CUDA's libdevice);
- everything else is one IEEE-754 operation (+, -, *, /), correctly rounded. The one
  exception is gain="exponential" with non-integer X_test values: 2**g - 1 is then
  NumPy's expm1(g ln 2) on the host (integer values are exact).

The formulas are those of docs/metrics.md; a user's metrics are NaN for the reasons listed
there (_registry.NAN_REASONS), which `nan_reasons` and `metrics_from_ranks` apply.
"""
from __future__ import annotations

import functools
import os
from concurrent.futures import ThreadPoolExecutor
from decimal import Context, Decimal

import numpy as np

from ._metrics_loop import rank_metrics
from ._registry import RANK_METRICS

_THREADS = min(16, os.cpu_count() or 1)
_ENTRIES_PER_THREAD = 250_000  # below this a thread costs more than it saves


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


def discount_table(n, discount="log2(i+1)"):
    """float64 (n + 1,): the DCG divisor at each rank i = 0 .. n, read from the correctly
    rounded log2 table: log2(i + 1) (Järvelin and Kekäläinen), or LensKit's log2(max(i, 2))."""
    table = log2_table(n + 1)
    if discount == "log2(max(i,2))":
        return np.maximum(table[: n + 1], 1.0)  # log2(2) = 1 exactly; log2(i) >= 1 from i = 2
    return table[1: n + 2]


def persistence_powers(n, persistence):
    """float64 (n + 1,): entry i = persistence**(i - 1) for i = 1 .. n (entry 0 unused), each
    the previous times `persistence`, one rounded multiplication after another (no pow)."""
    powers = [0.0, 1.0]
    for _ in range(n - 1):
        powers.append(powers[-1] * persistence)
    return np.array(powers[: n + 1], dtype=np.float64)


def transformed_gains(gains, gain):
    """The NDCG gains of X_test values: "linear" (the values), "binary" (1 where positive) or
    "exponential" (2**g - 1: exactly, by ldexp, for integer g; expm1(g ln 2) otherwise, which
    stays positive and accurate for tiny positive g, where 2**g - 1 gives 0)."""
    if gain == "exponential":
        whole = gains == np.floor(gains)
        exponent = np.where(whole, np.clip(gains, -1100, 1100), 0).astype(np.int64)
        return np.where(whole, np.ldexp(1.0, exponent) - 1.0, np.expm1(np.where(whole, 0.0, gains) * np.log(2.0)))
    if gain == "binary":
        return (gains > 0).astype(np.float64)
    return gains


def metrics_from_ranks(ranks, gains, n_test, n_pool, cutoffs, names, valid, gain="linear", *, length=None,
                       convention=None, persistence=0.8):
    """The requested metrics of every user, at every cut-off.

    ranks : int64 (nnz_test,), the rank of each test entry in its user's pool, entries
        grouped by user in user order (CSR order); ignored for users where `valid` is False.
    gains : float64 (nnz_test,), the X_test values (NDCG gains before the `gain` transform).
    n_test, n_pool : int64 (n_users,).
    cutoffs : int64 (n_cut,), increasing; the K of each column.
    names : the registry columns wanted ("P@K", ..., "PR_AUC", "DCG@K", ..., "bpref").
    valid : bool (n_users,), users to whom no whole-user NaN rule (1-5) applies.
    length : int64 (n_users,), the length of each user's list (default: n_pool, a ranking of
        the whole pool); the denominators of the conventions that divide by it.
    convention : a _registry.Convention (default: gpureco's), the discount and denominators.
    persistence : RBP's persistence p, in (0, 1).

    Returns {name: float64 array (n_users, n_cut) for @K metrics, (n_users,) for the others}.
    """
    from ._registry import CONVENTIONS  # (the registry imports nothing from here)
    convention = convention or CONVENTIONS["gpureco"]
    gains = transformed_gains(gains, gain)
    n_users, n_cut = n_test.shape[0], cutoffs.shape[0]
    out = {name: np.full((n_users, n_cut) if name.endswith("@K") else n_users, np.nan) for name in names}
    order = [m.column for m in RANK_METRICS]
    at_k, per_user = np.zeros((0, 0)), np.zeros(0)  # stand-ins for the metrics not asked for
    outputs = [out.get(name, at_k if name.endswith("@K") else per_user) for name in order]
    wanted = np.array([name in out for name in order], np.uint8)
    modes = np.array([convention.precision == "list", ("T", "list", "K").index(convention.recall),
                      ("T", "list", "hits", "K").index(convention.ap), convention.rbp == "graded"], np.uint8)
    ranks, gains = np.ascontiguousarray(ranks, dtype=np.int64), np.ascontiguousarray(gains, dtype=np.float64)
    n_test, n_pool = np.ascontiguousarray(n_test, dtype=np.int64), np.ascontiguousarray(n_pool, dtype=np.int64)
    length = n_pool if length is None else np.ascontiguousarray(length, dtype=np.int64)
    cutoffs, valid = np.ascontiguousarray(cutoffs, dtype=np.int64), np.ascontiguousarray(valid, dtype=np.uint8)
    max_k = int(cutoffs.max(initial=0))
    # the tables as far as a cut-off reaches into them: a rank within it, an ideal position within |T| (their entries
    # do not depend on the tables' length: NDCG@10**7 of 8 items builds 10 entries, not 10**7)
    used = ranks[ranks <= max_k]
    reach = min(max_k, max(int(used.max(initial=0)), int(n_test.max(initial=0)), 1))
    discount = discount_table(reach + 1, convention.discount)
    powers = persistence_powers(reach + 1, float(persistence))
    entry_start = np.concatenate([[0], np.cumsum(n_test)])

    def run(begin, end):  # users begin .. end - 1; every user is computed alone, so chunks are independent
        rank_metrics(ranks[entry_start[begin]: entry_start[end]], gains[entry_start[begin]: entry_start[end]],
                     n_test[begin:end], n_pool[begin:end], length[begin:end], cutoffs, discount, powers,
                     float(persistence), valid[begin:end],
                     *(a[begin:end] if a.shape[0] else a for a in outputs), wanted, modes)

    chunks = max(1, min(_THREADS, ranks.shape[0] // _ENTRIES_PER_THREAD))
    bounds = np.linspace(0, n_users, chunks + 1).astype(np.int64)
    if chunks == 1:
        run(0, n_users)
    else:
        with ThreadPoolExecutor(chunks) as pool:  # the loop releases the GIL
            list(pool.map(run, bounds[:-1], bounds[1:]))
    return out
