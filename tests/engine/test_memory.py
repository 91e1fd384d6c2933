"""max_memory on the CPU: the peak memory beyond the inputs stays within the budget (plus
10%), measured with tracemalloc (which sees NumPy's allocations); score blocks sized to the
budget; an explicit budget that cannot hold one user's row is a clear error."""
import tracemalloc
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import gpureco
from gpureco.engine import _engine

N_USERS, N_ITEMS, N_FACTORS = 120, 200_000, 32


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((N_USERS, N_FACTORS), dtype=np.float32)
    B = rng.standard_normal((N_ITEMS, N_FACTORS), dtype=np.float32)
    X_train = sp.random(N_USERS, N_ITEMS, density=3e-4, format="csr", random_state=1)
    X_test = sp.random(N_USERS, N_ITEMS, density=1e-4, format="csr", random_state=2)
    X_test = sp.csr_array(X_test - X_test.multiply(X_train > 0))
    X_test.eliminate_zeros()
    return sp.csr_array(X_train), X_test, A, B


def peak_beyond_inputs(function):
    """(result, bytes): the traced peak during function() above what was allocated before."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        result = function()
        return result, tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("budget_mib", [12, 48])
@pytest.mark.parametrize("metrics", [dict(all_metrics=True), dict()], ids=["all", "top-K"])
def test_peak_memory_within_the_budget(problem, budget_mib, metrics):
    X_train, X_test, A, B = problem
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        reference = gpureco.calc_reco_metrics(X_train, X_test, A, B, k=10, device="cpu", **metrics)
        result, peak = peak_beyond_inputs(lambda: gpureco.calc_reco_metrics(
            X_train, X_test, A, B, k=10, device="cpu", nthreads=2, max_memory=budget_mib << 20, **metrics))
    # beside the budget: the validated copies of X_train and X_test, and the results
    inputs = sum(X.data.nbytes + X.indices.nbytes + X.indptr.nbytes for X in (X_train, X_test))
    results = reference.memory_usage(deep=True).sum() * 4
    assert peak <= 1.1 * (budget_mib << 20) + inputs + results + (1 << 20), peak / 2**20
    assert peak >= 0.5 * (budget_mib << 20)  # the measurement sees the score buffers
    for column in reference:
        np.testing.assert_array_equal(result[column], reference[column])  # the same numbers


def test_blocks_fit_the_budget():
    """Two cache-sized blocks where the budget holds them (one scored while the other is
    ranked), else one block as large as the budget allows; an explicit batch_size is kept."""
    row = N_ITEMS * 4
    users = max(_engine.CPU_BLOCK_USERS, _engine.CPU_BLOCK_BYTES // row)
    assert _engine.cpu_plan(N_ITEMS, 4, 2 * users * row) == (users, 2)
    assert _engine.cpu_plan(N_ITEMS, 4, 2 * users * row - 1) == (users, 1)
    assert _engine.cpu_plan(N_ITEMS, 4, 9 * row) == (9, 1)
    assert _engine.cpu_plan(N_ITEMS, 4, row) == (1, 1)
    assert _engine.cpu_plan(N_ITEMS, 4, 9 * row, batch_size=3) == (3, 2)  # two blocks of 3 fit


def test_a_budget_too_small_for_one_user_is_an_error(problem):
    X_train, X_test, A, B = problem
    with pytest.raises(ValueError, match=r"'max_memory' must be at least 800000 bytes for 200000 items \(one user's "
                                         r"row of 4-byte scores\); got 700000"):
        gpureco.calc_reco_metrics(X_train, X_test, A, B, k=10, device="cpu", max_memory=700_000)


def test_the_default_budget_grows_for_huge_catalogues(monkeypatch):
    monkeypatch.setattr(_engine, "DEFAULT_MAX_MEMORY", 1000)  # as if the catalogue were huge
    assert _engine.cpu_plan(N_ITEMS, 4) == (1, 1)
