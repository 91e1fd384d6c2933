"""The real kernels and the emulator built with AddressSanitizer and UBSan, run in a
subprocess that preloads the ASan runtime: a few launches on small problems (each kernel
file) exit cleanly,
and a seeded out-of-bounds read in a tiny kernel is reported (so that this test can fail)."""
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from emulation.emulator import asan_runtime, build, have_compiler
from gpureco.engine import _gpu

TESTS = Path(__file__).resolve().parent.parent
ASAN = asan_runtime() if have_compiler() else None
pytestmark = pytest.mark.skipif(ASAN is None, reason="no g++ with AddressSanitizer here")

PRELUDE = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
import numpy as np
from emulation.emulator import EmulationError, RawModule
"""

CLEAN = PRELUDE + """
import gpu_model
from emulation.test_emulator import (KERNELS, Problem, assert_same, finish_result, fused_topk_result,
                                     fused_topk_thresholds, module, run, topk_result)
from gpureco.engine import _gpu

sanitized = {file: RawModule(code=(KERNELS / f"{file}.cu").read_text(), options=_gpu.compile_options(), sanitize=True)
             for file in ("rank_tile", "exact_scores", "topk_tile", "fused_rank")}
for dtype, suffix in ((np.float32, "f32"), (np.float64, "f64")):
    p = Problem(seed=31, dtype=dtype, n_items=6000, big_user=True, integer=dtype == np.float32)
    batch = np.arange(7, dtype=np.int64)
    launches, outputs = p.rank_launches(batch, tile=4500)
    for schedule in ("forward", "shuffle"):
        got = run(sanitized["rank_tile"].get_function(f"rank_tile_{suffix}"), launches, outputs, schedule=schedule)
        assert_same(got, run(gpu_model.rank_tile, launches, outputs), f"rank_tile_{suffix}")
    launches, outputs = p.finish_launch(batch, *run(gpu_model.rank_tile, launches, outputs), tie_mode=2,
                                        with_scores=True)  # users 1 and 2 recounted
    got = run(sanitized["exact_scores"].get_function(f"finish_batch_{suffix}"), launches, outputs, schedule="reverse")
    for g, w in zip(finish_result(got), finish_result(run(gpu_model.finish_batch, launches, outputs))):
        np.testing.assert_array_equal(g, w)
    launches, outputs = p.topk_launches(batch[:3], tile=4500, k=5)
    got = run(sanitized["topk_tile"].get_function(f"topk_tile_{suffix}"), launches, outputs, schedule="shuffle")
    assert topk_result(got) == topk_result(run(gpu_model.topk_tile, launches, outputs))
for kw in (dict(n_users=130, n_items=1000, test_density=0.01), dict(n_users=9, big_user=True)):  # shared; global
    p = Problem(seed=32, dtype=np.float32, n_factors=11, integer=True, **kw)
    launches, outputs = p.fused_launches(np.arange(p.A.shape[0], dtype=np.int64), span=640)
    got = run(sanitized["fused_rank"].get_function("fused_rank_f32"), launches, outputs, schedule="shuffle")
    assert_same(got, run(gpu_model.fused_rank, launches, outputs), "fused_rank")
p = Problem(seed=33, dtype=np.float32, n_users=130, n_items=1000, n_factors=11, integer=True)
batch = np.arange(130, dtype=np.int64)
launches, outputs = p.fused_topk_launches(batch, 640, fused_topk_thresholds(p, batch, np.random.default_rng(3)))
got = run(sanitized["topk_tile"].get_function("fused_topk_f32"), launches, outputs, schedule="shuffle")
assert fused_topk_result(got) == fused_topk_result(run(gpu_model.fused_topk, launches, outputs))
finish, tiles = Problem(seed=34, n_items=9000).topk_finish_launch(np.arange(7, dtype=np.int64), 5000, 10)
got = run(sanitized["topk_tile"].get_function("topk_finish"), finish, tiles, schedule="reverse")
assert topk_result(got) == topk_result(run(gpu_model.topk_finish, finish, tiles))
print("clean")
"""

READ_PAST = """
extern "C" __global__ void read_past(const float* x, float* y, long long n) {
    const long long i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) y[i] = x[i];  // reads x[n]: one past the end
}
"""
OUT_OF_BOUNDS = PRELUDE + f"code = {READ_PAST!r}\n" + r"""
x, y = np.ones(100, dtype=np.float32), np.zeros(101, dtype=np.float32)
RawModule(code=code, sanitize=True).get_function("read_past")((1,), (128,), (x, y, np.int64(100)))
print("not reported")
"""


def run_sanitized(script):
    env = {**os.environ, "LD_PRELOAD": ASAN, "ASAN_OPTIONS": "detect_leaks=0", "PYTHONPATH": str(TESTS)}
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)


def test_kernels_run_clean_under_the_sanitizers_and_an_overread_is_reported():
    sources = [(path.read_text(), _gpu.compile_options()) for path in sorted(_gpu.kernels_dir().glob("*.cu"))]
    with ThreadPoolExecutor(len(sources) + 1) as pool:  # the subprocesses find them in the build cache
        list(pool.map(lambda source: build(*source, sanitize=True), [*sources, (READ_PAST, ())]))
    result = run_sanitized(CLEAN)
    assert result.returncode == 0 and result.stdout.strip() == "clean", result.stderr[-5000:]
    assert "runtime error" not in result.stderr and "AddressSanitizer" not in result.stderr, result.stderr[-5000:]
    result = run_sanitized(OUT_OF_BOUNDS)
    assert result.returncode != 0 and "not reported" not in result.stdout
    assert "ERROR: AddressSanitizer: use-after-poison" in result.stderr, result.stderr[-5000:]
    assert "read_past" in result.stderr  # the stack names the kernel
