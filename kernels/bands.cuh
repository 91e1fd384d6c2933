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

// Where a pool item of filter score s (its bias added) is counted among the m test items
// (m < 2^31: a user's test items are distinct items): c in [0, m) when it surely falls
// between test items c - 1 and c (it outranks c .. m - 1), GR_NOWHERE, or GR_DEFER when s is
// inside a band or not finite (the filter overflowed: inf, or inf - inf). `worst` is low(m -
// 1) (+inf when m = 0): an item not at or above it is counted nowhere, without a search
// (also when the worst band is NaN: a NaN test score, whose user's metrics are NaN). Above
// it, c = #{i < m - 1 : low(i) > s} (low(m - 1) <= s), found in steps of top, top / 2, .., 1
// (top = gr_search_top(m)) that end clamped at m - 1: no branch but the loop's, a few
// integer operations, one shared-memory read and one compare a step. The count is the same
// for any search as long as the bands are non-increasing, which they are.
template <typename T, typename Bands>
__device__ __forceinline__ int gr_place(const Bands& bands, int m, int top, T worst, T s) {
    if (!isfinite(s)) return m > 0 ? GR_DEFER : GR_NOWHERE;
    if (!(s >= worst)) return GR_NOWHERE;
    int c = 0;
    for (int step = top; step > 0; step >>= 1) {
        const int k = min(c + step, m - 1);
        if (bands.low(k - 1) > s) c = k;
    }
    return s > bands.high(c) ? c : GR_DEFER;
}

// gr_place, and the item counted at its place in counts (shared or global memory, as the
// bands): whether it waits for its defined score instead.
template <typename T, typename Bands>
__device__ __forceinline__ bool gr_count(const Bands& bands, int m, int top, T worst, T s, int32_t* counts) {
    const int c = gr_place(bands, m, top, worst, s);
    if (c >= 0) atomicAdd(&counts[c], 1);
    return c == GR_DEFER;
}

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

// The entries still queued after the warp's last gr_defer, one per lane.
template <typename Settle>
__device__ __forceinline__ void gr_drain(const int32_t* queue, int queued, const Settle& settle) {
    __syncwarp();
    if ((int)(threadIdx.x & 31) < queued) settle(queue[threadIdx.x & 31]);
}
