// The fused kernels' scoring (fused_rank.cu, fused_topk.cu): a block's FUSED_USERS rows times
// FUSED_ITEMS items of float32 filter scores, multiplied through shared memory FUSED_STEP
// factors at a time (double-buffered, whole steps unrolled), each of the FUSED_THREADS
// threads holding 8 x 8 scores in registers. A filter score is a float32 fused multiply-add
// chain in order f = 0 .. F-1 (gr_fmaf, never flushed: the same float on any device and in the
// emulation), within the float32 error bound (_scores.score_tolerance) that cuBLAS scores are
// held to.
#pragma once
#include "common.cuh"

#define FUSED_THREADS 256
#define FUSED_USERS 128  // rows of the batch per block
#define FUSED_ITEMS 128  // items per score tile
#define FUSED_STEP 8     // factors per pass through shared memory

struct alignas(16) F4 {  // four consecutive rows (or items) of one factor: one 16-byte shared-memory read
    float v[4];
};

struct TileFactors {  // a step's factors of the block's rows and of the tile's items, two buffers
    F4 a[2][FUSED_STEP][FUSED_USERS / 4];
    F4 b[2][FUSED_STEP][FUSED_ITEMS / 4];
};

// Thread t's scores: rows gr_tile_row(t >> 4, i) x items gr_tile_col(t & 15, j) of a tile, i, j < 8.
__device__ __forceinline__ int gr_tile_row(int ty, int i) { return (i < 4 ? 0 : FUSED_USERS / 2) + 4 * ty + (i & 3); }
__device__ __forceinline__ int gr_tile_col(int tx, int j) { return (j < 4 ? 0 : FUSED_ITEMS / 2) + 4 * tx + (j & 3); }

// acc[i][j] = the filter score (no bias) of row gr_tile_row(ty, i) and item gr_tile_col(tx, j)
// of the tile. Thread t loads factors of row t >> 1 (a_row: its factors, null past the batch's
// rows) and of the tile's item t >> 1 (b_row: null past the span). Every thread of the block
// calls it; it ends at a barrier, after which `sm` may be written again.
__device__ __forceinline__ void gr_score_tile(TileFactors& sm, const float* a_row, const float* b_row,
                                              int64_t n_factors, float (&acc)[8][8]) {
    const int t = threadIdx.x, ty = t >> 4, tx = t & 15;
    const int lr = t >> 1, lk = (t & 1) * 4;
    float ra[4], rb[4];
    const auto load = [&](int64_t k0) {
        for (int q = 0; q < 4; ++q) {
            const int64_t k = k0 + lk + q;
            ra[q] = a_row && k < n_factors ? a_row[k] : 0.0f;
            rb[q] = b_row && k < n_factors ? b_row[k] : 0.0f;
        }
    };
    const auto store = [&](int buf) {
        for (int q = 0; q < 4; ++q) {
            sm.a[buf][lk + q][lr >> 2].v[lr & 3] = ra[q];
            sm.b[buf][lk + q][lr >> 2].v[lr & 3] = rb[q];
        }
    };
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;
    load(0);
    store(0);
    __syncthreads();
    int buf = 0;
    for (int64_t k0 = 0; k0 < n_factors; k0 += FUSED_STEP) {
        const bool more = k0 + FUSED_STEP < n_factors;
        if (more) load(k0 + FUSED_STEP);  // the next step's factors, while this one is multiplied
        const auto multiply = [&](int k) {  // factor k0 + k of the tile's 8 x 8 scores
            const F4 a0 = sm.a[buf][k][ty], a1 = sm.a[buf][k][FUSED_USERS / 8 + ty];
            const F4 c0 = sm.b[buf][k][tx], c1 = sm.b[buf][k][FUSED_ITEMS / 8 + tx];
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const float a = i < 4 ? a0.v[i] : a1.v[i - 4];
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] = gr_fmaf(a, j < 4 ? c0.v[j] : c1.v[j - 4], acc[i][j]);
            }
        };
        if (more) {  // a whole step, unrolled
#pragma unroll
            for (int k = 0; k < FUSED_STEP; ++k) multiply(k);
        } else {  // the last step: F - k0 factors
            for (int k = 0; k < n_factors - k0; ++k) multiply(k);
        }
        if (more) store(buf ^ 1);
        __syncthreads();
        buf ^= 1;
    }
}

// Thread r < FUSED_USERS: row r's ascending training items, from the span's first on (none for
// a row past the batch's or one not scored).
struct RowTraining {
    const int32_t* items = nullptr;
    int64_t n = 0, cursor = 0;
};

__device__ __forceinline__ RowTraining gr_row_training(const int64_t* indptr, const int32_t* indices, int64_t u,
                                                       int64_t span_begin) {
    RowTraining row;
    row.items = indices + indptr[u];
    row.n = indptr[u + 1] - indptr[u];
    row.cursor = gr_lower_bound(row.items, row.n, span_begin);
    return row;
}

// Thread t < FUSED_USERS, once per tile, before gr_score_tile (whose barriers publish them): row
// t's training items among the tile's items j0 .. j0 + FUSED_ITEMS - 1 as bits (bit c of word
// c >> 5 for item j0 + c; the cursor moves past them), and the bias of the tile's item t.
__device__ __forceinline__ void gr_tile_prepare(RowTraining& row, int64_t j0, int64_t span_end, const double* bias,
                                                uint32_t* bits, float* tile_bias) {
    uint32_t words[FUSED_ITEMS / 32] = {0, 0, 0, 0};
    for (; row.cursor < row.n && row.items[row.cursor] < j0 + FUSED_ITEMS; ++row.cursor) {
        const int64_t c = row.items[row.cursor] - j0;
#pragma unroll
        for (int w = 0; w < FUSED_ITEMS / 32; ++w) words[w] |= (c >> 5) == w ? 1u << (c & 31) : 0u;
    }
#pragma unroll
    for (int w = 0; w < FUSED_ITEMS / 32; ++w) bits[w] = words[w];
    const int t = threadIdx.x;  // (FUSED_ITEMS == FUSED_USERS: thread t < FUSED_USERS reads item t's bias)
    tile_bias[t] = bias && j0 + t < span_end ? (float)bias[j0 + t] : 0.0f;
}

static_assert(FUSED_ITEMS == 128, "gr_tile_pool reads two 64-item halves of a tile");

// Bit j: item gr_tile_col(tx, j) of the tile at j0 is in the pool of the row whose training bits
// are `bits` (gr_tile_training): before span_end and not a training item. Columns 4 tx .. 4 tx + 3
// and 64 + 4 tx .. 64 + 4 tx + 3.
__device__ __forceinline__ uint32_t gr_tile_pool(const uint32_t* bits, int tx, int64_t j0, int64_t span_end) {
    uint32_t in_span = 0xFFu;
    if (j0 + FUSED_ITEMS > span_end) {  // the span's last tile, part of it
        const int n_in = (int)(span_end - j0);
        in_span = 0;
#pragma unroll
        for (int j = 0; j < 8; ++j) in_span |= (uint32_t)(gr_tile_col(tx, j) < n_in) << j;
    }
    const int bit = (4 * tx) & 31, word = (4 * tx) >> 5;
    const uint32_t trained = ((bits[word] >> bit) & 0xFu) | (((bits[FUSED_ITEMS / 64 + word] >> bit) & 0xFu) << 4);
    return in_span & ~trained;
}
