"""The real kernels and the emulator built with a sanitizer, run in a subprocess that preloads
its runtime: a few launches on small problems (every kernel) exit cleanly.

AddressSanitizer and UBSan: a seeded out-of-bounds read in a tiny kernel is reported (so that
the test can fail).

ThreadSanitizer (cuda_host.h): no data race between the threads of a block, where only
__syncthreads() and __syncwarp() order memory, as on a GPU. The fibers run one at a time
until they give way, so a kernel whose threads exchange memory after a mere vote or shuffle
gives the right numbers under every schedule of the emulator, yet races on a GPU: only this
check sees it. Seeded races are reported: tiny kernels; in gr_defer (every rank kernel's warp
queue), a vote in place of its first __syncwarp or its second one removed; topk_finish
without its first barrier; fused_rank_tf32 storing a step's parts with no barrier after the
last step's reads. Every other test passes these four."""
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from emulation.emulator import build, have_compiler, runtime
from gpureco.engine import _gpu

TESTS = Path(__file__).resolve().parent.parent
RUNTIMES = {sanitize: runtime(sanitize) if have_compiler() else None for sanitize in ("address", "thread")}
ENV = {"address": {"ASAN_OPTIONS": "detect_leaks=0"}, "thread": {"TSAN_OPTIONS": "exitcode=66 history_size=4"}}

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

options = tuple(f"-I{INCLUDE}" if o.startswith("-I") else o for o in _gpu.compile_options())
sanitized = {file: RawModule(code=(INCLUDE / f"{file}.cu").read_text(), options=options, sanitize=SANITIZE)
             for file in FILES}
for dtype, suffix in ((np.float32, "f32"), (np.float64, "f64")):
    p = Problem(seed=31, dtype=dtype, n_items=6000, big_user=True, integer=dtype == np.float32)
    batch = np.arange(7, dtype=np.int64)
    launches, outputs = p.rank_launches(batch, tile=4500)
    for schedule in ("forward", "shuffle") if "rank_tile" in FILES else ():
        got = run(sanitized["rank_tile"].get_function(f"rank_tile_{suffix}"), launches, outputs, schedule=schedule)
        assert_same(got, run(gpu_model.rank_tile, launches, outputs), f"rank_tile_{suffix}")
    launches, outputs = p.finish_launch(batch, *run(gpu_model.rank_tile, launches, outputs), tie_mode=2,
                                        with_scores=True)  # users 1 and 2 recounted
    if "exact_scores" in FILES:
        got = run(sanitized["exact_scores"].get_function(f"finish_batch_{suffix}"), launches, outputs,
                  schedule="reverse")
        for g, w in zip(finish_result(got), finish_result(run(gpu_model.finish_batch, launches, outputs))):
            np.testing.assert_array_equal(g, w)
    launches, outputs = p.topk_launches(batch[:3], tile=4500, k=5)
    if "topk_tile" in FILES:
        got = run(sanitized["topk_tile"].get_function(f"topk_tile_{suffix}"), launches, outputs, schedule="shuffle")
        assert topk_result(got) == topk_result(run(gpu_model.topk_tile, launches, outputs))
for kw in (dict(n_users=130, n_items=1000, test_density=0.01), dict(n_users=9, big_user=True)) \
        if "fused_rank" in FILES else ():  # counts in shared memory; in global memory
    p = Problem(seed=32, dtype=np.float32, n_factors=11, integer=True, **kw)
    launches, outputs = p.fused_launches(np.arange(p.A.shape[0], dtype=np.int64), span=640)
    got = run(sanitized["fused_rank"].get_function("fused_rank_f32"), launches, outputs, schedule="shuffle")
    assert_same(got, run(gpu_model.fused_rank, launches, outputs), "fused_rank")
if "fused_rank" in FILES:  # TF32 mode: two row blocks, a span and a half (the emulated mma.sync is slow)
    p = Problem(seed=34, dtype=np.float32, n_users=130, n_items=300, n_factors=11, integer=True, test_density=0.03)
    launches, outputs = p.fused_launches(np.arange(130, dtype=np.int64), span=256, tf32=True)
    got = run(sanitized["fused_rank"].get_function("fused_rank_tf32"), launches, outputs, schedule="shuffle")
    assert_same(got, run(gpu_model.fused_rank, launches, outputs), "fused_rank_tf32")
if "topk_tile" in FILES:
    p = Problem(seed=33, dtype=np.float32, n_users=130, n_items=1000, n_factors=11, integer=True)
    batch = np.arange(130, dtype=np.int64)
    launches, outputs = p.fused_topk_launches(batch, 640, fused_topk_thresholds(p, batch, np.random.default_rng(3)))
    want = fused_topk_result(run(gpu_model.fused_topk, launches, outputs))
    for name in ("fused_topk_f32", "fused_topk_tf32"):
        got = run(sanitized["topk_tile"].get_function(name), launches, outputs, schedule="shuffle")
        assert fused_topk_result(got) == want, name
    finish, tiles = Problem(seed=34, n_items=9000).topk_finish_launch(np.arange(7, dtype=np.int64), 5000, 10)
    got = run(sanitized["topk_tile"].get_function("topk_finish"), finish, tiles, schedule="reverse")
    assert topk_result(got) == topk_result(run(gpu_model.topk_finish, finish, tiles))
if "exact_scores" in FILES:
    p = Problem(seed=35, dtype=np.float32, n_items=700, bias=True)
    users, items = np.arange(700, dtype=np.int64) % 7, np.arange(700, dtype=np.int64)[::-1].copy()
    args = (users, items, np.int64(700), *p.launch_args(), np.uint64(p.seed), np.int32(1), np.zeros(700),
            np.zeros(700, dtype=np.uint64))
    got = run(sanitized["exact_scores"].get_function("pair_scores_f32"), [((2,), (256,), args)], args[-2:],
              schedule="shuffle")
    for g, w in zip(got, run(gpu_model.pair_scores_kernel, [((2,), (256,), args)], args[-2:])):
        np.testing.assert_array_equal(g, w)
X = np.random.default_rng(36).standard_normal((300, 5)).astype(np.float32)
for kernel, out, extra in () if "magnitudes" not in FILES else (("abs_max_columns", np.zeros(5, dtype=np.uint64), (np.int64(100),)),  # 3 blocks of 100 rows
                           ("max_row_norm_sq", np.zeros(1, dtype=np.uint64), ()),
                           ("row_norms", np.zeros(300), ())):
    launches = [((3,), (256,), (X, np.int64(300), np.int64(5), *extra, out))]
    got = run(sanitized["magnitudes"].get_function(f"{kernel}_f32"), launches, (out,), schedule="shuffle")
    np.testing.assert_array_equal(got[0], run(getattr(gpu_model, kernel), launches, (out,))[0])
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


FILES = ("rank_tile", "exact_scores", "topk_tile", "fused_rank", "magnitudes")


def clean(sanitize, include=_gpu.kernels_dir(), files=FILES):
    """The script that runs every kernel of `files` (kernels/*.cu) in folder `include` under `sanitize`."""
    return (f"from pathlib import Path\nSANITIZE, INCLUDE, FILES = {sanitize!r}, Path({str(include)!r}), {files!r}\n"
            + CLEAN)


def run_sanitized(script, sanitize="address"):
    env = {**os.environ, "LD_PRELOAD": RUNTIMES[sanitize], **ENV[sanitize], "PYTHONPATH": str(TESTS)}
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)


def build_all(sanitize, include=_gpu.kernels_dir(), files=FILES, extra=()):
    """The kernel files (and `extra` sources) built with the sanitizer, in parallel: the
    subprocesses find them in the build cache."""
    options = tuple(f"-I{include}" if o.startswith("-I") else o for o in _gpu.compile_options())
    sources = [((Path(include) / f"{file}.cu").read_text(), options) for file in files]
    with ThreadPoolExecutor(len(sources) + len(extra)) as pool:
        list(pool.map(lambda source: build(*source, sanitize=sanitize), [*sources, *extra]))


@pytest.mark.skipif(RUNTIMES["address"] is None, reason="no g++ with AddressSanitizer here")
def test_kernels_run_clean_under_the_sanitizers_and_an_overread_is_reported():
    build_all("address", extra=[(READ_PAST, ())])
    result = run_sanitized(clean("address"))
    assert result.returncode == 0 and result.stdout.strip() == "clean", result.stderr[-5000:]
    assert "runtime error" not in result.stderr and "AddressSanitizer" not in result.stderr, result.stderr[-5000:]
    result = run_sanitized(OUT_OF_BOUNDS)
    assert result.returncode != 0 and "not reported" not in result.stdout
    assert "ERROR: AddressSanitizer: use-after-poison" in result.stderr, result.stderr[-5000:]
    assert "read_past" in result.stderr  # the stack names the kernel


BACKEND = PRELUDE + r"""
# gpureco's GPU backend end to end on the kernels built with ThreadSanitizer: calc_reco_metrics
# and top_k (the top-K kernel, the fused sample and threshold, the full-row path), tiles and
# fused, several blocks a tile and several tiles, the CPU's numbers
import warnings
from conftest import assert_identical, cpu_and_gpu, problem_with_special_users
from emulation import device
import gpureco
from gpureco.engine import _gpu


class Patch:
    def setattr(self, obj, name, value):
        setattr(obj, name, value)


class Sanitized(RawModule):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, sanitize="thread", **kwargs)
        built.append(self)


built = []


device.RawModule = Sanitized
_gpu.TILE_ITEMS, _gpu.FUSED_BLOCKS = 5000, 4  # (RANK_SPAN as built: the kernels come from the cache)
X_train, X_test, A, B, bias = problem_with_special_users(41, 14, 9000, 5, 0.01, np.float32, True)
launched = set()
for fused in (False, True):
    _gpu.FUSED = fused
    with device.emulated_device(Patch(), schedule="shuffle", seed=3) as cupy:
        assert_identical(*cpu_and_gpu(X_train, X_test, A, B, k=10, item_biases=bias, break_ties_with_noise=True))
        for k in (10, 1100):  # 1,100: above TOPK_MAX_K, the full-row path
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                lists = [gpureco.top_k(A, B, k, X_train=X_train, item_biases=bias, device=d) for d in ("cpu", "gpu")]
            for cpu, gpu in zip(*lists):
                np.testing.assert_array_equal(gpu, cpu)
        # users 2-13: none takes the full-row path, so each row's K best are chosen by topk_select
        lists = [gpureco.top_k(A, B, 10, X_train=X_train, item_biases=bias, users=np.arange(2, 14), device=d)
                 for d in ("cpu", "gpu")]
        for cpu, gpu in zip(*lists):
            np.testing.assert_array_equal(gpu, cpu)
    launched |= {name for name, _, _ in cupy.launches}
assert built and launched >= {"rank_tile_f32", "fused_rank_f32", "finish_batch_f32", "pair_scores_f32",
                              "sort_tests", "topk_tile_f32", "topk_finish", "fused_topk_f32", "topk_select", "topk_gather"}, launched
print("clean")
"""
RACES = """
// Lanes exchange values through shared memory: after a __syncwarp (no race), after a vote (a
// race), and across warps after a __syncwarp (a race: only __syncthreads orders two warps).
extern "C" __global__ void after_syncwarp(const int* x, int* y) {
    __shared__ int s[64];
    s[threadIdx.x] = x[threadIdx.x];
    __syncwarp();
    y[threadIdx.x] = s[threadIdx.x ^ 1];
    __syncwarp();
    s[threadIdx.x] = 2 * x[threadIdx.x];  // (the reads above are ordered before these writes)
    __syncthreads();
    y[threadIdx.x] += s[63 - threadIdx.x];
}
extern "C" __global__ void after_vote(const int* x, int* y) {
    __shared__ int s[64];
    s[threadIdx.x] = x[threadIdx.x];
    __ballot_sync(0xFFFFFFFFu, 1);
    y[threadIdx.x] = s[threadIdx.x ^ 1];
}
extern "C" __global__ void across_warps(const int* x, int* y) {
    __shared__ int s[64];
    s[threadIdx.x] = x[threadIdx.x];
    __syncwarp();
    y[threadIdx.x] = s[63 - threadIdx.x];
}
"""
RACY = PRELUDE + r"""
x, y = np.arange(64, dtype=np.int32), np.zeros(64, dtype=np.int32)
RawModule(code=code, sanitize="thread").get_function(name)((2,), (64,), (x, y), schedule="shuffle")
print(name, "ran")
"""


def racy(name):
    """The script that runs kernel `name` of RACES under ThreadSanitizer."""
    return f"code, name = {RACES!r}, {name!r}\n" + RACY


RACE_MUTANTS = {  # (file, old, new, the kernel file run): races that every schedule of the emulator runs correctly
    "a vote in place of gr_defer's __syncwarp": ("bands.cuh", "        __syncwarp();\n        queued -= 32;",
                                                 "        __ballot_sync(0xFFFFFFFFu, 1);\n        queued -= 32;",
                                                 "rank_tile"),
    "gr_defer's second __syncwarp removed (a lane queues into a slot another still reads)": (
        "bands.cuh", "        settle(queue[queued + lane]);\n        __syncwarp();", "        settle(queue[queued + lane]);",
        "rank_tile"),
    "topk_finish without its first barrier": ("topk_tile.cu", "    __syncthreads();  // every thread has read overflow",
                                              "    // every thread has read overflow", "topk_tile"),
    # the warps' mma.sync shuffles keep them in step here, so no schedule shows it
    "fused_rank_tf32 storing a step's parts while another warp reads the last": (
        "score_tile.cuh", "        __syncthreads();  // the step is read: the next may overwrite it\n", "", "fused_rank"),
}


def tsan_races(stderr):
    return [line for line in stderr.splitlines() if line.startswith("SUMMARY: ThreadSanitizer")]


@pytest.mark.skipif(RUNTIMES["thread"] is None, reason="no g++ with ThreadSanitizer here")
def test_kernels_have_no_data_race_and_races_are_reported(tmp_path):
    assert set(FILES) == {path.stem for path in _gpu.kernels_dir().glob("*.cu")}  # every kernel file is checked
    mutants = {}
    for n, (mutant, (file, old, new, _)) in enumerate(RACE_MUTANTS.items()):
        folder = tmp_path / f"mutant{n}"
        shutil.copytree(_gpu.kernels_dir(), folder)
        source = (folder / file).read_text()
        assert source.count(old) == 1, mutant
        (folder / file).write_text(source.replace(old, new))
        mutants[mutant] = folder
    with ThreadPoolExecutor(len(mutants) + 2) as pool:
        build_all("thread", extra=[(RACES, ())])
        list(pool.map(lambda mutant: build_all("thread", mutants[mutant], (RACE_MUTANTS[mutant][3],)), mutants))
        runs = {name: pool.submit(run_sanitized, script, "thread") for name, script in [
            ("clean", clean("thread")), ("backend", BACKEND),
            *((kernel, racy(kernel)) for kernel in ("after_syncwarp", "after_vote", "across_warps")),
            *((mutant, clean("thread", folder, (RACE_MUTANTS[mutant][3],))) for mutant, folder in mutants.items())]}
        results = {name: future.result() for name, future in runs.items()}
    for name in ("clean", "backend", "after_syncwarp"):
        result = results[name]
        assert result.returncode == 0 and not tsan_races(result.stderr), (name, result.stderr[-6000:])
        assert "ThreadSanitizer" not in result.stderr, (name, result.stderr[-6000:])
    assert results["clean"].stdout.strip() == results["backend"].stdout.strip() == "clean"
    assert results["after_syncwarp"].stdout.strip() == "after_syncwarp ran"
    for name, where in (("after_vote", "in after_vote"), ("across_warps", "in across_warps")):
        result = results[name]
        assert result.returncode == 66 and f"{name} ran" in result.stdout, (name, result.stderr[-3000:])
        assert any(line.endswith(where) for line in tsan_races(result.stderr)), (name, result.stderr[-3000:])
    for mutant, (file, _, _, _) in RACE_MUTANTS.items():
        result = results[mutant]
        assert result.stdout.strip() == "clean", (mutant, result.stderr[-3000:])  # the numbers are still right
        assert result.returncode == 66 and any(f"/{file}:" in line for line in tsan_races(result.stderr)), \
            (mutant, result.stderr[-3000:])
