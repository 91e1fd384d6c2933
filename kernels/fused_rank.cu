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
// as in rank_tile (gr_place_cell: the row's cells; where a cell holds an edge, after the
// round's items, a branchless search over the bands and one compare: gr_search_round), a round
// at a time: a row's 8 items (FmaTile) or 16 (TensorTileOf<16>), unrolled; the items inside a band
// then join the warp's queue (one vote a row where none does) for their defined score
// (gr_exact_score), 32 at a time. The counts are 16 bits in shared memory, rows 2p and 2p + 1
// in the two halves of the same words (row_counts), or in global memory where a block's rows
// need more than FUSED_WORDS. The pool's minimum and maximum are kept per thread and round,
// merged over a row's lanes once, at the block's end. At most 128 registers (two blocks per SM,
// no spill) and 47,632 bytes of static shared memory, 16 KB of it the 128 rows' cells.
//
// Two kernels share this counting (fused_rank_body.cuh, included once for each): fused_rank_f32
// scores with float32 FMA chains (FmaTile), fused_rank_tf32, TF32 mode, on tensor cores
// (TensorTileOf<16>: score_tile.cuh gr_score_tile_tf32, within score_tolerance's "fused" bound).
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

// float32 factor models: filter scores by float32 FMA chains, within the float32 bound
#define GR_FUSED_KERNEL fused_rank_f32
#define GR_FUSED_TILE FmaTile
#include "fused_rank_body.cuh"
#undef GR_FUSED_KERNEL
#undef GR_FUSED_TILE

// TF32 mode: filter scores on tensor cores (gr_score_tile_tf32), within score_tolerance's "fused" bound
#define GR_FUSED_KERNEL fused_rank_tf32
#define GR_FUSED_TILE TensorTileOf<16>
#include "fused_rank_body.cuh"
#undef GR_FUSED_KERNEL
#undef GR_FUSED_TILE
