"""A NumPy model of the GPU backend's device, for machines without one (CI).

`fake_cupy()` is a module that answers the CuPy calls gpureco/engine/_gpu.py makes with
NumPy, and whose RawModule functions are the kernels of kernels/*.cu restated in NumPy,
block by block, with the same arguments. With it, the GPU backend's orchestration (batches,
tiles, test-item sorting, prefix sums, pool-statistics fallback, top-K candidates and
selection, out-of-memory halving) runs against the CPU engine. The real kernels run under
the host emulation of tests/emulation; on a GPU, tests/engine/test_gpu.py runs them.

The model's device is adversarial where a real GPU's float arithmetic is unspecified:
`bincount` with float weights adds in a random order (float atomics), `cumsum` of floats is
a blocked scan with random blocks (a parallel scan), and `log2`, `log`, `exp2` and `power`
are off by one unit in the last place for random elements (CUDA's math library is not
correctly rounded). A float that gpureco returns after passing through one of them differs
from the CPU's, run to run: the determinism rule (docs/architecture.md) is tested here.
"""
import contextlib
import types

import numpy as np

from gpureco.engine._cpu_ranks import pair_scores, tie_keys
from gpureco.engine._scores import order_key, split_tf32

TOPK_CHUNK, TOPK_CAPACITY = 4096, 8192  # kernels/topk_tile.cu


class OutOfMemoryError(MemoryError):
    pass


def _is_null(x):
    return not isinstance(x, np.ndarray)


def _defined(users, items, A, B, n_factors, bias):
    has_bias = not _is_null(bias)
    if int(n_factors) == 0:
        return (0.0 + bias[items]) if has_bias else np.zeros(items.shape[0])
    return pair_scores(np.ascontiguousarray(users, dtype=np.int64), np.ascontiguousarray(items, dtype=np.int64),
                       A, B, bias if has_bias else np.zeros(0), has_bias)


def _pool(train_indptr, train_indices, u, begin, n):
    """Items begin .. begin + n - 1 that are not training items of user u."""
    items = np.arange(begin, begin + n)
    return items[~np.isin(items, train_indices[train_indptr[u]: train_indptr[u + 1]])]


def _filter(S, ld, given, begin, b, local, bias):
    """The scores of tile positions `local` for batch row b, as the kernels read them (float64)."""
    if int(ld) == 0:  # one row for every user (a non-personalised model's biases)
        row = S
    elif S.ndim == 2:  # row b of the tile, also when it is a view into wider rows (given scores)
        row = S[b]
    else:
        row = S.reshape(-1)[b * int(ld): (b + 1) * int(ld)]
    raw = row[local]
    if not given and not _is_null(bias):
        raw = raw + bias[begin + local].astype(raw.dtype)
    return raw.astype(np.float64)


def _reduce_stats(b, s, pool_min, pool_max, nonfinite):
    if s.shape[0] == 0:
        return
    pool_min[b] = min(pool_min[b], order_key(np, np.array([np.fmin.reduce(s)]))[0])
    pool_max[b] = max(pool_max[b], order_key(np, np.array([np.fmax.reduce(s)]))[0])
    nonfinite[b] |= int(not np.all(np.isfinite(s)))


def rank_tile(grid, block, args):
    (S, ld, given, begin, n_tile, users, train_indptr, train_indices, tests_begin, test_scores, test_keys, cnt,
     pool_min, pool_max, nonfinite, tol, A, B, n_factors, bias, seed, noise) = args
    begin, n_tile = int(begin), int(n_tile)
    for b in range(grid[0]):
        u = int(users[b])
        items = _pool(train_indptr, train_indices, u, begin, n_tile)
        s = _filter(S, ld, given, begin, b, items - begin, bias)
        _reduce_stats(b, s, pool_min, pool_max, nonfinite)
        t0, m = int(tests_begin[b]), int(tests_begin[b + 1] - tests_begin[b])
        if m == 0:
            continue
        ts, tk, tl = test_scores[t0: t0 + m], test_keys[t0: t0 + m], tol[b]
        finite = np.isfinite(s)
        keep = (s >= ts[-1] - tl) | ~finite
        items, s, finite = items[keep], s[keep], finite[keep]
        c = np.searchsorted(-ts, -s, side="left")  # #{ts > s}
        above, below = ts[np.maximum(c - 1, 0)], ts[np.minimum(c, m - 1)]
        near = ((c > 0) & (above <= s + tl)) | ((c < m) & (below >= s - tl)) | ~finite
        if np.any(near):
            e = s[near] if given else _defined(np.full(int(near.sum()), u), items[near], A, B, n_factors, bias)
            keys = tie_keys(np.full(int(near.sum()), u, dtype=np.int64), items[near].astype(np.int64), int(seed),
                            int(noise))
            c[near] = [int(np.sum((ts > x) | ((ts == x) & (tk < key)))) for x, key in zip(e, keys)]
        np.add.at(cnt, t0 + c[c < m], 1)


def fused_rank(grid, block, args, shared_mem=0):
    """kernels/fused_rank.cu: rank_tile over the batch's whole rows, its filter scores U B^T in
    float32 (by BLAS here: any order within the bound); U holds the batch's factors, row b for
    users[b]. Launched with its dynamic shared memory (the stage: _gpu.FUSED_STAGE_BYTES; none
    before it, at the commits bench_commits.py runs on this model)."""
    from gpureco.engine import _gpu
    if shared_mem != getattr(_gpu, "FUSED_STAGE_BYTES", 0):
        raise ValueError(f"fused_rank needs {getattr(_gpu, 'FUSED_STAGE_BYTES', 0)} bytes of dynamic shared memory; "
                         f"launched with {shared_mem}")
    (U, B, n_factors, bias, n_items, span, nb, users, train_indptr, train_indices, tests_begin, test_scores, test_keys,
     cnt, pool_min, pool_max, nonfinite, tol, item_norm, item_terms, seed, noise) = args  # (the bound per item: speed only)
    nb, n_factors = int(nb), int(n_factors)
    U = U.reshape(nb, n_factors)
    A = np.zeros((int(users.max(initial=-1)) + 1, n_factors), dtype=U.dtype)  # A[users[b]] = U[b]
    A[users] = U
    S = np.matmul(U, B.reshape(-1, n_factors).T)
    rank_tile((nb,), block, (S, n_items, np.int32(0), np.int64(0), n_items, users, train_indptr, train_indices,
                             tests_begin, test_scores, test_keys, cnt, pool_min, pool_max, nonfinite, tol, A, B,
                             np.int64(n_factors), bias, seed, noise))


def pair_scores_kernel(grid, block, args):
    users, items, n, A, B, n_factors, bias, seed, noise, scores, keys = args
    if not _is_null(scores):
        scores[:] = _defined(users, items, A, B, n_factors, bias)
    keys[:] = tie_keys(users.astype(np.int64), items.astype(np.int64), int(seed), int(noise))


def sort_tests(grid, block, args):
    """kernels/exact_scores.cu sort_tests: each user's test entries by defined score (order_key,
    larger first), then tie key (all tie_key unless use_keys), then entry, by NumPy's lexsort."""
    tests_begin, scores, keys, entry, tie_key, use_keys, scores_out, keys_out, entry_out = args
    for b in range(grid[0]):
        t0, t1 = int(tests_begin[b]), int(tests_begin[b + 1])
        k = keys[t0:t1] if use_keys else np.full(t1 - t0, tie_key, dtype=np.uint64)
        order = np.lexsort((np.arange(t1 - t0), k, ~order_key(np, scores[t0:t1])))
        scores_out[t0:t1], keys_out[t0:t1], entry_out[t0:t1] = scores[t0:t1][order], k[order], entry[t0:t1][order]


def topk_gather(grid, block, args):
    """kernels/topk_tile.cu topk_gather: row b's buffer slots 0 .. m - 1 (m from offsets) copied to
    entries offsets[b] .. of the flat arrays, with b."""
    offsets, cand_items, cand_scores, local, items, scores = args
    for b in range(grid[0]):
        c0, c1 = int(offsets[b]), int(offsets[b + 1])
        local[c0:c1] = b
        items[c0:c1] = cand_items[b * TOPK_CAPACITY: b * TOPK_CAPACITY + c1 - c0]
        scores[c0:c1] = cand_scores[b * TOPK_CAPACITY: b * TOPK_CAPACITY + c1 - c0]


def topk_select(grid, block, args):
    """kernels/topk_tile.cu topk_select: each row's candidates (offsets) by defined score (order_key,
    larger first), then tie key, then entry, by NumPy's lexsort; NaN scores left out; the first k
    written to the row's k slots (the score plus 0.0), the others left as they are."""
    offsets, items, scores, keys, k, out_items, out_scores = args
    k, out_items, out_scores = int(k), out_items.reshape(-1), out_scores.reshape(-1)  # (views: rows of the output)
    for b in range(grid[0]):
        c0, c1 = int(offsets[b]), int(offsets[b + 1])
        s = scores[c0:c1]
        order = np.lexsort((np.arange(c1 - c0), keys[c0:c1], ~order_key(np, s)))
        order = order[~np.isnan(s[order])][:k]
        out_items[b * k: b * k + order.shape[0]] = items[c0:c1][order]
        out_scores[b * k: b * k + order.shape[0]] = s[order] + 0.0


def _pool_stats(u, n_items, train_indptr, train_indices, A, B, n_factors, bias):
    """(min, max, non-finite) of the defined scores of user u's pool, as _reduce_stats folds them,
    from +inf and -inf as the kernel's (an empty pool: those)."""
    items = _pool(train_indptr, train_indices, u, 0, int(n_items))
    stats = order_key(np, np.array([np.inf])), order_key(np, np.array([-np.inf])), np.zeros(1, np.int32)
    _reduce_stats(0, _defined(np.full(items.shape[0], u), items, A, B, n_factors, bias), *stats)
    return stats


def finish_batch(grid, block, args):
    """kernels/exact_scores.cu finish_batch: the pool statistics (recounted from the defined
    scores where the filter cannot settle them) and the test items' ranks of a batch, written
    at the users' rows and test entries."""
    (users, tests_begin, counts, test_scores, entry, tol, given, tie_mode, n_items, train_indptr, train_indices, A, B,
     n_factors, bias, pool_min, pool_max, nonfinite, ranks, scores_out, user_min, user_max, user_bad) = args
    for b in range(grid[0]):
        u = int(users[b])
        mn, mx = from_order_key(pool_min[b: b + 1])[0], from_order_key(pool_max[b: b + 1])[0]
        bad = nonfinite[b] != 0 or np.isinf(mn) or np.isinf(mx)
        if not given and (bad or not mx - mn > 2.0 * tol[b]):
            stats = _pool_stats(u, n_items, train_indptr, train_indices, A, B, n_factors, bias)
            pool_min[b], pool_max[b], nonfinite[b] = (s[0] for s in stats)
            mn, mx = from_order_key(pool_min[b: b + 1])[0], from_order_key(pool_max[b: b + 1])[0]
        user_min[u], user_max[u] = mn, mx
        user_bad[u] = nonfinite[b] != 0 or np.isinf(mn) or np.isinf(mx)
        t0, t1 = int(tests_begin[b]), int(tests_begin[b + 1])
        if t1 == t0:
            continue
        above = np.cumsum(counts[t0:t1].astype(np.int64))  # integers: a scan is exact
        s = test_scores[t0:t1]
        start = np.ones(t1 - t0, dtype=bool)
        start[1:] = s[1:] != s[:-1]  # tie groups (NaN != NaN: each NaN its own)
        first = np.flatnonzero(start)
        group = np.cumsum(start) - 1
        ends = np.append(first[1:], t1 - t0)
        position = np.arange(t1 - t0)
        r = (above + 1 + (position - first[group]) if tie_mode == 1
             else above + 1 - (ends[group] - position) if tie_mode == 2 else above)
        ranks[entry[t0:t1]] = r
        if not _is_null(scores_out):
            scores_out[entry[t0:t1]] = s


def from_order_key(keys):
    """kernels/common.cuh gr_from_order_key, elementwise (the inverse of _scores.order_key)."""
    keys = np.asarray(keys, dtype=np.uint64)
    bits = np.where((keys >> np.uint64(63)).astype(bool), keys & np.uint64((1 << 63) - 1), ~keys)
    return bits.view(np.float64)


def abs_max_columns(grid, block, args):
    X, n_rows, n_cols, rows_per_block, out = args
    X = X.reshape(int(n_rows), int(n_cols)).astype(np.float64)
    top = np.where(np.isfinite(X), np.abs(X), 0.0).max(axis=0, initial=0.0)
    out[:] = np.maximum(out, top.view(np.uint64))


def _row_sums_sq(X, n_rows, n_cols):
    """(each row's in-order float64 sum of squares, whether the row is finite)."""
    X = X.reshape(int(n_rows), int(n_cols)).astype(np.float64)
    acc = np.zeros(X.shape[0])
    with np.errstate(over="ignore", invalid="ignore"):
        for f in range(X.shape[1]):
            acc = acc + X[:, f] * X[:, f]
    return acc, np.isfinite(X).all(axis=1)


def max_row_norm_sq(grid, block, args):
    """The largest in-order float64 sum of squares of a row with no non-finite value."""
    X, n_rows, n_cols, out = args
    acc, finite = _row_sums_sq(X, n_rows, n_cols)
    top = np.array([acc[finite].max(initial=0.0)])
    out[:] = np.maximum(out, top.view(np.uint64))


def row_norms(grid, block, args):
    """Each row's norm: the square root of its in-order float64 sum of squares, +inf for a row
    with a non-finite value."""
    X, n_rows, n_cols, out = args
    acc, finite = _row_sums_sq(X, n_rows, n_cols)
    out[:] = np.where(finite, np.sqrt(acc), np.inf)


def split_tf32_kernel(grid, block, args):
    """kernels/magnitudes.cu split_tf32_f32: _scores.split_tf32 of X into out (as bits)."""
    X, n_rows, n_cols, out, lo_first = args
    X = np.asarray(X).reshape(int(n_rows), int(n_cols))
    parts = np.empty((int(n_rows), 2 * int(n_cols)), dtype=np.float32)
    split_tf32(np, X, parts, lo_first=bool(lo_first))
    out.reshape(-1)[: parts.size] = parts.reshape(-1).view(np.uint32)


def transpose_kernel(grid, block, args):
    """kernels/magnitudes.cu transpose_f32: out = X^T, as bits."""
    X, n_rows, n_cols, out = args
    out.reshape(int(n_cols), int(n_rows))[...] = np.asarray(X).reshape(int(n_rows), int(n_cols)).T


def _shrink(b, k, band, cs, ci, count, tau):
    """kernels/topk_tile.cu topk_shrink: tau up to the k-th largest of user b's count[b] >= k
    candidates, only those at or above tau - band kept; returns their number."""
    n = int(count[b])
    tau[b] = max(tau[b], np.sort(cs[:n])[::-1][k - 1])
    kept = cs[:n] >= tau[b] - band
    count[b] = n = int(kept.sum())
    cs[:n], ci[:n] = cs[: kept.shape[0]][kept].copy(), ci[: kept.shape[0]][kept].copy()
    return n


def topk_finish(grid, block, args):
    """kernels/topk_tile.cu topk_finish: each user's buffer shrunk to tau - 2 tol (at least k held),
    or flagged where it overflowed."""
    k, tol, cand_scores, cand_items, count, tau, overflow = args
    for b in range(grid[0]):
        if overflow[b] or count[b] > TOPK_CAPACITY:
            overflow[b] = 1
        elif count[b] >= int(k):
            _shrink(b, int(k), 2.0 * tol[b], cand_scores[b * TOPK_CAPACITY: (b + 1) * TOPK_CAPACITY],
                    cand_items[b * TOPK_CAPACITY: (b + 1) * TOPK_CAPACITY], count, tau)


def fused_topk(grid, block, args):
    """kernels/topk_tile.cu fused_topk_f32 and fused_topk_tf32: every pool item of a user not flagged before the launch
    whose float32 filter score (U B^T by BLAS, plus the bias in float32) is at least its
    threshold, appended to its buffer (in item order here; the kernel's order is any), count
    going on past TOPK_CAPACITY; a non-finite pool score flags the user."""
    (U, B, n_factors, bias, n_items, span, nb, users, train_indptr, train_indices, threshold, cand_scores, cand_items,
     count, overflow) = args
    nb, n_factors, n_items = int(nb), int(n_factors), int(n_items)
    S = np.matmul(U.reshape(nb, n_factors), B.reshape(-1, n_factors).T)
    if not _is_null(bias):
        S = S + bias.astype(np.float32)
    skipped = overflow[:nb].copy()
    for b in range(nb):
        if skipped[b]:
            continue
        items = _pool(train_indptr, train_indices, int(users[b]), 0, n_items)
        s = S[b, items]
        if not np.all(np.isfinite(s)):
            overflow[b] = 1
        take = np.isfinite(s) & (s >= threshold[b])
        n, added = int(count[b]), int(take.sum())
        room = max(0, min(added, TOPK_CAPACITY - n))
        cand_scores[b * TOPK_CAPACITY + n: b * TOPK_CAPACITY + n + room] = s[take][:room]
        cand_items[b * TOPK_CAPACITY + n: b * TOPK_CAPACITY + n + room] = items[take][:room]
        count[b] = n + added


def topk_tile(grid, block, args):
    (S, ld, given, begin, n_tile, users, train_indptr, train_indices, bias, tol, k, cand_scores, cand_items, count,
     tau, overflow) = args
    begin, n_tile, k = int(begin), int(n_tile), int(k)
    for b in range(grid[0]):
        if overflow[b]:
            continue
        band = 2.0 * tol[b]
        cs = cand_scores[b * TOPK_CAPACITY: (b + 1) * TOPK_CAPACITY]
        ci = cand_items[b * TOPK_CAPACITY: (b + 1) * TOPK_CAPACITY]
        for c0 in range(0, n_tile, TOPK_CHUNK):
            n = int(count[b])
            if n + TOPK_CHUNK > TOPK_CAPACITY:
                n = _shrink(b, k, band, cs, ci, count, tau)
                if n + TOPK_CHUNK > TOPK_CAPACITY:
                    overflow[b] = 1
                    break
            items = _pool(train_indptr, train_indices, int(users[b]), begin + c0, min(TOPK_CHUNK, n_tile - c0))
            s = _filter(S, ld, given, begin, b, items - begin, bias)
            if not given and not np.all(np.isfinite(s)):  # the filter overflowed: the full-row path
                overflow[b] = 1
                break
            take = s >= tau[b] - band
            added = int(take.sum())
            cs[n: n + added], ci[n: n + added] = s[take], items[take]
            count[b] = n + added


class DeviceArray(np.ndarray):
    """The model's device arrays: NumPy arrays of their own type, so that a host array is not
    taken for a device one (isinstance(x, cupy.ndarray)) and really goes through asarray."""

    def get(self):
        """A host copy, as cupy.ndarray.get()."""
        return np.array(self.view(np.ndarray))


def asnumpy(a, stream=None):
    """cupy.asnumpy: a host copy; on a stream of the model's (Stream), which must have waited for
    an event first (on a GPU its copy would otherwise not wait for the kernels before it)."""
    if stream is not None and not stream.waited:
        raise AssertionError("model: a copy on a stream that waited for no event")
    return np.array(np.asarray(a))


class Event:  # cupy.cuda.Event: the model's kernels run at their launch, so an event only has to be recorded
    def __init__(self, block=False, disable_timing=False, interprocess=False):
        self.recorded = False

    def record(self, stream=None):
        self.recorded = True


class Stream:  # cupy.cuda.Stream other than the current one: its copies must wait for an event
    def __init__(self, null=False, non_blocking=False, ptds=False, priority=None):
        self.waited = False

    def wait_event(self, event):
        assert event is not None and event.recorded, "model: a stream waits for an event never recorded"
        self.waited = True


def _numbers_only(convert):
    def checked(*args, **kwargs):
        array = convert(*args, **kwargs)
        if array.dtype.kind not in "biufc":
            raise ValueError(f"Unsupported dtype {array.dtype}")  # CuPy's words, which must never reach a user
        return array.view(DeviceArray)
    return checked


def _adversarial_float_arithmetic(cupy, rng):
    """Float operations whose order or rounding a real GPU does not specify, made to vary."""
    def bincount(x, weights=None, minlength=0):
        if np.asarray(x).shape[0] == 0:  # CuPy before 14.2 (cupy/cupy#8116), which gpureco's pin allows
            raise ValueError("zero-size array to reduction operation cupy_max which has no identity")
        if weights is None or np.asarray(weights).dtype.kind != "f":
            return np.bincount(x, weights, minlength)
        order = rng.permutation(np.asarray(x).shape[0])  # atomics add in arrival order
        return np.bincount(np.asarray(x)[order], np.asarray(weights)[order], minlength)

    def cumsum(a, axis=None, dtype=None, out=None):
        result = np.cumsum(a, axis=axis, dtype=dtype, out=out)
        if result.dtype.kind != "f" or result.ndim != 1 or result.shape[0] < 4:
            return result
        block = int(rng.integers(2, result.shape[0]))  # a scan by blocks: block sums first
        values = np.asarray(a, dtype=result.dtype)
        for begin in range(block, result.shape[0], block):
            result[begin: begin + block] = np.cumsum(values[begin: begin + block]) + result[begin - 1]
        return result

    def off_by_an_ulp(function):
        def inexact(*args, **kwargs):
            result = np.asarray(function(*args, **kwargs))
            if result.dtype.kind == "f" and result.size:
                nudge = rng.random(result.shape) < 0.3
                result = np.where(nudge, np.nextafter(result, np.inf), result)
            return result
        return inexact

    cupy.bincount, cupy.cumsum = bincount, cumsum
    for name in ("asarray", "array", "ascontiguousarray"):  # CuPy holds numbers only, and says so its own way
        setattr(cupy, name, _numbers_only(getattr(np, name)))
    cupy.ndarray = DeviceArray
    for name in ("log2", "log", "exp2", "power"):
        setattr(cupy, name, off_by_an_ulp(getattr(np, name)))


class _Module:
    functions = {"rank_tile_f32": rank_tile, "rank_tile_f64": rank_tile, "pair_scores_f32": pair_scores_kernel,
                 "pair_scores_f64": pair_scores_kernel, "finish_batch_f32": finish_batch, "finish_batch_f64": finish_batch,
                 "sort_tests": sort_tests,
                 "topk_tile_f32": topk_tile, "topk_tile_f64": topk_tile, "topk_finish": topk_finish,
                 "topk_select": topk_select, "topk_gather": topk_gather,
                 "fused_topk_f32": fused_topk, "fused_topk_tf32": fused_topk,
                 "abs_max_columns_f32": abs_max_columns, "abs_max_columns_f64": abs_max_columns,
                 "max_row_norm_sq_f32": max_row_norm_sq, "max_row_norm_sq_f64": max_row_norm_sq,
                 "row_norms_f32": row_norms, "row_norms_f64": row_norms, "split_tf32_f32": split_tf32_kernel,
                 "transpose_f32": transpose_kernel,
                 "fused_rank_f32": fused_rank, "fused_rank_tf32": fused_rank}

    def __init__(self, code, options=()):
        self.code = code

    def get_function(self, name):
        return self.functions[name]


def fake_cupy(fail_above=None):
    """A NumPy-backed stand-in for cupy; with fail_above=n, a rank_tile launch over more than
    n users raises its OutOfMemoryError (to test the batch halving)."""
    cupy = types.ModuleType("cupy")
    for name in dir(np):
        if not name.startswith("__"):
            setattr(cupy, name, getattr(np, name))
    _adversarial_float_arithmetic(cupy, np.random.default_rng())

    class Device:
        compute_capability = "90"  # an H100's: TF32 tensor cores (fused_rank_tf32)

        def __init__(self, index=0):
            self.id = index

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def synchronize(self):
            pass

    class Module(_Module):
        def get_function(self, name):
            fn = super().get_function(name)
            if fail_above is None or not name.startswith("rank_tile"):
                return fn

            def guarded(grid, block, args, **launch):
                if grid[0] > fail_above:
                    raise OutOfMemoryError(f"model: {grid[0]} users do not fit")
                return fn(grid, block, args, **launch)
            return guarded

    class MemoryHook:  # cupy.cuda.MemoryHook: the model's allocations are NumPy's, so it sees none
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def array_equal(a1, a2, equal_nan=False):  # CuPy's reads a1.shape first: arrays only, no Python scalars
        if not (hasattr(a1, "shape") and hasattr(a2, "shape")):
            raise AttributeError(f"'{type(a1 if not hasattr(a1, 'shape') else a2).__name__}' object has no "
                                 "attribute 'shape' (cupy.array_equal takes arrays)")
        return np.array_equal(a1, a2, equal_nan=equal_nan)
    cupy.array_equal = array_equal
    cupy.asnumpy = asnumpy
    cupy.cuda = types.SimpleNamespace(Device=Device, memory=types.SimpleNamespace(OutOfMemoryError=OutOfMemoryError),
                                      MemoryHook=MemoryHook, Event=Event, Stream=Stream,
                                      runtime=types.SimpleNamespace(getDeviceCount=lambda: 1, getDeviceProperties=lambda i: {
                                          "name": b"NumPy model of a GPU"}))
    cupy.RawModule = Module
    pool = types.SimpleNamespace(free_all_blocks=lambda: None)
    cupy.get_default_memory_pool = lambda: pool
    return cupy


def is_tf32(x):
    """Whether every value of the float32 array x is a TF32 number (10 mantissa bits)."""
    return bool(((x.view(np.uint32) & np.uint32(0x1FFF)) == 0).all())


def gemm_tf32(a, b, out, accumulate):
    """_backend.gemm_tf32 on the model: the TF32 products exactly (as tensor cores make them),
    summed in float64 and rounded once; inputs that are not TF32 numbers are refused, as
    tensor cores would silently cut them."""
    assert a.dtype == b.dtype == out.dtype == np.float32 and a.strides[1] == b.strides[1] == out.strides[1] == 4
    if not (is_tf32(a) and is_tf32(b)):
        raise AssertionError("gemm_tf32: an input is not made of TF32 numbers (split_tf32 not applied)")
    product = a.astype(np.float64) @ b.astype(np.float64).T
    out[...] = (product + out if accumulate else product).astype(np.float32)
    return out


def _float32_toward_zero(x):
    r = x.astype(np.float32)
    over = np.abs(r.astype(np.float64)) > np.abs(x)
    r[over] = np.nextafter(r[over], np.float32(0))
    return r.astype(np.float64)


def tensor_core_gemm(a, b, c=None, rng=None, block=4, c_first=True):
    """a @ b.T (+ c) as an adversarial model of TF32 tensor cores (Fasi et al., 2021, made
    worse): the products exact, added in a random order `block` at a time, each block's terms
    and the running sum cut toward zero to the float32 unit of the largest of them before an
    exact sum, which is then cut to float32 toward zero. c (cuBLAS's beta = 1) is the sum's
    start with `c_first`, else added at the end. Float32 (m, n)."""
    rng = rng or np.random.default_rng(0)
    products = a.astype(np.float64)[:, None, :] * b.astype(np.float64)[None, :, :]  # exact for TF32 numbers
    products = products[:, :, rng.permutation(products.shape[2])]
    acc = c.astype(np.float64) if c is not None and c_first else np.zeros(products.shape[:2])
    for start in range(0, products.shape[2], block):
        terms = np.concatenate([acc[..., None], products[..., start: start + block]], axis=2)
        quantum = np.ldexp(1.0, np.frexp(np.abs(terms).max(axis=2))[1] - 24)[..., None]
        acc = _float32_toward_zero((np.trunc(terms / quantum) * quantum).sum(axis=2))
    if c is not None and not c_first:
        acc = _float32_toward_zero(acc + c)
    return acc.astype(np.float32)


@contextlib.contextmanager
def model_device(monkeypatch, fail_above=None):
    """gpureco's GPU backend on the NumPy model for the duration of the block."""
    from gpureco.engine import _backend, _gpu
    cupy = fake_cupy(fail_above)
    monkeypatch.setattr(_backend, "_state", (cupy, _backend.GpuStatus(True, "NumPy model of a GPU"), True))
    monkeypatch.setattr(_backend, "float32_compute", contextlib.nullcontext)
    cupy.gemm_tf32 = gemm_tf32  # a test may replace it
    monkeypatch.setattr(_backend, "gemm_tf32", lambda *args, **kw: cupy.gemm_tf32(*args, **kw))
    monkeypatch.setattr(_gpu, "_modules", {})
    if hasattr(_gpu, "_fused_rank_fits"):  # (absent at bench_commits.py's older commits)
        monkeypatch.setattr(_gpu, "_fused_rank_fits", {})
    yield cupy
