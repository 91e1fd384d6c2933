// A pool item's place among a user's test items, from its filter score, and the warp queue of
// the items the filter cannot place: shared by the rank kernels (rank_tile.cu over cuBLAS
// score tiles, fused_rank.cu over scores it computes).
#pragma once
#include "common.cuh"

// The test items' bands [low(i), high(i)] (gr_band), from shared memory or computed from the
// defined scores in global memory; both are non-increasing in i, as the scores are.
template <typename T>
struct Bands {
    const T* lo;
    const T* hi;
    const double* scores;
    double tol;
    __device__ __forceinline__ T low(int64_t i) const {
        if (lo) return lo[i];
        T l, h;
        gr_band(scores[i], tol, &l, &h);
        return l;
    }
    __device__ __forceinline__ T high(int64_t i) const {
        if (hi) return hi[i];
        T l, h;
        gr_band(scores[i], tol, &l, &h);
        return h;
    }
    // #{i < m : low(i) > s}: the test items surely above s
    __device__ __forceinline__ int64_t count_above(int64_t m, T s) const {
        int64_t a = 0, b = m;
        while (a < b) {
            const int64_t mid = (a + b) >> 1;
            if (low(mid) > s) a = mid + 1; else b = mid;
        }
        return a;
    }
};

#define GR_NOWHERE (-1)  // gr_place: the item outranks no test item (or the user has none)
#define GR_DEFER (-2)    // gr_place: the filter cannot tell; the defined score decides

// Where a pool item of filter score s (its bias added) is counted among the m test items:
// c in [0, m) when it surely falls between test items c - 1 and c (it outranks c .. m - 1),
// GR_NOWHERE, or GR_DEFER when s is inside a band or not finite (the filter overflowed:
// inf, or inf - inf). `worst` is low(m - 1) (+inf when m = 0): below it an item is counted
// nowhere, without a search.
template <typename T>
__device__ __forceinline__ int64_t gr_place(const Bands<T>& bands, int64_t m, T worst, T s) {
    if (!isfinite(s)) return m > 0 ? GR_DEFER : GR_NOWHERE;
    if (s < worst) return GR_NOWHERE;
    const int64_t c = bands.count_above(m, s);
    if (c >= m) return GR_NOWHERE;
    return s > bands.high(c) ? c : GR_DEFER;
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
