"""evaluate_lists: against a per-list reference, hand-worked numbers, calc_reco_metrics and ranx."""
import doctest
import math

import numpy as np
import pandas as pd
import pytest

import gpureco
import gpureco._lists
from conftest import random_problem
from reference import defined_scores

NAMES = ("P", "TP", "R", "AP", "TAP", "NDCG", "Hit", "RR")


def reference_list(ranked, truth, k, gain="linear"):
    """Metrics of one list at cut-off k from docs/metrics.md, walking the list.

    ranked: items in list order; truth: {item: rating}."""
    g = {"linear": lambda r: r, "exponential": lambda r: 2.0 ** r - 1.0, "binary": lambda r: float(r > 0)}[gain]
    top = ranked[:k]
    hit = [1 if item in truth else 0 for item in top]
    hits, n_t = sum(hit), len(truth)
    precision_at = [sum(hit[: i + 1]) / (i + 1) for i in range(len(top))]
    ap_sum = sum(p for p, h in zip(precision_at, hit) if h)
    dcg = sum(g(truth[item]) / math.log2(i + 2) for i, item in enumerate(top) if item in truth)
    ideal = sorted((g(r) for r in truth.values() if g(r) > 0), reverse=True)[:k]
    idcg = sum(x / math.log2(i + 2) for i, x in enumerate(ideal))
    first = next((i for i, h in enumerate(hit) if h), None)
    return {"P": hits / k, "TP": hits / min(k, n_t), "R": hits / n_t, "AP": ap_sum / n_t,
            "TAP": ap_sum / min(k, n_t), "NDCG": dcg / idcg if idcg > 0 else math.nan, "Hit": float(hits > 0),
            "RR": 0.0 if first is None else 1.0 / (first + 1)}


def random_lists(rng, n_users=60, n_items=40, groups=("a", "b")):
    """recs (rank column, rows shuffled, lists of 0..12 items) and graded truth; some users only in one."""
    recs, truth = [], []
    for group in groups:
        for u in range(n_users):
            if u % 7 != 3:  # users 3, 10, ... have no list
                items = rng.permutation(n_items)[: rng.integers(0, 13)]
                recs += [(group, u, f"i{i}", r + 1) for r, i in enumerate(items)]
    for u in range(n_users):
        if u % 11 != 5:  # users 5, 16, ... have no truth
            items = rng.permutation(n_items)[: rng.integers(1, 8)]
            truth += [(u, f"i{i}", float(rng.integers(0, 4))) for i in items]  # rating 0 is relevant, gain 0
    recs = pd.DataFrame(recs, columns=["algorithm", "user", "item", "rank"]).sample(frac=1.0, random_state=1)
    return recs, pd.DataFrame(truth, columns=["user", "item", "rating"])


def reference_frame(recs, truth, k, include_missing, gain="linear"):
    out = {}
    truth_of = {u: dict(zip(t["item"], t["rating"])) for u, t in truth.groupby("user")}
    for group in sorted(recs["algorithm"].unique()):
        lists = {u: list(r.sort_values("rank")["item"]) for u, r in recs[recs["algorithm"] == group].groupby("user")}
        for u in sorted(truth_of):
            if u in lists or include_missing:
                out[(group, u)] = reference_list(lists.get(u, []), truth_of[u], k, gain)
    return out


@pytest.mark.parametrize("include_missing", [False, True])
@pytest.mark.parametrize("k", [1, 3, 10])
def test_matches_reference(rng, k, include_missing):
    recs, truth = random_lists(rng)
    out = gpureco.evaluate_lists(recs, truth, metrics=list(NAMES), k=k, group_by="algorithm",
                                 include_missing=include_missing)
    expected = reference_frame(recs, truth, k, include_missing)
    assert list(out.index) == list(expected)
    assert list(out.columns) == [f"{name}@{k}" for name in NAMES]
    for name in NAMES:
        np.testing.assert_allclose(out[f"{name}@{k}"], [v[name] for v in expected.values()], rtol=1e-12,
                                   err_msg=name)
    n_nan = int(out[f"NDCG@{k}"].isna().sum())
    assert n_nan > 0 and out.attrs["nan_reasons"] == {"rule 8": n_nan}  # users whose ratings are all 0


@pytest.mark.parametrize("gain", ["exponential", "binary"])
def test_gains(rng, gain):
    recs, truth = random_lists(rng, groups=("a",))
    out = gpureco.evaluate_lists(recs, truth, metrics="NDCG@5", gain=gain, group_by="algorithm")
    expected = reference_frame(recs, truth, 5, False, gain)
    np.testing.assert_allclose(out["NDCG@5"], [v["NDCG"] for v in expected.values()], rtol=1e-12)


def test_hand_worked():
    # list of user 1: x, b, y, a; truth a (rating 3), b (1), c (2) -> hits at positions 2 and 4
    recs = pd.DataFrame({"user": [1] * 4, "item": ["x", "b", "y", "a"], "rank": [1, 2, 3, 4]})
    truth = pd.DataFrame({"user": [1, 1, 1], "item": ["a", "b", "c"], "rating": [3.0, 1.0, 2.0]})
    out = gpureco.evaluate_lists(recs, truth, metrics=["P", "R", "AP", "TAP", "NDCG", "RR", "Hit"], k=[2, 4, 5])
    row = out.loc[1]
    assert row["P@2"] == 0.5 and row["P@4"] == 0.5 and row["P@5"] == 0.4
    assert row["R@4"] == pytest.approx(2 / 3)
    assert row["AP@4"] == pytest.approx((1 / 2 + 2 / 4) / 3) and row["TAP@2"] == pytest.approx((1 / 2) / 2)
    # DCG@4 = 1/log2(3) + 3/log2(5); IDCG@4 = 3 + 2/log2(3) + 1/log2(4): c, never listed, counts in the ideal
    assert row["NDCG@4"] == pytest.approx((1 / math.log2(3) + 3 / math.log2(5)) / (3 + 2 / math.log2(3) + 0.5))
    assert row["NDCG@2"] == pytest.approx((1 / math.log2(3)) / (3 + 2 / math.log2(3)))
    assert row["RR@2"] == 0.5 and row["Hit@2"] == 1.0


def test_scores_rank_descending_ties_by_item():
    recs = pd.DataFrame({"user": [1, 1, 1, 1], "item": [9, 4, 7, 2], "score": [0.5, 0.9, 0.5, 0.1]})
    truth = pd.DataFrame({"user": [1], "item": [9]})
    # order: 4 (0.9), then 7 and 9 tied at 0.5 -> 7 first (lower item), so 9 is at position 3
    out = gpureco.evaluate_lists(recs, truth, metrics=["RR@3", "Hit@2"])
    assert out.loc[1, "RR@3"] == pytest.approx(1 / 3) and out.loc[1, "Hit@2"] == 0.0


def test_truth_keyed_by_fold_and_runs():
    # two folds, two algorithms; the truth of fold 1 must not be used for fold 2's lists
    recs = pd.DataFrame({"fold": [1, 1, 2, 2, 1], "algorithm": ["a", "b", "a", "b", "b"],
                         "user": [7, 7, 7, 7, 8], "item": ["p", "q", "p", "q", "p"], "rank": [1, 1, 1, 1, 1]})
    truth = pd.DataFrame({"fold": [1, 2, 1], "user": [7, 7, 8], "item": ["p", "q", "p"]})
    out = gpureco.evaluate_lists(recs, truth, metrics="Hit@1", group_by=["fold", "algorithm"], include_missing=True)
    assert out.index.names == ["fold", "algorithm", "user"]
    assert out["Hit@1"].to_dict() == {(1, "a", 7): 1.0, (1, "a", 8): 0.0, (1, "b", 7): 0.0, (1, "b", 8): 1.0,
                                      (2, "a", 7): 0.0, (2, "b", 7): 1.0}
    out = gpureco.evaluate_lists(recs, truth, metrics="Hit@1", group_by=["fold", "algorithm"])
    assert len(out) == 5 and (1, "a", 8) not in out.index


def test_lists_without_truth_are_counted():
    recs = pd.DataFrame({"user": [1, 2, 2], "item": [1, 1, 2], "rank": [1, 1, 2]})
    out = gpureco.evaluate_lists(recs, pd.DataFrame({"user": [2], "item": [2]}), metrics="P@2")
    assert list(out.index) == [2] and out.attrs["lists_without_truth"] == 1 and out.loc[2, "P@2"] == 0.5


def test_no_recommendations_at_all():
    recs = pd.DataFrame({"user": pd.Series([], dtype=int), "item": pd.Series([], dtype=int),
                         "rank": pd.Series([], dtype=int)})
    truth = pd.DataFrame({"user": [1, 2], "item": [5, 6]})
    assert gpureco.evaluate_lists(recs, truth, metrics="P@3").empty
    out = gpureco.evaluate_lists(recs, truth, metrics=["P@3", "NDCG@3"], include_missing=True)
    assert out.to_numpy().tolist() == [[0.0, 0.0], [0.0, 0.0]]


def test_polars_like_frames_are_converted():
    class Frame:  # anything with .to_pandas(), as a polars DataFrame
        def __init__(self, df):
            self.df = df

        def to_pandas(self):
            return self.df

    recs = pd.DataFrame({"user": [1, 1], "item": [3, 4], "rank": [2, 1]})
    truth = pd.DataFrame({"user": [1], "item": [3]})
    pd.testing.assert_frame_equal(gpureco.evaluate_lists(Frame(recs), Frame(truth), metrics="RR@2"),
                                  gpureco.evaluate_lists(recs, truth, metrics="RR@2"))


@pytest.mark.parametrize("include_missing", [False, True])
def test_polars_frames_give_the_pandas_numbers(include_missing):
    """Real polars frames (string items, a group column, float ratings, a score column with a
    tie) give the pandas frames' result, DataFrame for DataFrame."""
    polars = pytest.importorskip("polars")
    recs, truth = random_lists(np.random.default_rng(7))
    recs = recs.assign(score=-recs["rank"].astype(float).where(recs["rank"] != 2, -1.0))  # ranks 1 and 2 tie
    kw = dict(metrics=["P@5", "R@5", "AP@5", "NDCG@5", "RR@5"], group_by="algorithm", include_missing=include_missing)
    want = gpureco.evaluate_lists(recs.drop(columns="rank"), truth, **kw)
    got = gpureco.evaluate_lists(polars.from_pandas(recs.drop(columns="rank")), polars.from_pandas(truth), **kw)
    assert want.notna().to_numpy().sum() > 100
    pd.testing.assert_frame_equal(got, want)


def top_k_frame(scores, X_train, k, by):
    """The top-k lists of a score matrix (training items excluded, ties by item index), as a frame."""
    rows = []
    for u in range(scores.shape[0]):
        pool = [i for i in range(scores.shape[1]) if X_train[u, i] == 0]
        ranked = sorted(pool, key=lambda i: (-scores[u, i], i))[:k]
        rows += [(u, i, r + 1 if by == "rank" else scores[u, i]) for r, i in enumerate(ranked)]
    return pd.DataFrame(rows, columns=["user", "item", by])


@pytest.mark.parametrize("by", ["rank", "score"])
@pytest.mark.parametrize("integer_factors", [False, True])
@pytest.mark.filterwarnings("ignore:gpureco.*rule 1")
def test_same_as_calc_reco_metrics(rng, by, integer_factors):
    X_train, X_test, A, B = random_problem(rng, n_users=50, n_items=40, graded=True, integer_factors=integer_factors)
    k = 6
    expected = gpureco.calc_reco_metrics(X_train, X_test, A, B, k=k, all_metrics=True)
    recs = top_k_frame(defined_scores(A, B), X_train, k, by)
    users, items = np.nonzero(X_test)
    truth = pd.DataFrame({"user": users, "item": items, "rating": X_test[users, items]})
    out = gpureco.evaluate_lists(recs, truth, metrics=list(NAMES), k=k)
    valid = expected.dropna(subset=["AP@6"]).index  # users with test items and a ranking
    assert len(valid) > 30
    pd.testing.assert_frame_equal(out.loc[valid, [f"{n}@{k}" for n in NAMES]].reset_index(drop=True),
                                  expected.loc[valid, [f"{n}@{k}" for n in NAMES]].reset_index(drop=True),
                                  check_exact=False, rtol=1e-12)


@pytest.mark.filterwarnings("ignore::Warning")  # numba's type-safety warnings inside ranx
def test_against_ranx(rng):
    ranx = pytest.importorskip("ranx")
    recs, truth = random_lists(rng, groups=("a",))
    truth = truth[truth["rating"] > 0]  # ranx counts only positive relevance as relevant
    k = 5
    out = gpureco.evaluate_lists(recs, truth, metrics=["P", "R", "AP", "NDCG", "RR", "Hit"], k=k,
                                 group_by="algorithm", include_missing=True).droplevel("algorithm")
    qrels = ranx.Qrels({str(u): {i: int(r) for i, r in zip(t["item"], t["rating"])} for u, t in truth.groupby("user")})
    # a list as scores: position 1 gets the highest
    run = ranx.Run({str(u): {i: float(100 - r) for i, r in zip(lst["item"], lst["rank"])}
                    for u, lst in recs.groupby("user") if u in out.index and len(lst)})
    names = {"P": "precision", "R": "recall", "AP": "map", "NDCG": "ndcg", "RR": "mrr", "Hit": "hit_rate"}
    scores = ranx.evaluate(qrels, run, [f"{m}@{k}" for m in names.values()], return_mean=False, make_comparable=True)
    users = [int(q) for q in qrels.keys()]
    assert sorted(users) == sorted(out.index)
    for ours, theirs in names.items():
        np.testing.assert_allclose(out.loc[users, f"{ours}@{k}"], scores[f"{theirs}@{k}"], rtol=1e-9,
                                   err_msg=ours)


def test_docstring_example():
    failures, tried = doctest.testmod(gpureco._lists, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert tried > 0 and failures == 0


RECS = pd.DataFrame({"user": [1, 1, 2], "item": [10, 11, 10], "rank": [1, 2, 1]})
TRUTH = pd.DataFrame({"user": [1, 2], "item": [10, 12]})
ERRORS = [
    (dict(recs=RECS.drop(columns="item")), ValueError, r"'recs' must have the columns \['user', 'item'\]; it lacks \['item'\]"),
    (dict(truth=TRUTH.drop(columns="user")), ValueError, r"'truth' must have the columns \['user', 'item'\]; it lacks \['user'\]"),
    (dict(recs=RECS.assign(item=[10, 10, 10], rank=[1, 2, 1])), ValueError,
     r"'recs' has 1 duplicate \(user, item\) rows, for example user 1, item 10; an item can appear once per list"),
    (dict(truth=pd.concat([TRUTH, TRUTH.iloc[:1]])), ValueError, r"'truth' has 1 duplicate \(user, item\) rows"),
    (dict(recs=RECS.assign(rank=[1, 3, 1])), ValueError,
     r"'recs' ranks must be 1, 2, \.\.\., n within each list; the list of user 1 has ranks \[1, 3\] \(1 lists are wrong\)"),
    (dict(recs=RECS.assign(rank=[0, 1, 1])), ValueError, r"the list of user 1 has ranks \[0, 1\]"),
    (dict(recs=RECS.assign(rank=[1, 1, 1])), ValueError, r"the list of user 1 has ranks \[1, 1\]"),
    (dict(recs=RECS.assign(rank=[1, 2.5, 1])), ValueError, r"the list of user 1 has ranks \[1, 2.5\]"),
    (dict(recs=RECS.drop(columns="rank")), ValueError, r"'recs' must have a column 'rank' .* or 'score' .*; got neither"),
    (dict(recs=RECS.drop(columns="rank").assign(score=[1.0, np.nan, 2.0])), ValueError,
     r"'recs' column 'score' must hold finite numbers; got 1 NaN or infinite values"),
    (dict(recs=RECS.assign(rank=["1", "2", "1"])), TypeError, r"'recs' column 'rank' must hold numbers"),
    (dict(truth=TRUTH.assign(rating=["a", "b"])), TypeError, r"'truth' column 'rating' must hold numbers"),
    (dict(metrics="ROC_AUC"), ValueError, r"ROC_AUC cannot be computed from top-K lists \('metrics'\): it needs the rank"),
    (dict(metrics=["PR_AUC", "ROC_AUC", "P@1"]), ValueError, r"ROC_AUC and PR_AUC cannot be computed from top-K lists"),
    (dict(metrics="Coverage@5"), ValueError, r"^Metric 'Coverage@5' in 'metrics' is not available here\. It is a metric of top-K lists: gpureco\.beyond_accuracy computes it\. Valid names: P@K, TP@K"),
    (dict(metrics="MRR@5"), ValueError, r"Unknown metric 'MRR@5' in 'metrics'. Valid names: P@K, TP@K, R@K, AP@K, TAP@K, "
                                        r"NDCG@K, Hit@K, RR@K, ROC_AUC, PR_AUC, DCG@K, F1@K, RBP@K, RPrec, bpref, ListAUC@K \("),
    (dict(k=0), ValueError, r"'k' must be a positive int \(a cut-off K >= 1\); got 0"),
    (dict(k=[5, "10"]), TypeError, r"'k' must be a positive int \(a cut-off K >= 1\); got '10' of type str"),
    (dict(group_by="fold"), ValueError, r"'recs' must have the columns \['user', 'item', 'fold'\]; it lacks \['fold'\]"),
    (dict(group_by="item"), ValueError, r"'group_by' must name run columns other than user, item"),
    (dict(gain="log"), ValueError, r"'gain' must be one of 'linear', 'exponential', 'binary' \(or None: the convention's\); got 'log'"),
    (dict(truth=TRUTH.assign(rating=[2000.0, 1.0]), gain="exponential"), ValueError, r"gain='exponential' needs 'truth' ratings below 1024"),
    (dict(recs=RECS.assign(item=[10, None, 11])), ValueError,
     r"'recs' column 'item' has 1 missing values \(NaN/None\), the first at row 1; ids must be present"),
    (dict(truth=TRUTH.assign(user=[1, np.nan])), ValueError, r"'truth' column 'user' has 1 missing values"),
    (dict(recs=RECS.to_numpy()), TypeError, r"'recs' must be a DataFrame of recommendations \(pandas, or polars\); got ndarray"),
    # a column named and misspelled: the rating column would be dropped as one of the others, silently
    (dict(value_col="foo"), ValueError, r"'truth' has no column 'foo' \(value_col\); got columns \['user', 'item'\] "
                                        r"\(leave value_col at its default, 'rating', where there is none\)"),
]


def test_one_of_the_named_ranking_columns_is_enough():
    """score_col and rank_col both named, recs holding one of them: that one ranks the lists."""
    recs = RECS.rename(columns={"rank": "position"})
    want = gpureco.evaluate_lists(RECS, TRUTH, metrics=["P@1", "RR@2"])
    got = gpureco.evaluate_lists(recs, TRUTH, metrics=["P@1", "RR@2"], score_col="pred", rank_col="position")
    pd.testing.assert_frame_equal(got, want)


def test_item_ids_that_pandas_would_merge_stay_apart():
    """int64 item ids in recs and uint64 in truth: pandas' concat makes them float64, where 2**60
    and 2**60 + 1 are one number (a false duplicate in the list, or a false hit)."""
    recs = pd.DataFrame({"user": [0, 0], "item": np.array([2**60, 2**60 + 1], np.int64), "rank": [1, 2]})
    truth = pd.DataFrame({"user": [0], "item": np.array([2**60 + 1], np.uint64)})
    got = gpureco.evaluate_lists(recs, truth, metrics=["P@1", "P@2", "RR@2"])
    np.testing.assert_array_equal(got.to_numpy(), [[0.0, 0.5, 0.5]])


@pytest.mark.parametrize("change,error,message", ERRORS, ids=[c[2][:40] for c in ERRORS])
def test_evaluate_lists_rejects(change, error, message):
    kw = dict(recs=RECS, truth=TRUTH, metrics="P@2")
    kw.update(change)
    with pytest.raises(error, match=message):
        gpureco.evaluate_lists(**kw)


def test_column_names_and_dict_inputs():
    recs = pd.DataFrame({"u": [1, 1, 1, 2, 2], "i": ["a", "b", "c", "a", "d"], "r": [1, 2, 3, 1, 2]})
    truth = pd.DataFrame({"u": [1, 1, 2, 3], "i": ["b", "z", "a", "a"], "v": [2.0, 1, 1, 1]})
    metrics = ["P@2", "R@2", "NDCG@2", "RPrec", "F1@2", "DCG@2", "RBP@2"]
    named = gpureco.evaluate_lists(recs, truth, metrics=metrics, user_col="u", item_col="i", rank_col="r",
                                   value_col="v")
    plain = gpureco.evaluate_lists(recs.set_axis(["user", "item", "rank"], axis=1),
                                   truth.set_axis(["user", "item", "rating"], axis=1), metrics=metrics)
    pd.testing.assert_frame_equal(named, plain)
    as_dicts = gpureco.evaluate_lists({1: ["a", "b", "c"], 2: ["a", "d"]}, {1: {"b": 2.0, "z": 1}, 2: {"a": 1}},
                                      metrics=metrics)
    pd.testing.assert_frame_equal(as_dicts, plain, check_index_type=False)
    # user 1: hit at rank 2 of truth {b (2), z (1)}
    assert plain.loc[1, "RPrec"] == 0.5 and plain.loc[1, "F1@2"] == 2 * 1 / (2 + 2)
    assert plain.loc[1, "DCG@2"] == 2 / np.log2(3) and plain.loc[1, "RBP@2"] == (1 - 0.8) * 0.8
    with pytest.raises(TypeError, match="'truth' as a dict must map each user to a list of items"):
        gpureco.evaluate_lists({1: ["a"]}, {1: "a"})


def test_rprec_beyond_the_cut_off():
    # 3 truth items, cut-off 1: RPrec still looks at the top 3
    recs = pd.DataFrame({"user": [1] * 4, "item": [10, 11, 12, 13], "rank": [1, 2, 3, 4]})
    truth = pd.DataFrame({"user": [1, 1, 1], "item": [11, 12, 99]})
    assert gpureco.evaluate_lists(recs, truth, metrics=["RPrec", "P@1"]).loc[1, "RPrec"] == 2 / 3


def test_lenskit_and_ranx_conventions_hand_worked():
    recs = {1: ["a", "b", "c"]}
    truth = {1: {"b": 1.7, "z": 0.5}}
    lenskit = gpureco.evaluate_lists(recs, truth, metrics=["P@5", "R@5", "AP@5", "NDCG@5"], convention="lenskit")
    # list of 3: P = 1/3; R = 1 / min(2, 3); AP = (1/2) / min(2, 3); NDCG: binary gains, discount
    # log2(max(i, 2)): DCG = 1 at rank 2, ideal 1 + 1
    assert lenskit.loc[1].tolist() == [1 / 3, 1 / 2, (1 / 2) / 2, 1 / 2]
    ranx = gpureco.evaluate_lists(recs, truth, metrics=["P@5", "R@5", "NDCG@5"], convention="ranx")
    # ranx: z (0.5) is not relevant, b counts with gain int(1.7) = 1
    assert ranx.loc[1].tolist() == [1 / 5, 1.0, 1 / np.log2(3)]
    last = gpureco.evaluate_lists(pd.DataFrame({"user": [1, 1], "item": ["a", "b"], "score": [1.0, 1.0]}),
                                  pd.DataFrame({"user": [1], "item": ["b"]}), metrics=["RR@2"], ties="last")
    assert last.loc[1, "RR@2"] == 1.0  # the tie goes to the larger item, b


def test_top_k_frames_are_the_input_of_evaluate_lists_and_beyond_accuracy(rng):
    """top_k(output="pandas") has both 'rank' and 'score' (docs/conventions.md: it is the input of evaluate_lists
    and beyond_accuracy): the ranks order the lists, as they would without the scores; ranks that disagree with the
    scores are read as ranks (the scores are not read)."""
    A, B = rng.standard_normal((6, 3)), rng.standard_normal((9, 3))
    recs = gpureco.top_k(A, B, 4, output="pandas", device="cpu")
    assert {"rank", "score"} <= set(recs.columns)
    truth = pd.DataFrame({"user": [0, 0, 1, 3, 5], "item": [1, 4, 2, 8, 0]})
    ranked = recs.drop(columns="score")
    pd.testing.assert_frame_equal(gpureco.evaluate_lists(recs, truth, ["NDCG@4", "P@4", "AP@4"]),
                                  gpureco.evaluate_lists(ranked, truth, ["NDCG@4", "P@4", "AP@4"]))
    flipped = recs.assign(score=-recs["score"])  # scores that rise down the lists: a stale column, refused
    for call in (lambda: gpureco.evaluate_lists(flipped, truth, ["NDCG@4"]),
                 lambda: gpureco.beyond_accuracy(flipped, ["ARP@3"], n_items=9, popularity=np.arange(9.0))):
        with pytest.raises(ValueError, match=r"has both a 'rank' and a 'score' column, and they disagree: rank 2 has a "
                                             r"higher score than the rank before it in the list of user 0"):
            call()
    tied = recs.assign(score=1.0)  # equal scores agree with any order of ranks
    pd.testing.assert_frame_equal(gpureco.evaluate_lists(tied, truth, ["NDCG@4"]),
                                  gpureco.evaluate_lists(ranked, truth, ["NDCG@4"]))
    assert gpureco.beyond_accuracy(recs, ["Coverage@4", "Gini@3"], n_items=9) == \
        gpureco.beyond_accuracy(ranked, ["Coverage@4", "Gini@3"], n_items=9)
    pd.testing.assert_series_equal(
        gpureco.beyond_accuracy(tied, ["ARP@3"], n_items=9, popularity=np.arange(9.0))["ARP@3"],
        gpureco.beyond_accuracy(ranked, ["ARP@3"], n_items=9, popularity=np.arange(9.0))["ARP@3"])


def test_named_columns_beside_columns_of_the_canonical_names():
    """user_col='u' in frames that also have a 'user' column (some other id): 'u' is read, 'user' ignored as any
    other column (the renaming gave two columns named 'user', and pandas' AttributeError)."""
    recs = pd.DataFrame({"user": [9, 9, 9], "u": [1, 1, 2], "item": [10, 11, 10], "rank": [1, 2, 1]})
    truth = pd.DataFrame({"user": [7, 7], "u": [1, 2], "item": [11, 12]})
    got = gpureco.evaluate_lists(recs, truth, ["P@2", "RR@2"], user_col="u")
    expected = gpureco.evaluate_lists(recs.drop(columns="user").rename(columns={"u": "user"}),
                                      truth.drop(columns="user").rename(columns={"u": "user"}), ["P@2", "RR@2"])
    pd.testing.assert_frame_equal(got, expected)
    assert got["RR@2"].tolist() == [0.5, 0.0]
