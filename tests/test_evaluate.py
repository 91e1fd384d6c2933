"""gpureco.evaluate: score matrices and score functions give the factor model's numbers,
the reference's numbers, and clear errors; on both backends (and the device model)."""
import contextlib
import warnings

import numpy as np
import pytest

import gpureco
from conftest import BACKENDS, random_problem, to_csr
from gpu_model import model_device
from reference import NAMES, defined_scores, reference_metrics

ALL = ["P", "TP", "R", "AP", "TAP", "NDCG", "Hit", "RR", "ROC_AUC", "PR_AUC"]


def quiet(fn, *args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return fn(*args, **kw)


def problem(case):
    rng = np.random.default_rng(case)
    X_train, X_test, A, B = random_problem(rng, n_users=30, n_items=35, integer_factors=case % 2 == 0, graded=True)
    X_train[0], X_test[0] = 0, 0
    A[1, 0] = np.nan
    A[2] = 0
    return to_csr(X_train), to_csr(X_test), A, B


@pytest.mark.parametrize("device", BACKENDS)
@pytest.mark.parametrize("case", range(4))
def test_scores_and_score_function_equal_the_factor_model(device, case):
    X_train, X_test, A, B = problem(case)
    scores = defined_scores(A, B)  # the factor model's defined scores
    want = quiet(gpureco.calc_reco_metrics, X_train, X_test, A, B, k=4, all_metrics=True, device=device,
                 break_ties_with_noise=case == 1, seed=3)
    kw = dict(metrics=ALL, k=4, device=device, break_ties_with_noise=case == 1, seed=3)
    from_matrix = quiet(gpureco.evaluate, scores, X_test, X_train, **kw)
    calls = []

    def score_fn(users):
        calls.append(np.asarray(users if isinstance(users, np.ndarray) else users.get()))
        return scores[calls[-1]]
    from_function = quiet(gpureco.evaluate, score_fn, X_test, X_train, batch_size=7, **kw)
    for name in want.columns:
        np.testing.assert_array_equal(from_matrix[name], want[name], err_msg=name)
        np.testing.assert_array_equal(from_function[name], want[name], err_msg=name)
    asked = np.concatenate(calls)
    assert max(len(c) for c in calls) <= 7 and 0 not in asked  # user 0 has no test item: never scored
    assert from_matrix.attrs["nan_reasons"] == want.attrs["nan_reasons"]


@pytest.mark.parametrize("device", BACKENDS)
@pytest.mark.parametrize("batch_size", [1, 3, 50])
def test_a_score_function_that_reuses_its_buffer(device, batch_size, rng):
    """A score function may return the same array at every call (a view of one buffer it
    fills, as with torch's out=): a batch is ranked before the next batch's rows are asked for."""
    X_train, X_test, _, _ = random_problem(rng, n_users=300, n_items=60)
    X_train, X_test = to_csr(X_train), to_csr(X_test)
    scores = rng.standard_normal(X_test.shape)
    buffer = np.empty_like(scores)

    def score_fn(users):
        users = np.asarray(users if isinstance(users, np.ndarray) else users.get())
        out = buffer[: users.shape[0]]
        out[:] = scores[users]
        return out
    kw = dict(metrics=ALL, k=5, device=device, batch_size=batch_size)
    want = quiet(gpureco.evaluate, scores, X_test, X_train, **kw)
    for _ in range(3):
        got = quiet(gpureco.evaluate, score_fn, X_test, X_train, **kw)
        for name in want.columns:
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)


@pytest.mark.parametrize("device", BACKENDS)
def test_matches_reference_with_ties_and_float32(device, rng):
    X_train, X_test, _, _ = random_problem(rng, n_users=40, n_items=30)
    scores = rng.integers(-3, 4, size=X_test.shape).astype(np.float32)  # many ties
    got = quiet(gpureco.evaluate, scores, to_csr(X_test), to_csr(X_train), metrics=ALL, k=[3, 7], device=device)
    for k in (3, 7):
        want = reference_metrics(X_train, X_test, scores.astype(np.float64), k)
        for name in NAMES:
            column = name if name.endswith("AUC") else name.replace("@K", f"@{k}")
            np.testing.assert_allclose(got[column], want[name], rtol=1e-12, equal_nan=True, err_msg=column)


def test_gpu_backend_on_the_device_model(monkeypatch):
    X_train, X_test, A, B = problem(5)
    scores = defined_scores(A, B)
    cpu = quiet(gpureco.evaluate, scores, X_test, X_train, metrics=ALL, k=[1, 5], device="cpu")
    with model_device(monkeypatch):
        gpu = quiet(gpureco.evaluate, scores, X_test, X_train, metrics=ALL, k=[1, 5], device="gpu", batch_size=4)
        gpu_fn = quiet(gpureco.evaluate, lambda users: scores[users], X_test, X_train, metrics=ALL, k=[1, 5],
                       device="gpu")
    for name in cpu.columns:
        np.testing.assert_array_equal(gpu[name], cpu[name], err_msg=name)
        np.testing.assert_array_equal(gpu_fn[name], cpu[name], err_msg=name)


def test_aucs_alone(rng):
    X_train, X_test, A, B = random_problem(rng)
    X_test[:, 0], X_train[:, 0] = 1, 0
    scores = defined_scores(A, B)
    got = gpureco.evaluate(scores, to_csr(X_test), to_csr(X_train), metrics=["PR_AUC", "ROC_AUC"], device="cpu")
    want = reference_metrics(X_train, X_test, scores, 1)
    np.testing.assert_allclose(got["PR_AUC"], want["PR_AUC"], rtol=1e-12)
    np.testing.assert_allclose(got["ROC_AUC"], want["ROC_AUC"], rtol=1e-12)


def test_outputs(rng):
    X_train, X_test, A, B = random_problem(rng)
    X_test[:, 0], X_train[:, 0] = 1, 0
    scores = defined_scores(A, B)
    df = gpureco.evaluate(scores, to_csr(X_test), to_csr(X_train), metrics=["NDCG@3", "P"], k=[2, 5], device="cpu")
    assert list(df.columns) == ["NDCG@3", "P@2", "P@5"]
    as_dict = gpureco.evaluate(scores, to_csr(X_test), to_csr(X_train), metrics=["NDCG@3"], output="numpy",
                               device="cpu")
    np.testing.assert_array_equal(as_dict["NDCG@3"], df["NDCG@3"])


BAD = [
    (dict(scores=np.zeros((3, 4))), ValueError, r"'scores' must have shape \(4, 5\); got \(3, 4\)"),
    (dict(scores=np.array([["a"] * 5] * 4)), TypeError, "'scores' must be an array of real numbers; got dtype <U1"),
    (dict(scores=lambda users: np.zeros((len(users), 3))), ValueError,
     r"score_fn's result for \d users must have shape \(\d, 5\); got \(\d, 3\)"),
    (dict(scores=lambda users: None), TypeError, "score_fn's result for 4 users must be an array of real numbers; got dtype object"),
    (dict(metrics=["P@10", "MAP@5"]), ValueError, "Unknown metric"),
    (dict(output="tensorflow"), ValueError, "'output' must be one of 'pandas', 'numpy', 'cupy', 'torch'; got "
                                            "'tensorflow'"),
    (dict(output="cupy", device="cpu"), ValueError, "output='cupy' needs the GPU backend"),
]


@pytest.mark.parametrize("bad,error,match", BAD)
@pytest.mark.parametrize("device", ["cpu", "model-gpu"])
def test_errors(bad, error, match, device, monkeypatch):
    """The same messages on the GPU backend (the NumPy model, whose asarray refuses strings
    with CuPy's words): inputs are checked before they move to the device."""
    X_test = np.eye(4, 5)
    kw = dict(scores=np.zeros((4, 5)), X_test=X_test, metrics=["P@2"], device="cpu" if device == "cpu" else "gpu")
    kw.update(bad)
    with model_device(monkeypatch) if device != "cpu" else contextlib.nullcontext():
        with pytest.raises(error, match=match):
            quiet(gpureco.evaluate, **kw)


@pytest.mark.parametrize("ties", ["first", "average"])
def test_a_cut_off_past_the_catalogue_is_the_catalogue(ties, rng):
    """K of 2**40 (or 2**62) on 9 items gives K = 9's numbers (the metrics that do not divide by K), for
    evaluate and evaluate_lists: the ranking heap and the discount and persistence tables reach only as far as a
    rank can (they were sized by K: 8 TB for the heap, 2**40 log2 values)."""
    X_test = to_csr((rng.random((6, 9)) < 0.3).astype(float))
    scores = np.round(rng.random((6, 9)), 1)  # ties
    names = ["NDCG", "R", "RR", "Hit", "RBP", "DCG"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (rule 7: a pool of at most K items)
        small = gpureco.evaluate(scores, X_test, metrics=names, k=9, ties=ties, device="cpu").to_numpy()
        for k in (2**40, 2**62):
            big = gpureco.evaluate(scores, X_test, metrics=names, k=k, ties=ties, device="cpu").to_numpy()
            np.testing.assert_array_equal(big, small)
    recs = {0: [3, 1, 2], 1: [0, 4]}
    truth = {0: [1, 5], 1: [4]}
    lists = [gpureco.evaluate_lists(recs, truth, ["NDCG", "RBP", "R"], k=k).to_numpy() for k in (3, 2**40)]
    np.testing.assert_array_equal(lists[0], lists[1])
