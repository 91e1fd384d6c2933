// Top-K lists, one tile of scores at a time. Per user, a buffer keeps every pool item seen
// so far whose filter score is at least tau - 2 tol, where tau is a lower bound of the
// K-th largest filter score seen (raised by a radix select whenever the buffer fills up).
// The buffer therefore holds every item that can be in the top K by the defined score
// (|filter - defined| <= tol); their defined scores are computed (exact_scores.cu
// pair_scores) and topk_select keeps the K best (ties by key). A user whose near-ties
// overflow the buffer, or whose filter scores are not all finite (a float32 overflow bounds
// nothing), is flagged and ranked by the slower full-row path.
#include "common.cuh"
#include "score_tile.cuh"  // fused_topk

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

struct TopkShared {  // a user's buffer state and the radix select's scratch, in shared memory
    unsigned int hist[256];
    uint64_t prefix;
    int64_t left;
    int count;  // candidates held
    double tau;  // a lower bound of the user's k-th largest filter score
};

// Makes room in a user's buffer of sh.count >= k candidates: tau rises to their k-th largest
// (if higher), and only the candidates at or above tau - band stay, in any order. Every
// thread of the block calls it; it ends at a barrier.
__device__ void topk_shrink(double* cs, int32_t* ci, int64_t k, double band, TopkShared& sh) {
    const int n = sh.count;
    const double kth = kth_largest(cs, n, k, sh.hist, &sh.prefix, &sh.left);
    const double new_tau = fmax(sh.tau, kth);
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
        sh.count = 0;
        sh.tau = new_tau;
    }
    __syncthreads();
    for (int q = 0; q < n_keep; ++q) {
        const int p = atomicAdd(&sh.count, 1);
        cs[p] = keep_s[q];
        ci[p] = keep_i[q];
    }
    __syncthreads();
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
    __shared__ TopkShared sh;
    __shared__ int sh_unsure;

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
        sh.count = count[b];
        sh.tau = tau[b];
        sh_unsure = 0;
    }
    __syncthreads();

    for (int64_t c0 = 0; c0 < n_tile; c0 += TOPK_CHUNK) {
        if (sh.count + TOPK_CHUNK > TOPK_CAPACITY) {  // make room: raise tau, drop what fell below it
            topk_shrink(cs, ci, k, band, sh);
            if (sh.count + TOPK_CHUNK > TOPK_CAPACITY) {  // too many near-ties for the buffer
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
        const double threshold = sh.tau - band;
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
                const int p = atomicAdd(&sh.count, 1);
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
        count[b] = sh.count;
        tau[b] = sh.tau;
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

// After the last tile, or after fused_topk: a user with at least k candidates gets tau raised
// to their k-th largest (if higher) and keeps only those at or above tau - 2 tol, so that few
// more than k need a defined score. A user whose buffer overflowed (count > TOPK_CAPACITY after
// fused_topk) is flagged for the full-row path; one with fewer than k is left as it is.
extern "C" __global__ void __launch_bounds__(TOPK_THREADS) topk_finish(int64_t k, const double* __restrict__ tol,
                                                                      double* __restrict__ cand_scores,
                                                                      int32_t* __restrict__ cand_items,
                                                                      int32_t* __restrict__ count,
                                                                      double* __restrict__ tau,
                                                                      int32_t* __restrict__ overflow) {
    __shared__ TopkShared sh;
    const int64_t b = blockIdx.x;
    const int n = count[b];
    const bool over = overflow[b] || n > TOPK_CAPACITY;
    __syncthreads();  // every thread has read overflow[b] before thread 0 writes it
    if (over) {
        if (threadIdx.x == 0) overflow[b] = 1;
        return;
    }
    if (n < k) return;
    if (threadIdx.x == 0) {
        sh.count = n;
        sh.tau = tau[b];
    }
    __syncthreads();
    topk_shrink(cand_scores + b * TOPK_CAPACITY, cand_items + b * TOPK_CAPACITY, k, 2.0 * tol[b], sh);
    if (threadIdx.x == 0) {
        count[b] = sh.count;
        tau[b] = sh.tau;
    }
}

// One block per user of a batch, after topk_finish (_gpu.top_k): the user's held candidates,
// buffer slots 0 .. m - 1 (m = offsets[b + 1] - offsets[b]: its count, or 0 for a user flagged
// for the full-row path), copied to entries offsets[b] .. offsets[b + 1] - 1 of flat arrays in
// slot order, with the user's row b (local): the candidates in the order of a scan of the
// buffers row by row, without a mask of every slot of the batch (cupy.nonzero over nb x
// TOPK_CAPACITY flags).
extern "C" __global__ void __launch_bounds__(256) topk_gather(const int64_t* __restrict__ offsets,
                                                              const int32_t* __restrict__ cand_items,
                                                              const double* __restrict__ cand_scores,
                                                              int64_t* __restrict__ local, int64_t* __restrict__ items,
                                                              double* __restrict__ scores) {
    const int64_t b = blockIdx.x, c0 = offsets[b];
    const int m = (int)(offsets[b + 1] - c0);  // at most TOPK_CAPACITY
    for (int i = threadIdx.x; i < m; i += blockDim.x) {
        local[c0 + i] = b;
        items[c0 + i] = cand_items[b * TOPK_CAPACITY + i];
        scores[c0 + i] = cand_scores[b * TOPK_CAPACITY + i];
    }
}

// One block per user of a batch, after the candidates' defined scores (_gpu.top_k): the user's
// candidates (entries offsets[b] .. offsets[b + 1], at most TOPK_CAPACITY: a buffer's) ranked
// as _scores.select_top_k ranks them, larger defined score first (gr_order_key: -0.0 and 0.0
// alike), then smaller tie key (distinct for distinct items), then the earlier entry; the first
// k written to row b of out_items and out_scores (the score plus 0.0, as the host's), the rest
// of the row left as it is (-1 and NaN). A NaN score is never chosen and goes before none.
// Each candidate's place is the number of the user's candidates that go before it, integer
// compares of keys read TOPK_SELECT_CHUNK at a time into shared memory (gr_count_before: m^2 /
// TOPK_SELECT_THREADS compares of order keys a thread, any block size up to it, the tie keys
// compared only where another candidate has the same score), in place of a sort of the batch's
// candidates (cupy.lexsort: Thrust's merge sort over three keys, its cost growing with every
// user's candidates together). Floats are only copied. (sort_tests in exact_scores.cu places a
// batch's test items the same way, all of them and NaN included, from one chunk.)
#define TOPK_SELECT_THREADS 256
#define TOPK_SELECT_CHUNK 1024
extern "C" __global__ void __launch_bounds__(TOPK_SELECT_THREADS) topk_select(
    const int64_t* __restrict__ offsets, const int64_t* __restrict__ items, const double* __restrict__ scores,
    const uint64_t* __restrict__ keys, int64_t k, int64_t* __restrict__ out_items, double* __restrict__ out_scores) {
    __shared__ uint64_t sh_order[TOPK_SELECT_CHUNK];  // gr_order_key of each score; 0 for NaN (no number's key)
    __shared__ uint64_t sh_key[TOPK_SELECT_CHUNK];
    const int64_t b = blockIdx.x, c0 = offsets[b];
    const int m = (int)(offsets[b + 1] - c0);  // at most TOPK_CAPACITY (a buffer's candidates)
    for (int i0 = 0; i0 < m; i0 += blockDim.x) {  // every thread the same rounds: the barriers
        const int i = i0 + (int)threadIdx.x;
        const double s = i < m ? scores[c0 + i] : GR_NAN;
        const bool mine = !isnan(s);
        const uint64_t o = mine ? gr_order_key(s) : 0, key = i < m ? keys[c0 + i] : 0;
        int place = 0;
        for (int j0 = 0; j0 < m; j0 += TOPK_SELECT_CHUNK) {
            const int n = min(TOPK_SELECT_CHUNK, m - j0);
            __syncthreads();  // the last chunk read by every thread
            for (int j = threadIdx.x; j < n; j += blockDim.x) {
                const double sj = scores[c0 + j0 + j];
                sh_order[j] = isnan(sj) ? 0 : gr_order_key(sj);
                sh_key[j] = keys[c0 + j0 + j];
            }
            __syncthreads();
            if (mine) place += gr_count_before(sh_order, sh_key, n, j0, o, key, i);
        }
        if (mine && place < k) {
            out_items[b * k + place] = items[c0 + i];
            out_scores[b * k + place] = gr_add(s, 0.0);
        }
    }
}

// Top-K candidates fused with the scoring, for float32 factor models: topk_tile's buffers
// filled from filter scores computed in registers (score_tile.cuh, as fused_rank.cu does), so
// that no score tile is written or read; fused_topk_f32 scores by float32 FMA chains (FmaTile),
// fused_topk_tf32, TF32 mode, on tensor cores (TensorTile: rounds of 8 items). Each batch row r comes with
// threshold[r], a float at or below tau - 2 tol, where tau is the r-th largest filter score of
// a sample of the items (topk_tile and topk_finish) and tol the larger of the two filters'
// bounds (whether that reaches every top-K item, the host tells afterwards: _gpu.top_k). Every
// pool item whose filter score reaches it is appended to the user's buffer (global atomics:
// any order; topk_select orders the candidates by defined score and key), up to TOPK_CAPACITY
// (count keeps counting past it: topk_finish then flags the user). A pool score that is not
// finite flags the user for the full-row path, as in topk_tile. An overflowed user
// (overflow[b] set before the launch) is skipped. One block takes FUSED_USERS rows and a span
// of items; the bias is added, and the threshold compared, in float (a flush to zero under
// -ftz=true only ever adds candidates).
__device__ __forceinline__ void topk_append(int64_t b, float s, int64_t item, double* cand_scores, int32_t* cand_items,
                                        int32_t* count) {
    const int p = atomicAdd(&count[b], 1);
    if (p < TOPK_CAPACITY) {
        cand_scores[b * TOPK_CAPACITY + p] = (double)s;
        cand_items[b * TOPK_CAPACITY + p] = (int32_t)item;
    }
}

#define GR_FUSED_TOPK_ARGS                                                                                          \
    const float *__restrict__ U, const float *__restrict__ B, int64_t n_factors, const double *__restrict__ bias,  \
        int64_t n_items, int64_t span, int64_t nb, const int64_t *__restrict__ users,                               \
        const int64_t *__restrict__ train_indptr, const int32_t *__restrict__ train_indices,                        \
        const float *__restrict__ threshold, double *__restrict__ cand_scores, int32_t *__restrict__ cand_items,    \
        int32_t *__restrict__ count, int32_t *__restrict__ overflow

template <typename Tile>
__device__ __forceinline__ void fused_topk(GR_FUSED_TOPK_ARGS) {
    __shared__ typename Tile::Factors tile_factors;
    __shared__ uint32_t train_bits[FUSED_USERS][FUSED_ITEMS / 32];
    __shared__ float sh_bias[FUSED_ITEMS];
    __shared__ float sh_threshold[FUSED_USERS];

    // U: the batch's factors, row b for batch row b (user users[b]); block rows b0 .. b0 + n_rows - 1
    const int64_t b0 = (int64_t)blockIdx.x * FUSED_USERS;
    const int64_t span_begin = (int64_t)blockIdx.y * span;
    if (b0 >= nb || span_begin >= n_items) return;
    const int64_t span_end = min(n_items, span_begin + span);
    const int64_t n_rows = min((int64_t)FUSED_USERS, nb - b0);
    const int t = threadIdx.x;
    const Tile tile(t);  // this thread's scores of a tile: rounds rho < ROUNDS, row tile.row(rho), items tile.col(rho, j < ITEMS)

    // thread r < FUSED_USERS: row r's threshold (+inf: nothing is a candidate) and training items
    RowTraining training;
    if (t < FUSED_USERS) {
        float at_least = (float)GR_INF;
        if (t < n_rows && !overflow[b0 + t]) {
            const int64_t u = users[b0 + t];
            at_least = threshold[b0 + t];
            training = gr_row_training(train_indptr, train_indices, u, span_begin);
        }
        sh_threshold[t] = at_least;
    }

    const int lr = t >> 1;  // thread t loads the factors of row lr (both tiles' loaders)
    const float* a_row = lr < n_rows ? U + (b0 + lr) * n_factors : nullptr;
    for (int64_t j0 = span_begin; j0 < span_end; j0 += FUSED_ITEMS) {
        if (t < FUSED_USERS) gr_tile_prepare<Tile>(training, j0, span_end, bias, train_bits[t], sh_bias);
        // the scores without their biases, each added where it is compared (in float): kept, the
        // fast check's 64 compares would be held for the full path, at some instructions a score
        float acc[Tile::ROUNDS][Tile::ITEMS];
        tile.score(tile_factors, a_row, B, j0, span_end, n_factors, nullptr, acc);
        const auto score = [&](int i, int j) { return bias ? acc[i][j] + sh_bias[tile.col(i, j)] : acc[i][j]; };
        // the common case in few instructions a score: no score reaches its row's threshold, and
        // every score is finite (a non-finite one, pool item or not, makes `check` NaN)
        uint32_t hit = 0;
        float check = 0.0f;
#pragma unroll
        for (int i = 0; i < Tile::ROUNDS; ++i) {
            const float at_least = sh_threshold[tile.row(i)];
#pragma unroll
            for (int j = 0; j < Tile::ITEMS; ++j) {
                const float s = score(i, j);
                hit |= (uint32_t)(s >= at_least);
                check = fmaf(s, 0.0f, check);
            }
        }
        if (hit || check != check) {  // rare once the thresholds are good: each pool score, in full
#pragma unroll
            for (int i = 0; i < Tile::ROUNDS; ++i) {
                const int r = tile.row(i);
                const float at_least = sh_threshold[r];
                const uint32_t pool = r < n_rows ? tile.pool(train_bits[r], i, j0, span_end) : 0u;
#pragma unroll
                for (int j = 0; j < Tile::ITEMS; ++j) {
                    const float s = score(i, j);
                    if ((pool >> j) & 1u) {
                        if (!isfinite(s))  // the filter overflowed: the full-row path decides
                            atomicOr(&overflow[b0 + r], 1);
                        else if (s >= at_least)
                            topk_append(b0 + r, s, j0 + tile.col(i, j), cand_scores, cand_items, count);
                    }
                }
            }
        }
        __syncthreads();  // the next tile's training bitmap and factors overwrite this one's
    }
}

// float32 factor models: filter scores by float32 FMA chains, within the float32 bound
extern "C" __global__ void __launch_bounds__(FUSED_THREADS, 2) fused_topk_f32(GR_FUSED_TOPK_ARGS) {
    fused_topk<FmaTile>(U, B, n_factors, bias, n_items, span, nb, users, train_indptr, train_indices, threshold,
                        cand_scores, cand_items, count, overflow);
}

// TF32 mode: filter scores on tensor cores (gr_score_tile_tf32), within score_tolerance's "fused" bound
extern "C" __global__ void __launch_bounds__(FUSED_THREADS, 2) fused_topk_tf32(GR_FUSED_TOPK_ARGS) {
    fused_topk<TensorTile>(U, B, n_factors, bias, n_items, span, nb, users, train_indptr, train_indices, threshold,
                       cand_scores, cand_items, count, overflow);
}
