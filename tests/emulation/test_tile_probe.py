"""The fused kernels' score tiles (kernels/score_tile.cuh: FmaTile, and TensorTile of
fused_rank_tf32 and fused_topk_tf32) read back score by score: a probe kernel
scores tiles as the fused kernels do and writes each of a thread's scores where its tile says
they belong (row(rho), col(rho, j)). Under the emulator in CI, and on a GPU where one is lent
(marked gpu), where it is the direct check of what only a GPU can tell: that the tensor cores'
fragments are the layout score_tile.cuh reads (integer factors: every score exact, so any
misplaced score shows, with where it came from), that their rounding keeps every TF32 score
within score_tolerance's "fused" bound, and that an FMA tile is the float32 FMA chain in order
of the emulation, bit for bit. The end-to-end tests show a score outside its bound only where
a pool item happens to fall in the gap; these look at every score."""
from fractions import Fraction

import numpy as np
import pytest

import nvrtc
from conftest import GPU_MISSING
from emulation.emulator import have_compiler
from emulation.test_emulator import KERNELS, module, mutated_kernels
from engine.test_tf32 import factor_kinds, ratio_to_bound
from gpureco.engine import _gpu

PROBE = r"""
#include "score_tile.cuh"

// out[row][item] (n_rows x n_items, row-major): the score of tile row `row` and item `item`, as
// a fused kernel's thread holds it; block x scores items 128 x .. 128 x + 127 of rows 0 .. n_rows - 1
template <typename Tile>
__device__ void probe(const float* A, int64_t n_rows, const float* B, int64_t n_items, int64_t n_factors,
                      const double* bias, float* out) {
    __shared__ typename Tile::Factors sm;
    __shared__ float tile_bias[FUSED_ITEMS];
    const int t = threadIdx.x;
    const int64_t j0 = (int64_t)blockIdx.x * FUSED_ITEMS, r = t >> 1;
    if (t < FUSED_ITEMS) tile_bias[t] = bias && j0 + t < n_items ? (float)bias[j0 + t] : 0.0f;  // as gr_tile_prepare
    const Tile tile(t);
    float scores[Tile::ROUNDS][Tile::ITEMS];
    tile.score(sm, r < n_rows ? A + r * n_factors : nullptr, B, j0, n_items, n_factors, bias ? tile_bias : nullptr,
               scores);  // (its barriers publish tile_bias)
    for (int rho = 0; rho < Tile::ROUNDS; ++rho)
        for (int j = 0; j < Tile::ITEMS; ++j) {
            const int64_t row = tile.row(rho), item = j0 + tile.col(rho, j);
            if (row < n_rows && item < n_items) out[row * n_items + item] = scores[rho][j];
        }
}

#define PROBE_KERNEL(NAME, TILE)                                                                              \
    extern "C" __global__ void __launch_bounds__(FUSED_THREADS) NAME(                                        \
        const float* A, int64_t n_rows, const float* B, int64_t n_items, int64_t n_factors, const double* bias, \
        float* out) {                                                                                          \
        probe<TILE>(A, n_rows, B, n_items, n_factors, bias, out);                                              \
    }
PROBE_KERNEL(probe_fma, FmaTile)
PROBE_KERNEL(probe_tensor, TensorTile)
"""

TILES = {"probe_fma": "fused_rank_f32, fused_topk_f32", "probe_tensor": "fused_rank_tf32, fused_topk_tf32"}
NAMES = list(TILES)
BACKENDS = [pytest.param("emulated", marks=pytest.mark.skipif(not have_compiler(), reason="no C++ compiler (g++)")),
            pytest.param("gpu", marks=[pytest.mark.gpu, pytest.mark.skipif(GPU_MISSING is not None,
                                                                           reason=f"no GPU: {GPU_MISSING}")])]


NVRTC, NVRTC_MISSING = nvrtc.library()


@pytest.mark.skipif(NVRTC is None, reason=f"NVRTC is not usable here: {NVRTC_MISSING}")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_the_probe_builds_as_cupy_builds_it(arch):
    """The probe's machine code as CuPy 14 builds it on an A100 or H100 (test_kernels.py's
    options), so that a device session does not find a compile error first."""
    cubin, log = nvrtc.compile_to_cubin(NVRTC, PROBE, "probe.cu", nvrtc.as_cupy(_gpu.compile_options(), arch))
    assert cubin is not None, log
    for name in NAMES:
        assert name.encode() + b"\0" in cubin, name


class Probe:
    """The probe's kernels on the emulator or, through CuPy, on the GPU; run(...) -> host array."""

    def __init__(self, backend, include=None):
        self.backend = backend
        if backend == "emulated":
            self.module = module("probe", PROBE, include=include or KERNELS)
        else:
            from gpureco.engine import _backend
            self.cp = _backend.cupy()
            self.module = self.cp.RawModule(code=PROBE, options=_gpu.compile_options())

    def run(self, name, A, B, bias=None):
        A, B = np.ascontiguousarray(A, dtype=np.float32), np.ascontiguousarray(B, dtype=np.float32)
        assert A.shape[0] <= 128 and A.shape[1] == B.shape[1]
        out = np.full((A.shape[0], B.shape[0]), np.nan, dtype=np.float32)
        args = [A, np.int64(A.shape[0]), B, np.int64(B.shape[0]), np.int64(A.shape[1]),
                np.uint64(0) if bias is None else np.asarray(bias, dtype=np.float64), out]
        grid, block = (-(-B.shape[0] // 128),), (256,)
        if self.backend == "emulated":
            self.module.get_function(name)(grid, block, tuple(args))
            return out
        args = [self.cp.asarray(a) if isinstance(a, np.ndarray) else a for a in args]
        self.module.get_function(name)(grid, block, tuple(args))
        return args[-1].get()


@pytest.fixture(scope="module", params=BACKENDS)
def probe(request):
    return Probe(request.param)


def misplaced(got, want):
    """'' where got == want; else how many scores differ and, for the first few, where their
    value is found in `want` (the same row or the same item): the layout's error, spelled out."""
    wrong = np.argwhere(~(got == want))
    if wrong.size == 0:
        return ""
    lines = [f"{len(wrong)} of {got.size} scores misplaced or wrong"]
    for r, j in wrong[:6]:
        seen = [f"row {r} item {c}" for c in np.flatnonzero(want[r] == got[r, j])[:3]]
        seen += [f"row {c} item {j}" for c in np.flatnonzero(want[:, j] == got[r, j])[:3]]
        lines.append(f"row {r} item {j}: {float(got[r, j])}, want {float(want[r, j])}"
                     + (f" (the score of {', '.join(seen)})" if seen else ""))
    return "; ".join(lines)


def integer_problem(rng, n_rows, n_items, n_factors, with_bias):
    """Factors and biases whose scores every tile computes exactly (small integers: exact TF32
    numbers with no lower part, sums far below 2**24)."""
    A = rng.integers(-40, 41, (n_rows, n_factors)).astype(np.float32)
    B = rng.integers(-40, 41, (n_items, n_factors)).astype(np.float32)
    bias = rng.integers(-1000, 1001, n_items).astype(np.float64) if with_bias else None
    exact = A.astype(np.float64) @ B.astype(np.float64).T + (0.0 if bias is None else bias)
    return A, B, bias, exact.astype(np.float32)


@pytest.mark.parametrize("name", NAMES)
def test_every_score_is_where_the_kernels_read_it(probe, name, rng):
    """Rows of a partial block (100 of 128), a partial last tile (300 items), factors that end
    inside a step (13, 37) and a whole number of steps (64), with and without biases."""
    for n_rows, n_items, n_factors, with_bias in ((128, 300, 13, False), (100, 300, 37, True), (128, 256, 64, True)):
        A, B, bias, exact = integer_problem(rng, n_rows, n_items, n_factors, with_bias)
        got = probe.run(name, A, B, bias)
        assert not misplaced(got, exact), f"{name} ({TILES[name]}), F = {n_factors}: {misplaced(got, exact)}"


def worst_ratio(probe, name, A, B, bias):
    """max over the tile's scores of |score - defined score| / the bound before its doubling
    (the FP32 bound for the FMA tile, the "fused" TF32 bound for the tensor tiles), as
    test_tf32's test_cublas_filters_are_within_their_bounds_on_the_device takes cuBLAS's."""
    return ratio_to_bound(probe.run(name, A, B, bias), A, B, bias, "fused" if "tensor" in name else False)


@pytest.mark.parametrize("name", NAMES)
def test_every_score_is_within_its_bound(probe, name, rng):
    """Normal factors, positive factors whose 13 low bits are set (each TF32 cut as large as it
    can be, every error of one sign) and factors over 40 binades (test_tf32.factor_kinds), at
    F = 16 and 128 on a GPU (16 and 72 emulated, where a step takes longer), with and without
    biases."""
    for n_factors in (16, 128) if probe.backend == "gpu" else (16, 72):
        rows, items = factor_kinds(rng, 128, n_factors), factor_kinds(rng, 256, n_factors)
        for kind in rows:
            for bias in (None, rng.standard_normal(256) * 10):
                ratio = worst_ratio(probe, name, rows[kind], items[kind], bias)
                assert ratio <= 1.0, (name, TILES[name], kind, n_factors, bias is not None, ratio)


def fma_chain(A, B, bias):
    """The FMA tile's scores by definition: acc = fma(a_f, b_f, acc) in float32 for f = 0 .. F-1,
    rounded once each (to nearest, ties to even), then + the item's bias as a float32. Exact
    here: a product of two float32 numbers is exact in float64; s + e (TwoSum) is exactly
    product + acc, and s rounds to float32 as product + acc does except where s is halfway
    between two float32 numbers, where e's sign decides."""
    acc = np.zeros((A.shape[0], B.shape[0]), dtype=np.float32)
    for f in range(A.shape[1]):
        p = A[:, f, None].astype(np.float64) * B[None, :, f].astype(np.float64)
        c = acc.astype(np.float64)
        s = p + c
        v = s - p
        e = (p - (s - v)) + (c - v)
        r = s.astype(np.float32)
        below = np.where(r.astype(np.float64) <= s, r, np.nextafter(r, np.float32(-np.inf)))
        above = np.where(r.astype(np.float64) >= s, r, np.nextafter(r, np.float32(np.inf)))
        halfway = (s - below.astype(np.float64)) == (above.astype(np.float64) - s)
        acc = np.where(halfway & (e > 0), above, np.where(halfway & (e < 0), below, r))
    return acc if bias is None else acc + np.asarray(bias, dtype=np.float64).astype(np.float32)


def test_fma_chain_is_exact():
    """fma_chain against exact rational arithmetic, on random factors and on sums that float64
    rounds onto a float32 halfway point: 1 + 2**-23 plus (1 + 2**-23) (1 - 2**-23) 2**-24 is
    1 + 2**-23 + 2**-24 - 2**-70, whose float32 is 1 + 2**-23, where float32(float64 sum) ties
    to the even 1 + 2**-22 (and the same negated, where the error is positive)."""
    rng = np.random.default_rng(3)
    up, down = np.float32(1 + 2.0**-23), np.float32((1 - 2.0**-23) * 2.0**-24)
    A = rng.standard_normal((4, 40)).astype(np.float32)
    B = rng.standard_normal((3, 40)).astype(np.float32)
    A[0, :2], A[1, :2], B[0, :2] = (up, up), (-up, -up), (1.0, down)
    first = fma_chain(A[:2, :2], B[:1, :2], None)[:, 0]
    assert first.tolist() == [up, -up]
    assert np.float32(float(up) + float(up) * float(down)) != up  # what a plain float64 sum would give
    got = fma_chain(A, B, None)
    for u in range(A.shape[0]):
        for j in range(B.shape[0]):
            acc = np.float32(0.0)
            for f in range(A.shape[1]):
                acc = _round_to_float32(Fraction(float(A[u, f])) * Fraction(float(B[j, f])) + Fraction(float(acc)))
            assert got[u, j].view(np.uint32) == acc.view(np.uint32), (u, j)


def _round_to_float32(x):
    """The float32 nearest the rational x, ties to even (normal range)."""
    r = np.float32(float(x))  # float(x): nearest float64; may sit on a float32 halfway point
    below = r if Fraction(float(r)) <= x else np.nextafter(r, np.float32(-np.inf))
    above = np.nextafter(below, np.float32(np.inf)) if Fraction(float(below)) != x else below
    d_below, d_above = x - Fraction(float(below)), Fraction(float(above)) - x
    if d_below != d_above:
        return below if d_below < d_above else above
    return below if below.view(np.uint32) % 2 == 0 else above


def test_the_fma_tile_is_the_float32_fma_chain_bit_for_bit(probe, rng):
    """The same floats in the emulation (fmaf) and on a device (fma.rn.f32, never flushed): the
    FMA tile is the chain in order, its bias added as a float32."""
    for n_factors in (13, 64):
        kinds = factor_kinds(rng, 128, n_factors), factor_kinds(rng, 300, n_factors)
        for kind in ("normal", "wide"):
            A, B = kinds[0][kind], kinds[1][kind]
            for bias in (None, rng.standard_normal(300) * 10):
                got, want = probe.run("probe_fma", A, B, bias), fma_chain(A, B, bias)
                assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), \
                    (kind, n_factors, misplaced(got, want))


PROBE_MUTANTS = {  # (probe, file, old, new, the check that must fail)
    "a tensor tile's item index": ("probe_tensor", "score_tile.cuh",
                                   "const int k = rho / HALVES, c = 8 * (rho % HALVES) + j;",
                                   "const int k = rho / HALVES, c = (8 * (rho % HALVES) + j) ^ 1;", "layout"),
    "an FMA tile's item": ("probe_fma", "score_tile.cuh", "+ 4 * tx + (j & 3); }", "+ 4 * tx + ((j + 1) & 3); }",
                           "layout"),
    "the correction not added": ("probe_tensor", "score_tile.cuh",
                                 "acc[m][n][i] = __fadd_rn(acc[m][n][i], correction[i]);",
                                 "acc[m][n][i] = acc[m][n][i];", "bound"),
    "the chain rounded twice a step": ("probe_fma", "common.cuh", "return fmaf(a, b, c);", "return a * b + c;",
                                       "chain"),
}


@pytest.mark.skipif(not have_compiler(), reason="no C++ compiler (g++)")
@pytest.mark.parametrize("mutant", PROBE_MUTANTS)
def test_the_probes_catch_seeded_bugs(tmp_path, rng, mutant):
    """Each check above fails on a tile that is wrong in its way: a score where the tile says
    another is (TensorTile's acc index, FmaTile's col), the TF32 correction left out (only
    the bound shows it: integer factors have none), the chain rounded twice a step."""
    name, file, old, new, which = PROBE_MUTANTS[mutant]
    probe = Probe("emulated", include=mutated_kernels(tmp_path, file, old, new))
    if which == "layout":
        A, B, bias, exact = integer_problem(rng, 128, 300, 37, True)
        assert misplaced(probe.run(name, A, B, bias), exact)
    elif which == "bound":
        rows, items = factor_kinds(rng, 128, 72)["worst"], factor_kinds(rng, 256, 72)["worst"]
        assert worst_ratio(probe, name, rows, items, None) > 1.0
    else:
        A, B = factor_kinds(rng, 128, 64)["normal"], factor_kinds(rng, 300, 64)["normal"]
        assert not np.array_equal(probe.run(name, A, B).view(np.uint32), fma_chain(A, B, None).view(np.uint32))
