"""gpureco.Evaluator: the functions' numbers bit for bit, whether every user is evaluated at once
or batch by batch, in any order, on either backend (and on the device model and the emulated
kernels); states that merge exactly; summaries for loggers; torch, DLPack and JAX inputs."""
import contextlib
import math
import warnings

import numpy as np
import pytest

import gpureco
from conftest import BACKENDS, random_problem, to_csr
from gpu_model import model_device
from reference import defined_scores

ALL = ["P", "TP", "R", "AP", "TAP", "NDCG", "Hit", "RR", "ROC_AUC", "PR_AUC"]
DEVICES = BACKENDS + [pytest.param("model", id="model-gpu"), pytest.param("emulated", id="emulated-kernels")]


@contextlib.contextmanager
def on(device, monkeypatch):
    """device="cpu"/"gpu" as they are; "model" and "emulated" run the GPU backend without a GPU."""
    if device == "model":
        with model_device(monkeypatch):
            yield "gpu"
    elif device == "emulated":
        from emulation.device import emulated_device
        with emulated_device(monkeypatch):
            yield "gpu"
    else:
        yield device


def quiet(fn, *args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return fn(*args, **kw)


def problem(seed, n_users=30, n_items=35):
    """Graded test values, ties (integer factors), a user without test items, a NaN score, a
    zero factor vector (every score equal): every NaN rule that scores can meet."""
    rng = np.random.default_rng(seed)
    X_train, X_test, A, B = random_problem(rng, n_users=n_users, n_items=n_items, integer_factors=seed % 2 == 0,
                                           graded=True)
    X_train[0], X_test[0] = 0, 0
    A[1, 0] = np.nan
    A[2] = 0
    return to_csr(X_train), to_csr(X_test), A, B


def assert_same(got, want):
    assert list(got.columns) == list(want.columns)
    for name in want.columns:
        np.testing.assert_array_equal(got[name].to_numpy(), want[name].to_numpy(), err_msg=name)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", [0, 1])
def test_a_call_gives_the_functions_numbers(device, seed, monkeypatch):
    X_train, X_test, A, B = problem(seed)
    scores = defined_scores(A, B)
    noise = dict(break_ties_with_noise=seed == 1, seed=7)
    with on(device, monkeypatch) as dev:
        ev = gpureco.Evaluator(X_test, X_train, metrics=ALL, k=[2, 5], device=dev, **noise)
        want = quiet(gpureco.evaluate, scores, X_test, X_train, metrics=ALL, k=[2, 5], device=dev, **noise)
        by_factors = ev(A, B)
        assert_same(by_factors, want)
        assert by_factors.attrs["nan_reasons"] == want.attrs["nan_reasons"]
        assert_same(ev(scores), want)
        assert_same(ev(lambda users: scores[np.asarray(users if isinstance(users, np.ndarray) else users.get())]),
                    want)
        recometrics = quiet(gpureco.calc_reco_metrics, X_train, X_test, A, B, k=5, all_metrics=True, device=dev,
                            **noise)
        assert_same(ev(A, B)[recometrics.columns], recometrics)


@pytest.mark.parametrize("device", BACKENDS + [pytest.param("model", id="model-gpu")])
@pytest.mark.parametrize("seed", range(4))
def test_batches_in_any_order_give_one_pass(device, seed, monkeypatch):
    X_train, X_test, A, B = problem(seed, n_users=47)
    scores = defined_scores(A, B).astype(np.float64)
    rng = np.random.default_rng(seed)
    with on(device, monkeypatch) as dev:
        ev = gpureco.Evaluator(X_test, X_train, metrics=ALL, k=[1, 3, 10], device=dev,
                               break_ties_with_noise=seed % 2 == 1)
        whole = ev(scores)
        summary = ev.summary(counts=True)
        ev.reset()
        users = rng.permutation(X_test.shape[0])
        cuts = np.sort(rng.choice(np.arange(1, users.size), size=5, replace=False))
        for batch in np.split(users, cuts):
            ev.update(batch, scores[batch])
        assert_same(ev.compute(), whole)
        assert ev.compute().attrs["nan_reasons"] == whole.attrs["nan_reasons"]
        assert ev.summary(counts=True) == summary


def test_two_halves_merged_equal_one_pass_and_states_add_up():
    X_train, X_test, A, B = problem(3, n_users=40)
    scores = defined_scores(A, B)
    one = gpureco.Evaluator(X_test, X_train, metrics=ALL, k=5, device="cpu")
    whole = one(scores)
    halves = [gpureco.Evaluator(X_test, X_train, metrics=ALL, k=5, device="cpu") for _ in range(2)]
    users = np.random.default_rng(0).permutation(40)
    for ev, part in zip(halves, np.array_split(users, 2)):
        ev.update(part, scores[part])
    merged = gpureco.Evaluator(X_test, X_train, metrics=ALL, k=5, device="cpu")
    merged.merge(*halves)
    assert_same(merged.compute(), whole)
    assert merged.summary() == one.summary()
    # what torch.distributed.all_reduce(SUM) does to every process's state: elementwise sums
    reduced = {key: halves[0].state()[key] + halves[1].state()[key] for key in halves[0].state()}
    halves[0].load_state(reduced)
    assert_same(halves[0].compute(), whole)
    assert halves[0].summary() == one.summary()


def test_a_user_evaluated_twice_is_refused_in_a_batch_across_batches_and_across_states():
    X_train, X_test, A, B = problem(0)
    scores = defined_scores(A, B)
    ev = gpureco.Evaluator(X_test, X_train, device="cpu")
    with pytest.raises(ValueError, match="'user_ids' must be distinct"):
        ev.update([3, 3], scores[[3, 3]])
    ev.update([3, 4], scores[[3, 4]])
    with pytest.raises(ValueError, match="already evaluated since the last reset"):
        ev.update([5, 4], scores[[5, 4]])
    other = gpureco.Evaluator(X_test, X_train, device="cpu")
    other.update([4], scores[[4]])
    with pytest.raises(ValueError, match=r"evaluated more than once .*user 4 .*DistributedSampler"):
        ev.merge(other)
    with pytest.raises(ValueError, match="merge\\(\\) takes Evaluators of the same metrics"):
        ev.merge(gpureco.Evaluator(X_test, X_train, metrics=["R", "AP", "NDCG"], device="cpu"))
    # the same metrics and shapes, other interactions or options: their users' numbers are not this Evaluator's
    fewer = X_train.copy()
    fewer.data[:] = 1.0
    fewer = fewer[:, :].tocsr()
    fewer.data[0] = 0.0  # a training item fewer
    fewer.eliminate_zeros()
    for unlike, differ in ((gpureco.Evaluator(X_test, fewer, device="cpu"),
                            r"the X_train matrices \(after the relevance rule\)"),
                           (gpureco.Evaluator(X_test, X_train, device="cpu", gain="binary"), r"the options gain"),
                           (gpureco.Evaluator(X_test, X_train, device="cpu", seed=2, break_ties_with_noise=True),
                            r"the options break_ties_with_noise")):
        with pytest.raises(ValueError, match=r"merge\(\) takes Evaluators of the same metrics, options and "
                                             rf"interactions \(X_test, X_train\); {differ} differ"):
            ev.merge(unlike)
    noisy = gpureco.Evaluator(X_test, X_train, device="cpu", break_ties_with_noise=True)
    with pytest.raises(ValueError, match=r"the options seed differ"):
        noisy.merge(gpureco.Evaluator(X_test, X_train, device="cpu", break_ties_with_noise=True, seed=2))
    # resources may differ, and the seed where no noise reads it
    ev.merge(gpureco.Evaluator(X_test, X_train, device="cpu", nthreads=1, batch_size=7, seed=5))
    ev.reset()
    ev.update([4], scores[[4]])  # after a reset, a user can be evaluated again
    assert ev.summary()["users"] == 1.0


def test_summary_means_are_exact_and_nan_users_are_excluded_and_counted():
    X_train, X_test, A, B = problem(2, n_users=60)
    ev = gpureco.Evaluator(X_test, X_train, metrics=["NDCG@10", "ROC_AUC"], device="cpu")
    per_user = ev(A, B)
    summary = ev.summary(counts=True)
    for name in per_user.columns:
        kept = per_user[name].dropna().to_numpy()
        assert summary[name] == math.fsum(kept) / kept.size
        assert summary[f"n_{name}"] == kept.size
    assert summary["users"] == 60.0
    assert summary["nan_users"] == float(per_user.isna().any(axis=1).sum()) >= 3  # users 0 (no test), 1 (NaN), 2 (zero)
    assert all(isinstance(value, float) for value in summary.values())
    empty = gpureco.Evaluator(X_test, X_train, device="cpu").summary()
    assert empty["users"] == 0.0 and math.isnan(empty["NDCG@10"])


def test_user_ids_index_the_results_and_dict_outputs_name_the_rows():
    X_train, X_test, A, B = problem(1, n_users=12)
    ids = [f"u{i}" for i in range(12)]
    ev = gpureco.Evaluator(X_test, X_train, metrics=["P@3"], user_ids=ids, device="cpu")
    assert list(ev(A, B).index) == ids and ev(A, B).index.name == "user"
    ev.reset()
    ev.update([7, 2], defined_scores(A, B)[[7, 2]])
    assert list(ev.compute().index) == ["u2", "u7"]
    as_numpy = gpureco.Evaluator(X_test, X_train, metrics=["P@3"], output="numpy", device="cpu")
    as_numpy.update([7, 2], defined_scores(A, B)[[7, 2]])
    out = as_numpy.compute()
    assert out["user"].tolist() == [2, 7]
    np.testing.assert_array_equal(out["P@3"], ev.compute()["P@3"].to_numpy())
    with pytest.raises(ValueError, match="'user_ids' must hold one id per row of 'X_test' \\(12\\); got 3"):
        gpureco.Evaluator(X_test, X_train, user_ids=[1, 2, 3], device="cpu")
    torch = pytest.importorskip("torch")
    from_tensor = gpureco.Evaluator(X_test, X_train, metrics=["P@3"], user_ids=torch.arange(100, 112), device="cpu")
    assert from_tensor(A, B).index.tolist() == list(range(100, 112))
    with pytest.raises(ValueError, match="'user_ids' must hold distinct ids; 'u0'"):
        gpureco.Evaluator(X_test, X_train, user_ids=["u0"] * 12, device="cpu")


def test_the_interactions_are_checked_and_copied_to_the_device_once(monkeypatch):
    X_train, X_test, A, B = problem(0)
    with model_device(monkeypatch):
        ev = gpureco.Evaluator(X_test, X_train, device="gpu")
        ev(A, B)
        first = {key: [id(a) for a in entry[1:]] for key, entry in ev._problem.cache.items()}
        ev(A * 2, B)
        ev.reset()  # a call evaluates every user: updates start after a reset
        ev.update([5, 6], defined_scores(A, B)[[5, 6]])
        assert len(ev._problem.cache) == 1  # X_train's index arrays (X_test's entries are found on the host)
        assert {key: [id(a) for a in entry[1:]] for key, entry in ev._problem.cache.items()} == first


def test_bad_calls_say_what_is_wrong():
    X_train, X_test, A, B = problem(0)
    ev = gpureco.Evaluator(X_test, X_train, device="cpu")
    scores = defined_scores(A, B)
    cases = [
        (lambda: ev(None), ValueError, "Nothing to evaluate"),
        (lambda: ev.update([1, 2], scores[[1]]), ValueError, r"'scores' must have shape \(2, 35\); got \(1, 35\)"),
        (lambda: ev.update([1, 99], scores[[1, 2]]), ValueError, r"rows of X_test, in \[0, 29\]; got 99"),
        (lambda: ev.update([[1]], scores[[1]]), ValueError, "'user_ids' must be a 1-d array of ints"),
        (lambda: ev.update([1.0], scores[[1]]), ValueError, "'user_ids' must be a 1-d array of ints"),
        (lambda: ev.update([1], lambda users: scores[users]), TypeError, "got a callable"),
        (lambda: ev.load_state({"values": 0}), ValueError, "'state' must be a dict with the keys"),
        (lambda: ev.load_state({**ev.state(), "evaluated": np.zeros(3, np.int64)}), ValueError,
         r"state\['evaluated'\] must be an int array of shape \(30,\)"),
        (lambda: ev.load_state({**ev.state(), "evaluated": np.full(30, -1)}), ValueError,
         r"state\['evaluated'\] must count users \(0 or more\); got -1 at 0"),
        (lambda: ev.load_state({**ev.state(), "nan_counts": np.full(9, -5)}), ValueError,
         r"state\['nan_counts'\] must count users"),
        (lambda: gpureco.Evaluator(X_test, X_train, output="arrow", device="cpu"), ValueError,
         "'output' must be one of 'pandas', 'numpy', 'cupy', 'torch'; got 'arrow'"),
        (lambda: gpureco.Evaluator(X_test, X_train, output="cupy", device="cpu"), ValueError,
         "output='cupy' needs the GPU backend"),
        (lambda: gpureco.Evaluator(X_test, X_train, metrics=["nDCG@x"], device="cpu"), ValueError,
         "the cut-off after '@' must be a positive int"),
    ]
    for call, error, match in cases:
        with pytest.raises(error, match=match):
            call()
    assert "30 users x 35 items" in repr(ev)


# --- torch, DLPack and JAX inputs -------------------------------------------------------------

@pytest.fixture
def torch():
    return pytest.importorskip("torch")


def test_torch_sparse_interactions_and_float8_factors(torch):
    """X_test and X_train as torch sparse tensors (COO, CSR, half-precision values) give the SciPy matrices' numbers;
    another sparse layout is named; float8 factors are widened exactly, as bfloat16 ones (they were refused deep in
    torch: "Unimplemented backend SparseCsrCPU", "can't convert Sparse layout tensor to numpy")."""
    X_train, X_test, A, B = problem(3)
    want = gpureco.evaluate(defined_scores(A, B), X_test, X_train, metrics=ALL, k=4, device="cpu")
    dense_test, dense_train = (torch.tensor(X.toarray()) for X in (X_test, X_train))
    for layout in ("to_sparse", "to_sparse_csr"):
        for dtype in (torch.float64, torch.float16):
            got = gpureco.evaluate(defined_scores(A, B), getattr(dense_test.to(dtype), layout)(),
                                   getattr(dense_train, layout)(), metrics=ALL, k=4, device="cpu")
            assert_same(got, want)
    for dense in (dense_test.clone().requires_grad_(True), dense_test.bfloat16(), dense_test.half()):  # as dense too
        assert_same(gpureco.evaluate(defined_scores(A, B), dense, X_train, metrics=ALL, k=4, device="cpu"), want)
    assert_same(gpureco.evaluate(defined_scores(A, B), X_test.toarray().astype(np.float16), X_train, metrics=ALL, k=4,
                                 device="cpu"), want)  # (SciPy has no float16)
    for call in (lambda: gpureco.calc_reco_metrics(X_train, X_test, torch.tensor(A).to_sparse(), B, k=4, device="cpu"),
                 lambda: gpureco.top_k(torch.tensor(A).to_sparse(), B, 4, device="cpu"),
                 lambda: gpureco.evaluate(torch.tensor(defined_scores(A, B)).to_sparse(), X_test, device="cpu")):
        with pytest.raises(TypeError, match=r"must be a dense array.*; got a torch sparse_coo tensor"):
            call()  # (factors and scores are dense: torch's "can't convert Sparse layout tensor to numpy" before)
    with pytest.raises(TypeError, match=r"'X_test' is a torch tensor of layout torch.sparse_csc"):
        gpureco.evaluate(defined_scores(A, B), dense_test.to_sparse_csc(), X_train, device="cpu")
    small = [np.round(x * 4) / 4 for x in (A, B)]  # quarters below 2: exact in float8 e4m3
    small = [np.clip(x, -1.75, 1.75) for x in small]
    got = gpureco.calc_reco_metrics(X_train, X_test, *(torch.tensor(x).to(torch.float8_e4m3fn) for x in small),
                                    k=4, device="cpu")
    assert got.equals(gpureco.calc_reco_metrics(X_train, X_test, *(x.astype(np.float32) for x in small), k=4,
                                                device="cpu"))


def test_torch_scores_requiring_grad_in_any_float_dtype_need_no_detach_or_float(torch):
    X_train, X_test, A, B = problem(2)
    exact = np.round(defined_scores(A, B) * 4) / 4  # quarters: exact in bfloat16 and float16 for |s| < 64
    ev = gpureco.Evaluator(X_test, X_train, metrics=ALL, k=4, device="cpu")
    want = ev(exact)
    for dtype in (torch.float64, torch.float32, torch.float16, torch.bfloat16):
        tensor = torch.tensor(exact, dtype=dtype, requires_grad=True)
        assert_same(ev(tensor), want)
        ev.reset()
        ev.update(torch.arange(30), tensor)
        assert_same(ev.compute(), want)
    # factors that require grad (the model's own parameters)
    A_t, B_t = torch.tensor(A, requires_grad=True), torch.nn.Parameter(torch.tensor(B))
    assert_same(ev(A_t, B_t), ev(A, B))
    assert_same(quiet(gpureco.calc_reco_metrics, X_train, X_test, A_t, B_t, device="cpu"),
                quiet(gpureco.calc_reco_metrics, X_train, X_test, A, B, device="cpu"))


def test_cpu_tensors_and_dlpack_arrays_are_read_without_a_copy(torch):
    from gpureco._validation import plain_array
    tensor = torch.arange(12, dtype=torch.float32).reshape(3, 4).requires_grad_()
    array = plain_array(tensor)
    assert isinstance(array, np.ndarray) and array.dtype == np.float32
    assert array.__array_interface__["data"][0] == tensor.data_ptr()

    class DLPackOnly:  # an array known only by DLPack, as a JAX or TensorFlow CPU array is
        def __init__(self, a):
            self._a = a

        def __dlpack__(self, *args, **kw):
            return self._a.__dlpack__(*args, **kw)

        def __dlpack_device__(self):
            return self._a.__dlpack_device__()

    base = np.arange(12.0).reshape(3, 4)
    viewed = plain_array(DLPackOnly(base))
    assert np.shares_memory(viewed, base)
    X_train, X_test, A, B = problem(1)
    scores = defined_scores(A, B)
    assert_same(quiet(gpureco.evaluate, DLPackOnly(scores), X_test, X_train, device="cpu"),
                quiet(gpureco.evaluate, scores, X_test, X_train, device="cpu"))


def test_jax_arrays_are_taken_as_they_are():
    jnp = pytest.importorskip("jax.numpy")
    X_train, X_test, A, B = problem(1)
    exact = np.round(defined_scores(A, B) * 4) / 4
    ev = gpureco.Evaluator(X_test, X_train, device="cpu")
    want = ev(exact)
    for dtype in (jnp.float32, jnp.bfloat16):
        assert_same(ev(jnp.asarray(exact, dtype=dtype)), want)


def test_torch_output_is_on_the_evaluating_device_and_equal_to_numpy(torch):
    X_train, X_test, A, B = problem(0)
    numpy = gpureco.Evaluator(X_test, X_train, metrics=ALL, output="numpy", device="cpu")(A, B)
    tensors = gpureco.Evaluator(X_test, X_train, metrics=ALL, output="torch", device="cpu")(A, B)
    assert set(tensors) == set(numpy)
    for name, tensor in tensors.items():
        assert isinstance(tensor, torch.Tensor) and tensor.dtype == torch.float64 and tensor.device.type == "cpu"
        np.testing.assert_array_equal(tensor.numpy(), numpy[name])
    items, scores = gpureco.top_k(torch.tensor(A, requires_grad=True), B, 3, device="cpu", output="torch")
    want = gpureco.top_k(A, B, 3, device="cpu")
    np.testing.assert_array_equal(items.numpy(), want[0])
    np.testing.assert_array_equal(scores.numpy(), want[1])
