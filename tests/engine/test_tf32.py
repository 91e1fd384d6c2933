"""tf32=True: the GPU backend's filter is split_tf32's (hi*lo + lo*hi) + hi*hi on tensor
cores, within score_tolerance's bound of the defined score, so the numbers are those of the
CPU (and of FP32 mode) bit for bit. The split is checked on extreme values; the bound against
an adversarial model of tensor cores (gpu_model.tensor_core_gemm), and shown to be needed; the
backend end to end on the NumPy model of the device. test_gpu.py checks the bound on cuBLAS."""

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

import gpureco
from conftest import assert_identical, cpu_and_gpu, needs_gpu
from gpu_model import _defined, is_tf32, model_device, tensor_core_gemm
from gpureco.engine import _gpu, _scores


def split(X, lo_first=False):
    X = np.ascontiguousarray(X, dtype=np.float32)
    out = np.full((X.shape[0], 2 * X.shape[1]), np.nan, dtype=np.float32)
    parts = _scores.split_tf32(np, X, out, lo_first=lo_first)
    f = X.shape[1]
    return (parts[:, f:], parts[:, :f]) if lo_first else (parts[:, :f], parts[:, f:])


def extreme_floats(rng, n):
    tiny, big = np.finfo(np.float32).tiny, np.finfo(np.float32).max
    special = np.array([0.0, -0.0, 1.0, -1.0, tiny, -tiny, big, -big, np.nextafter(tiny, 0), 1e-45, -1e-45,
                        np.float32(1 + 2**-23), np.float32(1 - 2**-24), np.float32(2**-10 - 2**-34)], dtype=np.float32)
    bits = rng.integers(0, 0x7F800000, size=n, dtype=np.uint32) | (rng.integers(0, 2, size=n, dtype=np.uint32) << 31)
    return np.concatenate([special, bits.view(np.float32)])


def test_the_parts_are_tf32_numbers_within_2_to_the_minus_21(rng):
    """Relative to x, but absolute where a part is subnormal (cut or rounded on its bits)."""
    x = extreme_floats(rng, 20_000)
    hi, lo = split(x.reshape(-1, 2))
    hi, lo = hi.reshape(-1), lo.reshape(-1)
    assert is_tf32(hi) and is_tf32(lo)
    assert np.isfinite(hi).all() and np.isfinite(lo).all()  # never rounded up to infinity (FLT_MAX)
    x64, hi64, lo64 = x.astype(np.float64), hi.astype(np.float64), lo.astype(np.float64)
    assert (np.abs(hi64) <= np.abs(x64)).all()  # hi is x cut toward zero
    normal = np.abs(x64) >= np.finfo(np.float32).tiny
    assert (np.abs(x64 - hi64)[normal] < 2.0**-10 * np.abs(x64)[normal]).all()
    assert (np.abs(x64 - hi64)[~normal] < 2.0**-136).all() and (~normal).sum() > 4
    assert (np.abs(x64 - hi64 - lo64) <= 2.0**-21 * np.abs(x64) + 2.0**-137).all()  # lo subnormal: absolute
    assert np.array_equal(split(x.reshape(-1, 2), lo_first=True)[0].reshape(-1), hi)  # [lo | hi] is the same split


def test_the_parts_of_a_non_finite_value_are_not_finite():
    """So the filter score is not finite either, and the kernels go to the defined score."""
    x = np.array([[np.inf, -np.inf, np.nan, np.float32(-np.nan)]], dtype=np.float32)
    hi, lo = split(x)
    assert not (np.isfinite(hi) & np.isfinite(lo)).any()


def pipeline(A, B, bias, rng, block, c_first, terms="all"):
    """The backend's TF32 filter of every (user, item) on the tensor-core model, as the kernels
    see it (the bias added in float32)."""
    a_hi, a_lo = split(A)
    b_hi, b_lo = split(B)
    correction = {"all": (np.hstack([a_hi, a_lo]), np.hstack([b_lo, b_hi])), "hi*lo": (a_hi, b_lo)}.get(terms)
    c = tensor_core_gemm(*correction, rng=rng, block=block) if correction else None
    s = tensor_core_gemm(a_hi, b_hi, c, rng=rng, block=block, c_first=c_first)
    return s + bias.astype(np.float32)[None, :] if bias is not None else s


def ratio_to_bound(fast, A, B, bias, tf32):
    """max over (user, item) of |fast - defined score| / score_tolerance's bound for `tf32` (False:
    FP32, True: the split GEMMs, "fused": the fused TF32 kernels), before its doubling."""
    users, items = np.repeat(np.arange(A.shape[0]), B.shape[0]), np.tile(np.arange(B.shape[0]), A.shape[0])
    defined = _defined(users, items, A, B, A.shape[1], bias).reshape(fast.shape)
    item_abs_max, bias_abs_max = _scores.magnitudes(B, bias if bias is not None else np.zeros(0))
    bound = _scores.score_tolerance(A, item_abs_max, bias_abs_max, np.float32, tf32, _scores.max_row_norm(B)) / 2
    return float((np.abs(fast.astype(np.float64) - defined) / bound[:, None]).max())


def worst_ratio(A, B, bias, **kw):
    """max over (user, item) of |filter - defined score| / the bound (before its doubling)."""
    return ratio_to_bound(pipeline(A, B, bias, np.random.default_rng(5), **kw), A, B, bias, True)


def factor_kinds(rng, n, f):
    """Normal factors; positive factors whose 13 low bits are all set (every cut as large as it
    can be, every error of one sign); factors over 40 binades with random signs."""
    normal = rng.standard_normal((n, f)).astype(np.float32)
    worst = (np.abs(normal).view(np.uint32) | np.uint32(0x1FFF)).view(np.float32)
    wide = (np.exp2(rng.uniform(-20, 20, (n, f))) * rng.choice([-1, 1], (n, f))).astype(np.float32)
    return {"normal": normal, "worst": worst, "wide": wide}


@pytest.mark.parametrize("block, c_first", [(4, True), (4, False), (8, True), (1, True)])
def test_the_tf32_filter_is_within_the_bound_on_a_hostile_tensor_core_model(rng, block, c_first):
    for f in (4, 32, 96):
        users, items = factor_kinds(rng, 12, f), factor_kinds(rng, 150, f)
        for kind in users:
            for bias in (None, rng.standard_normal(150) * 10):
                assert worst_ratio(users[kind], items[kind], bias, block=block, c_first=c_first) <= 1.0, (f, kind)


def test_the_bound_needs_every_term_of_the_split(rng):
    """Without the correction, or with half of it, the worst factors break the bound: the tests
    above can fail."""
    users, items = factor_kinds(rng, 12, 32)["worst"], factor_kinds(rng, 150, 32)["worst"]
    assert worst_ratio(users, items, None, block=4, c_first=True) <= 1.0
    for terms in ("none", "hi*lo"):
        assert worst_ratio(users, items, None, block=4, c_first=True, terms=terms) > 4.0, terms


def test_the_tf32_bound_is_a_few_times_fp32s():
    """What TF32 mode costs in the kernels: a band a few times FP32's, not 2**8 times (the cost
    of TF32 inputs without the split)."""
    A = np.ones((1, 128), dtype=np.float32)
    fp32 = _scores.score_tolerance(A, np.ones(128), 0.0, np.float32)
    tf32 = _scores.score_tolerance(A, np.ones(128), 0.0, np.float32, tf32=True)
    assert 3.0 < tf32[0] / fp32[0] < 5.0


def fused_pipeline(A, B, bias, rng, block=8, correction=True):
    """fused_rank_tf32's filter (score_tile.cuh gr_score_tile_tf32) on the tensor-core model:
    per step of 8 factors (zeros past F), the correction lo*hi + hi*lo from zero (two tensor-core
    products), added to the accumulator in float32, then hi*hi accumulated onto it; the bias
    added in float32."""
    f = A.shape[1]
    pad = -f % 8
    a_hi, a_lo = (np.pad(x, ((0, 0), (0, pad))) for x in split(A))
    b_hi, b_lo = (np.pad(x, ((0, 0), (0, pad))) for x in split(B))
    acc = np.zeros((A.shape[0], B.shape[0]), dtype=np.float32)
    for k in range(0, f + pad, 8):
        s = slice(k, k + 8)
        if correction:
            c = tensor_core_gemm(a_lo[:, s], b_hi[:, s], rng=rng, block=block)
            c = tensor_core_gemm(a_hi[:, s], b_lo[:, s], c, rng=rng, block=block)
            acc = acc + c  # float32, rounded to nearest
        acc = tensor_core_gemm(a_hi[:, s], b_hi[:, s], acc, rng=rng, block=block)
    return acc + bias.astype(np.float32)[None, :] if bias is not None else acc


def fused_worst_ratio(A, B, bias, **kw):
    """max over (user, item) of |fused filter - defined score| / the "fused" bound (before its doubling)."""
    return ratio_to_bound(fused_pipeline(A, B, bias, np.random.default_rng(6), **kw), A, B, bias, "fused")


@pytest.mark.parametrize("block", [8, 4, 1])
def test_the_fused_tf32_filter_is_within_its_bound_on_a_hostile_tensor_core_model(rng, block):
    """fused_rank_tf32's filter within score_tolerance(tf32="fused"): F from 3 to 96 (steps with
    zeros past F), extreme factors, biases; tensor cores adding a block of products at a time."""
    for f in (3, 8, 32, 96):
        users, items = factor_kinds(rng, 12, f), factor_kinds(rng, 150, f)
        for kind in users:
            for bias in (None, rng.standard_normal(150) * 10):
                assert fused_worst_ratio(users[kind], items[kind], bias, block=block) <= 1.0, (f, kind)


def test_the_fused_bound_needs_the_correction_and_is_the_splits(rng):
    """Without the correction the worst factors break the fused bound (the test above can fail);
    the bound is within 15% of the split GEMMs' at F = 128, about 5 times FP32's."""
    users, items = factor_kinds(rng, 12, 32)["worst"], factor_kinds(rng, 150, 32)["worst"]
    assert fused_worst_ratio(users, items, None) <= 1.0
    assert fused_worst_ratio(users, items, None, correction=False) > 4.0
    A = np.ones((1, 128), dtype=np.float32)
    fp32, split_, fused = (_scores.score_tolerance(A, np.ones(128), 0.0, np.float32, tf32=t)[0]
                           for t in (False, True, "fused"))
    assert 1.0 < fused / split_ < 1.15 and 3.0 < fused / fp32 < 6.0


def tf32_problem(rng, n_users=20, n_items=300, n_factors=16):
    """Near-ties (items that are other items' factors reversed) that only the defined score
    orders, users with NaN or zero factors, an empty and a cold-start user."""
    A = rng.standard_normal((n_users, n_factors)).astype(np.float32)
    base = rng.standard_normal((n_items // 2, n_factors)).astype(np.float32)
    B = np.concatenate([base, base[:, ::-1] * np.float32(1 + 2**-20)]).astype(np.float32)
    A[0, 1], A[1] = np.nan, 0
    X_test = sp.random(n_users, n_items, density=0.05, format="lil", random_state=1)
    X_train = sp.random(n_users, n_items, density=0.1, format="lil", random_state=2)
    X_test[2], X_train[3] = 0, 0
    X_train, X_test = X_train.tocsr(), X_test.tocsr()
    X_train = (X_train - X_train.multiply(X_test != 0)).tocsr()
    X_train.eliminate_zeros()
    return X_train, X_test, A, B


def test_tf32_mode_gives_the_cpus_numbers_on_the_model(monkeypatch, rng):
    monkeypatch.setattr(_gpu, "TF32_TILES_MIN_FACTORS", 0)  # the split tiles for a small model
    monkeypatch.setattr(_gpu, "TILE_ITEMS", 128)  # three tiles, the last one short
    monkeypatch.setattr(_gpu, "TOPK_MAX_K", 50)  # k above it takes the full-row path
    X_train, X_test, A, B = tf32_problem(rng)
    bias = rng.standard_normal(B.shape[0])
    with model_device(monkeypatch) as cupy:
        calls = []
        inner = cupy.gemm_tf32
        cupy.gemm_tf32 = lambda a, b, out, accumulate: calls.append((a.shape, b.shape, accumulate)) or inner(
            a, b, out, accumulate)
        for kw in (dict(), dict(item_biases=bias, batch_size=7), dict(break_ties_with_noise=True, seed=3)):
            cpu, gpu = cpu_and_gpu(X_train, X_test, A, B, k=10, tf32=True, **kw)
            assert_identical(cpu, gpu)
        (a1, b1, first), (a2, b2, second) = calls[:2]  # the correction (inner size 2F), then hi*hi (F) added to it
        assert (a1[1], b1, first, a2[1], b2, second) == (32, (128, 32), False, 16, (128, 16), True)
        launched = []
        kernel = _gpu.kernel
        monkeypatch.setattr(_gpu, "kernel", lambda module, name: launched.append(name) or kernel(module, name))
        for k, fused in itertools.product((5, 60), (True, False)):  # the top-K kernel and the full-row path
            monkeypatch.setattr(_gpu, "TOPK_TF32_FUSED", fused)  # fused_topk_tf32 (the default), or the split tiles
            calls.clear(), launched.clear()
            cpu = gpureco.top_k(A, B, k, X_train=X_train, item_biases=bias, device="cpu")
            gpu = gpureco.top_k(A, B, k, X_train=X_train, item_biases=bias, device="gpu", tf32=True)
            np.testing.assert_array_equal(gpu[0], cpu[0])
            # fused: the sample's FP32 tiles, then fused_topk_tf32 (the full-row path: FP32 tiles); else split tiles
            assert bool(calls) != fused
            assert ("fused_topk_tf32" in launched) == (fused and k <= _gpu.TOPK_MAX_K)
            np.testing.assert_array_equal(gpu[1], cpu[1])
    assert max(b[0] for _, b, _ in calls) == 128  # the full row's 300 items in tiles: its parts stay a tile's


@pytest.mark.parametrize("n_factors, split", [(64, False), (127, False), (128, True), (130, True)])
def test_tf32_mode_splits_the_tiles_from_128_factors(monkeypatch, rng, n_factors, split):
    """rank_users in TF32 mode scores in the split TF32 tiles from TF32_TILES_MIN_FACTORS (128)
    factors on, in the FP32 tiles below (measured faster there on an H100): the CPU's numbers
    either way."""
    X_train, X_test, A, B = tf32_problem(rng, n_users=12, n_items=200, n_factors=n_factors)
    with model_device(monkeypatch) as cupy:
        calls = []
        inner = cupy.gemm_tf32
        cupy.gemm_tf32 = lambda a, b, out, accumulate: calls.append(accumulate) or inner(a, b, out, accumulate)
        assert_identical(*cpu_and_gpu(X_train, X_test, A, B, k=10, tf32=True))
    assert bool(calls) == split


def test_tf32_mode_counts_the_parts_in_the_workspace(monkeypatch, rng):
    """The parts of the users (8 F bytes each) and of a tile of items come out of max_memory."""
    monkeypatch.setattr(_gpu, "TF32_TILES_MIN_FACTORS", 0)  # the split tiles for a small model
    X_train, X_test, A, B = tf32_problem(rng, n_users=20, n_items=300, n_factors=16)
    sizes = {}
    with model_device(monkeypatch):
        for tf32 in (False, True):
            inner = _gpu.kernel

            def counting(file, name):
                fn = inner(file, name)
                return (lambda grid, block, args: sizes.setdefault(tf32, set()).add(grid[0]) or fn(grid, block, args)
                        ) if name.startswith("rank_tile") else fn
            monkeypatch.setattr(_gpu, "kernel", counting)
            gpureco.calc_reco_metrics(X_train, X_test, A, B, k=5, device="gpu", tf32=tf32, max_memory=300 * 4 * 10 + 300 * 128)
            monkeypatch.setattr(_gpu, "kernel", inner)
    assert max(sizes[True]) < max(sizes[False])


@pytest.mark.gpu
@pytest.mark.skipif(needs_gpu[1].args[0], reason=needs_gpu[1].kwargs["reason"])
@pytest.mark.parametrize("tf32", [False, True])
def test_cublas_filters_are_within_their_bounds_on_the_device(rng, tf32, monkeypatch):
    """The bounds on the real thing: cuBLAS's FP32 tile, or the TF32 split's two GEMMs, against
    the defined scores, for every (user, item) of the three kinds of factors (the split's tiles
    also where the fused kernels are on, which take TF32 mode's place in the evaluation)."""
    from gpureco.engine import _backend
    monkeypatch.setattr(_gpu, "FUSED", False)
    monkeypatch.setattr(_gpu, "TF32_TILES_MIN_FACTORS", 0)  # the split at 16 factors too
    cp = _backend.cupy()
    n_users, n_items = 64, 5000
    for f in (16, 128):
        users, items = factor_kinds(rng, n_users, f), factor_kinds(rng, n_items, f)
        for kind in users:
            scorer = _gpu.FactorScores(cp.asarray(users[kind]), cp.asarray(items[kind]), None, tf32=tf32)
            assert scorer.tf32 == tf32
            batch = cp.arange(n_users)
            rows = scorer.user_rows(batch)
            S, _, _ = scorer.tile(rows, 0, n_items, cp.empty(n_users * n_items, dtype=cp.float32))
            pairs_u, pairs_i = cp.repeat(batch, n_items), cp.tile(cp.arange(n_items), n_users)
            defined = _gpu._pair_scores(scorer, pairs_u, pairs_i, 0, 0, True)[0].reshape(n_users, n_items)
            bound = scorer.tolerance(batch, rows) / 2
            ratio = float((cp.abs(S.astype(cp.float64) - defined) / bound[:, None]).max())
            assert ratio <= 1.0, (f, kind, ratio)
