# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The CPU hot loop: rank every test item of a batch of users in one pass over their scores.

For a user with test items sorted best-first T[0] > T[1] > ... > T[m-1] (by score, then
by tie key), every pool item j falls between two of them: pos(j) = #{i : T[i] outranks j}.
With cnt[c] = #{pool items j (test items included) : pos(j) == c}, the rank of T[i]
(1 + the pool items that outrank it) is cnt[0] + ... + cnt[i]: the sum counts T[i] itself
once and every item above it. Items below T[m-1] (nearly all of them) cost one comparison.
"""
from libc.stdint cimport uint64_t, int64_t, uint8_t, int32_t
from libc.stdlib cimport qsort, malloc, free
from libc.math cimport INFINITY

cdef extern from *:
    """
    #include <stdint.h>
    /* splitmix64 finaliser; kernels/ties.cuh must compute the same numbers */
    static inline uint64_t gpureco_mix64(uint64_t x) {
        x ^= x >> 30; x *= 0xBF58476D1CE4E5B9ULL;
        x ^= x >> 27; x *= 0x94D049BB133111EBULL;
        x ^= x >> 31; return x;
    }
    /* Ties are broken by ascending key: the item index, or, with noise, a seeded
       counter-based 32-bit random number per (user, item) with the item index below it. */
    static inline uint64_t gpureco_tie_key(uint64_t seed, uint64_t user, uint64_t item, int noise) {
        if (!noise) return item;
        uint64_t h = gpureco_mix64(gpureco_mix64(seed * 0x9E3779B97F4A7C15ULL + user) ^ item);
        return (h & 0xFFFFFFFF00000000ULL) | item;
    }
    """
    uint64_t gpureco_tie_key(uint64_t seed, uint64_t user, uint64_t item, int noise) noexcept nogil

ctypedef struct TestEntry:
    double score
    uint64_t key
    int64_t entry  # position of the item in the test CSR arrays


cdef int outranks_cmp(const void* a, const void* b) noexcept nogil:
    cdef const TestEntry* x = <const TestEntry*>a
    cdef const TestEntry* y = <const TestEntry*>b
    if x.score > y.score:
        return -1
    if x.score < y.score:
        return 1
    if x.key < y.key:
        return -1
    if x.key > y.key:
        return 1
    return 0


cdef void rank_one_user(const double* row, int64_t n_items,
                        const int32_t* train_idx, int64_t n_train,
                        const int32_t* test_idx, int64_t n_test, int64_t first_entry,
                        uint64_t seed, uint64_t user, int noise,
                        TestEntry* tests, int64_t* cnt, int64_t* ranks,
                        double* pool_min, double* pool_max, uint8_t* nonfinite) noexcept nogil:
    cdef int64_t t, j, start, stop, lo, hi, mid, i, running
    cdef double v, mn = INFINITY, mx = -INFINITY
    cdef int has_nan = 0
    cdef double s, worst_score
    cdef uint64_t key, worst_key

    # pass 1: pool statistics (min, max, NaN), skipping training items
    start = 0
    for t in range(n_train + 1):
        stop = train_idx[t] if t < n_train else n_items
        for j in range(start, stop):
            v = row[j]
            mn = v if v < mn else mn
            mx = v if v > mx else mx
            has_nan |= (v != v)
        start = stop + 1
    pool_min[0] = mn
    pool_max[0] = mx
    nonfinite[0] = has_nan or mn == -INFINITY or mx == INFINITY
    if nonfinite[0] or n_test == 0:
        return

    # the user's test items, best first
    for i in range(n_test):
        tests[i].score = row[test_idx[i]]
        tests[i].key = gpureco_tie_key(seed, user, test_idx[i], noise)
        tests[i].entry = first_entry + i
    qsort(tests, n_test, sizeof(TestEntry), outranks_cmp)
    for i in range(n_test + 1):
        cnt[i] = 0
    worst_score = tests[n_test - 1].score
    worst_key = tests[n_test - 1].key

    # pass 2: for each pool item that is not below the worst test item, count it at pos(j)
    start = 0
    for t in range(n_train + 1):
        stop = train_idx[t] if t < n_train else n_items
        for j in range(start, stop):
            s = row[j]
            if s < worst_score:
                continue
            key = gpureco_tie_key(seed, user, j, noise)
            if s == worst_score and key > worst_key:
                continue
            lo = 0
            hi = n_test - 1  # tests[n_test - 1] does not outrank j
            while lo < hi:
                mid = (lo + hi) >> 1
                if tests[mid].score > s or (tests[mid].score == s and tests[mid].key < key):
                    lo = mid + 1
                else:
                    hi = mid
            cnt[lo] += 1
        start = stop + 1

    running = 0
    for i in range(n_test):
        running += cnt[i]
        ranks[tests[i].entry] = running


cdef enum:
    GROUP = 8  # users transposed together: one 64-byte cache line of float64 scores


def rank_test_items(const double[:, ::1] scores_by_item, const int64_t[::1] users,
                    const int64_t[::1] train_indptr, const int32_t[::1] train_indices,
                    const int64_t[::1] test_indptr, const int32_t[::1] test_indices,
                    int64_t[::1] ranks, double[::1] pool_min, double[::1] pool_max,
                    uint8_t[::1] nonfinite, uint64_t seed, bint noise,
                    int64_t col_begin, int64_t col_end):
    """Rank the test items of users[col_begin:col_end], whose scores are those columns of
    `scores_by_item` (n_items x batch: the layout in which BLAS gives every user the same
    numbers whatever the batch, see _cpu.score_block).

    Indptr and indices are the whole CSR arrays (indices sorted within rows); results are
    written at the users' own positions in `ranks` (one per test entry) and in the pool
    statistics (one per user). Runs without the GIL, so threads may share a batch.
    """
    cdef int64_t c, g, j, u, n_group, n_items = scores_by_item.shape[0], batch = scores_by_item.shape[1]
    cdef int64_t max_test = 0
    cdef TestEntry* tests
    cdef int64_t* cnt
    cdef double* rows
    for c in range(col_begin, col_end):
        u = users[c]
        max_test = max(max_test, test_indptr[u + 1] - test_indptr[u])
    with nogil:
        tests = <TestEntry*>malloc((max_test + 1) * sizeof(TestEntry))
        cnt = <int64_t*>malloc((max_test + 1) * sizeof(int64_t))
        rows = <double*>malloc(GROUP * n_items * sizeof(double))
        if tests == NULL or cnt == NULL or rows == NULL:
            free(tests)
            free(cnt)
            free(rows)
            with gil:
                raise MemoryError("gpureco: no memory for the ranking buffers (%d items)" % n_items)
        c = col_begin
        while c < col_end:
            n_group = min(GROUP, col_end - c)
            for j in range(n_items):  # transpose a cache line's worth of users
                for g in range(n_group):
                    rows[g * n_items + j] = scores_by_item[j, c + g]
            for g in range(n_group):
                u = users[c + g]
                rank_one_user(rows + g * n_items, n_items,
                              &train_indices[0] + train_indptr[u], train_indptr[u + 1] - train_indptr[u],
                              &test_indices[0] + test_indptr[u], test_indptr[u + 1] - test_indptr[u],
                              test_indptr[u], seed, <uint64_t>u, noise, tests, cnt, &ranks[0],
                              &pool_min[u], &pool_max[u], &nonfinite[u])
            c += GROUP
        free(tests)
        free(cnt)
        free(rows)


def tie_keys(const int64_t[::1] users, const int64_t[::1] items, uint64_t seed, bint noise):
    """The tie-break keys of (user, item) pairs, as the ranking uses them (for tests and docs)."""
    import numpy as np
    out = np.empty(users.shape[0], dtype=np.uint64)
    cdef uint64_t[::1] o = out
    cdef int64_t i
    for i in range(users.shape[0]):
        o[i] = gpureco_tie_key(seed, <uint64_t>users[i], <uint64_t>items[i], noise)
    return out
