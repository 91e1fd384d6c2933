"""The GPU backend: cuBLAS score tiles as a filter, our CUDA kernels (kernels/*.cu) for the
training mask, the rank counts, the pool statistics and the top-K candidates.

The design is the CPU backend's (_cpu.py, _cpu_ranks.pyx), tile by tile: the users of a
batch are scored one tile of items at a time (never the whole users x items matrix); the
kernel reads each score once, skips training items (a bitmap of the user's CSR row per
segment), and counts it against the user's test items, sorted by their defined scores.
Comparisons closer than the filter's error bound are settled with the defined score, so
the ranks are those of the CPU backend, bit for bit. Every cupy call goes through
_backend.cupy().
"""
from __future__ import annotations

import functools
import hashlib
import types
from pathlib import Path

import numpy as np

from . import _backend
from ._scores import order_key, row_entries, score_tolerance, select_top_k

RANK_THREADS, RANK_SPAN = 256, 1 << 16  # kernels/rank_tile.cu: threads and items of one block (a whole tile)
TOPK_THREADS, TOPK_CAPACITY, TOPK_MAX_K = 1024, 8192, 1024  # kernels/topk_tile.cu
TOPK_SELECT_THREADS, TOPK_GATHER_THREADS = 256, 256  # kernels/topk_tile.cu topk_select, topk_gather
TOPK_SAMPLE_PIECES = 16  # top_k with FUSED: the sample that sets each user's threshold, in this many pieces
TOPK_SAMPLE_RANK = 64  # top_k with FUSED and k above it: the sample's rank (topk_sample_rank) that sets it
MAGNITUDE_THREADS, MAGNITUDE_BLOCK = 256, 1 << 17  # kernels/magnitudes.cu; values read per block
TRANSPOSE_ROWS = 8  # kernels/magnitudes.cu transpose_f32: a block is 32 x TRANSPOSE_ROWS threads
FINISH_THREADS = 256  # kernels/exact_scores.cu finish_batch: threads of a user's block
SORT_TESTS_THREADS, SORT_TESTS_MAX = 128, 1024  # kernels/exact_scores.cu sort_tests: threads, a user's entries
TILE_ITEMS = 1 << 16  # items scored per cuBLAS call
FUSED_THREADS, FUSED_USERS, FUSED_ITEMS = 256, 128, 128  # kernels/fused_rank.cu: threads, rows, items of a tile
FUSED_SHARED_TESTS = 3840  # test items of a block's users counted in shared memory, a word each (-DFUSED_SHARED_TESTS)
# fused_rank's dynamic shared memory (-DFUSED_STAGE_BYTES): a tile's factors, then its scores, FUSED_USERS rows of
# FUSED_ITEMS + 4 floats (kernels/fused_rank.cu FUSED_PITCH)
FUSED_STAGE_BYTES = FUSED_USERS * (FUSED_ITEMS + 4) * 4
# fused_rank's grid: about FUSED_BLOCKS blocks (15 waves of an H100's 264); a block's items at most FUSED_MAX_SPAN
# (+ FUSED_ITEMS from the rounding), below 2^16 (set when a block's counts were 16 bits; a queued item's offset in
# its span now has 24)
FUSED_BLOCKS, FUSED_MAX_SPAN = 4096, (1 << 16) - 2 * FUSED_ITEMS
# the fused tiles index a row's factors in 32 bits (score_tile.cuh): fewer factors than this (a float32
# model of more is refused by score_tolerance anyway: its bound is infinite)
FUSED_MAX_FACTORS = (1 << 24) - 2
# rank_users scores float32 factor models inside fused_rank.cu (no cuBLAS tiles; TF32 mode on
# tensor cores, fused_rank_tf32) when set, and
# top_k inside topk_tile.cu's fused_topk_f32 (TF32 mode: fused_topk_tf32), after a sample of the
# items, scored by cuBLAS, sets each user's threshold. The same numbers (the emulation, and an
# H100's GPU tests), but off: on an H100 (2026-11-26, speed log session 19) fused_rank takes 0.21 s
# where the tiles take 0.12 s on bench_gpu's problem, and it is slower at every size of the sweep.
FUSED = False
# top_k in TF32 mode scores in fused_topk_tf32 (after the sample's FP32 tiles) even with FUSED off:
# measured on an H100 (10,000 users x 1M items x 128, K = 10 / 100 / 1,000) 0.104 / 0.124 / 0.129 s,
# against the FP32 tiles' 0.133 / 0.136 / 0.162 s, the same lists
TOPK_TF32_FUSED = True
# rank_users in TF32 mode scores in split TF32 tiles only for models of at least this many factors; below,
# in the FP32 tiles (the same numbers). Measured on an H100 (speed log, session 20): at 128 factors the
# split tiles take 0.4-4% less than FP32's (10,000 x 1M, five runs), at 64 factors 5-25% more (10,000 x
# 100,000 and 2,000 x 10M: three writes of each tile where FP32 makes one, for half the products)
TF32_TILES_MIN_FACTORS = 128
DEFAULT_MAX_MEMORY = 1 << 30  # bytes of workspace: score tiles, test items, candidates
_modules = {}
_fused_rank_fits = {}  # device id: fused_rank_fits()


def kernels_dir():
    """kernels/ inside an installed wheel (gpureco/kernels) or beside the package in a checkout."""
    package = Path(__file__).resolve().parent.parent
    for folder in (package / "kernels", package.parent / "kernels"):
        if (folder / "common.cuh").is_file():
            return folder
    raise RuntimeError(f"gpureco: the CUDA kernels (kernels/*.cu) are missing from this installation ({package}).")


@functools.cache
def kernels_hash():
    """A hash of every kernel file, headers included: part of the compile options, so CuPy's
    on-disk cache (keyed by source and options) is renewed when any of them changes."""
    digest = hashlib.sha256()
    for path in sorted(kernels_dir().glob("*.cu*")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def compile_options():
    return ("-std=c++17", f"-I{kernels_dir()}", f"-DGPURECO_KERNELS_HASH=0x{kernels_hash()}", f"-DRANK_SPAN={RANK_SPAN}",
            f"-DFUSED_SHARED_TESTS={FUSED_SHARED_TESTS}", f"-DFUSED_STAGE_BYTES={FUSED_STAGE_BYTES}")


def kernel(file, name):
    """A function of kernels/<file>.cu, compiled once per process and device (cached on disk by CuPy)."""
    cp = _backend.cupy()
    key = (file, cp.cuda.Device().id)
    if key not in _modules:
        source = (kernels_dir() / f"{file}.cu").read_text()
        _modules[key] = cp.RawModule(code=source, options=compile_options())
    return _modules[key].get_function(name)


def fused_rank_fits():
    """Whether a block of fused_rank fits the device's shared memory: its static memory and the stage (dynamic,
    FUSED_STAGE_BYTES), which a block must opt in to past 48 KB. An H100 or H200 (227 KB a block), an A100 (163 KB)
    and the RTX 30, 40 and 50 series (99 KB) hold it; a T4 (64 KB) or a V100 (96 KB) does not, and rank_users takes
    the tiles there. (A device that does not say, as the NumPy model: it fits.)"""
    device = _backend.cupy().cuda.Device()
    if device.id not in _fused_rank_fits:
        limit = getattr(device, "attributes", {}).get("MaxSharedMemoryPerBlockOptin")
        static = getattr(kernel("fused_rank", "fused_rank_f32"), "shared_size_bytes", 0)
        _fused_rank_fits[device.id] = limit is None or static + FUSED_STAGE_BYTES <= limit
    return _fused_rank_fits[device.id]


def tensor_cores():
    """Whether the device has TF32 tensor cores (sm_80 on): fused_rank_tf32's and
    fused_topk_tf32's mma.sync. Before it, TF32 mode with FUSED takes fused_rank_f32 and
    fused_topk_f32 (the same numbers), where the instruction would be emulated with shuffles."""
    return int(_backend.cupy().cuda.Device().compute_capability) >= 80


def _null():
    return np.uint64(0)  # a null pointer argument


class FactorScores:
    """Score tiles A[users] B[items]^T (+ biases) by cuBLAS, and the defined scores of pairs.

    With `tf32` (float32 factors), a tile is (hi*lo + lo*hi) + hi*hi of split_tf32's parts on
    tensor cores: two GEMMs of inner sizes 2F and F, the second adding to the first, as
    accurate as a float32 GEMM to within a few units (score_tolerance): three times the
    multiply-adds at up to 7 times the throughput (measured on an H100, bench_gpu's problem:
    0.118 s against the FP32 tiles' 0.119 s in one run, the GEMMs' gain, 49 ms against 71, spent
    on the wider bound's defined scores in rank_tile). The parts (tf32_parts, one kernel) of the
    batch's users are made once per batch, those of the items once per tile. Where FUSED (for
    top_k in TF32 mode, TOPK_TF32_FUSED: `top_k`) scores the model instead (no tiles), `tensor`
    is TF32 mode: rank_users launches fused_rank_tf32 and top_k fused_topk_tf32, the same parts
    multiplied on tensor cores inside the kernel, within the "fused" bound of score_tolerance
    (top_k's sample still goes through FP32 tiles). The fused rank kernels also take each item's norm (item_norms), for the bound
    of one item that they check a deferred item against before its defined score."""

    def __init__(self, A, B, biases, tf32=False, top_k=False):
        cp = _backend.cupy()
        self.biases = biases
        self.top_k = top_k
        self.fused_top_k = top_k and bool(tf32) and TOPK_TF32_FUSED
        self.A, self.B = A, B
        self.n_factors = 0 if B is None else B.shape[1]
        self.dtype = np.dtype(np.float64 if B is None else B.dtype)
        self.suffix = "f32" if self.dtype == np.float32 else "f64"
        self.given = B is None  # a non-personalised model: the biases are the scores
        # TF32 mode splits the cuBLAS tiles; where the fused kernels score the model (no tile at
        # all), rank_users and top_k multiply on tensor cores in their fused kernels
        # (fused_rank_tf32, fused_topk_tf32): the same numbers either way
        tf32, fused = bool(tf32) and self.dtype == np.float32, self.fused()
        self.tf32 = tf32 and not fused and self.n_factors >= TF32_TILES_MIN_FACTORS
        self.tensor = tf32 and fused and tensor_cores()
        if B is not None:
            self.item_abs_max = abs_max_columns(B)
            self.bias_abs_max = abs_max_columns(biases.reshape(-1, 1))[0] if biases is not None else cp.zeros(())
            self.item_norm_max = max_row_norm(B)
        self._user_parts = (None, None)  # (user_rows, their split_tf32 parts [hi | lo])
        self._item_parts = None  # a buffer for a tile's parts [lo | hi], or (FP32) its items transposed
        self._item_norms = None

    def itemsize(self):
        return self.dtype.itemsize

    def bytes_per_user(self):
        """Workspace of one user of a batch besides its score row: its factors (and their TF32
        parts), and the float64 temporaries of its error bound (score_tolerance: three at once)."""
        return 8 * self.n_factors * (5 if self.tf32 else 4)

    def fixed_bytes(self, n_items):
        """Workspace besides the batch's: the parts of a tile of items (at most TILE_ITEMS), or
        its items transposed (FP32), or the items' norms for the fused kernels (top_k's sample,
        in FP32 tiles beside them, transposes a piece of the sample at a time: not counted)."""
        if self.fused():
            return 8 * n_items
        return self.n_factors * min(n_items, TILE_ITEMS) * (8 if self.tf32 else 4 if self.dtype == np.float32 else 0)

    def tolerance(self, users, user_rows, tensor=False, item_terms=False):
        """Per user, the bound on |filter score - defined score| (user_rows: self.user_rows(users)):
        cuBLAS's tiles or the fused FP32 kernels, or with `tensor` the fused TF32 kernels'; with
        `item_terms`, (bound, terms): the terms of each item's own (score_tolerance)."""
        if self.given:
            return _backend.cupy().zeros(users.shape[0])
        return score_tolerance(user_rows, self.item_abs_max, self.bias_abs_max, self.dtype,
                               "fused" if tensor else self.tf32, self.item_norm_max, item_terms)

    def item_norms(self):
        """Each item's norm (row_norms), for the fused kernels' bound per item: at the first
        fused batch."""
        if self._item_norms is None:
            self._item_norms = row_norms(self.B)
        return self._item_norms

    def tile(self, user_rows, begin, n, buffer):
        """(scores, leading dimension, given) for items begin .. begin + n of the batch."""
        cp = _backend.cupy()
        if self.given:
            return self.biases[begin:], np.int64(0), np.int32(1)
        scores = buffer[: user_rows.shape[0] * n].reshape(user_rows.shape[0], n)
        if self.tf32:
            f = self.n_factors
            if self._user_parts[0] is not user_rows:
                parts = cp.empty((user_rows.shape[0], 2 * f), dtype=cp.float32)
                self._user_parts = (user_rows, tf32_parts(user_rows, parts))
            users = self._user_parts[1]  # [hi | lo]
            size = 2 * f * min(n, TILE_ITEMS)  # floats of a tile's parts
            if self._item_parts is None or self._item_parts.shape[0] < size:
                self._item_parts = cp.empty(size, dtype=cp.float32)
            for c0 in range(0, n, TILE_ITEMS):  # (more than a tile only on top_k's full-row path)
                c1 = min(n, c0 + TILE_ITEMS)
                part = self._item_parts[: (c1 - c0) * 2 * f].reshape(c1 - c0, 2 * f)
                items = tf32_parts(self.B[begin + c0: begin + c1], part, lo_first=True)  # [lo | hi]
                # the small terms first: whether cuBLAS starts its sum from them or adds them at the
                # end, each rounding of the main sum is within the bound (score_tolerance)
                _backend.gemm_tf32(users, items, scores[:, c0:c1], accumulate=False)  # hi * lo + lo * hi
                _backend.gemm_tf32(users[:, :f], items[:, f:], scores[:, c0:c1], accumulate=True)  # + hi * hi
        elif self.dtype == np.float32 and n <= TILE_ITEMS:
            # the tile's items transposed first (F x n): cuBLAS's kernel for that layout is about 7%
            # faster on an H100 (bench_gemm.py), for a copy of 1/M of the GEMM's memory traffic
            size = self.n_factors * n
            if self._item_parts is None or self._item_parts.shape[0] < size:
                self._item_parts = cp.empty(size, dtype=cp.float32)
            items = transpose(self.B[begin: begin + n], self._item_parts[:size].reshape(self.n_factors, n))
            with _backend.float32_compute():  # never TF32 (CUPY_TF32 notwithstanding)
                cp.matmul(user_rows, items, out=scores)
        else:  # float64, or more than a tile (top_k's full rows)
            with _backend.float32_compute():
                cp.matmul(user_rows, self.B[begin: begin + n].T, out=scores)
        return scores, np.int64(n), np.int32(0)

    def user_rows(self, users):
        return None if self.given else self.A[users]

    def fused(self):
        """Whether rank_users and top_k score in their fused kernels (FUSED, or top_k in TF32 mode by
        TOPK_TF32_FUSED; float32 factors; rank_users where a block of fused_rank fits the device)."""
        return (not self.given and self.dtype == np.float32 and 0 < self.n_factors < FUSED_MAX_FACTORS
                and (FUSED and (self.top_k or fused_rank_fits()) or self.fused_top_k))

    def launch_args(self):
        """A, B, n_factors, bias arguments of the kernels."""
        bias = self.biases if self.biases is not None else _null()
        if self.given:
            return _null(), _null(), np.int64(0), bias
        return self.A, self.B, np.int64(self.n_factors), bias

    def pairs(self, batch, local, items, user_rows, seed, noise):
        """Defined scores and tie keys of (batch[local[i]], items[i]) (int64 device arrays)."""
        return _pair_scores(self, batch[local], items, seed, noise, compute_scores=True)


def abs_max_columns(X):
    """_scores.magnitudes on the device: per column of the C-contiguous 2-d X, the largest finite
    |value| (0 where none), float64; one pass of kernels/magnitudes.cu, no host synchronisation."""
    cp = _backend.cupy()
    out = cp.zeros(X.shape[1], dtype=cp.uint64)
    rows_per_block = max(1, MAGNITUDE_BLOCK // max(1, X.shape[1]))
    blocks = (X.shape[0] + rows_per_block - 1) // rows_per_block
    if blocks and X.shape[1]:
        suffix = "f32" if X.dtype == np.float32 else "f64"
        kernel("magnitudes", f"abs_max_columns_{suffix}")(
            (blocks,), (MAGNITUDE_THREADS,), (X, np.int64(X.shape[0]), np.int64(X.shape[1]), np.int64(rows_per_block),
                                              out))
    return out.view(cp.float64)


def max_row_norm(X):
    """_scores.max_row_norm on the device (0-d float64; squares that underflow are allowed for
    by score_tolerance, as there): the sum of squares in order, one
    thread a row, in one pass of kernels/magnitudes.cu, no host synchronisation."""
    out = _backend.cupy().zeros(1, dtype=np.uint64)
    if X.shape[1]:
        _over_rows("max_row_norm_sq", X, out)
    return _backend.cupy().sqrt(out.view(np.float64)[0])


def tf32_parts(X, out, lo_first=False):
    """_scores.split_tf32 on the device: the parts of the C-contiguous float32 X (n x F) written
    to out (n x 2F), [hi | lo] or [lo | hi], in one pass of kernels/magnitudes.cu."""
    if X.size:
        blocks = int(min(4096, (X.size + MAGNITUDE_THREADS - 1) // MAGNITUDE_THREADS))
        kernel("magnitudes", "split_tf32_f32")(
            (blocks,), (MAGNITUDE_THREADS,), (X, np.int64(X.shape[0]), np.int64(X.shape[1]), out.view(np.uint32),
                                                  np.int32(lo_first)))
    return out


def transpose(X, out):
    """X^T of the C-contiguous float32 X (n x F) into out (F x n, C-contiguous): its bits, by
    kernels/magnitudes.cu transpose_f32."""
    if X.size:
        grid = (-(-X.shape[1] // 32), -(-X.shape[0] // 32))
        kernel("magnitudes", "transpose_f32")(grid, (32, TRANSPOSE_ROWS), (X.view(np.uint32), np.int64(X.shape[0]),
                                                                          np.int64(X.shape[1]), out.view(np.uint32)))
    return out


def row_norms(X):
    """Each row's norm (float64; +inf for a row with a non-finite value): its sum of squares
    in order, as max_row_norm's, and its square root, in one pass of kernels/magnitudes.cu."""
    out = _backend.cupy().empty(X.shape[0])
    _over_rows("row_norms", X, out)
    return out


def _over_rows(name, X, out):
    """A kernels/magnitudes.cu kernel over the rows of X, one thread a row (a grid-stride loop)."""
    if X.shape[0]:
        blocks = int(min(4096, (X.shape[0] + MAGNITUDE_THREADS - 1) // MAGNITUDE_THREADS))
        kernel("magnitudes", f"{name}_{'f32' if X.dtype == np.float32 else 'f64'}")(
            (blocks,), (MAGNITUDE_THREADS,), (X, np.int64(X.shape[0]), np.int64(X.shape[1]), out))


def _pair_scores(scorer, users, items, seed, noise, compute_scores):
    cp = _backend.cupy()
    scores, keys = cp.empty(users.shape[0]), cp.empty(users.shape[0], dtype=cp.uint64)
    if users.shape[0]:
        blocks = int(min(65535, (users.shape[0] + 255) // 256))
        kernel("exact_scores", f"pair_scores_{scorer.suffix}")(
            (blocks,), (256,), (users, items, np.int64(users.shape[0]), *scorer.launch_args(), np.uint64(seed),
                                np.int32(noise), scores if compute_scores else _null(), keys))
    return scores, keys


class GivenScores:
    """Scores given by the caller (a matrix or a function of user ids): they are the defined
    scores, float64, read by the kernels in place of cuBLAS tiles (no error bound)."""
    given, n_factors, tf32, tensor, biases, suffix = True, 0, False, False, None, "f64"
    dtype = np.dtype(np.float64)

    def __init__(self, score_rows):
        self.score_rows = score_rows

    def itemsize(self):
        return 8

    def bytes_per_user(self):
        return 0

    def fixed_bytes(self, n_items):
        return 0

    def fused(self):
        return False

    def tolerance(self, users, user_rows, tensor=False):
        return _backend.cupy().zeros(users.shape[0])

    def user_rows(self, users):
        return _backend.cupy().ascontiguousarray(self.score_rows(users), dtype=np.float64)

    def tile(self, user_rows, begin, n, buffer):
        return user_rows[:, begin:], np.int64(user_rows.shape[1]), np.int32(1)

    def launch_args(self):
        return _null(), _null(), np.int64(0), _null()

    def pairs(self, batch, local, items, user_rows, seed, noise):
        _, keys = _pair_scores(self, batch[local], items, seed, noise, compute_scores=False)
        return user_rows[local, items], keys


class GpuRanking:
    """Ranks, pool minimum, maximum and non-finite flag of every evaluated user, and, when
    asked, the test entries' defined scores: views of one device buffer, so that host() copies
    them back at once (xp: cupy; numpy for that copy)."""

    def __init__(self, xp, n_users, nnz_test, with_scores=False, buffer=None):
        self.layout = (n_users, nnz_test, with_scores)
        floats = 2 * n_users + (nnz_test if with_scores else 0)
        if buffer is None:  # ranks 0; pool statistics and test scores NaN; flags 0
            buffer = xp.zeros(nnz_test + floats + -(-n_users // 8), dtype=xp.int64)
            buffer[nnz_test: nnz_test + floats].view(xp.float64).fill(np.nan)
        self.buffer = buffer
        self.ranks = buffer[:nnz_test]
        stats = buffer[nnz_test: nnz_test + floats].view(xp.float64)
        self.pool_min, self.pool_max = stats[:n_users], stats[n_users: 2 * n_users]
        self.test_scores = stats[2 * n_users:] if with_scores else None
        self.nonfinite = buffer[nnz_test + floats:].view(xp.uint8)[:n_users]

    def host(self):
        """The same on the host, in one copy."""
        copy = getattr(self.buffer, "get", None)  # (NumPy arrays: the tests' model of the device)
        return GpuRanking(np, *self.layout, buffer=np.asarray(self.buffer if copy is None else copy()))

    def part(self, lo, hi, event, indptr, stream):
        """The ranks, pool statistics and test scores of the rows lo .. hi - 1 and of their test
        entries (indptr: the test CSR's) on the host, copied on `stream` once it has reached
        `event`; all rows: host() (one copy)."""
        if (lo, hi) == (0, self.layout[0]):
            return self.host()  # (a copy on the current stream: after the last batch)
        rows, entries = slice(lo, hi), slice(int(indptr[lo]), int(indptr[hi]))
        stream.wait_event(event)
        cp = _backend.cupy()
        return types.SimpleNamespace(ranks=cp.asnumpy(self.ranks[entries], stream=stream),
                                     pool_min=cp.asnumpy(self.pool_min[rows], stream=stream),
                                     pool_max=cp.asnumpy(self.pool_max[rows], stream=stream),
                                     nonfinite=cp.asnumpy(self.nonfinite[rows], stream=stream),
                                     test_scores=None if self.test_scores is None
                                     else cp.asnumpy(self.test_scores[entries], stream=stream))


def batches(n_users, first_size, run):
    """Call run(begin, end) over [0, n_users) in batches, halving the batch when memory runs out;
    yields each (begin, end) once its run has returned (a generator: iterate it to the end).

    CuPy's allocator raises cupy.cuda.memory.OutOfMemoryError, a MemoryError; its sorts (Thrust)
    report a failed scratch allocation as a plain MemoryError (CuPy 14.1 on): both halve.
    """
    cp = _backend.cupy()
    size, begin = max(1, first_size), 0
    while begin < n_users:
        end = min(n_users, begin + size)
        try:
            run(begin, end)
        except MemoryError as error:
            cp.get_default_memory_pool().free_all_blocks()
            if size == 1:
                raise MemoryError(f"gpureco: one user does not fit in GPU memory ({error}); lower 'max_memory' "
                                  "or free GPU memory.") from error
            size = max(1, size // 2)
            continue
        yield begin, end
        begin = end


def _batch_size(n_items, bytes_per_item_and_user, bytes_per_user, max_memory, batch_size):
    if batch_size is not None:
        return batch_size
    tile = min(n_items, TILE_ITEMS)
    return max(1, int(max_memory // (tile * bytes_per_item_and_user + bytes_per_user)))


def _device_csr(X, cache=None):
    """X's indptr and indices in GPU memory; kept in `cache` (Problem.cache: an Evaluator's
    interactions are copied once, not at every call)."""
    cache = {} if cache is None else cache
    if id(X) not in cache:  # the entry keeps X alive, so its id is not reused while cached
        cp = _backend.cupy()
        cache[id(X)] = (X, cp.asarray(X.indptr), cp.asarray(X.indices))
    return cache[id(X)][1:]


def rank_users(problem, users, scorer, batch_size=None, max_memory=DEFAULT_MAX_MEMORY, tie_mode=0,
               with_scores=False, consume=None):
    """Rank the test items of `users` (sorted host int64 row indices): _cpu.rank_users on the GPU,
    tie modes and test scores included. With `consume`, also consume(lo, hi, part) for each
    batch in turn, part the results of the rows lo .. hi - 1 on the host (GpuRanking.part; the
    parts cover every row, in order), a batch's part once the next batch is on the device, so
    that the host's work on it (the metrics) overlaps the device's."""
    cp = _backend.cupy()
    train_indptr, train_indices = _device_csr(problem.X_train, problem.cache)
    result = GpuRanking(cp, problem.n_users, problem.X_test.nnz, with_scores)
    n_items = problem.n_items
    max_test = int(np.diff(problem.X_test.indptr)[users].max(initial=0))
    per_user = scorer.bytes_per_user() + 32 * max_test + 64 + (16 * n_items if isinstance(scorer, GivenScores) else 0)
    # given scores: whole rows
    fused = scorer.fused()  # no score tiles
    rows = _batch_size(n_items, 0 if fused else scorer.itemsize(), per_user,
                       max_memory - scorer.fixed_bytes(n_items), batch_size)
    users_d = cp.asarray(users)
    buffers = {}
    rank = kernel("rank_tile", f"rank_tile_{scorer.suffix}")
    finish = kernel("exact_scores", f"finish_batch_{scorer.suffix}")
    # the tie modes: the pool's keys are item + 1 (noise 2), the test items' 0 or UINT64_MAX
    seed, noise = np.uint64(problem.seed), np.int32(2 if tie_mode else problem.break_ties_with_noise)

    def run(begin, end):
        nb = end - begin
        batch_users = users[begin:end]
        if fused:  # rows in blocks of about equal test items (the kernel's outputs go back per user and entry)
            batch_users = batch_users[fused_rows(np.diff(problem.X_test.indptr)[batch_users])]
        # the batch's test entries, found on the host (the CSR offsets are there) and copied at once
        local, entry, tests_begin = row_entries(np, problem.X_test.indptr, batch_users)
        m = entry.shape[0]
        packed = cp.asarray(np.concatenate([local, entry, problem.X_test.indices[entry], tests_begin]
                                           + ([batch_users] if fused else [])))
        local, entry, items = packed[:m], packed[m: 2 * m], packed[2 * m: 3 * m]
        tests_begin = packed[3 * m: 3 * m + nb + 1]
        batch = packed[3 * m + nb + 1:] if fused else users_d[begin:end]
        # sorted best-first per user by defined score, then tie key
        user_rows = scorer.user_rows(batch)
        scores, keys = scorer.pairs(batch, local, items, user_rows, problem.seed, problem.break_ties_with_noise)
        scores, keys, entry = sort_tests(tests_begin, local, entry, scores, keys, tie_mode, max_test)
        counts = cp.zeros(m, dtype=cp.int32)
        pool_min = cp.full(nb, np.iinfo(np.uint64).max, dtype=cp.uint64)
        pool_max = cp.zeros(nb, dtype=cp.uint64)
        nonfinite = cp.zeros(nb, dtype=cp.int32)
        if fused:  # one launch: the kernel scores and counts
            # (a deferred item is checked against its own bound, from its norm, first)
            tol, item_terms = scorer.tolerance(batch, user_rows, tensor=scorer.tensor, item_terms=True)
            grid, span = fused_grid(nb, n_items)
            fused_rank = kernel("fused_rank", "fused_rank_tf32" if scorer.tensor else "fused_rank_f32")
            fused_rank.max_dynamic_shared_size_bytes = FUSED_STAGE_BYTES  # (with its static memory, over 48 KB a block)
            fused_rank(grid, (FUSED_THREADS,),
                       (user_rows, scorer.B, np.int64(scorer.n_factors), scorer.launch_args()[3], np.int64(n_items),
                        np.int64(span), np.int64(nb), batch, train_indptr, train_indices, tests_begin, scores, keys,
                        counts, pool_min, pool_max, nonfinite, tol, scorer.item_norms(), item_terms, seed, noise),
                       shared_mem=FUSED_STAGE_BYTES)
        else:  # a score tile at a time, counted by rank_tile
            tol = scorer.tolerance(batch, user_rows, tensor=scorer.tensor)
            tile = min(n_items, TILE_ITEMS)
            if nb not in buffers:
                buffers.clear()
                buffers[nb] = None if scorer.given else cp.empty(nb * tile, dtype=scorer.dtype)
            for item_begin in range(0, n_items, tile):
                n = min(tile, n_items - item_begin)
                S, ld, given = scorer.tile(user_rows, item_begin, n, buffers[nb])
                rank((nb, (n + RANK_SPAN - 1) // RANK_SPAN), (RANK_THREADS,),
                     (S, ld, given, np.int64(item_begin), np.int64(n), batch, train_indptr, train_indices,
                      tests_begin, scores, keys, counts, pool_min, pool_max, nonfinite, tol, *scorer.launch_args(),
                      seed, noise))
        # the pool statistics (those the filter cannot settle from the defined scores) and the
        # ranks, into `result`: one launch, no synchronisation
        finish((nb,), (FINISH_THREADS,), (
            batch, tests_begin, counts, scores, entry, tol, np.int32(scorer.given), np.int32(tie_mode), np.int64(n_items),
            train_indptr, train_indices, *scorer.launch_args(), pool_min, pool_max, nonfinite, result.ranks,
            result.test_scores if with_scores else _null(), result.pool_min, result.pool_max, result.nonfinite))

    if consume is None:
        for _ in batches(users.shape[0], rows, run):
            pass
        return result
    # each batch's results to the host while the next batch runs: a copy on the current stream
    # would wait for the next batch's kernels, queued before it; on a stream of its own (non-blocking:
    # not ordered behind the legacy default stream's work) it waits only for the event recorded after
    # the batch's last kernel
    copies = None  # that stream, made at the first part of fewer than all rows

    def deliver(lo, hi, event):
        nonlocal copies
        if copies is None and (lo, hi) != (0, problem.n_users):
            copies = cp.cuda.Stream(non_blocking=True)
        consume(lo, hi, result.part(lo, hi, event, problem.X_test.indptr, copies))

    done = (0, problem.n_users, None)  # (no user to rank: every row's part, as initialised)
    for begin, end in batches(users.shape[0], rows, run):
        if begin > 0:
            deliver(*done)
        event = cp.cuda.Event(disable_timing=True)
        event.record()
        done = (0 if begin == 0 else int(users[begin]), problem.n_users if end == users.shape[0] else int(users[end]),
                event)
    deliver(*done)
    return result


def sort_tests(tests_begin, local, entry, scores, keys, tie_mode, max_test):
    """(scores, keys, entry) of a batch's test entries sorted best-first per user (local: each
    entry's row in the batch, tests_begin: where each row's entries begin): by defined score,
    larger first (order_key), then tie key, then entry. In the tie modes every key is the same
    (0 optimistic, the largest pessimistic), so that a score's test items keep their order.
    One launch of kernels/exact_scores.cu sort_tests where no user has more than SORT_TESTS_MAX
    entries (its cost grows as their square), else cupy.lexsort (Thrust's sort: some 14 launches,
    its scratch and a dozen array operations around it); the same order either way."""
    cp = _backend.cupy()
    tie_key = np.uint64(0 if tie_mode == 1 else np.iinfo(np.uint64).max)
    if max_test <= SORT_TESTS_MAX:
        out = cp.empty_like(scores), cp.empty_like(keys), cp.empty_like(entry)
        kernel("exact_scores", "sort_tests")((tests_begin.shape[0] - 1,), (SORT_TESTS_THREADS,), (
            tests_begin, scores, keys, entry, tie_key, np.int32(tie_mode == 0), *out))
        return out
    if tie_mode:  # equal keys: the test items of one score by ascending item (entry)
        keys = cp.full(scores.shape[0], tie_key, dtype=cp.uint64)
        order = cp.lexsort(cp.stack([entry.astype(cp.uint64), keys, ~order_key(cp, scores), local.astype(cp.uint64)]))
    else:
        order = cp.lexsort(cp.stack([keys, ~order_key(cp, scores), local.astype(cp.uint64)]))
    return scores[order], keys[order], entry[order]


def fused_grid(n_users, n_items):
    """(grid, span) of a fused kernel (fused_rank, fused_topk) over a batch: row blocks of
    FUSED_USERS users x spans of fused_span items."""
    span = fused_span(n_users, n_items)
    return ((n_users + FUSED_USERS - 1) // FUSED_USERS, (n_items + span - 1) // span), span


def fused_rows(n_test):
    """An order of a batch's rows for fused_rank, from each row's number of test items: a
    permutation of range(len(n_test)) whose blocks of FUSED_USERS rows hold about equal numbers
    of test items, so that more blocks count in shared memory (a block's test items at most
    FUSED_SHARED_TESTS; fewer on a GPU of less shared memory: kernels/fused_rank.cu). The
    rows by decreasing number go to the blocks in turn, forward then backward (a snake), each to
    the block's next row, the last block (which may have fewer rows) left out once it is full.
    Any order gives the same numbers: every output goes back per user and entry."""
    n = n_test.shape[0]
    by_size = np.argsort(-np.asarray(n_test), kind="stable")
    blocks = -(-n // FUSED_USERS)
    if blocks == 1:
        return by_size
    last = n - (blocks - 1) * FUSED_USERS  # rows of the last block
    q = np.arange(n)
    late = q >= last * blocks  # once the last block is full: rounds over the others
    dealt = np.where(late, q - last * blocks, q)
    width = np.where(late, blocks - 1, blocks)  # blocks in a round
    turn = np.where(late, last + dealt // (blocks - 1), dealt // blocks)
    within = dealt % width
    block = np.where(turn % 2 == 0, within, width - 1 - within)
    order = np.empty(n, dtype=by_size.dtype)
    order[block * FUSED_USERS + turn] = by_size
    return order


def fused_span(n_users, n_items):
    """Items of one fused block (fused_rank, fused_topk): a multiple of FUSED_ITEMS, about FUSED_BLOCKS blocks in all
    (enough waves that the last one's tail is short, few enough that each block's set-up and
    count flush are rare), at most FUSED_MAX_SPAN + FUSED_ITEMS (< 2^16)."""
    tiles = -(-n_items // FUSED_ITEMS)
    spans = min(tiles, max(-(-FUSED_BLOCKS // -(-n_users // FUSED_USERS)), -(-n_items // FUSED_MAX_SPAN)))
    return -(-tiles // spans) * FUSED_ITEMS


def topk_sample_rank(k):
    """r: the sample's r-th largest filter score (less 2 tol) is each user's threshold for
    fused_topk. r = k (at most TOPK_SAMPLE_RANK) makes it at most the catalogue's k-th largest,
    so the k best always pass; above that, r = TOPK_SAMPLE_RANK and a sample r / k the size
    (topk_sample): about the same candidates a user on items in random order (a quarter of the
    buffer, at least twice k as k <= TOPK_MAX_K), and a user with fewer than k of them takes
    the full-row path."""
    return min(k, TOPK_SAMPLE_RANK)


def topk_sample(n_items, k):
    """The items whose scores set each user's threshold before fused_topk scores them all:
    (begin, n) pieces spread over the catalogue (TOPK_SAMPLE_PIECES, none overlapping), about
    4 r n_items / TOPK_CAPACITY items in all and at least 8 r (r = topk_sample_rank(k)), so
    that on items in random order a user's candidates fill about a quarter of its buffer;
    None where that is more than half the catalogue (scoring it twice would cost more than
    the tiles)."""
    r = topk_sample_rank(k)
    total = max(-(-4 * r * n_items // TOPK_CAPACITY), 8 * r)
    if 2 * total > n_items:
        return None
    pieces = min(TOPK_SAMPLE_PIECES, total)
    size = -(-total // pieces)  # at most n_items // pieces: the pieces do not overlap
    return [(c * n_items // pieces, size) for c in range(pieces)]


def _float_at_most(cp, x):
    """float32 values at most the float64 x (x rounded down; -inf below float32's range)."""
    f = x.astype(cp.float32)
    return cp.where(f.astype(cp.float64) > x, cp.nextafter(f, cp.float32(-cp.inf)), f)


def top_k(train, users, scorer, k, seed, noise, batch_size=None, max_memory=DEFAULT_MAX_MEMORY):
    """(items, scores) of shape (len(users), k): each user's k best pool items by defined score
    (ties by key), -1 and NaN where the pool has fewer than k items with a non-NaN score."""
    cp = _backend.cupy()
    train_indptr, train_indices = _device_csr(train)
    n_items = train.shape[1]
    out_items = cp.full((users.shape[0], k), -1, dtype=cp.int64)
    out_scores = cp.full((users.shape[0], k), cp.nan)
    users_d = cp.asarray(users)
    kernel_path = k <= TOPK_MAX_K
    per_candidates = 12 * TOPK_CAPACITY + 64 + scorer.bytes_per_user()  # a user's buffers on the kernel path
    per_row = n_items * (scorer.itemsize() + 40) + scorer.bytes_per_user()  # whole rows, several times over
    if kernel_path:
        rows = _batch_size(n_items, scorer.itemsize(), per_candidates, max_memory - scorer.fixed_bytes(n_items),
                           batch_size)
    else:  # (copy, masks, sort)
        rows = batch_size or max(1, int((max_memory - scorer.fixed_bytes(n_items)) // per_row))
    topk = kernel("topk_tile", f"topk_tile_{scorer.suffix}")
    finish = kernel("topk_tile", "topk_finish")
    sample = topk_sample(n_items, k) if kernel_path and scorer.fused() else None
    sample_k = topk_sample_rank(k) if sample else k  # the first pass's k: the sample's rank

    def run(begin, end):
        batch = users_d[begin:end]
        nb = end - begin
        user_rows = scorer.user_rows(batch)
        tol = scorer.tolerance(batch, user_rows)
        if kernel_path:
            cand_scores = cp.empty(nb * TOPK_CAPACITY)
            cand_items = cp.empty(nb * TOPK_CAPACITY, dtype=cp.int32)
            count = cp.zeros(nb, dtype=cp.int32)
            tau = cp.full(nb, -cp.inf)
            overflow = cp.zeros(nb, dtype=cp.int32)
            tile = min(n_items, TILE_ITEMS)
            buffer = None if scorer.given else cp.empty(nb * tile, dtype=scorer.dtype)
            for piece_begin, piece_n in sample or [(0, n_items)]:  # the sample's pieces, or every item
                for item_begin in range(piece_begin, piece_begin + piece_n, tile):
                    n = min(tile, piece_begin + piece_n - item_begin)
                    S, ld, given = scorer.tile(user_rows, item_begin, n, buffer)
                    topk((nb,), (TOPK_THREADS,), (S, ld, given, np.int64(item_begin), np.int64(n), batch,
                                                  train_indptr, train_indices, scorer.launch_args()[3], tol,
                                                  np.int64(sample_k), cand_scores, cand_items, count, tau, overflow))
            finish((nb,), (TOPK_THREADS,), (np.int64(sample_k), tol, cand_scores, cand_items, count, tau, overflow))
            if sample:  # tau: the sample's r-th largest filter score; every item scored again, fused
                overflow |= count < sample_k  # too few sampled pool items for a threshold: the full-row path
                # the fused pass keeps the pool items at or above tau - 2 tol; in TF32 mode its filter is within
                # the wider "fused" bound while tau is an FP32 score of the sample: tol is the larger of the two
                fused_tol = cp.maximum(tol, scorer.tolerance(batch, user_rows, tensor=True)) if scorer.tensor else tol
                threshold = _float_at_most(cp, tau - 2.0 * fused_tol)
                count.fill(0)
                grid, span = fused_grid(nb, n_items)
                kernel("topk_tile", "fused_topk_tf32" if scorer.tensor else "fused_topk_f32")(
                    grid, (FUSED_THREADS,),
                    (user_rows, scorer.B, np.int64(scorer.n_factors), scorer.launch_args()[3], np.int64(n_items),
                     np.int64(span), np.int64(nb), batch, train_indptr, train_indices, threshold, cand_scores,
                     cand_items, count, overflow))
                # the candidates cut to within 2 tol of their k-th largest, kth (from -inf: the candidates' own)
                kth = cp.full(nb, -cp.inf)
                finish((nb,), (TOPK_THREADS,), (np.int64(k), fused_tol, cand_scores, cand_items, count, kth, overflow))
                # Every top-k item reached the threshold where r = k (the sample's k-th largest defined score,
                # at most the catalogue's, is at least tau - tol), or where kth >= tau (the k candidates at or
                # above kth: the k-th largest defined score is at least kth - tol). Otherwise (k above the
                # sample's rank, kth below tau: an item just under the threshold may outrank the k-th
                # candidate), and where fewer than k reached it: the full-row path
                overflow |= count < k
                if k > sample_k:
                    overflow |= kth < tau
            # the held candidates, row by row (a user flagged for the full-row path holds none; one not
            # flagged holds count <= TOPK_CAPACITY), gathered into flat arrays by topk_gather
            offsets = cp.concatenate([cp.zeros(1, dtype=cp.int64),
                                      cp.cumsum(cp.where(overflow != 0, 0, count), dtype=cp.int64)])
            # their number and the flagged users' in one synchronisation
            n_held, n_flagged = (int(v) for v in cp.asnumpy(cp.concatenate([offsets[-1:],
                                                                            cp.sum(overflow != 0, keepdims=True)])))
            local, items = cp.empty(n_held, dtype=cp.int64), cp.empty(n_held, dtype=cp.int64)
            filter_scores = cp.empty(n_held)
            kernel("topk_tile", "topk_gather")((nb,), (TOPK_GATHER_THREADS,), (
                offsets, cand_items, cand_scores, local, items, filter_scores))
            full_rows = cp.flatnonzero(overflow) if n_flagged else cp.zeros(0, dtype=cp.int64)
            S = buffer = None  # the score tile's memory, free for the full rows
        else:
            local = items = filter_scores = cp.zeros(0, dtype=cp.int64)
            full_rows = cp.arange(nb)
        # the full-row path: every pool score of these users, as many at once as the workspace
        # left holds (a batch of the kernel path may flag all of its users: ties, NaN factors)
        in_use = nb * per_candidates if kernel_path else 0
        at_once = max(1, int((max_memory - scorer.fixed_bytes(n_items) - in_use) // per_row))
        parts = [_full_row_candidates(scorer, batch, full_rows[r0: r0 + at_once], user_rows, tol, k, train_indptr,
                                      train_indices, n_items) for r0 in range(0, full_rows.shape[0], at_once)]
        if parts:
            local, items, filter_scores = (cp.concatenate([mine] + [part[i] for part in parts]) for i, mine in
                                           enumerate((local, items, filter_scores.astype(cp.float64))))
        exact, keys = scorer.pairs(batch, local, items, user_rows, seed, noise)
        if scorer.given:
            exact = filter_scores.astype(cp.float64)
        # (topk_select writes straight into the output's rows: the batch's last step, so that a retry after an
        # out-of-memory error finds its rows as they were)
        if kernel_path and not parts:  # the candidates by row, each row's at most a buffer's: topk_select
            kernel("topk_tile", "topk_select")((nb,), (TOPK_SELECT_THREADS,), (
                offsets, items, exact, keys, np.int64(k), out_items[begin:end], out_scores[begin:end]))
        else:  # rows of any length (the full-row path's): one sort of the batch's candidates
            chosen_items, chosen_scores = select_top_k(cp, local, items, exact, keys, nb, k)
            out_items[begin:end], out_scores[begin:end] = chosen_items, chosen_scores

    for _ in batches(users.shape[0], rows, run):
        pass
    return out_items, out_scores


def _full_row_candidates(scorer, batch, rows, user_rows, tol, k, train_indptr, train_indices, n_items):
    """(local user, item, filter score) of every pool item within 2 tol of the user's k-th
    largest finite filter score, and of every pool item whose filter score is not finite: a
    superset of the top k by defined score (as _cpu.top_k)."""
    cp = _backend.cupy()
    S, ld, _ = scorer.tile(None if user_rows is None else user_rows[rows], 0, n_items,
                           None if scorer.given else cp.empty(rows.shape[0] * n_items, dtype=scorer.dtype))
    if scorer.given:
        S = cp.broadcast_to(S[:n_items], (rows.shape[0], n_items))
    elif scorer.biases is not None:  # as the kernels add them: in the factors' dtype
        S = S + scorer.biases.astype(scorer.dtype)
    S = S.astype(cp.float64)
    row_of, entry, _ = row_entries(cp, train_indptr, batch[rows])
    trained = cp.zeros(S.shape, dtype=bool)
    trained[row_of, train_indices[entry]] = True
    unsure = ~cp.isfinite(S) & ~trained  # the filter overflowed (or inf - inf): always a candidate
    known = cp.where(trained | unsure, -cp.inf, S)
    kth = -cp.sort(-known, axis=1)[:, k - 1] if k <= n_items else cp.full(rows.shape[0], -cp.inf)
    local, item = cp.nonzero(((known >= (kth - 2.0 * tol[rows])[:, None]) & ~trained) | unsure)
    return rows[local], item.astype(cp.int64), S[local, item]
