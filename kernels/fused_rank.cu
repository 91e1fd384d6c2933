// Rank counting fused with the scoring, for float32 factor models: rank_tile.cu's counts and
// pool statistics, from filter scores that this kernel computes and consumes in registers
// instead of reading cuBLAS tiles from memory (the scores never make the round trip through
// device memory, and no score tile is allocated).
//
// One block takes FUSED_USERS rows of the batch and a span of items, FUSED_ITEMS at a time:
// for each such tile it computes the filter scores U[rows] B[items]^T in registers
// (score_tile.cuh: gr_score_tile, each thread 8 x 8 of them; in TF32 mode gr_score_tile_tf32). The bias
// is added, and the bands compared, in float as rank_tile does (flushed to zero under CuPy's
// -ftz=true: a flush moves a score by at most 2^-126, inside the bound, and a flushed compare
// only ever sends an item to the defined score). The tile's scores are then staged in shared memory
// (over the factors the tile was scored from: FUSED_STAGE_BYTES of dynamic shared memory), and counted
// as rank_tile counts a round: a warp takes a row, a lane 4 of its 128 items, each placed among the test
// items by the row's cells (gr_cell_round: 128 cells a row, 16 KB for the block); where a cell holds an edge, the
// item joins the warp's search queue, and 32 such items at a time take a search over the bands and one compare
// (gr_place). The items inside a band then join the warp's queue (one vote a row where none does) for their
// defined score (gr_exact_score), 32 at a time. The counts are in shared memory, a word a test item, or in global
// memory where a block's rows have more than FUSED_WORDS test items. A row's pool minimum and maximum are reduced
// over the warp once a tile (gr_warp_extremes), kept in shared memory, and folded into the user's at the block's
// end. At most 128 registers (two blocks an SM); a block's shared memory is 109,584 bytes on sm_90 (42,000 static
// and the stage), of which an H100 or H200 holds two blocks, an A100 one.
//
// Two kernels share this counting (fused_rank_body.cuh, included once for each): fused_rank_f32
// scores with float32 FMA chains (FmaTile), fused_rank_tf32, TF32 mode, on tensor cores
// (TensorTile: score_tile.cuh gr_score_tile_tf32, within score_tolerance's "fused" bound).
//
// Ranks, as in rank_tile: the test items are pool items too, counted at their own place.
#include "bands.cuh"
#include "score_tile.cuh"

// Test items of a block's users counted in shared memory, a word each (more: the block counts in global memory):
// FUSED_SHARED_TESTS (a compile option: _gpu.py) where an SM holds two blocks of the counts' 15 KB and the stage (H100,
// H200, B200, B300) or one (A100, Orin); 40% of it on the others (RTX 30, 40 and 50 series, A10, L4, L40: 99 KB a
// block). A word a count, so that the lanes of a warp that count at one place take one ATOMS.POPC.INC, as rank_tile's.
#ifndef FUSED_SHARED_TESTS
#define FUSED_SHARED_TESTS 3840
#endif
#if GR_ARCH == 800 || GR_ARCH == 870 || GR_ARCH == 900 || GR_ARCH == 1000 || GR_ARCH == 1030  // (common.cuh)
#define FUSED_WORDS FUSED_SHARED_TESTS
#else
#define FUSED_WORDS (FUSED_SHARED_TESTS * 2 / 5)  // (what 99 KB a block leaves: 1,536)
#endif
#define FUSED_ITEM_BITS 24  // a queued item: row << 24 | its offset in the span (a span has under 2^16 items)

static_assert(FUSED_ITEMS == FUSED_USERS, "thread r < FUSED_USERS also reads the bias of the tile's item r");
static_assert(FUSED_ITEMS == 128, "a row of the tile: one round of 4 items a lane (gr_round_bit)");
// A staged row's floats: its FUSED_ITEMS scores and 4 more, so that a warp's stores of a TF32 tile's scores (rows
// r0 + 2 q, items 8 j + g) meet no bank conflict; the stage over the tile's factors, in dynamic shared memory
// (_gpu.FUSED_STAGE_BYTES: the same number)
#define FUSED_PITCH (FUSED_ITEMS + 4)
#ifndef FUSED_STAGE_BYTES
#define FUSED_STAGE_BYTES (FUSED_USERS * FUSED_PITCH * 4)
#endif
static_assert(FUSED_STAGE_BYTES == FUSED_USERS * FUSED_PITCH * 4, "the stage: the tile's rows of FUSED_PITCH floats");
static_assert(FUSED_STAGE_BYTES >= sizeof(TileFactors) && FUSED_STAGE_BYTES >= sizeof(TileFactorsTF32),
              "the stage holds either tile's factors");

// The defined score of a queued item (row << FUSED_ITEM_BITS | offset in the span) decides its
// count: for test entry t0 + c, in the block's shared words (words[t0 - tb0 + c]) or, where words is
// null, in cnt[t0 + c].
__device__ GR_NOINLINE void settle(int32_t entry, int64_t b0, int64_t span_begin, const float* U, const float* B,
                                   int64_t n_factors, const double* bias, const int64_t* users,
                                   const int64_t* tests_begin, const double* test_scores, const uint64_t* test_keys,
                                   uint64_t seed, int noise, int32_t* words, int32_t* cnt) {
    const int64_t b = b0 + (entry >> FUSED_ITEM_BITS);
    const int64_t item = span_begin + (entry & ((1 << FUSED_ITEM_BITS) - 1));
    const int64_t t0 = tests_begin[b], m = tests_begin[b + 1] - t0;
    const double e = gr_exact_score(U + b * n_factors, B + item * n_factors, n_factors, bias, item);
    const uint64_t key = gr_tie_key(seed, (uint64_t)users[b], (uint64_t)item, noise);
    const int64_t c = gr_count_outranking(test_scores + t0, test_keys + t0, m, e, key);
    if (c < m) {
        atomicAdd(words ? &words[t0 - tests_begin[b0] + c] : &cnt[t0 + c], 1);
    }
}

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
