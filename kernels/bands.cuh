// A pool item's place among a user's test items, from its filter score: shared by the rank
// kernels (rank_tile.cu over cuBLAS score tiles, fused_rank.cu over scores it computes).
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
