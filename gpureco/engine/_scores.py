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
    """Higham's gamma_n = n u / (1 - n u): the relative error bound of n rounded operations
    (infinite where n u >= 1: there is none)."""
    nu = n * unit_roundoff
    return nu / (1.0 - nu) if nu < 1.0 else float("inf")


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


def max_row_norm(X):
    """An upper bound, up to a few units of float64 and sqrt(F * tiny) for squares that
    underflow (score_tolerance allows for both), on the largest Euclidean norm of a row of X
    with no non-finite value (0 where none): such a row's scores are not finite either, and go
    to the defined score. A chunk of rows at a time."""
    largest = 0.0
    rows = max(1, _CHUNK_BYTES // (16 * max(1, X.shape[1])))  # its float64 copy: half a chunk
    for begin in range(0, X.shape[0], rows):
        part = X[begin: begin + rows].astype(np.float64)
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            squares = np.einsum("ij,ij->i", part, part)
        finite = np.isfinite(part).all(axis=1)
        if finite.any():
            largest = max(largest, float(squares[finite].max()))
    return float(np.sqrt(largest))


def score_tolerance(user_rows, item_abs_max, bias_abs_max, dtype, tf32=False, item_norm_max=None, item_terms=False):
    """Per user, a bound on |fast score - defined score| for every item (doubled for safety).
    With `item_terms` (and `item_norm_max`), also (p, q) per user, concatenated: p n_j + q is
    the same bound for an item j of norm n_j (as max_row_norm computes norms), its own norm in
    place of the largest (the fused kernels check a deferred item against it first).

    Both are dot products of F terms plus a bias, rounded in `dtype` (any order) and in
    float64 (in order): each is within gamma_(F+2) * (sum_f |a_f| |b_jf| + |bias_j|) of the
    real value; underflow adds at most one smallest normal number per term. The sum is at
    most sum_f |a_f| max_j |b_jf| (item_abs_max), and, by Cauchy-Schwarz, at most ||a|| times
    the largest ||b_j|| (item_norm_max, when given; each norm allowed sqrt(F * tiny) for
    squares that underflow): the smaller of the two is taken (the second is about 3 times
    smaller for 128 normal factors and a million items).

    With `tf32` (True) the fast score is split_tf32's (hi*lo + lo*hi) + hi*hi on tensor cores: two
    GEMMs, the second adding to the first (FactorScores.tile). The split leaves out less than
    2**-19 (1 + 2**-12) |a| |b| per term. Tensor cores multiply TF32 numbers exactly but add
    with truncation, aligning a block of products to the largest before adding them (Fasi et
    al., "Numerical behavior of NVIDIA tensor cores", PeerJ Computer Science, 2021): taken
    here as at most 2**-22 (two units of float32) of the partial sum per operation. The
    correction's 2F terms are at most 2**-9 (1 + 2**-11) of the main ones, so its rounding
    costs 2**-8 gamma_2F; the main sum's F operations, its addition to the correction
    (however cuBLAS orders it: the correction's value is within the partial sums) and the
    bias's two roundings cost (1 + 2**-8) gamma_(F+4). Flushing a subnormal part, product or
    sum to zero costs at most 2**-126 times the other factor's magnitude, or 2**-126.

    With `tf32="fused"` the fast score is fused_rank_tf32's and fused_topk_tf32's (score_tile.cuh
    gr_score_tile_tf32): the same parts, but per step of 8 factors (F rounded up to s steps, zeros past F) the
    correction lo*hi + hi*lo on tensor cores from zero, added to the float32 accumulator (one
    rounding to nearest), then hi*hi accumulated onto it by tensor cores. At two units per
    operation again: the corrections' 16 products a step cost 2**-8 gamma_16 (their own partial
    sums, at most 2**-9 (1 + 2**-11) of the main terms); the accumulator takes 9 operations a step
    and the bias two, (1 + 2**-8) gamma_(9s+2). The flushes: as above, for the 25 s + 2 operations.
    """
    xp = array_module(user_rows)
    n_factors = user_rows.shape[1]
    # a square that underflows loses less than the smallest normal float64: each norm, the
    # users' here and the items' (max_row_norm), is within sqrt(F * tiny) above its computed value
    slack = float(np.sqrt(n_factors * np.finfo(np.float64).tiny))
    # (over: an infinite bound is still a bound, every comparison goes to the definition; under: below)
    with np.errstate(over="ignore", under="ignore"):
        user_abs = xp.abs(user_rows.astype(xp.float64))
        scale = user_abs @ item_abs_max
        if item_norm_max is not None:  # the norms' rounding (any order of the sums, sqrt): 4 gamma_(F+2)
            user_norm = xp.sqrt((user_abs * user_abs).sum(axis=1)) + slack
            norms = user_norm * (item_norm_max + slack)
            # (fmin: an overflowed user norm times items of norm 0 is NaN, and bounds nothing)
            scale = xp.fmin(scale, norms * (1.0 + 4.0 * _gamma(n_factors + 2, 2.0**-53)))
        scale = scale + bias_abs_max
    finfo = np.finfo(dtype)
    absolute = (n_factors + 2) * float(finfo.tiny)
    if tf32 == "fused":
        steps = -(-n_factors // 8)
        gamma = (1.0 + 2.0**-8) * _gamma(9 * steps + 2, 2.0**-22) + 2.0**-8 * _gamma(16, 2.0**-22) + 2.0**-18
        with np.errstate(over="ignore"):
            absolute = 2.0**-124 * (user_abs.sum(axis=1) + item_abs_max.sum() + 25 * steps + 4)
    elif tf32:
        gamma = (1.0 + 2.0**-8) * _gamma(n_factors + 4, 2.0**-22) + 2.0**-8 * _gamma(2 * n_factors, 2.0**-22) + 2.0**-18
        with np.errstate(over="ignore"):
            absolute = 2.0**-124 * (user_abs.sum(axis=1) + item_abs_max.sum() + 3 * n_factors + 4)
    else:
        gamma = _gamma(n_factors + 2, float(finfo.eps) / 2)
    gamma += _gamma(n_factors + 2, 2.0**-53)
    if gamma == float("inf"):  # millions of factors: more roundings than the bound covers
        raise ValueError(f"'A' and 'B' have {n_factors} factors: too many for the error bound of "
                         f"{'TF32' if tf32 else np.dtype(dtype).name} scores; use float64 factors"
                         + (" or tf32=False." if tf32 else "."))
    tol = 2.0 * (gamma * scale + absolute)
    if not item_terms:
        return tol
    with np.errstate(over="ignore", invalid="ignore"):  # p n_j + q: 2 (gamma scale_j + absolute), as above
        p = 2.0 * gamma * (1.0 + 4.0 * _gamma(n_factors + 2, 2.0**-53)) * user_norm
        q = p * slack + 2.0 * (gamma * bias_abs_max + absolute)
    return tol, xp.concatenate([p, xp.broadcast_to(q, p.shape)])


_TF32_MASK = 0xFFFFE000  # the sign, exponent and 10 mantissa bits of a float32: a TF32 number


def split_tf32(xp, X, out, lo_first=False):
    """X (float32, n x F) as two TF32 parts, written to out (n x 2F): [hi | lo], or [lo | hi]
    with `lo_first`. hi is X with its 13 lowest mantissa bits cleared (|X - hi| < 2**-10 |X|,
    never rounded up to infinity), and lo is X - hi (exact) rounded to nearest TF32, so that
    |X - hi - lo| <= 2**-21 |X| + 2**-137 (a subnormal part is cut on its bits). Integer
    operations and one exact subtraction: any order, any device, the same parts (a flushed
    subnormal excepted: see score_tolerance)."""
    n_factors = X.shape[1]
    mask = xp.uint32(_TF32_MASK)
    hi = (X.view(xp.uint32) & mask).view(xp.float32)
    with np.errstate(invalid="ignore"):  # inf - inf: NaN parts for a non-finite X, as they should be
        rest = (X - hi).view(xp.uint32)
    lo = ((rest + xp.uint32(0x1000)) & mask).view(xp.float32)  # round half away from zero on the magnitude
    out[:, :n_factors], out[:, n_factors:] = (lo, hi) if lo_first else (hi, lo)
    return out


def order_key(xp, x):
    """float64 -> uint64, increasing with x (-0.0 and 0.0 alike); kernels/common.cuh gr_order_key."""
    bits = (x + 0.0).view(xp.uint64)
    return xp.where((bits >> xp.uint64(63)).astype(bool), ~bits, bits | xp.uint64(1 << 63))


def select_top_k(xp, local, items, scores, keys, n_rows, k):
    """The k best (score desc, key asc) candidates of each row; NaN scores are never chosen.
    Shared by both backends: (items, scores) of shape (n_rows, k), -1 / NaN padded."""
    keep = ~xp.isnan(scores)
    local, items, scores, keys = local[keep], items[keep], scores[keep], keys[keep]
    if local.shape[0] == 0:  # (CuPy's bincount raises on an empty array before 14.2: cupy/cupy#8116)
        return xp.full((n_rows, k), -1, dtype=xp.int64), xp.full((n_rows, k), xp.nan)
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
    lengths = indptr[rows + 1] - start
    offsets = xp.concatenate([xp.zeros(1, dtype=xp.int64), xp.cumsum(lengths)])
    n = xp.arange(int(offsets[-1]))
    if xp is np:  # (CuPy's repeat takes no array of counts)
        row = np.repeat(np.arange(rows.shape[0], dtype=np.int64), lengths)
    else:
        row = xp.searchsorted(offsets[1:], n, side="right")
    return row, start[row] + n - offsets[row], offsets
