"""The determinism rule (docs/architecture.md): every float gpureco returns is computed in an
order gpureco defines, so the numbers are bit-identical for any backend, batch size, user
order and run. On the GPU backend this runs on the adversarial NumPy model of the device
(tests/gpu_model.py: float atomics, parallel scans and an inexact log2 that vary run to run),
under the host emulation of the real kernels (tests/emulation), and on a real GPU when one
is usable."""
import warnings
from decimal import Context, Decimal

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import gpureco
from gpureco.engine import _gpu
from gpureco.engine._metrics import _log2_table_of_size, log2_table, metrics_from_ranks
from gpureco.engine._registry import METRICS
from conftest import GPU_MISSING, random_problem, to_csr
from gpu_model import model_device

ALL = tuple(m.column for m in METRICS)


def exact_log2(values):
    context = Context(prec=50)
    ln2 = context.ln(Decimal(2))
    return np.array([float(context.divide(context.ln(Decimal(int(i))), ln2)) for i in values])


def test_log2_table_is_correctly_rounded():
    rng = np.random.default_rng(7)
    values = np.concatenate([np.arange(2, 3000), rng.integers(3000, 1 << 21, 2000)])
    table = log2_table(1 << 21)
    np.testing.assert_array_equal(table[values], exact_log2(values))
    assert table[0] == table[1] == 0.0 and table[1024] == 10.0


def test_log2_table_where_long_double_is_double():
    """Platforms whose long double is double settle every value with decimals: same table."""
    np.testing.assert_array_equal(_log2_table_of_size(4096, np.float64), _log2_table_of_size(4096))


def _random_ranks(rng, n_users):
    n_pool = rng.integers(2, 40, n_users)
    n_test = np.minimum(rng.integers(0, 8, n_users), n_pool - 1)
    ranks = np.concatenate([np.sort(rng.choice(np.arange(1, p + 1), t, replace=False)) for p, t in zip(n_pool, n_test)]
                           + [np.zeros(0, dtype=np.int64)])
    gains = rng.integers(0, 5, ranks.shape[0]) * rng.choice([1.0, 0.37], ranks.shape[0])  # graded, not all integers
    return ranks.astype(np.int64), gains, n_test.astype(np.int64), n_pool.astype(np.int64)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), gain=st.sampled_from(["linear", "exponential", "binary"]))
def test_metrics_do_not_depend_on_the_order_of_users_or_entries(seed, gain):
    """The arithmetic sees each user's entries in rank order, whatever order they come in."""
    rng = np.random.default_rng(seed)
    ranks, gains, n_test, n_pool = _random_ranks(rng, 25)
    valid = n_test > 0
    cutoffs = np.array([1, 3, 10])
    want = metrics_from_ranks(ranks, gains, n_test, n_pool, cutoffs, ALL, valid, gain=gain)
    users = rng.permutation(n_test.shape[0])
    starts = np.concatenate([[0], np.cumsum(n_test)])
    entries = np.concatenate([rng.permutation(np.arange(starts[u], starts[u + 1])) for u in users]
                             + [np.zeros(0, dtype=np.int64)]).astype(np.int64)
    got = metrics_from_ranks(ranks[entries], gains[entries], n_test[users], n_pool[users], cutoffs, ALL, valid[users],
                             gain=gain)
    for name in ALL:
        np.testing.assert_array_equal(got[name], want[name][users], err_msg=name)


def test_metrics_in_threads_equal_one_thread(monkeypatch):
    """The users in chunks, one a thread (a large problem's path): the numbers of one thread,
    bit for bit."""
    from gpureco.engine import _metrics
    rng = np.random.default_rng(5)
    ranks, gains, n_test, n_pool = _random_ranks(rng, 200)
    args = (ranks, gains, n_test, n_pool, np.array([1, 5, 20]), ALL, n_test > 0)
    monkeypatch.setattr(_metrics, "_ENTRIES_PER_THREAD", 10 ** 9)
    want = metrics_from_ranks(*args)
    monkeypatch.setattr(_metrics, "_ENTRIES_PER_THREAD", 5)
    monkeypatch.setattr(_metrics, "_THREADS", 4)
    calls = []
    run = _metrics.rank_metrics
    monkeypatch.setattr(_metrics, "rank_metrics", lambda *a: calls.append(a[2].shape[0]) or run(*a))
    got = metrics_from_ranks(*args)
    assert len(calls) == 4 and sum(calls) == 200  # four chunks of users
    for name in ALL:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), grid=st.lists(st.integers(1, 40), min_size=1, max_size=6, unique=True))
def test_a_metric_at_k_does_not_depend_on_the_other_cutoffs(seed, grid):
    rng = np.random.default_rng(seed)
    ranks, gains, n_test, n_pool = _random_ranks(rng, 30)
    valid = n_test > 0
    cutoffs = np.array(sorted(grid))
    together = metrics_from_ranks(ranks, gains, n_test, n_pool, cutoffs, ALL, valid)
    for c, k in enumerate(cutoffs):
        alone = metrics_from_ranks(ranks, gains, n_test, n_pool, np.array([k]), ALL, valid)
        for name in ALL:
            np.testing.assert_array_equal(together[name][:, c] if together[name].ndim == 2 else together[name],
                                          alone[name][:, 0] if alone[name].ndim == 2 else alone[name],
                                          err_msg=f"{name}@{k}")


def _devices():
    """The GPU backends to check: the NumPy model, the emulated kernels, a real GPU."""
    try:
        from emulation.device import emulated_device
    except ImportError as error:
        emulated_device, missing = None, f"no host emulation of the kernels ({error})"
    return [pytest.param("model", id="model"),
            pytest.param("emulated", id="emulated", marks=pytest.mark.skipif(emulated_device is None,
                                                                               reason=locals().get("missing", ""))),
            pytest.param("gpu", id="gpu", marks=[pytest.mark.gpu,
                                                 pytest.mark.skipif(GPU_MISSING is not None, reason=f"no GPU: {GPU_MISSING}")])]


def _on(kind, monkeypatch):
    if kind == "model":
        return model_device(monkeypatch)
    if kind == "emulated":
        from emulation.device import emulated_device
        return emulated_device(monkeypatch)
    import contextlib
    return contextlib.nullcontext()


def _problem(seed, n_users=45, n_items=70):
    rng = np.random.default_rng(seed)
    X_train, X_test, A, B = random_problem(rng, n_users=n_users, n_items=n_items, n_factors=6, graded=True,
                                           dtype=np.float32)
    B[n_items // 2:] = B[: n_items - n_items // 2]  # equal item vectors: exact ties
    X_test[0] = 0  # a NaN user
    return to_csr(X_train), to_csr(X_test), A, B


def _metrics(X_train, X_test, A, B, device, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return gpureco.calc_reco_metrics(X_train, X_test, A, B, k=4, all_metrics=True, as_df=False, device=device,
                                         **kw)


def _assert_same(a, b, what):
    for name in ALL:
        np.testing.assert_array_equal(np.asarray(a[name]), np.asarray(b[name]), err_msg=f"{name}: {what}")


@pytest.mark.parametrize("fused", [False, True], ids=["tiles", "fused"])
@pytest.mark.parametrize("kind", _devices())
def test_same_numbers_for_any_run_batch_and_user_order(kind, fused, monkeypatch):
    """The same call five times, batches of 1, 7, 33 and all users, the users shuffled: the GPU
    backend's numbers equal each other and the CPU's, bit for bit; with cuBLAS tiles and with
    the fused kernel (kernels/fused_rank.cu)."""
    X_train, X_test, A, B = _problem(3)
    cpu = _metrics(X_train, X_test, A, B, "cpu")
    monkeypatch.setattr(_gpu, "FUSED", fused)
    with _on(kind, monkeypatch):
        if kind != "gpu":
            monkeypatch.setattr(_gpu, "TILE_ITEMS", 32)  # several tiles, the last one short
        for run in range(5):
            _assert_same(_metrics(X_train, X_test, A, B, "gpu"), cpu, f"run {run}")
        for batch_size in (1, 7, 33, X_test.shape[0]):
            _assert_same(_metrics(X_train, X_test, A, B, "gpu", batch_size=batch_size), cpu, f"batch {batch_size}")
        users = np.random.default_rng(0).permutation(X_test.shape[0])
        shuffled = _metrics(X_train[users], X_test[users], A[users], B, "gpu")
        _assert_same(shuffled, {name: np.asarray(cpu[name])[users] for name in ALL}, "shuffled users")
        cumulative = _metrics(X_train, X_test, A, B, "gpu", cumulative=True, gain="exponential")
        _assert_same(cumulative, _metrics(X_train, X_test, A, B, "cpu", cumulative=True, gain="exponential"),
                     "cumulative, exponential gains")


@pytest.mark.parametrize("kind", _devices())
def test_given_scores_and_results_left_on_the_device(kind, monkeypatch):
    """evaluate() on a score matrix, and output="cupy": the CPU's numbers on the device."""
    X_train, X_test, A, B = _problem(4)
    scores = (A.astype(np.float64) @ B.astype(np.float64).T).round(1)  # many ties
    names = ["P@3", "AP@3", "NDCG@3", "RR@3", "ROC_AUC", "PR_AUC"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        cpu = gpureco.evaluate(scores, X_test, X_train, metrics=names, device="cpu", output="numpy")
        with _on(kind, monkeypatch):
            for batch_size in (None, 5):
                gpu = gpureco.evaluate(scores, X_test, X_train, metrics=names, device="gpu", output="cupy",
                                       batch_size=batch_size)
                for name in names:
                    np.testing.assert_array_equal(gpureco.engine._engine.host_array(gpu[name]), cpu[name],
                                                  err_msg=name)


def test_the_model_device_really_is_adversarial(monkeypatch):
    """If the model's float reductions were exact, the tests above could not fail."""
    with model_device(monkeypatch) as cupy:
        rng = np.random.default_rng(0)
        weights = rng.standard_normal(10_000) * 1e3
        bins = rng.integers(0, 3, 10_000)
        sums = {tuple(cupy.bincount(bins, weights=weights, minlength=3)) for _ in range(20)}
        assert len(sums) > 1
        scans = {cupy.cumsum(weights)[-1] for _ in range(20)}
        assert len(scans) > 1
        x = np.linspace(1.5, 1e6, 1000)
        assert np.any(cupy.log2(x) != np.log2(x))
        np.testing.assert_array_equal(cupy.bincount(bins, minlength=3), np.bincount(bins, minlength=3))  # integers exact



@pytest.mark.parametrize("kind", _devices())
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NumPy, standing in for CuPy, announces the overflows
def test_overflowing_filter_scores_on_the_gpu_backend(kind, monkeypatch):
    """float32 cuBLAS products that overflow (inf, or inf - inf) while the defined score is
    finite: the defined score decides, as on the CPU (metrics, and top_k's kernel and
    full-row paths)."""
    rng = np.random.default_rng(11)
    X_train, X_test, A, B = random_problem(rng, n_users=20, n_items=40, n_factors=3, dtype=np.float32)
    A, B = (A * np.float32(3e19)).astype(np.float32), (B * np.float32(3e19)).astype(np.float32)
    bias = np.where(rng.random(40) < 0.1, 1e39, 0.0)  # beyond float32: inf in the filter
    X_train, X_test = to_csr(X_train), to_csr(X_test)
    cpu = _metrics(X_train, X_test, A, B, "cpu", item_biases=bias)
    cpu_lists = gpureco.top_k(A, B, 5, X_train=X_train, item_biases=bias, device="cpu")
    with _on(kind, monkeypatch):
        _assert_same(_metrics(X_train, X_test, A, B, "gpu", item_biases=bias), cpu, "overflowing filter")
        for k in (5, 3):
            if kind != "gpu":
                monkeypatch.setattr(_gpu, "TOPK_MAX_K", 4 if k == 5 else 1024)  # both top-K paths
            want = cpu_lists if k == 5 else gpureco.top_k(A, B, k, X_train=X_train, item_biases=bias, device="cpu")
            got = gpureco.top_k(A, B, k, X_train=X_train, item_biases=bias, device="gpu")
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[1], want[1])
