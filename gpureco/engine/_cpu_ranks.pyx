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
sorted best-first by exact score, T[0] > ... > T[m-1], the rank of T[i] (1 + the pool items
above it) is 1 + i + the number of other pool items above T[i]. A pool item whose filter score
s is above hi_i = exact(T[i]) + tol is above T[i] whatever the rounding, one below
lo_i = exact(T[i]) - tol is below it; an item in between, or whose filter score is not finite
(an overflow), is decided by its exact score (`gr_resolve`). The pass over a row (`gr_pass`)
compares a vector of scores with GR_CHUNK test items at a time (C vector extensions, compiled
for AVX-512, AVX2 and the baseline; the loader runs the best the CPU has), and keeps the pool's
minimum, maximum and NaN flag in the same read. Only comparisons and integer counts run in
vectors: every score that decides anything is computed in the defined order.

When only ranks up to K are needed (no AUC), the first pass finds tau, the K-th largest filter
score of the pool (a heap of K values, touched only by vectors that hold a larger score); a
test item whose exact score is below tau - tol has at least K pool items above it, so only the
test items above that line are counted, and the counting pass skips every vector below them.
"""
from libc.stdint cimport uint64_t, int64_t, uint8_t, int32_t
from libc.stdlib cimport qsort, malloc, calloc, free
from libc.math cimport INFINITY, isinf

cdef extern from *:
    """
    #include <stdint.h>
    #include <math.h>
    /* splitmix64 finaliser; a GPU kernel must compute the same numbers */
    static inline uint64_t gpureco_mix64(uint64_t x) {
        x ^= x >> 30; x *= 0xBF58476D1CE4E5B9ULL;
        x ^= x >> 27; x *= 0x94D049BB133111EBULL;
        x ^= x >> 31; return x;
    }
    /* Ties are broken by ascending key: the item index, or, with noise, a seeded
       counter-based 32-bit random number per (user, item) with the item index below it.
       noise = 2 (ties="optimistic"/"pessimistic"/"average"): item + 1, so that a test item's
       key 0 puts it before every tied pool item and UINT64_MAX after every one. */
    static inline uint64_t gpureco_tie_key(uint64_t seed, uint64_t user, uint64_t item, int noise) {
        if (!noise) return item;
        if (noise == 2) return item + 1;
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
    /* #{i < m : (scores[i], keys[i]) outranks (s, key)}, the pairs sorted best-first (scores
       descending, keys ascending within a score): past the scores above s, the pairs of score s
       and a smaller key come first, so a bisection finds their end (log n reads for a tie of n) */
    static inline int64_t gpureco_count_outranking(const double* scores, const uint64_t* keys,
                                                   int64_t m, double s, uint64_t key) {
        int64_t lo = gpureco_count_above(scores, m, s), hi = m, mid;
        while (lo < hi) {
            mid = (lo + hi) >> 1;
            if (scores[mid] == s && keys[mid] < key) lo = mid + 1; else hi = mid;
        }
        return lo;
    }

    #define GR_CHUNK 8   /* test items compared with each vector of scores in one pass */
    #define GR_WAITING 32  /* items whose exact scores are computed together */

    typedef struct {  /* what an exact score needs, for one user */
        const void* a;       /* the user's factors */
        const void* B;       /* all item factors, row-major */
        int64_t n_factors;
        const double* bias;  /* NULL: no biases */
        const void* given;   /* the user's given scores, which are the defined scores; or NULL */
        int zero;            /* every factor of the user is 0 and every item factor finite: all products are 0 */
    } gr_model;

    typedef struct {  /* one pass over a user's pool: the row less its training and test items */
        const gr_model* model;
        const double* ts; const uint64_t* keys; int64_t m;  /* the test items best first: exact scores, keys */
        uint64_t seed, user; int noise;
        double tol;
        int stats; double min, max; int nan;  /* stats: keep the minimum, maximum and NaN flag */
        int64_t heap_k; double* heap;         /* heap_k > 0: keep the heap_k largest scores (a min-heap) */
        int64_t first, n;                     /* count the pool items above test items first .. first+n-1 */
        int careful;                          /* non-finite scores occur: decide them by the exact score */
        int64_t budget;                       /* >= 0: the items it may decide exactly before it gives up */
        int gave_up;                          /* the pass stopped there (a row of near ties) */
        int waiting;                          /* items to decide exactly, gathered to be decided together */
        int64_t item[GR_WAITING];
        double filter[GR_WAITING];
        int64_t above[GR_CHUNK];
    } gr_pass;

    /* replace the smallest of the k values of a min-heap by v */
    static void gr_heap_replace(double* heap, int64_t k, double v) {
        int64_t i = 0, child;
        for (;;) {
            child = 2 * i + 1;
            if (child >= k) break;
            if (child + 1 < k && heap[child + 1] < heap[child]) child++;
            if (heap[child] >= v) break;
            heap[i] = heap[child];
            i = child;
        }
        heap[i] = v;
    }

    /* The exact scores, for float and double factors (or given scores) alike. */
    #define GR_DEFINE_EXACT(T, S)                                                                   \
    /* The definition of a score: float64 products summed in order f = 0 .. F-1, plus the bias      \
       (built with -ffp-contract=off: no fused multiply-add changes the rounding). */               \
    static inline double gr_exact_##S(const gr_model* md, int64_t j) {                             \
        double acc = 0.0;                                                                           \
        if (md->given) return (double)((const T*)md->given)[j];                                    \
        if (!md->zero) {                                                                            \
            const T* a = (const T*)md->a;                                                           \
            const T* b = (const T*)md->B + j * md->n_factors;                                       \
            for (int64_t f = 0; f < md->n_factors; f++) acc = acc + (double)a[f] * (double)b[f];   \
        }                                                                                           \
        return md->bias ? acc + md->bias[j] : acc;                                                  \
    }                                                                                               \
                                                                                                    \
    /* gr_exact of items j[0 .. n-1], four at a time: four chains in flight, each in the defined     \
       order (the same numbers; a chain waits on every addition, four keep the adder busy) */      \
    static inline void gr_exact_some_##S(const gr_model* md, const int64_t* j, int n, double* out) { \
        int i = 0;                                                                                  \
        if (!md->given && !md->zero) {                                                              \
            const T* a = (const T*)md->a;                                                           \
            for (; i + 4 <= n; i += 4) {                                                            \
                const T* b0 = (const T*)md->B + j[i] * md->n_factors;                               \
                const T* b1 = (const T*)md->B + j[i + 1] * md->n_factors;                           \
                const T* b2 = (const T*)md->B + j[i + 2] * md->n_factors;                           \
                const T* b3 = (const T*)md->B + j[i + 3] * md->n_factors;                           \
                double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;                                      \
                for (int64_t f = 0; f < md->n_factors; f++) {                                       \
                    double af = (double)a[f];                                                       \
                    s0 = s0 + af * (double)b0[f]; s1 = s1 + af * (double)b1[f];                     \
                    s2 = s2 + af * (double)b2[f]; s3 = s3 + af * (double)b3[f];                     \
                }                                                                                   \
                out[i] = md->bias ? s0 + md->bias[j[i]] : s0;                                       \
                out[i + 1] = md->bias ? s1 + md->bias[j[i + 1]] : s1;                               \
                out[i + 2] = md->bias ? s2 + md->bias[j[i + 2]] : s2;                               \
                out[i + 3] = md->bias ? s3 + md->bias[j[i + 3]] : s3;                               \
            }                                                                                       \
        }                                                                                           \
        for (; i < n; i++) out[i] = gr_exact_##S(md, j[i]);                                         \
    }                                                                                               \
                                                                                                    \
    /* minimum, maximum and NaN flag of the exact scores of the pool (the row less train) */        \
    static void gr_exact_stats_##S(const gr_model* md, int64_t n_items, const int32_t* train,      \
                                   int64_t n_train, double* mn, double* mx, int* nan) {            \
        int64_t t, j, start = 0, stop;                                                              \
        double v;                                                                                   \
        *mn = INFINITY; *mx = -INFINITY; *nan = 0;                                                  \
        for (t = 0; t <= n_train; t++) {                                                            \
            stop = t < n_train ? train[t] : n_items;                                                \
            for (j = start; j < stop; j++) {                                                        \
                v = gr_exact_##S(md, j);                                                            \
                *mn = v < *mn ? v : *mn;                                                            \
                *mx = v > *mx ? v : *mx;                                                            \
                *nan |= v != v;                                                                     \
            }                                                                                       \
            start = stop + 1;                                                                       \
        }                                                                                           \
    }

    /* one pass of the loop below, with its kind (which work it does) fixed when compiled */
    #define GR_WALK(SV, stats, heap, count, careful) \
        gr_walk_##SV(p, &st, hi, stats, heap, count, careful, row, n_items, train, n_train, test, n_test)

    /* The pass over a row, for T = float or double scores, in vectors of BYTES bytes, compiled     \
       with the attributes ATTR (an instruction set); ANY(x): whether a lane of mask x is set.      \
       S names the type, V the version. */
    #define GR_DEFINE_PASS(T, S, V, IT, NEXT, BYTES, ATTR, ANY)                                     \
    typedef T gr_v##S##V __attribute__((vector_size(BYTES), aligned(sizeof(T)), may_alias));       \
    typedef IT gr_m##S##V __attribute__((vector_size(BYTES)));                                     \
    enum { GR_L##S##V = BYTES / sizeof(T) };                                                        \
                                                                                                    \
    typedef struct {  /* the pass's vectors: kept in registers, never seen by a call */             \
        gr_v##S##V min, max, heap_min; gr_m##S##V nan; gr_m##S##V count[GR_CHUNK];                 \
        gr_v##S##V hi[GR_CHUNK], lo[GR_CHUNK], lowest;                                              \
    } gr_state##S##V;                                                                               \
                                                                                                    \
    /* the waiting items by their exact scores: their counts, less what the filter counted; 1 when \
       the pass gives up (past its budget) */                                                       \
    ATTR static int gr_resolve_##S##V(gr_pass* p, const T* hi) {                                   \
        double exact[GR_WAITING];                                                                   \
        gr_exact_some_##S(p->model, p->item, p->waiting, exact);                                    \
        for (int i = 0; i < p->waiting; i++) {                                                      \
            int64_t c = gpureco_count_outranking(p->ts, p->keys, p->m, exact[i],                    \
                                                 gpureco_tie_key(p->seed, p->user, p->item[i], p->noise)); \
            for (int g = 0; g < GR_CHUNK; g++) p->above[g] += (c <= p->first + g) - (p->filter[i] > hi[g]); \
        }                                                                                           \
        int stop = p->budget >= 0 && (p->budget -= p->waiting) < 0;                                 \
        p->waiting = 0;                                                                             \
        if (stop) p->gave_up = 1;                                                                   \
        return stop;                                                                                \
    }                                                                                               \
                                                                                                    \
    /* one vector of scores s, items base .. base + GR_L - 1 (`valid` lanes only, unless full);    \
       1 when the pass gives up */                                                                \
    ATTR static inline __attribute__((always_inline)) int gr_step_##S##V(gr_pass* p,               \
            gr_state##S##V* st, const T* hi, int stats, int heap, int count, int careful,           \
            gr_v##S##V s, gr_m##S##V valid, int full, int64_t base) {                               \
        if (stats) {                                                                                \
            gr_m##S##V lt = s < st->min, gt = s > st->max;                                          \
            st->min = (gr_v##S##V)(((gr_m##S##V)s & lt) | ((gr_m##S##V)st->min & ~lt));             \
            st->max = (gr_v##S##V)(((gr_m##S##V)s & gt) | ((gr_m##S##V)st->max & ~gt));             \
            st->nan |= s != s;                                                                      \
        }                                                                                           \
        if (heap) {                                                                                 \
            gr_m##S##V up = s > st->heap_min;                                                       \
            if (!full) up &= valid;                                                                 \
            if (ANY(up)) {                                                                          \
                for (int l = 0; l < GR_L##S##V; l++)                                                \
                    if (up[l] && s[l] > p->heap[0]) gr_heap_replace(p->heap, p->heap_k, s[l]);      \
                st->heap_min = (gr_v##S##V){0} + (T)p->heap[0];                                     \
            }                                                                                       \
        }                                                                                           \
        if (count) {                                                                                \
            gr_m##S##V odd = (gr_m##S##V){0};                                                        \
            if (careful) odd = (s - s) != 0;  /* NaN or infinite */                                 \
            gr_m##S##V near = (s >= st->lowest) | odd;                                              \
            if (!full) near &= valid;                                                               \
            if (ANY(near)) {                                                                        \
                gr_m##S##V unsure = odd;                                                            \
                for (int g = 0; g < count; g++) {  /* count: GR_CHUNK or fewer, known when compiled */ \
                    gr_m##S##V above = s > st->hi[g];                                               \
                    if (!full) above &= valid;                                                      \
                    st->count[g] -= above;                                                          \
                    unsure |= (s >= st->lo[g]) ^ above;  /* above implies s >= lo */               \
                }                                                                                   \
                if (!full) unsure &= valid;                                                         \
                if (ANY(unsure)) {                                                                  \
                    for (int l = 0; l < GR_L##S##V; l++)                                            \
                        if (unsure[l]) {                                                            \
                            p->item[p->waiting] = base + l;                                         \
                            p->filter[p->waiting++] = s[l];                                         \
                        }                                                                           \
                    if (p->waiting > GR_WAITING - GR_L##S##V) return gr_resolve_##S##V(p, hi);      \
                }                                                                                   \
            }                                                                                       \
        }                                                                                           \
        return 0;                                                                                   \
    }                                                                                               \
                                                                                                    \
    /* The segments of row[0 .. n_items) between the sorted, disjoint train and test indices. */   \
    ATTR static inline __attribute__((always_inline)) void gr_walk_##S##V(gr_pass* p,              \
            gr_state##S##V* st, const T* hi, int stats, int heap, int count, int careful,           \
            const T* row, int64_t n_items, const int32_t* train, int64_t n_train,                   \
            const int32_t* test, int64_t n_test) {                                                  \
        gr_m##S##V all = (gr_m##S##V){0} == 0, lane;                                                \
        int64_t t = 0, u = 0, start = 0, stop, j, left;                                             \
        T tail[GR_L##S##V];                                                                         \
        for (int l = 0; l < GR_L##S##V; l++) lane[l] = l;                                           \
        for (;;) {                                                                                  \
            stop = n_items;                                                                         \
            if (t < n_train && train[t] < stop) stop = train[t];                                    \
            if (u < n_test && test[u] < stop) stop = test[u];                                       \
            for (j = start; j + GR_L##S##V <= stop; j += GR_L##S##V)                                \
                if (gr_step_##S##V(p, st, hi, stats, heap, count, careful,                          \
                                   *(const gr_v##S##V*)(row + j), all, 1, j)) return;               \
            left = stop - j;                                                                        \
            if (left > 0) {  /* the lanes past the segment repeat its first item, and are masked */ \
                for (int l = 0; l < GR_L##S##V; l++) tail[l] = row[j + (l < left ? l : 0)];         \
                if (gr_step_##S##V(p, st, hi, stats, heap, count, careful,                          \
                                   *(const gr_v##S##V*)tail, lane < (IT)left, 0, j)) return;        \
            }                                                                                       \
            if (stop == n_items) break;                                                             \
            if (t < n_train && train[t] == stop) t++;                                               \
            if (u < n_test && test[u] == stop) u++;                                                 \
            start = stop + 1;                                                                       \
        }                                                                                           \
        if (count && p->waiting) gr_resolve_##S##V(p, hi);                                          \
    }                                                                                               \
                                                                                                    \
    /* One pass over the pool; the kind of pass (its flags) is fixed when the loop is compiled. */  \
    ATTR static void gr_pass_##S##V(gr_pass* p, const T* row, int64_t n_items,                     \
            const int32_t* train, int64_t n_train, const int32_t* test, int64_t n_test) {           \
        gr_state##S##V st;                                                                          \
        T hi[GR_CHUNK];                                                                             \
        st.min = (gr_v##S##V){0} + (T)INFINITY; st.max = (gr_v##S##V){0} - (T)INFINITY;             \
        st.nan = (gr_m##S##V){0};                                                                   \
        p->waiting = 0;                                                                             \
        st.heap_min = (gr_v##S##V){0} + (p->heap_k ? (T)p->heap[0] : (T)INFINITY);                  \
        for (int g = 0; g < GR_CHUNK; g++) {  /* s > hi[g] exactly when s > ts + tol, and so on */  \
            T h = (T)INFINITY, l = (T)INFINITY;                                                     \
            st.count[g] = (gr_m##S##V){0};                                                          \
            p->above[g] = 0;                                                                        \
            if (g < p->n) {                                                                         \
                double dh = p->ts[p->first + g] + p->tol, dl = p->ts[p->first + g] - p->tol;        \
                h = (T)dh; l = (T)dl;                                                               \
                if ((double)h > dh) h = NEXT(h, -(T)INFINITY);                                      \
                if ((double)l < dl) l = NEXT(l, (T)INFINITY);                                       \
            }                                                                                       \
            hi[g] = h;                                                                              \
            st.hi[g] = (gr_v##S##V){0} + h; st.lo[g] = (gr_v##S##V){0} + l;                         \
        }                                                                                           \
        st.lowest = st.lo[p->n ? p->n - 1 : 0];  /* (every lo is +inf past n) */                    \
        /* the thresholds past n are +inf: compare with 1, 2, 4 or GR_CHUNK of them */              \
        int width = p->n <= 1 ? (int)p->n : p->n <= 2 ? 2 : p->n <= 4 ? 4 : GR_CHUNK;               \
        if (p->heap_k) GR_WALK(S##V, 1, 1, 0, 0);                                                   \
        else if (p->careful) GR_WALK(S##V, 0, 0, GR_CHUNK, 1);                                      \
        else if (p->stats && width == 0) GR_WALK(S##V, 1, 0, 0, 0);                                 \
        else if (p->stats && width == 1) GR_WALK(S##V, 1, 0, 1, 0);                                 \
        else if (p->stats && width == 2) GR_WALK(S##V, 1, 0, 2, 0);                                 \
        else if (p->stats && width == 4) GR_WALK(S##V, 1, 0, 4, 0);                                 \
        else if (p->stats) GR_WALK(S##V, 1, 0, GR_CHUNK, 0);                                        \
        else if (width == 1) GR_WALK(S##V, 0, 0, 1, 0);                                             \
        else if (width == 2) GR_WALK(S##V, 0, 0, 2, 0);                                             \
        else if (width == 4) GR_WALK(S##V, 0, 0, 4, 0);                                             \
        else GR_WALK(S##V, 0, 0, GR_CHUNK, 0);                                                      \
        for (int g = 0; g < GR_CHUNK; g++)                                                          \
            for (int l = 0; l < GR_L##S##V; l++) p->above[g] += st.count[g][l];                     \
        p->min = INFINITY; p->max = -INFINITY; p->nan = 0;                                          \
        for (int l = 0; l < GR_L##S##V; l++) {                                                      \
            p->min = st.min[l] < p->min ? st.min[l] : p->min;                                       \
            p->max = st.max[l] > p->max ? st.max[l] : p->max;                                       \
            p->nan |= st.nan[l] != 0;                                                               \
        }                                                                                           \
    }

    GR_DEFINE_EXACT(float, f32)
    GR_DEFINE_EXACT(double, f64)
    /* One source, built three times: 16-byte vectors everywhere (SSE2, NEON), and on x86-64 also
       32-byte (AVX2) and 64-byte (AVX-512) ones; the CPU's best is picked once, or the width that
       GPURECO_VECTOR_BYTES names (16, 32 or 64: for tests). */
    #include <stdlib.h>
    #if defined(__GNUC__) && defined(__x86_64__)
    #include <immintrin.h>
    #define GR_ANY_16(x) (_mm_movemask_epi8((__m128i)(x)) != 0)
    #define GR_ANY_32(x) (!_mm256_testz_si256((__m256i)(x), (__m256i)(x)))
    #define GR_ANY_64(x) (_mm512_test_epi32_mask((__m512i)(x), (__m512i)(x)) != 0)
    #else
    typedef uint64_t gr_u64x2 __attribute__((vector_size(16)));
    #define GR_ANY_16(x) ((((gr_u64x2)(x))[0] | ((gr_u64x2)(x))[1]) != 0)
    #endif
    GR_DEFINE_PASS(float, f32, _16, int32_t, nextafterf, 16, , GR_ANY_16)
    GR_DEFINE_PASS(double, f64, _16, int64_t, nextafter, 16, , GR_ANY_16)
    #if defined(__GNUC__) && defined(__x86_64__)
    #define GR_AVX2 __attribute__((target("avx2")))  /* (features by name: older compilers know them) */
    #define GR_AVX512 __attribute__((target("avx2,avx512f,avx512bw,avx512dq,avx512vl")))
    GR_DEFINE_PASS(float, f32, _32, int32_t, nextafterf, 32, GR_AVX2, GR_ANY_32)
    GR_DEFINE_PASS(double, f64, _32, int64_t, nextafter, 32, GR_AVX2, GR_ANY_32)
    GR_DEFINE_PASS(float, f32, _64, int32_t, nextafterf, 64, GR_AVX512, GR_ANY_64)
    GR_DEFINE_PASS(double, f64, _64, int64_t, nextafter, 64, GR_AVX512, GR_ANY_64)
    static int gr_vector_bytes(void) {
        static int bytes = 0;  /* a race between threads writes the same value */
        if (!bytes) {
            const char* asked = getenv("GPURECO_VECTOR_BYTES");
            __builtin_cpu_init();
            bytes = !__builtin_cpu_supports("avx2") ? 16
                    : __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") ? 64 : 32;
            if (asked && atoi(asked) >= 16 && atoi(asked) < bytes) bytes = atoi(asked) >= 32 ? 32 : 16;
        }
        return bytes;
    }
    #define GR_PASS(S) (gr_vector_bytes() == 64 ? gr_pass_##S##_64 : gr_vector_bytes() == 32 ? gr_pass_##S##_32 \
                                                                                           : gr_pass_##S##_16)
    #else
    static int gr_vector_bytes(void) { return 16; }
    #define GR_PASS(S) gr_pass_##S##_16
    #endif
    static void gr_pass_f32(gr_pass* p, const float* row, int64_t n_items, const int32_t* train,
                            int64_t n_train, const int32_t* test, int64_t n_test) {
        GR_PASS(f32)(p, row, n_items, train, n_train, test, n_test);
    }
    static void gr_pass_f64(gr_pass* p, const double* row, int64_t n_items, const int32_t* train,
                            int64_t n_train, const int32_t* test, int64_t n_test) {
        GR_PASS(f64)(p, row, n_items, train, n_train, test, n_test);
    }
    """
    uint64_t gpureco_tie_key(uint64_t seed, uint64_t user, uint64_t item, int noise) noexcept nogil
    enum: GR_CHUNK
    ctypedef struct gr_model:
        const void* a
        const void* B
        int64_t n_factors
        const double* bias
        const void* given
        int zero
    ctypedef struct gr_pass:
        const gr_model* model
        const double* ts
        const uint64_t* keys
        int64_t m
        uint64_t seed, user
        int noise
        double tol
        int stats
        double min, max
        int nan
        int64_t heap_k
        double* heap
        int64_t first, n
        int careful
        int64_t budget
        int gave_up
        int64_t above[GR_CHUNK]
    void gr_heap_replace(double* heap, int64_t k, double v) noexcept nogil
    int gr_vector_bytes() noexcept nogil
    double gr_exact_f32(const gr_model* md, int64_t j) noexcept nogil
    double gr_exact_f64(const gr_model* md, int64_t j) noexcept nogil
    void gr_pass_f32(gr_pass* p, const float* row, int64_t n_items, const int32_t* train, int64_t n_train,
                     const int32_t* test, int64_t n_test) noexcept nogil
    void gr_pass_f64(gr_pass* p, const double* row, int64_t n_items, const int32_t* train, int64_t n_train,
                     const int32_t* test, int64_t n_test) noexcept nogil
    void gr_exact_stats_f32(const gr_model* md, int64_t n_items, const int32_t* train, int64_t n_train,
                            double* mn, double* mx, int* nan) noexcept nogil
    void gr_exact_stats_f64(const gr_model* md, int64_t n_items, const int32_t* train, int64_t n_train,
                            double* mn, double* mx, int* nan) noexcept nogil

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
    int64_t* above  # max_test: per test item, the other pool items above it
    double* heap  # max_rank: the K largest filter scores


cdef inline double exact_score(const gr_model* model, int64_t item, factor_t dtype_tag) noexcept nogil:
    """The definition of a score (gr_exact: the products in order f = 0 .. F-1, plus the bias)."""
    if factor_t is float:
        return gr_exact_f32(model, item)
    else:
        return gr_exact_f64(model, item)


cdef inline void one_pass(gr_pass* p, const factor_t* row, int64_t n_items, const int32_t* train, int64_t n_train,
                          const int32_t* test, int64_t n_test) noexcept nogil:
    if factor_t is float:
        gr_pass_f32(p, row, n_items, train, n_train, test, n_test)
    else:
        gr_pass_f64(p, row, n_items, train, n_train, test, n_test)


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
    return (x.entry > y.entry) - (x.entry < y.entry)  # equal keys (the tie modes): ascending item


cdef void rank_one_user(const factor_t* row, int64_t n_items,
                        const int32_t* train_idx, int64_t n_train,
                        const int32_t* test_idx, int64_t n_test, int64_t first_entry,
                        gr_pass* p, bint given, int tie_mode, int64_t max_rank, Scratch* w, int64_t* ranks,
                        double* test_scores,
                        double* pool_min, double* pool_max, uint8_t* nonfinite) noexcept nogil:
    cdef int64_t i, n_ranked, counted
    cdef double v, mn, mx
    cdef int has_nan
    cdef bint filter_finite, top_k = 0 < max_rank < n_items - n_train

    if p.model.zero and p.model.bias == NULL:  # every defined score is 0: NaN rule 5, known without a pass
        pool_min[0], pool_max[0], nonfinite[0] = 0.0, 0.0, 0
        return
    for i in range(n_test):
        w.tests[i].score = exact_score(p.model, test_idx[i], row[0])
        # the tie modes (noise 2): every test item before (key 0) or after (UINT64_MAX) its tied pool items
        w.tests[i].key = (gpureco_tie_key(p.seed, p.user, test_idx[i], p.noise) if tie_mode == 0
                          else (0 if tie_mode == 1 else 0xFFFFFFFFFFFFFFFF))
        w.tests[i].entry = first_entry + i
        if test_scores != NULL:
            test_scores[first_entry + i] = w.tests[i].score
    qsort(w.tests, n_test, sizeof(TestEntry), outranks_cmp)
    for i in range(n_test):
        w.scores[i] = w.tests[i].score
        w.keys[i] = w.tests[i].key
    p.ts, p.keys, p.m = w.scores, w.keys, n_test

    # first pass: the pool statistics, with the heap of the K largest scores or the first test items counted
    # (a row of near ties, such as a constant one, would have most items decided exactly: the pass
    # gives up past n_items / 64 of them, and the statistics are taken alone first)
    p.stats, p.careful, p.first, p.gave_up = 1, 0, 0, 0
    p.heap_k = max_rank if top_k else 0
    for i in range(p.heap_k):
        w.heap[i] = -INFINITY
    p.n = 0 if top_k else min(n_test, <int64_t>GR_CHUNK)
    p.budget = n_items // 64
    one_pass(p, row, n_items, train_idx, n_train, test_idx, n_test)
    if p.gave_up:
        p.n = 0
        one_pass(p, row, n_items, train_idx, n_train, test_idx, n_test)
    p.budget = -1
    mn, mx, has_nan = p.min, p.max, p.nan
    for i in range(n_test):  # the test items are pool items too
        v = row[test_idx[i]]
        mn = v if v < mn else mn
        mx = v if v > mx else mx
        has_nan |= v != v
        if top_k and v > w.heap[0]:
            gr_heap_replace(w.heap, max_rank, v)
    filter_finite = not (has_nan or isinf(mn) or isinf(mx))
    # given scores are the defined scores; the filter's statistics are confirmed where they could differ
    if not given and (not filter_finite or not (mx - mn > 2.0 * p.tol)):
        if factor_t is float:
            gr_exact_stats_f32(p.model, n_items, train_idx, n_train, &mn, &mx, &has_nan)
        else:
            gr_exact_stats_f64(p.model, n_items, train_idx, n_train, &mn, &mx, &has_nan)
    pool_min[0] = mn
    pool_max[0] = mx
    nonfinite[0] = has_nan or isinf(mn) or isinf(mx)
    if nonfinite[0] or n_test == 0 or mn == mx:
        return  # NaN rule 4 or 5 (or nothing to rank): the ranks are not used

    n_ranked, counted = n_test, 0
    if top_k:
        if filter_finite:  # a non-finite filter score bounds nothing
            n_ranked = 0  # test items at or above tau - tol; the others have >= K items above
            while n_ranked < n_test and w.scores[n_ranked] >= w.heap[0] - p.tol:
                n_ranked += 1
        for i in range(n_ranked, n_test):
            ranks[w.tests[i].entry] = max_rank + 1
    elif filter_finite and not p.gave_up:
        counted = p.n
        for i in range(counted):
            w.above[i] = p.above[i]
    p.stats, p.heap_k, p.careful = 0, 0, not filter_finite
    while counted < n_ranked:
        p.first, p.n = counted, min(<int64_t>GR_CHUNK, n_ranked - counted)
        one_pass(p, row, n_items, train_idx, n_train, test_idx, n_test)
        for i in range(p.n):
            w.above[counted + i] = p.above[i]
        counted += p.n
    for i in range(n_ranked):
        ranks[w.tests[i].entry] = 1 + i + w.above[i]


def rank_test_items(const factor_t[:, ::1] scores, const factor_t[:, ::1] user_factors,
                    const factor_t[:, ::1] item_factors, const double[::1] item_biases, bint has_bias,
                    bint items_finite, const double[::1] tol, const int64_t[::1] users,
                    const int64_t[::1] train_indptr, const int32_t[::1] train_indices,
                    const int64_t[::1] test_indptr, const int32_t[::1] test_indices,
                    int64_t[::1] ranks, double[::1] pool_min, double[::1] pool_max,
                    uint8_t[::1] nonfinite, uint64_t seed, bint noise, int64_t max_rank,
                    int64_t row_begin, int64_t row_end, bint given=False, int tie_mode=0,
                    double[::1] test_scores=None):
    """Rank the test items of users[row_begin:row_end].

    scores: the BLAS (filter) scores, batch x n_items; user_factors: batch x F, the batch's
    rows of A; item_factors: n_items x F; item_biases: n_items float64 (any length if not
    has_bias); items_finite: every item factor is finite; tol: batch, the bound on
    |filter - exact| of each user. With A = None (a non-personalised model) F is 0, the
    filter is the biases and tol is 0.
    max_rank: 0 for exact ranks of every test item; K > 0 when only ranks up to K are needed
    (a test item outside the user's top K then gets K + 1).
    given: the score rows are the scores themselves (a score matrix or function): they are
    the defined scores (F = 0 factors, tol = 0).
    tie_mode: 0, ties by key; 1 (optimistic), every test item before the other pool items of
    its score; 2 (pessimistic), after them (test items of one score by ascending item either
    way; `noise` must be off). The pool's keys are then item + 1, the test items' 0 or
    UINT64_MAX.
    test_scores: None, or an array like `ranks` that receives each test entry's defined score
    (the tie groups of ties="average").
    Indptr and indices are the whole CSR arrays (indices sorted within rows; a user's training
    and test items disjoint); results are written at the users' own positions in `ranks` (one
    per test entry) and in the pool statistics (one per user). Runs without the GIL, so threads
    may share a batch.
    """
    cdef int64_t c, f, u, n_items = scores.shape[1]
    cdef int64_t max_test = 0, n_factors = item_factors.shape[1]
    cdef Scratch w
    cdef gr_model model
    cdef gr_pass p
    cdef double* scores_out = NULL
    if test_scores is not None and test_scores.shape[0]:
        if test_scores.shape[0] != ranks.shape[0]:
            raise ValueError("test_scores must have one value per test entry")
        scores_out = &test_scores[0]
    if item_factors.shape[0] != n_items or user_factors.shape[1] != n_factors:
        raise ValueError("the factors do not match the score block")
    if has_bias and item_biases.shape[0] != n_items:
        raise ValueError("item_biases must have one value per item")
    for c in range(row_begin, row_end):
        u = users[c]
        max_test = max(max_test, test_indptr[u + 1] - test_indptr[u])
    model = factor_model(item_factors, item_biases, has_bias)
    p.model = &model
    p.seed, p.noise = seed, (2 if tie_mode else noise)
    with nogil:
        w.tests = <TestEntry*>malloc((max_test + 1) * sizeof(TestEntry))
        w.scores = <double*>malloc((max_test + 1) * sizeof(double))
        w.keys = <uint64_t*>malloc((max_test + 1) * sizeof(uint64_t))
        w.above = <int64_t*>malloc((max_test + 1) * sizeof(int64_t))
        w.heap = <double*>malloc((max_rank + 1) * sizeof(double))
        if w.tests == NULL or w.scores == NULL or w.keys == NULL or w.above == NULL or w.heap == NULL:
            free(w.tests)
            free(w.scores)
            free(w.keys)
            free(w.above)
            free(w.heap)
            with gil:
                raise MemoryError("gpureco: no memory for the ranking buffers (%d test items)" % max_test)
        p.heap = w.heap
        for c in range(row_begin, row_end):
            u = users[c]
            model.a = &user_factors[c, 0] if n_factors > 0 else NULL
            model.given = &scores[c, 0] if given else NULL
            model.zero = n_factors > 0 and items_finite  # a zero user scores 0 + bias on every item
            for f in range(n_factors):
                if user_factors[c, f] != 0:
                    model.zero = 0
                    break
            p.user, p.tol = <uint64_t>u, tol[c]
            rank_one_user(&scores[c, 0], n_items,
                          &train_indices[0] + train_indptr[u], train_indptr[u + 1] - train_indptr[u],
                          &test_indices[0] + test_indptr[u], test_indptr[u + 1] - test_indptr[u],
                          test_indptr[u], &p, given, tie_mode, max_rank,
                          &w, &ranks[0], scores_out, &pool_min[u], &pool_max[u], &nonfinite[u])
        free(w.tests)
        free(w.scores)
        free(w.keys)
        free(w.above)
        free(w.heap)


cdef gr_model factor_model(const factor_t[:, ::1] item_factors, const double[::1] item_biases, bint has_bias):
    """The model of exact scores for the item factors and biases (the user's factors set apart)."""
    cdef gr_model model
    model.a = NULL
    model.B = &item_factors[0, 0] if item_factors.shape[1] > 0 and item_factors.shape[0] > 0 else NULL
    model.n_factors = item_factors.shape[1]
    model.bias = &item_biases[0] if has_bias else NULL
    model.given = NULL
    model.zero = 0
    return model


def exact_scores(const factor_t[:, ::1] user_factors, const factor_t[:, ::1] item_factors,
                 const double[::1] item_biases, bint has_bias):
    """The defined scores (users x items, float64), computed one by one: for tests and docs."""
    import numpy as np
    cdef int64_t u, j, n_users = user_factors.shape[0], n_items = item_factors.shape[0]
    out = np.empty((n_users, n_items))
    cdef double[:, ::1] o = out
    cdef gr_model model = factor_model(item_factors, item_biases, has_bias)
    for u in range(n_users):
        model.a = &user_factors[u, 0] if model.n_factors > 0 else NULL
        for j in range(n_items):
            o[u, j] = exact_score(&model, j, user_factors[0, 0] if model.n_factors > 0 else <factor_t>0)
    return out


def vector_bytes():
    """The width of the vectors the ranking pass uses here (16, 32 or 64 bytes)."""
    return gr_vector_bytes()


def tie_keys(const int64_t[::1] users, const int64_t[::1] items, uint64_t seed, int noise):
    """The tie-break keys of (user, item) pairs, as the ranking uses them (for tests and docs);
    noise 0 (off), 1 (on) or 2 (the tie modes' pool keys, item + 1)."""
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
    cdef gr_model model = factor_model(item_factors, item_biases, has_bias)
    cdef factor_t tag = 0
    with nogil:
        for i in range(n):
            model.a = &user_factors[users[i], 0] if model.n_factors > 0 else NULL
            o[i] = exact_score(&model, items[i], tag)
    return out


def shared_entries(const int64_t[::1] indptr_a, const int32_t[::1] indices_a, const int64_t[::1] indptr_b,
                   const int32_t[::1] indices_b, int64_t n_columns):
    """(n, row, column): how many (row, column) entries two canonical CSR structures of the same
    rows (each row's column indices sorted and distinct, in [0, n_columns)) both store, and the
    first of them in row-major order ((-1, -1) where n = 0). Linear in the entries: each row's
    columns of `a` are set in a bitmap of n_columns bits (1M columns: 128 KB, cache-resident),
    `b`'s looked up, and `a`'s words cleared again (no chain from one step to the next, unlike a
    merge of the two lists, which waits on each load)."""
    cdef int64_t n = 0, first_row = -1, first_column = -1, r, i
    cdef int32_t c
    cdef uint64_t *bits = <uint64_t *> calloc(max((n_columns + 63) // 64, 1), sizeof(uint64_t))
    if bits == NULL:
        raise MemoryError(f"shared_entries: no memory for a bitmap of {n_columns} columns")
    with nogil:
        for r in range(min(indptr_a.shape[0], indptr_b.shape[0]) - 1):
            for i in range(indptr_a[r], indptr_a[r + 1]):
                c = indices_a[i]
                bits[c >> 6] |= (<uint64_t> 1) << (c & 63)
            for i in range(indptr_b[r], indptr_b[r + 1]):
                c = indices_b[i]
                if (bits[c >> 6] >> (c & 63)) & 1:
                    if n == 0:
                        first_row, first_column = r, c
                    n += 1
            for i in range(indptr_a[r], indptr_a[r + 1]):  # (only this row's bits are set)
                bits[indices_a[i] >> 6] = 0
        free(bits)
    return n, first_row, first_column
