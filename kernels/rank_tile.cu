// Rank counting over one tile of scores: for every (user of the batch, pool item of the
// tile), find how many of the user's test items outrank the item and count it there; keep
// the pool's minimum, maximum and non-finite flag. The CPU engine's count_ranks and
// rank_one_user (gpureco/_cpu_ranks.pyx) do the same per user; the ranks follow on the host
// side as prefix sums of the counts.
//
// Scores: row b of the batch is S[b * ld + j] for the tile's items item_begin + j. They are
// the filter (cuBLAS) scores, within tol[b] of the defined score (gr_exact_score), which
// settles every comparison closer than that; with `given`, they are the scores themselves.
#include "common.cuh"

#define RANK_THREADS 256
#define RANK_SEGMENT 4096  // items of one block
#define RANK_SHARED_TESTS 1024  // test items held in shared memory; more are read from global memory

template <typename T>
__device__ void rank_tile(const T* __restrict__ S, int64_t ld, int given, int64_t item_begin, int64_t n_tile,
                          const int64_t* __restrict__ users, const int64_t* __restrict__ train_indptr,
                          const int32_t* __restrict__ train_indices, const int64_t* __restrict__ tests_begin,
                          const double* __restrict__ test_scores, const uint64_t* __restrict__ test_keys,
                          int32_t* __restrict__ cnt, uint64_t* __restrict__ pool_min, uint64_t* __restrict__ pool_max,
                          int32_t* __restrict__ nonfinite, const double* __restrict__ tol,
                          const T* __restrict__ A, const T* __restrict__ B, int64_t n_factors,
                          const double* __restrict__ bias, uint64_t seed, int noise) {
    __shared__ uint32_t train_bits[RANK_SEGMENT / 32];
    __shared__ double sh_scores[RANK_SHARED_TESTS];
    __shared__ uint64_t sh_keys[RANK_SHARED_TESTS];
    __shared__ int32_t sh_cnt[RANK_SHARED_TESTS];
    __shared__ int64_t train_range[2];

    const int64_t b = blockIdx.x;  // user of the batch
    const int64_t seg_begin = (int64_t)blockIdx.y * RANK_SEGMENT;
    if (seg_begin >= n_tile) return;
    const int64_t seg_n = min((int64_t)RANK_SEGMENT, n_tile - seg_begin);
    const int64_t first_item = item_begin + seg_begin;
    const int64_t u = users[b];
    const int32_t* train = train_indices + train_indptr[u];
    const int64_t n_train = train_indptr[u + 1] - train_indptr[u];
    const int64_t t0 = tests_begin[b], m = tests_begin[b + 1] - t0;
    const bool in_shared = m <= RANK_SHARED_TESTS;

    for (int i = threadIdx.x; i < RANK_SEGMENT / 32; i += blockDim.x) train_bits[i] = 0;
    if (threadIdx.x == 0) {
        train_range[0] = gr_lower_bound(train, n_train, first_item);
        train_range[1] = gr_lower_bound(train, n_train, first_item + seg_n);
    }
    if (in_shared) {
        for (int64_t i = threadIdx.x; i < m; i += blockDim.x) {
            sh_scores[i] = test_scores[t0 + i];
            sh_keys[i] = test_keys[t0 + i];
            sh_cnt[i] = 0;
        }
    }
    __syncthreads();
    for (int64_t t = train_range[0] + threadIdx.x; t < train_range[1]; t += blockDim.x) {
        const int64_t j = train[t] - first_item;
        atomicOr(&train_bits[j >> 5], 1u << (j & 31));
    }
    __syncthreads();

    const double* ts = in_shared ? sh_scores : test_scores + t0;
    const uint64_t* tk = in_shared ? sh_keys : test_keys + t0;
    int32_t* counts = in_shared ? sh_cnt : cnt + t0;
    const double tl = tol[b];
    const double worst = m > 0 ? ts[m - 1] - tl : GR_INF;  // pool items below it outrank no test item
    const T* row = S + b * ld + seg_begin;
    const T* a = n_factors > 0 ? A + u * n_factors : A;
    double mn = GR_INF, mx = -GR_INF;
    int bad = 0;
    for (int64_t j = threadIdx.x; j < seg_n; j += blockDim.x) {
        if (train_bits[j >> 5] & (1u << (j & 31))) continue;
        const int64_t item = first_item + j;
        T raw = row[j];
        if (!given && bias) raw = raw + (T)bias[item];
        const double s = (double)raw;
        mn = fmin(mn, s);
        mx = fmax(mx, s);
        const bool finite = isfinite(s);
        bad |= !finite;
        if (finite && s < worst) continue;
        int64_t c = finite ? gr_count_above(ts, m, s) : 0;
        if (!finite || (c > 0 && ts[c - 1] <= s + tl) || (c < m && ts[c] >= s - tl)) {
            // a test item lies within the filter's error, or the filter overflowed (inf, or
            // inf - inf): decide with the defined score
            const double e = given ? s : gr_exact_score(a, B + item * n_factors, n_factors, bias, item);
            c = gr_count_outranking(ts, tk, m, e, gr_tie_key(seed, (uint64_t)u, (uint64_t)item, noise));
        }
        if (c < m) atomicAdd(&counts[c], 1);
    }
    gr_fold_pool_stats(mn, mx, bad, &pool_min[b], &pool_max[b], &nonfinite[b]);
    if (in_shared) {
        __syncthreads();
        for (int64_t i = threadIdx.x; i < m; i += blockDim.x)
            if (sh_cnt[i]) atomicAdd(&cnt[t0 + i], sh_cnt[i]);
    }
}

#define RANK_TILE(NAME, T)                                                                                     \
    extern "C" __global__ void __launch_bounds__(RANK_THREADS) NAME(                                           \
        const T* S, int64_t ld, int given, int64_t item_begin, int64_t n_tile, const int64_t* users,          \
        const int64_t* train_indptr, const int32_t* train_indices, const int64_t* tests_begin,                \
        const double* test_scores, const uint64_t* test_keys, int32_t* cnt, uint64_t* pool_min,                \
        uint64_t* pool_max, int32_t* nonfinite, const double* tol, const T* A, const T* B, int64_t n_factors,  \
        const double* bias, uint64_t seed, int noise) {                                                       \
        rank_tile<T>(S, ld, given, item_begin, n_tile, users, train_indptr, train_indices, tests_begin,       \
                     test_scores, test_keys, cnt, pool_min, pool_max, nonfinite, tol, A, B, n_factors, bias,   \
                     seed, noise);                                                                             \
    }

RANK_TILE(rank_tile_f32, float)
RANK_TILE(rank_tile_f64, double)
