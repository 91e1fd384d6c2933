"""The GPU backend against the CPU backend: identical ranks and metrics, bit for bit, for
float64 and float32 factors alike (comparisons closer than cuBLAS's error bound are settled
by the defined score on both), on the cases that stress the kernels; float32 also with the
fused kernel (_gpu.FUSED). Skipped without a GPU."""

import numpy as np
import pytest
import scipy.sparse as sp

import gpureco
from conftest import assert_identical, cpu_and_gpu, needs_gpu, random_problem, to_csr
from gpureco.engine import _gpu

pytestmark = needs_gpu


def both(X_train, X_test, A, B, **kw):
    return cpu_and_gpu(X_train, X_test, A, B, **{"k": 10, **kw})


def near_tie_problem(rng, n_users, n_items, n_factors, dtype):
    """Items that are sums of the same factors in another order: their float32 cuBLAS scores
    differ by a few ulps while their defined scores are equal or nearly so."""
    A = rng.standard_normal((n_users, n_factors)).astype(dtype)
    base = rng.standard_normal((n_items // 2, n_factors)).astype(dtype)
    B = np.concatenate([base, base[:, ::-1] * (1 + 1e-7)]).astype(dtype)[:n_items]
    B = np.concatenate([B, rng.standard_normal((n_items - B.shape[0], n_factors)).astype(dtype)])
    return A, B


@pytest.mark.parametrize("dtype, fused", [(np.float64, False), (np.float32, False), (np.float32, True)])
@pytest.mark.parametrize("case", range(6))
def test_identical_to_cpu_on_random_data(dtype, fused, case, monkeypatch):
    monkeypatch.setattr(_gpu, "FUSED", fused)
    rng = np.random.default_rng(100 + case)
    n_items = [37, 4096, 4097, 65_537, 70_001, 1000][case]
    X_train, X_test, A, B = random_problem(rng, n_users=40 if n_items > 5000 else 60, n_items=n_items,
                                           n_factors=8, integer_factors=case % 2 == 0, graded=True, dtype=dtype)
    X_train[0], X_test[0] = 0, 0  # an empty user
    X_train[1] = 0  # cold start
    A[2, 0] = np.nan
    A[3, 1] = np.inf
    A[4] = 0  # every score equal
    for noise in (False, True):
        cpu, gpu = both(to_csr(X_train), to_csr(X_test), A, B, break_ties_with_noise=noise, seed=case)
        assert_identical(cpu, gpu)


@pytest.mark.parametrize("tf32, fused", [(False, False), (True, False), (False, True), (True, True)])
def test_float32_near_ties_are_settled_like_the_cpu(rng, tf32, fused, monkeypatch):
    monkeypatch.setattr(_gpu, "FUSED", fused)
    A, B = near_tie_problem(rng, 50, 3000, 64, np.float32)
    X_test = sp.random(50, 3000, density=0.05, format="csr", random_state=4)
    cpu, gpu = both(None, X_test, A, B, tf32=tf32)
    assert_identical(cpu, gpu)


@pytest.mark.parametrize("fused", [False, True])
def test_users_with_more_test_items_than_shared_memory(rng, fused, monkeypatch):
    monkeypatch.setattr(_gpu, "FUSED", fused)
    n_items = 20_000
    X_test = sp.random(8, n_items, density=0.2, format="csr", random_state=5)  # ~4000 test items per user
    A = rng.integers(-2, 3, size=(8, 4)).astype(np.float32)
    B = rng.integers(-2, 3, size=(n_items, 4)).astype(np.float32)
    assert np.diff(X_test.indptr).min() > 1024
    assert_identical(*both(None, X_test, A, B, k=50))


def test_biases_non_personalised_and_cumulative(rng):
    X_train, X_test, A, B = random_problem(rng, n_users=50, n_items=300, integer_factors=True)
    bias = rng.integers(-2, 3, size=300).astype(np.float64)
    assert_identical(*both(to_csr(X_train), to_csr(X_test), A, B, item_biases=bias, cumulative=True))
    assert_identical(*both(to_csr(X_train), to_csr(X_test), None, None, item_biases=bias))


@pytest.mark.parametrize("batch_size,max_memory", [(1, None), (7, None), (None, 200_000)])
def test_batching_does_not_change_the_numbers(rng, batch_size, max_memory):
    X_train, X_test, A, B = random_problem(rng, n_users=70, n_items=5000, dtype=np.float32)
    cpu, gpu = both(to_csr(X_train), to_csr(X_test), A, B, batch_size=batch_size, max_memory=max_memory)
    assert_identical(cpu, gpu)


def test_device_inputs_are_used_in_place_and_results_can_stay_there(rng):
    import cupy as cp
    X_train, X_test, A, B = random_problem(rng, n_users=30, n_items=200, dtype=np.float32)
    cpu = gpureco.calc_reco_metrics(to_csr(X_train), to_csr(X_test), A, B, k=5, device="cpu", as_df=False)
    A_d, B_d = cp.asarray(A), cp.asarray(B)
    on_device = gpureco.calc_reco_metrics(to_csr(X_train), to_csr(X_test), A_d, B_d, k=5, output="cupy")
    assert isinstance(on_device["P@K"], cp.ndarray)
    assert_identical({n: v for n, v in cpu.items() if n != "K"},
                     {n: v.get() for n, v in on_device.items() if n != "K"})

    class CudaArrayOnly:  # an array known only by its CUDA array interface (as numba or torch give)
        def __init__(self, a):
            self.__cuda_array_interface__ = a.__cuda_array_interface__
    via_interface = gpureco.calc_reco_metrics(to_csr(X_train), to_csr(X_test), CudaArrayOnly(A_d), CudaArrayOnly(B_d),
                                              k=5, as_df=False, device="cuda:0")
    assert_identical(cpu, via_interface)
    import cupyx.scipy.sparse as csp
    sparse_on_device = gpureco.calc_reco_metrics(csp.csr_matrix(to_csr(X_train).astype(np.float64)),
                                                 csp.csr_matrix(to_csr(X_test).astype(np.float64)), A_d, B_d, k=5,
                                                 as_df=False)
    assert_identical(cpu, sparse_on_device)


def test_auto_uses_the_gpu(rng):
    assert gpureco.gpu_available()
    X_train, X_test, A, B = random_problem(rng)
    out = gpureco.calc_reco_metrics(to_csr(X_train), to_csr(X_test), A, B, output="cupy")
    assert type(out["P@K"]).__module__.startswith("cupy")


@pytest.mark.parametrize("fused", [False, True])
def test_top_k_identical_to_cpu_with_float32_near_ties(rng, fused, monkeypatch):
    """With FUSED and tf32, fused_topk_tf32 (tensor cores) after a sample below and above
    TOPK_SAMPLE_RANK, settling most users itself; K above TOPK_MAX_K takes the full-row path."""
    monkeypatch.setattr(_gpu, "FUSED", fused)
    launched, full_rows = [], []
    kernel, inner = _gpu.kernel, _gpu._full_row_candidates
    monkeypatch.setattr(_gpu, "kernel", lambda module, name: launched.append(name) or kernel(module, name))
    monkeypatch.setattr(_gpu, "_full_row_candidates", lambda *a: full_rows.append(len(a[2])) or inner(*a))
    A, B = near_tie_problem(rng, 40, 70_001, 32, np.float32)
    X_train = sp.random(40, 70_001, density=0.1, format="csr", random_state=6)
    for k, tf32 in ((10, True), (100, True), (10, False), (1024, False), (1500, False)):
        launched.clear(), full_rows.clear()
        cpu = gpureco.top_k(A, B, k, X_train=X_train, device="cpu")
        gpu = gpureco.top_k(A, B, k, X_train=X_train, device="gpu", tf32=tf32)
        np.testing.assert_array_equal(gpu[0], cpu[0])
        np.testing.assert_array_equal(gpu[1], cpu[1])
        if fused and k <= 100:
            assert ("fused_topk_tf32" if tf32 else "fused_topk_f32") in launched, (k, tf32, launched)
        if k <= _gpu.TOPK_MAX_K:
            assert sum(full_rows) < 10, (k, tf32, full_rows)  # of 40 users: the kernels settle most


def test_top_k_overflowing_near_ties_take_the_full_row_path(rng):
    """Every score equal: the kernel's candidate buffer overflows and the full-row path answers."""
    A = np.ones((3, 2), dtype=np.float32)
    B = np.ones((20_000, 2), dtype=np.float32)
    items, scores = gpureco.top_k(A, B, 100, device="gpu")
    np.testing.assert_array_equal(items, np.tile(np.arange(100), (3, 1)))
    np.testing.assert_array_equal(scores, 2.0)
