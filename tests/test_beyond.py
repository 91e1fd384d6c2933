"""beyond_accuracy: against loop references and hand-worked numbers."""
import doctest
import itertools
import math

import numpy as np
import pandas as pd
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


def reference(lists, k, n_items, popularity, n_train_users, vectors, baseline, head_fraction, train_sets=None,
              categories=None, replay=False):
    """Every metric from its formula, list by list; `replay`: RePlay's definitions (its code,
    replay/metrics/*.py of replay-rec 0.21: Surprisal and Unexpectedness over K, and the values
    of its empty lists)."""
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

    def surprisal(items):
        values = [-math.log2(max(popularity[i], 1) / n_train_users) / math.log2(n_train_users) for i in items]
        return sum(values) / k if replay else mean(values)

    def unexpected(items, base):
        if replay:
            return 0.0 if not items or not base else 1 - len(set(items) & set(base)) / k
        return mean([float(i not in base) for i in items])

    def novel(items, train):
        if not items:
            return 1.0 if replay else math.nan
        return 1 - len(set(items) & train) / len(items)

    def diverse(items):
        return len({categories[i] for i in items}) / (k if replay else len(items)) if items else math.nan

    train_sets = train_sets or [set()] * len(rows)
    categories = np.zeros(n_items, int) if categories is None else categories
    return {
        "Coverage": sum(x > 0 for x in exposure) / n_items,
        "Gini": sum((2 * (j + 1) - n_items - 1) * x for j, x in enumerate(e)) / (n_items * total),
        "Entropy": -sum(x / total * math.log2(x / total) for x in exposure if x),
        "Surprisal": [surprisal(items) for items in rows],
        "ARP": [mean([popularity[i] for i in items]) for items in rows],
        "Tail": [mean([float(i not in head) for i in items]) for items in rows],
        "ILD": [ild(items) for items in rows],
        "Unexpectedness": [unexpected(items, items_of(b, k)) for items, b in zip(rows, baseline)],
        "Novelty": [novel(items, train) for items, train in zip(rows, train_sets)],
        "CategoricalDiversity": [diverse(items) for items in rows],
    }


EVERY = ["Coverage", "Gini", "Entropy", "Surprisal", "ARP", "Tail", "ILD", "Unexpectedness", "Novelty",
         "CategoricalDiversity"]


@pytest.mark.parametrize("convention", ["gpureco", "replay"])
@pytest.mark.parametrize("k", [1, 3, 8, 12])
def test_matches_reference(rng, k, convention):
    n_items = 30
    lists, baseline = random_lists(rng), random_lists(rng)
    popularity = rng.integers(0, 20, n_items)
    popularity[[3, 4, 5]] = 7  # ties in popularity decide the head by item index
    vectors = rng.standard_normal((n_items, 5))
    train = (rng.random((lists.shape[0], n_items)) < 0.3).astype(float)
    train[1] = 0  # a user without training items: everything is novel
    categories = rng.integers(0, 4, n_items)
    out = gpureco.beyond_accuracy(lists, EVERY, k=k, n_items=n_items, popularity=popularity,
                                  n_train_users=40, item_vectors=vectors, baseline=baseline, head_fraction=0.3,
                                  train=train, item_categories=categories, convention=convention)
    expected = reference(lists, k, n_items, popularity, 40, vectors, baseline, 0.3,
                         [set(np.flatnonzero(row).tolist()) for row in train], categories, convention == "replay")
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
    # each row by its own power of two, as far as float64 goes: the same cosines bit for bit (each row is brought to
    # [0.5, 1) by a power of two before its norm; the squares of 1e154 or 1e-162 overflowed or vanished)
    powers = 2.0 ** rng.integers(-1000, 1000, 300)
    np.testing.assert_array_equal(gpureco.beyond_accuracy(lists, "ILD@200", n_items=300,
                                                          item_vectors=vectors * powers[:, None])["ILD@200"], out)
    for factor in (1e-170, 1e170, 1e300):  # rounded products: the cosines within rounding
        extreme = gpureco.beyond_accuracy(lists, "ILD@200", n_items=300, item_vectors=vectors * factor)["ILD@200"]
        np.testing.assert_allclose(extreme, out, rtol=1e-12)


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
    (dict(metrics="MAP@2"), ValueError, r"Unknown metric 'MAP@2' in 'metrics'. Valid names: Coverage@K, Surprisal@K, .*"
                                        r"Unexpectedness@K, Novelty@K, CategoricalDiversity@K"),
    (dict(metrics="ARP@2"), ValueError, r"Metric ARP@K in 'metrics' needs 'popularity' \(or 'train'\); got None"),
    (dict(metrics="Novelty@2"), ValueError, r"Metric Novelty@K in 'metrics' needs 'train'; got None"),
    (dict(metrics="CategoricalDiversity@2"), ValueError, r"needs 'item_categories'; got None"),
    (dict(metrics="Novelty@2", train=np.ones((3, 4))), ValueError, r"'train' must have shape \(2, 4\); got \(3, 4\)"),
    (dict(metrics="Novelty@2", train={0: [1]}), TypeError, r"'train' must be a matrix like 'lists' .* got a dict"),
    (dict(metrics="Unexpectedness@2", baseline=pd.DataFrame({"user": [0], "item": [1], "rank": [1]})), TypeError,
     r"'baseline' must be a matrix like 'lists'"),
    (dict(metrics="Surprisal@2", train=np.array([[1, 0, 0, 0], [0, 0, 0, 0]])), ValueError,
     r"Surprisal needs at least 2 training users .*; 'train' has 1"),
    (dict(metrics="CategoricalDiversity@2", item_categories=np.zeros(3)), ValueError,
     r"'item_categories' must hold the category of each of the n_items=4 items; got shape \(3,\)"),
    (dict(metrics="CategoricalDiversity@2", item_categories=np.array(["a", None, "b", "a"], dtype=object)), ValueError,
     r"'item_categories' must give every item a category; got 1 missing \(NaN or None\), the first for item 1"),
    (dict(convention="lenskit"), ValueError, r"'convention' must be one of 'gpureco', 'replay' .*; got 'lenskit'"),
    (dict(ties="average"), ValueError, r"'ties' must be 'first', 'last' or None \(the convention's, 'first' for "
                                       r"'gpureco'\); got 'average'"),
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
    (dict(n_items=0), ValueError, r"'n_items' must be an int in the range \[1, 2147483647\]; got 0"),
    (dict(metrics="Gini", k=None), ValueError, r"Metric 'Gini' in 'metrics' needs a cut-off"),
    (dict(metrics="Surprisal@2", popularity=np.array([10, 0, 0, 1]), n_train_users=4), ValueError,
     r"'popularity' counts training users, at most n_train_users=4 .*; got 10.0 for item 0"),
    (dict(metrics="ARP@2", popularity=pd.Series([1.0, 2.0], index=["a", "b"])), TypeError,
     r"'popularity' as a pandas Series is read by its index, the item ids 0 .. n_items - 1 = 3; got an index of dtype"),
    (dict(metrics="ARP@2", popularity=pd.Series([1, 2], index=[0, 7])), ValueError,
     r"'popularity' as a pandas Series .*; got 1 outside that range, for example 7"),
    (dict(metrics="ARP@2", popularity=pd.Series([1, 2], index=[2, 2])), ValueError,
     r"'popularity' as a pandas Series .*; got item 2 more than once"),
    (dict(metrics="CategoricalDiversity@2", item_categories=pd.Series(list("abc"), index=[3, 2, 1])), ValueError,
     r"'item_categories' as a pandas Series .*, one row per item; got none for 1 items, for example item 0"),
    (dict(metrics="ILD@2", item_vectors=pd.DataFrame(np.ones((4, 2)), index=[0, 1, 2, 2])), ValueError,
     r"'item_vectors' as a pandas DataFrame .*; got item 2 more than once"),
]


@pytest.mark.parametrize("change,error,message", ERRORS, ids=[c[2][:40] for c in ERRORS])
def test_beyond_accuracy_rejects(change, error, message):
    kw = dict(lists=LISTS, metrics="Coverage@2", n_items=4)
    kw.update(change)
    with pytest.raises(error, match=message):
        gpureco.beyond_accuracy(**kw)


def test_pandas_item_values_are_read_by_item_id():
    """popularity, item_categories and item_vectors as pandas objects go by their index (the
    item ids), not their position: popularity as value_counts() makes it (most popular first,
    no row for an item nobody took)."""
    train = pd.DataFrame({"user": [0, 1, 2, 3, 0, 1, 2], "item": [3, 3, 3, 3, 1, 1, 0]})
    lists = np.array([[3, 2], [0, 1]])
    counts = train["item"].value_counts()  # index [3, 1, 0]: item 2 missing
    by_array = np.array([1, 2, 0, 4])
    metrics = ["ARP@2", "Tail@2", "Surprisal@2"]
    want = gpureco.beyond_accuracy(lists, metrics, n_items=4, popularity=by_array, n_train_users=4)
    for popularity in (counts, train["item"].astype("category").value_counts()):  # (a CategoricalIndex)
        got = gpureco.beyond_accuracy(lists, metrics, n_items=4, popularity=popularity, n_train_users=4)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    np.testing.assert_array_equal(want["ARP@2"], [2.0, 1.5])
    order = [2, 0, 3, 1]
    categories = np.array(["a", "b", "a", "c"])
    vectors = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [1.0, -1.0]])
    want = gpureco.beyond_accuracy(lists, ["CategoricalDiversity@2", "ILD@2"], n_items=4, item_categories=categories,
                                   item_vectors=vectors)
    got = gpureco.beyond_accuracy(lists, ["CategoricalDiversity@2", "ILD@2"], n_items=4,
                                  item_categories=pd.Series(categories[order], index=order),
                                  item_vectors=pd.DataFrame(vectors[order], index=order))
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    np.testing.assert_array_equal(want["CategoricalDiversity@2"], [1.0, 1.0])


def test_tail_head_size_is_not_fooled_by_rounding():
    popularity = np.arange(100, 0, -1).astype(float)  # item i is the i-th most popular
    lists = np.arange(100).reshape(10, 10)
    out = gpureco.beyond_accuracy(lists, ["Tail@10"], popularity=popularity, head_fraction=0.07, n_items=100)
    assert out["Tail@10"][0] == 0.3  # 0.07 * 100 is 7.000...01 in floats: the head is 7 items, not 8


# --- Novelty, CategoricalDiversity and RePlay's convention, by hand --------------------------------

def test_novelty_and_categorical_diversity_hand_worked():
    lists = np.array([[0, 1, 2], [3, -1, -1], [-1, -1, -1]])
    train = np.array([[0, 1, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0]])  # user 0 had item 1; user 1 nothing
    categories = np.array(["x", "y", "x", "z"])
    kw = dict(n_items=4, train=train, item_categories=categories)
    out = gpureco.beyond_accuracy(lists, ["Novelty@3", "CategoricalDiversity@3", "CategoricalDiversity@2"], **kw)
    np.testing.assert_array_equal(out["Novelty@3"], [2 / 3, 1.0, np.nan])  # items 0 and 2 are new to user 0
    np.testing.assert_array_equal(out["CategoricalDiversity@3"], [2 / 3, 1.0, np.nan])  # {x, y} over 3 items
    np.testing.assert_array_equal(out["CategoricalDiversity@2"], [1.0, 1.0, np.nan])  # {x, y} over 2 items
    replay = gpureco.beyond_accuracy(lists, ["Novelty@3", "CategoricalDiversity@3"], convention="replay", **kw)
    np.testing.assert_array_equal(replay["Novelty@3"], [2 / 3, 1.0, 1.0])  # RePlay: an empty list is novel
    np.testing.assert_array_equal(replay["CategoricalDiversity@3"], [2 / 3, 1 / 3, np.nan])  # over K = 3


def test_replay_divides_surprisal_and_unexpectedness_by_k():
    lists = np.array([[0, 1, -1, -1], [2, -1, -1, -1], [-1, -1, -1, -1]])
    baseline = np.array([[0, 3], [-1, -1], [0, 1]])
    kw = dict(n_items=4, popularity=np.array([4, 2, 0, 1]), n_train_users=4, baseline=baseline)
    ours = gpureco.beyond_accuracy(lists, ["Surprisal@4", "Unexpectedness@4"], **kw)
    theirs = gpureco.beyond_accuracy(lists, ["Surprisal@4", "Unexpectedness@4"], convention="replay", **kw)
    # surprisal of item 0: log2(4/4)/2 = 0, item 1: log2(4/2)/2 = 1/2, item 2 (nobody's): 1
    np.testing.assert_array_equal(ours["Surprisal@4"], [0.25, 1.0, np.nan])
    np.testing.assert_array_equal(theirs["Surprisal@4"], [0.5 / 4, 1 / 4, 0.0])
    # user 0: item 1 is not in {0, 3}; RePlay: 1 - |{0}| / 4; user 1 has no baseline list: RePlay gives 0
    np.testing.assert_array_equal(ours["Unexpectedness@4"], [0.5, 1.0, np.nan])
    np.testing.assert_array_equal(theirs["Unexpectedness@4"], [0.75, 0.0, 0.0])


# --- lists as RePlay takes them: frames and dicts ---------------------------------------------------

def long_frame(lists, users, order):
    """The long form of a list matrix: one row per listed item, with a rank or a score."""
    rows = [(users[u], int(item), position + 1) for u, row in enumerate(lists)
            for position, item in enumerate(i for i in row if i >= 0)]
    frame = pd.DataFrame(rows, columns=["who", "what", "rank"])
    if order == "score":  # a score falling with the rank, shuffled rows
        frame = frame.assign(score=100.0 - frame["rank"]).drop(columns="rank").sample(frac=1.0, random_state=1)
    return frame


@pytest.mark.parametrize("form", ["rank", "score", "dict", "pairs", "polars"])
def test_frames_and_dicts_give_the_matrix_values(rng, form):
    n_items = 30
    def compact(matrix):  # a long frame's list has no empty position before its last item
        return np.array([sorted(row, key=lambda i: i < 0) for row in matrix])  # (a stable sort)

    lists, baseline = compact(random_lists(rng)), compact(random_lists(rng))
    lists[::9, 0] = 5  # no empty list: a long frame cannot hold one
    users = [f"u{u:02d}" for u in range(lists.shape[0])]
    train = (rng.random((lists.shape[0], n_items)) < 0.3).astype(float)
    kw = dict(n_items=n_items, item_vectors=rng.standard_normal((n_items, 3)), item_categories=rng.integers(0, 5, n_items))
    names = ["Coverage", "Gini", "Surprisal", "ILD", "Unexpectedness", "Novelty", "CategoricalDiversity"]
    want = gpureco.beyond_accuracy(lists, names, k=[2, 8], baseline=baseline, train=train, **kw)
    train_frame = pd.DataFrame([(users[u], int(i)) for u, i in zip(*np.nonzero(train))], columns=["who", "what"])
    if form in ("rank", "score", "polars"):
        order = "rank" if form != "score" else "score"
        given, base = long_frame(lists, users, order), long_frame(baseline, users, order)
        if form == "polars":
            polars = pytest.importorskip("polars")
            given, base, train_frame = (polars.from_pandas(x) for x in (given, base, train_frame))
        columns = dict(user_col="who", item_col="what")
    else:
        def as_dict(matrix):
            return {users[u]: [int(i) for i in row if i >= 0] if form == "dict" else
                    [(int(i), -float(p)) for p, i in enumerate(row[row >= 0])] for u, row in enumerate(matrix)}
        given, base = as_dict(lists), as_dict(baseline)
        train_frame = {users[u]: np.flatnonzero(row).tolist() for u, row in enumerate(train)}
        columns = {}
    got = gpureco.beyond_accuracy(given, names, k=[2, 8], baseline=base, train=train_frame, **columns, **kw)
    assert list(got) == list(want)
    for column, value in want.items():
        if isinstance(value, float):
            assert got[column] == value, column
        else:
            assert isinstance(got[column], pd.Series) and got[column].index.name == "user", column
            assert got[column].index.tolist() == users, column
            np.testing.assert_array_equal(got[column].to_numpy(), value, err_msg=column)


def test_score_ties_follow_ties():
    recs = pd.DataFrame({"user": [0, 0, 0], "item": [1, 2, 3], "score": [0.5, 0.5, 0.1]})
    kw = dict(n_items=4, item_categories=np.array([0, 0, 1, 2]))
    first = gpureco.beyond_accuracy(recs, "CategoricalDiversity@1", **kw)["CategoricalDiversity@1"]
    for ties, top in (("first", 1), ("last", 2)):
        got = gpureco.beyond_accuracy(recs, "Novelty@1", n_items=4, train={0: [top]}, ties=ties)["Novelty@1"]
        assert got[0] == 0.0, ties  # the top item is the one the user had
    assert first[0] == 1.0
    # RePlay's convention orders equal scores by descending item (its pandas path)
    got = gpureco.beyond_accuracy(recs, "Novelty@1", n_items=4, train={0: [2]}, convention="replay")["Novelty@1"]
    assert got[0] == 0.0


def test_dict_users_without_items_have_empty_lists():
    out = gpureco.beyond_accuracy({"a": [0, 1], "b": []}, ["Novelty@2", "Coverage@2"], n_items=3, train={"a": [1]})
    assert out["Novelty@2"].to_dict() == pytest.approx({"a": 0.5, "b": np.nan}, nan_ok=True)
    assert out["Coverage@2"] == 2 / 3


def test_train_frame_gives_replays_surprisal_weights():
    # N = 3 users had training items (user 9 has no list but counts); item 0 was had by 2 of them
    train = pd.DataFrame({"user": [1, 2, 9, 9], "item": [0, 0, 1, 0]})
    out = gpureco.beyond_accuracy({1: [0], 2: [2]}, "Surprisal@1", n_items=3, train=train)["Surprisal@1"]
    np.testing.assert_allclose(out.to_numpy(), [math.log2(3 / 3) / math.log2(3), 1.0])  # item 0: all 3; item 2: none
    given = gpureco.beyond_accuracy({1: [0], 2: [2]}, "Surprisal@1", n_items=3, train=train,
                                    popularity=np.array([1, 1, 1]), n_train_users=8)["Surprisal@1"]
    np.testing.assert_allclose(given.to_numpy(), [1.0, 1.0])  # explicit popularity and N win over train's


RECS = pd.DataFrame({"user": [0, 0, 1], "item": [0, 1, 2], "rank": [1, 2, 1]})
KEYED_ERRORS = [
    (dict(lists=RECS.drop(columns="item")), ValueError,
     r"'lists' must have the columns \['user', 'item'\] \('user_col', 'item_col'\); it lacks \['item'\]"),
    (dict(lists=RECS.drop(columns="rank")), ValueError,
     r"'lists' must have a column 'rank' \('rank_col'\) or 'score' \('score_col'\), to order each list"),
    (dict(lists=RECS.assign(item=["a", "b", "c"])), TypeError,
     r"'lists' column 'item' must hold item indices \(ints in \[0, n_items\).*got 'a' at row 0"),
    (dict(lists=RECS.assign(item=[0, 1, 7])), ValueError,
     r"'lists' must hold item indices in \[0, 3\] \(n_items=4\); got 1 outside, for example 7"),
    (dict(lists=RECS.assign(item=[0, 0, 2])), ValueError,
     r"'lists' must not hold an item twice in a list; the list of user 0 holds item 0 2 times"),
    (dict(lists=RECS.assign(rank=[1, 3, 1])), ValueError,
     r"'lists' ranks must be 1, 2, ..., n within each list \('rank_col'\); the list of user 0 has ranks \[1, 3\]"),
    (dict(lists=RECS.assign(rank=[1.0, np.nan, 1.0])), ValueError, r"'lists' column 'rank' must hold finite numbers"),
    (dict(lists=RECS.assign(user=[0, "0", 1])), TypeError, r"'lists' column 'user' must hold ids of one type"),
    (dict(lists={0: "abc"}), TypeError, r"'lists' as a dict must map each user to a list of items or of \(item, "
                                        r"score\) pairs; user 0 maps to str"),
    (dict(lists={0: [(1, 0.5)], 1: [2]}), TypeError, r"user 1 maps to \[2\]"),
    (dict(lists={0: [(1, 0.5, 3)]}), TypeError, r"'lists' as a dict .* user 0 maps to \[\(1, 0.5, 3\)\]"),
    (dict(lists={0: [(1, "high")]}), ValueError, r"'lists' column 'score' must hold finite numbers"),
    (dict(lists={0: [1]}, metrics="Novelty@2", train={0: [(1, 2)]}), TypeError,
     r"'train' as a dict must map each user to a list of items; user 0 maps to \[\(1, 2\)\]"),
    (dict(metrics="Novelty@2", train=pd.DataFrame({"user": [0]})), ValueError, r"'train' must have the columns"),
    (dict(metrics="Unexpectedness@2", baseline=RECS.assign(item=[0, 1, 9])), ValueError,
     r"'baseline' must hold item indices in \[0, 3\]"),
    (dict(lists=[RECS]), TypeError, r"'lists' must be a 2-dimensional int array"),
    (dict(lists="recs"), TypeError, r"'lists' must be a 2-dimensional int array"),
    (dict(user_col=1), TypeError, r"'user_col' must be a column name \(str\); got 1 of type int"),
    (dict(item_col="user"), ValueError, r"'user_col', 'item_col', 'score_col' and 'rank_col' must be different"),
]


@pytest.mark.parametrize("change,error,message", KEYED_ERRORS, ids=[c[2][:40] for c in KEYED_ERRORS])
def test_frames_and_dicts_are_checked(change, error, message):
    kw = dict(lists=RECS, metrics="Coverage@2", n_items=4)
    kw.update(change)
    with pytest.raises(error, match=message):
        gpureco.beyond_accuracy(**kw)
