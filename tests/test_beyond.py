"""beyond_accuracy: against loop references and hand-worked numbers."""
import doctest
import itertools
import math

import numpy as np
import pytest

import gpureco
import gpureco._beyond


def random_lists(rng, n_users=50, width=8, n_items=30):
    """Distinct items per row, with -1 padding at random positions and some empty rows."""
    lists = np.argsort(rng.random((n_users, n_items)), axis=1)[:, :width]
    lists[rng.random(lists.shape) < 0.2] = -1
    lists[::9] = -1
    return lists


def items_of(row, k):
    return [int(i) for i in row[:k] if i >= 0]


def reference(lists, k, n_items, popularity, n_train_users, vectors, baseline, head_fraction):
    rows = [items_of(row, k) for row in lists]
    exposure = [0] * n_items
    for items in rows:
        for i in items:
            exposure[i] += 1
    total = sum(exposure)
    e = sorted(exposure)
    head_size = math.ceil(head_fraction * n_items)
    head = set(sorted(range(n_items), key=lambda i: (-popularity[i], i))[:head_size])

    def mean(values):
        return sum(values) / len(values) if values else math.nan

    def cosine(a, b):
        return float(np.dot(vectors[a], vectors[b]) / (np.linalg.norm(vectors[a]) * np.linalg.norm(vectors[b])))

    def ild(items):
        pairs = list(itertools.combinations(items, 2))
        return 1.0 - mean([cosine(a, b) for a, b in pairs]) if pairs else math.nan

    return {
        "Coverage": sum(x > 0 for x in exposure) / n_items,
        "Gini": sum((2 * (j + 1) - n_items - 1) * x for j, x in enumerate(e)) / (n_items * total),
        "Entropy": -sum(x / total * math.log2(x / total) for x in exposure if x),
        "Surprisal": [mean([-math.log2(max(popularity[i], 1) / n_train_users) / math.log2(n_train_users)
                            for i in items]) for items in rows],
        "ARP": [mean([popularity[i] for i in items]) for items in rows],
        "Tail": [mean([float(i not in head) for i in items]) for items in rows],
        "ILD": [ild(items) for items in rows],
        "Unexpectedness": [mean([float(i not in items_of(b, k)) for i in items]) for items, b in zip(rows, baseline)],
    }


@pytest.mark.parametrize("k", [1, 3, 8, 12])
def test_matches_reference(rng, k):
    n_items = 30
    lists, baseline = random_lists(rng), random_lists(rng)
    popularity = rng.integers(0, 20, n_items)
    popularity[[3, 4, 5]] = 7  # ties in popularity decide the head by item index
    vectors = rng.standard_normal((n_items, 5))
    out = gpureco.beyond_accuracy(lists, ["Coverage", "Gini", "Entropy", "Surprisal", "ARP", "Tail", "ILD",
                                          "Unexpectedness"], k=k, n_items=n_items, popularity=popularity,
                                  n_train_users=40, item_vectors=vectors, baseline=baseline, head_fraction=0.3)
    expected = reference(lists, k, n_items, popularity, 40, vectors, baseline, 0.3)
    assert list(out) == [f"{name}@{k}" for name in expected]
    for name, value in expected.items():
        np.testing.assert_allclose(out[f"{name}@{k}"], value, rtol=1e-10, atol=1e-12, err_msg=name)


def test_hand_worked():
    lists = np.array([[0, 1, 2], [0, 3, -1], [-1, -1, -1]])
    popularity = np.array([8, 4, 1, 0])  # N = 8 training users
    vectors = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0], [-3.0, 0.0]])
    baseline = np.array([[2, 5, 6], [3, 0, 1], [1, 2, 3]])
    out = gpureco.beyond_accuracy(lists, ["Coverage@3", "Gini@3", "Entropy@3", "Surprisal@3", "ARP@3", "Tail@3",
                                          "ILD@3", "Unexpectedness@3", "ILD@1"], n_items=7,
                                  popularity=np.r_[popularity, 0, 0, 0], n_train_users=8, item_vectors=np.r_[
                                      vectors, np.ones((3, 2))], baseline=baseline, head_fraction=0.25)
    # exposure: item 0 twice, items 1, 2, 3 once, items 4-6 never: 4 of 7 items, E = 5
    assert out["Coverage@3"] == 4 / 7
    # sorted 0, 0, 0, 1, 1, 1, 2: sum (2j - 8) e_j = 0 + 0 + 0 + 0*1 + 2*1 + 4*1 + 6*2 = 18 -> 18 / (7 * 5)
    assert out["Gini@3"] == pytest.approx(18 / 35)
    assert out["Entropy@3"] == pytest.approx(-(0.4 * math.log2(0.4) + 3 * 0.2 * math.log2(0.2)))
    # self-information / log2 8: item 0: 0, item 1: 1/3, item 2: 1, item 3 (never seen, counts as 1): 1
    np.testing.assert_allclose(out["Surprisal@3"], [(0 + 1 / 3 + 1) / 3, 0.5, np.nan])
    np.testing.assert_allclose(out["ARP@3"], [13 / 3, 4.0, np.nan])
    # head: ceil(0.25 * 7) = 2 most popular items, 0 and 1
    np.testing.assert_allclose(out["Tail@3"], [1 / 3, 0.5, np.nan])
    # list 0: cos(0,1) = 0, cos(0,2) = cos(1,2) = 1/sqrt(2); list 1: cos(0,3) = -1 -> ILD 2
    np.testing.assert_allclose(out["ILD@3"], [1 - math.sqrt(2) / 3, 2.0, np.nan])
    assert np.isnan(out["ILD@1"]).all()  # fewer than 2 items
    # list 0 vs baseline {2, 5, 6}: 0 and 1 are unexpected; list 1 vs {3, 0, 1}: nothing
    np.testing.assert_allclose(out["Unexpectedness@3"], [2 / 3, 0.0, np.nan])


def test_extremes():
    same = np.array([[0]] * 5)
    assert gpureco.beyond_accuracy(same, "Gini@1", n_items=4)["Gini@1"] == pytest.approx(1 - 1 / 4)
    even = np.array([[0], [1], [2], [3]])
    out = gpureco.beyond_accuracy(even, ["Gini@1", "Entropy@1", "Coverage@1"], n_items=4)
    assert out == {"Gini@1": 0.0, "Entropy@1": 2.0, "Coverage@1": 1.0}
    empty = gpureco.beyond_accuracy(np.full((2, 3), -1), ["Gini@3", "Entropy@3", "Coverage@3"], n_items=4)
    assert math.isnan(empty["Gini@3"]) and empty["Entropy@3"] == 0.0 and empty["Coverage@3"] == 0.0


def test_ild_scale_free_and_large_k(rng):
    lists = np.argsort(rng.random((20, 300)), axis=1)[:, :200]  # ILD over 200-item lists, several chunks
    vectors = rng.standard_normal((300, 16))
    out = gpureco.beyond_accuracy(lists, "ILD@200", n_items=300, item_vectors=vectors)["ILD@200"]
    scaled = gpureco.beyond_accuracy(lists, "ILD@200", n_items=300, item_vectors=vectors * 7.0)["ILD@200"]
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    for u in (0, 19):
        sims = unit[lists[u]] @ unit[lists[u]].T
        assert out[u] == pytest.approx(1 - (sims.sum() - np.trace(sims)) / (200 * 199))
    np.testing.assert_allclose(out, scaled, rtol=1e-12)


@pytest.mark.gpu
def test_cupy_gives_the_numpy_values_bit_for_bit(rng):
    cupy = pytest.importorskip("cupy")
    if not cupy.is_available():
        pytest.skip("no usable CUDA device")
    lists, baseline = random_lists(rng), random_lists(rng)
    kw = dict(n_items=30, popularity=rng.integers(0, 9, 30), n_train_users=12,
              item_vectors=rng.standard_normal((30, 4)), head_fraction=0.3)
    names = ["Coverage", "Gini", "Entropy", "Surprisal", "ARP", "Tail", "ILD", "Unexpectedness"]
    cpu = gpureco.beyond_accuracy(lists, names, k=5, baseline=baseline, **kw)
    gpu = gpureco.beyond_accuracy(cupy.asarray(lists), names, k=5, baseline=cupy.asarray(baseline), **kw)
    for column, value in cpu.items():
        assert isinstance(gpu[column], float) or isinstance(gpu[column], cupy.ndarray), column
        np.testing.assert_array_equal(cupy.asnumpy(gpu[column]) if isinstance(gpu[column], cupy.ndarray)
                                      else gpu[column], value, err_msg=column)  # bit for bit: computed on the host



def test_docstring_example():
    failures, tried = doctest.testmod(gpureco._beyond)
    assert tried > 0 and failures == 0


LISTS = np.array([[0, 1], [2, -1]])
ERRORS = [
    (dict(metrics="NDCG@2"), ValueError, r"Metric 'NDCG@2' in 'metrics' is not available here. Valid names: Coverage@K, "),
    (dict(metrics="Novelty@2"), ValueError, r"Unknown metric 'Novelty@2' in 'metrics'. Valid names: Coverage@K, Surprisal@K"),
    (dict(metrics="ARP@2"), ValueError, r"Metric ARP@K in 'metrics' needs 'popularity'; got None"),
    (dict(metrics="Surprisal@2", popularity=np.ones(4)), ValueError, r"Metric Surprisal@K in 'metrics' needs 'n_train_users'"),
    (dict(metrics="ILD@2"), ValueError, r"needs 'item_vectors'; got None"),
    (dict(metrics="Unexpectedness@2"), ValueError, r"needs 'baseline'; got None"),
    (dict(lists=np.array([[0, 4]])), ValueError, r"'lists' must hold item indices in \[0, 3\] or -1 \(empty position\); got values from 0 to 4"),
    (dict(lists=np.array([[0, -2]])), ValueError, r"got values from -2 to 0"),
    (dict(lists=np.array([[0, 1], [2, 2]])), ValueError, r"'lists' must not hold an item twice in a list; row 1 does \(1 rows do\)"),
    (dict(lists=np.array([0, 1])), TypeError, r"'lists' must be a 2-dimensional int array .* got shape \(2,\) and dtype int64"),
    (dict(lists=np.array([[0.0, 1.0]])), TypeError, r"'lists' must be a 2-dimensional int array .* dtype float64"),
    (dict(metrics="Unexpectedness@2", baseline=np.array([[0, 1]])), ValueError, r"'baseline' must have one row per row of 'lists' \(2\)"),
    (dict(metrics="ARP@2", popularity=np.ones(3)), ValueError,
     r"'popularity' must hold n_items=4 finite, non-negative counts; got shape \(3,\)"),
    (dict(metrics="ARP@2", popularity=-np.ones(4)), ValueError,
     r"'popularity' must hold n_items=4 finite, non-negative counts; got 4 that are not, for example -1.0 for item 0"),
    (dict(metrics="Tail@2", popularity=np.array([1.0, np.nan, 2.0, 0.0])), ValueError,
     r"'popularity' must hold n_items=4 finite, non-negative counts; got 1 that are not, for example nan for item 1"),
    (dict(metrics="Surprisal@2", popularity=np.ones(4), n_train_users=1), ValueError, r"'n_train_users' must be an int in the range \[2, inf\]"),
    (dict(metrics="ILD@2", item_vectors=np.ones((3, 2))), ValueError, r"'item_vectors' must have shape \(n_items=4, d\); got \(3, 2\)"),
    (dict(metrics="ILD@2", item_vectors=np.array([[1.0], [0.0], [1.0], [0.0]])), ValueError,
     r"'item_vectors' of listed items must be finite and non-zero .*; item 1 is not \(1 listed items are not\)"),
    (dict(metrics="Tail@2", popularity=np.ones(4), head_fraction=1.0), ValueError, r"'head_fraction' must be a float in the open interval"),
    (dict(n_items=0), ValueError, r"'n_items' must be an int in the range \[1, inf\]; got 0"),
    (dict(metrics="Gini", k=None), ValueError, r"Metric 'Gini' in 'metrics' needs a cut-off"),
]


@pytest.mark.parametrize("change,error,message", ERRORS, ids=[c[2][:40] for c in ERRORS])
def test_beyond_accuracy_rejects(change, error, message):
    kw = dict(lists=LISTS, metrics="Coverage@2", n_items=4)
    kw.update(change)
    with pytest.raises(error, match=message):
        gpureco.beyond_accuracy(**kw)


def test_tail_head_size_is_not_fooled_by_rounding():
    popularity = np.arange(100, 0, -1).astype(float)  # item i is the i-th most popular
    lists = np.arange(100).reshape(10, 10)
    out = gpureco.beyond_accuracy(lists, ["Tail@10"], popularity=popularity, head_fraction=0.07, n_items=100)
    assert out["Tail@10"][0] == 0.3  # 0.07 * 100 is 7.000...01 in floats: the head is 7 items, not 8
