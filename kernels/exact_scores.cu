// The defined scores and tie keys of (user, item) pairs: the test items of a batch, the
// top-K candidates, and the pool statistics of users whose filter scores cannot settle them.
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

// One block per user: the minimum, maximum and non-finite flag of the defined scores of
// the user's pool (gpureco/_cpu_ranks.pyx: exact_pool_stats).
template <typename T>
__device__ void pool_stats(const int64_t* __restrict__ users, int64_t n_items, const int64_t* __restrict__ train_indptr,
                           const int32_t* __restrict__ train_indices, const T* __restrict__ A,
                           const T* __restrict__ B, int64_t n_factors, const double* __restrict__ bias,
                           uint64_t* __restrict__ pool_min, uint64_t* __restrict__ pool_max,
                           int32_t* __restrict__ nonfinite) {
    const int64_t b = blockIdx.x, u = users[b];
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
    gr_fold_pool_stats(mn, mx, bad, &pool_min[b], &pool_max[b], &nonfinite[b]);
}

#define EXACT_SCORES(SUFFIX, T)                                                                                \
    extern "C" __global__ void pair_scores_##SUFFIX(const int64_t* users, const int64_t* items, int64_t n,     \
                                                    const T* A, const T* B, int64_t n_factors,                 \
                                                    const double* bias, uint64_t seed, int noise,              \
                                                    double* scores, uint64_t* keys) {                          \
        pair_scores<T>(users, items, n, A, B, n_factors, bias, seed, noise, scores, keys);                    \
    }                                                                                                          \
    extern "C" __global__ void pool_stats_##SUFFIX(const int64_t* users, int64_t n_items,                       \
                                                   const int64_t* train_indptr, const int32_t* train_indices,  \
                                                   const T* A, const T* B, int64_t n_factors,                  \
                                                   const double* bias, uint64_t* pool_min, uint64_t* pool_max, \
                                                   int32_t* nonfinite) {                                       \
        pool_stats<T>(users, n_items, train_indptr, train_indices, A, B, n_factors, bias, pool_min, pool_max,  \
                      nonfinite);                                                                              \
    }

EXACT_SCORES(f32, float)
EXACT_SCORES(f64, double)
