// The defined scores and tie keys of (user, item) pairs (the test items of a batch, the
// top-K candidates), and the end of a batch's ranking: pool statistics recounted from the
// defined scores where the filter cannot settle them, and the test items' ranks.
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
// 2 tol is exact). Thread 0 walks the user's test items: O(test items), one block per user.
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
    __shared__ int unsure;
    if (threadIdx.x == 0) {
        const double mn = gr_from_order_key(pool_min[b]), mx = gr_from_order_key(pool_max[b]);
        const int bad = nonfinite[b] != 0 || isinf(mn) || isinf(mx);
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
    if (threadIdx.x != 0) return;
    const double mn = gr_from_order_key(pool_min[b]), mx = gr_from_order_key(pool_max[b]);
    user_min[u] = mn;
    user_max[u] = mx;
    user_bad[u] = nonfinite[b] != 0 || isinf(mn) || isinf(mx);
    const int64_t t1 = tests_begin[b + 1];
    int64_t above = 0, first = 0, end = 0;  // pool items above test item i; its tie group [first, end)
    for (int64_t i = tests_begin[b]; i < t1; ++i) {
        above += counts[i];
        if (i >= end) {  // a new group: NaN scores are each a group of their own (NaN != NaN)
            first = i;
            for (end = i + 1; end < t1 && !(test_scores[end] != test_scores[end - 1]); ++end) {}
        }
        ranks[entry[i]] = tie_mode == 1 ? above + 1 + (i - first) : tie_mode == 2 ? above + 1 - (end - i) : above;
        if (scores_out) scores_out[entry[i]] = test_scores[i];
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
