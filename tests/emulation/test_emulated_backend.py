"""gpureco's GPU backend end to end with the real kernels under the host emulator (NumPy in
place of CuPy and cuBLAS): calc_reco_metrics, evaluate and top_k with device="gpu" give the
CPU backend's numbers bit for bit, over several item tiles and rank_tile blocks of 4,096 items, batches,
ties, NaN and constant scores, the out-of-memory halving and the top-K paths; and they do
not move when the filter scores are perturbed anywhere within the error bound that the
backend assumes of cuBLAS."""
import warnings

import numpy as np
import pytest

import gpu_model
import gpureco
from conftest import assert_identical, cpu_and_gpu, problem_with_special_users
from emulation.device import emulated_device
from emulation.emulator import have_compiler
from gpureco.engine import _gpu, _scores

pytestmark = pytest.mark.skipif(not have_compiler(), reason="no C++ compiler (g++) on PATH")

TILE = 5000  # items per score tile: two chunks (topk_tile); with SPAN, two blocks of rank_tile per user
SPAN = 4096  # items of one rank_tile block (kernels compiled with -DRANK_SPAN=4096, as _gpu.compile_options says)
N_ITEMS = 9000  # two tiles, the second one a single rank_tile block; top_k's buffers fill up and shrink
METRICS = ("P", "TP", "R", "AP", "TAP", "NDCG", "Hit", "RR", "ROC_AUC", "PR_AUC")
SCHEDULES = [dict(schedule="forward", block_order="forward"), dict(schedule="reverse", block_order="reverse"),
             dict(schedule="shuffle", block_order="shuffle", seed=5)]


@pytest.fixture(autouse=True)
def tiles(monkeypatch):
    monkeypatch.setattr(_gpu, "TILE_ITEMS", TILE)
    monkeypatch.setattr(_gpu, "RANK_SPAN", SPAN)


def problem(seed, n_users=14, dtype=np.float64, integer=False):
    return problem_with_special_users(seed, n_users, N_ITEMS, 4, 0.01, dtype, integer)


METRIC_CASES = {
    "f64": dict(problem=dict(seed=1), kw=dict()),
    "f32-biases": dict(problem=dict(seed=2, dtype=np.float32), kw=dict(biases=True, cumulative=True)),
    "f32-ties-noise": dict(problem=dict(seed=3, dtype=np.float32, integer=True),
                           kw=dict(break_ties_with_noise=True, seed=9)),
    "f64-ties-biases": dict(problem=dict(seed=4, integer=True), kw=dict(biases=True)),
    "biases-only": dict(problem=dict(seed=5, integer=True), kw=dict(biases=True, no_factors=True)),
}


@pytest.mark.parametrize("case", METRIC_CASES)
def test_calc_reco_metrics_equals_the_cpu(monkeypatch, case):
    X_train, X_test, A, B, bias = problem(**METRIC_CASES[case]["problem"])
    kw = dict(METRIC_CASES[case]["kw"])
    if kw.pop("biases", False):
        kw["item_biases"] = bias
    if kw.pop("no_factors", False):
        A = B = None
    with emulated_device(monkeypatch, **SCHEDULES[list(METRIC_CASES).index(case) % 3]) as cupy:
        cpu, gpu = cpu_and_gpu(X_train, X_test, A, B, k=10, **kw)
    assert_identical(cpu, gpu)
    assert np.isfinite(cpu["NDCG@K"]).sum() >= 8
    kernels = {name[:-4] if name[-4:] in ("_f32", "_f64") else name for name, _, _ in cupy.launches}
    assert kernels == {"rank_tile", "pair_scores", "sort_tests", "finish_batch"} | (
        {"abs_max_columns", "max_row_norm_sq"} if A is not None else set()) | (
        {"transpose"} if A is not None and A.dtype == np.float32 else set())  # the FP32 tiles' items, F x n
    assert ("rank_tile", (13, 2), (256,)) in [(n[:-4], g, b) for n, g, b in cupy.launches]  # 2 spans


@pytest.mark.parametrize("batch_size", [1, 7, None])
def test_batches(monkeypatch, batch_size):
    X_train, X_test, A, B, bias = problem(6, dtype=np.float32, integer=True)
    with emulated_device(monkeypatch, schedule="shuffle", seed=batch_size or 0):
        assert_identical(*cpu_and_gpu(X_train, X_test, A, B, k=10, item_biases=bias, batch_size=batch_size))


def test_out_of_memory_halves_the_batch(monkeypatch):
    X_train, X_test, A, B, _ = problem(7, n_users=12)  # 11 users to evaluate (user 2 has no test items)
    freed = []
    with emulated_device(monkeypatch, fail_above=4) as cupy:
        monkeypatch.setattr(cupy.get_default_memory_pool(), "free_all_blocks", lambda: freed.append(1))
        assert_identical(*cpu_and_gpu(X_train, X_test, A, B, batch_size=12))
    users = [grid[0] for name, grid, _ in cupy.launches if name.startswith("rank_tile")]
    assert len(freed) == 2 and max(users) <= 4 and sum(users) == 2 * 11  # 11 -> 5 -> 2 users; two tiles each


def _both_top_k(*args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        cpu = gpureco.top_k(*args, device="cpu", **kw)
        gpu = gpureco.top_k(*args, device="gpu", **kw)
    np.testing.assert_array_equal(gpu[0], cpu[0])
    np.testing.assert_array_equal(gpu[1], cpu[1])
    return cpu


@pytest.mark.parametrize("k", [1, 10, 1000, 1100])  # 1,100 > TOPK_MAX_K: the full-row path
def test_top_k_equals_the_cpu(monkeypatch, k):
    X_train, _, A, B, bias = problem(8, n_users=8, dtype=np.float32, integer=k == 10)
    full_rows = []
    inner = _gpu._full_row_candidates
    monkeypatch.setattr(_gpu, "_full_row_candidates", lambda *a: full_rows.append(a[2].shape[0]) or inner(*a))
    with emulated_device(monkeypatch, **SCHEDULES[k % 3]) as cupy:
        items, _ = _both_top_k(A, B, k, X_train=X_train, item_biases=bias, break_ties_with_noise=k == 10, seed=3)
        assert (items[2:] >= 0).all()
        if k == 10:
            _both_top_k(None, None, k, item_biases=bias)
            _both_top_k(A, np.ones_like(B), k, X_train=X_train)  # every score equal: the buffers overflow
    # the full-row users: all of them beyond TOPK_MAX_K; else user 0 (a NaN factor: its filter scores are not
    # finite, so only the defined scores can tell), and in the all-tied call (B of ones) every user
    assert full_rows == ([8] if k > 1000 else [1, 8] if k == 10 else [1])
    assert any(name.startswith("topk_tile") for name, _, _ in cupy.launches) == (k <= 1000)


@pytest.mark.parametrize("k, dtype, batch_size", [(1, np.float64, None), (10, np.float32, 5), (700, np.float32, None),
                                                   (1000, np.float64, 3)])
def test_top_k_rows_chosen_by_topk_select(monkeypatch, k, dtype, batch_size):
    """Where no user takes the full-row path, each row's K best candidates are chosen on the
    device by topk_select (no sort of the batch's candidates): the CPU's lists, with ties
    (integer factors, noise or not), biases, batches, and K near the candidates' count."""
    X_train, _, A, B, bias = problem(10 + k, n_users=10, dtype=dtype, integer=k == 10)
    users = np.arange(2, 10)  # users 0 and 1 (NaN and constant scores) take the full-row path
    full_rows, sorts = [], []
    inner, inner_sort = _gpu._full_row_candidates, _gpu.select_top_k
    monkeypatch.setattr(_gpu, "_full_row_candidates", lambda *a: full_rows.append(a[2].shape[0]) or inner(*a))
    monkeypatch.setattr(_gpu, "select_top_k", lambda *a: sorts.append(1) or inner_sort(*a))
    with emulated_device(monkeypatch, **SCHEDULES[k % 3]) as cupy:
        for noise in (False, True):
            items, _ = _both_top_k(A, B, k, X_train=X_train, item_biases=bias, users=users, seed=3,
                                   break_ties_with_noise=noise, batch_size=batch_size)
            assert (items >= 0).all()
    assert full_rows == [] and sorts == []
    launched = [grid for name, grid, _ in cupy.launches if name == "topk_select"]
    assert sum(grid[0] for grid in launched) == 2 * len(users)


def test_given_scores_equal_the_cpu(monkeypatch):
    """evaluate with a score matrix and with a score function: the kernels read rows of it
    through a leading dimension, a tile at a time."""
    X_train, X_test, _, _, _ = problem(9)
    rng = np.random.default_rng(9)
    scores = np.round(rng.standard_normal(X_test.shape), 1)  # many ties
    scores[0] = np.nan
    scores[1] = 0.5
    scores[4, :100] = np.nan

    def score_fn(users):
        return scores[users]
    with emulated_device(monkeypatch, schedule="reverse", block_order="shuffle", seed=2) as cupy, \
            warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the NaN users are announced
        for given in (scores, score_fn):
            for kw in (dict(), dict(break_ties_with_noise=True, seed=4), dict(batch_size=5)):
                out = {device: gpureco.evaluate(given, X_test, X_train, metrics=METRICS, k=10, device=device,
                                                output="numpy", **kw) for device in ("cpu", "gpu")}
                assert_identical(out["cpu"], out["gpu"])
                assert np.isfinite(out["cpu"]["NDCG@10"]).sum() >= 8
    grids = [grid for name, grid, _ in cupy.launches if name == "rank_tile_f64"]
    assert (13, 2) in grids and (13, 1) in grids  # the second tile: rows[:, 5000:], a strided view


@pytest.mark.parametrize("ties", ["optimistic", "pessimistic", "average"])
@pytest.mark.parametrize("sort_max", [_gpu.SORT_TESTS_MAX, 2])
def test_tie_modes_equal_the_cpu(monkeypatch, ties, sort_max):
    """ties="optimistic" / "pessimistic" / "average" (test items keyed 0 or UINT64_MAX, the
    pool item + 1, and the groups' ranks fixed up on the host), with the filter's scores near
    every tie (integer factors) and with given scores, over tiles, blocks and batches; the test
    items sorted by the sort_tests kernel, or (users of more than sort_max) by cupy.lexsort."""
    from gpureco.engine._conventions import AVERAGE_TIES
    X_train, X_test, A, B, bias = problem(12, dtype=np.float32, integer=True)
    names = [name.removesuffix("@K") for name in AVERAGE_TIES]
    scores = np.round(np.random.default_rng(12).standard_normal(X_test.shape), 1)
    monkeypatch.setattr(_gpu, "SORT_TESTS_MAX", sort_max)
    with emulated_device(monkeypatch, schedule="shuffle", block_order="shuffle", seed=7) as cupy, \
            warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for batch_size in (None, 5):
            out = {device: gpureco.Evaluator(X_test, X_train, names, [1, 10], ties=ties, device=device,
                                             output="numpy", batch_size=batch_size)(A, B, item_biases=bias)
                   for device in ("cpu", "gpu")}
            assert_identical(out["cpu"], out["gpu"])
            assert np.isfinite(out["cpu"]["NDCG@10"]).sum() >= 8
        out = {device: gpureco.evaluate(scores, X_test, X_train, names, 10, ties=ties, device=device, output="numpy")
               for device in ("cpu", "gpu")}
        assert_identical(out["cpu"], out["gpu"])
        first = gpureco.evaluate(scores, X_test, X_train, ["NDCG"], 10, output="numpy")
    assert not np.array_equal(first["NDCG@10"], out["cpu"]["NDCG@10"], equal_nan=True)  # the rule matters here
    assert np.diff(X_test.indptr).max() > 2
    assert any(name == "sort_tests" for name, _, _ in cupy.launches) == (sort_max > 2)


@pytest.mark.parametrize("dtype, tf32", [(np.float32, False), (np.float64, False), (np.float32, True)])
def test_filter_scores_anywhere_within_the_bound_change_nothing(monkeypatch, dtype, tf32):
    """Emulation cannot round as cuBLAS does; instead every score tile is perturbed by random
    amounts up to the bound that the backend assumes of cuBLAS (score_tolerance, before its
    doubling for safety), extremes included; with tf32, the bound of the TF32 split (the tile's
    second GEMM, hi*hi added to the correction, is perturbed). Ranks, metrics and top-K lists
    stay the CPU's; a perturbation 10 times larger does move them (the kernels do see it: with
    integer factors every tie lies at the edge of the band that the kernels settle with the
    defined score)."""
    monkeypatch.setattr(_gpu, "TF32_TILES_MIN_FACTORS", 0)  # the split tiles for this small model
    X_train, X_test, A, B, bias = problem(10, n_users=10, dtype=dtype, integer=True)  # ties: all near the bound
    item_abs_max, bias_abs_max = _scores.magnitudes(B, bias)
    item_norm_max = _scores.max_row_norm(B)
    rng = np.random.default_rng(11)
    scale = [1.0]

    def perturb(a, out):
        bound = _scores.score_tolerance(a, item_abs_max, bias_abs_max, out.dtype, tf32, item_norm_max) / 2  # per user
        r = rng.uniform(-1, 1, size=out.shape)
        r[rng.random(out.shape) < 0.3] = 1.0
        r[rng.random(out.shape) < 0.3] = -1.0
        out[...] = (out + scale[0] * bound[:, None] * r).astype(out.dtype)
        return out

    def perturbed_matmul(a, b, out):
        assert not tf32
        return perturb(a, np.matmul(a, b, out=out))

    def perturbed_gemm_tf32(a, b, out, accumulate):  # a: the users' hi parts at the second GEMM (|hi| <= |A|)
        gpu_model.gemm_tf32(a, b, out, accumulate)
        return perturb(a, out) if accumulate else out
    kw = dict(k=10, item_biases=bias, tf32=tf32)
    monkeypatch.setattr(_gpu, "TOPK_TF32_FUSED", False)  # top_k in TF32 mode on the split tiles too
    with emulated_device(monkeypatch, schedule="shuffle", seed=3) as cupy:
        monkeypatch.setattr(cupy, "matmul", perturbed_matmul)
        cupy.gemm_tf32 = perturbed_gemm_tf32
        cpu, gpu = cpu_and_gpu(X_train, X_test, A, B, **kw)
        assert_identical(cpu, gpu)
        _both_top_k(A, B, 10, X_train=X_train, item_biases=bias, tf32=tf32)
        scale[0] = 10.0
        cpu, gpu = cpu_and_gpu(X_train, X_test, A, B, **kw)
        assert any(not np.array_equal(cpu[name], gpu[name], equal_nan=True) for name in cpu)


def test_a_seeded_kernel_bug_shows_end_to_end(monkeypatch, tmp_path):
    """The same comparison with a copy of the kernels in which rank_tile reads the training
    bitmap without waiting for it (a deleted __syncthreads()): the metrics differ from the CPU's."""
    for path in _gpu.kernels_dir().glob("*.cu*"):
        (tmp_path / path.name).write_text(path.read_text())
    source = (tmp_path / "rank_tile.cu").read_text()
    barrier = "        atomicOr(&train_bits[j >> 5], 1u << (j & 31));\n    }\n    __syncthreads();\n"
    assert source.count(barrier) == 1
    (tmp_path / "rank_tile.cu").write_text(source.replace(barrier, barrier.replace("__syncthreads();", "")))
    monkeypatch.setattr(_gpu, "kernels_dir", lambda: tmp_path)
    X_train, X_test, A, B, _ = problem(12)
    # (threads in reverse order: warp 7 reads the bits of its items before warp 0 has set them;
    # in forward order the warps' ballots interleave them so that warp 0 sets its bits in time)
    with emulated_device(monkeypatch, schedule="reverse"):
        cpu, gpu = cpu_and_gpu(X_train, X_test, A, B, k=10)
    assert any(not np.array_equal(cpu[name], gpu[name], equal_nan=True) for name in cpu)
