// Definitions shared by every gpureco kernel, identical to the CPU engine's
// (gpureco/_cpu_ranks.pyx): the defined score, the tie key and the rank search.
// Everything here is __host__ __device__ so that tests can check it on the host with nvcc.
#pragma once

#ifdef __CUDACC_RTC__
typedef unsigned long long uint64_t;
typedef long long int64_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef short int16_t;
#else
#include <stdint.h>
#include <string.h>
#include <math.h>
#endif

#define GR_HD __host__ __device__ __forceinline__

#ifdef __CUDA_ARCH__
#define GR_NOINLINE __noinline__  // a rarely taken call kept out of an unrolled loop
#else
#define GR_NOINLINE
#endif

// The GPU whose settings a kernel takes where they depend on its shared memory and threads (rank_tile.cu's cells and
// blocks an SM, fused_rank.cu's shared counts) or instructions (gr_warp_extremes' REDUX): the device's, __CUDA_ARCH__;
// on the host (the emulation, nvcc's host pass) GR_EMULATED_ARCH, where given (tests/emulation runs the settings of
// each kind of GPU this way), else an H100's.
#if defined(__CUDA_ARCH__)
#define GR_ARCH __CUDA_ARCH__
#elif defined(GR_EMULATED_ARCH)
#define GR_ARCH GR_EMULATED_ARCH
#else
#define GR_ARCH 900
#endif
#if GR_ARCH < 100
#error "GR_EMULATED_ARCH: an architecture as __CUDA_ARCH__ gives it (750, 800, 900, ...)"
#endif

// splitmix64 finaliser (gpureco_mix64 in _cpu_ranks.pyx)
GR_HD uint64_t gr_mix64(uint64_t x) {
    x ^= x >> 30; x *= 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 27; x *= 0x94D049BB133111EBULL;
    x ^= x >> 31; return x;
}

// Ties go to the smaller key: the item index, or with noise a seeded 32-bit random
// number per (user, item) above the item index. noise = 2 (the tie modes optimistic,
// pessimistic, average): item + 1, so that a test item's key 0 puts it before every tied
// pool item and UINT64_MAX after every one.
GR_HD uint64_t gr_tie_key(uint64_t seed, uint64_t user, uint64_t item, int noise) {
    if (!noise) return item;
    if (noise == 2) return item + 1;
    uint64_t h = gr_mix64(gr_mix64(seed * 0x9E3779B97F4A7C15ULL + user) ^ item);
    return (h & 0xFFFFFFFF00000000ULL) | item;
}

#ifdef __CUDA_ARCH__
GR_HD double gr_mul(double x, double y) { return __dmul_rn(x, y); }  // never fused
GR_HD double gr_add(double x, double y) { return __dadd_rn(x, y); }
#else
GR_HD double gr_mul(double x, double y) { volatile double p = x * y; return p; }
GR_HD double gr_add(double x, double y) { volatile double s = x + y; return s; }
#endif

// a * b + c rounded once, never flushed to zero (CuPy compiles with -ftz=true): the same
// float on the device and on the host.
GR_HD float gr_fmaf(float a, float b, float c) {
#ifdef __CUDA_ARCH__
    float r;
    asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(r) : "f"(a), "f"(b), "f"(c));
    return r;
#else
    return fmaf(a, b, c);
#endif
}

// gr_fmaf, and its double counterpart (doubles are never flushed), for kernels templated on the type.
GR_HD float gr_fma(float a, float b, float c) { return gr_fmaf(a, b, c); }
GR_HD double gr_fma(double a, double b, double c) { return fma(a, b, c); }

// a - b rounded once, never flushed to zero (as gr_fmaf): the same float on the device and on the host.
GR_HD float gr_subf(float a, float b) {
#ifdef __CUDA_ARCH__
    float r;
    asm("sub.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
#else
    return a - b;
#endif
}

// split_tf32 (_scores.py) of one float32 x, as bits: hi = x with its 13 lowest mantissa bits
// cleared; lo = x - hi (exact, subnormals not flushed) rounded to nearest TF32, half away from
// zero. Integer operations and one exact subtraction: the parts NumPy makes, on any device.
#define GR_TF32_MASK 0xFFFFE000u
__device__ __forceinline__ uint32_t gr_tf32_hi(float x) { return (uint32_t)__float_as_int(x) & GR_TF32_MASK; }
__device__ __forceinline__ uint32_t gr_tf32_lo(float x, uint32_t hi) {
    return ((uint32_t)__float_as_int(gr_subf(x, __int_as_float((int)hi))) + 0x1000u) & GR_TF32_MASK;
}

// float -> double exactly, subnormals included: CuPy compiles with -ftz=true, which would
// flush them in a plain conversion (cvt.ftz.f64.f32), unlike the CPU engine.
GR_HD double gr_widen(float x) {
#ifdef __CUDA_ARCH__
    double r;
    asm("cvt.f64.f32 %0, %1;" : "=d"(r) : "f"(x));
    return r;
#else
    return (double)x;
#endif
}
GR_HD double gr_widen(double x) { return x; }

// The definition of a score: float64 products summed in order f = 0 .. F-1, plus the bias.
template <typename T>
GR_HD double gr_exact_score(const T* a, const T* b, int64_t n_factors, const double* bias, int64_t item) {
    double acc = 0.0;
    for (int64_t f = 0; f < n_factors; ++f) acc = gr_add(acc, gr_mul(gr_widen(a[f]), gr_widen(b[f])));
    return bias ? gr_add(acc, bias[item]) : acc;
}

// x rounded to float toward -infinity / +infinity, never flushed to zero (CuPy compiles with
// -ftz=true): the float bounds of an interval of doubles, widened outward.
GR_HD float gr_float_down(double x) {
#ifdef __CUDA_ARCH__
    float r;
    asm("cvt.rm.f32.f64 %0, %1;" : "=f"(r) : "d"(x));
    return r;
#else
    float f = (float)x;
    if ((double)f > x) f = nextafterf(f, -INFINITY);
    return f;
#endif
}
GR_HD float gr_float_up(double x) {
#ifdef __CUDA_ARCH__
    float r;
    asm("cvt.rp.f32.f64 %0, %1;" : "=f"(r) : "d"(x));
    return r;
#else
    float f = (float)x;
    if ((double)f < x) f = nextafterf(f, INFINITY);
    return f;
#endif
}

// The band [low, high] of filter scores that a test item of defined score t cannot settle
// with a filter error of at most tol, in the filter's own type: a filter score below low is
// surely below t, one above high surely above it. NaN bounds settle nothing.
GR_HD void gr_band(double t, double tol, float* low, float* high) {
    *low = gr_float_down(gr_add(t, -tol));
    *high = gr_float_up(gr_add(t, tol));
}
GR_HD void gr_band(double t, double tol, double* low, double* high) {
    *low = gr_add(t, -tol);
    *high = gr_add(t, tol);
}

// #{i < m : scores[i] > s}, scores sorted in descending order
GR_HD int64_t gr_count_above(const double* scores, int64_t m, double s) {
    int64_t lo = 0, hi = m;
    while (lo < hi) {
        int64_t mid = (lo + hi) >> 1;
        if (scores[mid] > s) lo = mid + 1; else hi = mid;
    }
    return lo;
}

// #{i < m : (scores[i], keys[i]) outranks (s, key)}, the pairs sorted best-first (scores
// descending, keys ascending within a score): past the scores above s, the pairs of score s
// and a smaller key come first, so a bisection finds their end (a tie group of n test items
// costs log n reads, not n: exact ties are common, e.g. items with no factors)
GR_HD int64_t gr_count_outranking(const double* scores, const uint64_t* keys, int64_t m, double s, uint64_t key) {
    int64_t lo = gr_count_above(scores, m, s), hi = m;
    while (lo < hi) {
        int64_t mid = (lo + hi) >> 1;
        if (scores[mid] == s && keys[mid] < key) lo = mid + 1; else hi = mid;
    }
    return lo;
}

// A monotone map of doubles to unsigned integers (NaN excluded): x < y <=> key(x) < key(y),
// and -0.0 maps as 0.0.
GR_HD uint64_t gr_order_key(double x) {
    x = gr_add(x, 0.0);
#ifdef __CUDA_ARCH__
    uint64_t bits = (uint64_t)__double_as_longlong(x);
#else
    uint64_t bits; memcpy(&bits, &x, sizeof bits);
#endif
    return (bits >> 63) ? ~bits : (bits | 0x8000000000000000ULL);
}

// The inverse of gr_order_key.
GR_HD double gr_from_order_key(uint64_t key) {
    uint64_t bits = (key >> 63) ? (key & 0x7FFFFFFFFFFFFFFFULL) : ~key;
#ifdef __CUDA_ARCH__
    return __longlong_as_double((long long)bits);
#else
    double x; memcpy(&x, &bits, sizeof x); return x;
#endif
}

// A place by counting (sort_tests, topk_select: one block a user, the user's entries in shared memory):
// how many of a chunk's n entries (order keys order[j], tie keys key[j]: entry j0 + j) go before entry i
// (order key o, tie key k): a larger order key, or the same and a smaller tie key, or both the same and an
// earlier entry. The common loop compares order keys alone; the tie keys only where another entry of the
// chunk has the same order key (rare but for ties). Integer compares only.
GR_HD int gr_count_before(const uint64_t* order, const uint64_t* key, int n, int j0, uint64_t o, uint64_t k, int i) {
    int above = 0, same = 0;  // the chunk's entries of a larger order key; of the same (entry i's too, if in it)
    for (int j = 0; j < n; ++j) {
        const uint64_t oj = order[j];
        above += oj > o;
        same += oj == o;
    }
    if (same > (i >= j0 && i < j0 + n)) {
        for (int j = 0; j < n; ++j) {
            const uint64_t kj = key[j];
            above += order[j] == o && (kj < k || (kj == k && j0 + j < i));
        }
    }
    return above;
}

GR_HD double gr_inf() { return gr_from_order_key(0xFFF0000000000000ULL); }  // +infinity
#define GR_INF gr_inf()
GR_HD double gr_nan() { return gr_from_order_key(0xFFF8000000000000ULL); }  // a quiet NaN (NVRTC has no NAN)
#define GR_NAN gr_nan()

// The first position p in sorted[0..n) with sorted[p] >= value (n when none).
GR_HD int64_t gr_lower_bound(const int32_t* sorted, int64_t n, int64_t value) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = (lo + hi) >> 1;
        if (sorted[mid] < value) lo = mid + 1; else hi = mid;
    }
    return lo;
}

#ifdef __CUDACC__
// A monotone map of floats to unsigned integers (NaN excluded): x < y => key(x) < key(y), and -0.0 below 0.0 (the
// rank kernels fold their extremes through gr_order_key, where the two are one), so that integer minima order floats.
__device__ __forceinline__ uint32_t gr_float_key(float x) {
    const uint32_t bits = (uint32_t)__float_as_int(x);
    return bits ^ ((uint32_t)((int32_t)bits >> 31) | 0x80000000u);
}
__device__ __forceinline__ float gr_from_float_key(uint32_t key) {  // the inverse of gr_float_key
    return __int_as_float((int)((key >> 31) ? key & 0x7FFFFFFFu : ~key));
}

// lo's minimum and hi's maximum over the warp's 32 lanes, in every lane: one REDUX each from sm_80 on, shuffles
// before (the host emulation runs either, as GR_ARCH says: tests/emulation checks both against their definition).
#if GR_ARCH >= 800
#define GR_REDUX 1
#endif
__device__ __forceinline__ void gr_warp_extremes(uint32_t& lo, uint32_t& hi) {
#ifdef GR_REDUX
    lo = __reduce_min_sync(0xFFFFFFFFu, lo);
    hi = __reduce_max_sync(0xFFFFFFFFu, hi);
#else
    for (int off = 16; off > 0; off >>= 1) {
        lo = min(lo, __shfl_xor_sync(0xFFFFFFFFu, lo, off));
        hi = max(hi, __shfl_xor_sync(0xFFFFFFFFu, hi, off));
    }
#endif
}

// A kernel's dynamic shared memory, `bytes` of it, named `name` (an array of T): launched with shared_mem = bytes
// (over 48 KB a block in all, with the kernel's max_dynamic_shared_size_bytes raised: gpureco/engine/_gpu.py). The
// emulation, which has no dynamic shared memory, declares it static, and checks the launch's (tests/emulation/cuda_host.h).
struct alignas(16) GrWords16 {
    uint32_t v[4];
};
#ifndef GR_DYNAMIC_SHARED
#ifdef __CUDA_ARCH__
#define GR_DYNAMIC_SHARED(T, name, bytes) extern __shared__ T name[]
#else  // (nvcc's host pass)
#define GR_DYNAMIC_SHARED(T, name, bytes) __shared__ T name[(bytes) / sizeof(T)]
#endif
#endif

// Fold each thread's pool minimum, maximum and non-finite flag into a user's totals (order
// keys, so that atomicMin/atomicMax order doubles); every thread of the block must call it.
__device__ __forceinline__ void gr_fold_pool_stats(double mn, double mx, int bad, uint64_t* pool_min,
                                                   uint64_t* pool_max, int32_t* nonfinite) {
    for (int off = 16; off > 0; off >>= 1) {
        mn = fmin(mn, __shfl_down_sync(0xFFFFFFFFu, mn, off));
        mx = fmax(mx, __shfl_down_sync(0xFFFFFFFFu, mx, off));
        bad |= __shfl_down_sync(0xFFFFFFFFu, bad, off);
    }
    if ((threadIdx.x & 31) == 0) {
        atomicMin((unsigned long long*)pool_min, (unsigned long long)gr_order_key(mn));
        atomicMax((unsigned long long*)pool_max, (unsigned long long)gr_order_key(mx));
        if (bad) atomicOr(nonfinite, 1);
    }
}
#endif
