"""The GPU backend's orchestration on a NumPy model of the device (tests/gpu_model.py): the
same numbers as the CPU engine, bit for bit, on the cases that stress tiles, batches,
sorting and the exact fallbacks. Runs everywhere; test_gpu.py repeats it on a real GPU."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import gpureco
from gpureco.engine import _gpu
from conftest import assert_identical, cpu_and_gpu, random_problem, to_csr
from gpu_model import model_device


def both(X_train, X_test, A, B, **kw):
    assert_identical(*cpu_and_gpu(X_train, X_test, A, B, **{"k": 5, **kw}))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", range(4))
def test_same_numbers_as_the_cpu(monkeypatch, dtype, case):
    rng = np.random.default_rng(case)
    X_train, X_test, A, B = random_problem(rng, n_users=30, n_items=int(rng.integers(10, 60)),
                                           integer_factors=case % 2 == 0, graded=True, dtype=dtype)
    X_train[0], X_test[0] = 0, 0
    X_train[1] = 0
    A[2, 0] = np.nan
    A[3] = 0
    with model_device(monkeypatch):
        for noise in (False, True):
            both(to_csr(X_train), to_csr(X_test), A, B, break_ties_with_noise=noise, seed=case, cumulative=case == 1)
        bias = rng.integers(-2, 3, size=B.shape[0]).astype(np.float64)
        both(to_csr(X_train), to_csr(X_test), A, B, item_biases=bias)
        both(to_csr(X_train), to_csr(X_test), None, None, item_biases=bias)


def test_tiles_batches_and_near_ties(monkeypatch, rng):
    """Several item tiles (one not full), batches of 3 users, and float32 near-ties that only the
    defined score can order."""
    monkeypatch.setattr(_gpu, "TILE_ITEMS", 64)
    n_items = 150
    A = rng.standard_normal((12, 16)).astype(np.float32)
    base = rng.standard_normal((n_items // 2, 16)).astype(np.float32)
    B = np.concatenate([base, base[:, ::-1]])  # equal scores summed in another order
    X_test = sp.random(12, n_items, density=0.2, format="csr", random_state=2)
    X_train = sp.random(12, n_items, density=0.1, format="csr", random_state=3)
    X_train = X_train - X_train.multiply(X_test > 0)
    X_train.eliminate_zeros()
    with model_device(monkeypatch):
        both(X_train, X_test, A, B, batch_size=3)


@pytest.mark.parametrize("batch_size", [4, 7, 40])
def test_each_batch_is_consumed_while_the_next_runs(monkeypatch, rng, batch_size):
    """The engine takes each batch's results (the rows of a part, copied on a stream of their own
    that waited for the batch's event) once the next batch is launched, so that the host's metrics
    overlap the device: parts that cover every row in order, users without test items before,
    between and after the batches, a subset of users (Evaluator.update), one batch (one copy, no
    stream); the CPU's numbers."""
    from gpureco.engine import _engine
    import gpu_model
    X_train, X_test, A, B = random_problem(rng, n_users=20, n_items=30)
    X_test[:, 0], X_train[:, 0] = 1, 0  # every row has a test item
    X_test[[0, 4, 5, 19]] = 0  # but these: no scores, NaN metrics
    log = []
    part_metrics, finish = _engine._part_metrics, gpu_model._Module.functions["finish_batch_f64"]
    monkeypatch.setattr(_engine, "_part_metrics", lambda *a: log.append(("part", a[6], a[7])) or part_metrics(*a))
    monkeypatch.setitem(gpu_model._Module.functions, "finish_batch_f64",
                        lambda grid, block, args: log.append(("batch", grid[0])) or finish(grid, block, args))
    with model_device(monkeypatch):
        both(to_csr(X_train), to_csr(X_test), A, B, batch_size=batch_size)
        log.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            gpureco.calc_reco_metrics(to_csr(X_train), to_csr(X_test), A, B, k=5, batch_size=batch_size, device="gpu")
        batches = [entry[1] for entry in log if entry[0] == "batch"]
        parts = [entry[1:] for entry in log if entry[0] == "part"]
        assert sum(batches) == 16 and len(parts) == len(batches) == -(-16 // batch_size)
        assert [kind for kind, *_ in log] == ["batch"] + ["batch", "part"] * (len(batches) - 1) + ["part"]
        assert parts[0][0] == 0 and parts[-1][1] == 20 and all(a[1] == b[0] for a, b in zip(parts, parts[1:]))
        log.clear()
        users = np.array([2, 3, 4, 9, 10, 11, 12, 17])  # a subset, one without test items
        scores = rng.standard_normal((users.shape[0], 30))
        out = {device: gpureco.Evaluator(to_csr(X_test), to_csr(X_train), ["NDCG", "ROC_AUC"], 5, device=device,
                                         output="numpy", batch_size=3) for device in ("cpu", "gpu")}
        for evaluator in out.values():
            log.clear()
            evaluator.update(users, scores)
        assert [kind for kind, *_ in log] == ["batch", "batch", "part", "batch", "part", "part"]  # the GPU's 7 of 8
        assert_identical(out["cpu"].compute(), out["gpu"].compute())


def test_out_of_memory_halves_the_batch(monkeypatch, rng):
    X_train, X_test, A, B = random_problem(rng, n_users=20, n_items=30)
    calls = []
    with model_device(monkeypatch, fail_above=4) as cupy:
        pool = cupy.get_default_memory_pool()
        pool.free_all_blocks = lambda: calls.append("freed")
        both(to_csr(X_train), to_csr(X_test), A, B, batch_size=16)
    assert calls  # 16 -> 8 -> 4 users per batch


def test_a_sort_out_of_memory_halves_the_batch(monkeypatch, rng):
    """CuPy's sorts (Thrust) report a failed scratch allocation as a plain MemoryError, not as
    the allocator's OutOfMemoryError: the batch halves all the same (rank_users sorts the test
    items by lexsort where a user has more than SORT_TESTS_MAX)."""
    X_train, X_test, A, B = random_problem(rng, n_users=20, n_items=30)
    monkeypatch.setattr(_gpu, "SORT_TESTS_MAX", 0)
    failed = []
    with model_device(monkeypatch) as cupy:
        lexsort = cupy.lexsort

        def scarce(keys):
            if keys.shape[-1] > 40:  # the test entries of more than about 4 users
                failed.append(keys.shape[-1])
                raise MemoryError("std::bad_alloc: cudaErrorMemoryAllocation: out of memory")
            return lexsort(keys)
        monkeypatch.setattr(cupy, "lexsort", scarce)
        both(to_csr(X_train), to_csr(X_test), A, B, batch_size=16)
    assert failed


def test_one_user_that_does_not_fit_is_a_clear_error(monkeypatch, rng):
    X_train, X_test, A, B = random_problem(rng, n_users=5, n_items=30)
    X_test[:, 0], X_train[:, 0] = 1, 0
    with model_device(monkeypatch, fail_above=0):
        with pytest.raises(MemoryError, match="one user does not fit in GPU memory"):
            gpureco.calc_reco_metrics(to_csr(X_train), to_csr(X_test), A, B, device="gpu")


@pytest.mark.parametrize("k", [1, 7, 40, 100])
def test_top_k_same_lists_as_the_cpu(monkeypatch, rng, k):
    monkeypatch.setattr(_gpu, "TILE_ITEMS", 5000)
    monkeypatch.setattr(_gpu, "TOPK_MAX_K", 50)  # k = 100 takes the full-row path
    A = rng.integers(-2, 3, size=(6, 3)).astype(np.float32)
    B = rng.integers(-2, 3, size=(12_000, 3)).astype(np.float32)  # few distinct scores: buffers overflow
    X_train = sp.random(6, 12_000, density=0.2, format="csr", random_state=4)
    bias = rng.standard_normal(12_000)
    full_rows = []
    inner = _gpu._full_row_candidates
    monkeypatch.setattr(_gpu, "_full_row_candidates", lambda *a: full_rows.append(a[2].shape[0]) or inner(*a))
    with model_device(monkeypatch):
        for kw in (dict(), dict(item_biases=bias), dict(break_ties_with_noise=True, seed=5)):
            cpu = gpureco.top_k(A, B, k, X_train=X_train, device="cpu", **kw)
            gpu = gpureco.top_k(A, B, k, X_train=X_train, device="gpu", **kw)
            np.testing.assert_array_equal(gpu[0], cpu[0])
            np.testing.assert_array_equal(gpu[1], cpu[1])
        cpu = gpureco.top_k(None, None, k, item_biases=bias, device="cpu")
        gpu = gpureco.top_k(None, None, k, item_biases=bias, device="gpu")
        np.testing.assert_array_equal(gpu[0], cpu[0])
        full_rows.clear()
        ties = np.ones((12_000, 3), dtype=np.float32)  # every score equal: the buffers overflow
        cpu = gpureco.top_k(A, ties, k, X_train=X_train, device="cpu")
        np.testing.assert_array_equal(gpureco.top_k(A, ties, k, X_train=X_train, device="gpu")[0], cpu[0])
    assert full_rows == [6]  # every user took the full-row path


@pytest.mark.parametrize("fused", [False, True])
def test_top_k_of_a_batch_without_a_candidate(monkeypatch, rng, fused):
    """A batch whose every score is NaN (NaN factors), or whose users have no pool item left:
    no candidate in the whole batch, each list all -1 and NaN, as the CPU's (the model's
    bincount refuses an empty array, as CuPy's before 14.2 does)."""
    monkeypatch.setattr(_gpu, "FUSED", fused)
    A = rng.standard_normal((3, 4)).astype(np.float32)
    B = rng.standard_normal((300, 4)).astype(np.float32)
    nan_users = A.copy()
    nan_users[:] = np.nan
    everything = sp.csr_matrix(np.ones((3, 300)))
    with model_device(monkeypatch):
        for kw in (dict(A=nan_users, B=B), dict(A=A, B=B, X_train=everything)):
            cpu = gpureco.top_k(k=5, device="cpu", **kw)
            gpu = gpureco.top_k(k=5, device="gpu", **kw)
            np.testing.assert_array_equal(gpu[0], cpu[0])
            np.testing.assert_array_equal(gpu[1], cpu[1])
            assert (gpu[0] == -1).all()


def test_top_k_full_rows_within_the_workspace(monkeypatch, rng):
    """Users the top-K kernel cannot settle (every score tied: their buffers overflow) take the
    full-row path as many at a time as the workspace left by the batch holds, not all at once:
    here 2 of a batch's 6 (the CPU's lists)."""
    monkeypatch.setattr(_gpu, "TILE_ITEMS", 5000)
    n_items, f = 12_000, 3
    A = rng.integers(-2, 3, size=(6, f)).astype(np.float32)
    ties = np.ones((n_items, f), dtype=np.float32)
    X_train = sp.random(6, n_items, density=0.2, format="csr", random_state=4)
    per_row = n_items * (4 + 40) + 8 * f * 4  # a full row's workspace (float32, bytes_per_user 8 F x 4)
    batch = 6 * (12 * _gpu.TOPK_CAPACITY + 64 + 8 * f * 4)  # the batch's candidate buffers
    batch += f * 5000 * 4  # and a tile's items transposed (float32: FactorScores.fixed_bytes)
    full_rows = []
    inner = _gpu._full_row_candidates
    monkeypatch.setattr(_gpu, "_full_row_candidates", lambda *a: full_rows.append(a[2].shape[0]) or inner(*a))
    with model_device(monkeypatch):
        cpu = gpureco.top_k(A, ties, 10, X_train=X_train, device="cpu")
        gpu = gpureco.top_k(A, ties, 10, X_train=X_train, device="gpu", batch_size=6,
                            max_memory=batch + 2 * per_row + 100)
    np.testing.assert_array_equal(gpu[0], cpu[0])
    np.testing.assert_array_equal(gpu[1], cpu[1])
    assert full_rows == [2, 2, 2]


def test_given_scores_over_several_tiles(monkeypatch, rng):
    """A score matrix wider than one tile: the kernels read each tile as a view into the rows."""
    monkeypatch.setattr(_gpu, "TILE_ITEMS", 16)
    X_train, X_test, _, _ = random_problem(rng, n_users=9, n_items=50)
    scores = rng.integers(-3, 4, size=X_test.shape).astype(np.float64)  # ties
    names = ["P@3", "AP@3", "NDCG@3", "ROC_AUC", "PR_AUC"]
    cpu = gpureco.evaluate(scores, to_csr(X_test), to_csr(X_train), metrics=names, device="cpu", output="numpy")
    with model_device(monkeypatch):
        gpu = gpureco.evaluate(scores, to_csr(X_test), to_csr(X_train), metrics=names, device="gpu", output="numpy",
                               batch_size=4)
    for name in names:
        np.testing.assert_array_equal(gpu[name], cpu[name], err_msg=name)
