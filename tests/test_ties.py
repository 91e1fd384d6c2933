"""ties="optimistic", "pessimistic" and "average": against the slow reference (tests/reference.py)
with the tie order made explicit, against the average over every order of the tied items, against
scikit-learn's tie-aware ndcg_score / dcg_score / roc_auc_score / average_precision_score, and the
same numbers on both backends (the GPU backend's Python on the NumPy model of the device)."""
import itertools
import math
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import gpureco
from conftest import assert_identical, random_problem, to_csr
from gpu_model import model_device
from gpureco.engine._conventions import AVERAGE_TIES
from gpureco.engine._registry import RANK_METRICS
from reference import defined_scores, reference_user

ALL = [m.column for m in RANK_METRICS]
AT_K = [name for name in ALL if name.endswith("@K")]


def bare(name):
    return name.removesuffix("@K")


def engine(scores, X_test, X_train, names, k, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        frame = gpureco.evaluate(scores, sp.csr_array(X_test), sp.csr_array(X_train), [bare(n) for n in names], k,
                                 **kw)
    return {name: frame[name.replace("@K", f"@{k}")].to_numpy() for name in names}


def tied_problem(seed, n_users=25, n_items=8, levels=3):
    """Integer scores in 0 .. levels - 1 (many ties), graded test values 1 .. 3, some training items."""
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, levels, (n_users, n_items)).astype(np.float64)
    u = rng.random((n_users, n_items))
    X_train = (u < 0.15).astype(np.float64)
    X_test = np.where((u >= 0.15) & (u < 0.5), rng.integers(1, 4, (n_users, n_items)), 0).astype(np.float64)
    return scores, X_test, X_train


def reference(scores, X_test, X_train, k, order, convention=None):
    """{name: per-user value}: reference_user with `order(u, test, pool) -> tie_key`, NaN for
    users the engine leaves NaN as a whole (no test item, constant pool)."""
    out = {name: np.full(scores.shape[0], np.nan) for name in ALL}
    for u in range(scores.shape[0]):
        train = set(np.flatnonzero(X_train[u]).tolist())
        test = {int(i): float(X_test[u, i]) for i in np.flatnonzero(X_test[u])}
        if not test:
            continue
        values = order(u, scores[u], train, test, k, convention)
        if values is None:
            continue
        for name in ALL:
            if name in values:
                out[name][u] = values[name]
    return out


def test_first_and_last_keep_the_item_order():
    scores, X_test, X_train = tied_problem(0)
    first = engine(scores, X_test, X_train, ALL, 3)
    default = engine(scores, X_test, X_train, ALL, 3, ties="first")
    for name in ALL:
        np.testing.assert_array_equal(first[name], default[name], err_msg=name)


@pytest.mark.parametrize("mode", ["optimistic", "pessimistic"])
@pytest.mark.parametrize("seed", range(3))
def test_optimistic_and_pessimistic_are_the_reference_with_test_items_first_or_last(mode, seed):
    scores, X_test, X_train = tied_problem(seed)
    k = 3 + seed
    got = engine(scores, X_test, X_train, ALL, k, ties=mode)
    side = 0 if mode == "optimistic" else 1

    def order(u, s, train, test, k, convention):
        return reference_user(s, train, test, k, lambda i: ((side if i in test else 1 - side), i))

    want = reference(scores, X_test, X_train, k, order)
    for name in ALL:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12, atol=0, err_msg=name)
    assert np.isfinite(got["NDCG@K"]).sum() >= 10


def average_over_orders(u, s, train, test, k, convention):
    """The mean of reference_user over every order of the tied pool items (PR_AUC excepted)."""
    pool = [i for i in range(len(s)) if i not in train]
    groups = [[i for i in pool if s[i] == value] for value in sorted({s[i] for i in pool}, reverse=True)]
    total, count = None, 0
    for perms in itertools.product(*(itertools.permutations(g) for g in groups)):
        position = {item: p for perm in perms for p, item in enumerate(perm)}
        values = reference_user(s, train, test, k, lambda i: position[i], convention=convention)
        if values is None:
            return None
        total = dict(values) if total is None else {n: total[n] + values[n] for n in total}
        count += 1
    return {name: value / count for name, value in total.items()}


@pytest.mark.parametrize("convention", ["gpureco", "lenskit"])
@pytest.mark.parametrize("seed", range(3))
def test_average_is_the_mean_over_every_order_of_the_tied_items(seed, convention):
    from gpureco.engine._registry import CONVENTIONS
    scores, X_test, X_train = tied_problem(10 + seed, n_items=7)
    k = 2 + seed
    names = [name for name in AVERAGE_TIES if name != "PR_AUC"]
    got = engine(scores, X_test, X_train, names, k, ties="average", convention=convention)
    want = reference(scores, X_test, X_train, k, average_over_orders, CONVENTIONS[convention])
    for name in names:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12, atol=1e-15, err_msg=name)
    assert np.isfinite(got["NDCG@K"]).sum() >= 10


def test_average_without_ties_is_the_ranking_itself():
    rng = np.random.default_rng(5)
    scores = rng.standard_normal((30, 40))
    _, X_test, X_train = tied_problem(5, n_users=30, n_items=40)
    names = list(AVERAGE_TIES)
    first = engine(scores, X_test, X_train, names, 5)
    average = engine(scores, X_test, X_train, names, 5, ties="average")
    for name in names:
        np.testing.assert_array_equal(average[name], first[name], err_msg=name)


@pytest.mark.parametrize("seed", range(4))
def test_average_equals_scikit_learn(seed):
    """ndcg_score / dcg_score average the gains of tied scores; roc_auc_score gives a tie half a
    pair; average_precision_score takes each distinct score as one threshold."""
    from sklearn.metrics import average_precision_score, dcg_score, ndcg_score, roc_auc_score
    scores, X_test, X_train = tied_problem(20 + seed, n_users=30, n_items=40, levels=6)
    k = 10
    got = engine(scores, X_test, X_train, ["NDCG@K", "DCG@K", "ROC_AUC", "PR_AUC"], k, ties="average",
                 convention="sklearn")
    checked = 0
    for u in range(scores.shape[0]):
        pool = np.flatnonzero(X_train[u] == 0)
        truth, s = X_test[u, pool], scores[u, pool]
        if not truth.any() or truth.all() or s.min() == s.max():
            continue
        checked += 1
        assert got["NDCG@K"][u] == pytest.approx(ndcg_score([truth], [s], k=k), rel=1e-12)
        assert got["DCG@K"][u] == pytest.approx(dcg_score([truth], [s], k=k), rel=1e-12)
        assert got["ROC_AUC"][u] == pytest.approx(roc_auc_score(truth > 0, s), rel=1e-12)
        assert got["PR_AUC"][u] == pytest.approx(average_precision_score(truth > 0, s), rel=1e-12)
    assert checked >= 20


def test_hand_worked_average():
    """One user, pool of 5: scores [3, 2, 2, 2, 1], test items 1 (value 2) and 3 (value 1).
    The tie group {1, 2, 3} holds ranks 2-4 and two test items: at K = 2 one rank of three is
    shown, so E[hits] = 2 / 3; the first test item is at rank 2 with probability 2/3 and at
    rank 3 with probability 1/3: E[RR@2] = 2/3 / 2 = 1/3, E[RR@3] = 2/3 / 2 + 1/3 / 3 = 4/9;
    ROC-AUC: each test item loses to item 0, ties with item 2 (half a pair) and beats item 4:
    2 (0 + 1/2 + 1) / 6 = 1/2."""
    scores = np.array([[3.0, 2.0, 2.0, 2.0, 1.0]])
    X_test = np.array([[0, 2.0, 0, 1.0, 0]])
    X_train = np.zeros((1, 5))
    got = engine(scores, X_test, X_train, ["P@K", "RR@K", "Hit@K", "DCG@K"], 2, ties="average")
    assert got["P@K"][0] == pytest.approx((2 / 3) / 2, rel=1e-15)
    assert got["RR@K"][0] == pytest.approx(1 / 3, rel=1e-15)
    assert engine(scores, X_test, X_train, ["RR@K"], 3, ties="average")["RR@K"][0] == pytest.approx(4 / 9, rel=1e-15)
    assert got["Hit@K"][0] == pytest.approx(2 / 3, rel=1e-15)
    assert got["DCG@K"][0] == pytest.approx((2 + 1 + 0) / 3 / math.log2(3), rel=1e-15)  # mean gain at rank 2
    auc = engine(scores, X_test, X_train, ["ROC_AUC"], 2, ties="average")["ROC_AUC"]
    assert auc[0] == 0.5


@pytest.mark.parametrize("mode", ["optimistic", "pessimistic", "average"])
def test_factor_models_batches_and_the_gpu_backend_agree(monkeypatch, mode):
    """Integer factors (exact ties decided by the defined score, filter scores near them): the
    CPU engine at batch sizes 1 and default, and the GPU backend's orchestration on the NumPy
    model of the device, give the same numbers bit for bit; and they equal the given-scores path."""
    rng = np.random.default_rng(7)
    X_train, X_test, A, B = random_problem(rng, n_users=30, n_items=25, integer_factors=True, graded=True,
                                           dtype=np.float32)
    names = [bare(n) for n in (AVERAGE_TIES if mode == "average" else ALL)]

    def run(device, ties=mode, **kw):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            ev = gpureco.Evaluator(to_csr(X_test), to_csr(X_train), names, [3, 10], ties=ties, device=device,
                                   output="numpy", **kw)
            return ev(A, B)

    cpu = run("cpu")
    assert_identical(cpu, run("cpu", batch_size=1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        given = gpureco.evaluate(defined_scores(A, B), to_csr(X_test), to_csr(X_train), names, [3, 10], ties=mode,
                                 device="cpu", output="numpy")
    assert_identical(cpu, given)
    assert not np.array_equal(cpu["NDCG@3"], run("cpu", ties="first")["NDCG@3"], equal_nan=True)  # ties here
    with model_device(monkeypatch):
        assert_identical(cpu, run("gpu"))
        assert_identical(cpu, run("gpu", batch_size=4))


def test_streaming_update_with_average_ties():
    scores, X_test, X_train = tied_problem(30, n_users=20, n_items=12)
    names = ["NDCG@4", "RR@4", "ROC_AUC"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        whole = gpureco.evaluate(scores, sp.csr_array(X_test), sp.csr_array(X_train), names, ties="average",
                                 output="numpy")
        ev = gpureco.Evaluator(sp.csr_array(X_test), sp.csr_array(X_train), names, ties="average", output="numpy")
        for batch in ([7, 3, 19], list(range(8, 19)), [0, 1, 2, 4, 5, 6]):
            ev.update(batch, scores[batch])
        streamed = ev.compute()
    assert_identical(whole, {name: streamed[name] for name in whole})


def test_errors():
    scores, X_test, X_train = tied_problem(0)
    X_test, X_train = sp.csr_array(X_test), sp.csr_array(X_train)
    with pytest.raises(ValueError, match=r"ties='average'.*AP@K"):
        gpureco.evaluate(scores, X_test, X_train, ["NDCG", "AP"], 5, ties="average")
    with pytest.raises(ValueError, match=r"ties='optimistic'.*break_ties_with_noise"):
        gpureco.evaluate(scores, X_test, X_train, ["NDCG"], 5, ties="optimistic", break_ties_with_noise=True)
    with pytest.raises(ValueError, match=r"'ties' must be one of 'first', 'last', 'optimistic', 'pessimistic', "
                                         r"'average'.*got 'random'"):
        gpureco.evaluate(scores, X_test, X_train, ["NDCG"], 5, ties="random")


def test_last_with_biases_alone_and_with_factors():
    """ties="last" reverses the items of B and item_biases too, also without factors."""
    rng = np.random.default_rng(3)
    X_train, X_test, A, B = random_problem(rng, n_users=20, n_items=15, integer_factors=True)
    bias = rng.integers(0, 3, 15).astype(np.float64)
    for model, items in (((None, None), None), ((A, B), B)):
        scores = (defined_scores(A, B, bias) if items is not None else np.tile(bias, (20, 1)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            got = gpureco.Evaluator(to_csr(X_test), to_csr(X_train), ["NDCG", "RR"], 5, ties="last",
                                    output="numpy")(*model, item_biases=bias)
            want = gpureco.evaluate(scores, to_csr(X_test), to_csr(X_train), ["NDCG", "RR"], 5, ties="last",
                                    output="numpy")
        assert_identical(want, got)
