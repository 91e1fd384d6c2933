// The magnitudes behind the filter's error bound (gpureco/engine/_scores.py: magnitudes,
// max_row_norm): per column f of a row-major matrix X (n_rows x n_cols), the largest finite
// |X[i, f]| (0 where none); and over the rows with no non-finite value, the largest sum of
// squares (float64, in order). Each as the bits of a double (`out`, zeroed by the caller), in
// one read of X at memory speed, in place of a reduction per chunk. A maximum does not depend
// on the order in which it is taken, and the atomics compare the bit patterns of non-negative
// doubles as integers (the same order), so the result is exact and the same on every run.
// Also each row's norm (row_norms: no reduction), for the fused kernels' bound of one item; and
// the TF32 parts of a matrix (split_tf32_f32) for TF32 mode's cuBLAS tiles, in one pass; and a
// matrix transposed (transpose_f32) for the FP32 tiles.
#include "common.cuh"

#define MAGNITUDE_THREADS 256

template <typename T>
__device__ void abs_max_columns(const T* __restrict__ X, int64_t n_rows, int64_t n_cols, int64_t rows_per_block,
                                uint64_t* __restrict__ out) {
    // the block's threads cover `width` consecutive columns of `height` consecutive rows: one
    // contiguous stretch of memory per pass (2 rows of 128 factors; 256 rows of a vector)
    const int64_t width = min(n_cols, (int64_t)blockDim.x), height = blockDim.x / width;
    const int64_t lane = threadIdx.x % width, row_lane = threadIdx.x / width;
    const int64_t r0 = (int64_t)blockIdx.x * rows_per_block, r1 = min(n_rows, r0 + rows_per_block);
    for (int64_t c0 = 0; c0 < n_cols; c0 += width) {
        const int64_t col = c0 + lane;
        if (row_lane >= height || col >= n_cols) continue;
        double mx = 0.0;
        for (int64_t r = r0 + row_lane; r < r1; r += height) {
            const double x = fabs(gr_widen(X[r * n_cols + col]));
            if (isfinite(x)) mx = fmax(mx, x);
        }
        // the bits of mx (>= 0): its order key less the top bit
        if (mx > 0.0) atomicMax((unsigned long long*)&out[col], (unsigned long long)(gr_order_key(mx) & 0x7FFFFFFFFFFFFFFFULL));
    }
}

#define ABS_MAX_COLUMNS(SUFFIX, T)                                                                              \
    extern "C" __global__ void __launch_bounds__(MAGNITUDE_THREADS) abs_max_columns_##SUFFIX(                  \
        const T* X, int64_t n_rows, int64_t n_cols, int64_t rows_per_block, uint64_t* out) {                   \
        abs_max_columns<T>(X, n_rows, n_cols, rows_per_block, out);                                           \
    }

ABS_MAX_COLUMNS(f32, float)
ABS_MAX_COLUMNS(f64, double)

// sum_f X[r, f]^2 (float64, in order f = 0 .. n_cols - 1; infinite if it overflows), and
// whether the row has no non-finite value
template <typename T>
__device__ __forceinline__ double gr_row_sum_sq(const T* __restrict__ X, int64_t r, int64_t n_cols, bool& finite) {
    double acc = 0.0;
    finite = true;
    for (int64_t f = 0; f < n_cols; ++f) {
        const double x = gr_widen(X[r * n_cols + f]);
        finite = finite && isfinite(x);
        acc = gr_add(acc, gr_mul(x, x));
    }
    return acc;
}

// max over the rows of X with no non-finite value of their sums of squares: one thread a row,
// a grid-stride loop
template <typename T>
__device__ void max_row_norm_sq(const T* __restrict__ X, int64_t n_rows, int64_t n_cols, uint64_t* __restrict__ out) {
    double mx = 0.0;
    for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < n_rows; r += (int64_t)gridDim.x * blockDim.x) {
        bool finite;
        const double acc = gr_row_sum_sq(X, r, n_cols, finite);
        if (finite) mx = fmax(mx, acc);
    }
    if (mx > 0.0) atomicMax((unsigned long long*)out, (unsigned long long)(gr_order_key(mx) & 0x7FFFFFFFFFFFFFFFULL));
}

// the kernels over the rows of X (one thread a row): NAME_SUFFIX(X, n_rows, n_cols, out)
#define ROWS_KERNEL(NAME, SUFFIX, T, OUT)                                                                      \
    extern "C" __global__ void __launch_bounds__(MAGNITUDE_THREADS) NAME##_##SUFFIX(                           \
        const T* X, int64_t n_rows, int64_t n_cols, OUT* out) {                                               \
        NAME<T>(X, n_rows, n_cols, out);                                                                      \
    }

ROWS_KERNEL(max_row_norm_sq, f32, float, uint64_t)
ROWS_KERNEL(max_row_norm_sq, f64, double, uint64_t)

// each row's norm: the square root of its sum of squares as max_row_norm_sq adds them (+inf for
// a row with a non-finite value, whose scores are not finite either): the fused kernels' bound
// for one item (score_tolerance's item terms), one thread a row
template <typename T>
__device__ void row_norms(const T* __restrict__ X, int64_t n_rows, int64_t n_cols, double* __restrict__ out) {
    for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < n_rows; r += (int64_t)gridDim.x * blockDim.x) {
        bool finite;
        const double acc = gr_row_sum_sq(X, r, n_cols, finite);
        out[r] = finite ? sqrt(acc) : GR_INF;
    }
}

ROWS_KERNEL(row_norms, f32, float, double)
ROWS_KERNEL(row_norms, f64, double, double)

// _scores.split_tf32 of the row-major float32 X (n_rows x n_cols) into out (n_rows x 2 n_cols,
// row-major, as bits): each row [hi | lo], or [lo | hi] with lo_first. One read of X and one
// write of out, in place of NumPy-style passes (a mask, a subtraction, a rounding, two copies:
// 11 ms a call of bench_gpu's problem on an H100, 2026-11-26); a grid-stride loop.
extern "C" __global__ void __launch_bounds__(MAGNITUDE_THREADS) split_tf32_f32(
    const float* __restrict__ X, int64_t n_rows, int64_t n_cols, uint32_t* __restrict__ out, int lo_first) {
    const int64_t n = n_rows * n_cols, step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        const int64_t r = i / n_cols, f = i - r * n_cols;
        const float x = X[i];
        const uint32_t hi = gr_tf32_hi(x), lo = gr_tf32_lo(x, hi);
        uint32_t* row = out + 2 * r * n_cols;
        row[lo_first ? n_cols + f : f] = hi;
        row[lo_first ? f : n_cols + f] = lo;
    }
}

// out = X^T, row-major (n_cols x n_rows), for a row-major X (n_rows x n_cols) of 32-bit values
// (float32 factors, as bits: copied exactly): a block moves a 32 x 32 square through shared
// memory, its rows read and written whole (TRANSPOSE_ROWS threads a column of the square).
// FactorScores.tile's items for the FP32 GEMM, F x items: cuBLAS's kernel for that layout
// (NN) runs about 7% faster on an H100 than for the items as they are (TN; bench_gemm.py).
#define TRANSPOSE_ROWS 8
extern "C" __global__ void __launch_bounds__(256) transpose_f32(  // (256: 32 x TRANSPOSE_ROWS)
    const uint32_t* __restrict__ X, int64_t n_rows, int64_t n_cols, uint32_t* __restrict__ out) {
    __shared__ uint32_t square[32][33];  // (33: a column of the square in 32 banks)
    const int64_t r0 = (int64_t)blockIdx.y * 32, c0 = (int64_t)blockIdx.x * 32;
    for (int i = threadIdx.y; i < 32; i += TRANSPOSE_ROWS)
        if (r0 + i < n_rows && c0 + threadIdx.x < n_cols) square[i][threadIdx.x] = X[(r0 + i) * n_cols + c0 + threadIdx.x];
    __syncthreads();
    for (int i = threadIdx.y; i < 32; i += TRANSPOSE_ROWS)
        if (c0 + i < n_cols && r0 + threadIdx.x < n_rows) out[(c0 + i) * n_rows + r0 + threadIdx.x] = square[threadIdx.x][i];
}
