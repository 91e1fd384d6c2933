"""The host emulation of CUDA (cuda_host.h, emulator.py): first on tiny kernels written here
(barriers, warp intrinsics, atomics, shared memory, launch and argument checks, and the rule
violations it must report), then the real kernels of kernels/*.cu against their NumPy
restatement in tests/gpu_model.py under several schedules, and seeded bugs in copies of the
kernels, which must be caught."""
import math
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import gpu_model
from conftest import NVCC, needs_nvcc
from emulation.device import GPUS
from emulation.emulator import HEADER, EmulationError, RawModule, compiler, have_compiler
from gpureco.engine import _gpu
from gpureco.engine._cpu_ranks import tie_keys
from gpureco.engine._scores import magnitudes, max_row_norm, order_key, score_tolerance, select_top_k, split_tf32

pytestmark = pytest.mark.skipif(not have_compiler(), reason="no C++ compiler (g++) on PATH")

TINY = r"""
#include <stdint.h>

extern "C" __global__ void indices(int32_t* out) {
    const int64_t block = blockIdx.x + gridDim.x * (blockIdx.y + (int64_t)gridDim.y * blockIdx.z);
    const int64_t thread = threadIdx.x + blockDim.x * (threadIdx.y + (int64_t)blockDim.y * threadIdx.z);
    int32_t* row = out + 12 * (block * blockDim.x * blockDim.y * blockDim.z + thread);
    const uint3 t = threadIdx, b = blockIdx;
    const dim3 bd = blockDim, gd = gridDim;
    const unsigned v[12] = {t.x, t.y, t.z, b.x, b.y, b.z, bd.x, bd.y, bd.z, gd.x, gd.y, gd.z};
    for (int i = 0; i < 12; ++i) row[i] = (int32_t)v[i];
}

// out[t] = in[t + 1] through shared memory; without the barrier a thread may read too early.
extern "C" __global__ void rotate(const int32_t* in, int32_t* out, int barrier) {
    __shared__ int32_t tile[1024];
    const int t = threadIdx.x, n = blockDim.x;
    tile[t] = in[blockIdx.x * n + t];
    if (barrier) __syncthreads();
    out[blockIdx.x * n + t] = tile[(t + 1) % n];
}

// What each block finds in shared memory before writing it.
extern "C" __global__ void fresh_shared(int32_t* out) {
    __shared__ int32_t s;
    if (threadIdx.x == 0) {
        out[blockIdx.x] = s;
        s = blockIdx.x;
    }
}

// The order in which threads resume after a barrier, and the order of the blocks.
extern "C" __global__ void order(int32_t* seen, int32_t* blocks) {
    __shared__ int32_t next;
    if (threadIdx.x == 0) next = 0;
    __syncthreads();
    seen[blockIdx.x * blockDim.x + atomicAdd(&next, 1)] = threadIdx.x;
    if (threadIdx.x == 0) blocks[atomicAdd(&blocks[gridDim.x], 1)] = blockIdx.x;
}

template <typename T>
__device__ void shuffles(const T* in, T* out, int width) {
    const int t = threadIdx.x;
    const T v = in[t];
    out[4 * t + 0] = __shfl_sync(0xFFFFFFFFu, v, (t * 7 + 3) % 32, width);
    out[4 * t + 1] = __shfl_up_sync(0xFFFFFFFFu, v, 3, width);
    out[4 * t + 2] = __shfl_down_sync(0xFFFFFFFFu, v, 5, width);
    out[4 * t + 3] = __shfl_xor_sync(0xFFFFFFFFu, v, 6, width);
}
#define SHUFFLES(NAME, T) \
    extern "C" __global__ void NAME(const T* in, T* out, int width) { shuffles<T>(in, out, width); }
SHUFFLES(shuffles_i32, int)
SHUFFLES(shuffles_u32, unsigned int)
SHUFFLES(shuffles_i64, long long)
SHUFFLES(shuffles_u64, unsigned long long)
SHUFFLES(shuffles_f32, float)
SHUFFLES(shuffles_f64, double)

extern "C" __global__ void votes(const int32_t* pred, uint32_t* out) {
    const int t = threadIdx.x, p = pred[t];
    const unsigned half = (t & 16) ? 0xFFFF0000u : 0x0000FFFFu;
    uint32_t* o = out + 8 * t;
    o[0] = __ballot_sync(0xFFFFFFFFu, p);
    o[1] = __any_sync(0xFFFFFFFFu, p);
    o[2] = __all_sync(0xFFFFFFFFu, p);
    o[3] = __ballot_sync(half, p);
    __syncwarp();
    o[4] = __popc(o[0]);
    o[5] = __ffs((int)o[0]);
    o[6] = __clz((int)o[0]);
    o[7] = __popcll(((unsigned long long)o[0] << 32) | o[3]);
}

extern "C" __global__ void atomics(int32_t* i, uint32_t* u, unsigned long long* ull, long long* ll, float* f,
                                   double* d) {
    const int t = threadIdx.x + blockIdx.x * blockDim.x;
    atomicAdd(&i[0], t);
    atomicMin(&i[1], t - 100);
    atomicMax(&i[2], t);
    atomicExch(&i[3], t);
    int old = i[4];
    for (;;) {  // a counter by compare-and-swap
        const int seen = atomicCAS(&i[4], old, old + 1);
        if (seen == old) break;
        old = seen;
    }
    atomicAdd(&u[0], (unsigned)t);
    atomicMin(&u[1], (unsigned)(t ^ 0x55));
    atomicOr(&u[2], 1u << (t & 31));
    atomicAnd(&u[3], ~(1u << (t % 29)));
    atomicXor(&u[4], (unsigned)t * 2654435761u);
    atomicAdd(&ull[0], (unsigned long long)t << 33);
    atomicMax(&ull[1], (unsigned long long)t * 0x9E3779B97F4A7C15ull);
    atomicMin(&ll[0], -(long long)t << 40);
    atomicMax(&ll[1], (long long)t << 40);
    atomicAdd(&f[0], 0.5f);
    atomicAdd(&d[0], t * 0.25);
}

extern "C" __global__ void partial_barrier(int32_t* out, int k) {
    if ((int)threadIdx.x < k) __syncthreads();
    out[threadIdx.x] = 1;
}

extern "C" __global__ void split_barrier(int32_t* out) {
    if (threadIdx.x & 1) {
        __syncthreads();
        out[threadIdx.x] = 1;
    } else {
        __syncthreads();
        out[threadIdx.x] = 2;
    }
}

extern "C" __global__ void shfl_mask(int32_t* out, unsigned mask) {
    out[threadIdx.x] = __shfl_down_sync(mask, (int)threadIdx.x, 1);
}

extern "C" __global__ void shfl_after_exit(int32_t* out) {
    if (threadIdx.x >= 16) return;
    out[threadIdx.x] = __shfl_down_sync(0xFFFFFFFFu, (int)threadIdx.x, 1);
}

extern "C" __global__ void shfl_mixed(int32_t* out) {
    const int t = threadIdx.x;
    out[t] = (t & 1) ? __shfl_down_sync(0xFFFFFFFFu, t, 1) : __shfl_up_sync(0xFFFFFFFFu, t, 1);
}

extern "C" __global__ void deadlock(int32_t* out) {
    if (threadIdx.x == 0) __syncthreads();
    else out[threadIdx.x] = __shfl_down_sync(0xFFFFFFFFu, (int)threadIdx.x, 1);
}

extern "C" __global__ void overrun(int32_t* out, int64_t at) {
    if (threadIdx.x == 0) out[at] = 1;
}

extern "C" __global__ void __launch_bounds__(64) bounded(int32_t* out) { out[threadIdx.x] = 1; }

extern "C" __global__ void big_frame(int32_t* out, int64_t n) {
    volatile int32_t local[64 * 1024];  // 256 KiB of locals: more than a fiber's stack
    for (int64_t i = 0; i < n; ++i) local[i] = (int32_t)i;
    out[threadIdx.x] = local[n - 1];
}
"""
POISON32 = np.frombuffer(b"\xcd" * 4, dtype=np.int32)[0]


@pytest.fixture(scope="module")
def tiny():
    return RawModule(code=TINY, options=("-std=c++17",))


@pytest.mark.parametrize("grid,block", [((3,), (5,)), ((2, 3, 2), (4, 2, 3)), ((1, 1, 2), (1, 33))])
def test_thread_and_block_indices(tiny, grid, block):
    g, b = (grid + (1, 1))[:3], (block + (1, 1))[:3]
    n = int(np.prod(g)) * int(np.prod(b))
    out = np.full((n, 12), -1, dtype=np.int32)
    tiny.get_function("indices")(grid, block, (out,))
    # CUDA numbering: x fastest, for threads within a block and for blocks within the grid
    bz, by, bx, tz, ty, tx = (a.ravel() for a in np.indices((g[2], g[1], g[0], b[2], b[1], b[0])))
    expected = np.stack([tx, ty, tz, bx, by, bz] + [np.full(n, v) for v in (*b, *g)], axis=1)
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("schedule", ["forward", "reverse", "shuffle"])
def test_barrier_makes_every_write_visible(tiny, schedule):
    x = np.random.default_rng(1).integers(-1000, 1000, size=3 * 96, dtype=np.int32)
    out = np.zeros_like(x)
    tiny.get_function("rotate")((3,), (96,), (x, out, np.int32(1)), schedule=schedule, seed=7)
    np.testing.assert_array_equal(out.reshape(3, 96), np.roll(x.reshape(3, 96), -1, axis=1))


def test_a_missing_barrier_shows_poison_and_differs_between_schedules(tiny):
    """Without the barrier, thread t reads tile[t + 1] before thread t + 1 wrote it when threads
    run in order (each runs alone until it gives way): shared memory is poisoned per block."""
    x = np.arange(2 * 64, dtype=np.int32)
    results = {}
    for schedule in ("forward", "reverse"):
        out = np.zeros_like(x)
        tiny.get_function("rotate")((2,), (64,), (x, out, np.int32(0)), schedule=schedule)
        results[schedule] = out.reshape(2, 64)
    assert np.all(results["forward"][:, :-1] == POISON32)  # in both blocks: not the first block's values
    assert not np.array_equal(results["forward"], results["reverse"])


def test_shared_memory_is_fresh_in_every_block(tiny):
    out = np.zeros(4, dtype=np.int32)
    tiny.get_function("fresh_shared")((4,), (32,), (out,))
    assert np.all(out == POISON32)


def test_a_launch_leaves_no_mapping_behind():
    """The fiber stacks (a guard page each: two of the process's vm.max_map_count mappings a
    thread) are unmapped after every launch: a module is never unloaded, and a test process
    loads a hundred of them and more (kept, they used up the mappings of CI's process, which
    then hung at a thread start)."""
    def mappings():
        with open("/proc/self/maps") as f:
            return sum(1 for _ in f)
    f = RawModule(code=TINY).get_function("rotate")  # a module of its own, loaded, never launched
    x = np.arange(2 * 1024, dtype=np.int32)
    before = mappings()
    for _ in range(3):
        f((2,), (1024,), (x, np.zeros_like(x), np.int32(1)))
    assert mappings() - before < 16  # were 2,049 more for a block of 1,024 threads


def test_schedules_and_block_orders(tiny):
    f = tiny.get_function("order")
    runs = []
    for schedule, seed in [("forward", 0), ("reverse", 0), ("shuffle", 1), ("shuffle", 2), ("shuffle", 1)]:
        seen = np.full(5 * 40, -1, dtype=np.int32)
        blocks = np.zeros(6, dtype=np.int32)
        f((5,), (40,), (seen, blocks), schedule=schedule, block_order=schedule, seed=seed)
        seen = seen.reshape(5, 40)
        for row in seen:
            np.testing.assert_array_equal(np.sort(row), np.arange(40))  # every thread once
        np.testing.assert_array_equal(np.sort(blocks[:5]), np.arange(5))
        runs.append((seen, blocks[:5]))
    forward, reverse, one, two, one_again = runs
    np.testing.assert_array_equal(forward[0], np.tile(np.arange(40), (5, 1)))
    np.testing.assert_array_equal(forward[1], np.arange(5))
    np.testing.assert_array_equal(reverse[0], np.tile(np.arange(40)[::-1], (5, 1)))
    np.testing.assert_array_equal(reverse[1], np.arange(5)[::-1])
    assert not np.array_equal(one[0], two[0]) and not np.array_equal(one[1], two[1])
    assert not np.array_equal(one[0][0], one[0][1])  # re-drawn for every block
    np.testing.assert_array_equal(one[0], one_again[0])  # seeded: reproducible
    np.testing.assert_array_equal(one[1], one_again[1])


def _shuffle_reference(v, width):
    """CUDA's shuffles (Programming Guide, warp shuffle functions) on each warp of v."""
    out = np.empty((v.shape[0], 4), dtype=v.dtype)
    for t in range(v.shape[0]):
        lane, base = t % 32, t - t % 32
        group = lane - lane % width
        src_idx = group + ((t * 7 + 3) % 32) % width
        src_up = lane - 3 if lane % width >= 3 else lane
        src_down = lane + 5 if lane % width + 5 < width else lane
        src_xor = lane ^ 6 if (lane ^ 6) < group + width else lane
        out[t] = [v[base + s] for s in (src_idx, src_up, src_down, src_xor)]
    return out


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int64, np.uint64, np.float32, np.float64])
@pytest.mark.parametrize("width", [32, 16, 4])
def test_shuffles(tiny, dtype, width):
    code = {np.int32: "i32", np.uint32: "u32", np.int64: "i64", np.uint64: "u64", np.float32: "f32",
            np.float64: "f64"}[dtype]
    rng = np.random.default_rng(width)
    if np.dtype(dtype).kind == "f":
        v = rng.standard_normal(64).astype(dtype)
    else:
        info = np.iinfo(dtype)
        v = rng.integers(info.min, info.max, size=64, dtype=dtype, endpoint=True)
    out = np.zeros((64, 4), dtype=dtype)
    tiny.get_function(f"shuffles_{code}")((1,), (64,), (v, out, np.int32(width)), schedule="shuffle", seed=width)
    np.testing.assert_array_equal(out, _shuffle_reference(v, width))


def test_votes_and_bit_counts(tiny):
    pred = (np.random.default_rng(3).random(96) < 0.4).astype(np.int32)
    pred[64:] = 1  # a warp where all agree
    out = np.zeros((96, 8), dtype=np.uint32)
    tiny.get_function("votes")((1,), (96,), (pred, out))
    for w in range(3):
        bits = pred[32 * w: 32 * w + 32].astype(bool)
        ballot = int(sum(1 << i for i in range(32) if bits[i]))
        for lane in range(32):
            half = 0xFFFF0000 if lane & 16 else 0x0000FFFF
            o = out[32 * w + lane]
            assert o[0] == ballot and o[1] == int(bits.any()) and o[2] == int(bits.all())
            assert o[3] == ballot & half
            assert o[4] == bin(ballot).count("1")
            assert o[5] == ((ballot & -ballot).bit_length() if ballot else 0)
            assert o[6] == 32 - ballot.bit_length()
            assert o[7] == bin(ballot).count("1") + bin(ballot & half).count("1")


def test_atomics(tiny):
    n = 3 * 70
    t = np.arange(n, dtype=np.int64)
    i = np.array([0, 1 << 30, -(1 << 30), -1, 0], dtype=np.int32)
    u = np.array([0, 0xFFFFFFFF, 0, 0xFFFFFFFF, 0], dtype=np.uint32)
    ull = np.array([0, 0], dtype=np.uint64)
    ll = np.array([0, 0], dtype=np.int64)
    f = np.array([1.0], dtype=np.float32)
    d = np.array([0.0])
    tiny.get_function("atomics")((3,), (70,), (i, u, ull, ll, f, d), schedule="shuffle", block_order="shuffle")
    assert i[0] == t.sum() and i[1] == -100 and i[2] == n - 1 and 0 <= i[3] < n and i[4] == n
    assert u[0] == t.sum() and u[1] == (t ^ 0x55).min()
    assert u[2] == 0xFFFFFFFF and u[3] == 0xFFFFFFFF & ~((1 << 29) - 1)
    assert u[4] == np.bitwise_xor.reduce((t * 2654435761) % 2**32)
    assert ull[0] == np.uint64(t.sum()) << np.uint64(33)
    assert ull[1] == max((x * 0x9E3779B97F4A7C15) % 2**64 for x in range(n))
    assert ll[0] == -(n - 1) << 40 and ll[1] == (n - 1) << 40
    assert f[0] == 1.0 + 0.5 * n and d[0] == 0.25 * t.sum()


def _error(tiny, name, grid, block, args, **kw):
    with pytest.raises(EmulationError) as info:
        tiny.get_function(name)(grid, block, args, **kw)
    return str(info.value)


@pytest.mark.parametrize("schedule", ["forward", "reverse", "shuffle"])
def test_a_barrier_that_only_some_threads_reach_is_reported(tiny, schedule):
    message = _error(tiny, "partial_barrier", (2,), (64,), (np.zeros(64, dtype=np.int32), np.int32(40)),
                     schedule=schedule)
    assert message.startswith("partial_barrier: block (0, 0, 0): ")
    assert re.search(r"thread\(s\) 0-39 wait at __syncthreads\(\) \(.*:\d+\)", message), message
    assert "thread(s) 40-63 exited" in message
    tiny.get_function("partial_barrier")((2,), (64,), (np.zeros(64, dtype=np.int32), np.int32(64)))  # all: fine


def test_threads_at_different_barriers_are_reported(tiny):
    message = _error(tiny, "split_barrier", (1,), (8,), (np.zeros(8, dtype=np.int32),))
    assert "different __syncthreads()" in message
    sites = set(re.findall(r"__syncthreads\(\) \((.*?:\d+)\)", message))
    assert len(sites) == 2, message


@pytest.mark.parametrize("schedule", ["forward", "reverse", "shuffle"])
def test_wrong_shuffle_masks_are_reported(tiny, schedule):
    out = np.zeros(32, dtype=np.int32)
    tiny.get_function("shfl_mask")((1,), (32,), (out, np.uint32(0xFFFFFFFF)), schedule=schedule)
    np.testing.assert_array_equal(out, np.minimum(np.arange(32) + 1, 31))
    message = _error(tiny, "shfl_mask", (1,), (32,), (out, np.uint32(0x0000FFFF)), schedule=schedule)
    assert "__shfl_down_sync(mask 0x0000ffff)" in message and "which the mask does not name" in message
    message = _error(tiny, "shfl_mask", (1,), (20,), (out, np.uint32(0xFFFFFFFF)), schedule=schedule)
    assert "names lane 20, which a block of 20 threads does not have" in message
    message = _error(tiny, "shfl_after_exit", (1,), (32,), (out,), schedule=schedule)
    assert "exited" in message and "__shfl_down_sync" in message
    message = _error(tiny, "shfl_mixed", (1,), (32,), (out,), schedule=schedule)
    assert "different warp intrinsics" in message


def test_a_deadlock_is_reported(tiny):
    message = _error(tiny, "deadlock", (1,), (32,), (np.zeros(32, dtype=np.int32),))
    assert "deadlock" in message and "thread(s) 0 wait at __syncthreads()" in message
    assert "thread(s) 1-31 wait at __shfl_down_sync(mask 0xffffffff)" in message


def test_writes_outside_an_array_are_reported(tiny):
    out = np.zeros(10, dtype=np.int32)
    tiny.get_function("overrun")((1,), (1,), (out, np.int64(9)))
    assert out[9] == 1
    message = _error(tiny, "overrun", (1,), (1,), (out, np.int64(10)))
    assert "wrote outside array argument 0 (int32_t*): within 4 byte(s) after it" in message
    message = _error(tiny, "overrun", (1,), (1,), (out, np.int64(-3)))
    assert "within 12 byte(s) before it" in message


def test_faults_in_a_kernel_are_reported(tiny):
    """A wild pointer or a stack overflow ends the launch with an error, not the process."""
    out = np.zeros(4, dtype=np.int32)
    message = _error(tiny, "overrun", (1,), (1,), (out, np.int64(1) << 40))
    assert message.startswith("overrun: block (0, 0, 0): thread 0: illegal memory access at 0x")
    message = _error(tiny, "big_frame", (1,), (4,), (out, np.int64(1000)))
    assert message.startswith("big_frame: block (0, 0, 0): thread 0: stack overflow: a fiber has 64 KiB of stack")
    tiny.get_function("overrun")((1,), (1,), (out, np.int64(3)))  # the emulator goes on after a fault
    assert out[3] == 1


def test_launch_configuration_is_checked(tiny):
    out = np.zeros(2048, dtype=np.int32)
    tiny.get_function("bounded")((1,), (64,), (out,))
    assert "at most 64 threads per block by __launch_bounds__" in _error(tiny, "bounded", (1,), (65,), (out,))
    assert "at most 1024 threads" in _error(tiny, "overrun", (1,), (1025,), (out, np.int64(0)))
    assert "below 1" in _error(tiny, "overrun", (0,), (1,), (out, np.int64(0)))


def test_argument_count_and_types_are_checked(tiny):
    f = tiny.get_function("rotate")  # (const int32_t* in, int32_t* out, int barrier)
    x, out = np.zeros(32, dtype=np.int32), np.zeros(32, dtype=np.int32)
    f((1,), (32,), (x, out, np.int32(1)))
    cases = [((x, out), "rotate takes 3 arguments (const int32_t*, int32_t*, int32_t); got 2"),
             ((x, out, np.int32(1), np.int32(1)), "takes 3 arguments"),
             ((x.astype(np.int64), out, np.int32(1)), "argument 0 (const int32_t*) must be an array of int32 or "
                                                      "np.uint64(0) (null); got an array of int64, shape (32,)"),
             ((x, out, 1), "argument 2 (int32_t) must be np.int32(...); got int 1"),
             ((x, out, np.int64(1)), "argument 2 (int32_t) must be np.int32(...); got np.int64"),
             ((x, np.uint64(5), np.int32(1)), "argument 1 (int32_t*) must be"),
             ((x, 0, np.int32(1)), "argument 1 (int32_t*) must be"),
             ((x, np.zeros((32, 2), dtype=np.int32)[:, 0], np.int32(1)), "C-contiguous"),
             ((x, np.zeros((4, 8), dtype=np.int32).T, np.int32(1)), "C-contiguous")]
    readonly = out.copy()
    readonly.flags.writeable = False
    cases.append(((x, readonly, np.int32(1)), "argument 1 (int32_t*) must be a writable array of int32"))
    for args, expected in cases:
        with pytest.raises(TypeError) as info:
            f((1,), (32,), args)
        assert expected in str(info.value)
    with pytest.raises(AttributeError, match="no kernel 'nope'"):
        tiny.get_function("nope")


# ---- the real kernels against their NumPy restatement (tests/gpu_model.py) ----

KERNELS = _gpu.kernels_dir()
SCHEDULES = [("forward", "forward", 0), ("reverse", "reverse", 0), ("shuffle", "shuffle", 11)]
NULL = np.uint64(0)  # gpureco's null pointer argument


SPAN = 4096  # items of one rank_tile block here (-DRANK_SPAN): a 5,000-item tile takes two blocks per user


def module(file, code=None, include=KERNELS, span=SPAN, shared_tests=_gpu.FUSED_SHARED_TESTS, arch=None):
    """kernels/<file>.cu (or `code`) under the emulator, with gpureco's compile options but `include`, `span` and
    `shared_tests`; arch (800, 890, ...): with the settings of that GPU (GR_EMULATED_ARCH), else an H100's."""
    options = tuple(f"-I{include}" if o.startswith("-I") else f"-DRANK_SPAN={span}" if o.startswith("-DRANK_SPAN=")
                    else f"-DFUSED_SHARED_TESTS={shared_tests}" if o.startswith("-DFUSED_SHARED_TESTS=")
                    else o for o in _gpu.compile_options())  # as gpureco
    assert f"-DRANK_SPAN={span}" in options and f"-DFUSED_SHARED_TESTS={shared_tests}" in options
    options += (f"-DGR_EMULATED_ARCH={arch}",) if arch else ()
    return RawModule(code=code if code is not None else (KERNELS / f"{file}.cu").read_text(), options=options)


@pytest.fixture(scope="module")
def real():
    files = ("rank_tile", "exact_scores", "topk_tile", "magnitudes", "fused_rank")
    with ThreadPoolExecutor(len(files)) as pool:
        return dict(zip(files, pool.map(module, files)))


class Problem:
    """Users, items, factors (or given scores), training and test items, as gpureco hands them
    to the kernels (gpureco/engine/_gpu.py: rank_users, top_k, _pair_scores)."""

    def __init__(self, seed, dtype=np.float64, n_users=7, n_items=9000, n_factors=3, integer=False, bias=True,
                 mode="factors", noise=False, big_user=False, train_density=0.1, test_density=0.02,
                 empty_users=False):
        rng = np.random.default_rng(seed)
        self.dtype, self.mode, self.seed, self.noise = np.dtype(dtype), mode, 1000 + seed, noise
        self.n_items = n_items
        if integer:
            A = rng.integers(-2, 3, size=(n_users, n_factors)).astype(dtype)
            B = rng.integers(-2, 3, size=(n_items, n_factors)).astype(dtype)
        else:
            A = rng.standard_normal((n_users, n_factors)).astype(dtype)
            B = rng.standard_normal((n_items, n_factors)).astype(dtype)
        A[1, 0] = np.nan  # every score NaN
        A[2] = 0  # every score equal (the bias alone)
        self.A, self.B = A, B
        self.bias = (rng.integers(-2, 3, size=n_items).astype(np.float64) if integer else rng.standard_normal(n_items)) \
            if bias else None
        if mode == "given":  # evaluate(scores): float64 scores, ties and a NaN
            self.G = np.round(rng.standard_normal((n_users, n_items)), 1)
            self.G[3, 5] = np.nan
        u = rng.random((n_users, n_items))
        train = u < train_density
        test = (u >= train_density) & (u < train_density + test_density)
        if big_user:  # more test items than rank_tile keeps in shared memory (1024)
            test[n_users - 1] = (u[n_users - 1] >= train_density) & (u[n_users - 1] < train_density + 0.2)
            assert test[n_users - 1].sum() > 1024
        if empty_users:  # user 4 without test items; user 5's every item a training item (an empty pool)
            test[4] = test[5] = False
            train[5] = True
        self.train_indptr = np.concatenate([[0], np.cumsum(train.sum(axis=1))]).astype(np.int64)
        self.train_indices = np.flatnonzero(train.ravel()) % n_items
        self.train_indices = self.train_indices.astype(np.int32)
        self.test = test

    def with_a_nan_among_finite_scores(self):
        """B[j, 0] = inf for a pool item j of user 2 (A[2] = 0): j's score is NaN for the users whose
        first factor is 0 (user 2, whose other scores are finite), +-inf or NaN for the others: a
        NaN among finite pool scores, which the pool's non-finite flag alone shows (its minimum and
        maximum pass over a NaN)."""
        pool = ~(self.test[2] | np.isin(np.arange(self.n_items), self.train_indices[
            self.train_indptr[2]:self.train_indptr[3]]))
        self.B[np.flatnonzero(pool)[0], 0] = np.inf
        return self

    def with_a_nan_at_each_round_position(self):
        """Users 2, 3 and 4 each with one NaN pool score (0 x inf), as item q = 1, 2 and 3 of a round of
        the first rank_tile block (items 32 q + lane, lanes 5, 9 and 13: each the only non-finite score
        of its lane's round); the three items are training items of every other user, whose scores
        there are +-inf (a round with a non-finite training score and finite pool items) or NaN (user
        1's every score). For the rounds' finiteness test in rank_tile."""
        assert self.mode == "factors" and self.A.shape[1] == 3
        items = [32 * q + lane for q, lane in ((1, 5), (2, 9), (3, 13))]
        train = [set(self.train_indices[self.train_indptr[u]:self.train_indptr[u + 1]]) for u in range(self.A.shape[0])]
        for f, (u, j) in enumerate(zip((2, 3, 4), items)):
            self.A[u] = 1.0
            self.A[u, f] = 0.0
            self.B[j] = 0.0
            self.B[j, f] = np.inf
            self.test[:, j] = False
            for v in range(self.A.shape[0]):
                (train[v].discard if v == u else train[v].add)(j)
        rows = [np.array(sorted(t), dtype=np.int32) for t in train]
        self.train_indptr = np.concatenate([[0], np.cumsum([r.size for r in rows])]).astype(np.int64)
        self.train_indices = np.concatenate(rows)
        return self

    def launch_args(self):
        """A, B, n_factors, bias as the kernels take them."""
        if self.mode == "given":
            return NULL, NULL, np.int64(0), NULL
        bias = self.bias if self.bias is not None else NULL
        if self.mode == "biases":  # a non-personalised model: the biases are the scores
            return NULL, NULL, np.int64(0), bias
        return self.A, self.B, np.int64(self.A.shape[1]), bias

    def defined(self, users, items):
        if self.mode == "given":
            return self.G[users, items]
        A, B, n_factors, bias = self.launch_args()
        return gpu_model._defined(users, items, A, B, n_factors, bias)

    def tolerance(self, batch, tf32=False):
        if self.mode != "factors":
            return np.zeros(batch.shape[0])
        item_abs_max, bias_abs_max = magnitudes(self.B, self.bias if self.bias is not None else np.zeros(0))
        return score_tolerance(self.A[batch], item_abs_max, bias_abs_max, self.dtype, tf32)

    def fused_bound(self, batch, tf32=False):
        """(tol, item_norm, item_terms): the bound of the fused launch, as FactorScores makes it
        (the largest item norm in the per-user bound, each item's in the per-item terms)."""
        item_abs_max, bias_abs_max = magnitudes(self.B, self.bias if self.bias is not None else np.zeros(0))
        item_norm = np.empty(self.n_items)
        gpu_model.row_norms(None, None, (self.B, np.int64(self.n_items), np.int64(self.B.shape[1]), item_norm))
        tol, terms = score_tolerance(self.A[batch], item_abs_max, bias_abs_max, self.dtype, "fused" if tf32 else False,
                                     max_row_norm(self.B), item_terms=True)
        return tol, item_norm, terms

    def tile(self, batch, begin, n):
        """(scores, leading dimension, given) of items begin .. begin + n - 1, as _gpu.py's scorers."""
        if self.mode == "given":
            return self.G[batch][:, begin:], np.int64(self.n_items), np.int32(1)  # rows of a matrix
        if self.mode == "biases":
            return self.bias[begin:], np.int64(0), np.int32(1)
        return np.matmul(self.A[batch], self.B[begin: begin + n].T), np.int64(n), np.int32(0)

    def sorted_tests(self, batch):
        """(users, items, scores, keys) of the batch's test items, sorted best-first per user, and
        tests_begin (where each batch row's items begin)."""
        local, items = np.nonzero(self.test[batch])
        users = batch[local]
        scores, keys = self.defined(users, items), tie_keys(users, items.astype(np.int64), self.seed, self.noise)
        order = np.lexsort([keys, ~order_key(np, scores), local.astype(np.uint64)])
        tests_begin = np.concatenate([[0], np.cumsum(np.bincount(local, minlength=batch.shape[0]))]).astype(np.int64)
        return (users[order], items[order], scores[order], keys[order]), tests_begin

    def tests(self, batch):
        """(tests_begin, scores, keys) of the batch's test items, sorted best-first per user, and
        the rank kernels' outputs (counts, pool minimum, maximum, non-finite flag)."""
        (_, items, scores, keys), tests_begin = self.sorted_tests(batch)
        nb, m = batch.shape[0], items.shape[0]
        outputs = (np.zeros(m, dtype=np.int32), np.full(nb, np.iinfo(np.uint64).max, dtype=np.uint64),
                   np.zeros(nb, dtype=np.uint64), np.zeros(nb, dtype=np.int32))
        return (tests_begin, scores, keys), outputs

    def finish_launch(self, batch, counts, pool_min, pool_max, nonfinite, tie_mode=0, with_scores=False):
        """The finish_batch launch after a batch's rank kernels (their outputs given), as
        _gpu.rank_users makes it, and its outputs: the batch's pool statistics (recounted where
        unsure), and the evaluation's ranks, test scores and per-user statistics."""
        (users, items, scores, _), tests_begin = self.sorted_tests(batch)
        every_user, every_item = np.nonzero(self.test)  # the entries of the evaluation's test CSR
        entry = np.searchsorted(every_user * self.n_items + every_item, users * self.n_items + items)
        n_users, nnz = self.test.shape[0], every_user.shape[0]
        outputs = (pool_min.copy(), pool_max.copy(), nonfinite.copy(), np.full(nnz, -7, dtype=np.int64),
                   np.full(nnz, -7.0) if with_scores else NULL, np.full(n_users, -7.0), np.full(n_users, -7.0),
                   np.full(n_users, 7, dtype=np.uint8))
        args = (batch, tests_begin, counts, scores, entry.astype(np.int64), self.tolerance(batch),
                np.int32(self.mode != "factors"), np.int32(tie_mode), np.int64(self.n_items), self.train_indptr,
                self.train_indices, *self.launch_args(), *outputs)
        return [((batch.shape[0],), (256,), args)], tuple(o for o in outputs if isinstance(o, np.ndarray))

    def rank_launches(self, batch, tile, span=SPAN):
        """The rank_tile launches of one batch: [(grid, block, args)], sharing their outputs."""
        (tests_begin, scores, keys), outputs = self.tests(batch)
        nb = batch.shape[0]
        launches = []
        for begin in range(0, self.n_items, tile):
            n = min(tile, self.n_items - begin)
            S, ld, given = self.tile(batch, begin, n)
            launches.append(((nb, (n + span - 1) // span), (256,), (
                S, ld, given, np.int64(begin), np.int64(n), batch, self.train_indptr, self.train_indices, tests_begin,
                scores, keys, *outputs, self.tolerance(batch), *self.launch_args(), np.uint64(self.seed),
                np.int32(self.noise))))
        return launches, outputs

    def fused_launches(self, batch, span, tf32=False):
        """The fused_rank launch of one batch (float32 factors), as _gpu.rank_users makes it
        (fused_rank_tf32's bound with `tf32`)."""
        (tests_begin, scores, keys), outputs = self.tests(batch)
        nb = batch.shape[0]
        _, B, n_factors, bias = self.launch_args()
        grid = (-(-nb // _gpu.FUSED_USERS), -(-self.n_items // span))
        return [(grid, (256,), (np.ascontiguousarray(self.A[batch]), B, n_factors, bias, np.int64(self.n_items),
                                np.int64(span), np.int64(nb), batch, self.train_indptr, self.train_indices, tests_begin,
                                scores, keys, *outputs, *self.fused_bound(batch, tf32),
                                np.uint64(self.seed), np.int32(self.noise)),
                 {"shared_mem": _gpu.FUSED_STAGE_BYTES})], outputs

    def fused_topk_launches(self, batch, span, threshold, overflow=None):
        """The fused_topk launch of one batch (float32 factors), as _gpu.top_k makes it."""
        nb = batch.shape[0]
        outputs = (np.full(nb * 8192, np.nan), np.full(nb * 8192, -1, dtype=np.int32), np.zeros(nb, dtype=np.int32),
                   np.zeros(nb, dtype=np.int32) if overflow is None else overflow.astype(np.int32))
        _, B, n_factors, bias = self.launch_args()
        grid = (-(-nb // _gpu.FUSED_USERS), -(-self.n_items // span))
        return [(grid, (256,), (np.ascontiguousarray(self.A[batch]), B, n_factors, bias, np.int64(self.n_items),
                                np.int64(span), np.int64(nb), batch, self.train_indptr, self.train_indices,
                                threshold.astype(np.float32), *outputs))], outputs

    def topk_finish_launch(self, batch, tile, k):
        """The topk_finish launch after topk_tile's tiles of the batch (run on the model), and the
        buffers it starts from."""
        launches, outputs = self.topk_launches(batch, tile, k)
        tiles = run(gpu_model.topk_tile, launches, outputs)
        return [((batch.shape[0],), (1024,), (np.int64(k), self.tolerance(batch), *tiles))], tiles

    def topk_launches(self, batch, tile, k):
        nb = batch.shape[0]
        outputs = (np.full(nb * 8192, np.nan), np.full(nb * 8192, -1, dtype=np.int32), np.zeros(nb, dtype=np.int32),
                   np.full(nb, -np.inf), np.zeros(nb, dtype=np.int32))
        launches = []
        for begin in range(0, self.n_items, tile):
            n = min(tile, self.n_items - begin)
            S, ld, given = self.tile(batch, begin, n)
            launches.append(((nb,), (1024,), (S, ld, given, np.int64(begin), np.int64(n), batch, self.train_indptr,
                                              self.train_indices, self.launch_args()[3], self.tolerance(batch),
                                              np.int64(k), *outputs)))
        return launches, outputs


def fresh(launches, outputs):
    """The launches again with new copies of their output arrays (each run starts from the same state). A launch is
    (grid, block, args), or (grid, block, args, options) with the launch's own options (shared_mem)."""
    copies = {id(a): a.copy() for a in outputs}
    return [(g, b, tuple(copies.get(id(x), x) for x in args), *own) for g, b, args, *own in launches], \
        tuple(copies[id(a)] for a in outputs)


def _as_the_model_reads(x):
    """gpu_model indexes a score tile as flat memory from its first element (S.reshape(-1)), so a
    strided view (given scores: rows[:, begin:], read by the kernels through ld) is handed to it
    as that memory."""
    if isinstance(x, np.ndarray) and not x.flags.c_contiguous:
        return x.base.reshape(-1)[(x.ctypes.data - x.base.ctypes.data) // x.itemsize:]
    return x


def run(kernel, launches, outputs, **options):
    launches, outputs = fresh(launches, outputs)
    for grid, block, args, *own in launches:
        own = own[0] if own else {}
        if options:
            kernel(grid, block, args, **own, **options)
        else:  # the model
            kernel(grid, block, tuple(map(_as_the_model_reads, args)), **own)
    return outputs


def topk_result(outputs):
    """Per user: overflow, and unless overflowed count, tau and the candidates as a sorted set."""
    scores, items, count, tau, overflow = outputs
    result = []
    for b in range(count.shape[0]):
        if overflow[b]:
            result.append(("overflow",))
            continue
        s, i = scores[b * 8192: b * 8192 + count[b]], items[b * 8192: b * 8192 + count[b]]
        order = np.lexsort([s, i])
        result.append((int(count[b]), float(tau[b]), i[order].tolist(), s[order].tolist()))
    return result


def fused_topk_result(outputs):
    """Per user: overflow, count, and where the buffer held them all the candidates as a sorted set."""
    scores, items, count, overflow = outputs
    result = []
    for b in range(count.shape[0]):
        held = min(int(count[b]), 8192)
        s, i = scores[b * 8192: b * 8192 + held], items[b * 8192: b * 8192 + held]
        order = np.lexsort([s, i])
        result.append((int(overflow[b]), int(count[b])) + ((i[order].tolist(), s[order].tolist())
                                                          if count[b] <= 8192 else ()))
    return result


def pool(keys_min, keys_max, nonfinite):
    """The pool statistics as _gpu.rank_users reads them: (bad, min, max), min and max where not bad.
    (For a pool without a non-NaN score the model leaves keys that decode to NaN where the kernels
    fold +inf and -inf: both are bad, which is all gpureco reads then.)"""
    mn, mx = gpu_model.from_order_key(keys_min), gpu_model.from_order_key(keys_max)
    bad = (nonfinite != 0) | np.isinf(mn) | np.isinf(mx) | np.isnan(mn) | np.isnan(mx)
    return bad, np.where(bad, 0.0, mn), np.where(bad, 0.0, mx)


def assert_same(got, want, what):
    if got[0] is not None:
        np.testing.assert_array_equal(got[0], want[0], err_msg=f"{what}: counts")
    for name, g, w in zip(("bad", "pool_min", "pool_max"), pool(*got[1:]), pool(*want[1:])):
        np.testing.assert_array_equal(g, w, err_msg=f"{what}: {name}")


RANK_CASES = {
    "f64": dict(seed=1),
    "f32": dict(seed=2, dtype=np.float32),
    "f32-ties-noise": dict(seed=3, dtype=np.float32, integer=True, noise=True),
    "f64-ties-no-bias": dict(seed=4, integer=True, bias=False),
    "f64-big-user": dict(seed=5, big_user=True, integer=True),
    "f32-big-user-noise": dict(seed=6, dtype=np.float32, big_user=True, noise=True),
    "given": dict(seed=7, mode="given"),
    "biases": dict(seed=8, mode="biases", integer=True),
}


PLACE = r"""
#include "bands.cuh"
// gr_place for every (case k, score x): case k's bands are lo/hi[k * width ..], m[k] of them
extern "C" __global__ void place(const float* lo, const float* hi, const int* m, int width, int n_cases,
                                 const float* s, int n_s, int* out) {
    for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < n_cases * n_s; idx += gridDim.x * blockDim.x) {
        const int k = idx / n_s;
        const SharedBands<float> bands = {lo + k * width, hi + k * width};
        const float worst = m[k] > 0 ? lo[k * width + m[k] - 1] : (float)GR_INF;
        out[idx] = gr_place(bands, m[k], gr_search_top(m[k]), worst, s[idx % n_s]);
    }
}
"""


PLACE_MUTANTS = {  # (old, new) in bands.cuh: searches that stop short, whose ranks are still right
    "the search a step short": ("for (int step = top; step > 0;", "for (int step = top >> 1; step > 0;"),
    "the search off by one": ("if (bands.low(k - 1) > s) c = k;", "if (bands.low(k) > s) c = k;"),
    "no first step": ("return m > 1 ? 1 << (31 - __clz(m - 1)) : 0;", "return m > 2 ? 1 << (30 - __clz(m - 1)) : 0;"),
}


@pytest.mark.parametrize("mutant", [None, *PLACE_MUTANTS])
def test_gr_place_equals_its_definition(mutant, tmp_path):
    """bands.cuh's gr_place, the search of every rank kernel, against its definition on bands of
    0 to 70 test items (ties among them, overlapping bands): the place c = #{i : low(i) > s}
    wherever s lies above band c, GR_DEFER inside a band or for a non-finite s, GR_NOWHERE
    below the worst band. A search that stops short would still give the right ranks (its
    items go to the defined score), so only this test sees it."""
    rng = np.random.default_rng(7)
    width, sizes = 72, list(range(0, 20)) + [31, 32, 33, 63, 64, 65, 70]
    lo = np.full((len(sizes), width), np.nan, dtype=np.float32)
    hi = np.full((len(sizes), width), np.nan, dtype=np.float32)
    for k, m in enumerate(sizes):
        t = -np.sort(-rng.integers(-40, 40, size=m).astype(np.float32))  # ties: equal bands
        tol = np.float32(0.3 if k % 2 else 2.5)  # wide bands overlap their neighbours
        lo[k, :m], hi[k, :m] = t - tol, t + tol
    s = np.concatenate([np.arange(-45, 45, 0.25), [np.inf, -np.inf, np.nan, 1e30, -1e30]]).astype(np.float32)
    m = np.array(sizes, dtype=np.int32)
    out = np.zeros(len(sizes) * s.shape[0], dtype=np.int32)
    include = mutated_kernels(tmp_path, "bands.cuh", *PLACE_MUTANTS[mutant]) if mutant else KERNELS  # must fail
    kernel = module("place", PLACE, include=include).get_function("place")
    kernel((4,), (128,), (lo.ravel(), hi.ravel(), m, np.int32(width), np.int32(len(sizes)), s, np.int32(s.shape[0]),
                          out))
    want = []
    for k, n in enumerate(sizes):
        low, high = lo[k, :n], hi[k, :n]
        for x in s:
            if not np.isfinite(x):
                want.append(-2 if n else -1)
                continue
            c = int(np.sum(low > x))
            want.append(-1 if c >= n else c if x > high[c] else -2)
    if mutant:
        assert not np.array_equal(out, np.array(want)), f"{mutant}: not caught"
    else:
        np.testing.assert_array_equal(out.reshape(len(sizes), -1), np.array(want).reshape(len(sizes), -1))


WARP_EXTREMES = r"""
#include "common.cuh"
// Thread t's pair (lo[t], hi[t]) through gr_warp_extremes: out[2 t], out[2 t + 1].
extern "C" __global__ void warp_extremes(const uint32_t* lo, const uint32_t* hi, uint32_t* out) {
    uint32_t a = lo[threadIdx.x], b = hi[threadIdx.x];
    gr_warp_extremes(a, b);
    out[2 * threadIdx.x] = a;
    out[2 * threadIdx.x + 1] = b;
}
"""


WARP_EXTREMES_MUTANTS = {  # (old, new) in common.cuh, and whether the path it mutates is the shuffles'
    "REDUX: the minimum a maximum": ("lo = __reduce_min_sync(", "lo = __reduce_max_sync(", False),
    "REDUX: the maximum a minimum": ("hi = __reduce_max_sync(", "hi = __reduce_min_sync(", False),
    "shuffles: the minimum over half the lanes": ("lo = min(lo, __shfl_xor_sync(0xFFFFFFFFu, lo, off));",
                                                  "lo = min(lo, __shfl_xor_sync(0xFFFFFFFFu, lo, off & 15));", True),
    "shuffles: the maximum over half the lanes": ("hi = max(hi, __shfl_xor_sync(0xFFFFFFFFu, hi, off));",
                                                  "hi = max(hi, __shfl_xor_sync(0xFFFFFFFFu, hi, off & 15));", True),
}


@pytest.mark.parametrize("shuffles, mutant", [(False, None), (True, None)] +
                         [(WARP_EXTREMES_MUTANTS[m][2], m) for m in WARP_EXTREMES_MUTANTS])
def test_warp_extremes(shuffles, mutant, tmp_path):
    """common.cuh's gr_warp_extremes as sm_80 on runs it (REDUX, the emulation's default) and as older GPUs do
    (shuffles: a T4's settings, GR_EMULATED_ARCH=750): in every lane, its warp's minimum of lo and maximum of hi,
    unsigned (values over 2^31 too), 3 warps; a mutant of either path gives other numbers."""
    rng = np.random.default_rng(5)
    lo, hi = (rng.integers(0, 1 << 32, size=96, dtype=np.uint64).astype(np.uint32) for _ in range(2))
    want = np.stack([np.repeat(lo.reshape(3, 32).min(axis=1), 32), np.repeat(hi.reshape(3, 32).max(axis=1), 32)], 1)
    include = mutated_kernels(tmp_path, "common.cuh", *WARP_EXTREMES_MUTANTS[mutant][:2]) if mutant else KERNELS
    out = np.zeros((96, 2), dtype=np.uint32)
    module(None, WARP_EXTREMES, include=include, arch=750 if shuffles else None).get_function("warp_extremes")(
        (1,), (96,), (lo, hi, out), schedule="shuffle", seed=5)
    if mutant:
        assert not np.array_equal(out, want), f"{mutant}: not caught"
    else:
        np.testing.assert_array_equal(out, want)


CELLS = r"""
#include "bands.cuh"
// Block k, case k (its m[k] bands at lo/hi[k * width ..]): a table of n_cells cells built as
// the rank kernels build them, then for each of its scores s[k * n_s ..]: the place as the
// rank kernels find it (gr_cell_round, a round of one pool item: its cell's entry, then gr_place where
// that is above GR_CELL_NOWHERE or the score is not finite), gr_place, and a finite score's cell and
// its entry (else -1, -1); then, from
// the same cells with steps (rank_tile's table: gr_build_cells), the place as rank_tile finds it
// (a finite score: its cell's entry, then gr_step or gr_place where it is above GR_CELL_NOWHERE; a
// score not finite: its lane's round searched, gr_step or gr_place by its cell's entry) and the
// score's entry and step in that table (entry | step << 8, for every score: its cell's), and the same
// computed at use (gr_cell_entry with steps).
template <typename T>
__device__ void cells(const T* lo, const T* hi, const int* m, int width, const T* s, int n_s, int n_cells, int* out) {
    __shared__ uint8_t entry[2048];
    __shared__ uint8_t wide[2048], wide_steps[2048];
    __shared__ int16_t edge_cells[2 * GR_CELL_TESTS];
    const int k = blockIdx.x, n = m[k];
    const SharedBands<T> bands = {lo + k * width, hi + k * width};
    const T worst = n > 0 ? bands.low(n - 1) : (T)GR_INF;
    const T scale = gr_cells_scale<T>(bands, n, n_cells);
    const Cells<T> c = gr_cells(entry, scale, n_cells);
    const Cells<T> w = gr_cells(wide, scale, n_cells);
    for (int i = threadIdx.x; i < n_cells; i += blockDim.x) entry[i] = gr_cell_entry(bands, n, worst, scale, c.last, i);
    gr_build_cells(wide, wide_steps, edge_cells, bands, n, worst, scale, n_cells);
    __syncthreads();
    for (int i = threadIdx.x; i < n_s; i += blockDim.x) {
        const T x = s[k * n_s + i];
        int* o = out + 7 * (k * n_s + i);
        const bool read = isfinite(x);
        const T one[1] = {x};
        T mn = (T)GR_INF, mx = -(T)GR_INF;
        int e = -1;  // (count is not called where the score is not finite: the round searches)
        const uint32_t search = gr_cell_round(one, 1u, c, worst, mn, mx, [&](int f) { e = f; });
        o[0] = search ? gr_place(bands, n, gr_search_top(n), worst, x) : e == GR_CELL_NOWHERE ? GR_NOWHERE : e;
        o[1] = gr_place(bands, n, gr_search_top(n), worst, x);
        o[2] = read ? gr_cell(x, worst, c.scale, c.last) : -1;
        o[3] = read ? entry[o[2]] : -1;
        const int g = gr_cell(x, worst, w.scale, w.last), f = w.entry[g], step = wide_steps[g];
        o[4] = read && f <= GR_CELL_NOWHERE ? (f == GR_CELL_NOWHERE ? GR_NOWHERE : f)
               : step ? gr_step(bands, step - 1, x) : gr_place(bands, n, gr_search_top(n), worst, x);
        o[5] = f | step << 8;
        o[6] = gr_cell_entry(bands, n, worst, scale, c.last, gr_cell(x, worst, w.scale, w.last), true);  // at each use
    }
}
extern "C" __global__ void cells_f32(const float* lo, const float* hi, const int* m, int width, const float* s, int n_s,
                                     int n_cells, int* out) { cells(lo, hi, m, width, s, n_s, n_cells, out); }
extern "C" __global__ void cells_f64(const double* lo, const double* hi, const int* m, int width, const double* s,
                                     int n_s, int n_cells, int* out) { cells(lo, hi, m, width, s, n_s, n_cells, out); }
"""


CELLS_MUTANTS = {  # (old, new) in bands.cuh
    "a high edge's cell not seen": (" || (q < m && high_cell(q) == k)", ""),
    "a step's compare with the high edge": ("const int c = bands.low(p) > s ? p + 1 : p;",
                                            "const int c = bands.high(p) > s ? p + 1 : p;"),
    "a step that never passes its low edge": ("const int c = bands.low(p) > s ? p + 1 : p;", "const int c = p;"),
    "a step in a cell of two low edges": ("&& low_cell(p + 1) < k ?", "?"),
    "the high edges' cells read from the low edges'": ("return (int)edge_cells[GR_CELL_TESTS + i]; };",
                                                       "return (int)edge_cells[i]; };"),
    "a high edge's cell computed from its low edge": ("edge_cells[GR_CELL_TESTS + i] = (int16_t)gr_cell(bands.high(i),",
                                                      "edge_cells[GR_CELL_TESTS + i] = (int16_t)gr_cell(bands.low(i),"),
    "a step in the worst band's cell": ("steps && k < last && p < m - 1 &&", "steps && k < last && p < m &&"),
    "a step's place one above": ("return bands.high(c) < s ? c : GR_DEFER;", "return bands.high(c) < s ? c + 1 : GR_DEFER;"),
    "a step's high edge inside its band": ("return bands.high(c) < s ? c : GR_DEFER;", "return bands.high(c) <= s ? c : GR_DEFER;"),
    "the wrong low edge looked at": ("low_cell(p) == k", "low_cell(p ? p - 1 : 0) == k"),
    "the best band in the last cell": ("scale = (T)(n - 3) / width", "scale = (T)(n - 1) / width"),
    "the worst band's edge in cell 0": ("gr_fma(s - worst, scale, (T)1)", "gr_fma(s - worst, scale, (T)0)"),
    "cell 0 placed nowhere without a table": ("if (k == 0) return GR_CELL_NOWHERE;\n    if (!table) return GR_CELL_SEARCH;",
                                               "if (!table) return GR_CELL_SEARCH;\n    if (k == 0) return GR_CELL_NOWHERE;"),
}


def cells_cases(dtype, rng):
    """(name, low, high) cases: integer test scores with ties and overlapping bands, continuous
    ones, the table's limits (253 and 254 test items), and bands it must not serve (NaN,
    infinite, of no width, wider than the type)."""
    cases = []
    for m in [1, 2, 3, 5, 10, 17, 33, 64, 100, 253, 254]:
        for tol in (0.3, 2.5):
            t = -np.sort(-rng.integers(-40, 40, size=m)).astype(np.float64)
            cases.append((f"int{m}-{tol}", t - tol, t + tol))
        t = -np.sort(-rng.normal(size=m))
        cases.append((f"normal{m}", t - 1e-3, t + 1e-3))
    t = -np.sort(-rng.normal(size=12))
    big = 0.75 * np.finfo(dtype).max  # high(0) - low(m - 1) overflows
    cases += [("tiny", t * 1e-35 - 1e-37, t * 1e-35 + 1e-37),  # a scale near float32's largest: served
              ("normal-big", t * 1e30 - 1e27, t * 1e30 + 1e27),  # a scale near float32's smallest normal: served
              ("normal-narrow", 1000 + t * 1e-3 - 1e-6, 1000 + t * 1e-3 + 1e-6),  # cells a few floats wide: served
              # the worst band's low edge near 0, the bands far wider: the float below it rounds into cell 1
              ("normal-near-zero", (t - t[-1]) * 10 + 1e-20, (t - t[-1]) * 10 + 1e-20 + 1e-3),
              ("none", t[:0], t[:0]), ("no-width", t[:1], t[:1]), ("nan", np.r_[t[:5], np.nan, t[6:]], t),
              ("inf", t - 1e-3, np.r_[np.inf, t[1:]]), ("huge", np.r_[big, t[1:-1], -big], np.r_[big, t[1:-1], -big])]
    return [(name, lo.astype(dtype), hi.astype(dtype)) for name, lo, hi in cases]


def cells_scores(low, high, dtype, n_s, n_cells):
    """Scores where a table of n_cells can go wrong: every edge and its neighbours, the cells'
    own edges (as float64 arithmetic puts them) and their neighbours, a grid, the extremes."""
    with np.errstate(over="ignore"):  # the huge case: high(0) - low(m - 1) overflows, as it should
        return _cells_scores(low, high, dtype, n_s, n_cells)


def _cells_scores(low, high, dtype, n_s, n_cells):
    edges = np.r_[low, high][np.isfinite(np.r_[low, high])].astype(dtype)
    x = [edges, np.nextafter(edges, dtype(np.inf)), np.nextafter(edges, dtype(-np.inf))]
    if low.size and np.isfinite(high[0] - low[-1]) and high[0] > low[-1]:
        base, width = np.float64(low[-1]), np.float64(high[0]) - np.float64(low[-1])
        cuts = (base + width / (n_cells - 2) * np.arange(-1, n_cells + 3)).astype(dtype)
        x += [cuts, np.nextafter(cuts, dtype(np.inf)), np.nextafter(cuts, dtype(-np.inf)),
              np.linspace(base - 1, base + width + 1, 400).astype(dtype)]
    info = np.finfo(dtype)
    x.append(np.array([np.inf, -np.inf, np.nan, info.max, -info.max, 0, -0.0, info.tiny], dtype=dtype))
    x = np.concatenate(x)
    return np.resize(x, n_s) if x.size > n_s else np.r_[x, np.full(n_s - x.size, np.nan, dtype=dtype)]


@pytest.mark.parametrize("dtype, n_cells, mutant", [(np.float32, 128, None), (np.float64, 128, None),
                                                    (np.float32, 1024, None), (np.float64, 1024, None),
                                                    (np.float32, 2048, None), (np.float64, 2048, None),
                                                    *((np.float32, 128, mutant) for mutant in CELLS_MUTANTS)])
def test_cells_answer_as_the_search(dtype, n_cells, mutant, tmp_path):
    """bands.cuh's cells (the rank kernels' table from a score's cell to its place, read by
    gr_cell_round) against gr_place, which searches, at every edge, every cell's edge and their
    neighbouring floats, on bands with ties and overlaps, up to the table's 253 test items;
    wherever the table is built, at most 2 m of its cells search (those holding an edge) and
    every score two cells above the best band is answered, and where it must not be built (no
    test item, 254, a NaN, an infinite band, bands of no width or wider than the type) it
    answers no place, only "nowhere" (cell 0: below the worst band). The same cells with steps
    (rank_tile's: a cell of at most one low edge, not the worst band's, answers by gr_step) give
    gr_place's answer for every score, the table without steps' entries where that does not
    search, and some steps."""
    rng = np.random.default_rng(17)
    cases = cells_cases(dtype, rng)
    width, n_s = 256, 2048 + 2 * n_cells
    lo = np.full((len(cases), width), np.nan, dtype=dtype)
    hi = np.full((len(cases), width), np.nan, dtype=dtype)
    s = np.zeros((len(cases), n_s), dtype=dtype)
    for k, (_, low, high) in enumerate(cases):
        lo[k, :low.size], hi[k, :high.size] = low, high
        s[k] = cells_scores(low, high, dtype, n_s, n_cells)
    m = np.array([low.size for _, low, _ in cases], dtype=np.int32)
    out = np.zeros((len(cases), n_s, 7), dtype=np.int32)
    include = mutated_kernels(tmp_path, "bands.cuh", *CELLS_MUTANTS[mutant]) if mutant else KERNELS  # must fail
    kernel = module("cells", CELLS, include=include).get_function("cells_f32" if dtype == np.float32 else "cells_f64")
    kernel((len(cases),), (128,), (lo.ravel(), hi.ravel(), m, np.int32(width), s.ravel(), np.int32(n_s), np.int32(n_cells),
                                   out))
    failures, steps = [], 0
    for k, (name, low, high) in enumerate(cases):
        got, searched, cell, entry, stepped, wide, at_use = out[k].T
        answered = (entry >= 0) & (entry <= 253)
        # rank_tile's table with steps: its answer gr_place's; the entries those of the table without steps, and
        # a step (p < m - 1) only where that searches
        ok = np.array_equal(stepped, searched) and np.array_equal(wide, at_use)
        read = entry >= 0
        ok = ok and np.array_equal(wide[read] & 255, entry[read])
        step = wide >> 8
        ok = ok and ((wide[step > 0] & 255) == 255).all() and (step[step > 0] - 1 < low.size - 1).all()
        steps += int((step > 0).sum())
        # where the cell answers a place, gr_cell_round gives it; "nowhere" (253), gr_place places
        # the score nowhere; "inside a band" (254: gr_cell_round sends the score on to gr_place),
        # gr_place defers it
        placed = (entry >= 0) & (entry < 253)
        ok = ok and (np.array_equal(got, searched) and np.array_equal(got[placed], entry[placed])
              and (searched[entry == 253] == -1).all() and (searched[entry == 254] == -2).all())
        if name.startswith(("int", "normal", "tiny")) and low.size <= 253:
            high_above = high[0] + 2 * (high[0] - low[-1]) / (n_cells - 3)
            ok = ok and np.unique(cell[entry == 255]).size <= 2 * low.size and answered[np.isfinite(s[k]) & (s[k] > high_above)].all()
            # below the worst band: cell 0, or cell 1 (which holds its edge) where s - worst rounds to a cell's
            # width times less than float's epsilon (the near-zero case: some do)
            below = np.isfinite(s[k]) & (s[k] < low[-1])
            ok = ok and ((entry[below] == 253) | (cell[below] == 1)).all()
            ok = ok and (cell[below] == 1).any() == (name == "normal-near-zero")
        else:
            ok = ok and not placed.any() and not (entry == 254).any()
            if low.size and np.isfinite(low[-1]):  # below a finite worst band: nowhere, from cell 0, table or not
                ok = ok and (entry[np.isfinite(s[k]) & (s[k] < low[-1])] == 253).all()
        if not ok:
            failures.append(name)
    if mutant:
        assert failures, f"{mutant}: not caught"
    else:
        assert not failures
        assert steps > 0  # some scores were placed by a step


@pytest.mark.parametrize("case", RANK_CASES)
def test_rank_tile_equals_the_model(real, case):
    p = Problem(**RANK_CASES[case])
    batch = np.array([0, 1, 2, 3, 4, 6], dtype=np.int64)  # not every user: batch row b is not user b
    launches, outputs = p.rank_launches(batch, tile=5000)  # a tile of 2 blocks per user, then one of 1
    want = run(gpu_model.rank_tile, launches, outputs)
    assert want[0].sum() > 0
    kernel = real["rank_tile"].get_function(f"rank_tile_{'f32' if p.dtype == np.float32 else 'f64'}")
    for schedule, block_order, seed in SCHEDULES:
        got = run(kernel, launches, outputs, schedule=schedule, block_order=block_order, seed=seed)
        assert_same(got, want, f"{case}, {schedule}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rank_tile_with_gpurecos_span_equals_the_model(dtype):
    """The kernels as gpureco compiles them (RANK_SPAN = _gpu.RANK_SPAN, one block per user and
    tile): the same counts as the model, over a 9,000-item tile and a short one."""
    p = Problem(seed=31, dtype=dtype, integer=True, noise=True)
    launches, outputs = p.rank_launches(np.arange(7, dtype=np.int64), tile=6000, span=_gpu.RANK_SPAN)
    assert [grid for grid, _, _ in launches] == [(7, 1), (7, 1)]
    want = run(gpu_model.rank_tile, launches, outputs)
    kernel = module("rank_tile", span=_gpu.RANK_SPAN).get_function(f"rank_tile_{'f32' if dtype == np.float32 else 'f64'}")
    got = run(kernel, launches, outputs, schedule="shuffle", block_order="shuffle", seed=3)
    assert_same(got, want, "default span")


# The settings that depend on the GPU (kernels/common.cuh GR_ARCH): each kernel's, as nvcc's device pass for that
# architecture sees them, and as the emulation does with GR_EMULATED_ARCH; the archs cover every branch
SETTINGS = r"""
#include "rank_tile.cu"
#include "fused_rank.cu"
#ifdef GR_REDUX
#define GR_SETTING_REDUX 1
#else
#define GR_SETTING_REDUX 0
#endif
gr_settings GR_ARCH RANK_CELLS RANK_BLOCKS_F32 RANK_BLOCKS_F64 FUSED_WORDS GR_SETTING_REDUX
"""
SETTINGS_ARCHS = (750, 800, 860, 870, 890, 900, 1000, 1030, 1200)


def settings(command):
    """The settings line of SETTINGS, preprocessed by `command` (its source file last): (the architecture it was
    preprocessed for, the settings), as numbers; a term that is not a number or a product and quotient of numbers
    (FUSED_WORDS: (3840 * 2 / 5)) fails."""
    out = subprocess.run(command, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [line for line in out.stdout.splitlines() if line.startswith("gr_settings")]
    assert len(lines) == 1, out.stdout[-3000:]
    term = r"(\d+|\(\d+ \* \d+ / \d+\))"
    match = re.fullmatch(r"gr_settings" + 6 * (r"\s+" + term) + r"\s*", lines[0])
    assert match, lines[0]
    values = []
    for t in match.groups():
        a, b, c = (int(v) for v in re.findall(r"\d+", t)) if not t.isdigit() else (int(t), 1, 1)
        values.append(a * b // c)
    return values[0], tuple(values[1:])


@needs_nvcc
def test_the_emulation_takes_each_gpus_settings(tmp_path):
    """With GR_EMULATED_ARCH, the emulation compiles the kernels with a GPU's own settings (rank_tile's cells and
    blocks an SM, fused_rank's shared counts, REDUX or shuffles): the same as nvcc's device pass for that GPU, at
    every architecture whose settings differ (A100; H100 and B200; the GPUs of 99 KB a block; Orin; before sm_80);
    and without it, an H100's."""
    source = tmp_path / "settings.cu"
    source.write_text(SETTINGS)
    options = [o for o in _gpu.compile_options() if o.startswith("-D")] + [f"-I{KERNELS}"]
    host = [compiler(), "-E", "-x", "c++", "-std=c++17", "-include", str(HEADER), *options]  # as the emulator
    seen = {}
    for arch in SETTINGS_ARCHS:
        device = settings([NVCC, "-E", f"-arch=sm_{arch // 10}", *options, str(source)])
        assert device[0] == arch  # nvcc's device pass (its host pass has no __CUDA_ARCH__: 900)
        assert settings([*host, f"-DGR_EMULATED_ARCH={arch}", str(source)]) == device, arch
        seen[arch] = device[1]
    assert settings([*host, str(source)]) == (900, seen[900])
    assert len(set(seen.values())) == 5  # A100; H100, B200, B300; 99 KB a block; T4; Orin (rank_tile's 99 KB ones)
    assert seen[800][0] == seen[890][0] < seen[900][0] and seen[890][3] < seen[800][3] == seen[900][3]
    assert seen[750][4] == 0 and seen[800][4] == 1


def test_rank_tile_with_other_gpus_settings_equals_the_model(tmp_path):
    """rank_tile as an A100 and the GPUs of 99 KB a block (RTX 30 to 50, A10, L4, L40, T4) compile it: tables of
    512 and 256 cells, which an H100's kernel does not build (2,048 and 1,024): the model's counts, every case.
    The mutant, a large block's table of 2,048 cells whatever the GPU's, passes with an H100's settings (the two are
    equal there) and is caught here (a table past its shared memory)."""
    arch = GPUS["A100"]["arch"]  # (rank_tile's tables: an L4's too; their blocks an SM are launch bounds)
    real = module("rank_tile", arch=arch)
    for case, kw in RANK_CASES.items():
        p = Problem(**kw)
        launches, outputs = p.rank_launches(np.array([0, 1, 2, 3, 4, 6], dtype=np.int64), tile=5000)
        want = run(gpu_model.rank_tile, launches, outputs)
        name = f"rank_tile_{'f32' if p.dtype == np.float32 else 'f64'}"
        got = run(real.get_function(name), launches, outputs, schedule="shuffle", block_order="shuffle", seed=len(case))
        assert_same(got, want, f"A100, {case}")
    mutated = mutated_module(tmp_path, "rank_tile", "rank_tile.cu", "n_cells = span_n >= RANK_SPAN / 2 ? RANK_CELLS :",
                             "n_cells = span_n >= RANK_SPAN / 2 ? 2048 :", arch=arch)
    assert caught(mutated.get_function(name), launches, outputs, want, rank_outputs)  # (the last case's)


FUSED_CASES = {  # (problem, batch, span, FUSED_SHARED_TESTS)
    "two-row-blocks": (dict(seed=41, n_users=150, n_items=2000, n_factors=13, integer=True, test_density=0.005),
                       np.arange(150), 512, 2048),
    "noise-normal": (dict(seed=42, n_users=40, n_items=3000, n_factors=8, noise=True, test_density=0.01),
                     np.arange(1, 40, 2), 1024, 2048),
    "big-user-global": (dict(seed=43, n_users=9, n_factors=5, integer=True, big_user=True, bias=False),
                        np.arange(9), 3072, 2048),
    "global-bands": (dict(seed=44, n_users=30, n_factors=3, integer=True, noise=True), np.arange(30), 9088, 64),
}


@pytest.mark.parametrize("case, tf32", [(case, False) for case in FUSED_CASES] +  # TF32: the counting is one body,
                         [(case, True) for case in ("two-row-blocks", "noise-normal")])  # the tiles are not
def test_fused_rank_equals_the_model(real, case, tf32):
    """kernels/fused_rank.cu, fused_rank_f32 and (TF32 mode) fused_rank_tf32: the model's counts
    (rank_tile over the batch's rows) under three schedules and block orders; the pool
    statistics too, exactly where the scores are exact (integer factors: TF32 numbers, exact
    products and sums on the emulated tensor cores too), else whether each pool is finite. Row
    blocks (150 users: 128 + 22), spans, a last tile of 40 items, F not a multiple of the factor
    step, users with more test items than a block holds in shared memory, or all of them in
    global memory."""
    kw, batch, span, shared_tests = FUSED_CASES[case]
    p = Problem(dtype=np.float32, **kw)
    launches, outputs = p.fused_launches(batch.astype(np.int64), span, tf32)
    per_block = np.add.reduceat(p.test[batch].sum(axis=1), np.arange(0, batch.shape[0], _gpu.FUSED_USERS))
    assert (per_block <= shared_tests).all() == (case in ("two-row-blocks", "noise-normal"))  # shared or global
    kernel = (real["fused_rank"] if shared_tests == _gpu.FUSED_SHARED_TESTS
              else module("fused_rank", shared_tests=shared_tests)).get_function(f"fused_rank_{'tf32' if tf32 else 'f32'}")
    want = assert_fused_rank_equals_the_model(kernel, launches, outputs, kw.get("integer", False), case)
    assert want[0].sum() > 0


def test_fused_rank_with_the_settings_of_99_kb_gpus_equals_the_model(tmp_path):
    """fused_rank as the GPUs of 99 KB a block compile it (RTX 30 to 50, A10, L4, L40: shared counts for 2/5 of
    FUSED_SHARED_TESTS test items): the row blocks that an H100's kernel counts in shared memory, some in global
    memory here; the model's numbers. The mutant, a block's fit judged by FUSED_SHARED_TESTS where its shared
    words are fewer, passes with an H100's settings (the two are equal there) and is caught here."""
    kw, batch, span, shared_tests = FUSED_CASES["two-row-blocks"]
    p = Problem(dtype=np.float32, **kw)
    launches, outputs = p.fused_launches(batch.astype(np.int64), span, False)
    per_block = np.add.reduceat(p.test[batch].sum(axis=1), np.arange(0, batch.shape[0], _gpu.FUSED_USERS))
    assert (per_block <= shared_tests).all() and (per_block > shared_tests * 2 // 5).any()
    options = dict(shared_tests=shared_tests, arch=GPUS["L4"]["arch"])
    want = assert_fused_rank_equals_the_model(module("fused_rank", **options).get_function("fused_rank_f32"), launches,
                                              outputs, True, "two-row-blocks, an L4's settings")
    mutated = mutated_module(tmp_path, "fused_rank", "fused_rank_body.cuh", "in_shared = n_tests <= FUSED_WORDS;",
                             "in_shared = n_tests <= FUSED_SHARED_TESTS;", **options)
    assert caught(mutated.get_function("fused_rank_f32"), launches, outputs, want, rank_outputs)


def assert_fused_rank_equals_the_model(kernel, launches, outputs, exact, case):
    """The fused_rank kernel against the model under every schedule: all its numbers where the scores are
    exact (integer factors), else its counts and whether each pool is finite. Returns the model's."""
    want = run(gpu_model.fused_rank, launches, outputs)
    for schedule, block_order, seed in SCHEDULES:
        got = run(kernel, launches, outputs, schedule=schedule, block_order=block_order, seed=seed)
        if exact:
            assert_same(got, want, f"{case}, {schedule}")
        else:
            np.testing.assert_array_equal(got[0], want[0], err_msg=f"{case}, {schedule}: counts")
            np.testing.assert_array_equal(pool(*got[1:])[0], pool(*want[1:])[0], err_msg=f"{case}, {schedule}: bad")
    return want


SMALL_FUSED_CASES = {  # (problem, batch, span, FUSED_SHARED_TESTS, NaN): blocks of fewer rows than warps, short tails
    "few-rows-tiny-tail": (dict(seed=71, n_users=5, n_items=1541, n_factors=7, noise=True, test_density=0.05),
                           np.arange(5), 512, _gpu.FUSED_SHARED_TESTS, "among"),
    "few-rows-global": (dict(seed=72, n_users=6, n_items=1541, n_factors=7, integer=True, noise=True,
                             test_density=0.05), np.arange(6), 512, 8, "among"),
    "nan-rounds": (dict(seed=73, n_users=12, n_items=700, n_factors=3, integer=True, test_density=0.03),
                   np.arange(12), 256, _gpu.FUSED_SHARED_TESTS, "each"),
    "nan-rounds-global": (dict(seed=74, n_users=12, n_items=700, n_factors=3, integer=True, test_density=0.03),
                          np.arange(12), 256, 8, "each"),
    "one-row": (dict(seed=75, n_users=3, n_items=1000, n_factors=4, integer=True, test_density=0.3),
                np.array([0]), 1024, _gpu.FUSED_SHARED_TESTS, "among"),
}


@pytest.mark.parametrize("tf32", [False, True])
@pytest.mark.parametrize("case", SMALL_FUSED_CASES)
def test_small_fused_blocks_equal_the_model(case, tf32):
    """fused_rank's blocks of 1 to 12 rows (warps with no row, whose search queues are flushed empty), a
    last span of 5 items, a NaN at each position of a lane's round of 4 items, with the counts in shared
    or in global memory: the model's numbers under three schedules (cases from a review of change 47)."""
    kw, batch, span, shared_tests, nan = SMALL_FUSED_CASES[case]
    p = Problem(dtype=np.float32, **kw)
    if nan == "each":
        p.with_a_nan_at_each_round_position()
    else:
        p.with_a_nan_among_finite_scores()
    launches, outputs = p.fused_launches(batch.astype(np.int64), span, tf32)
    kernel = module("fused_rank", shared_tests=shared_tests).get_function(f"fused_rank_{'tf32' if tf32 else 'f32'}")
    assert_fused_rank_equals_the_model(kernel, launches, outputs, kw.get("integer", False), case)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("with_bias", [True, False])
def test_pair_scores_equal_the_model(real, dtype, with_bias):
    p = Problem(seed=9, dtype=dtype, n_items=700, bias=with_bias)
    suffix = "f32" if dtype == np.float32 else "f64"
    rng = np.random.default_rng(10)
    users = rng.integers(0, 7, size=700).astype(np.int64)
    items = rng.integers(0, 700, size=700).astype(np.int64)
    for with_scores in (True, False):  # GivenScores asks for the tie keys alone
        outputs = (np.full(700, -1.0) if with_scores else NULL, np.zeros(700, dtype=np.uint64))
        args = (users, items, np.int64(700), *p.launch_args(), np.uint64(p.seed), np.int32(1), *outputs)
        launches = [((2,), (256,), args)]  # a grid-stride loop over 700 pairs
        arrays = tuple(o for o in outputs if isinstance(o, np.ndarray))
        want = run(gpu_model.pair_scores_kernel, launches, arrays)
        for schedule, block_order, seed in SCHEDULES:
            got = run(real["exact_scores"].get_function(f"pair_scores_{suffix}"), launches, arrays,
                      schedule=schedule, block_order=block_order, seed=seed)
            for g, w in zip(got, want):
                np.testing.assert_array_equal(g, w)


def sort_tests_case(seed, sizes):
    """A batch of users with `sizes` test entries: scores with ties (0.0 and -0.0 among them), NaNs
    of both signs and infinities; tie keys with repeats (the tie modes' constant keys aside, a
    user's keys are distinct, but the kernel must not rely on it); entries as rank_users makes
    them (each user's ascending, from anywhere in X_test)."""
    rng = np.random.default_rng(seed)
    m = int(sum(sizes))
    scores = np.round(rng.standard_normal(m), 1)
    special = rng.random(m)
    scores[special < 0.05] = 0.0
    scores[(special >= 0.05) & (special < 0.1)] = -0.0
    scores[(special >= 0.1) & (special < 0.12)] = np.nan
    scores[(special >= 0.12) & (special < 0.14)] = -np.nan
    scores[(special >= 0.14) & (special < 0.16)] = np.inf
    scores[(special >= 0.16) & (special < 0.18)] = -np.inf
    keys = rng.integers(0, 6, size=m).astype(np.uint64) * np.uint64(1 << 61)
    tests_begin = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    entry = np.concatenate([np.sort(rng.choice(10 * n + 1, n, replace=False)) for n in sizes]).astype(np.int64)
    return tests_begin, scores, keys, entry


@pytest.mark.parametrize("sizes", [[0, 1, 5, 0, 130, 2], [_gpu.SORT_TESTS_MAX, 3, 257], [40] * 9])
@pytest.mark.parametrize("tie_mode", [0, 1, 2])
def test_sort_tests_equals_the_model(real, sizes, tie_mode):
    """sort_tests, as _gpu.sort_tests launches it, orders each user's test entries as the model
    (NumPy's lexsort) and as the host's lexsort of rank_users before it: users of no entry, one,
    more than the block's threads, SORT_TESTS_MAX; equal scores and keys, NaN, -0.0, infinities."""
    tests_begin, scores, keys, entry = sort_tests_case(len(sizes) + tie_mode, sizes)
    m, nb = scores.shape[0], len(sizes)
    tie_key = np.uint64(0 if tie_mode == 1 else np.iinfo(np.uint64).max)
    outputs = (np.full(m, -1.0), np.zeros(m, dtype=np.uint64), np.full(m, -1, dtype=np.int64))
    launches = [((nb,), (_gpu.SORT_TESTS_THREADS,), (tests_begin, scores, keys, entry, tie_key,
                                                      np.int32(tie_mode == 0), *outputs))]
    want = run(gpu_model.sort_tests, launches, outputs)
    # the order rank_users took before the kernel: one lexsort of the batch
    local = np.repeat(np.arange(nb), sizes).astype(np.uint64)
    k = keys if tie_mode == 0 else np.full(m, tie_key, dtype=np.uint64)
    order = np.lexsort([entry.astype(np.uint64), k, ~order_key(np, scores), local])
    np.testing.assert_array_equal(want[2], entry[order])
    np.testing.assert_array_equal(want[1], k[order])
    np.testing.assert_array_equal(want[0].view(np.uint64), scores[order].view(np.uint64))  # NaN signs, -0.0
    for schedule, block_order, seed in SCHEDULES:
        got = run(real["exact_scores"].get_function("sort_tests"), launches, outputs,
                  schedule=schedule, block_order=block_order, seed=seed)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g.view(np.uint64) if g.dtype == np.float64 else g,
                                          w.view(np.uint64) if w.dtype == np.float64 else w)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n_rows, n_cols, rows_per_block", [(1000, 5, 97), (700, 128, 64), (50, 300, 7),
                                                            (999, 1, 256), (5, 2, 1000)])
def test_abs_max_columns_equals_magnitudes(real, dtype, n_rows, n_cols, rows_per_block):
    """kernels/magnitudes.cu, as _gpu.abs_max_columns launches it, gives _scores.magnitudes (the
    CPU's bound) exactly: NaN and infinities left out, -0.0, subnormals (not flushed), a column
    with no finite value (0), blocks that cover a part of the rows or more than all of them."""
    rng = np.random.default_rng(n_rows + n_cols)
    X = (rng.standard_normal((n_rows, n_cols)) * 10.0 ** rng.integers(-3, 4, size=(n_rows, n_cols))).astype(dtype)
    X[rng.random(X.shape) < 0.01] = np.nan
    X[rng.random(X.shape) < 0.01] = -np.inf
    X[rng.integers(0, n_rows), 0] = np.inf * (1 if n_cols > 1 else 0)  # inf, or NaN (inf * 0) in a vector
    X[:, -1] = np.where(rng.random(n_rows) < 0.5, np.nan, np.inf)  # no finite value
    if n_cols > 3:
        X[:, 1] = -0.0
        X[: n_rows // 2, 2] = np.finfo(dtype).smallest_subnormal * rng.integers(1, 9, size=n_rows // 2)
        X[n_rows // 2:, 2] = 0
    suffix = "f32" if dtype == np.float32 else "f64"
    blocks = (n_rows + rows_per_block - 1) // rows_per_block
    out = np.zeros(n_cols, dtype=np.uint64)
    launches = [((blocks,), (256,), (X, np.int64(n_rows), np.int64(n_cols), np.int64(rows_per_block), out))]
    want, _ = magnitudes(X, np.zeros(0))
    np.testing.assert_array_equal(run(gpu_model.abs_max_columns, launches, (out,))[0].view(np.float64), want)
    if n_cols > 3:
        assert want[1] == 0 and 0 < want[2] < np.finfo(dtype).tiny
    assert want[-1] == 0
    for schedule, block_order, seed in SCHEDULES:
        got = run(real["magnitudes"].get_function(f"abs_max_columns_{suffix}"), launches, (out,), schedule=schedule,
                  block_order=block_order, seed=seed)[0]
        np.testing.assert_array_equal(got.view(np.float64), want, err_msg=schedule)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n_rows, n_cols, blocks", [(1000, 5, 2), (300, 64, 1), (50, 3, 4), (7, 1, 1)])
def test_max_row_norm_sq_equals_the_model_and_bounds_the_norms(real, dtype, n_rows, n_cols, blocks):
    """kernels/magnitudes.cu's largest row norm (as _gpu.max_row_norm launches it: a grid-stride
    loop, here over more rows than threads) equals the NumPy model, in-order sums, exactly: rows
    with a NaN or an infinity left out (the largest rows are made so here), subnormals not
    flushed. Its square root, and the CPU's max_row_norm, bound every finite row's norm."""
    rng = np.random.default_rng(n_rows + n_cols)
    X = (rng.standard_normal((n_rows, n_cols)) * 10.0 ** rng.integers(-3, 4, size=(n_rows, n_cols))).astype(dtype)
    big = np.argsort(-np.abs(X.astype(np.float64)).max(axis=1))[:3]
    X[big[0], 0], X[big[1], -1], X[big[2], 0] = np.nan, np.inf, -np.inf
    X[-1] = np.finfo(dtype).smallest_subnormal * rng.integers(1, 9, size=n_cols)
    suffix = "f32" if dtype == np.float32 else "f64"
    out = np.zeros(1, dtype=np.uint64)
    launches = [((blocks,), (256,), (X, np.int64(n_rows), np.int64(n_cols), out))]
    want = run(gpu_model.max_row_norm_sq, launches, (out,))[0].view(np.float64)[0]
    finite = np.isfinite(X).all(axis=1)
    exact = max(math.fsum(float(x) ** 2 for x in row) for row in X[finite].astype(np.float64))
    assert abs(want - exact) <= 1e-12 * exact and want > 0
    assert max_row_norm(X) ** 2 >= exact * (1 - 1e-12)
    for schedule, block_order, seed in SCHEDULES:
        got = run(real["magnitudes"].get_function(f"max_row_norm_sq_{suffix}"), launches, (out,), schedule=schedule,
                  block_order=block_order, seed=seed)[0]
        assert got.view(np.float64)[0] == want, schedule
    zero = np.zeros(1, dtype=np.uint64)
    tiny = np.full((3, 2), np.finfo(dtype).smallest_subnormal, dtype=dtype)
    got = run(real["magnitudes"].get_function(f"max_row_norm_sq_{suffix}"),
              [((1,), (256,), (tiny, np.int64(3), np.int64(2), zero))], (zero,))[0]
    assert got.view(np.float64)[0] == 2 * float(np.finfo(dtype).smallest_subnormal) ** 2  # not flushed to 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n_rows, n_cols, blocks", [(1000, 5, 2), (300, 64, 1), (7, 1, 1)])
def test_row_norms_equal_the_model_and_bound_the_norms(real, dtype, n_rows, n_cols, blocks):
    """kernels/magnitudes.cu's norm of each row (as FactorScores.item_norms launches it: a
    grid-stride loop) equals the NumPy model exactly, +inf for a row with a NaN or an infinity;
    within a few units of float64 of each finite row's exact norm, as score_tolerance's item
    terms allow (its 4 gamma_(F+2))."""
    rng = np.random.default_rng(n_rows * n_cols)
    X = (rng.standard_normal((n_rows, n_cols)) * 10.0 ** rng.integers(-3, 4, size=(n_rows, n_cols))).astype(dtype)
    X[0, 0], X[1, -1], X[2, 0] = np.nan, np.inf, -np.inf
    suffix = "f32" if dtype == np.float32 else "f64"
    out = np.full(n_rows, -7.0)
    launches = [((blocks,), (256,), (X, np.int64(n_rows), np.int64(n_cols), out))]
    want = run(gpu_model.row_norms, launches, (out,))[0]
    assert np.isinf(want[:3]).all() and (want[:3] > 0).all()
    exact = np.array([math.sqrt(math.fsum(float(x) ** 2 for x in row)) for row in X[3:].astype(np.float64)])
    np.testing.assert_allclose(want[3:], exact, rtol=1e-13)
    for schedule, block_order, seed in SCHEDULES:
        got = run(real["magnitudes"].get_function(f"row_norms_{suffix}"), launches, (out,), schedule=schedule,
                  block_order=block_order, seed=seed)[0]
        np.testing.assert_array_equal(got, want, err_msg=schedule)


@pytest.mark.parametrize("lo_first", [False, True])
@pytest.mark.parametrize("n_rows, n_cols, blocks", [(300, 64, 4), (7, 1, 1), (33, 5, 1000)])
def test_tf32_parts_are_split_tf32s(real, lo_first, n_rows, n_cols, blocks):
    """kernels/magnitudes.cu split_tf32_f32 (TF32 mode's parts for the cuBLAS tiles, as
    _gpu.tf32_parts launches it: a grid-stride loop, here with fewer threads than values, and
    more) writes _scores.split_tf32's parts bit for bit, in either order: values over many
    binades, halfway points of the rounding of lo, subnormals (not flushed), -0.0, NaN and the
    infinities; every value of out written."""
    rng = np.random.default_rng(n_rows * n_cols + lo_first)
    X = (rng.standard_normal((n_rows, n_cols)) * 2.0 ** rng.integers(-40, 40, size=(n_rows, n_cols))).astype(np.float32)
    bits = X.view(np.uint32)
    halfway = rng.random(X.shape) < 0.2  # lo exactly halfway between two TF32 numbers: rounds away from zero
    bits[halfway] = (bits[halfway] & np.uint32(0xFFFFE000)) | np.uint32(0x1000 | 0x800)
    X.reshape(-1)[: min(X.size, 6)] = [np.nan, np.inf, -np.inf, -0.0, np.float32(3e-39), -np.float32(1e-45)][: min(X.size, 6)]
    want = split_tf32(np, X, np.empty((n_rows, 2 * n_cols), dtype=np.float32), lo_first=lo_first)
    out = np.full((n_rows, 2 * n_cols), 0x7FBADBAD, dtype=np.uint32)  # poison: every value must be written
    launches = [((blocks,), (256,), (X, np.int64(n_rows), np.int64(n_cols), out, np.int32(lo_first)))]
    np.testing.assert_array_equal(run(gpu_model.split_tf32_kernel, launches, (out,))[0], want.view(np.uint32))
    for schedule, block_order, seed in SCHEDULES:
        got = run(real["magnitudes"].get_function("split_tf32_f32"), launches, (out,), schedule=schedule,
                  block_order=block_order, seed=seed)[0]
        np.testing.assert_array_equal(got, want.view(np.uint32), err_msg=schedule)


@pytest.mark.parametrize("n_rows, n_cols", [(1, 1), (37, 5), (64, 128), (100, 33)])
def test_transpose_copies_every_bit(real, n_rows, n_cols):
    """kernels/magnitudes.cu transpose_f32 (the FP32 tiles' items, _gpu.transpose): out = X^T bit
    for bit, NaN payloads, infinities, -0.0 and subnormals included, over partial 32 x 32
    squares; every value of out written, nothing past it."""
    rng = np.random.default_rng(n_rows * n_cols)
    X = rng.integers(0, 2**32, size=(n_rows, n_cols), dtype=np.uint64).astype(np.uint32)
    X.reshape(-1)[: min(X.size, 5)] = np.array([0x7FC01234, 0x7F800000, 0xFF800000, 0x80000000, 1],
                                                dtype=np.uint32)[: min(X.size, 5)]
    out = np.full(n_rows * n_cols + 7, 0x7FBADBAD, dtype=np.uint32)  # poison, and 7 words past the end
    grid = (-(-n_cols // 32), -(-n_rows // 32))
    launches = [(grid, (32, _gpu.TRANSPOSE_ROWS), (X, np.int64(n_rows), np.int64(n_cols), out))]
    want = np.concatenate([X.T.reshape(-1), np.full(7, 0x7FBADBAD, dtype=np.uint32)])
    for schedule, block_order, seed in SCHEDULES:
        got = run(real["magnitudes"].get_function("transpose_f32"), launches, (out,), schedule=schedule,
                  block_order=block_order, seed=seed)[0]
        np.testing.assert_array_equal(got, want, err_msg=schedule)


TOPK_CASES = {
    "f64-k5": dict(problem=dict(seed=12), k=5),
    "f32-k5-ties": dict(problem=dict(seed=13, dtype=np.float32, integer=True), k=5),
    "f32-k1000": dict(problem=dict(seed=14, dtype=np.float32), k=1000),
    "f64-k1-no-bias": dict(problem=dict(seed=15, bias=False), k=1),
    "given": dict(problem=dict(seed=16, mode="given"), k=7),
    "biases": dict(problem=dict(seed=17, mode="biases"), k=3),
}


@pytest.mark.parametrize("case", TOPK_CASES)
def test_topk_tile_equals_the_model(real, case):
    p = Problem(**TOPK_CASES[case]["problem"])
    batch = np.array([0, 1, 2, 3, 5], dtype=np.int64)
    launches, outputs = p.topk_launches(batch, tile=5000, k=TOPK_CASES[case]["k"])
    want = topk_result(run(gpu_model.topk_tile, launches, outputs))
    kernel = real["topk_tile"].get_function(f"topk_tile_{'f32' if p.dtype == np.float32 else 'f64'}")
    for schedule, block_order, seed in SCHEDULES:
        got = topk_result(run(kernel, launches, outputs, schedule=schedule, block_order=block_order, seed=seed))
        assert got == want, f"{case}, {schedule}"
    if p.mode == "factors" and p.bias is None:
        assert want[2] == ("overflow",)  # every score 0: more near-ties than the buffer holds


# ---- seeded bugs: a mutated copy of a kernel must be caught ----

FINISH_CASES = {
    "f64": dict(seed=1),
    "f32-ties": dict(seed=3, dtype=np.float32, integer=True),
    "f64-ties-no-bias": dict(seed=4, integer=True, bias=False),
    "f64-big-user": dict(seed=5, big_user=True, integer=True),
    "given": dict(seed=7, mode="given"),
    "biases": dict(seed=8, mode="biases", integer=True),
    "f64-empty-users": dict(seed=9, empty_users=True),
    "given-empty-users": dict(seed=10, mode="given", empty_users=True),
}


def finish_result(outputs):
    """finish_batch's outputs as gpureco reads them: the batch's pool statistics as pool() has
    them, the ranks (and test scores), and the users' statistics where not bad (a pool without a
    non-NaN score has NaN where the kernel has infinities: both are bad); lists, so that == compares."""
    *batch_stats, user_min, user_max, user_bad = outputs
    bad = user_bad.astype(bool)
    return ([a.tolist() for a in pool(*batch_stats[:3])]
            + [(a.view(np.int64) if a.dtype.kind == "f" else a).tolist() for a in batch_stats[3:]]  # scores: bits
            + [np.where(bad, 0.0, user_min).tolist(), np.where(bad, 0.0, user_max).tolist(), user_bad.tolist()])


@pytest.mark.parametrize("case", FINISH_CASES)
@pytest.mark.parametrize("tie_mode, with_scores", [(0, False), (1, True), (2, False)])
def test_finish_batch_equals_the_model(real, case, tie_mode, with_scores):
    """kernels/exact_scores.cu finish_batch after rank_tile: the pool statistics of the NaN user
    (1) and of a pool whose filter scores are all equal (2) are recounted from the defined scores
    (factor models); the ranks are the prefix sums of the counts, moved within tie groups by the
    tie mode; the test scores are copied where asked."""
    p = Problem(**FINISH_CASES[case])
    batch = np.array([0, 1, 2, 3, 4, 5, 6], dtype=np.int64)
    counts, pool_min, pool_max, nonfinite = run(gpu_model.rank_tile, *p.rank_launches(batch, tile=5000))
    pool_min[2] = pool_max[2] = order_key(np, np.array([12345.0]))[0]  # a constant pool, wrongly: recounted
    launches, outputs = p.finish_launch(batch, counts, pool_min, pool_max, nonfinite, tie_mode, with_scores)
    want = run(gpu_model.finish_batch, launches, outputs)
    assert (want[-3][2] == 12345.0) == (p.mode != "factors")  # (given scores are the defined ones: kept)
    if FINISH_CASES[case].get("empty_users"):  # no test items: statistics still written; an empty pool: no number
        assert want[-3][4] != -7.0 and (want[-1][5] == 1 or np.isnan(want[-3][5]))
    ranks = want[3][want[3] != -7]
    assert ranks.shape[0] == p.test[batch].sum() and ranks.max() > 0
    if tie_mode and p.mode != "given":
        assert len(set(ranks.tolist())) < ranks.shape[0] or tie_mode == 2  # tie groups were there to move
    suffix = "f32" if p.dtype == np.float32 else "f64"
    for schedule, block_order, seed in SCHEDULES:
        got = run(real["exact_scores"].get_function(f"finish_batch_{suffix}"), launches, outputs, schedule=schedule,
                  block_order=block_order, seed=seed)
        for g, w in zip(finish_result(got), finish_result(want)):
            np.testing.assert_array_equal(g, w, err_msg=f"{case}, tie mode {tie_mode}, {schedule}")


FINISH_MUTANTS = {  # (old, new, occurrence) in kernels/exact_scores.cu
    "missing barrier after the reset": ("    __syncthreads();\n    if (unsure)", "    if (unsure)", 1),
    "missing barrier after the recount": ("        __syncthreads();\n    }", "    }", 1),
    "no recount": ("(bad || !(gr_add(mx, -mn) > gr_mul(2.0, tol[b])))", "bad", 1),
    "ranks off by one": ("        a += above;", "        a += above + 1;", 1),
    "a scan a step short": ("for (int off = 1; off < 32; off <<= 1) {", "for (int off = 1; off < 16; off <<= 1) {", 1),
    "a tie group's start not carried": ("first = __shfl_sync(0xFFFFFFFFu, f, 31);", "first = t0;", 1),
    "a tie group's end not carried": ("end = __shfl_sync(0xFFFFFFFFu, e, 0);", "end = t1;", 1),
    "the last item's group ends early": ("i + 1 < t1 && test_scores[i + 1]", "i + 2 < t1 && test_scores[i + 1]", 1),
}


@pytest.mark.parametrize("mutant", FINISH_MUTANTS)
def test_finish_batch_mutants_are_caught(real, mutant):
    """Each seeded bug in finish_batch changes its result, in tie mode 1 or 2, under some schedule
    (the big user's 1,800 test items with integer scores: tie groups across the 32-item steps)."""
    p = Problem(seed=22, integer=True, big_user=True, train_density=0.2)
    trained = set(p.train_indices[p.train_indptr[3]: p.train_indptr[4]].tolist())
    p.bias[next(j for j in range(32, 64) if j not in trained)] = 50.0  # user 3's best item, in warp 1's share
    batch = np.arange(7, dtype=np.int64)
    counts, pool_min, pool_max, nonfinite = run(gpu_model.rank_tile, *p.rank_launches(batch, tile=5000))
    pool_min[3] = pool_max[3] = order_key(np, np.array([12345.0]))[0]  # recounted
    source = mutate((KERNELS / "exact_scores.cu").read_text(), *FINISH_MUTANTS[mutant])
    mutated = module("exact_scores", source).get_function("finish_batch_f64")
    found = []
    for tie_mode in (1, 2):
        launches, outputs = p.finish_launch(batch, counts, pool_min, pool_max, nonfinite, tie_mode=tie_mode)
        want = run(gpu_model.finish_batch, launches, outputs)
        assert not caught(real["exact_scores"].get_function("finish_batch_f64"), launches, outputs, want,
                          finish_result)
        found.append(caught(mutated, launches, outputs, want, finish_result))
    assert any(found)


def mutate(text, old, new, occurrence=1):
    """text with the occurrence-th `old` replaced by `new`; the mutation must apply."""
    parts = text.split(old)
    assert len(parts) > occurrence, f"mutation does not apply: {old!r} occurs {len(parts) - 1} time(s)"
    return old.join(parts[:occurrence]) + new + old.join(parts[occurrence:])


def mutated_kernels(folder, file, old, new, occurrence=1):
    """A copy of kernels/ in `folder` with `file` mutated (mutate); returns the folder."""
    for path in KERNELS.glob("*.cu*"):
        shutil.copy(path, folder / path.name)
    (folder / file).write_text(mutate((KERNELS / file).read_text(), old, new, occurrence))
    return folder


def mutated_module(tmp_path, name, file, old, new, occurrence=1, **options):
    """kernels/<name>.cu compiled from a copy of kernels/ with `file` mutated (options: module's)."""
    mutated_kernels(tmp_path, file, old, new, occurrence)
    return module(name, (tmp_path / f"{name}.cu").read_text(), include=tmp_path, **options)


def caught(kernel, launches, outputs, want, compare):
    """Whether the kernel, under some schedule, raises EmulationError or gives another result (a
    race shows under the schedules that run its threads in the wrong order; the unmutated kernels
    must therefore pass under every one)."""
    for schedule, block_order, seed in SCHEDULES:
        try:
            got = run(kernel, launches, outputs, schedule=schedule, block_order=block_order, seed=seed)
        except EmulationError:
            return True
        if compare(got) != compare(want):
            return True
    return False


def rank_outputs(outputs):
    return [a.tolist() for a in (outputs[0], *pool(*outputs[1:]))]


def assert_rank_tile_catches(real, p, mutant, tmp_path, name="rank_tile_f32", tile=5000):
    """rank_tile over problem p's first 7 users (tiles of `tile` items): the model's numbers from the kernel
    under every schedule, and others, or an error, under some schedule from the kernel compiled with `mutant`
    ((file, old, new, occurrence) in a copy of kernels/)."""
    launches, outputs = p.rank_launches(np.arange(7, dtype=np.int64), tile=tile)
    want = run(gpu_model.rank_tile, launches, outputs)
    assert not caught(real["rank_tile"].get_function(name), launches, outputs, want, rank_outputs)
    mutated = mutated_module(tmp_path, "rank_tile", *mutant)
    assert caught(mutated.get_function(name), launches, outputs, want, rank_outputs)


RANK_MUTANTS = {  # (file, old, new, occurrence)
    "off-by-one j <= n_span": ("rank_tile.cu", "const bool in_span = j0 + 32 * q + lane < n_span;", "const bool in_span = j0 + 32 * q + lane <= n_span;", 1),
    "no defined score inside a band": ("bands.cuh", "return s > bands.high(c) ? c : GR_DEFER;", "return c;", 1),
    "bands from the wrong end": ("bands.cuh", "if (bands.low(k - 1) > s)", "if (bands.high(k - 1) > s)", 1),
    "a round settled before the warp's queue is written": ("bands.cuh", "__syncwarp();", "", 1),
    "the last queued item never settled": ("bands.cuh", "& 31) < queued) settle", "& 31) + 1 < queued) settle", 1),
    "off-by-one c <= m": ("rank_tile.cu", "if (c < m) atomicAdd", "if (c <= m) atomicAdd", 1),
    "missing barrier after the training bitmap": ("rank_tile.cu", "__syncthreads();", "", 2),
    "missing barrier after loading the test items": ("rank_tile.cu", "__syncthreads();", "", 1),
    "half the cells never written": ("bands.cuh", "k1 = min(n, k0 + per);", "k1 = min(n / 2, k0 + per);", 1),
    "a large block's last 512 cells never written": ("bands.cuh", "k1 = min(n, k0 + per);", "k1 = min(min(n, 512), k0 + per);", 1),
    "a 2,048-cell table's last half never written": ("bands.cuh", "k1 = min(n, k0 + per);", "k1 = min(min(n, 1024), k0 + per);", 1),
    "a thread's cells after its first placed by its first's low edges": ("bands.cuh", "while (p > 0 && low_cell(p - 1) <= k) --p;", "", 1),
    "a thread's walk past the high edges one short": ("bands.cuh", "while (q > 0 && high_cell(q - 1) <= k) --q;",
                                                      "while (q > 0 && high_cell(q - 1) < k) --q;", 1),
    "missing barrier after the edges' cells": ("bands.cuh", "    __syncthreads();\n    const auto low_cell = [&](int i) { return (int)edge_cells[i]; };",
                                               "    const auto low_cell = [&](int i) { return (int)edge_cells[i]; };", 1),
    "the edges' cells where the counts of places are": ("rank_tile.cu", "(int16_t*)(sh_cnt + RANK_EDGE_WORDS)", "(int16_t*)sh_cnt", 1),
    "a round's deferred items queued only where every lane defers": ("rank_tile.cu", "if (__any_sync(0xFFFFFFFFu, defer))",
                                                                     "if (__all_sync(0xFFFFFFFFu, defer))", 1),
    "a neighbour's training bits": ("rank_tile.cu", ">> (4 * (lane & 7))) & 0xFu;", ">> (4 * ((lane ^ 1) & 7))) & 0xFu;", 1),
    "a round's training bits item-major": ("bands.cuh", "return (j & ~127) | ((j & 31) << 2) | ((j >> 5) & 3);",
                                           "return j;", 1),
    "a round's searches: the last item's alone": ("bands.cuh", "search |= (uint32_t)(e > GR_CELL_NOWHERE) << q;",
                                                  "search = (uint32_t)(e > GR_CELL_NOWHERE) << q;", 1),
    "a lane's every other search skipped": ("bands.cuh", "search &= search - 1u)", "search &= search - 1u, search &= search - 1u)", 1),
    "a search ending inside a band not deferred": ("bands.cuh", "else if (c == GR_DEFER) defer |= 1u << q;", "", 1),
    "a round with a score not finite placed by its cells": ("bands.cuh", "if (isfinite(sum)) {", "if (true) {", 1),
    "such a round's pool items not searched": ("bands.cuh", "search = pool;", "search = 0;", 1),
    "a round's finiteness from its last score": ("bands.cuh", "if (q > 0) sum = sum + s[q];", "sum = s[q];", 1),
    "a non-finite score not flagged": ("rank_tile.cu", "[&](T v) { bad |= !isfinite(v); }", "[&](T v) {}", 1),
    "a training item placed by its cell": ("bands.cuh", "gr_cell(p[q], worst,", "gr_cell(s[q], worst,", 1),
    "an item counted nowhere counted at place 0": ("rank_tile.cu", "gr_add_count(cell_counts, e);",
                                                   "gr_add_count(cell_counts, e < GR_CELL_NOWHERE ? e : 0);", 1),
    "a user with a table counting past its places": ("rank_tile.cu", "scale > (T)0 ? sh_cnt : sh_cnt + RANK_NO_TABLE_BASE",
                                                     "sh_cnt + RANK_NO_TABLE_BASE", 1),
    "a step from the next place": ("rank_tile.cu", "gr_step(shared_bands, step - 1, v)", "gr_step(shared_bands, step, v)", 1),
    "a step read from the cell's entry": ("rank_tile.cu", "const int step = sh_steps[", "const int step = sh_cells[", 1),
    "a table's steps never written": ("bands.cuh", "        step[k] = (uint8_t)(e >> 8);\n", "", 1),
}


@pytest.mark.parametrize("mutant", RANK_MUTANTS)
def test_rank_tile_mutants_are_caught(real, mutant, tmp_path):
    p = Problem(seed=21, integer=True, big_user=True, train_density=0.2)  # ties: many c == m; > 1024 tests
    p.with_a_nan_among_finite_scores()
    assert_rank_tile_catches(real, p, RANK_MUTANTS[mutant], tmp_path, name="rank_tile_f64")


ROUND_FINITENESS_MUTANTS = {  # (file, old, new, occurrence): one NaN pool score a user at q = 1, 2, 3; training
    # items' scores +-inf in rounds of finite pool items
    "the round's sum without its second score": ("bands.cuh", "if (q > 0) sum = sum + s[q];",
                                                 "if (q > 1) sum = sum + s[q];", 1),
    "the round's sum without its last score": ("bands.cuh", "if (q > 0) sum = sum + s[q];",
                                               "if (q > 0 && q < N - 1) sum = sum + s[q];", 1),
    "a round's training items' scores flagged": ("rank_tile.cu", "search = gr_cell_round(",
                                                 "bad |= !isfinite(s[0] + s[1] + s[2] + s[3]);\n            search = gr_cell_round(", 1),
    "such a round's pool items counted by their cells too": ("bands.cuh", "if (isfinite(sum)) {",
                                                             "if (true) {\n        if (!isfinite(sum)) search = pool;", 1),
}


@pytest.mark.parametrize("mutant", ROUND_FINITENESS_MUTANTS)
def test_rank_tile_round_finiteness_mutants_are_caught(real, mutant, tmp_path):
    p = Problem(seed=26, dtype=np.float32, train_density=0.2, bias=False).with_a_nan_at_each_round_position()
    assert_rank_tile_catches(real, p, ROUND_FINITENESS_MUTANTS[mutant], tmp_path)


def test_rank_tile_round_with_an_overflowed_filter_is_searched(real, tmp_path):
    """A pool item whose float32 filter overflows to +inf (1e20 x 1e19, then - 1e20 x 1e19: inf) while
    its defined score is 0: its round searches it, and the search defers it to the defined score (its
    cell, the last, would place it above every test item). Mutant: a round whose sum is +inf taken as
    finite, the item counted by its cell."""
    p = Problem(seed=27, dtype=np.float32, bias=False)
    u, j = 3, 37
    p.A[u] = (1e20, 1e20, 1.0)
    p.B[j] = (1e19, -1e19, 0.0)
    p.test[u, j] = False
    rows = [np.setdiff1d(p.train_indices[p.train_indptr[v]:p.train_indptr[v + 1]], [j] if v == u else [])
            for v in range(p.A.shape[0])]
    p.train_indptr = np.concatenate([[0], np.cumsum([r.size for r in rows])]).astype(np.int64)
    p.train_indices = np.concatenate(rows).astype(np.int32)
    assert np.isinf(p.tile(np.array([u]), 0, 100)[0][0, j]) and p.defined(np.array([u]), np.array([j]))[0] == 0.0
    assert_rank_tile_catches(real, p, ("bands.cuh", "if (isfinite(sum)) {", "if (!isnan(sum)) {"), tmp_path)


NO_TABLE_MUTANTS = {  # (file, old, new, occurrence): users of 254 to 1,024 test items, in shared memory, no table
    "a user without a table counting at its places": ("rank_tile.cu", "scale > (T)0 ? sh_cnt : sh_cnt + RANK_NO_TABLE_BASE",
                                                      "sh_cnt", 1),
}


@pytest.mark.parametrize("mutant", NO_TABLE_MUTANTS)
def test_rank_tile_no_table_mutants_are_caught(real, mutant, tmp_path):
    p = Problem(seed=24, dtype=np.float32, test_density=0.06)
    n_tests = p.test.sum(axis=1)
    assert ((n_tests > 253) & (n_tests <= 1024)).all()  # (GR_CELL_TESTS, RANK_SHARED_TESTS)
    assert_rank_tile_catches(real, p, NO_TABLE_MUTANTS[mutant], tmp_path)


PARTIAL_ROUND_MUTANTS = {  # (file, old, new, occurrence): a span whose last round holds 48 items, lanes 0-31 and 0-15
    "the last round's training words not cleared": ("rank_tile.cu", "i < (span_n + 127) / 128 * 4;", "i < (span_n + 31) / 32;", 1),
    "the span's last round read as a whole one": ("rank_tile.cu", "if (j0 + 32 * RANK_ROUND <= n_span)",
                                                  "if (j0 + 32 * RANK_ROUND <= n_span + 64)", 1),
}


@pytest.mark.parametrize("mutant", PARTIAL_ROUND_MUTANTS)
def test_rank_tile_partial_round_mutants_are_caught(real, mutant, tmp_path):
    p = Problem(seed=23, dtype=np.float32, train_density=0.3)
    assert (SPAN + 944) < p.n_items
    assert_rank_tile_catches(real, p, PARTIAL_ROUND_MUTANTS[mutant], tmp_path, tile=SPAN + 944)  # 944 = 7 rounds + 48


POOL_MUTANTS = {  # (file, old, new, occurrence): the pool statistics, which ties hide on the problem above
    "a training item in the pool's minimum": ("bands.cuh", "mn = fmin(mn, p[q]);", "mn = fmin(mn, s[q]);", 1),
    "a training item in the pool's maximum": ("bands.cuh", "mx = fmax(mx, p[q]);", "mx = fmax(mx, s[q]);", 1),
}


@pytest.mark.parametrize("mutant", POOL_MUTANTS)
def test_rank_tile_pool_mutants_are_caught(real, mutant, tmp_path):
    p = Problem(seed=22, dtype=np.float32, train_density=0.3)  # no ties: a pool's extremes are its own
    assert_rank_tile_catches(real, p, POOL_MUTANTS[mutant], tmp_path)


FUSED_MUTANTS = {  # (file, old, new)
    "a non-finite round placed by its cells": ("bands.cuh", "if (isfinite(sum)) {", "if (true) {"),
    "missing barrier after a factor step": ("score_tile.cuh",
                                            "        if (more) store(buf ^ 1);\n        __syncthreads();",
                                            "        if (more) store(buf ^ 1);"),
    "missing barrier after a tile": ("fused_rank_body.cuh", "        __syncthreads();  // the next tile's",
                                     "        // the next tile's"),
    "missing barrier after the stage": ("fused_rank_body.cuh", "        __syncthreads();\n        // Counted as",
                                        "        // Counted as"),
    "the stage's rows read FUSED_ITEMS apart": ("fused_rank_body.cuh", "stage + r * FUSED_PITCH + lane",
                                                "stage + r * FUSED_ITEMS + lane"),
    "training items not masked": ("fused_rank_body.cuh", "uint32_t pool = ~(train_bits[r]", "uint32_t pool = (0 & train_bits[r]"),
    "a lane's training bits from another lane's nibble": ("fused_rank_body.cuh", "(4 * (lane & 7))", "(4 * (lane & 3))"),
    "the last factor left out": ("score_tile.cuh", "k < n - k0; ++k) multiply(k)", "k < n - k0 - 1; ++k) multiply(k)"),
    "a tile's last item skipped": ("fused_rank_body.cuh", "(uint32_t)(lane + 32 * q >= tail)",
                                   "(uint32_t)(lane + 32 * q + 1 >= tail)"),
    "a row's minimum its lanes' maximum": ("common.cuh", "lo = __reduce_min_sync(", "lo = __reduce_max_sync("),
    "a row's maximum its lanes' minimum": ("common.cuh", "hi = __reduce_max_sync(", "hi = __reduce_min_sync("),
    "the last queued items never settled": ("bands.cuh", "& 31) < queued) settle", "& 31) + 1 < queued) settle"),
    "shared counts never flushed": ("fused_rank_body.cuh", "if (const int32_t n = sh_cnt[i])", "if (const int32_t n = 0 * sh_cnt[i])"),
    "a row's counts at the next row's": ("fused_rank_body.cuh", "? &sh_cnt[first + e] :", "? &sh_cnt[sh_first[r + 1] + e] :"),
    "an item placed nowhere counted at the row's first place": ("fused_rank_body.cuh", ": &sh_nowhere, 1);",
                                                                ": &sh_cnt[first], 1);"),
    "a settled item counted at the block's first row": ("fused_rank.cu", "&words[t0 - tests_begin[b0] + c]", "&words[c]"),
    "a row's minimum from its last tile alone": ("fused_rank_body.cuh", "sh_min[r] = min(sh_min[r], lo);", "sh_min[r] = lo;"),
    "a row's maximum from its last tile alone": ("fused_rank_body.cuh", "sh_max[r] = max(sh_max[r], hi);", "sh_max[r] = hi;"),
    "a row's searches queued only where every lane searches": ("fused_rank_body.cuh", "if (__any_sync(0xFFFFFFFFu, search))",
                                                               "if (__all_sync(0xFFFFFFFFu, search))"),
    "a searched item's deferral queued as its place": ("fused_rank_body.cuh", "gr_defer(queue, queued, c == GR_DEFER,",
                                                       "gr_defer(queue, queued, c >= 0,"),
    "a row's cells from the next row's bands": ("fused_rank_body.cuh", "sh_worst[r], sh_scale[r], (float)(GR_CELLS - 1), k)",
                                                "sh_worst[r], sh_scale[r ^ 1], (float)(GR_CELLS - 1), k)"),
    "a row's searches: the last item's alone": ("bands.cuh", "search |= (uint32_t)(e > GR_CELL_NOWHERE) << q;",
                                                "search = (uint32_t)(e > GR_CELL_NOWHERE) << q;"),
    "the search queue's last item never searched at a tile's end": ("bands.cuh", "lane < queued ? queue[lane] : -1",
                                                                     "lane + 1 < queued ? queue[lane] : -1"),
    "a searched item's score from the next row": ("fused_rank_body.cuh", "const float v = stage[r * FUSED_PITCH + j];",
                                                  "const float v = stage[(r ^ 1) * FUSED_PITCH + j];"),
    "a non-finite score not flagged": ("fused_rank_body.cuh", "if (!isfinite(v)) atomicOr(&sh_bad[r], 1);", ""),
    "a row's non-finite flag on the next row": ("fused_rank_body.cuh", "atomicOr(&sh_bad[r], 1)", "atomicOr(&sh_bad[r ^ 1], 1)"),
}


FUSED_TOPK_CASES = {  # Problem, batch, span
    "one-row-block": (dict(seed=46, n_users=40, n_items=1500, n_factors=11), np.arange(40), 768),
    "two-row-blocks-no-bias": (dict(seed=47, n_users=150, n_items=700, n_factors=4, bias=False), np.arange(150), 256),
}


def fused_topk_thresholds(p, batch, rng):
    """Per user: about a fifth of its pool at or above (the model's filter scores), or -inf, or +inf."""
    S = p.A[batch].astype(np.float32) @ p.B.T + (p.bias.astype(np.float32) if p.bias is not None else 0)
    threshold = np.quantile(np.where(np.isfinite(S), S, 0), 0.8, axis=1).astype(np.float32)
    threshold[rng.random(batch.shape[0]) < 0.1] = -np.inf
    threshold[rng.random(batch.shape[0]) < 0.1] = np.inf
    return threshold


@pytest.mark.parametrize("name", ["fused_topk_f32", "fused_topk_tf32"])
@pytest.mark.parametrize("case", FUSED_TOPK_CASES)
def test_fused_topk_equals_the_model(real, case, name):
    """kernels/topk_tile.cu fused_topk_f32 and (TF32 mode, on the emulated tensor cores)
    fused_topk_tf32: the model's candidates (every pool item at or above the user's threshold)
    as sets, their count, and the flags (user 1: NaN scores; users flagged before the launch are
    skipped) under three schedules and block orders. Integer factors: the filter scores are
    exact in both (TF32 parts of small integers have no low half), so kernel and model agree on
    every one. Row blocks, spans, a last tile of part of 128 items, F not a multiple of the
    factor step."""
    kw, batch, span = FUSED_TOPK_CASES[case]
    p = Problem(dtype=np.float32, integer=True, **kw)
    rng = np.random.default_rng(kw["seed"])
    flagged = rng.random(batch.shape[0]) < 0.1
    launches, outputs = p.fused_topk_launches(batch.astype(np.int64), span, fused_topk_thresholds(p, batch, rng),
                                              flagged)
    want = fused_topk_result(run(gpu_model.fused_topk, launches, outputs))
    assert want[1][0] == 1 and sum(r[1] for r in want) > 1000  # the NaN user; candidates
    kernel = real["topk_tile"].get_function(name)
    for schedule, block_order, seed in SCHEDULES:
        got = fused_topk_result(run(kernel, launches, outputs, schedule=schedule, block_order=block_order, seed=seed))
        assert got == want, f"{case}, {schedule}"


@pytest.mark.parametrize("name", ["fused_topk_f32", "fused_topk_tf32"])
def test_fused_topk_counts_past_its_buffer(real, name):
    """More candidates than a buffer holds (8,192): count goes on (the host flags the user), the
    buffer holds 8,192 distinct candidates."""
    p = Problem(seed=48, dtype=np.float32, integer=True, n_users=3, n_items=9000, n_factors=2, train_density=0.01)
    batch = np.array([0, 2], dtype=np.int64)  # user 2: every score the bias alone
    launches, outputs = p.fused_topk_launches(batch, 2304, np.full(2, -np.inf))
    want = run(gpu_model.fused_topk, launches, outputs)
    got = run(real["topk_tile"].get_function(name), launches, outputs, schedule="shuffle", seed=2)
    pool_sizes = 9000 - np.diff(p.train_indptr)[batch]
    np.testing.assert_array_equal(got[2], pool_sizes)
    np.testing.assert_array_equal(got[2], want[2])
    for b in range(2):
        held = got[1][b * 8192: (b + 1) * 8192]
        assert (held >= 0).all() and np.unique(held).shape[0] == 8192 and not np.isin(held, p.train_indices[
            p.train_indptr[batch[b]]: p.train_indptr[batch[b] + 1]]).any()


def test_topk_finish_equals_the_model(real):
    """kernels/topk_tile.cu topk_finish after topk_tile's tiles: each user's buffer cut to
    tau - 2 tol of its k-th largest (fewer than k: left; overflowed: flagged)."""
    finish, tiles = Problem(seed=49, n_users=7, n_items=9000).topk_finish_launch(np.arange(7, dtype=np.int64),
                                                                                5000, 10)
    want = topk_result(run(gpu_model.topk_finish, finish, tiles))
    assert want != topk_result(tiles) and any(r[0] == "overflow" for r in want)
    for schedule, block_order, seed in SCHEDULES:
        got = run(real["topk_tile"].get_function("topk_finish"), finish, tiles, schedule=schedule,
                  block_order=block_order, seed=seed)
        assert topk_result(got) == want, schedule


def topk_gather_case(seed, held):
    """Buffers of len(held) users (random items and scores in every slot) of which row b holds its
    first held[b] slots (0: none, or a user flagged for the full-row path; up to a whole buffer)."""
    rng = np.random.default_rng(seed)
    n = len(held) * gpu_model.TOPK_CAPACITY
    cand_items = rng.integers(0, 1 << 30, size=n).astype(np.int32)
    cand_scores = rng.standard_normal(n)
    offsets = np.concatenate([[0], np.cumsum(held)]).astype(np.int64)
    m = int(offsets[-1])
    outputs = (np.full(m, -1, dtype=np.int64), np.full(m, -1, dtype=np.int64), np.full(m, np.nan))
    return [((len(held),), (_gpu.TOPK_GATHER_THREADS,), (offsets, cand_items, cand_scores, *outputs))], outputs


@pytest.mark.parametrize("held", [[0, 3, 300, 0, 8192, 1], [257] * 4])
def test_topk_gather_equals_the_model(real, held):
    """topk_gather, as _gpu.top_k launches it, gives the candidates that a scan of the buffers' held
    slots gave before it (cupy.nonzero over slot < count, row by row), with their rows."""
    launches, outputs = topk_gather_case(sum(held), held)
    offsets, cand_items, cand_scores = launches[0][2][:3]
    want = run(gpu_model.topk_gather, launches, outputs)
    local, slot = np.nonzero(np.arange(gpu_model.TOPK_CAPACITY)[None, :] < np.array(held)[:, None])
    np.testing.assert_array_equal(want[0], local)
    np.testing.assert_array_equal(want[1], cand_items.reshape(len(held), -1)[local, slot])
    np.testing.assert_array_equal(want[2], cand_scores.reshape(len(held), -1)[local, slot])
    for schedule, block_order, seed in SCHEDULES:
        got = run(real["topk_tile"].get_function("topk_gather"), launches, outputs, schedule=schedule,
                  block_order=block_order, seed=seed)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("old, new", [  # (the kernel's text, a mutant's)
    ("items[c0 + i] = cand_items[b * TOPK_CAPACITY + i];", "items[c0 + i] = cand_items[c0 + i];"),  # packed buffers
    ("local[c0 + i] = b;", "local[c0 + i] = c0;"),  # the entry for the row
    ("for (int i = threadIdx.x; i < m; i += blockDim.x) {\n        local", "for (int i = threadIdx.x; i <= m; "
     "i += blockDim.x) {\n        local"),  # one past the row
])
def test_topk_gather_mutants_are_caught(real, old, new):
    source = mutate((KERNELS / "topk_tile.cu").read_text(), old, new)
    kernel = module("topk_tile", source).get_function("topk_gather")
    launches, outputs = topk_gather_case(7, [0, 3, 300, 0, 1])
    want = run(gpu_model.topk_gather, launches, outputs)
    try:
        got = run(kernel, launches, outputs, schedule="forward")
    except EmulationError:  # (a write past the flat arrays)
        return
    assert not all(np.array_equal(g, w) for g, w in zip(got, want))


def topk_select_case(seed, sizes, k, distinct_keys=True):
    """Rows of `sizes` candidates for topk_select, as _gpu.top_k hands them over: defined scores with
    ties (0.0 and -0.0 among them), NaNs of both signs and infinities; tie keys as gr_tie_key makes
    them (high bits random, low bits the item: distinct in a row), or with repeats (the kernel must
    not rely on distinct keys); the outputs' rows prefilled with -1 and NaN."""
    rng = np.random.default_rng(seed)
    m = int(sum(sizes))
    scores = np.round(rng.standard_normal(m), 1)
    special = rng.random(m)
    for low, value in ((0.0, 0.0), (0.05, -0.0), (0.1, np.nan), (0.12, -np.nan), (0.14, np.inf), (0.16, -np.inf)):
        scores[(special >= low) & (special < low + (0.05 if low < 0.1 else 0.02))] = value
    items = np.concatenate([rng.choice(20 * n + 1, n, replace=False) for n in sizes]).astype(np.int64)
    if distinct_keys:
        keys = (rng.integers(0, 4, size=m).astype(np.uint64) << np.uint64(32)) | items.astype(np.uint64)
    else:
        keys = rng.integers(0, 3, size=m).astype(np.uint64) * np.uint64(1 << 62)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    outputs = (np.full(len(sizes) * k, -1, dtype=np.int64), np.full(len(sizes) * k, np.nan))
    return [((len(sizes),), (_gpu.TOPK_SELECT_THREADS,), (offsets, items, scores, keys, np.int64(k), *outputs))], outputs


@pytest.mark.parametrize("sizes, k", [([0, 1, 5, 0, 300, 2], 3), ([1030, 7, 2100], 1000), ([40] * 5, 64),
                                      ([8192], 1024)])
def test_topk_select_equals_the_model(real, sizes, k):
    """topk_select, as _gpu.top_k launches it, chooses each row's k best candidates as the model and
    as the host's select_top_k (one lexsort of the batch): rows of no candidate, fewer than k, more
    than the block's threads, than a chunk of shared memory (two and three chunks), a buffer's 8,192;
    equal scores, NaN (never chosen), -0.0 (chosen as 0.0), infinities; keys repeated or not."""
    for distinct in (True, False):
        launches, outputs = topk_select_case(len(sizes) + k, sizes, k, distinct)
        offsets, items, scores, keys = launches[0][2][:4]
        want = run(gpu_model.topk_select, launches, outputs)
        if distinct:  # the host's choice, a sort of the whole batch (its ties: the entries' order)
            local = np.repeat(np.arange(len(sizes)), sizes)
            host = select_top_k(np, local, items, scores, keys, len(sizes), k)
            np.testing.assert_array_equal(want[0], host[0].reshape(-1))
            np.testing.assert_array_equal(want[1].view(np.uint64), host[1].reshape(-1).view(np.uint64))
        numbers = [int((~np.isnan(scores[a:b])).sum()) for a, b in zip(offsets[:-1], offsets[1:])]
        assert [int((row >= 0).sum()) for row in want[0].reshape(len(sizes), k)] == [min(k, n) for n in numbers]
        for schedule, block_order, seed in SCHEDULES[:2 if sum(sizes) > 4000 else 3]:
            got = run(real["topk_tile"].get_function("topk_select"), launches, outputs,
                      schedule=schedule, block_order=block_order, seed=seed)
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[1].view(np.uint64), want[1].view(np.uint64))  # -0.0 as 0.0, NaN's


@pytest.mark.parametrize("file, old, new", [  # (a file, its text, a mutant's): gr_count_before is common.cuh's
    ("common.cuh", "above += oj > o;", "above += oj < o;"),  # the worse score first
    ("common.cuh", "o && (kj < k ||", "o && (kj > k ||"),  # the larger tie key first
    ("common.cuh", "(kj == k && j0 + j < i)", "(kj == k && j < i)"),  # entries of a later chunk compared as if in the first
    ("common.cuh", "if (same > (i >= j0 && i < j0 + n)) {", "if (same > 1) {"),  # a tie with one of another chunk missed
    ("topk_tile.cu", "sh_order[j] = isnan(sj) ? 0 : gr_order_key(sj);", "sh_order[j] = gr_order_key(sj);"),  # a NaN first
    ("topk_tile.cu", "out_scores[b * k + place] = gr_add(s, 0.0);", "out_scores[b * k + place] = s;"),  # -0.0 kept
    ("topk_tile.cu", "const int n = min(TOPK_SELECT_CHUNK, m - j0);", "const int n = min(TOPK_SELECT_CHUNK, m);"),  # past
])
def test_topk_select_mutants_are_caught(real, file, old, new, tmp_path):
    kernel = mutated_module(tmp_path, "topk_tile", file, old, new).get_function("topk_select")
    differs = []
    for sizes, k, distinct in (([0, 1, 5, 0, 300, 2], 3, False), ([1030, 7, 2100], 1000, True)):
        launches, outputs = topk_select_case(len(sizes) + k, sizes, k, distinct)
        want = run(gpu_model.topk_select, launches, outputs)
        try:
            got = run(kernel, launches, outputs, schedule="forward")
        except EmulationError:  # (an access past the row's candidates)
            differs.append(True)
            continue
        differs.append(not (np.array_equal(got[0], want[0]) and
                            np.array_equal(got[1].view(np.uint64), want[1].view(np.uint64))))
    assert any(differs)


@pytest.mark.parametrize("mutant", FUSED_MUTANTS)
def test_fused_rank_mutants_are_caught(real, mutant, tmp_path):
    p = Problem(seed=45, dtype=np.float32, n_users=130, n_items=1500, n_factors=11, integer=True, train_density=0.2,
                test_density=0.008)  # 12 test items a user: a block's in shared memory
    # Warp 3 counts rows 3, 11, .., 123; with no test items there it has no queue to settle and
    # ends a tile well before the other warps, then writes the next tile's training bits of rows
    # 96-127 and factors over the stage, which the others read later: the race that the barrier
    # after a tile prevents shows (the emulator switches threads only at barriers and warp intrinsics).
    p.test[np.arange(3, 130, 8)] = False
    p.with_a_nan_among_finite_scores()
    launches, outputs = p.fused_launches(np.arange(130, dtype=np.int64), 768)
    want = run(gpu_model.fused_rank, launches, outputs)
    assert not caught(real["fused_rank"].get_function("fused_rank_f32"), launches, outputs, want, rank_outputs)
    mutated = mutated_module(tmp_path, "fused_rank", *FUSED_MUTANTS[mutant])
    assert caught(mutated.get_function("fused_rank_f32"), launches, outputs, want, rank_outputs)


def item_bound_problem(seed=52):
    """A fused_rank problem where the bound per item matters (float32, no biases): half the items
    with a 64th of the others' norm, many inside a user's band but outside their own; 200 items
    that copy a test item's factors (a tie in defined score, whose filter scores differ from it
    by rounding alone: only the defined score and the tie keys may place them)."""
    p = Problem(seed=seed, dtype=np.float32, n_users=130, n_items=3000, n_factors=16, bias=False,
                train_density=0.05, test_density=0.01)
    rng = np.random.default_rng(seed)
    p.B[rng.random(p.n_items) < 0.5] *= np.float32(1 / 64)
    tests = np.flatnonzero(p.test.any(axis=0))
    copies = rng.choice(np.setdiff1d(np.arange(p.n_items), tests), 200, replace=False)
    p.B[copies] = p.B[rng.choice(tests, 200)]
    return p


@pytest.mark.parametrize("tf32", [False, True])
def test_fused_rank_with_the_bound_per_item_equals_the_model(real, tf32):
    """A deferred item checked against its own bound (p n_j + q) before its defined score is
    counted where the defined score would count it, or still deferred: the model's counts."""
    p = item_bound_problem()
    launches, outputs = p.fused_launches(np.arange(130, dtype=np.int64), 768, tf32=tf32)
    want = run(gpu_model.fused_rank, launches, outputs)
    assert not caught(real["fused_rank"].get_function(f"fused_rank_{'tf32' if tf32 else 'f32'}"), launches, outputs,
                      want, counts_and_flags)


def counts_and_flags(outputs):
    """The outputs that do not depend on the filter's rounding: the counts, whether each pool is
    finite (the pool's minimum and maximum are filter scores, as BLAS's and the kernel's differ)."""
    return [outputs[0].tolist(), pool(*outputs[1:])[0].tolist()]


ITEM_BOUND_MUTANTS = {  # (file, old, new): the check of a deferred item against its own bound
    "an item's own bound far too tight (ties placed by rounding)": (
        "fused_rank_body.cuh", "const double own = fma(", "const double own = 0x1p-30 * fma("),
    "an item placed by its own bound counted from the other end (the check places items)": (
        "fused_rank_body.cuh", "c = gr_place(mine, m, top, mine.low(m - 1), v);",
        "c = gr_place(mine, m, top, mine.low(m - 1), v); c = c >= 0 ? m - 1 - c : c;"),
}


@pytest.mark.parametrize("mutant", ITEM_BOUND_MUTANTS)
def test_fused_rank_item_bound_mutants_are_caught(mutant, tmp_path):
    p = item_bound_problem()
    launches, outputs = p.fused_launches(np.arange(130, dtype=np.int64), 768)
    want = run(gpu_model.fused_rank, launches, outputs)
    mutated = mutated_module(tmp_path, "fused_rank", *ITEM_BOUND_MUTANTS[mutant])
    assert caught(mutated.get_function("fused_rank_f32"), launches, outputs, want, counts_and_flags)


TF32_MUTANTS = {  # (file, old, new): fused_rank_tf32's own code (score_tile.cuh's TF32 tile, TensorTile)
    "a correction product left out": ("score_tile.cuh", "                gr_mma_tf32(correction, hi.v, row_lo[n]);\n", ""),
    "the correction never added": ("score_tile.cuh", "acc[m][n][i] = __fadd_rn(acc[m][n][i], correction[i]);",
                                   "acc[m][n][i] = acc[m][n][i];"),
    "a row's factors q + 4 as q": ("score_tile.cuh", "row_hi[n][1] = hi.v[1]", "row_hi[n][1] = hi.v[0]"),
    "the rows' reads unswizzled": ("score_tile.cuh", "const int c = gr_swizzle(q, r0 + 8 * n);",
                                   "const int c = r0 + 8 * n;"),
    "the items' quads from the wrong part": ("score_tile.cuh", "lo = sm.b[1][8 * m + g][q];", "lo = sm.b[0][8 * m + g][q];"),
    "a lane's items eight apart the other way": ("score_tile.cuh", "+ 8 * j + g; }", "+ 8 * (j ^ 1) + g; }"),
    "a round's scores from the other row of its pair": ("score_tile.cuh", "[2 * (c & 1) + (k & 1)]",
                                                        "[2 * (c & 1) + (~k & 1)]"),
    "a last step's factors past F loaded": ("score_tile.cuh", "a_row && k < n ? a_row[k] : 0.0f;\n            const float* "
                                            "item = s & 1 ? b_item8 : b_item;\n            rb[s] = item && kb < n ?",
                                            "a_row ? a_row[k] : 0.0f;\n            const float* item = s & 1 ? "
                                            "b_item8 : b_item;\n            rb[s] = item ?"),
}


def _counted(o):  # the counts and which pools are finite (the statistics are filter scores)
    return o[0].tolist(), pool(*o[1:])[0].tolist()


@pytest.fixture(scope="module")
def tf32_runs():
    """fused_rank_tf32's launches on normal factors (the parts' low halves not zero) and on
    integer ones (two row blocks; the pool statistics exact), the model's outputs, a comparison."""
    problems = [Problem(seed=50, dtype=np.float32, n_users=40, n_items=900, n_factors=13, test_density=0.03),
                Problem(seed=51, dtype=np.float32, n_users=130, n_items=400, n_factors=11, integer=True,
                        test_density=0.02)]
    runs = []
    for p, compare in zip(problems, (_counted, rank_outputs)):
        launches, outputs = p.fused_launches(np.arange(p.A.shape[0], dtype=np.int64), 256, tf32=True)
        runs.append((launches, outputs, run(gpu_model.fused_rank, launches, outputs), compare))
    return runs


def test_fused_rank_tf32_passes_its_mutants_problems(real, tf32_runs):
    assert not any(caught(real["fused_rank"].get_function("fused_rank_tf32"), *r) for r in tf32_runs)


@pytest.mark.parametrize("mutant", TF32_MUTANTS)
def test_fused_rank_tf32_mutants_are_caught(mutant, tmp_path, tf32_runs):
    """Each seeded bug in fused_rank_tf32's tensor-core tile or its layout gives, under some
    schedule, other counts or flags than the model's on one of tf32_runs' problems (which the
    kernel itself passes: the test above)."""
    mutated = mutated_module(tmp_path, "fused_rank", *TF32_MUTANTS[mutant])
    assert any(caught(mutated.get_function("fused_rank_tf32"), *r) for r in tf32_runs)


FUSED_TOPK_MUTANTS = {  # (old, new, occurrence) in topk_tile.cu
    "a candidate equal to the threshold left out": ("else if (s >= at_least)", "else if (s > at_least)", 1),
    "non-finite scores never looked at": ("if (hit || check != check)", "if (hit)", 1),
    "flagged users not skipped": ("if (t < n_rows && !overflow[b0 + t])", "if (t < n_rows)", 1),
    "a candidate's bias left out": ("return bias ? acc[i][j] + sh_bias[tile.col(i, j)] : acc[i][j];",
                                    "return acc[i][j];", 1),
    "the buffer's last slot left empty": ("if (p < TOPK_CAPACITY) {", "if (p + 1 < TOPK_CAPACITY) {", 1),
    "a finished buffer cut below the k-th": ("    topk_shrink(cand_scores + b * TOPK_CAPACITY, cand_items + b * "
                                             "TOPK_CAPACITY, k, 2.0 * tol[b], sh);",
                                             "    topk_shrink(cand_scores + b * TOPK_CAPACITY, cand_items + b * "
                                             "TOPK_CAPACITY, k + 1, 2.0 * tol[b], sh);", 1),
}


@pytest.mark.parametrize("mutant", FUSED_TOPK_MUTANTS)
def test_fused_topk_mutants_are_caught(real, mutant, tmp_path):
    old, new, occurrence = FUSED_TOPK_MUTANTS[mutant]
    mutated = mutated_module(tmp_path, "topk_tile", "topk_tile.cu", old, new, occurrence)
    if "finish" in mutant:  # topk_finish after the tiles, as in test_topk_finish_equals_the_model
        finish, tiles = Problem(seed=49, n_users=7, n_items=9000).topk_finish_launch(np.arange(7, dtype=np.int64),
                                                                                    5000, 10)
        want = run(gpu_model.topk_finish, finish, tiles)
        assert not caught(real["topk_tile"].get_function("topk_finish"), finish, tiles, want, topk_result)
        assert caught(mutated.get_function("topk_finish"), finish, tiles, want, topk_result)
        return
    if "last slot" in mutant:  # more candidates than the buffer holds
        p = Problem(seed=48, dtype=np.float32, integer=True, n_users=3, n_items=9000, n_factors=2, train_density=0.01)
        launches, outputs = p.fused_topk_launches(np.array([0, 2], dtype=np.int64), 2304, np.full(2, -np.inf))
        compare = fused_topk_held
    else:
        launches, outputs = fused_topk_case(no_candidates="non-finite" in mutant)
        compare = fused_topk_result
    want = run(gpu_model.fused_topk, launches, outputs)
    assert not caught(real["topk_tile"].get_function("fused_topk_f32"), launches, outputs, want, compare)
    assert caught(mutated.get_function("fused_topk_f32"), launches, outputs, want, compare)


def fused_topk_case(no_candidates=False):
    """The launch of FUSED_TOPK_CASES' "one-row-block" (biases; a tenth of the users flagged before
    it); with `no_candidates` every threshold +inf (a thread's NaN scores alone send it down the full path)."""
    kw, batch, span = FUSED_TOPK_CASES["one-row-block"]
    p = Problem(dtype=np.float32, integer=True, **kw)
    rng = np.random.default_rng(kw["seed"])
    threshold = fused_topk_thresholds(p, batch, rng)
    if no_candidates:
        threshold[:] = np.inf
    return p.fused_topk_launches(batch.astype(np.int64), span, threshold, rng.random(batch.shape[0]) < 0.1)


TOPK_TF32_MUTANTS = {  # (file, old, new): TensorTile's rounds and training bits, fused_topk_tf32's alone (fused_rank
    # stages its tile's scores and counts them in its own order)
    "the training bits of a lane's items not gathered in a byte": ("score_tile.cuh",
                                                                   "return 16 * (c & 7) + (c >> 3); }", "return c; }"),
    "a lane's byte of the next lane's items": ("score_tile.cuh", "(HALVES * g + rho % HALVES)",
                                               "(HALVES * ((g + 1) & 7) + rho % HALVES)"),
    "a half-row round's items from the other half": ("score_tile.cuh", "return 64 * (rho % HALVES) +",
                                                     "return 64 * ((rho + 1) % HALVES) +"),
    "a half-row round's training bits from the other half": ("score_tile.cuh", "(HALVES * g + rho % HALVES)",
                                                             "(HALVES * g + (rho + 1) % HALVES)"),
    "a half-row round's scores from the other half": ("score_tile.cuh", "c = 8 * (rho % HALVES) + j;",
                                                      "c = 8 * ((rho + 1) % HALVES) + j;"),
}


@pytest.mark.parametrize("mutant", ["a lane's items eight apart the other way",
                                    "a round's scores from the other row of its pair", "the rows' reads unswizzled",
                                    "the items' quads from the wrong part",
                                    *TOPK_TF32_MUTANTS])
def test_fused_topk_tf32_mutants_are_caught(real, mutant, tmp_path):
    """fused_topk_tf32 scores its tile as fused_rank_tf32 does (score_tile.cuh: the tensor-core
    tile and TensorTile's layout, in rounds of 8 items; fused_rank_tf32 reads no round):
    TF32_MUTANTS' seeded bugs there that integer factors can show, and its own, give it other
    candidates than the model's (the kernel itself gives the model's)."""
    launches, outputs = fused_topk_case()
    want = run(gpu_model.fused_topk, launches, outputs)
    assert not caught(real["topk_tile"].get_function("fused_topk_tf32"), launches, outputs, want, fused_topk_result)
    mutated = mutated_module(tmp_path, "topk_tile", *{**TF32_MUTANTS, **TOPK_TF32_MUTANTS}[mutant])
    assert caught(mutated.get_function("fused_topk_tf32"), launches, outputs, want, fused_topk_result)


def fused_topk_held(outputs):
    """Per user: its count, and how many distinct items its buffer holds (all of it where full; -1: none)."""
    _, items, count, _ = outputs
    held = [items[b * 8192: b * 8192 + min(int(count[b]), 8192)] for b in range(count.shape[0])]
    return [(int(count[b]), np.unique(h[h >= 0]).shape[0]) for b, h in enumerate(held)]


def test_topk_tile_missing_barrier_is_caught(real):
    p = Problem(seed=22, train_density=0.2)
    launches, outputs = p.topk_launches(np.arange(7, dtype=np.int64), tile=5000, k=10)
    want = run(gpu_model.topk_tile, launches, outputs)
    assert not caught(real["topk_tile"].get_function("topk_tile_f64"), launches, outputs, want, topk_result)
    text = (KERNELS / "topk_tile.cu").read_text()
    barrier = "            atomicOr(&train_bits[j >> 5], 1u << (j & 31));\n        }\n        __syncthreads();"
    source = mutate(text, barrier, barrier.replace("__syncthreads();", ""))
    kernel = module("topk_tile", source).get_function("topk_tile_f64")
    assert caught(kernel, launches, outputs, want, topk_result)


def test_pair_scores_off_by_one_is_caught(real):
    p = Problem(seed=23, n_items=700)
    users, items = np.arange(700, dtype=np.int64) % 7, np.arange(700, dtype=np.int64)
    outputs = (np.zeros(700), np.zeros(700, dtype=np.uint64))
    launches = [((2,), (256,), (users, items, np.int64(700), *p.launch_args(), np.uint64(1), np.int32(0), *outputs))]
    source = mutate((KERNELS / "exact_scores.cu").read_text(), "i < n; i +=", "i <= n; i +=")
    # thread 188 takes i = 700 = n: it reads users[700], the guard zone's poison, as a user index
    with pytest.raises(EmulationError, match=r"pair_scores_f64: block \(0, 0, 0\): thread 188: illegal memory access"):
        run(module("exact_scores", source).get_function("pair_scores_f64"), launches, outputs, schedule="forward")


@pytest.mark.parametrize("file, old, new", [  # (a file, its text, a mutant's): gr_count_before is common.cuh's
    ("common.cuh", "above += oj > o;", "above += oj < o;"),  # the worse score first
    ("common.cuh", "(kj < k ||", "(kj > k ||"),  # the larger tie key first
    ("common.cuh", "(kj == k && j0 + j < i)", "(kj == k && j0 + j > i)"),  # a score's items of one key in reverse
    ("common.cuh", "above += oj > o;", "above += j < n - 1 && oj > o;"),  # the last entry never goes before another
    ("exact_scores.cu", "sh_key[i] = use_keys ? keys[t0 + i] : tie_key;", "sh_key[i] = keys[t0 + i];"),  # tie modes
])
def test_sort_tests_mutants_are_caught(real, file, old, new, tmp_path):
    kernel = mutated_module(tmp_path, "exact_scores", file, old, new).get_function("sort_tests")
    differs = []
    for sizes, tie_mode in (([0, 1, 5, 0, 130, 2], 0), ([40] * 9, 1)):
        tests_begin, scores, keys, entry = sort_tests_case(len(sizes) + tie_mode, sizes)
        m = scores.shape[0]
        outputs = (np.full(m, -1.0), np.zeros(m, dtype=np.uint64), np.full(m, -1, dtype=np.int64))
        launches = [((len(sizes),), (_gpu.SORT_TESTS_THREADS,), (tests_begin, scores, keys, entry, np.uint64(0),
                                                                 np.int32(tie_mode == 0), *outputs))]
        got, want = run(kernel, launches, outputs, schedule="forward"), run(gpu_model.sort_tests, launches, outputs)
        differs.append(not np.array_equal(got[2], want[2]))
    assert any(differs)


def test_wrong_mask_in_common_header_is_caught(real, tmp_path):
    """gr_fold_pool_stats (kernels/common.cuh) with half a warp in its shuffle masks: every
    kernel that includes the copied header reports it."""
    for path in KERNELS.glob("*.cu*"):
        shutil.copy(path, tmp_path / path.name)
    header = (tmp_path / "common.cuh").read_text()
    assert header.count("__shfl_down_sync(0xFFFFFFFFu") == 3
    (tmp_path / "common.cuh").write_text(header.replace("__shfl_down_sync(0xFFFFFFFFu", "__shfl_down_sync(0x0000FFFFu"))
    p = Problem(seed=24, n_items=700)
    launches, outputs = p.rank_launches(np.arange(7, dtype=np.int64), tile=700)
    kernel = module("rank_tile", (tmp_path / "rank_tile.cu").read_text(), include=tmp_path).get_function("rank_tile_f64")
    with pytest.raises(EmulationError, match=r"__shfl_down_sync\(mask 0x0000ffff\) \(.*common.cuh:\d+\) is called by "
                                             r"thread \d+ \(lane (1[6-9]|2\d|3[01])\), which the mask does not name"):
        run(kernel, launches, outputs, schedule="forward")
    stats = module("exact_scores", (tmp_path / "exact_scores.cu").read_text(), include=tmp_path)
    counts, pool_min, pool_max, nonfinite = run(gpu_model.rank_tile, launches, outputs)
    launches, outputs = p.finish_launch(np.arange(7, dtype=np.int64), counts, pool_min, pool_max, nonfinite)
    with pytest.raises(EmulationError, match="which the mask does not name"):  # the recount of users 1 and 2
        run(stats.get_function("finish_batch_f64"), launches, outputs, schedule="forward")
