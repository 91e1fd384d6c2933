// Top-K lists, one tile of scores at a time. Per user, a buffer keeps every pool item seen
// so far whose filter score is at least tau - 2 tol, where tau is a lower bound of the
// K-th largest filter score seen (raised by a radix select whenever the buffer fills up).
// The buffer therefore holds every item that can be in the top K by the defined score
// (|filter - defined| <= tol); the host side computes the candidates' defined scores and
// keeps the K best (ties by key). A user whose near-ties overflow the buffer, or whose
// filter scores are not all finite (a float32 overflow bounds nothing), is flagged and
// ranked by the slower full-row path.
#include "common.cuh"

#define TOPK_THREADS 1024
#define TOPK_CHUNK 4096  // items examined between two checks of the free space
#define TOPK_CAPACITY 8192  // candidates held per user
#define TOPK_MAX_K 1024  // larger K go by the full-row path (a shrink must leave room for a chunk)
#define TOPK_PER_THREAD (TOPK_CAPACITY / TOPK_THREADS)

// The k-th largest of scores[0..n) (k <= n): MSB-first radix select on the order keys.
__device__ double kth_largest(const double* scores, int n, int64_t k, unsigned int* hist, uint64_t* sh_prefix,
                              int64_t* sh_left) {
    uint64_t prefix = 0, mask = 0;
    int64_t left = k;
    for (int shift = 56; shift >= 0; shift -= 8) {
        for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
        __syncthreads();
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            const uint64_t key = gr_order_key(scores[i]);
            if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255], 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int64_t above = 0;
            int d = 255;
            for (; d > 0; --d) {
                if (above + hist[d] >= left) break;
                above += hist[d];
            }
            *sh_left = left - above;
            *sh_prefix = prefix | ((uint64_t)d << shift);
        }
        __syncthreads();
        left = *sh_left;
        prefix = *sh_prefix;
        mask |= 0xFFULL << shift;
        __syncthreads();
    }
    return gr_from_order_key(prefix);
}

template <typename T>
__device__ void topk_tile(const T* __restrict__ S, int64_t ld, int given, int64_t item_begin, int64_t n_tile,
                          const int64_t* __restrict__ users, const int64_t* __restrict__ train_indptr,
                          const int32_t* __restrict__ train_indices, const double* __restrict__ bias,
                          const double* __restrict__ tol, int64_t k, double* __restrict__ cand_scores,
                          int32_t* __restrict__ cand_items, int32_t* __restrict__ count, double* __restrict__ tau,
                          int32_t* __restrict__ overflow) {
    __shared__ uint32_t train_bits[TOPK_CHUNK / 32];
    __shared__ int64_t train_range[2];
    __shared__ unsigned int hist[256];
    __shared__ uint64_t sh_prefix;
    __shared__ int64_t sh_left;
    __shared__ int sh_count;
    __shared__ int sh_unsure;
    __shared__ double sh_tau;

    const int64_t b = blockIdx.x;
    if (overflow[b]) return;
    const int64_t u = users[b];
    const int32_t* train = train_indices + train_indptr[u];
    const int64_t n_train = train_indptr[u + 1] - train_indptr[u];
    const double band = 2.0 * tol[b];
    double* cs = cand_scores + b * TOPK_CAPACITY;
    int32_t* ci = cand_items + b * TOPK_CAPACITY;
    const T* row = S + b * ld;
    if (threadIdx.x == 0) {
        sh_count = count[b];
        sh_tau = tau[b];
        sh_unsure = 0;
    }
    __syncthreads();

    for (int64_t c0 = 0; c0 < n_tile; c0 += TOPK_CHUNK) {
        if (sh_count + TOPK_CHUNK > TOPK_CAPACITY) {  // make room: raise tau, drop what fell below it
            const int n = sh_count;
            const double kth = kth_largest(cs, n, k, hist, &sh_prefix, &sh_left);
            const double new_tau = fmax(sh_tau, kth);
            double keep_s[TOPK_PER_THREAD];
            int32_t keep_i[TOPK_PER_THREAD];
            int n_keep = 0;
            for (int i = threadIdx.x; i < n; i += blockDim.x) {
                if (cs[i] >= new_tau - band) {
                    keep_s[n_keep] = cs[i];
                    keep_i[n_keep] = ci[i];
                    ++n_keep;
                }
            }
            __syncthreads();
            if (threadIdx.x == 0) {
                sh_count = 0;
                sh_tau = new_tau;
            }
            __syncthreads();
            for (int q = 0; q < n_keep; ++q) {
                const int p = atomicAdd(&sh_count, 1);
                cs[p] = keep_s[q];
                ci[p] = keep_i[q];
            }
            __syncthreads();
            if (sh_count + TOPK_CHUNK > TOPK_CAPACITY) {  // too many near-ties for the buffer
                if (threadIdx.x == 0) overflow[b] = 1;
                return;
            }
        }
        const int64_t chunk_n = min((int64_t)TOPK_CHUNK, n_tile - c0);
        const int64_t first_item = item_begin + c0;
        for (int i = threadIdx.x; i < TOPK_CHUNK / 32; i += blockDim.x) train_bits[i] = 0;
        if (threadIdx.x == 0) {
            train_range[0] = gr_lower_bound(train, n_train, first_item);
            train_range[1] = gr_lower_bound(train, n_train, first_item + chunk_n);
        }
        __syncthreads();
        for (int64_t t = train_range[0] + threadIdx.x; t < train_range[1]; t += blockDim.x) {
            const int64_t j = train[t] - first_item;
            atomicOr(&train_bits[j >> 5], 1u << (j & 31));
        }
        __syncthreads();
        const double threshold = sh_tau - band;
        for (int64_t j = threadIdx.x; j < chunk_n; j += blockDim.x) {
            if (train_bits[j >> 5] & (1u << (j & 31))) continue;
            const int64_t item = first_item + j;
            T raw = row[c0 + j];
            if (!given && bias) raw = raw + (T)bias[item];
            const double s = (double)raw;
            if (!given && !isfinite(s)) {  // the filter overflowed: the full-row path decides
                atomicOr(&sh_unsure, 1);
                continue;
            }
            if (s >= threshold) {  // NaN never is
                const int p = atomicAdd(&sh_count, 1);
                cs[p] = s;
                ci[p] = (int32_t)item;
            }
        }
        __syncthreads();
        if (sh_unsure) {  // read by every thread after the barrier: all return together
            if (threadIdx.x == 0) overflow[b] = 1;
            return;
        }
    }
    if (threadIdx.x == 0) {
        count[b] = sh_count;
        tau[b] = sh_tau;
    }
}

#define TOPK_TILE(NAME, T)                                                                                    \
    extern "C" __global__ void __launch_bounds__(TOPK_THREADS) NAME(                                          \
        const T* S, int64_t ld, int given, int64_t item_begin, int64_t n_tile, const int64_t* users,         \
        const int64_t* train_indptr, const int32_t* train_indices, const double* bias, const double* tol,    \
        int64_t k, double* cand_scores, int32_t* cand_items, int32_t* count, double* tau, int32_t* overflow) { \
        topk_tile<T>(S, ld, given, item_begin, n_tile, users, train_indptr, train_indices, bias, tol, k,      \
                     cand_scores, cand_items, count, tau, overflow);                                          \
    }

TOPK_TILE(topk_tile_f32, float)
TOPK_TILE(topk_tile_f64, double)
