// Rank counting fused with the scoring, for float32 factor models: rank_tile.cu's counts and
// pool statistics, from filter scores that this kernel computes and consumes in registers
// instead of reading cuBLAS tiles from memory (the scores never make the round trip through
// device memory, and no score tile is allocated).
//
// One block takes FUSED_USERS rows of the batch and a span of items, FUSED_ITEMS at a time:
// for each such tile it computes the filter scores U[rows] B[items]^T in registers
// (score_tile.cuh: gr_score_tile, each thread 8 x 8 of them; in TF32 mode 4 x 16). The bias
// is added, and the bands compared, in float as rank_tile does (flushed to zero under CuPy's
// -ftz=true: a flush moves a score by at most 2^-126, inside the bound, and a flushed compare
// only ever sends an item to the defined score). A thread's 64 scores of the tile then go to local
// memory (acc's registers free again), and its pool items are placed among the test items
// as in rank_tile (gr_place_cells: the row's cells, else a branchless search over the bands
// and one compare), a row at a time, the row's 8 items unrolled; the items inside a band
// then join the warp's queue (one vote a row where none does) for their defined score
// (gr_exact_score), 32 at a time. The counts are 16 bits in shared memory, rows 2p and 2p + 1
// in the two halves of the same words (row_counts), or in global memory where a block's rows
// need more than FUSED_WORDS. At most 128 registers (two blocks per SM, no spill) and 48,656
// bytes of static shared memory, 16 KB of it the 128 rows' cells.
//
// Two kernels share this counting (fused_rank_body.cuh, included once for each): fused_rank_f32
// scores with float32 FMA chains (FmaTile), fused_rank_tf32, TF32 mode, on tensor cores
// (TensorTile: score_tile.cuh gr_score_tile_tf32, within score_tolerance's "fused" bound).
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

// The two ways a block scores its tile, and which of its scores each thread holds: 8 rounds of
// 8 items of one row, round rho: row(rho), its items col(rho, j) (j < 8), pool(...) the bits j of
// those in the row's pool. A row's items of the tile are with the lanes of one warp that differ
// from each other in the lane bits SHARE_MASK only (and with no other thread).
struct FmaTile {  // float32 FMA chains (gr_score_tile): thread (ty, tx) = (t >> 4, t & 15), rows gr_tile_row(ty, rho)
    using Factors = TileFactors;
    static constexpr int SHARE_MASK = 15;  // a half-warp
    int ty, tx;
    __device__ __forceinline__ explicit FmaTile(int t) : ty(t >> 4), tx(t & 15) {}
    __device__ __forceinline__ int row(int rho) const { return gr_tile_row(ty, rho); }
    __device__ __forceinline__ int col(int, int j) const { return gr_tile_col(tx, j); }
    __device__ __forceinline__ uint32_t pool(const uint32_t* bits, int, int64_t j0, int64_t span_end) const {
        return gr_tile_pool(bits, tx, j0, span_end);
    }
    // scores[rho][j]: the filter score of row(rho) and item col(rho, j) of the tile at j0, plus
    // the item's bias (tile_bias, null for none) in float
    __device__ __forceinline__ void score(Factors& sm, const float* a_row, const float* B, int64_t j0, int64_t span_end,
                                          int64_t n_factors, const float* tile_bias, float (&scores)[8][8]) const {
        const int64_t item = j0 + (threadIdx.x >> 1);  // gr_score_tile: thread t loads item t >> 1
        float acc[8][8];
        gr_score_tile(sm, a_row, item < span_end ? B + item * n_factors : nullptr, n_factors, acc);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const float bj = tile_bias ? tile_bias[col(0, j)] : 0.0f;
#pragma unroll
            for (int i = 0; i < 8; ++i) scores[i][j] = tile_bias ? acc[i][j] + bj : acc[i][j];
        }
    }
};

// TF32 mode (gr_score_tile_tf32): lane 4 g + q of warp w, round rho: row 16 w + 8 (rho >> 2) +
// 2 q + (rho >> 1 & 1), items 64 (rho & 1) + 16 (j >> 1) + 8 (j & 1) + g
struct TensorTile {
    using Factors = TileFactorsTF32;
    static constexpr int SHARE_MASK = 28;  // the lanes of one q
    int r0, g;
    __device__ __forceinline__ explicit TensorTile(int t) : r0(16 * (t >> 5) + 2 * (t & 3)), g((t & 31) >> 2) {}
    __device__ __forceinline__ int row(int rho) const { return r0 + 8 * (rho >> 2) + ((rho >> 1) & 1); }
    __device__ __forceinline__ int col(int rho, int j) const { return 64 * (rho & 1) + 16 * (j >> 1) + 8 * (j & 1) + g; }
    __device__ __forceinline__ uint32_t pool(const uint32_t* bits, int rho, int64_t j0, int64_t span_end) const {
        uint32_t in_span = 0xFFu;
        if (j0 + FUSED_ITEMS > span_end) {  // the span's last tile, part of it
            in_span = 0;
#pragma unroll
            for (int j = 0; j < 8; ++j) in_span |= (uint32_t)(col(rho, j) < span_end - j0) << j;
        }
        // items 64 (rho & 1) + 32 h + 8 k + g (h < 2, k < 4): bit 8 k of word 2 (rho & 1) + h, shifted by g
        const auto four = [](uint32_t w) { return (w & 1u) | ((w >> 7) & 2u) | ((w >> 14) & 4u) | ((w >> 21) & 8u); };
        const uint32_t trained = four(bits[2 * (rho & 1)] >> g) | four(bits[2 * (rho & 1) + 1] >> g) << 4;
        return in_span & ~trained;
    }
    __device__ __forceinline__ void score(Factors& sm, const float* a_row, const float* B, int64_t j0, int64_t span_end,
                                          int64_t n_factors, const float* tile_bias, float (&scores)[8][8]) const {
        const int li = threadIdx.x >> 2;  // gr_score_tile_tf32: thread t loads items 16 m + g', + 8 (li = 8 m + g')
        const int64_t item = j0 + 16 * (li >> 3) + (li & 7);
        float acc[8][2][4];
        gr_score_tile_tf32(sm, a_row, item < span_end ? B + item * n_factors : nullptr,
                           item + 8 < span_end ? B + (item + 8) * n_factors : nullptr, n_factors, acc);
#pragma unroll
        for (int rho = 0; rho < 8; ++rho)
#pragma unroll
            for (int j = 0; j < 8; ++j) {  // acc[m][n][2 f + e]: item 16 m + g + 8 f, row r0 + 8 n + e
                const int i = rho >> 1;
                const float s = acc[4 * (rho & 1) + (j >> 1)][i >> 1][2 * (j & 1) + (i & 1)];
                scores[rho][j] = tile_bias ? s + tile_bias[col(rho, j)] : s;
            }
    }
};

// float32 factor models: filter scores by float32 FMA chains, within the float32 bound
#define GR_FUSED_KERNEL fused_rank_f32
#define GR_FUSED_TILE FmaTile
#include "fused_rank_body.cuh"
#undef GR_FUSED_KERNEL
#undef GR_FUSED_TILE

// TF32 mode: filter scores on tensor cores (gr_score_tile_tf32), within score_tolerance's "fused" bound
#define GR_FUSED_KERNEL fused_rank_tf32
#define GR_FUSED_TILE TensorTile
#include "fused_rank_body.cuh"
#undef GR_FUSED_KERNEL
#undef GR_FUSED_TILE
