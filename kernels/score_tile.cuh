// The fused kernels' scoring (fused_rank.cu, topk_tile.cu's fused_topk): a block's FUSED_USERS rows times
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
    const int n = (int)n_factors;  // (under _gpu.FUSED_MAX_FACTORS = 2^24 - 2: 32-bit indices)
    const float *pa = a_row ? a_row + lk : a_row, *pb = b_row ? b_row + lk : b_row;  // this thread's factors
    const auto load = [&](int k0) {  // none read past a row (the last step multiplies only its F - k0 factors)
        const int left = n - k0 - (((int)threadIdx.x & 1) << 2);  // factors from k0 + lk on (lk recomputed:
        // kept in a register across the step, it cost spill loads in fused_rank_f32's factor loop)
        for (int q = 0; q < 4; ++q) {
            ra[q] = pa && q < left ? pa[k0 + q] : 0.0f;
            rb[q] = pb && q < left ? pb[k0 + q] : 0.0f;
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
    for (int k0 = 0; k0 < n; k0 += FUSED_STEP) {
        const bool more = k0 + FUSED_STEP < n;
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
            for (int k = 0; k < n - k0; ++k) multiply(k);
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
// t's training items among the tile's items j0 .. j0 + FUSED_ITEMS - 1 as bits, item j0 + c at
// bit Tile::bit(c) (bit b of word b >> 5; the cursor moves past them), and the bias of the
// tile's item t. (Tile::bit: where Tile::pool finds a round's items together.)
template <typename Tile>
__device__ __forceinline__ void gr_tile_prepare(RowTraining& row, int64_t j0, int64_t span_end, const double* bias,
                                                uint32_t* bits, float* tile_bias) {
    uint32_t words[FUSED_ITEMS / 32] = {0, 0, 0, 0};
    for (; row.cursor < row.n && row.items[row.cursor] < j0 + FUSED_ITEMS; ++row.cursor) {
        const int b = Tile::bit((int)(row.items[row.cursor] - j0));
#pragma unroll
        for (int w = 0; w < FUSED_ITEMS / 32; ++w) words[w] |= (b >> 5) == w ? 1u << (b & 31) : 0u;
    }
#pragma unroll
    for (int w = 0; w < FUSED_ITEMS / 32; ++w) bits[w] = words[w];
    const int t = threadIdx.x;  // (FUSED_ITEMS == FUSED_USERS: thread t < FUSED_USERS reads item t's bias)
    tile_bias[t] = bias && j0 + t < span_end ? (float)bias[j0 + t] : 0.0f;
}

static_assert(FUSED_ITEMS == 128, "the tiles' bit layouts are of 128 items");

// Bit j: item tile.col(rho, j) of the tile at j0 lies before span_end (j < Tile::ITEMS)
template <typename Tile>
__device__ __forceinline__ uint32_t gr_tile_in_span(const Tile& tile, int rho, int64_t j0, int64_t span_end) {
    uint32_t in_span = (1u << Tile::ITEMS) - 1u;
    if (j0 + FUSED_ITEMS > span_end) {  // the span's last tile, part of it
        in_span = 0;
#pragma unroll
        for (int j = 0; j < Tile::ITEMS; ++j) in_span |= (uint32_t)(tile.col(rho, j) < span_end - j0) << j;
    }
    return in_span;
}

// ---- TF32 mode: the tile on tensor cores (fused_rank_tf32) ----
//
// Each float32 factor x is split as split_tf32 does (_scores.py; common.cuh gr_tf32_hi,
// gr_tf32_lo), once per block as the step's factors go to shared memory. A tile's scores are,
// per step of 8 factors, acc + (lo hi + hi lo) + hi hi: the step's correction (two tensor-core
// products from zero) is added to the accumulator in float32, then the main product accumulates
// onto it, so that the correction's 16 products are rounded against their own small size and
// the accumulator takes 9 operations a step (score_tolerance's "fused" bound).

// The tile is computed transposed, D = B A^T (items x rows), so that the fragment that changes
// from one product to the next is the items' quad, read from shared memory straight into its
// registers, and the rows' pairs stay in registers for the whole step.
struct alignas(16) Tf32Quad {  // an A fragment: items r, r + 8 of factor p, then of factor p + 4
    uint32_t v[4];
};
struct alignas(8) Tf32Pair {  // a B fragment: a row's factors p, p + 4
    uint32_t v[2];
};

// Row c's pair p at column gr_swizzle(p, c) = c ^ 4 (p & 3): the fragments' 8-byte reads (lane
// 4 g + q of warp w: pair q of row 16 w + 8 n + g) meet no bank conflict in either half-warp.
__device__ __forceinline__ int gr_swizzle(int p, int c) { return c ^ ((p & 3) << 2); }

struct TileFactorsTF32 {  // a step's parts, [0]: hi, [1]: lo
    Tf32Quad b[2][FUSED_ITEMS / 2][4];  // [part][8 m + g][p]: items 16 m + g, 16 m + g + 8
    Tf32Pair a[2][4][FUSED_USERS];  // [part][p][gr_swizzle(p, row)]
};
static_assert(sizeof(TileFactorsTF32) == sizeof(TileFactors), "the same shared memory as the float32 tile");

#if !(defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800)
// The emulation's tensor core (compiled for devices before sm_80 too, where gpureco launches
// fused_rank_f32 instead): c + sum_k a_k b_k as an adversarial model of one (Fasi et al.,
// 2021; tests/gpu_model.py tensor_core_gemm, block 8): the products exact, the nine terms cut
// toward zero to the float32 unit of the largest, summed exactly, the sum cut toward zero to
// float32. Within score_tolerance's bound; a device rounds otherwise.
__device__ __forceinline__ float gr_tensor_sum(float c, const double (&a)[8], const double (&b)[8]) {
    double t[9], largest = fabs((double)c), sum = c;
    t[0] = c;
    for (int k = 0; k < 8; ++k) {
        t[k + 1] = a[k] * b[k];  // exact: two TF32 numbers
        largest = fmax(largest, fabs(t[k + 1]));
        sum += t[k + 1];
    }
    if (!isfinite(sum) || largest == 0.0) return (float)sum;  // NaN and infinities as IEEE sums make them
    int e;
    frexp(largest, &e);
    const double quantum = ldexp(1.0, e - 24);  // the float32 unit of the largest term
    sum = 0.0;
    for (int k = 0; k < 9; ++k) sum += trunc(t[k] / quantum) * quantum;  // exact: under 2^28 units
    float r = (float)sum;
    if (isfinite(r) && fabs((double)r) > fabs(sum)) r = nextafterf(r, 0.0f);
    return r;
}
#endif

// d += a b: one mma.sync.m16n8k8 of TF32 numbers into float32, the PTX fragments (lane 4 g + q):
// a = A[g][q], A[g + 8][q], A[g][q + 4], A[g + 8][q + 4]; b = B[q][g], B[q + 4][g];
// d = D[g][2 q], D[g][2 q + 1], D[g + 8][2 q], D[g + 8][2 q + 1]. Every lane of the warp calls it.
__device__ __forceinline__ void gr_mma_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else  // the fragments gathered through shuffles, two registers at a time
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    double rows[2][8], cols[2][8];  // A's rows g and g + 8; B's columns 2 q and 2 q + 1
    const auto pair = [](uint32_t lo, uint32_t hi) { return (unsigned long long)hi << 32 | lo; };
    const auto half = [](unsigned long long v, int h) { return (double)__int_as_float((int)(uint32_t)(v >> (32 * h))); };
    const unsigned long long a01 = pair(a[0], a[1]), a23 = pair(a[2], a[3]), b01 = pair(b[0], b[1]);
    for (int k = 0; k < 4; ++k) {
        const unsigned long long x = __shfl_sync(0xFFFFFFFFu, a01, 4 * g + k), y = __shfl_sync(0xFFFFFFFFu, a23, 4 * g + k);
        const unsigned long long u = __shfl_sync(0xFFFFFFFFu, b01, 8 * q + k), v = __shfl_sync(0xFFFFFFFFu, b01, 8 * q + 4 + k);
        rows[0][k] = half(x, 0), rows[1][k] = half(x, 1), rows[0][k + 4] = half(y, 0), rows[1][k + 4] = half(y, 1);
        cols[0][k] = half(u, 0), cols[0][k + 4] = half(u, 1), cols[1][k] = half(v, 0), cols[1][k + 4] = half(v, 1);
    }
    for (int i = 0; i < 4; ++i) d[i] = gr_tensor_sum(d[i], rows[i >> 1], cols[i & 1]);
#endif
}

// Thread t's scores in TF32 mode: warp w = t >> 5 holds rows 16 w .. 16 w + 15 of the tile, each
// with all its items; lane 4 g + q holds rows 16 w + 8 n + 2 q + e (n, e < 2) x items
// 16 m + g + 8 f (m < 8, f < 2) in acc[m][n][2 f + e]. Thread t loads factors p, p + 4 of
// row t >> 1 (p = 2 (t & 1), 2 (t & 1) + 1) and of items 16 m + g, 16 m + g + 8 (8 m + g =
// t >> 2, p = t & 3), splits them and stores their parts; one buffer: a step is multiplied,
// a barrier, the next step stored, a barrier.
__device__ __forceinline__ void gr_score_tile_tf32(TileFactorsTF32& sm, const float* a_row, const float* b_item,
                                                   const float* b_item8, int64_t n_factors, float (&acc)[8][2][4]) {
    const int t = threadIdx.x, lane = t & 31, g = lane >> 2, q = lane & 3;
    const int lr = t >> 1, lp = (t & 1) * 2;  // the row and pairs this thread stores
    const int li = t >> 2, lq = t & 3;  // the item pair (16 m + g, + 8: li = 8 m + g) and the pair it stores
    float ra[4], rb[4];  // row lr's factors lp, lp + 1, lp + 4, lp + 5; items' lq, lq + 4 (item, item + 8)
    const int n = (int)n_factors;  // (under _gpu.FUSED_MAX_FACTORS = 2^24 - 2: 32-bit indices)
    const auto load = [&](int k0) {  // zeros past the factors: a last step of fewer factors adds nothing
        for (int s = 0; s < 4; ++s) {
            const int k = k0 + lp + (s & 1) + 4 * (s >> 1), kb = k0 + lq + 4 * (s >> 1);
            ra[s] = a_row && k < n ? a_row[k] : 0.0f;
            const float* item = s & 1 ? b_item8 : b_item;
            rb[s] = item && kb < n ? item[kb] : 0.0f;
        }
    };
    const auto store = [&]() {
        for (int s = 0; s < 2; ++s) {
            const int p = lp + s, c = gr_swizzle(p, lr);
            const uint32_t h = gr_tf32_hi(ra[s]), h4 = gr_tf32_hi(ra[s + 2]);
            sm.a[0][p][c] = Tf32Pair{{h, h4}};
            sm.a[1][p][c] = Tf32Pair{{gr_tf32_lo(ra[s], h), gr_tf32_lo(ra[s + 2], h4)}};
        }
        uint32_t h[4], l[4];
        for (int s = 0; s < 4; ++s) {
            h[s] = gr_tf32_hi(rb[s]);
            l[s] = gr_tf32_lo(rb[s], h[s]);
        }
        sm.b[0][li][lq] = Tf32Quad{{h[0], h[1], h[2], h[3]}};
        sm.b[1][li][lq] = Tf32Quad{{l[0], l[1], l[2], l[3]}};
    };
#pragma unroll
    for (int m = 0; m < 8; ++m)
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[m][n][i] = 0.0f;
    load(0);
    store();
    __syncthreads();
    const int r0 = 16 * (t >> 5) + g;  // the rows of the lane's B fragments: r0, r0 + 8
    for (int k0 = 0; k0 < n; k0 += FUSED_STEP) {
        const bool more = k0 + FUSED_STEP < n;
        if (more) load(k0 + FUSED_STEP);  // the next step's factors, while this one is multiplied
        uint32_t row_hi[2][2], row_lo[2][2];  // the B fragments: rows r0 + 8 n, factors q, q + 4
#pragma unroll
        for (int n = 0; n < 2; ++n) {
            const int c = gr_swizzle(q, r0 + 8 * n);
            const Tf32Pair hi = sm.a[0][q][c], lo = sm.a[1][q][c];
            row_hi[n][0] = hi.v[0], row_hi[n][1] = hi.v[1], row_lo[n][0] = lo.v[0], row_lo[n][1] = lo.v[1];
        }
#pragma unroll
        for (int m = 0; m < 8; ++m) {
            const Tf32Quad hi = sm.b[0][8 * m + g][q], lo = sm.b[1][8 * m + g][q];  // the A fragments
#pragma unroll
            for (int n = 0; n < 2; ++n) {
                float correction[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                gr_mma_tf32(correction, lo.v, row_hi[n]);
                gr_mma_tf32(correction, hi.v, row_lo[n]);
#pragma unroll
                for (int i = 0; i < 4; ++i) acc[m][n][i] = __fadd_rn(acc[m][n][i], correction[i]);
                gr_mma_tf32(acc[m][n], hi.v, row_hi[n]);
            }
        }
        __syncthreads();  // the step is read: the next may overwrite it
        if (more) {
            store();
            __syncthreads();
        }
    }
}

// The two ways a fused kernel's block scores its tile (fused_rank_f32 and fused_topk_f32 by FMA
// chains, fused_rank_tf32 and fused_topk_tf32 on tensor cores), and which of its scores each
// thread holds: ROUNDS rounds of ITEMS items of one row (64 scores), round rho: row(rho), its
// items col(rho, j) (j < ITEMS), pool(...) the bits j of those in the row's pool; a row's set-up
// is paid once a round, so the fewer rounds the better (fused_topk; fused_rank stages the tile's scores in shared
// memory and counts them a row at a time, in its own order).
struct FmaTile {  // float32 FMA chains (gr_score_tile): thread (ty, tx) = (t >> 4, t & 15), rows gr_tile_row(ty, rho)
    using Factors = TileFactors;
    static constexpr int ROUNDS = 8, ITEMS = 8;  // a round: a row of the thread's 8 x 8 register tile
    int ty, tx;
    __device__ __forceinline__ explicit FmaTile(int t) : ty(t >> 4), tx(t & 15) {}
    __device__ __forceinline__ int row(int rho) const { return gr_tile_row(ty, rho); }
    __device__ __forceinline__ int col(int, int j) const { return gr_tile_col(tx, j); }
    static __device__ __forceinline__ int bit(int c) { return c; }  // the items' order
    // bit j: item col(rho, j) of the tile at j0 is in the pool of the row whose training bits are
    // `bits` (gr_tile_prepare): before span_end and not a training item. Items 4 tx .. 4 tx + 3
    // and 64 + 4 tx .. 64 + 4 tx + 3 (a byte layout of the bits, as TensorTile's, measured a
    // longer factor loop in fused_topk_f32: register allocation)
    __device__ __forceinline__ uint32_t pool(const uint32_t* bits, int rho, int64_t j0, int64_t span_end) const {
        const int bit = (4 * tx) & 31, word = (4 * tx) >> 5;
        const uint32_t trained = ((bits[word] >> bit) & 0xFu) | (((bits[FUSED_ITEMS / 64 + word] >> bit) & 0xFu) << 4);
        return gr_tile_in_span(*this, rho, j0, span_end) & ~trained;
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

// TF32 mode (gr_score_tile_tf32): lane 4 g + q of warp w holds rows r0 + 8 (k >> 1) + (k & 1)
// (k < 4, r0 = 16 w + 2 q) and their items 8 j + g (j < 16) of the tile, in rounds of half a row's
// items (fused_topk_tf32's factor loop compiles shorter so than with a row's 16 a round): round rho,
// row k = rho >> 1, items 64 (rho & 1) + 8 j + g.
struct TensorTile {
    using Factors = TileFactorsTF32;
    static constexpr int ITEMS = 8, ROUNDS = 8, HALVES = 2;  // HALVES: rounds a row
    using Bits = uint8_t;  // a round's training bits
    int r0, g;
    __device__ __forceinline__ explicit TensorTile(int t) : r0(16 * (t >> 5) + 2 * (t & 3)), g((t & 31) >> 2) {}
    __device__ __forceinline__ int row(int rho) const {
        const int k = rho / HALVES;
        return r0 + 8 * (k >> 1) + (k & 1);
    }
    __device__ __forceinline__ int col(int rho, int j) const { return 64 * (rho % HALVES) + 8 * j + g; }
    // the tile's item c = 8 j + g (j < 16, g < 8), lane g's item j: bit j of halfword g (its
    // rounds: byte 2 g + rho % 2)
    static __device__ __forceinline__ int bit(int c) { return 16 * (c & 7) + (c >> 3); }
    // bit j: item col(rho, j) of the tile at j0 is in the pool (as FmaTile's): the round's ITEMS
    // bits, from bit ITEMS k of the words on (k = HALVES g + rho % HALVES; little-endian: bytes
    // ITEMS k / 8 on, read as one load)
    __device__ __forceinline__ uint32_t pool(const uint32_t* bits, int rho, int64_t j0, int64_t span_end) const {
        const char* round = reinterpret_cast<const char*>(bits) + sizeof(Bits) * (HALVES * g + rho % HALVES);
        Bits trained;
        memcpy(&trained, round, sizeof trained);
        return gr_tile_in_span(*this, rho, j0, span_end) & ~(uint32_t)trained;
    }
    __device__ __forceinline__ void score(Factors& sm, const float* a_row, const float* B, int64_t j0, int64_t span_end,
                                          int64_t n_factors, const float* tile_bias, float (&scores)[ROUNDS][ITEMS]) const {
        const int li = threadIdx.x >> 2;  // gr_score_tile_tf32: thread t loads items 16 m + g', + 8 (li = 8 m + g')
        const int64_t item = j0 + 16 * (li >> 3) + (li & 7);
        float acc[8][2][4];
        gr_score_tile_tf32(sm, a_row, item < span_end ? B + item * n_factors : nullptr,
                           item + 8 < span_end ? B + (item + 8) * n_factors : nullptr, n_factors, acc);
#pragma unroll
        for (int rho = 0; rho < ROUNDS; ++rho)
#pragma unroll
            for (int j = 0; j < ITEMS; ++j) {  // acc[m][n][2 f + e]: item 16 m + g + 8 f, row r0 + 8 n + e
                const int k = rho / HALVES, c = 8 * (rho % HALVES) + j;  // row k's item 8 c + g
                const float s = acc[c >> 1][k >> 1][2 * (c & 1) + (k & 1)];
                scores[rho][j] = tile_bias ? s + tile_bias[col(rho, j)] : s;
            }
    }
};
