// Rank counting fused with the scoring, for float32 factor models: rank_tile.cu's counts and
// pool statistics, from filter scores that this kernel computes and consumes in registers
// instead of reading cuBLAS tiles from memory (the scores never make the round trip through
// device memory, and no score tile is allocated).
//
// One block takes FUSED_USERS rows of the batch and a span of items, FUSED_ITEMS at a time:
// for each such tile it computes the filter scores U[rows] B[items]^T in registers
// (score_tile.cuh: gr_score_tile, each thread 8 x 8 of them). The bias is added, and the
// bands compared, in float as rank_tile does (flushed to zero under CuPy's -ftz=true: a
// flush moves a score by at most 2^-126, inside the bound, and a flushed compare only ever
// sends an item to the defined score). A thread's 64 scores of the tile then go to local
// memory (acc's registers free again), and its pool items are placed among the test items
// as in rank_tile (gr_place_cells: the row's cells, else a branchless search over the bands
// and one compare), a row at a time, the row's 8 items unrolled; the items inside a band
// then join the warp's queue (one vote a row where none does) for their defined score
// (gr_exact_score), 32 at a time. The counts are 16 bits in shared memory, rows 2p and 2p + 1
// in the two halves of the same words (row_counts), or in global memory where a block's rows
// need more than FUSED_WORDS. At most 128 registers (two blocks per SM, no spill) and 48,656
// bytes of static shared memory, 16 KB of it the 128 rows' cells.
//
// Ranks, as in rank_tile: the test items are pool items too, counted at their own place.
#include "bands.cuh"
#include "score_tile.cuh"

#ifndef FUSED_SHARED_TESTS
#define FUSED_SHARED_TESTS 3840  // test items of a block's users counted in shared memory (2 a word); more: global
#endif
static_assert(FUSED_SHARED_TESTS % 2 == 0, "two counts a word");
#define FUSED_WORDS (FUSED_SHARED_TESTS / 2)
#define FUSED_ITEM_BITS 24  // a queued item: row << 24 | its offset in the span (a span has under 2^16 items)

static_assert(FUSED_ITEMS == FUSED_USERS, "thread r < FUSED_USERS also reads the bias of the tile's item r");

// Row r's counts in the block's shared words (HalfCounts): rows 2p and 2p + 1 share the words
// from word_of[2p] on, row 2p in their low halves.
__device__ __forceinline__ HalfCounts row_counts(uint32_t* words, const int32_t* word_of, int r) {
    return HalfCounts{words + word_of[r], r & 1 ? 1u << 16 : 1u};
}

// The defined score of a queued item (row << FUSED_ITEM_BITS | offset in the span) decides its
// count: for test entry t0 + c, in the block's shared words (row_counts) or, where words is
// null, in cnt[t0 + c].
__device__ GR_NOINLINE void settle(int32_t entry, int64_t b0, int64_t span_begin, const float* U, const float* B,
                                   int64_t n_factors, const double* bias, const int64_t* users,
                                   const int64_t* tests_begin, const double* test_scores, const uint64_t* test_keys,
                                   uint64_t seed, int noise, uint32_t* words, const int32_t* word_of, int32_t* cnt) {
    const int64_t b = b0 + (entry >> FUSED_ITEM_BITS);
    const int64_t item = span_begin + (entry & ((1 << FUSED_ITEM_BITS) - 1));
    const int64_t t0 = tests_begin[b], m = tests_begin[b + 1] - t0;
    const double e = gr_exact_score(U + b * n_factors, B + item * n_factors, n_factors, bias, item);
    const uint64_t key = gr_tie_key(seed, (uint64_t)users[b], (uint64_t)item, noise);
    const int64_t c = gr_count_outranking(test_scores + t0, test_keys + t0, m, e, key);
    if (c < m) {
        if (words) gr_add_count(row_counts(words, word_of, entry >> FUSED_ITEM_BITS), c);
        else atomicAdd(&cnt[t0 + c], 1);
    }
}

extern "C" __global__ void __launch_bounds__(FUSED_THREADS, 2) fused_rank_f32(
    const float* __restrict__ U, const float* __restrict__ B, int64_t n_factors, const double* __restrict__ bias,
    int64_t n_items, int64_t span, int64_t nb, const int64_t* __restrict__ users,
    const int64_t* __restrict__ train_indptr, const int32_t* __restrict__ train_indices,
    const int64_t* __restrict__ tests_begin, const double* __restrict__ test_scores,
    const uint64_t* __restrict__ test_keys, int32_t* __restrict__ cnt, uint64_t* __restrict__ pool_min,
    uint64_t* __restrict__ pool_max, int32_t* __restrict__ nonfinite, const double* __restrict__ tol, uint64_t seed,
    int noise) {
    __shared__ TileFactors tile_factors;
    __shared__ uint32_t train_bits[FUSED_USERS][FUSED_ITEMS / 32];
    __shared__ uint32_t sh_cnt[FUSED_WORDS];  // the rows' counts, two rows a word (row_counts)
    __shared__ int32_t sh_word[FUSED_USERS];  // row r's first word
    __shared__ int64_t sh_words;  // the words the rows need
    __shared__ uint8_t sh_cells[FUSED_USERS][GR_CELLS];  // row r's cells (bands.cuh)
    __shared__ float sh_scale[FUSED_USERS];  // their scale (gr_cells_scale)
    __shared__ float sh_worst[FUSED_USERS];
    __shared__ int64_t sh_first[FUSED_USERS + 1];  // row r's test entries: tb0 + sh_first[r] .. tb0 + sh_first[r + 1]
    __shared__ float sh_bias[FUSED_ITEMS];
    __shared__ float sh_min[FUSED_USERS];  // row r's pool statistics so far (filter scores)
    __shared__ float sh_max[FUSED_USERS];
    __shared__ int32_t warp_queue[FUSED_THREADS / 32][GR_QUEUE];

    // U: the batch's factors, row b for batch row b (user users[b]); block rows b0 .. b0 + n_rows - 1
    const int64_t b0 = (int64_t)blockIdx.x * FUSED_USERS;
    const int64_t span_begin = (int64_t)blockIdx.y * span;
    if (b0 >= nb || span_begin >= n_items) return;
    const int64_t span_end = min(n_items, span_begin + span);
    const int64_t n_rows = min((int64_t)FUSED_USERS, nb - b0);
    const int64_t tb0 = tests_begin[b0], n_tests = tests_begin[b0 + n_rows] - tb0;
    const int t = threadIdx.x;
    const int ty = t >> 4, tx = t & 15;  // this thread's scores: rows row(0 .. 7) x items col(0 .. 7) of a tile
    const auto row = [&](int i) { return gr_tile_row(ty, i); };
    const auto col = [&](int j) { return gr_tile_col(tx, j); };

    // row r's bands, from its test items' defined scores (the search reads them where a cell does not answer)
    const auto bands_of = [&](int r, int64_t first, int m) {
        return GlobalBands<float>{test_scores + tb0 + first, m == 0 ? 0.0 : tol[b0 + r]};
    };
    // thread r < FUSED_USERS: row r's worst band and cells' scale, and its training items from the span on
    RowTraining training;
    if (t < FUSED_USERS) {
        float worst = (float)GR_INF, scale = 0.0f;  // below worst an item outranks no test item (also: none)
        sh_first[t] = t < n_rows ? tests_begin[b0 + t] - tb0 : n_tests;
        if (t == 0) sh_first[FUSED_USERS] = n_tests;
        if (t < n_rows) {
            const int64_t u = users[b0 + t], t0 = tests_begin[b0 + t], m = tests_begin[b0 + t + 1] - t0;
            const GlobalBands<float> bands = bands_of(t, t0 - tb0, (int)m);
            if (m > 0) worst = bands.low((int)m - 1);
            scale = gr_cells_scale<float>(bands, (int)m);
            training = gr_row_training(train_indptr, train_indices, u, span_begin);
        }
        sh_worst[t] = worst;
        sh_scale[t] = scale;
        sh_min[t] = (float)GR_INF;
        sh_max[t] = -(float)GR_INF;
    }
    __syncthreads();
    if (t == 0) {  // rows 2p and 2p + 1 share words: as many as the larger needs
        int64_t w = 0;
        for (int r = 0; r < FUSED_USERS; r += 2) {
            sh_word[r] = sh_word[r + 1] = (int32_t)min(w, (int64_t)FUSED_WORDS);  // (used only where all fit)
            w += max(sh_first[r + 1] - sh_first[r], sh_first[r + 2] - sh_first[r + 1]);
        }
        sh_words = w;
    }
    {  // row t >> 1's cells, half of them each: read once the tiles are scored (gr_score_tile's barriers)
        const int r = t >> 1;
        const int64_t first = sh_first[r];
        const int m = (int)(sh_first[r + 1] - first);
        const GlobalBands<float> bands = bands_of(r, first, m);
        for (int k = (t & 1) * (GR_CELLS / 2); k < (t & 1 ? GR_CELLS : GR_CELLS / 2); ++k)
            sh_cells[r][k] = gr_cell_entry(bands, m, sh_worst[r], sh_scale[r], k);
    }
    __syncthreads();
    const bool in_shared = sh_words <= FUSED_WORDS;  // the block's counts in shared memory, else in cnt
    if (in_shared)
        for (int i = t; i < (int)sh_words; i += FUSED_THREADS) sh_cnt[i] = 0;  // (gr_score_tile's barriers publish)

    const auto settle_entry = [&](int32_t entry) {
        settle(entry, b0, span_begin, U, B, n_factors, bias, users, tests_begin, test_scores, test_keys, seed, noise,
               in_shared ? sh_cnt : nullptr, sh_word, cnt);
    };
    int32_t* queue = warp_queue[t >> 5];
    int queued = 0;  // the same in every lane of the warp
    int bad = 0;  // bit i: a pool score of row(i) is not finite

    // thread t loads the factors of row t >> 1 and of the tile's item t >> 1 (gr_score_tile)
    const int lr = t >> 1;
    const float* a_row = lr < n_rows ? U + (b0 + lr) * n_factors : nullptr;
    for (int64_t j0 = span_begin; j0 < span_end; j0 += FUSED_ITEMS) {
        if (t < FUSED_USERS) gr_tile_prepare(training, j0, span_end, bias, train_bits[t], sh_bias);
        float acc[8][8];
        gr_score_tile(tile_factors, a_row, j0 + lr < span_end ? B + (j0 + lr) * n_factors : nullptr, n_factors, acc);

        // this thread's 64 scores, biases added (in float, as rank_tile does), in local memory for
        // the loops below to index: acc's registers are free while the scores are counted
        float scores[8][8];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const float bj = bias ? sh_bias[col(j)] : 0.0f;
#pragma unroll
            for (int i = 0; i < 8; ++i) scores[i][j] = bias ? acc[i][j] + bj : acc[i][j];
        }
#pragma unroll 1
        for (int i = 0; i < 8; ++i) {  // every lane the same rounds: the warp's votes and shuffles below
            const int r = row(i);
            const int64_t first = sh_first[r];
            const int m = (int)(sh_first[r + 1] - first), top = gr_search_top(m);  // a user's: distinct items
            const uint32_t pool = r < n_rows ? gr_tile_pool(train_bits[r], tx, j0, span_end) : 0u;  // bit j: col(j)
            const GlobalBands<float> bands = bands_of(r, first, m);
            const float worst = sh_worst[r];
            const Cells<float> cells = {sh_cells[r], sh_scale[r]};
            const HalfCounts counts = row_counts(sh_cnt, sh_word, r);  // (where in_shared)
            float mn = (float)GR_INF, mx = -(float)GR_INF;
            uint32_t defer = 0;  // bit j: col(j) waits for its defined score
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                if ((pool >> j) & 1u) {
                    const float s = scores[i][j];
                    mn = fmin(mn, s);
                    mx = fmax(mx, s);
                    bad |= (int)!isfinite(s) << i;
                    const bool d = in_shared  // the same in the whole block: shared-memory atomics
                                       ? gr_count(cells, bands, m, top, worst, s, counts)
                                       : gr_count(cells, bands, m, top, worst, s, cnt + tb0 + first);
                    defer |= (uint32_t)d << j;
                }
            }
            if (__any_sync(0xFFFFFFFFu, defer)) {  // rare: the row's deferred items join the warp's queue
#pragma unroll 1
                for (int j = 0; j < 8; ++j)  // every lane the same rounds: the warp's votes
                    gr_defer(queue, queued, (defer >> j) & 1u,
                             (r << FUSED_ITEM_BITS) | (int32_t)(j0 + col(j) - span_begin), settle_entry);
            }
            for (int off = 8; off > 0; off >>= 1) {  // row(i)'s 16 threads are one half of a warp
                mn = fmin(mn, __shfl_xor_sync(0xFFFFFFFFu, mn, off));
                mx = fmax(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, off));
            }
            if (tx == 0) {  // row r is this half-warp's alone
                sh_min[r] = fmin(sh_min[r], mn);
                sh_max[r] = fmax(sh_max[r], mx);
            }
        }
        __syncthreads();  // the next tile's training bitmap and factors overwrite this one's
    }
    gr_drain(queue, queued, settle_entry);

    // pool statistics: row(i)'s non-finite flag from its half-warp; its minimum and maximum
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        int flag = (bad >> i) & 1;
        for (int off = 8; off > 0; off >>= 1) flag |= __shfl_xor_sync(0xFFFFFFFFu, flag, off);
        const int64_t b = b0 + row(i);
        if (tx == 0 && row(i) < n_rows) {
            atomicMin((unsigned long long*)&pool_min[b], (unsigned long long)gr_order_key(gr_widen(sh_min[row(i)])));
            atomicMax((unsigned long long*)&pool_max[b], (unsigned long long)gr_order_key(gr_widen(sh_max[row(i)])));
            if (flag) atomicOr(&nonfinite[b], 1);
        }
    }
    if (in_shared) {  // a warp a row, a lane a test item
        __syncthreads();
        for (int r = t >> 5; r < FUSED_USERS; r += FUSED_THREADS / 32) {
            const int64_t first = sh_first[r], m = sh_first[r + 1] - first;
            for (int64_t i = t & 31; i < m; i += 32)
                if (const uint32_t n = gr_half_count(row_counts(sh_cnt, sh_word, r), i))
                    atomicAdd(&cnt[tb0 + first + i], (int32_t)n);
        }
    }
}
