# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The CPU hot loop: rank the test items of a batch of users, one pass over each user's scores.

The score of item j for user u is defined as the float64 sum of a[u,f] * b[j,f] in the order
f = 0 .. F-1, plus bias[j] (`exact_score`): the same number on any machine, batch or thread.
BLAS computes the users' rows much faster but not bit-reproducibly (its rounding depends on
where a user and an item fall in its tiles), so its scores only filter: with `tol[u]` a
rigorous bound on |BLAS score - exact score|, a comparison between a pool item and a test
item is settled by the BLAS score unless the two are within tol, and only then is the exact
score computed. The outcome of every comparison is that of the exact scores.

Items are ordered by descending score, then ascending tie key. Per user, with the test items
sorted best-first by exact score, T[0] > ... > T[m-1], every pool item j falls below
pos(j) = #{i : T[i] outranks j} of them. With cnt[c] = #{pool items j (test items included) :
pos(j) == c}, the rank of T[i] (1 + the pool items above it) is cnt[0] + ... + cnt[i]: the sum
counts T[i] once and every item above it. Items below T[m-1] cost one comparison.

When only ranks up to K are needed (no AUC), a first pass finds tau, the K-th largest BLAS
score of the pool (a heap of K values); a test item whose exact score is below tau - tol has
at least K pool items above it, so only the test items above that line are counted, and
the counting pass skips nearly every item at its first comparison.
"""
from libc.stdint cimport uint64_t, int64_t, uint8_t, int32_t
from libc.stdlib cimport qsort, malloc, free
from libc.math cimport INFINITY, isnan, isinf, isfinite

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

ctypedef fused factor_t:
    float
    double

ctypedef struct TestEntry:
    double score  # exact
    uint64_t key
    int64_t entry  # position of the item in the test CSR arrays

ctypedef struct Scratch:  # per-thread buffers
    TestEntry* tests  # max_test
    double* scores  # max_test: the test items' exact scores, best first
    uint64_t* keys  # max_test: their tie keys
    int64_t* cnt  # max_test + 1
    double* heap  # max_rank: the K largest filter scores

ctypedef struct Model:  # what an exact score needs, for one user
    const void* a  # the user's factors (factor_t)
    const void* B  # all item factors (factor_t), row-major
    int64_t n_factors
    const double* bias
    int has_bias
    const void* given  # the user's given scores (factor_t), when the scores are the input


cdef inline double exact_score(const Model* model, int64_t item, factor_t dtype_tag) noexcept nogil:
    """The definition of a score: float64 products summed in order f = 0 .. F-1, plus the bias
    (built with -ffp-contract=off: no fused multiply-add changes the rounding)."""
    if model.given != NULL:
        return <double>(<const factor_t*>model.given)[item]
    cdef const factor_t* a = <const factor_t*>model.a
    cdef const factor_t* b = <const factor_t*>model.B + item * model.n_factors
    cdef double acc = 0.0
    cdef int64_t f
    for f in range(model.n_factors):
        acc = acc + <double>a[f] * <double>b[f]
    if model.has_bias:
        return acc + model.bias[item]
    return acc


cdef int outranks_cmp(const void* x_, const void* y_) noexcept nogil:
    cdef const TestEntry* x = <const TestEntry*>x_
    cdef const TestEntry* y = <const TestEntry*>y_
    if x.score > y.score:
        return -1
    if x.score < y.score:
        return 1
    if x.key < y.key:
        return -1
    if x.key > y.key:
        return 1
    return 0


cdef void heap_sift_down(double* heap, int64_t n, int64_t i) noexcept nogil:
    """Restore the min-heap property below position i."""
    cdef int64_t child
    cdef double v = heap[i]
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        if child + 1 < n and heap[child + 1] < heap[child]:
            child += 1
        if heap[child] >= v:
            break
        heap[i] = heap[child]
        i = child
    heap[i] = v


cdef double kth_largest(const factor_t* row, int64_t n_items, const int32_t* train_idx, int64_t n_train,
                        int64_t k, double* heap) noexcept nogil:
    """The k-th largest filter score of the pool (k <= pool size)."""
    cdef int64_t t, j, start = 0, stop, kept = 0, i
    cdef double s
    for t in range(n_train + 1):
        stop = train_idx[t] if t < n_train else n_items
        for j in range(start, stop):
            s = row[j]
            if kept < k:
                heap[kept] = s
                kept += 1
                if kept == k:
                    i = k // 2
                    while i > 0:
                        i -= 1
                        heap_sift_down(heap, k, i)
            elif s > heap[0]:
                heap[0] = s
                heap_sift_down(heap, k, 0)
        start = stop + 1
    return heap[0]


cdef void count_ranks(const factor_t* row, int64_t n_items, const int32_t* train_idx, int64_t n_train,
                      const Model* model, double tol, uint64_t seed, uint64_t user, int noise,
                      Scratch* w, int64_t n_ranked) noexcept nogil:
    """cnt[c] = #{pool items below exactly c of the n_ranked best test items} (c < n_ranked)."""
    cdef int64_t t, j, start = 0, stop, c, i
    cdef double s, worst = w.scores[n_ranked - 1] - tol
    cdef double* ts = w.scores
    for i in range(n_ranked + 1):
        w.cnt[i] = 0
    for t in range(n_train + 1):
        stop = train_idx[t] if t < n_train else n_items
        for j in range(start, stop):
            s = row[j]
            if not isfinite(s):  # the filter overflowed (or inf - inf): only the exact score knows
                c = gpureco_count_outranking(ts, w.keys, n_ranked, exact_score(model, j, row[0]),
                                             gpureco_tie_key(seed, user, j, noise))
                w.cnt[c] += 1
                continue
            if s < worst:
                continue  # below every ranked test item, whatever the rounding
            c = gpureco_count_above(ts, n_ranked, s)
            if (c > 0 and ts[c - 1] <= s + tol) or (c < n_ranked and ts[c] >= s - tol):
                # a test item lies within the filter's error: decide with the exact score
                c = gpureco_count_outranking(ts, w.keys, n_ranked, exact_score(model, j, row[0]),
                                             gpureco_tie_key(seed, user, j, noise))
            w.cnt[c] += 1
        start = stop + 1


cdef void exact_pool_stats(int64_t n_items, const int32_t* train_idx, int64_t n_train, const Model* model,
                           factor_t dtype_tag, double* mn, double* mx, int* has_nan) noexcept nogil:
    cdef int64_t t, j, start = 0, stop
    cdef double v
    mn[0] = INFINITY
    mx[0] = -INFINITY
    has_nan[0] = 0
    for t in range(n_train + 1):
        stop = train_idx[t] if t < n_train else n_items
        for j in range(start, stop):
            v = exact_score(model, j, dtype_tag)
            mn[0] = v if v < mn[0] else mn[0]
            mx[0] = v if v > mx[0] else mx[0]
            has_nan[0] |= isnan(v)
        start = stop + 1


cdef void rank_one_user(const factor_t* row, int64_t n_items,
                        const int32_t* train_idx, int64_t n_train,
                        const int32_t* test_idx, int64_t n_test, int64_t first_entry,
                        const Model* model, double tol, uint64_t seed, uint64_t user, int noise,
                        int64_t max_rank, Scratch* w, int64_t* ranks,
                        double* pool_min, double* pool_max, uint8_t* nonfinite) noexcept nogil:
    cdef int64_t t, j, start, stop, i, n_ranked, running
    cdef double v, mn = INFINITY, mx = -INFINITY, tau
    cdef int has_nan = 0
    cdef bint filter_finite

    # pool statistics from the filter; confirmed with exact scores where they could differ
    start = 0
    for t in range(n_train + 1):
        stop = train_idx[t] if t < n_train else n_items
        for j in range(start, stop):
            v = row[j]
            mn = v if v < mn else mn
            mx = v if v > mx else mx
            has_nan |= (v != v)
        start = stop + 1
    filter_finite = not (has_nan or isinf(mn) or isinf(mx))
    if not filter_finite or not (mx - mn > 2.0 * tol):
        exact_pool_stats(n_items, train_idx, n_train, model, row[0], &mn, &mx, &has_nan)
    pool_min[0] = mn
    pool_max[0] = mx
    nonfinite[0] = has_nan or isinf(mn) or isinf(mx)
    if nonfinite[0] or n_test == 0 or mn == mx:
        return  # NaN rule 4 or 5 (or nothing to rank): the ranks are not used

    for i in range(n_test):
        w.tests[i].score = exact_score(model, test_idx[i], row[0])
        w.tests[i].key = gpureco_tie_key(seed, user, test_idx[i], noise)
        w.tests[i].entry = first_entry + i
    qsort(w.tests, n_test, sizeof(TestEntry), outranks_cmp)
    for i in range(n_test):
        w.scores[i] = w.tests[i].score
        w.keys[i] = w.tests[i].key

    n_ranked = n_test
    if 0 < max_rank < n_items - n_train and filter_finite:  # a non-finite filter score bounds nothing
        tau = kth_largest(row, n_items, train_idx, n_train, max_rank, w.heap) - tol
        n_ranked = 0  # test items at or above tau - tol; the others have >= K items above
        while n_ranked < n_test and w.scores[n_ranked] >= tau:
            n_ranked += 1
        for i in range(n_ranked, n_test):
            ranks[w.tests[i].entry] = max_rank + 1
        if n_ranked == 0:
            return
    count_ranks(row, n_items, train_idx, n_train, model, tol, seed, user, noise, w, n_ranked)
    running = 0
    for i in range(n_ranked):
        running += w.cnt[i]
        ranks[w.tests[i].entry] = running


cdef enum:
    GROUP = 8  # users transposed together: 32 or 64 bytes of scores per item


def rank_test_items(const factor_t[:, ::1] scores_by_item, const factor_t[:, ::1] user_factors,
                    const factor_t[:, ::1] item_factors, const double[::1] item_biases, bint has_bias,
                    const double[::1] tol, const int64_t[::1] users,
                    const int64_t[::1] train_indptr, const int32_t[::1] train_indices,
                    const int64_t[::1] test_indptr, const int32_t[::1] test_indices,
                    int64_t[::1] ranks, double[::1] pool_min, double[::1] pool_max,
                    uint8_t[::1] nonfinite, uint64_t seed, bint noise, int64_t max_rank,
                    factor_t[::1] rows_buffer, int64_t col_begin, int64_t col_end, bint given=False):
    """Rank the test items of users[col_begin:col_end].

    scores_by_item: the BLAS (filter) scores, n_items x batch; user_factors: batch x F, the
    batch's rows of A; item_factors: n_items x F; item_biases: n_items float64 (any length
    if not has_bias); tol: batch, the bound on |filter - exact| of each user. With A = None
    (a non-personalised model) F is 0, the filter is the biases and tol is 0.
    max_rank: 0 for exact ranks of every test item; K > 0 when only ranks up to K are needed
    (a test item outside the user's top K then gets K + 1).
    given: the score block holds the scores themselves (a score matrix or function): they are
    the defined scores (F = 0 factors, tol = 0).
    Indptr and indices are the whole CSR arrays (indices sorted within rows); results are
    written at the users' own positions in `ranks` (one per test entry) and in the pool
    statistics (one per user). rows_buffer: GROUP * n_items values of this thread's own.
    Runs without the GIL, so threads may share a batch.
    """
    cdef int64_t c, g, j, u, n_group, n_items = scores_by_item.shape[0]
    cdef int64_t max_test = 0, n_factors = item_factors.shape[1]
    cdef Scratch w
    cdef Model model
    cdef factor_t* rows = &rows_buffer[0]
    cdef factor_t zero = 0
    if rows_buffer.shape[0] < GROUP * n_items:
        raise ValueError("rows_buffer must hold %d values" % (GROUP * n_items))
    if item_factors.shape[0] != n_items or user_factors.shape[1] != n_factors:
        raise ValueError("the factors do not match the score block")
    if has_bias and item_biases.shape[0] != n_items:
        raise ValueError("item_biases must have one value per item")
    for c in range(col_begin, col_end):
        u = users[c]
        max_test = max(max_test, test_indptr[u + 1] - test_indptr[u])
    model.B = &item_factors[0, 0] if n_factors > 0 else NULL
    model.n_factors = n_factors
    model.bias = &item_biases[0] if has_bias else NULL
    model.has_bias = has_bias
    model.given = NULL
    with nogil:
        w.tests = <TestEntry*>malloc((max_test + 1) * sizeof(TestEntry))
        w.scores = <double*>malloc((max_test + 1) * sizeof(double))
        w.keys = <uint64_t*>malloc((max_test + 1) * sizeof(uint64_t))
        w.cnt = <int64_t*>malloc((max_test + 1) * sizeof(int64_t))
        w.heap = <double*>malloc((max_rank + 1) * sizeof(double))
        if w.tests == NULL or w.scores == NULL or w.keys == NULL or w.cnt == NULL or w.heap == NULL:
            free(w.tests)
            free(w.scores)
            free(w.keys)
            free(w.cnt)
            free(w.heap)
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
                model.a = &user_factors[c + g, 0] if n_factors > 0 else NULL
                model.given = rows + g * n_items if given else NULL
                rank_one_user(rows + g * n_items, n_items,
                              &train_indices[0] + train_indptr[u], train_indptr[u + 1] - train_indptr[u],
                              &test_indices[0] + test_indptr[u], test_indptr[u + 1] - test_indptr[u],
                              test_indptr[u], &model, tol[c + g], seed, <uint64_t>u, noise, max_rank,
                              &w, &ranks[0], &pool_min[u], &pool_max[u], &nonfinite[u])
            c += GROUP
        free(w.tests)
        free(w.scores)
        free(w.keys)
        free(w.cnt)
        free(w.heap)


def exact_scores(const factor_t[:, ::1] user_factors, const factor_t[:, ::1] item_factors,
                 const double[::1] item_biases, bint has_bias):
    """The defined scores (users x items, float64), computed one by one: for tests and docs."""
    import numpy as np
    cdef int64_t u, j, n_users = user_factors.shape[0], n_items = item_factors.shape[0]
    out = np.empty((n_users, n_items))
    cdef double[:, ::1] o = out
    cdef Model model
    model.B = &item_factors[0, 0] if item_factors.shape[1] > 0 and n_items > 0 else NULL
    model.n_factors = item_factors.shape[1]
    model.bias = &item_biases[0] if has_bias else NULL
    model.has_bias = has_bias
    model.given = NULL
    for u in range(n_users):
        model.a = &user_factors[u, 0] if model.n_factors > 0 else NULL
        for j in range(n_items):
            o[u, j] = exact_score(&model, j, user_factors[0, 0] if model.n_factors > 0 else <factor_t>0)
    return out


def tie_keys(const int64_t[::1] users, const int64_t[::1] items, uint64_t seed, bint noise):
    """The tie-break keys of (user, item) pairs, as the ranking uses them (for tests and docs)."""
    import numpy as np
    out = np.empty(users.shape[0], dtype=np.uint64)
    cdef uint64_t[::1] o = out
    cdef int64_t i
    for i in range(users.shape[0]):
        o[i] = gpureco_tie_key(seed, <uint64_t>users[i], <uint64_t>items[i], noise)
    return out


def pair_scores(const int64_t[::1] users, const int64_t[::1] items, const factor_t[:, ::1] user_factors,
                const factor_t[:, ::1] item_factors, const double[::1] item_biases, bint has_bias):
    """The defined scores of the pairs (users[i], items[i]) (float64)."""
    import numpy as np
    cdef int64_t i, n = users.shape[0]
    out = np.empty(n)
    cdef double[::1] o = out
    cdef Model model
    cdef factor_t tag = 0
    model.B = &item_factors[0, 0] if item_factors.shape[1] > 0 and item_factors.shape[0] > 0 else NULL
    model.n_factors = item_factors.shape[1]
    model.bias = &item_biases[0] if has_bias else NULL
    model.has_bias = has_bias
    model.given = NULL
    with nogil:
        for i in range(n):
            model.a = &user_factors[users[i], 0] if model.n_factors > 0 else NULL
            o[i] = exact_score(&model, items[i], tag)
    return out
