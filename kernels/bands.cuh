// A pool item's place among a user's test items, from its filter score, and the warp queue of
// the items the filter cannot place: shared by the rank kernels (rank_tile.cu over cuBLAS
// score tiles, fused_rank.cu over scores it computes).
#pragma once
#include "common.cuh"

// The test items' bands [low(i), high(i)] (gr_band), non-increasing in i as the scores are:
// held in shared memory (the common case), or computed from the defined scores in global
// memory (a user or block with more test items than shared memory holds).
template <typename T>
struct SharedBands {
    const T* lo;
    const T* hi;
    __device__ __forceinline__ T low(int i) const { return lo[i]; }
    __device__ __forceinline__ T high(int i) const { return hi[i]; }
};
template <typename T>
struct GlobalBands {
    const double* scores;
    double tol;
    __device__ __forceinline__ T low(int i) const {
        T l, h;
        gr_band(scores[i], tol, &l, &h);
        return l;
    }
    __device__ __forceinline__ T high(int i) const {
        T l, h;
        gr_band(scores[i], tol, &l, &h);
        return h;
    }
};

// gr_place's first step for a user of m test items: the largest power of two <= m - 1 (0
// when m <= 1, where no search is needed). A user's items all take the same steps.
__device__ __forceinline__ int gr_search_top(int m) { return m > 1 ? 1 << (31 - __clz(m - 1)) : 0; }

#define GR_NOWHERE (-1)  // gr_place: the item outranks no test item (or the user has none)
#define GR_DEFER (-2)    // gr_place: the filter cannot tell; the defined score decides

// gr_place for a finite s >= low(m - 1): c = #{i < m - 1 : low(i) > s}, found in steps of
// top, top / 2, .., 1 (top = gr_search_top(m)) that end clamped at m - 1: no branch but the
// loop's, a few integer operations, one shared-memory read and one compare a step. The count
// is the same for any search as long as the bands are non-increasing, which they are.
template <typename T, typename Bands>
__device__ __forceinline__ int gr_search(const Bands& bands, int m, int top, T s) {
    int c = 0;
    for (int step = top; step > 0; step >>= 1) {
        const int k = min(c + step, m - 1);
        if (bands.low(k - 1) > s) c = k;
    }
    return s > bands.high(c) ? c : GR_DEFER;
}

// Where a pool item of filter score s (its bias added) is counted among the m test items
// (m < 2^31: a user's test items are distinct items): c in [0, m) when it surely falls
// between test items c - 1 and c (it outranks c .. m - 1), GR_NOWHERE, or GR_DEFER when s is
// inside a band or not finite (the filter overflowed: inf, or inf - inf). `worst` is low(m -
// 1) (+inf when m = 0): an item not at or above it is counted nowhere, without a search
// (also when the worst band is NaN: a NaN test score, whose user's metrics are NaN). Above
// it, gr_search.
template <typename T, typename Bands>
__device__ __forceinline__ int gr_place(const Bands& bands, int m, int top, T worst, T s) {
    if (!isfinite(s)) return m > 0 ? GR_DEFER : GR_NOWHERE;
    if (!(s >= worst)) return GR_NOWHERE;
    return gr_search(bands, m, top, s);
}

// A user's cells: gr_place read from a table instead of searched, for most scores. Scores are cut
// into cells by gr_cell, a function of the score that never decreases as the score grows (a
// subtraction, an FMA with a positive scale, clamps, a truncation: each never decreases, in any
// rounding, flushed to zero or not). So if no band's edge (low(i) or high(i)) falls in cell k,
// every score of cell k lies strictly between the same two edges, and gr_place answers the same
// for all of them: the cell's entry (gr_cell_entry, computed from the edges' cells alone). A cell
// that holds an edge answers GR_CELL_SEARCH: gr_place searches as before. Cell 0 holds only the
// scores below the worst band, low(m - 1) (s - worst < 0 exactly then, and x scale + 1 >= 1 in
// any rounding for x >= 0: the worst band's edge is in cell 1), so its entry places them nowhere
// and no compare with the worst band is needed. Scale = (GR_CELLS - 3) / (high(0) - low(m - 1))
// puts the best band's edge in cell GR_CELLS - 2 or so, so that every score above every band
// lands in the last cell, a place of 0. With m test items, at most 2 m cells search. A user with
// no table of places (no test item, more than GR_CELL_TESTS, a NaN or infinite band, or bands of
// no width: gr_cells_scale 0) has cells all the same, scale 1: cell 0 nowhere, the others search.
// A table has GR_CELLS cells (fused_rank: a block's 128 rows, 16 KB), or more where shared memory
// allows (rank_tile: one user a block, RANK_CELLS): the finer the cells, the fewer scores fall in a
// cell that holds an edge.
#define GR_CELLS 128
#define GR_CELL_TESTS 253     // places 0 .. 252 fit an entry below the three codes
#define GR_CELL_NOWHERE 253   // an entry: below the worst band
#define GR_CELL_DEFER 254     // an entry: inside a band, the defined score decides
#define GR_CELL_SEARCH 255    // an entry: an edge in the cell (or no table), gr_place decides

template <typename T>
__device__ __forceinline__ int gr_cell(T s, T worst, T scale, T last) {  // worst = low(m - 1); last = n - 1
    return (int)fmin(fmax(gr_fma(s - worst, scale, (T)1), (T)0), last);  // (not flushed: none in fused_rank)
}

template <typename T>
struct Cells {
    const uint8_t* entry;  // n entries
    T scale;               // gr_cells_scale, or 1 where that is 0 (no table of places)
    T last;                // n - 1
};

// A user's cells (entry: n entries, filled by gr_cell_entry with the same `scale`).
template <typename T>
__device__ __forceinline__ Cells<T> gr_cells(const uint8_t* entry, T scale, int n) {
    return {entry, scale > (T)0 ? scale : (T)1, (T)(n - 1)};
}

// The scale of a table of n cells with places (0: none).
template <typename T, typename Bands>
__device__ T gr_cells_scale(const Bands& bands, int m, int n) {
    if (m < 1 || m > GR_CELL_TESTS) return (T)0;
    for (int i = 0; i < m; ++i)
        if (isnan(bands.low(i)) || isnan(bands.high(i))) return (T)0;
    const T worst = bands.low(m - 1), width = bands.high(0) - worst, scale = (T)(n - 3) / width;
    return isfinite(worst) && isfinite(width) && isfinite(scale) && scale > (T)0 ? scale : (T)0;
}

// #{i < m : cell(i) > k}, the cells non-increasing in i, by bisection.
template <typename Cell>
__device__ __forceinline__ int gr_cells_above(const Cell& cell, int m, int k) {
    int lo = 0, hi = m;
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (cell(mid) > k) lo = mid + 1; else hi = mid;
    }
    return lo;
}

// Cell k's entry in the table of a user's m bands (non-increasing, none NaN) for its scale (0: no
// places): GR_CELL_NOWHERE for cell 0 (below the worst band, whatever the bands: a NaN or infinite
// worst band included, where gr_place places every finite score nowhere, or none); otherwise, with
// p = #{i : cell(low(i)) > k}, the cells of the low edges never increasing in i, as the bands:
// GR_CELL_SEARCH where an edge's cell is k; otherwise every score s of the cell has low(i) > s
// exactly for i < p, so gr_search finds c = p (<= m - 1: the worst band's edge is in cell 1 <= k),
// and s <= high(p) exactly when cell(high(p)) > k.
// With `steps` (rank_tile's), a cell that holds an edge but at most one low edge, and not the worst
// band's, also names the band p, in bits 8-15 as p + 1 (0: none; p + 1 <= GR_CELL_TESTS - 1): its
// entry stays GR_CELL_SEARCH, but gr_step places its scores by one compare with low(p) and one with a
// high edge instead of a search (gr_step says why). Cells 0 and last, where gr_cell puts every score
// that is not finite, never name a step.
// From the cells of the bands' edges, low_cell(i) = cell(low(i)) and high_cell(i) = cell(high(i))
// (computed once for a table: gr_build_cells; or at each use: gr_cell_entry), p = #{i : low_cell(i) > k}
// and q = #{i : high_cell(i) > k} (where `table`: the scale is positive); `last`: the table's last cell.
template <typename LowCell, typename HighCell>
__device__ __forceinline__ int gr_cell_entry_at(const LowCell& low_cell, const HighCell& high_cell, int m, bool table,
                                                int last, int k, bool steps, int p, int q) {
    if (k == 0) return GR_CELL_NOWHERE;
    if (!table) return GR_CELL_SEARCH;
    const bool edge = p == m || low_cell(p) == k || (q < m && high_cell(q) == k);
    if (!edge) return high_cell(p) > k ? GR_CELL_DEFER : p;
    // low(p + 1)'s cell below k: low(p) is the cell's only low edge, or it has none. Never the last cell (which
    // holds no edge, but a step there would also be read for an infinite score: gr_step's scores are finite)
    return steps && k < last && p < m - 1 && low_cell(p + 1) < k ? GR_CELL_SEARCH | (p + 1) << 8 : GR_CELL_SEARCH;
}

template <typename T, typename Bands>
__device__ int gr_cell_entry(const Bands& bands, int m, T worst, T scale, T last, int k, bool steps = false) {
    const auto low_cell = [&](int i) { return gr_cell(bands.low(i), worst, scale, last); };
    const auto high_cell = [&](int i) { return gr_cell(bands.high(i), worst, scale, last); };
    const bool table = scale > (T)0;
    return gr_cell_entry_at(low_cell, high_cell, m, table, (int)last, k, steps,
                            table ? gr_cells_above(low_cell, m, k) : 0, table ? gr_cells_above(high_cell, m, k) : 0);
}

// A block's table of n cells with steps (rank_tile's: each cell's entry, and its step, p + 1 or 0, in a
// second byte array) for the bands of m test items in shared memory: each band edge's cell computed once, into
// edge_cells (2 GR_CELL_TESTS int16_t: the low edges' from 0, the high edges' from GR_CELL_TESTS; only where
// the scale is positive, so m <= GR_CELL_TESTS); then each thread takes consecutive cells, the first one's p
// and q by bisection (gr_cells_above) and the next ones' by walking down from there (the edges' cells never
// increase in i), where gr_cell_entry computes a cell at every step of two bisections a cell. Called by every
// thread of the block, with the same arguments; the entries are there after the block's next barrier. (Not
// inlined: inlined, its loop's registers made rank_tile_f32 spill in its rounds.) Any byte of either array, as
// one read before it is written, places a score within the counts' first 256 words and the bands' first 256.
template <typename T, typename Bands>
__device__ GR_NOINLINE void gr_build_cells(uint8_t* entry, uint8_t* step, int16_t* edge_cells, const Bands& bands, int m,
                                           T worst, T scale, int n) {
    const bool table = scale > (T)0;
    if (table) {
        for (int i = threadIdx.x; i < m; i += blockDim.x) {
            edge_cells[i] = (int16_t)gr_cell(bands.low(i), worst, scale, (T)(n - 1));
            edge_cells[GR_CELL_TESTS + i] = (int16_t)gr_cell(bands.high(i), worst, scale, (T)(n - 1));
        }
    }
    __syncthreads();
    const auto low_cell = [&](int i) { return (int)edge_cells[i]; };
    const auto high_cell = [&](int i) { return (int)edge_cells[GR_CELL_TESTS + i]; };
    const int per = (n + blockDim.x - 1) / blockDim.x, k0 = threadIdx.x * per, k1 = min(n, k0 + per);
    int p = 0, q = 0;
    if (table && k0 < k1) {
        p = gr_cells_above(low_cell, m, k0);
        q = gr_cells_above(high_cell, m, k0);
    }
    for (int k = k0; k < k1; ++k) {
        if (table) {  // #{i : cell > k} from #{i : cell > k - 1}: the edges in cell k leave the count
            while (p > 0 && low_cell(p - 1) <= k) --p;
            while (q > 0 && high_cell(q - 1) <= k) --q;
        }
        const int e = gr_cell_entry_at(low_cell, high_cell, m, table, n - 1, k, true, p, q);
        entry[k] = (uint8_t)e;
        step[k] = (uint8_t)(e >> 8);
    }
}

// gr_place for a finite score s of a cell k whose step names band p (gr_cell_entry with steps: p =
// #{i : cell(low(i)) > k} < m - 1, and no low edge but low(p)'s in cell k). A cell never decreases as the
// score grows, so low(i) > s for i < p (a cell above s's), and low(i) < s for p < i (a cell below s's, as
// low(p + 1)'s): gr_search's c = #{i < m - 1 : low(i) > s} is p, or p + 1 where low(p) > s, and its last
// compare follows. Every score of the cell lies above the worst band (its cell, at most low(p + 1)'s, is
// below k), where gr_place searches: the same answer.
template <typename T, typename Bands>
__device__ __forceinline__ int gr_step(const Bands& bands, int p, T s) {
    const int c = bands.low(p) > s ? p + 1 : p;
    return bands.high(c) < s ? c : GR_DEFER;
}

// A lane's round of N items, scores s[q] (bit q of `pool`: item q is a pool item), placed by the user's cells as both
// rank kernels place them. A non-pool item's score becomes NaN: fmin and fmax pass over it in the pool's extremes mn
// and mx, and gr_cell clamps it to cell 0, whose entry places it nowhere, so no pool bit is tested again. Where the
// round's scores are all finite, count(e) takes every item's cell entry e, with no branch an item: a place (below
// GR_CELL_NOWHERE), or no place, which the caller counts nowhere (GR_CELL_NOWHERE; GR_CELL_DEFER, GR_CELL_SEARCH: the
// item is searched, gr_place decides). Returns the items to search: bit q, item q's cell does not place it. A round
// with a score that is not finite (rare: the filter overflowed, for a pool item or not, or the round's sum did) is not
// placed by its cells and count is not called: all its pool items search, gr_place defers a non-finite one, and the
// search flags it (the caller's).
template <int N, typename T, typename Count>
__device__ __forceinline__ uint32_t gr_cell_round(const T (&s)[N], uint32_t pool, const Cells<T>& cells, T worst, T& mn,
                                                  T& mx, const Count& count) {
    T p[N], sum = s[0];
#pragma unroll
    for (int q = 0; q < N; ++q) {
        p[q] = (pool >> q) & 1u ? s[q] : (T)GR_NAN;
        mn = fmin(mn, p[q]);
        mx = fmax(mx, p[q]);
        if (q > 0) sum = sum + s[q];
    }
    uint32_t search = 0;
    if (isfinite(sum)) {
#pragma unroll
        for (int q = 0; q < N; ++q) {
            const int e = cells.entry[gr_cell(p[q], worst, cells.scale, cells.last)];
            count(e);
            search |= (uint32_t)(e > GR_CELL_NOWHERE) << q;
        }
    } else {
        search = pool;
    }
    return search;
}

__device__ __forceinline__ void gr_add_count(int32_t* counts, int64_t c) { atomicAdd(&counts[c], 1); }

// gr_place, and the item counted at its place in counts (an int32_t* in shared or global
// memory, as the bands): whether it waits for its defined score instead.
template <typename T, typename Bands, typename Counts>
__device__ __forceinline__ bool gr_count(const Bands& bands, int m, int top, T worst, T s, Counts counts) {
    const int c = gr_place(bands, m, top, worst, s);
    if (c >= 0) gr_add_count(counts, c);
    return c == GR_DEFER;
}

// A lane's round of items placed by their cells (gr_cell_round), the items their cells do not
// place (an entry above GR_CELL_NOWHERE) placed by place(s) after the round's others, one at a time: so a warp runs the
// search as often as its busiest lane has such items, where searching each item in its turn ran
// it for every item that any lane had in a cell with an edge. (On bench_gpu's problem 7% of items
// search: in a round of 4 items a lane, some lane of the warp searched 90% of the time, and the 31
// others waited; now a warp searches once or twice a round.) Bit q of `search`: the round's item
// q, of filter score score(q), has such an entry; place(s) is gr_place's answer for it (gr_place itself, or
// rank_tile's gr_step where the cell allows); add(c) counts an item at place c. Returns the items
// that place defers (inside a band, or not finite): they wait for their defined score.
// seen(s): each searched score, before it is placed (rank_tile: every non-finite pool score searches,
// so its non-finite flag is kept here, not for every item).
template <typename Score, typename Place, typename Add, typename Seen>
__device__ __forceinline__ uint32_t gr_search_round(uint32_t search, const Score& score, const Place& place, const Add& add,
                                                    const Seen& seen) {
    uint32_t defer = 0;
    for (; search; search &= search - 1u) {
        const int q = __ffs((int)search) - 1;
        const auto s = score(q);
        seen(s);
        const int c = place(s);
        if (c >= 0) add(c);
        else if (c == GR_DEFER) defer |= 1u << q;  // (GR_NOWHERE: a non-finite score, no test item)
    }
    return defer;
}

// Bit gr_round_bit(j) of a training bitmap: item j, a round's 128 items (4 of each lane: items j0 + 32 q + lane,
// q < 4, as rank_tile and fused_rank count them) lane by lane, so that a lane's 4 bits of a round are one nibble:
// bit 4 lane + q of the round's 4 words.
__device__ __forceinline__ int gr_round_bit(int j) { return (j & ~127) | ((j & 31) << 2) | ((j >> 5) & 3); }
struct RoundBits {  // gr_tile_prepare's layout for fused_rank
    static __device__ __forceinline__ int bit(int c) { return gr_round_bit(c); }
};

#define GR_QUEUE 64  // per warp: items waiting for their defined score (two rounds of 32)

// Called by every lane of a warp, each with its own `defer` and `entry`: the deferred entries
// join the warp's queue (`queued`, its length, is the same in every lane), and when 32 wait,
// every lane settles one, so that one lane's F products in float64 do not hold up the other
// 31 lanes of its warp.
template <typename Settle>
__device__ __forceinline__ void gr_defer(int32_t* queue, int& queued, bool defer, int32_t entry,
                                         const Settle& settle) {
    const int lane = threadIdx.x & 31;
    const uint32_t deferring = __ballot_sync(0xFFFFFFFFu, defer);
    if (!deferring) return;  // the common case: no lane defers (the same in every lane)
    if (defer) queue[queued + __popc(deferring & ((1u << lane) - 1u))] = entry;
    queued += __popc(deferring);
    if (queued >= 32) {  // a full round: every lane settles one of the last 32
        __syncwarp();
        queued -= 32;
        settle(queue[queued + lane]);
        __syncwarp();
    }
}

// The entries still queued, one per lane, with every lane of the warp calling settle (-1 where it has none, so that
// settle may itself queue entries: gr_defer); the queue is empty after it.
template <typename Settle>
__device__ __forceinline__ void gr_flush(const int32_t* queue, int& queued, const Settle& settle) {
    __syncwarp();
    const int lane = threadIdx.x & 31;
    const int32_t entry = lane < queued ? queue[lane] : -1;
    __syncwarp();  // (settle may queue again)
    queued = 0;
    settle(entry);
}

// The entries still queued after the warp's last gr_defer, one per lane.
template <typename Settle>
__device__ __forceinline__ void gr_drain(const int32_t* queue, int queued, const Settle& settle) {
    __syncwarp();
    if ((int)(threadIdx.x & 31) < queued) settle(queue[threadIdx.x & 31]);
}
