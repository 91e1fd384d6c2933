"""RePlay's own expected values, rebuilt as data: gpureco must give them.

The fixtures and expectations come from RePlay (sb-ai-lab/RePlay, replay-rec 0.21.7; unchanged
on main at b4e051e, April 2026): the data of tests/metrics/conftest.py (recs_data, gt_data,
base_recs_data, recs_with_cold_items_data, recs_with_missing_users_data), the expected means
of tests/metrics/test_metrics.py (test_metric, test_diversity_metric, test_unexpectedness,
test_novelty, test_surprisal, test_offline_metrics_unexpectedness_and_diversity,
test_metric_value_by_user) and the per-user values of the docstrings of
replay/metrics/{rocauc,novelty,surprisal,unexpectedness,categorical_diversity}.py. RePlay is
not installed here: the numbers were read, not run. RePlay's tests compare with abs=1e-5.

RePlay name -> gpureco: RocAuc -> "ListAUC@K" (evaluate_lists), Novelty, Surprisal,
Unexpectedness, CategoricalDiversity -> beyond_accuracy(..., convention="replay");
Precision, Recall, MRR, HitRate, NDCG -> P, R, RR, Hit, NDCG with convention="replay";
MAP -> TAP@K. RePlay averages over the users of its second frame (ground truth or train for
Novelty) and of the recommendations (Surprisal, Unexpectedness, CategoricalDiversity).
"""
import numpy as np
import pandas as pd
import pytest

import gpureco

ABS = 1e-5  # RePlay's tolerance (its expectations are printed to 5-6 digits)

RECS = [(1, 3, 0.6), (1, 7, 0.5), (1, 10, 0.4), (1, 11, 0.3), (1, 2, 0.2),
        (2, 5, 0.6), (2, 8, 0.5), (2, 11, 0.4), (2, 1, 0.3), (2, 3, 0.2),
        (3, 4, 1.0), (3, 9, 0.5), (3, 2, 0.1)]
GROUND_TRUTH = [(1, 5), (1, 6), (1, 7), (1, 8), (1, 9), (1, 10), (2, 6), (2, 7), (2, 4), (2, 10), (2, 11),
                (3, 1), (3, 2), (3, 3), (3, 4), (3, 5)]
BASE_RECS = [(1, 3, 0.5), (1, 7, 0.5), (1, 10, 0.3), (1, 11, 0.3), (1, 2, 0.7),
             (2, 5, 0.6), (2, 8, 0.6), (2, 11, 0.4), (2, 1, 0.3), (2, 3, 0.3),
             (3, 4, 1.0), (3, 9, 0.5), (3, 2, 0.3)]  # ties in score: RePlay's pandas path orders by descending item
RECS_WITH_COLD_ITEMS = [(1, 42, 0.5), (1, 5, 1.0), (2, 221, 0.2), (2, 7, 0.3), (3, 2, 0.4), (3, 934, 0.6)]
RECS_WITH_MISSING_USERS = [(1, 7, 0.5), (1, 5, 1.0), (3, 2, 0.4), (3, 6, 0.6)]
N_ITEMS = 935  # item ids are gpureco item indices: the largest is 934
COLUMNS = dict(user_col="uid", item_col="iid", score_col="scores")  # RePlay's test column names


def frame(rows, scored=True):
    return pd.DataFrame(rows, columns=["uid", "iid", "scores"] if scored else ["uid", "iid"])


def as_dict(rows):
    """RePlay's dict of recommendations (conftest.predict_sorted_dict): {user: [(item, score), ...]}."""
    out = {}
    for user, item, score in rows:
        out.setdefault(user, []).append((item, score))
    return {user: sorted(items, key=lambda pair: pair[1], reverse=True) for user, items in out.items()}


def means(out):
    return [float(np.mean(value)) for value in out.values()]


def replay_beyond(recs, metrics, k, **kw):
    return gpureco.beyond_accuracy(recs, metrics, k, n_items=N_ITEMS, convention="replay", **COLUMNS, **kw)


# --- test_metric (RocAuc and the accuracy metrics), over ground truth's users ---------------------

@pytest.mark.parametrize("metric,answer", [
    ("ListAUC", [0.16666, 0.55555, 0.55555]),  # RePlay's RocAuc
    ("P", [0.55555, 0.333333, 0.166666]),
    ("Hit", [1.0, 1.0, 1.0]),
    ("RR", [0.61111, 0.61111, 0.61111]),  # MRR
    ("TAP", [0.35185, 0.21111, 0.198148]),  # MAP: divided by min(K, |T|)
    ("NDCG", [0.48975, 0.35396, 0.34018]),
])
@pytest.mark.parametrize("recs", ["frame", "dict"])
def test_accuracy_and_list_auc(metric, answer, recs):
    given = frame(RECS) if recs == "frame" else as_dict(RECS)
    kw = dict(user_col="uid", item_col="iid", score_col="scores") if recs == "frame" else {}
    truth = frame(GROUND_TRUTH, scored=False) if recs == "frame" else {u: [i for uu, i in GROUND_TRUTH if uu == u]
                                                                        for u in (1, 2, 3)}
    if recs == "dict":  # gpureco's dict form is {user: [item, ...]} in list order
        given = {user: [item for item, _ in pairs] for user, pairs in given.items()}
    out = gpureco.evaluate_lists(given, truth, metric, k=[3, 5, 10], convention="replay", include_missing=True, **kw)
    assert out.mean().tolist() == pytest.approx(answer, abs=ABS)


def test_recall():
    out = gpureco.evaluate_lists(frame(RECS), frame(GROUND_TRUTH, scored=False), "R", k=[5, 10], convention="replay",
                                 **COLUMNS)
    assert out.mean().tolist() == pytest.approx([0.31111, 0.31111], abs=ABS)


def test_convention_replay_ap_is_replays_map():
    # RePlay's MAP divides by min(K, |T|) (replay/metrics/map.py: max_good = min(k, len(ground_truth))), not by
    # min(|T|, list length): the two differ here for user 3, whose list is shorter than K
    out = gpureco.evaluate_lists(frame(RECS), frame(GROUND_TRUTH, scored=False), "AP", k=[3, 5, 10],
                                 convention="replay", **COLUMNS)
    assert out.mean().tolist() == pytest.approx([0.35185, 0.21111, 0.198148], abs=ABS)


def test_list_auc_per_user_docstring():
    # replay/metrics/rocauc.py: RocAuc(2, mode=PerUser()) -> {1: 0.0, 2: 0.0, 3: 1.0}
    out = gpureco.evaluate_lists(frame(RECS), frame(GROUND_TRUTH, scored=False), "ListAUC@2", **COLUMNS)
    assert out["ListAUC@2"].to_dict() == {1: 0.0, 2: 0.0, 3: 1.0}


@pytest.mark.parametrize("truth,recs,answer", [
    ({0: [1, 2]}, {0: [1, 3]}, [1.0, 1.0]),  # no non-relevant item above a relevant one: 1
    ({0: [1, 2]}, {}, [0.0, 0.0]),  # no list: 0 (gpureco: include_missing=True)
    ({0: [1, 2]}, {0: [3, 4]}, [0.0, 0.0]),  # no relevant item in the list: 0
])
def test_list_auc_by_user(truth, recs, answer):
    # tests/metrics/test_metrics.py::test_metric_value_by_user, RocAuc at k = [1, 5]; RePlay's third case, no
    # ground truth (0 there), has no gpureco row: a list without truth is left out (attrs["lists_without_truth"])
    out = gpureco.evaluate_lists(recs or {9: [0]}, truth, "ListAUC", k=[1, 5], include_missing=True)
    assert out.loc[0].tolist() == answer


# --- the beyond-accuracy metrics -------------------------------------------------------------------

def test_categorical_diversity():
    # test_diversity_metric: the item is its own category; CategoricalDiversity([3, 5]) -> [1.0, 0.866666]
    out = replay_beyond(frame(RECS), "CategoricalDiversity", [3, 5], item_categories=np.arange(N_ITEMS))
    assert means(out) == pytest.approx([1.0, 0.866666], abs=ABS)
    # docstring, PerUser at [3, 5]: {1: 1.0, 2: 1.0, 3: 1.0} and {1: 1.0, 2: 1.0, 3: 0.6}
    assert out["CategoricalDiversity@5"].to_dict() == {1: 1.0, 2: 1.0, 3: 0.6}


@pytest.mark.parametrize("base,k,answer", [
    ("recs", [5], [0.133333]),
    ("base", [3, 5], [0.111111111, 0.133333]),
    ("base", [2, 5, 10, 20], [0.16666, 0.133333, 0.566666, 0.783333]),  # test_offline_metrics_unexpectedness_...
])
@pytest.mark.parametrize("form", ["frame", "dict"])
def test_unexpectedness(base, k, answer, form):
    rows = RECS if base == "recs" else BASE_RECS
    recs, baseline = (frame(RECS), frame(rows)) if form == "frame" else (as_dict(RECS), as_dict(rows))
    out = replay_beyond(recs, "Unexpectedness", k, baseline=baseline)
    assert means(out) == pytest.approx(answer, abs=ABS)


def test_unexpectedness_per_user_docstring():
    # replay/metrics/unexpectedness.py: PerUser at [2, 4] against base_rec (its docstring's smaller baseline)
    base = [(1, 3, 0.5), (1, 7, 0.5), (1, 2, 0.7), (2, 5, 0.6), (2, 8, 0.6), (2, 3, 0.3), (3, 4, 1.0), (3, 9, 0.5)]
    out = replay_beyond(frame(RECS), "Unexpectedness", [2, 4], baseline=frame(base))
    assert out["Unexpectedness@2"].to_dict() == {1: 0.5, 2: 0.0, 3: 0.0}
    assert out["Unexpectedness@4"].to_dict() == {1: 0.5, 2: 0.5, 3: 0.5}


def test_unexpectedness_and_diversity_together():
    # test_offline_metrics_unexpectedness_and_diversity: CategoricalDiversity([2, 5, 10, 20]) -> [1, .86666, .43333, .21666]
    out = replay_beyond(frame(RECS), "CategoricalDiversity", [2, 5, 10, 20], item_categories=np.arange(N_ITEMS))
    assert means(out) == pytest.approx([1, 0.86666, 0.43333, 0.21666], abs=ABS)


@pytest.mark.parametrize("train,answer", [("recs", [0, 0]), ("ground_truth", [0.444444, 0.577777])])
@pytest.mark.parametrize("convention", ["replay", "gpureco"])  # the same definition: both divide by the list
def test_novelty(train, answer, convention):
    given = frame(RECS) if train == "recs" else frame(GROUND_TRUTH, scored=False)
    out = gpureco.beyond_accuracy(frame(RECS), "Novelty", [3, 5], n_items=N_ITEMS, train=given,
                                  convention=convention, **COLUMNS)
    assert means(out) == pytest.approx(answer, abs=ABS)


def test_novelty_per_user_docstring():
    # replay/metrics/novelty.py: Novelty(2, mode=PerUser())(recommendations, train) -> {1: 1.0, 2: 0.0, 3: 0.0}
    train = [(1, 5), (1, 6), (1, 8), (1, 9), (1, 2), (2, 5), (2, 8), (2, 11), (2, 1), (2, 3), (3, 4), (3, 9), (3, 2)]
    out = replay_beyond(frame(RECS), "Novelty@2", None, train=frame(train, scored=False))
    assert out["Novelty@2"].to_dict() == {1: 1.0, 2: 0.0, 3: 0.0}


@pytest.mark.parametrize("recs,train,k,answer", [
    (RECS, "recs", [3, 5], [0.78969, 0.614294]),
    (RECS, "ground_truth", [3, 5], [0.719586, 0.698418]),
    (RECS_WITH_COLD_ITEMS, "ground_truth", [5], [0.315876]),  # cold items count as had by one user
    (RECS_WITH_MISSING_USERS, "ground_truth", [5], [0.210721]),  # averaged over the recommendations' users
])
def test_surprisal(recs, train, k, answer):
    given = frame(RECS) if train == "recs" else frame(GROUND_TRUTH, scored=False)
    out = replay_beyond(frame(recs), "Surprisal", k, train=given)
    assert means(out) == pytest.approx(answer, abs=ABS)


def test_surprisal_per_user_docstring():
    # replay/metrics/surprisal.py: Surprisal(2, mode=PerUser()) -> {1: 1.0, 2: 0.3690702464285426, 3: 0.6845351232142713}
    train = [(1, 5), (1, 6), (1, 8), (1, 9), (1, 2), (2, 5), (2, 8), (2, 11), (2, 1), (2, 3), (3, 4), (3, 9), (3, 2)]
    out = replay_beyond(frame(RECS), "Surprisal@2", None, train=frame(train, scored=False))["Surprisal@2"]
    assert out.to_dict() == pytest.approx({1: 1.0, 2: 0.3690702464285426, 3: 0.6845351232142713}, abs=1e-15)


@pytest.mark.parametrize("metric,answer_inter,answer_none,answer_non_inter", [
    ("Novelty", [0.0, 0.5], [1.0, 1.0], [1.0, 1.0]),
    ("Unexpectedness", [0.0, 0.8], [0.0, 0.0], [1.0, 1.0]),
])
def test_metric_value_by_user(metric, answer_inter, answer_none, answer_non_inter):
    """test_metric_value_by_user at k = [1, 5]: (pred [1, 2], other [1, 3]), (None, [1, 3]) and
    ([1, 2], [3, 4]); the other list is Novelty's train and Unexpectedness's recommendations
    (RePlay passes its arguments sorted by name: base_recs before recs)."""
    def value(first, second):
        if metric == "Novelty":
            recs, kw = {0: first or []}, dict(train={0: second})
        else:
            recs, kw = {0: second}, dict(baseline={0: first or []})
        out = gpureco.beyond_accuracy(recs, metric, [1, 5], n_items=5, convention="replay", **kw)
        return [float(column[0]) for column in out.values()]

    assert value([1, 2], [1, 3]) == answer_inter
    assert value(None, [1, 3]) == answer_none
    assert value([1, 2], [3, 4]) == answer_non_inter


def test_coverage_with_items_renumbered():
    # test_coverage_metric: Coverage([3, 5])(recs, recs) -> [0.9, 1.0]; RePlay divides by the items of its
    # second frame (10 here), gpureco by n_items: the same once the 10 items are numbered 0..9
    items = sorted({item for _, item, _ in RECS})
    renumbered = [(user, items.index(item), score) for user, item, score in RECS]
    out = gpureco.beyond_accuracy(frame(renumbered), "Coverage", [3, 5], n_items=len(items), **COLUMNS)
    assert list(out.values()) == pytest.approx([0.9, 1.0], abs=ABS)
