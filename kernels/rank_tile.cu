// Rank counting over one tile of scores: for every (user of the batch, pool item of the
// tile), find how many of the user's test items outrank the item and count it there; keep
// the pool's minimum, maximum and non-finite flag. The CPU engine's count_ranks and
// rank_one_user (gpureco/_cpu_ranks.pyx) do the same per user; the ranks follow on the host
// side as prefix sums of the counts.
//
// Scores: row b of the batch is S[b * ld + j] for the tile's items item_begin + j. They are
// the filter (cuBLAS) scores, within tol[b] of the defined score (gr_exact_score), which
// settles every comparison closer than that; with `given`, they are the scores themselves.
//
// One block takes one user and up to RANK_SPAN items (a whole cuBLAS tile): its set-up (the
// training bitmap, the test items' bands) and its barriers are paid once per 65,536 items.
// A pool item is compared with the bands of the test items in the filter's own type (float
// for float factors): its cell's entry in the user's table (bands.cuh: gr_cell, gr_cell_entry), or
// where the cell holds a band's edge, after the lane's other items of the round (gr_search_round):
// one compare with the cell's low edge and one with a band's high edge (gr_step) where the cell
// holds at most one low edge, else the count of bands wholly above it, then one compare with the
// next band (gr_place's search). Only an
// item inside a band goes to the defined score, and not at once: each warp queues such
// items and scores them 32 at a time, one per lane, so that one
// lane's F products in float64 do not hold up the other 31 lanes of its warp. A lane takes
// RANK_ROUND items a round, their scores loaded before any is placed, and the warp votes
// once a round on whether any of its items waits.
#include "bands.cuh"

#define RANK_THREADS 256
#ifndef RANK_SPAN
#define RANK_SPAN 65536  // items of one block (_gpu.TILE_ITEMS); a multiple of 32
#endif
#define RANK_ROUND 4  // items of a lane per round
static_assert(RANK_SPAN % (32 * RANK_ROUND) == 0, "a block's rounds read whole words of its training bitmap");
#define RANK_SHARED_TESTS 1024  // test items held in shared memory; more are read from global memory
// The shared counts: places 0 .. m - 1, then 32 words no place reaches. An item placed by its cell is counted
// at its cell's entry (one unconditional ATOMS.POPC.INC, no branch around it): an entry that is no place
// (GR_CELL_NOWHERE, GR_CELL_DEFER, GR_CELL_SEARCH: 253 .. 255) counts in a word that is never read: past the
// places of a user with a table (m <= GR_CELL_TESTS = 253), past RANK_SHARED_TESTS for a user without one, whose
// entries count from RANK_NO_TABLE_BASE on.
#define RANK_COUNT_WORDS (RANK_SHARED_TESTS + 32)
#define RANK_NO_TABLE_BASE (RANK_COUNT_WORDS - 256)
static_assert(RANK_NO_TABLE_BASE + GR_CELL_NOWHERE >= RANK_SHARED_TESTS &&
              RANK_NO_TABLE_BASE + GR_CELL_SEARCH < RANK_COUNT_WORDS && GR_CELL_TESTS <= GR_CELL_NOWHERE,
              "an entry that is no place counts past every place");
// While a user's table is built (before any count), its band edges' cells (gr_build_cells: 2 GR_CELL_TESTS
// int16_t) lie in the counts' words RANK_EDGE_WORDS .., past every word a user with a table counts in.
#define RANK_EDGE_WORDS 256
static_assert(RANK_EDGE_WORDS > GR_CELL_SEARCH && RANK_EDGE_WORDS + GR_CELL_TESTS <= RANK_COUNT_WORDS,
              "the edges' cells in words no count of a user with a table reaches");
// Per architecture, from its shared memory and threads an SM: RANK_CELLS, a user's cells (bands.cuh) in a block of at
// least RANK_SPAN / 2 items (half as many from RANK_SPAN / 8, GR_CELLS in a smaller block: a table costs its block
// about 50 instructions a cell), and RANK_BLOCKS_F32 and RANK_BLOCKS_F64, the blocks of rank_tile_f32 and
// rank_tile_f64 an SM holds (their registers: at most 65,536 / (256 blocks) a thread).
// (GR_ARCH: common.cuh; the host emulation takes an H100's unless compiled with another GR_EMULATED_ARCH.)
// - 228 KB and 2,048 threads an SM (H100, H200, B200, B300): 2,048 cells, 4 KB of entries and steps,
//   26,768 bytes a block: 8 blocks (every warp slot) at 32 registers; double 6 of 34,960 bytes at 40.
// - 164 KB and 2,048 threads (A100): 512 cells, 6 blocks of 23,696 bytes at 40 registers, no spill; double 5 of
//   31,888 at 48. (7 blocks capped rank_tile_f32 at 32 registers, where it kept the round's pool statistics in local
//   memory: 172 bytes of spill, 3 loads and 3 stores a round; and 7 blocks left room for 128 cells only.)
// - 100 KB and 1,536 threads, or less (RTX 30, 40 and 50 series, A10, L4, L40, T4, V100; and Orin, whose
//   rank_tile_f32 spills at 40 registers where an A100's does not): 512 cells, 1 KB of entries
//   and steps, as the 1,024 entries before the steps (change 44): 4 blocks of 23,696 bytes at 64 registers; double 3.
#if GR_ARCH == 900 || GR_ARCH == 1000 || GR_ARCH == 1030
#define RANK_CELLS 2048
#define RANK_BLOCKS_F32 8
#define RANK_BLOCKS_F64 6
#elif GR_ARCH == 800
#define RANK_CELLS 512
#define RANK_BLOCKS_F32 6
#define RANK_BLOCKS_F64 5
#else
#define RANK_CELLS 512
#define RANK_BLOCKS_F32 4
#define RANK_BLOCKS_F64 3
#endif

static_assert(RANK_ROUND == 4, "gr_round_bit (bands.cuh): a lane's bits of a round are a nibble");

template <typename T>
__device__ void rank_tile(const T* __restrict__ S, int64_t ld, int given, int64_t item_begin, int64_t n_tile,
                          const int64_t* __restrict__ users, const int64_t* __restrict__ train_indptr,
                          const int32_t* __restrict__ train_indices, const int64_t* __restrict__ tests_begin,
                          const double* __restrict__ test_scores, const uint64_t* __restrict__ test_keys,
                          int32_t* __restrict__ cnt, uint64_t* __restrict__ pool_min, uint64_t* __restrict__ pool_max,
                          int32_t* __restrict__ nonfinite, const double* __restrict__ tol,
                          const T* __restrict__ A, const T* __restrict__ B, int64_t n_factors,
                          const double* __restrict__ bias, uint64_t seed, int noise) {
    __shared__ uint32_t train_bits[RANK_SPAN / 32];  // gr_round_bit's layout: a round's 128 items in 4 words
    __shared__ T sh_low[RANK_SHARED_TESTS];
    __shared__ T sh_high[RANK_SHARED_TESTS];
    __shared__ int32_t sh_cnt[RANK_COUNT_WORDS];
    __shared__ uint8_t sh_cells[RANK_CELLS];  // the cells' entries and steps (gr_build_cells)
    __shared__ uint8_t sh_steps[RANK_CELLS];
    __shared__ int64_t train_range[2];
    __shared__ int32_t warp_queue[RANK_THREADS / 32][GR_QUEUE];

    const int64_t b = blockIdx.x;  // user of the batch
    const int64_t span_begin = (int64_t)blockIdx.y * RANK_SPAN;
    if (span_begin >= n_tile) return;
    const int64_t span_n = min((int64_t)RANK_SPAN, n_tile - span_begin);
    const int64_t first_item = item_begin + span_begin;
    const int64_t u = users[b];
    const int32_t* train = train_indices + train_indptr[u];
    const int64_t n_train = train_indptr[u + 1] - train_indptr[u];
    const int64_t t0 = tests_begin[b], m = tests_begin[b + 1] - t0;
    const bool in_shared = m <= RANK_SHARED_TESTS;
    const double* ts = test_scores + t0;
    const double tl = tol[b];

    // (every word of the span's rounds, the last round's whole: its items before the span's end may lie in any)
    for (int64_t i = threadIdx.x; i < (span_n + 127) / 128 * 4; i += blockDim.x) train_bits[i] = 0;
    if (threadIdx.x == 0) train_range[0] = gr_lower_bound(train, n_train, first_item);
    if (threadIdx.x == 32 % blockDim.x) train_range[1] = gr_lower_bound(train, n_train, first_item + span_n);
    if (in_shared) {
        for (int64_t i = threadIdx.x; i < m; i += blockDim.x) {
            gr_band(ts[i], tl, &sh_low[i], &sh_high[i]);
            sh_cnt[i] = 0;
        }
    }
    __syncthreads();
    const SharedBands<T> shared_bands = {sh_low, sh_high};
    const GlobalBands<T> global_bands = {ts, tl};
    const int n_tests = (int)m, top = gr_search_top(n_tests);  // m < 2^31: distinct items
    const T worst = m == 0 ? (T)GR_INF : in_shared ? shared_bands.low(n_tests - 1) : global_bands.low(n_tests - 1);
    // the user's cells (bands.cuh), from the bands in shared memory; none for more than GR_CELL_TESTS.
    // Finer cells where the block has many items (fewer of them search), fewer where building the
    // table would cost as much as counting the block's items.
    const int n_cells = span_n >= RANK_SPAN / 2 ? RANK_CELLS : span_n >= RANK_SPAN / 8 ? max(RANK_CELLS / 2, GR_CELLS)
                                                                                      : GR_CELLS;
    const T scale = in_shared ? gr_cells_scale<T>(shared_bands, n_tests, n_cells) : (T)0;
    const Cells<T> cells = gr_cells(sh_cells, scale, n_cells);
    gr_build_cells(sh_cells, sh_steps, (int16_t*)(sh_cnt + RANK_EDGE_WORDS), shared_bands, n_tests, worst, scale,
                   n_cells);
    // the training bitmap after the table (before it, rank_tile_f32 spilled 124 bytes), the barrier after both
    for (int64_t t = train_range[0] + threadIdx.x; t < train_range[1]; t += blockDim.x) {
        const int j = gr_round_bit((int)(train[t] - first_item));
        atomicOr(&train_bits[j >> 5], 1u << (j & 31));
    }
    __syncthreads();

    int32_t* counts = in_shared ? sh_cnt : cnt + t0;  // for the defined scores (rare)
    int32_t* cell_counts = scale > (T)0 ? sh_cnt : sh_cnt + RANK_NO_TABLE_BASE;  // an item counted at its cell's entry
    const T* row = S + b * ld + span_begin;
    const T* a = n_factors > 0 ? A + u * n_factors : A;
    const int lane = threadIdx.x & 31;
    // the defined score of the span's item j decides its count
    const auto settle = [&](int64_t j) {
        const int64_t item = first_item + j;
        const double e = given ? (double)row[j] : gr_exact_score(a, B + item * n_factors, n_factors, bias, item);
        const int64_t c = gr_count_outranking(ts, test_keys + t0, m, e, gr_tie_key(seed, (uint64_t)u, (uint64_t)item, noise));
        if (c < m) atomicAdd(&counts[c], 1);
    };
    int32_t* queue = warp_queue[threadIdx.x >> 5];
    int queued = 0;  // the same in every lane of the warp
    T mn = (T)GR_INF, mx = -(T)GR_INF;
    // a pool score not finite: where the counts are in shared memory, its lane's round searches
    // every pool item, and the search sees it (gr_search_round's `seen`): nothing an item
    int bad = 0;
    // a warp takes RANK_ROUND x 32 consecutive items a round, lane + 32 q for q < RANK_ROUND (all
    // lanes the same number of rounds): the round's scores loaded at once, one vote for the round.
    // No branch per item: every score of the span is loaded (a training item's too), and where
    // the scores are counted in shared memory, a non-pool item is counted nowhere and leaves the
    // pool statistics as they are, by one select (a branch per item cost more instructions than
    // the item's own work, and parted the warp's lanes).
    const int n_span = (int)span_n;  // at most RANK_SPAN
    const T* row_lane = row + lane;  // the lane's scores and biases of a round: [j0 + 32 q]
    const double* bias_lane = bias ? bias + first_item + lane : bias;
    for (int j0 = (threadIdx.x - lane) * RANK_ROUND; j0 < n_span; j0 += blockDim.x * RANK_ROUND) {
        T s[RANK_ROUND];
        uint32_t defer = 0, search = 0;  // bit q: item j0 + 32 q + lane waits for its defined score; its cell
                                         // does not place it
        // bit q: item j0 + 32 q + lane is a pool item: not a training item (the lane's 4 training bits of the
        // round together, gr_round_bit), and before the span's end
        uint32_t pool = ~(train_bits[(j0 >> 5) + (lane >> 3)] >> (4 * (lane & 7))) & 0xFu;
        if (j0 + 32 * RANK_ROUND <= n_span) {  // every round but the span's last (the same in the warp): no bounds
#pragma unroll
            for (int q = 0; q < RANK_ROUND; ++q) {
                s[q] = row_lane[j0 + 32 * q];
                if (!given && bias) s[q] = s[q] + (T)bias_lane[j0 + 32 * q];
            }
        } else {
#pragma unroll
            for (int q = 0; q < RANK_ROUND; ++q) {
                const bool in_span = j0 + 32 * q + lane < n_span;
                pool &= ~((uint32_t)!in_span << q);
                s[q] = in_span ? row_lane[j0 + 32 * q] : (T)0;
                if (!given && bias) s[q] = s[q] + (in_span ? (T)bias_lane[j0 + 32 * q] : (T)0);
            }
        }
        if (in_shared) {  // the same in the whole block: shared-memory reads and atomics (gr_cell_round: no branch an
                          // item; a round with a score not finite has its pool items searched, where `seen` flags a
                          // non-finite one)
            search = gr_cell_round(s, pool, cells, worst, mn, mx, [&](int e) { gr_add_count(cell_counts, e); });
        } else {
#pragma unroll
            for (int q = 0; q < RANK_ROUND; ++q) {
                if ((pool >> q) & 1u) {
                    mn = fmin(mn, s[q]);
                    mx = fmax(mx, s[q]);
                    bad |= !isfinite(s[q]);
                    defer |= (uint32_t)gr_count(global_bands, n_tests, top, worst, s[q], cnt + t0) << q;
                }
            }
        }
        const auto score = [&](int q) {  // s[q], with no local memory
            T v = s[0];
#pragma unroll
            for (int k = 1; k < RANK_ROUND; ++k) v = q == k ? s[k] : v;
            return v;
        };
        // a searched score: one step where its cell names one (never for a score not finite: its cell is 0 or the
        // last), else gr_place's search
        const auto place = [&](T v) {
            const int step = sh_steps[gr_cell(v, worst, cells.scale, cells.last)];
            return step ? gr_step(shared_bands, step - 1, v) : gr_place(shared_bands, n_tests, top, worst, v);
        };
        defer |= gr_search_round(search, score, place, [&](int c) { gr_add_count(sh_cnt, c); },
                                 [&](T v) { bad |= !isfinite(v); });
        if (__any_sync(0xFFFFFFFFu, defer)) {  // rare: the round's deferred items join the warp's queue
#pragma unroll 1
            for (int q = 0; q < RANK_ROUND; ++q) gr_defer(queue, queued, (defer >> q) & 1u, j0 + 32 * q + lane, settle);
        }
    }
    gr_drain(queue, queued, settle);
    gr_fold_pool_stats(gr_widen(mn), gr_widen(mx), bad, &pool_min[b], &pool_max[b], &nonfinite[b]);
    if (in_shared) {
        __syncthreads();
        for (int64_t i = threadIdx.x; i < m; i += blockDim.x)
            if (sh_cnt[i]) atomicAdd(&cnt[t0 + i], sh_cnt[i]);
    }
}

// MIN_BLOCKS: blocks an SM must hold (registers per thread <= 65,536 / (256 MIN_BLOCKS)): RANK_BLOCKS_F32 and
// RANK_BLOCKS_F64 (an H100: float 32 registers without a spill, 8 blocks, every warp slot of an SM; double 40, 6)
#define RANK_TILE(NAME, T, MIN_BLOCKS)                                                                         \
    extern "C" __global__ void __launch_bounds__(RANK_THREADS, MIN_BLOCKS) NAME(                               \
        const T* S, int64_t ld, int given, int64_t item_begin, int64_t n_tile, const int64_t* users,          \
        const int64_t* train_indptr, const int32_t* train_indices, const int64_t* tests_begin,                \
        const double* test_scores, const uint64_t* test_keys, int32_t* cnt, uint64_t* pool_min,                \
        uint64_t* pool_max, int32_t* nonfinite, const double* tol, const T* A, const T* B, int64_t n_factors,  \
        const double* bias, uint64_t seed, int noise) {                                                       \
        rank_tile<T>(S, ld, given, item_begin, n_tile, users, train_indptr, train_indices, tests_begin,       \
                     test_scores, test_keys, cnt, pool_min, pool_max, nonfinite, tol, A, B, n_factors, bias,   \
                     seed, noise);                                                                             \
    }

RANK_TILE(rank_tile_f32, float, RANK_BLOCKS_F32)
RANK_TILE(rank_tile_f64, double, RANK_BLOCKS_F64)
