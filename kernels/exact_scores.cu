// The defined scores and tie keys of (user, item) pairs (the test items of a batch, the
// top-K candidates), a batch's test items sorted by them, and the end of a batch's ranking:
// pool statistics recounted from the defined scores where the filter cannot settle them, and
// the test items' ranks.
#include "common.cuh"

template <typename T>
__device__ void pair_scores(const int64_t* __restrict__ users, const int64_t* __restrict__ items, int64_t n,
                            const T* __restrict__ A, const T* __restrict__ B, int64_t n_factors,
                            const double* __restrict__ bias, uint64_t seed, int noise,
                            double* __restrict__ scores, uint64_t* __restrict__ keys) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t u = users[i], j = items[i];
        if (scores) scores[i] = gr_exact_score(A + u * n_factors, B + j * n_factors, n_factors, bias, j);
        keys[i] = gr_tie_key(seed, (uint64_t)u, (uint64_t)j, noise);
    }
}

// One block per user of a batch (tests_begin: each user's first test entry), before the rank
// kernels: the user's test entries sorted best-first, as _scores.order_key sorts them on the
// host: larger defined score first (gr_order_key: -0.0 and 0.0 alike, a NaN by its bits), then
// smaller tie key, then the earlier entry. Each entry's place is the number of the user's
// entries that go before it (gr_count_before: integer compares of the keys in shared memory, m^2 /
// 128 per thread, for a user of at most SORT_TESTS_MAX entries; _gpu.sort_tests sorts a batch with a
// larger user by cupy.lexsort instead). With use_keys 0 every tie key is tie_key (the tie
// modes: the entries of one score by ascending entry). Floats are only copied.
#define SORT_TESTS_THREADS 128
#define SORT_TESTS_MAX 1024
extern "C" __global__ void __launch_bounds__(SORT_TESTS_THREADS) sort_tests(
    const int64_t* __restrict__ tests_begin, const double* __restrict__ scores, const uint64_t* __restrict__ keys,
    const int64_t* __restrict__ entry, uint64_t tie_key, int use_keys, double* __restrict__ scores_out,
    uint64_t* __restrict__ keys_out, int64_t* __restrict__ entry_out) {
    __shared__ uint64_t sh_order[SORT_TESTS_MAX];  // gr_order_key of each entry's score
    __shared__ uint64_t sh_key[SORT_TESTS_MAX];
    const int64_t t0 = tests_begin[blockIdx.x];
    const int m = (int)(tests_begin[blockIdx.x + 1] - t0);  // at most SORT_TESTS_MAX (the host's check)
    for (int i = threadIdx.x; i < m; i += blockDim.x) {
        sh_order[i] = gr_order_key(scores[t0 + i]);
        sh_key[i] = use_keys ? keys[t0 + i] : tie_key;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < m; i += blockDim.x) {
        const uint64_t k = sh_key[i];
        const int place = gr_count_before(sh_order, sh_key, m, 0, sh_order[i], k, i);
        scores_out[t0 + place] = scores[t0 + i];
        keys_out[t0 + place] = k;
        entry_out[t0 + place] = entry[t0 + i];
    }
}

// The minimum, maximum and non-finite flag of the defined scores of user u's pool
// (gpureco/_cpu_ranks.pyx: exact_pool_stats), folded into *pool_min, *pool_max, *nonfinite by
// the whole block (every thread must call it).
template <typename T>
__device__ void block_pool_stats(int64_t u, int64_t n_items, const int64_t* __restrict__ train_indptr,
                                 const int32_t* __restrict__ train_indices, const T* __restrict__ A,
                                 const T* __restrict__ B, int64_t n_factors, const double* __restrict__ bias,
                                 uint64_t* pool_min, uint64_t* pool_max, int32_t* nonfinite) {
    const int32_t* train = train_indices + train_indptr[u];
    const int64_t n_train = train_indptr[u + 1] - train_indptr[u];
    double mn = GR_INF, mx = -GR_INF;
    int bad = 0;
    for (int64_t j = threadIdx.x; j < n_items; j += blockDim.x) {
        const int64_t t = gr_lower_bound(train, n_train, j);
        if (t < n_train && train[t] == j) continue;
        const double s = gr_exact_score(A + u * n_factors, B + j * n_factors, n_factors, bias, j);
        mn = fmin(mn, s);
        mx = fmax(mx, s);
        bad |= !isfinite(s);
    }
    gr_fold_pool_stats(mn, mx, bad, pool_min, pool_max, nonfinite);
}

// One block per user of a batch, after the rank kernels (gpureco/engine/_gpu.py: rank_users):
// the user's pool statistics, recounted from the defined scores where the filter cannot settle
// them (a non-finite filter statistic, or a pool whose filter scores span at most 2 tol), and
// the ranks of its test items, written to the evaluation's arrays at the user's row and at
// its test entries. The batch's test items are sorted best-first per user (tests_begin: each
// user's first); counts[i] pool items rank between test items i - 1 and i, so the i-th test
// item's rank is a prefix sum of integers. tie_mode 1 / 2 (optimistic / pessimistic) moves each
// test item of a group of equal defined scores to its place before / after the group's pool
// items. Floats are only copied and compared here (the test for an unsure pool rounds mx - mn once;
// 2 tol is exact); the ranks are integer scans across warp 0, 32 test items a step.
template <typename T>
__device__ void finish_batch(const int64_t* __restrict__ users, const int64_t* __restrict__ tests_begin,
                             const int32_t* __restrict__ counts, const double* __restrict__ test_scores,
                             const int64_t* __restrict__ entry, const double* __restrict__ tol, int given,
                             int tie_mode, int64_t n_items, const int64_t* __restrict__ train_indptr,
                             const int32_t* __restrict__ train_indices, const T* __restrict__ A,
                             const T* __restrict__ B, int64_t n_factors, const double* __restrict__ bias,
                             uint64_t* __restrict__ pool_min, uint64_t* __restrict__ pool_max,
                             int32_t* __restrict__ nonfinite, int64_t* __restrict__ ranks,
                             double* __restrict__ scores_out, double* __restrict__ user_min,
                             double* __restrict__ user_max, uint8_t* __restrict__ user_bad) {
    const int64_t b = blockIdx.x, u = users[b];
    double mn, mx;
    auto decode = [&]() {  // the batch row's statistics: whether they are bad
        mn = gr_from_order_key(pool_min[b]);
        mx = gr_from_order_key(pool_max[b]);
        return nonfinite[b] != 0 || isinf(mn) || isinf(mx);
    };
    __shared__ int unsure;
    if (threadIdx.x == 0) {
        const bool bad = decode();
        unsure = !given && (bad || !(gr_add(mx, -mn) > gr_mul(2.0, tol[b])));  // (NaN: an empty pool)
        if (unsure) {
            pool_min[b] = ~0ULL;
            pool_max[b] = 0;
            nonfinite[b] = 0;
        }
    }
    __syncthreads();
    if (unsure) {
        block_pool_stats<T>(u, n_items, train_indptr, train_indices, A, B, n_factors, bias, &pool_min[b], &pool_max[b],
                            &nonfinite[b]);
        __syncthreads();
    }
    if (threadIdx.x >= 32) return;  // warp 0 writes the user's results
    const int lane = threadIdx.x;
    if (lane == 0) {
        user_bad[u] = decode();
        user_min[u] = mn;
        user_max[u] = mx;
    }
    const int64_t t0 = tests_begin[b], t1 = tests_begin[b + 1];
    // 32 test items a step, item i in lane (i - t0) % 32: the pool items above it (a prefix sum
    // of counts) and where its tie group starts (a running maximum of the starts), each carried
    // from the step before (NaN scores are each a group of their own: NaN != NaN)
    int64_t above = 0, first = t0;
    for (int64_t c = t0; c < t1; c += 32) {
        const int64_t i = c + lane;
        const bool in = i < t1;
        int64_t a = in ? (int64_t)counts[i] : 0;
        int64_t f = in && (i == t0 || test_scores[i] != test_scores[i - 1]) ? i : first;
        for (int off = 1; off < 32; off <<= 1) {
            const int64_t ya = __shfl_up_sync(0xFFFFFFFFu, a, off), yf = __shfl_up_sync(0xFFFFFFFFu, f, off);
            if (lane >= off) {
                a += ya;
                f = yf > f ? yf : f;
            }
        }
        a += above;
        if (in) {
            ranks[entry[i]] = tie_mode == 1 ? a + 1 + (i - f) : tie_mode == 2 ? a + 1 + i : a;  // 2: less its end, below
            if (scores_out) scores_out[entry[i]] = test_scores[i];
        }
        above = __shfl_sync(0xFFFFFFFFu, a, 31);
        first = __shfl_sync(0xFFFFFFFFu, f, 31);
    }
    if (tie_mode != 2) return;
    // pessimistic: the rank less where the item's tie group ends (the next start, or t1), a
    // running minimum from the last step back
    int64_t end = t1;
    for (int64_t c = t1 > t0 ? t0 + (t1 - 1 - t0) / 32 * 32 : t1; c >= t0 && c < t1; c -= 32) {
        const int64_t i = c + lane;
        const bool in = i < t1;
        int64_t e = in && i + 1 < t1 && test_scores[i + 1] != test_scores[i] ? i + 1 : end;
        for (int off = 1; off < 32; off <<= 1) {
            const int64_t y = __shfl_down_sync(0xFFFFFFFFu, e, off);
            if (lane + off < 32) e = y < e ? y : e;
        }
        if (in) ranks[entry[i]] -= e;
        end = __shfl_sync(0xFFFFFFFFu, e, 0);
    }
}

#define EXACT_SCORES(SUFFIX, T)                                                                                \
    extern "C" __global__ void pair_scores_##SUFFIX(const int64_t* users, const int64_t* items, int64_t n,     \
                                                    const T* A, const T* B, int64_t n_factors,                 \
                                                    const double* bias, uint64_t seed, int noise,              \
                                                    double* scores, uint64_t* keys) {                          \
        pair_scores<T>(users, items, n, A, B, n_factors, bias, seed, noise, scores, keys);                    \
    }                                                                                                          \
    extern "C" __global__ void finish_batch_##SUFFIX(                                                       \
        const int64_t* users, const int64_t* tests_begin, const int32_t* counts, const double* test_scores,      \
        const int64_t* entry, const double* tol, int given, int tie_mode, int64_t n_items,                       \
        const int64_t* train_indptr, const int32_t* train_indices, const T* A, const T* B, int64_t n_factors,    \
        const double* bias, uint64_t* pool_min, uint64_t* pool_max, int32_t* nonfinite, int64_t* ranks,          \
        double* scores_out, double* user_min, double* user_max, uint8_t* user_bad) {                              \
        finish_batch<T>(users, tests_begin, counts, test_scores, entry, tol, given, tie_mode, n_items,           \
                        train_indptr, train_indices, A, B, n_factors, bias, pool_min, pool_max, nonfinite,       \
                        ranks, scores_out, user_min, user_max, user_bad);                                         \
    }

EXACT_SCORES(f32, float)
EXACT_SCORES(f64, double)
