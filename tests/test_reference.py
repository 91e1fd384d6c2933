"""The engine against the slow reference on random data, and hand-worked examples."""
import math
import warnings

import numpy as np
import pytest

import gpureco
from conftest import BACKENDS, random_problem, to_csr
from reference import EXTRA_NAMES, NAMES, defined_scores, reference_metrics

DEVICE = "cpu"


@pytest.fixture(autouse=True, params=BACKENDS)
def backend(request):
    """Every test of this module runs on each backend (the GPU cases skip without a GPU)."""
    global DEVICE
    DEVICE = request.param
    yield
    DEVICE = "cpu"


TOP_K_ONLY = dict(precision=True, trunc_precision=True, recall=True, average_precision=True,
                  trunc_average_precision=True, ndcg=True, hit=True, rr=True)


def engine(X_train, X_test, A, B, k, auc=True, **kw):
    """All metrics; with auc=False only the @K ones, which the engine ranks only up to K."""
    metrics = dict(all_metrics=True) if auc else TOP_K_ONLY
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return gpureco.calc_reco_metrics(to_csr(X_train), to_csr(X_test), A, B, k=k, as_df=False,
                                         **metrics, device=DEVICE, **kw)


def assert_matches(got, want, **context):
    for name in got:
        if name != "K":
            np.testing.assert_allclose(got[name], want[name], rtol=1e-12, atol=1e-15, equal_nan=True,
                                       err_msg=f"{name} {context}")


def add_edge_cases(rng, X_train, X_test, A, B):
    """Empty rows, cold-start users, tiny pools, pools of test items only, non-finite scores."""
    n_users, n_items = X_test.shape
    X_train[0], X_test[0] = 0, 0  # no data at all
    X_train[1] = 0  # cold start
    X_test[1, :3] = 1
    X_train[2], X_test[2] = 1, 0  # tiny pool: two items, one a test item
    X_train[2, :2] = 0
    X_test[2, 0] = 2
    X_train[3], X_test[3] = 1, 0  # pool of test items only
    X_train[3, :3], X_test[3, :3] = 0, 1
    A[4, 0] = np.nan  # NaN scores for one user
    A[5, 0] = np.inf
    A[6] = 0  # every score equal
    X_test[7, :2] = 0
    X_test[7, 2], X_train[7, 2] = -1, 0  # a negative gain
    return X_train, X_test, A, B


@pytest.mark.parametrize("auc", [True, False], ids=["full-ranks", "ranks-up-to-K"])
@pytest.mark.parametrize("case", range(12))
def test_matches_reference_on_random_data(case, auc):
    rng = np.random.default_rng(case)
    X_train, X_test, A, B = random_problem(rng, n_users=30, n_items=int(rng.integers(8, 40)),
                                           integer_factors=case % 2 == 0, graded=case % 3 == 0)
    X_train, X_test, A, B = add_edge_cases(rng, X_train, X_test, A, B)
    noise = case % 4 == 1
    scores = defined_scores(A, B)
    for k in (1, 3, 10, 25):
        k = min(k, X_test.shape[1])
        for cumulative in (False, True):
            got = engine(X_train, X_test, A, B, k, auc, break_ties_with_noise=noise, seed=case + 1,
                         cumulative=cumulative)
            for kk in range(1, k + 1) if cumulative else [k]:
                want = reference_metrics(X_train, X_test, scores, kk, noise=noise, seed=case + 1)
                at_k = {name: v[:, kk - 1] if v.ndim == 2 else v for name, v in got.items() if name != "K"}
                assert_matches(at_k, want, k=kk, case=case, cumulative=cumulative)


@pytest.mark.parametrize("min_pos_test,min_items_pool,consider_cold_start", [(1, 2, True), (3, 2, False), (2, 20, True)])
def test_minimums_match_reference(rng, min_pos_test, min_items_pool, consider_cold_start):
    X_train, X_test, A, B = random_problem(rng, n_users=40, n_items=25, integer_factors=True)
    X_train[:5] = 0
    kw = dict(min_pos_test=min_pos_test, min_items_pool=min_items_pool, consider_cold_start=consider_cold_start)
    want = reference_metrics(X_train, X_test, defined_scores(A, B), 4, **kw)
    for auc in (True, False):
        assert_matches(engine(X_train, X_test, A, B, 4, auc, **kw), want)


@pytest.mark.parametrize("gain", ["linear", "exponential", "binary"])
def test_ndcg_gains_match_reference(rng, gain):
    X_train, X_test, A, B = random_problem(rng, graded=True)
    got = engine(X_train, X_test, A, B, 5, gain=gain)["NDCG@K"]
    want = reference_metrics(X_train, X_test, defined_scores(A, B), 5, gain=gain)["NDCG@K"]
    np.testing.assert_allclose(got, want, rtol=1e-12, equal_nan=True)


def test_float32_factors_rank_by_exact_products(rng):
    X_train, X_test, A, B = random_problem(rng, dtype=np.float32)
    got = engine(X_train, X_test, A, B, 5)
    want = reference_metrics(X_train, X_test, defined_scores(A, B), 5)
    for name in NAMES:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12, equal_nan=True, err_msg=name)
        assert got[name].dtype == np.float64


def test_item_biases_and_non_personalised(rng):
    X_train, X_test, A, B = random_problem(rng, integer_factors=True)
    bias = rng.integers(-3, 4, size=X_test.shape[1]).astype(np.float64)
    got = engine(X_train, X_test, A, B, 5, item_biases=bias)
    want = reference_metrics(X_train, X_test, defined_scores(A, B, bias), 5)
    got_np = engine(X_train, X_test, None, None, 5, item_biases=bias)
    want_np = reference_metrics(X_train, X_test, np.tile(bias, (X_test.shape[0], 1)), 5)
    for name in NAMES:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12, equal_nan=True, err_msg=name)
        np.testing.assert_allclose(got_np[name], want_np[name], rtol=1e-12, equal_nan=True, err_msg=name)


# --- hand-worked examples, from the formulas of docs/metrics.md -------------------------------

def one_user(scores, train, test, k, **kw):
    """Metrics of a single user given its scores directly (A = [[1]], B = scores as a column)."""
    n = len(scores)
    X_train = np.zeros((1, n))
    X_train[0, list(train)] = 1
    X_test = np.zeros((1, n))
    for item, value in test.items():
        X_test[0, item] = value
    out = engine(X_train, X_test, np.ones((1, 1)), np.asarray(scores, float)[:, None], k, **kw)
    return {name: out[name][0] for name in NAMES}


def test_hand_worked_example():
    # items 0..5, item 5 is a training item; ranking of the pool by score: 2, 0, 4, 1, 3
    # test items 0 (value 3) and 3 (value 1) sit at ranks 2 and 5
    m = one_user([0.9, 0.5, 1.0, 0.1, 0.7, 5.0], {5}, {0: 3.0, 3: 1.0}, k=3)
    assert m["P@K"] == pytest.approx(1 / 3)
    assert m["TP@K"] == pytest.approx(1 / 2)
    assert m["R@K"] == pytest.approx(1 / 2)
    assert m["AP@K"] == pytest.approx((1 / 2) / 2)  # one hit at rank 2: P@2 = 1/2
    assert m["TAP@K"] == pytest.approx((1 / 2) / 2)
    assert m["NDCG@K"] == pytest.approx((3 / math.log2(3)) / (3 / 1 + 1 / math.log2(3)))
    assert m["Hit@K"] == 1.0
    assert m["RR@K"] == pytest.approx(1 / 2)
    # ranks 2 and 5 among 5 pool items, 3 negatives: 1 - ((2 + 5) - 3) / (2 * 3)
    assert m["ROC_AUC"] == pytest.approx(1 - 4 / 6)
    assert m["PR_AUC"] == pytest.approx((1 / 2 + 2 / 5) / 2)


def test_ties_go_to_the_lower_item_index():
    # all four tied at 1.0 but item 3 (lowest score 0): ranking 0, 1, 2, 3
    m = one_user([1.0, 1.0, 1.0, 0.0], set(), {1: 1.0}, k=1)
    assert m["P@K"] == 0.0 and m["RR@K"] == 0.0
    m = one_user([1.0, 1.0, 1.0, 0.0], set(), {0: 1.0}, k=1)
    assert m["P@K"] == 1.0
    assert m["ROC_AUC"] == 1.0  # rank 1 of 4


def test_perfect_and_worst_rankings():
    perfect = one_user([4.0, 3.0, 2.0, 1.0, 0.0], set(), {0: 1.0, 1: 1.0}, k=2)
    for name in ("P@K", "TP@K", "R@K", "AP@K", "TAP@K", "NDCG@K", "Hit@K", "RR@K", "ROC_AUC", "PR_AUC"):
        assert perfect[name] == 1.0, name
    worst = one_user([0.0, 1.0, 2.0, 3.0, 4.0], set(), {0: 1.0, 1: 1.0}, k=2)
    assert worst["ROC_AUC"] == 0.0 and worst["P@K"] == 0.0 and worst["RR@K"] == 0.0
    # ranks 4 and 5 of 5: PR_AUC = (1/4 + 2/5) / 2
    assert worst["PR_AUC"] == pytest.approx((1 / 4 + 2 / 5) / 2)


def test_nan_rules_by_hand():
    # rule 7: a pool of k items makes P, TP, R and Hit NaN, the others are computed
    m = one_user([3.0, 2.0, 1.0], set(), {1: 1.0}, k=3)
    assert all(math.isnan(m[n]) for n in ("P@K", "TP@K", "R@K", "Hit@K"))
    assert m["AP@K"] == pytest.approx(1 / 2) and m["ROC_AUC"] == pytest.approx(0.5)
    # rule 6: every pool item is a test item: only NDCG
    m = one_user([3.0, 2.0, 1.0], {2}, {0: 1.0, 1: 1.0}, k=1)
    assert m["NDCG@K"] == 1.0 and all(math.isnan(m[n]) for n in NAMES if n != "NDCG@K")
    # rule 8: no positive test value: NDCG NaN, the rest computed
    m = one_user([3.0, 2.0, 1.0, 0.0], set(), {0: -1.0}, k=1)
    assert math.isnan(m["NDCG@K"]) and m["P@K"] == 1.0
    # rules 4 and 5: a non-finite or a constant pool makes everything NaN
    for scores in ([np.nan, 1.0, 0.0], [np.inf, 1.0, 0.0], [2.0, 2.0, 2.0]):
        m = one_user(scores, set(), {0: 1.0}, k=1)
        assert all(math.isnan(v) for v in m.values()), scores
    # a non-finite score of a training item does not count: it is not in the pool
    m = one_user([np.nan, 1.0, 0.0], {0}, {1: 1.0}, k=1)
    assert m["P@K"] == 1.0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kernel_scores_are_the_defined_scores_bit_for_bit(rng, dtype):
    from gpureco.engine._cpu_ranks import exact_scores
    A = (rng.standard_normal((20, 67)) * 10.0 ** rng.integers(-3, 4, size=(20, 1))).astype(dtype)
    B = rng.standard_normal((30, 67)).astype(dtype)
    bias = rng.standard_normal(30)
    np.testing.assert_array_equal(exact_scores(A, B, bias, True), defined_scores(A, B, bias))
    np.testing.assert_array_equal(exact_scores(A, B, np.zeros(0), False), defined_scores(A, B))


@pytest.mark.parametrize("k", [5, 70])
def test_users_with_many_test_items(rng, k):
    """Dozens of test items per user (the metric loop sorts them with qsort beyond 24) and
    graded, non-integer gains."""
    X_train, X_test, A, B = random_problem(rng, n_users=12, n_items=150, train_density=0.2, test_density=0.5,
                                           graded=True)
    X_test = X_test * 0.37
    assert (X_test > 0).sum(axis=1).min() > 24
    for gain in ("linear", "exponential"):
        got = engine(X_train, X_test, A, B, k, gain=gain)
        assert_matches(got, reference_metrics(X_train, X_test, defined_scores(A, B), k, gain=gain), k=k, gain=gain)


def test_an_overflowing_filter_never_changes_a_rank():
    """float32 BLAS scores that overflow (or give inf - inf) while the defined float64 score is
    finite: the defined score decides (issue: hostile inputs)."""
    X_test = np.array([[0.0, 1.0]])
    A, B = np.array([[3e19]], np.float32), np.array([[1.0], [3e19]], np.float32)
    no_train = np.zeros_like(X_test)
    assert engine(no_train, X_test, A, B, 1)["P@K"][0] == 1.0
    ones = np.ones((1, 1), np.float32)
    assert engine(no_train, X_test, ones, np.ones((2, 1), np.float32), 1,
                  item_biases=np.array([0.0, 1e39]))["P@K"][0] == 1.0
    items, scores = gpureco.top_k(np.array([[3e19, 3e19]], np.float32),
                                  np.array([[3e19, -3e19], [1, 1], [0, 0]], np.float32), 3, device=DEVICE)
    assert items.tolist() == [[1, 0, 2]]
    np.testing.assert_array_equal(scores, [[float(np.float32(3e19)) * 2, 0.0, 0.0]])


@pytest.mark.parametrize("auc", [True, False])
def test_huge_factors_match_the_reference(rng, auc):
    """Random float32 factors near the top of float32's range: many BLAS products overflow."""
    X_train, X_test, A, B = random_problem(rng, n_users=25, n_items=40, n_factors=3, dtype=np.float32)
    A = (A * np.float32(3e19)).astype(np.float32)
    B = (B * np.float32(3e19)).astype(np.float32)
    scores = defined_scores(A, B)
    assert np.all(np.isfinite(scores)) and np.any(np.abs(scores) > np.finfo(np.float32).max)
    for k in (1, 5):
        got = engine(X_train, X_test, A, B, k, auc=auc)
        want = reference_metrics(X_train, X_test, scores, k)
        assert_matches({name: got[name] for name in got if name != "K" and (auc or "AUC" not in name)}, want, k=k)
    lists, _ = gpureco.top_k(A, B, 6, X_train=to_csr(X_train), device=DEVICE)
    for u in range(A.shape[0]):
        pool = [i for i in range(B.shape[0]) if X_train[u, i] == 0]
        assert lists[u].tolist() == sorted(pool, key=lambda i: (-scores[u, i], i))[:6], u


def test_a_factor_near_the_float64_limit_gives_no_library_warning(rng):
    """The error bound itself overflows to inf (every comparison then goes to the defined score):
    no NumPy warning may reach the caller, and the numbers are the reference's."""
    X_train, X_test, A, B = random_problem(rng, n_users=10, n_items=25)
    A[0, 0] = 6e307
    with warnings.catch_warnings(), np.errstate(all="raise"):
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", message="gpureco: .* users have every metric NaN")
        got = gpureco.calc_reco_metrics(to_csr(X_train), to_csr(X_test), A, B, k=3, all_metrics=True, as_df=False,
                                        device=DEVICE)
    assert_matches(got, reference_metrics(X_train, X_test, defined_scores(A, B), 3))


def test_exponential_gain_of_a_tiny_positive_value_is_positive():
    """2**v - 1 computed as a subtraction is 0 below v = 1.6e-16: NDCG must not fall under rule 8."""
    X_test = np.array([[1e-17, 0, 0, 0]])
    A, B = np.ones((1, 1)), np.array([[4.0], [3.0], [2.0], [1.0]])
    for gain in ("linear", "exponential", "binary"):
        assert engine(np.zeros_like(X_test), X_test, A, B, 2, gain=gain)["NDCG@K"].tolist() == [1.0], gain


def test_a_masked_array_with_nothing_masked_is_an_array():
    X_train, X_test, A, B = random_problem(np.random.default_rng(4), n_users=8, n_items=12)
    got = engine(X_train, np.ma.array(X_test), np.ma.array(A), np.ma.array(B), 3)
    want = engine(X_train, X_test, A, B, 3)
    for name in got:
        np.testing.assert_array_equal(np.asarray(got[name]), np.asarray(want[name]), err_msg=name)


# --- the metrics beyond recometrics' ten, and the conventions of docs/peers.md ----------------

EVERY = NAMES + EXTRA_NAMES


def evaluated(scores, X_train, X_test, k, **kw):
    """Every rank metric from gpureco.evaluate, as reference_metrics names them."""
    metrics = [n.replace("@K", f"@{k}") for n in EVERY]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        got = gpureco.evaluate(scores, to_csr(X_test), to_csr(X_train), metrics=metrics, device=DEVICE,
                               output="numpy", **kw)
    return {name: got[name.replace("@K", f"@{k}")] for name in EVERY}


@pytest.mark.parametrize("convention", ["gpureco", "lenskit", "ranx", "replay", "torchmetrics"])
@pytest.mark.parametrize("case", range(4))
def test_new_metrics_and_conventions_match_reference(case, convention):
    rng = np.random.default_rng(100 + case)
    X_train, X_test, A, B = random_problem(rng, n_users=30, n_items=int(rng.integers(8, 40)),
                                           integer_factors=True, graded=True)
    X_train, X_test, A, B = add_edge_cases(rng, X_train, X_test, A, B)
    X_test = np.where(X_test > 0, X_test + 0.5 * (case % 2), X_test)  # ranx truncates 1.5 to 1
    scores = defined_scores(A, B)
    persistence = (0.5, 0.8, 0.95, 0.3)[case]
    for k in (1, 4, 50):
        for min_items_pool in (0, 2):
            kw = dict(convention=convention, persistence=persistence, min_items_pool=min_items_pool)
            got = evaluated(scores, X_train, X_test, k, **kw)
            assert_matches(got, reference_metrics(X_train, X_test, scores, k, **kw), k=k, convention=convention)


@pytest.mark.parametrize("ties,threshold", [("last", None), ("first", 2.0), ("last", 1.5)])
def test_ties_and_relevance_threshold_match_reference(rng, ties, threshold):
    X_train, X_test, _, _ = random_problem(rng, n_users=40, n_items=30, graded=True)
    scores = rng.integers(-3, 4, size=X_test.shape).astype(np.float64)  # many ties
    for k in (3, 7):
        kw = dict(ties=ties, relevance_threshold=threshold)
        got = evaluated(scores, X_train, X_test, k, **kw)
        assert_matches(got, reference_metrics(X_train, X_test, scores, k, **kw), k=k)


def test_new_metrics_hand_worked():
    # one user, 6 items, none trained; ranking 0 > 1 > 2 > 3 > 4 > 5; test items 1 (gain 3) and 4 (gain 1)
    scores = np.array([[6.0, 5, 4, 3, 2, 1]])
    X_test = np.array([[0, 3, 0, 0, 1, 0]])
    got = evaluated(scores, np.zeros_like(X_test), X_test, 3, persistence=0.5)
    assert got["DCG@K"][0] == 3 / math.log2(3)  # rank 2
    assert got["F1@K"][0] == 2 * 1 / (3 + 2)  # P = 1/3, R = 1/2: harmonic mean 2/5
    assert got["RBP@K"][0] == (1 - 0.5) * 0.5  # one hit at rank 2: (1 - p) p
    assert got["RPrec"][0] == 1 / 2  # one of the 2 test items in the top 2
    # bpref: item 1 has 1 negative above (min(1, 2) / min(2, 4) = 1/2), item 4 has 3 (capped at 2: 1)
    assert got["bpref"][0] == ((1 - 1 / 2) + (1 - 1)) / 2
    lenskit = evaluated(scores, np.zeros_like(X_test), X_test, 3, convention="lenskit")
    assert lenskit["DCG@K"][0] == 1.0  # binary gain, discount log2(max(2, 2)) = 1 at rank 2
    assert lenskit["NDCG@K"][0] == 1.0 / (1 + 1)  # ideal: ranks 1 and 2, both discount 1
    ranx = evaluated(scores, np.zeros_like(X_test), X_test, 3, convention="ranx", persistence=0.5)
    assert ranx["RBP@K"][0] == (1 - 0.5) * 3 * 0.5  # ranx weights the hit by its relevance 3
    torch_ap = evaluated(scores, np.zeros_like(X_test), X_test, 3, convention="torchmetrics")["AP@K"][0]
    assert torch_ap == 1 / 2  # the one hit in the top 3 has precision 1/2; torchmetrics divides by 1 hit


def test_convention_errors():
    X = np.array([[0, 1, 0]])
    for kw, message in ((dict(convention="trec"), "'convention' must be one of 'gpureco'"),
                        (dict(ties="random"), "'ties' must be one of 'first', 'last'"),
                        (dict(persistence=1.0), r"'persistence' \(RBP's p\) must be a number in \(0, 1\); got 1.0"),
                        (dict(convention="lenskit", gain="exponential"), "convention='lenskit' uses gain='binary'"),
                        (dict(ties="last", break_ties_with_noise=True), "pass one of them")):
        with pytest.raises(ValueError, match=message):
            gpureco.evaluate(np.array([[1.0, 2, 3]]), to_csr(X), metrics="P@1", device=DEVICE, **kw)
    with pytest.raises(TypeError, match="'relevance_threshold' must be a finite number or None; got 'x'"):
        gpureco.evaluate(np.array([[1.0, 2, 3]]), to_csr(X), metrics="P@1", device=DEVICE, relevance_threshold="x")
