"""The CUDA sources without a GPU: every kernel compiles (nvcc, and NVRTC as the runtime
compiles them), the shared definitions in kernels/common.cuh give the CPU engine's numbers
bit for bit (compiled for the host by nvcc), the compile cache key follows every kernel
file, and the wheel ships the kernels."""
import re
import shutil
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import nvrtc
from conftest import NVCC, needs_nvcc
from gpureco.engine import _gpu
from gpureco.engine._cpu_ranks import exact_scores, tie_keys
from gpureco.engine._scores import order_key

KERNELS = sorted(_gpu.kernels_dir().glob("*.cu"))


def test_there_are_kernels():
    assert {path.stem for path in KERNELS} == {"rank_tile", "exact_scores", "topk_tile", "magnitudes", "fused_rank"}


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("source", KERNELS, ids=lambda path: path.name)
def test_kernel_compiles_with_nvcc(tmp_path, source, arch):
    result = subprocess.run([NVCC, "-std=c++17", f"-arch={arch}", "-Werror", "all-warnings", "-c", str(source),
                             "-o", str(tmp_path / "kernel.o")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


# An SM's limits (CUDA's table of compute capabilities): threads, shared memory for blocks (each block also
# reserves 1 KB), and the blocks an SM each kernel of rank_tile.cu and fused_rank.cu is meant to hold (rank_tile's
# RANK_BLOCKS_F32 and RANK_BLOCKS_F64, fused_rank's two on an H100 and one on the others: their __launch_bounds__
# and shared memory)
SM_LIMITS = {"sm_80": (2048, 167_936, {"rank_tile_f32": 6, "rank_tile_f64": 5, "fused_rank_f32": 1, "fused_rank_tf32": 1}),
             "sm_86": (1536, 102_400, {"rank_tile_f32": 4, "rank_tile_f64": 3, "fused_rank_f32": 1, "fused_rank_tf32": 1}),
             "sm_90": (2048, 233_472, {"rank_tile_f32": 8, "rank_tile_f64": 6, "fused_rank_f32": 2, "fused_rank_tf32": 2})}
DYNAMIC = {"fused_rank": _gpu.FUSED_STAGE_BYTES}  # a launch's dynamic shared memory (_gpu.py)
MAX_BLOCK_SHARED = {"sm_80": 166_912, "sm_86": 101_376, "sm_90": 232_448}  # a block's, opted in


@needs_nvcc
@pytest.mark.parametrize("arch", sorted(SM_LIMITS))
@pytest.mark.parametrize("source", ["rank_tile", "fused_rank"])
def test_rank_kernels_hold_their_blocks_an_sm(tmp_path, source, arch):
    """ptxas's registers, spills and shared memory for the rank kernels (as CuPy compiles them: gpureco's options):
    the blocks an SM each is meant to hold fit the SM's registers, threads and shared memory (with a launch's dynamic
    shared memory, which a block may opt in to), and rank_tile keeps no local memory in its rounds (on an A100 at 7
    blocks it kept the round's pool statistics there)."""
    path = _gpu.kernels_dir() / f"{source}.cu"
    result = subprocess.run([NVCC, *_gpu.compile_options(), f"-arch={arch}", "-cubin", "-Xptxas", "-v", str(path),
                             "-o", str(tmp_path / f"{source}.cubin")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    report = {}
    for block in result.stderr.split("Compiling entry function")[1:]:
        name = block.split("'")[1]
        spills = [int(v) for v in re.findall(r"(\d+) bytes spill (?:stores|loads)", block)]
        registers = int(re.search(r"Used (\d+) registers", block).group(1))
        smem = int(re.search(r"(\d+) bytes smem", block).group(1))
        report[name] = (spills, registers, smem)
    threads, shared, blocks_of = SM_LIMITS[arch]
    blocks_of = {name: n for name, n in blocks_of.items() if name.startswith(source)}
    assert set(report) == set(blocks_of), report
    for name, blocks in blocks_of.items():
        spills, registers, smem = report[name]
        smem += DYNAMIC.get(source, 0)
        assert spills and (source != "rank_tile" or not any(spills)), (arch, name, report[name])
        warp_registers = -(-registers * 32 // 256) * 256  # allocated a warp at a time, in units of 256
        assert blocks * 256 <= threads, (arch, name, blocks)
        assert blocks * 8 * warp_registers <= 65_536, (arch, name, registers, blocks)
        assert smem <= MAX_BLOCK_SHARED[arch] and blocks * (smem + 1024) <= shared, (arch, name, smem, blocks)


NVRTC, NVRTC_MISSING = nvrtc.library()
BOTH = ("_f32", "_f64")
ENTRIES = {"rank_tile": [f"rank_tile{s}" for s in BOTH],
           "topk_tile": [f"topk_tile{s}" for s in BOTH] + ["topk_finish", "fused_topk_f32", "fused_topk_tf32",
                                                                  "topk_select", "topk_gather"],
           "exact_scores": [f"{name}{s}" for name in ("pair_scores", "finish_batch") for s in BOTH] + ["sort_tests"],
           "magnitudes": [f"{name}{s}" for name in ("abs_max_columns", "max_row_norm_sq", "row_norms") for s in BOTH]
           + ["split_tf32_f32", "transpose_f32"],
           "fused_rank": ["fused_rank_f32", "fused_rank_tf32"]}


@pytest.mark.skipif(NVRTC is None, reason=f"NVRTC is not usable here: {NVRTC_MISSING}")
@pytest.mark.parametrize("arch", ["compute_80", "compute_90"])
@pytest.mark.parametrize("source", KERNELS, ids=lambda path: path.name)
def test_kernel_compiles_with_nvrtc_as_at_run_time(source, arch):
    """The source, options and compiler of cupy.RawModule (which always adds -ftz=true)."""
    ptx, log = nvrtc.compile_to_ptx(NVRTC, source.read_text(), source.name,
                                    nvrtc.as_cupy(_gpu.compile_options(), arch))
    assert ptx is not None, log
    assert f".target sm_{arch[-2:]}" in ptx
    for name in ENTRIES[source.stem]:  # the functions gpureco/engine/_gpu.py asks the module for
        assert f".entry {name}" in ptx, name
    if source.stem == "exact_scores":  # defined scores: subnormal float32 factors are not flushed
        assert "cvt.f64.f32" in ptx and "cvt.ftz.f64.f32" not in ptx
    if source.stem == "fused_rank":  # its filter scores: the same floats as on the host, subnormals included
        assert "fma.rn.f32" in ptx and "fma.rn.ftz.f32" not in ptx
    if source.stem in ("fused_rank", "magnitudes"):  # TF32 parts: lo = x - hi never flushed (common.cuh gr_subf)
        assert "sub.rn.f32" in ptx


@pytest.mark.skipif(NVRTC is None, reason=f"NVRTC is not usable here: {NVRTC_MISSING}")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("source", KERNELS, ids=lambda path: path.name)
def test_kernel_builds_machine_code_with_nvrtc_as_cupy_does(source, arch):
    """As CuPy 14 builds a kernel on an A100 or H100: a cubin (-arch=sm_XX), with the options it
    adds (-ftz=true, --device-as-default-execution-space), so that ptxas's limits are checked
    (a PTX build passes a kernel over 48 KB of static shared memory, which the device rejects)."""
    cubin, log = nvrtc.compile_to_cubin(NVRTC, source.read_text(), source.name,
                                        nvrtc.as_cupy(_gpu.compile_options(), arch))
    assert cubin is not None, log
    assert cubin[:4] == b"\x7fELF"
    for name in ENTRIES[source.stem]:
        assert name.encode() + b"\0" in cubin, name


@pytest.mark.skipif(NVRTC is None, reason=f"NVRTC is not usable here: {NVRTC_MISSING}")
def test_nvrtc_machine_code_checks_the_shared_memory_limit():
    """The cubin build can fail where the PTX build does not: 49,152 bytes of static shared
    memory and more is an error of ptxas."""
    source = ('extern "C" __global__ void k(int* x) { __shared__ int s[12289]; s[threadIdx.x] = x[threadIdx.x]; '
              '__syncthreads(); x[threadIdx.x] = s[12288 - threadIdx.x]; }')
    ptx, _ = nvrtc.compile_to_ptx(NVRTC, source, "big.cu", ["-arch=compute_90"])
    cubin, log = nvrtc.compile_to_cubin(NVRTC, source, "big.cu", ["-arch=sm_90"])
    assert ptx is not None and cubin is None and "shared" in log


@pytest.mark.skipif(NVRTC is None, reason=f"NVRTC is not usable here: {NVRTC_MISSING}")
def test_nvrtc_reports_a_broken_kernel():
    """The NVRTC check can fail: a syntax error comes back with its log."""
    ptx, log = nvrtc.compile_to_ptx(NVRTC, 'extern "C" __global__ void k(int* x) { x[0] = ; }', "broken.cu",
                                    ["-arch=compute_90"])
    assert ptx is None and "error" in log


def host_program(tmp_path, body):
    """Compile and run a host program that includes kernels/common.cuh; its output lines."""
    source = tmp_path / "harness.cu"
    source.write_text('#include "common.cuh"\n#include <cstdio>\nint main() {\n' + body + "\nreturn 0;\n}\n")
    binary = tmp_path / "harness"
    build = subprocess.run([NVCC, "-std=c++17", f"-I{_gpu.kernels_dir()}", str(source), "-o", str(binary)],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    return subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout.split()


def c_array(ctype, values, fmt):
    return f"static const {ctype} v[] = {{{', '.join(fmt(x) for x in values)}}};"


@needs_nvcc
def test_tie_keys_are_the_cpu_engines(tmp_path, rng):
    users = rng.integers(0, 2**31, size=200, dtype=np.int64)
    items = rng.integers(0, 2**31, size=200, dtype=np.int64)
    seed = 987654321
    lines = [f"printf(\"%llu %llu\\n\", (unsigned long long)gr_tie_key({seed}ULL, {u}ULL, {i}ULL, 1), "
             f"(unsigned long long)gr_tie_key({seed}ULL, {u}ULL, {i}ULL, 0));" for u, i in zip(users, items)]
    out = np.array(host_program(tmp_path, "\n".join(lines)), dtype=np.uint64).reshape(-1, 2)
    np.testing.assert_array_equal(out[:, 0], tie_keys(users, items, seed, True))
    np.testing.assert_array_equal(out[:, 1], items.astype(np.uint64))


@needs_nvcc
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_exact_scores_are_the_cpu_engines_bit_for_bit(tmp_path, rng, dtype):
    n_users, n_items, n_factors = 3, 5, 37
    A = (rng.standard_normal((n_users, n_factors)) * 10.0 ** rng.integers(-3, 4, size=(n_users, n_factors))).astype(dtype)
    B = (rng.standard_normal((n_items, n_factors)) * 10.0 ** rng.integers(-3, 4, size=(n_items, n_factors))).astype(dtype)
    bias = rng.standard_normal(n_items)
    ctype = "float" if dtype == np.float32 else "double"
    body = "\n".join([
        f"static const {ctype} A[] = {{{', '.join(float(x).hex() for x in A.ravel())}}};",
        f"static const {ctype} B[] = {{{', '.join(float(x).hex() for x in B.ravel())}}};",
        f"static const double bias[] = {{{', '.join(float(x).hex() for x in bias)}}};",
        f"for (int u = 0; u < {n_users}; ++u) for (int j = 0; j < {n_items}; ++j) {{",
        f"  printf(\"%a %a\\n\", gr_exact_score(A + u * {n_factors}, B + j * {n_factors}, {n_factors}, bias, j),",
        f"         gr_exact_score(A + u * {n_factors}, B + j * {n_factors}, {n_factors}, (const double*)0, j)); }}",
    ])
    out = np.array([float.fromhex(x) for x in host_program(tmp_path, body)]).reshape(n_users, n_items, 2)
    np.testing.assert_array_equal(out[:, :, 0], exact_scores(A, B, bias, True))
    np.testing.assert_array_equal(out[:, :, 1], exact_scores(A, B, bias, False))


@needs_nvcc
def test_order_keys_and_rank_search(tmp_path, rng):
    values = np.concatenate([rng.standard_normal(20), [0.0, -0.0, np.inf, -np.inf, 5e-324, -5e-324, 1e308]])
    body = [f"static const double x[] = {{{', '.join(float(v).hex() if np.isfinite(v) else ('gr_inf()' if v > 0 else '-gr_inf()') for v in values)}}};",
            f"for (int i = 0; i < {values.size}; ++i) printf(\"%llu %a\\n\", (unsigned long long)gr_order_key(x[i]), "
            "gr_from_order_key(gr_order_key(x[i])));"]
    sorted_scores = np.sort(rng.integers(-3, 4, size=15).astype(np.float64))[::-1]
    keys = rng.integers(0, 10, size=15).astype(np.uint64)
    order = np.lexsort((keys, -sorted_scores))
    sorted_scores, keys = sorted_scores[order], keys[order]
    queries = [(float(s), int(k)) for s in range(-4, 5) for k in range(0, 11, 3)]
    body += [f"static const double ts[] = {{{', '.join(float(v).hex() for v in sorted_scores)}}};",
             f"static const uint64_t tk[] = {{{', '.join(f'{int(v)}ULL' for v in keys)}}};"]
    body += [f"printf(\"%lld\\n\", (long long)gr_count_outranking(ts, tk, 15, {s!r}, {k}ULL));" for s, k in queries]
    out = host_program(tmp_path, "\n".join(body))
    pairs = np.array(out[: 2 * values.size]).reshape(-1, 2)
    np.testing.assert_array_equal(pairs[:, 0].astype(np.uint64), order_key(np, values))
    np.testing.assert_array_equal([float.fromhex(x) for x in pairs[:, 1]], values + 0.0 * (values != 0))
    assert np.all(np.diff(order_key(np, np.sort(values)).astype(np.float64)) >= 0)
    want = [int(np.sum((sorted_scores > s) | ((sorted_scores == s) & (keys < k)))) for s, k in queries]
    assert [int(x) for x in out[2 * values.size:]] == want


def test_compile_cache_key_follows_every_kernel_file(tmp_path, monkeypatch):
    copy = tmp_path / "kernels"
    shutil.copytree(_gpu.kernels_dir(), copy)
    monkeypatch.setattr(_gpu, "kernels_dir", lambda: copy)
    _gpu.kernels_hash.cache_clear()
    before = _gpu.compile_options()
    (copy / "common.cuh").write_text((copy / "common.cuh").read_text() + "\n// changed\n")
    _gpu.kernels_hash.cache_clear()
    after = _gpu.compile_options()
    _gpu.kernels_hash.cache_clear()
    assert before != after


def test_wheel_contains_the_kernels(tmp_path):
    root = _gpu.kernels_dir().parent
    # no build isolation: the build needs no package index (offline GPU machines), only setuptools and Cython
    pytest.importorskip("Cython", reason="building the wheel needs Cython (pip install -e '.[test]')")
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                             str(tmp_path), str(root)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    wheel, = tmp_path.glob("gpureco-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for path in _gpu.kernels_dir().glob("*.cu*"):
        assert f"gpureco/kernels/{path.name}" in names


@needs_nvcc
def test_float_bounds_round_outward(tmp_path, rng):
    """gr_float_down / gr_float_up (the bands of rank_tile's float compares): the largest float
    <= x and the smallest float >= x, for doubles between floats, on them, beyond float's
    range, subnormal, zero, infinite and NaN."""
    tiny, big = float(np.finfo(np.float32).smallest_subnormal), float(np.finfo(np.float32).max)
    values = np.concatenate([rng.standard_normal(40) * 10.0 ** rng.integers(-40, 40, size=40),
                             rng.standard_normal(10).astype(np.float32).astype(np.float64),
                             [0.0, -0.0, tiny / 3, -tiny / 3, 1.5 * tiny, -1.5 * tiny, big * 1.0000001, -big * 1.0000001,
                              1e300, -1e300, 1.0 + 2.0**-30, -(1.0 + 2.0**-30), np.inf, -np.inf, np.nan]])
    literal = [float(v).hex() if np.isfinite(v) else "(0.0 / 0.0)" if np.isnan(v) else
               ("gr_inf()" if v > 0 else "-gr_inf()") for v in values]
    body = [f"static const double x[] = {{{', '.join(literal)}}};",
            f"for (int i = 0; i < {values.size}; ++i) printf(\"%a %a\\n\", (double)gr_float_down(x[i]), "
            "(double)gr_float_up(x[i]));"]
    out = np.array([float.fromhex(v) for v in host_program(tmp_path, "\n".join(body))]).reshape(-1, 2)
    down, up = out[:, 0].astype(np.float32), out[:, 1].astype(np.float32)
    assert np.array_equal(out[:, 0], down.astype(np.float64), equal_nan=True)  # floats, as printed
    finite = ~np.isnan(values)
    assert np.all(np.isnan(out[~finite]))
    d, u, x = down[finite], up[finite], values[finite]
    assert np.all(d.astype(np.float64) <= x) and np.all(u.astype(np.float64) >= x)
    inside = np.isfinite(x)  # (an infinity is its own bound, below and above)
    assert np.all(d[~inside] == x[~inside]) and np.all(u[~inside] == x[~inside])
    d, u, x = d[inside], u[inside], x[inside]
    with np.errstate(over="ignore"):
        assert np.all(np.nextafter(d, np.float32(np.inf)).astype(np.float64) > x)  # no float between d and x
        assert np.all(np.nextafter(u, np.float32(-np.inf)).astype(np.float64) < x)
        exact = x == x.astype(np.float32).astype(np.float64)
    assert exact.sum() >= 12 and np.all(d[exact] == u[exact])


@pytest.mark.skipif(NVRTC is None, reason=f"NVRTC is not usable here: {NVRTC_MISSING}")
def test_rank_tile_rounds_its_float_bands_outward_on_the_device():
    """The device branch of gr_float_down / gr_float_up: directed conversions that CuPy's
    -ftz=true does not flush (a flushed negative subnormal would round up to -0)."""
    source = _gpu.kernels_dir() / "rank_tile.cu"
    ptx, log = nvrtc.compile_to_ptx(NVRTC, source.read_text(), source.name,
                                    nvrtc.as_cupy(_gpu.compile_options(), "compute_90"))
    assert ptx is not None, log
    assert "cvt.rm.f32.f64" in ptx and "cvt.rp.f32.f64" in ptx
    assert "cvt.rm.ftz.f32.f64" not in ptx and "cvt.rp.ftz.f32.f64" not in ptx
