import os
import shutil
import warnings

import numpy as np
import scipy.sparse as sp

import pytest

NVCC = shutil.which("nvcc")  # the CUDA compiler, for the tests that compile the kernels with it
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")


def random_problem(rng, n_users=40, n_items=30, n_factors=4, train_density=0.2, test_density=0.1,
                   integer_factors=False, graded=False, dtype=np.float64):
    """Disjoint random X_train / X_test (dense), factors; integer factors give many score ties."""
    u = rng.random((n_users, n_items))
    X_train = (u < train_density).astype(np.float64)
    X_test = ((u >= train_density) & (u < train_density + test_density)).astype(np.float64)
    if graded:
        X_test *= rng.integers(1, 6, size=X_test.shape)
    if integer_factors:
        A = rng.integers(-2, 3, size=(n_users, n_factors)).astype(dtype)
        B = rng.integers(-2, 3, size=(n_items, n_factors)).astype(dtype)
    else:
        A = rng.standard_normal((n_users, n_factors)).astype(dtype)
        B = rng.standard_normal((n_items, n_factors)).astype(dtype)
    return X_train, X_test, A, B


def problem_with_special_users(seed, n_users, n_items, n_factors, test_density, dtype, integer):
    """A random_problem (CSR interactions, factors, biases) with the users a backend treats
    apart: NaN scores (user 0), constant scores (1), no test items (2), no training items (3)."""
    rng = np.random.default_rng(seed)
    X_train, X_test, A, B = random_problem(rng, n_users=n_users, n_items=n_items, n_factors=n_factors,
                                           train_density=0.1, test_density=test_density, integer_factors=integer,
                                           graded=True, dtype=dtype)
    A[0, 1] = np.nan
    A[1] = 0
    X_test[2] = 0
    X_train[3] = 0
    bias = rng.integers(-2, 3, size=n_items).astype(np.float64) if integer else rng.standard_normal(n_items)
    return to_csr(X_train), to_csr(X_test), A, B, bias


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


def to_csr(X):
    return sp.csr_array(X)


def _gpu_reason():
    import gpureco
    status = gpureco.gpu_available()
    return None if status else status.reason


GPU_MISSING = _gpu_reason()
# benchmarks/gpu_check.py's gpu_tests_fused step: every GPU test through the fused kernels, set
# here so that pytest-xdist's workers see it too
if os.environ.get("GPURECO_TEST_FUSED") == "1":
    from gpureco.engine import _gpu
    _gpu.FUSED = True
# Both backends; the GPU cases are marked `gpu` and skipped (with the reason) where no GPU is usable.
BACKENDS = [pytest.param("cpu", id="cpu"),
            pytest.param("gpu", id="gpu", marks=[pytest.mark.gpu,
                                                 pytest.mark.skipif(GPU_MISSING is not None, reason=f"no GPU: {GPU_MISSING}")])]
needs_gpu = [pytest.mark.gpu, pytest.mark.skipif(GPU_MISSING is not None, reason=f"no GPU: {GPU_MISSING}")]


def cpu_and_gpu(X_train, X_test, A, B, **kw):
    """calc_reco_metrics (all metrics, as a dict) with device="cpu" and with device="gpu"."""
    import gpureco
    kw = {"all_metrics": True, "as_df": False, **kw}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return (gpureco.calc_reco_metrics(X_train, X_test, A, B, device="cpu", **kw),
                gpureco.calc_reco_metrics(X_train, X_test, A, B, device="gpu", **kw))


def assert_identical(cpu, gpu):
    assert set(cpu) == set(gpu)
    for name in cpu:
        np.testing.assert_array_equal(np.asarray(gpu[name]), np.asarray(cpu[name]), err_msg=name)


def without(monkeypatch, package):
    """gpureco's optional imports (gpureco._optional) behave as if `package` were not installed."""
    from gpureco import _optional
    real = _optional.importlib.import_module

    def import_module(name, *args):
        if name == package:
            raise ImportError(name)
        return real(name, *args)

    monkeypatch.setattr(_optional.importlib, "import_module", import_module)
