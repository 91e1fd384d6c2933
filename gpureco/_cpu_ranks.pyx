# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The CPU hot loop: rank the test items of a batch of users, one pass over each user's scores.

Items are ordered by descending score, then ascending tie key. Two modes per user:

- full ranks (the AUCs need them): with the test items sorted best-first, T[0] > ... > T[m-1],
  every pool item j falls below pos(j) = #{i : T[i] outranks j} of them. With
  cnt[c] = #{pool items j (test items included) : pos(j) == c}, the rank of T[i] (1 + the
  pool items above it) is cnt[0] + ... + cnt[i]: the sum counts T[i] once and every item
  above it. Items below T[m-1] cost one comparison.
- ranks up to K (no AUC asked for): only the pool's K best items matter. They are kept in a
  sorted buffer, which a pool item enters only if it beats the K-th (one comparison for
  nearly all items); a test item's rank is its position there, or K + 1 if it is not there.
"""
from libc.stdint cimport uint64_t, int64_t, uint8_t, int32_t
from libc.stdlib cimport qsort, malloc, free
from libc.math cimport INFINITY

cdef extern from *:
    """
    #include <stdint.h>
    /* splitmix64 finaliser; a GPU kernel must compute the same numbers */
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
    /* #{i < m : scores[i] > s} for scores sorted in descending order; branch-free search */
    static inline int64_t gpureco_count_above(const double* scores, int64_t m, double s) {
        if (m <= 0) return 0;
        const double* base = scores;
        while (m > 1) {
            int64_t half = m >> 1;
            base = (base[half] > s) ? base + half : base;
            m -= half;
        }
        return (base - scores) + (base[0] > s);
    }
    /* #{i < m : (scores[i], keys[i]) outranks (s, key)}, the pairs sorted best-first */
    static inline int64_t gpureco_count_outranking(const double* scores, const uint64_t* keys,
                                                   int64_t m, double s, uint64_t key) {
        int64_t c = gpureco_count_above(scores, m, s);
        while (c < m && scores[c] == s && keys[c] < key) c++;
        return c;
    }
    """
    uint64_t gpureco_tie_key(uint64_t seed, uint64_t user, uint64_t item, int noise) noexcept nogil
    int64_t gpureco_count_above(const double* scores, int64_t m, double s) noexcept nogil
    int64_t gpureco_count_outranking(const double* scores, const uint64_t* keys, int64_t m,
                                     double s, uint64_t key) noexcept nogil

ctypedef struct TestEntry:
    double score
    uint64_t key
    int64_t entry  # position of the item in the test CSR arrays

ctypedef struct Scratch:  # per-thread buffers
    TestEntry* tests  # max_test
    double* scores  # max(max_test, max_rank): sorted scores (test items, or the top-K buffer)
    uint64_t* keys  # the same size: their tie keys
    int64_t* cnt  # max_test + 1


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


cdef void full_ranks(const double* row, int64_t n_items, const int32_t* train_idx, int64_t n_train,
                     TestEntry* tests, int64_t n_test, uint64_t seed, uint64_t user, int noise,
                     Scratch* w, int64_t* ranks) noexcept nogil:
    cdef int64_t t, j, start, stop, i, c, running
    cdef double s, worst
    qsort(tests, n_test, sizeof(TestEntry), outranks_cmp)
    for i in range(n_test):
        w.scores[i] = tests[i].score
        w.keys[i] = tests[i].key
    for i in range(n_test + 1):
        w.cnt[i] = 0
    worst = w.scores[n_test - 1]
    start = 0
    for t in range(n_train + 1):
        stop = train_idx[t] if t < n_train else n_items
        for j in range(start, stop):
            s = row[j]
            if s < worst:
                continue
            c = gpureco_count_above(w.scores, n_test, s)
            if c < n_test and w.scores[c] == s:  # a score tie with test items: order by key
                c = gpureco_count_outranking(w.scores, w.keys, n_test, s, gpureco_tie_key(seed, user, j, noise))
            w.cnt[c] += 1
        start = stop + 1
    running = 0
    for i in range(n_test):
        running += w.cnt[i]
        ranks[tests[i].entry] = running


cdef void ranks_up_to(int64_t max_rank, const double* row, int64_t n_items, const int32_t* train_idx,
                      int64_t n_train, TestEntry* tests, int64_t n_test, uint64_t seed, uint64_t user,
                      int noise, Scratch* w, int64_t* ranks) noexcept nogil:
    cdef int64_t t, j, start, stop, i, p, q, kept = 0
    cdef bint in_top
    cdef double s
    cdef uint64_t key
    start = 0
    for t in range(n_train + 1):
        stop = train_idx[t] if t < n_train else n_items
        for j in range(start, stop):
            s = row[j]
            if kept == max_rank and s < w.scores[max_rank - 1]:
                continue
            key = gpureco_tie_key(seed, user, j, noise)
            if kept == max_rank and s == w.scores[max_rank - 1] and key > w.keys[max_rank - 1]:
                continue
            p = gpureco_count_outranking(w.scores, w.keys, kept, s, key)
            q = kept if kept < max_rank else max_rank - 1
            while q > p:
                w.scores[q] = w.scores[q - 1]
                w.keys[q] = w.keys[q - 1]
                q -= 1
            w.scores[p] = s
            w.keys[p] = key
            if kept < max_rank:
                kept += 1
        start = stop + 1
    for i in range(n_test):
        p = gpureco_count_outranking(w.scores, w.keys, kept, tests[i].score, tests[i].key)
        in_top = p < kept and w.scores[p] == tests[i].score and w.keys[p] == tests[i].key
        ranks[tests[i].entry] = p + 1 if in_top else max_rank + 1


cdef void rank_one_user(const double* row, int64_t n_items,
                        const int32_t* train_idx, int64_t n_train,
                        const int32_t* test_idx, int64_t n_test, int64_t first_entry,
                        uint64_t seed, uint64_t user, int noise, int64_t max_rank,
                        Scratch* w, int64_t* ranks,
                        double* pool_min, double* pool_max, uint8_t* nonfinite) noexcept nogil:
    cdef int64_t t, j, start, stop, i
    cdef double v, mn = INFINITY, mx = -INFINITY
    cdef int has_nan = 0

    # pool statistics (min, max, NaN), skipping training items
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
        return  # NaN rule 4 (or nothing to rank): the ranks are not used

    for i in range(n_test):
        w.tests[i].score = row[test_idx[i]]
        w.tests[i].key = gpureco_tie_key(seed, user, test_idx[i], noise)
        w.tests[i].entry = first_entry + i
    if 0 < max_rank < n_items - n_train:
        ranks_up_to(max_rank, row, n_items, train_idx, n_train, w.tests, n_test, seed, user, noise, w, ranks)
    else:
        full_ranks(row, n_items, train_idx, n_train, w.tests, n_test, seed, user, noise, w, ranks)


cdef enum:
    GROUP = 8  # users transposed together: one 64-byte cache line of float64 scores


def rank_test_items(const double[:, ::1] scores_by_item, const int64_t[::1] users,
                    const int64_t[::1] train_indptr, const int32_t[::1] train_indices,
                    const int64_t[::1] test_indptr, const int32_t[::1] test_indices,
                    int64_t[::1] ranks, double[::1] pool_min, double[::1] pool_max,
                    uint8_t[::1] nonfinite, uint64_t seed, bint noise, int64_t max_rank,
                    double[::1] rows_buffer, int64_t col_begin, int64_t col_end):
    """Rank the test items of users[col_begin:col_end], whose scores are those columns of
    `scores_by_item` (n_items x batch: the layout in which BLAS gives every user the same
    numbers whatever the batch, see _cpu.score_block).

    max_rank: 0 for exact ranks of every test item; K > 0 when only ranks up to K are needed
    (a test item outside the user's top K then gets K + 1). rows_buffer: GROUP * n_items
    doubles of this thread's own, reused from call to call.
    Indptr and indices are the whole CSR arrays (indices sorted within rows); results are
    written at the users' own positions in `ranks` (one per test entry) and in the pool
    statistics (one per user). Runs without the GIL, so threads may share a batch.
    """
    cdef int64_t c, g, j, u, n_group, n_items = scores_by_item.shape[0]
    cdef int64_t max_test = 0, n_sorted
    cdef Scratch w
    cdef double* rows = &rows_buffer[0]
    if rows_buffer.shape[0] < GROUP * n_items:
        raise ValueError("rows_buffer must hold %d doubles" % (GROUP * n_items))
    for c in range(col_begin, col_end):
        u = users[c]
        max_test = max(max_test, test_indptr[u + 1] - test_indptr[u])
    n_sorted = max(max_test, max_rank) + 1
    with nogil:
        w.tests = <TestEntry*>malloc((max_test + 1) * sizeof(TestEntry))
        w.scores = <double*>malloc(n_sorted * sizeof(double))
        w.keys = <uint64_t*>malloc(n_sorted * sizeof(uint64_t))
        w.cnt = <int64_t*>malloc((max_test + 1) * sizeof(int64_t))
        if w.tests == NULL or w.scores == NULL or w.keys == NULL or w.cnt == NULL:
            free(w.tests)
            free(w.scores)
            free(w.keys)
            free(w.cnt)
            with gil:
                raise MemoryError("gpureco: no memory for the ranking buffers (%d test items)" % max_test)
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
                              test_indptr[u], seed, <uint64_t>u, noise, max_rank, &w, &ranks[0],
                              &pool_min[u], &pool_max[u], &nonfinite[u])
            c += GROUP
        free(w.tests)
        free(w.scores)
        free(w.keys)
        free(w.cnt)


def tie_keys(const int64_t[::1] users, const int64_t[::1] items, uint64_t seed, bint noise):
    """The tie-break keys of (user, item) pairs, as the ranking uses them (for tests and docs)."""
    import numpy as np
    out = np.empty(users.shape[0], dtype=np.uint64)
    cdef uint64_t[::1] o = out
    cdef int64_t i
    for i in range(users.shape[0]):
        o[i] = gpureco_tie_key(seed, <uint64_t>users[i], <uint64_t>items[i], noise)
    return out
