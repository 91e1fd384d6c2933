"""The metric-name registry: parse_metrics, column_name and select_columns."""
import re

import numpy as np
import pytest

from gpureco.engine._registry import ALL_METRICS, METRICS, column_name, parse_metrics, select_columns


def test_names_cutoffs_and_columns():
    sel = parse_metrics(["NDCG@5", "p@10", "ROC_AUC", "ndcg", "R@20"], k=[20, 5])
    assert sel.names == ("P@K", "R@K", "NDCG@K", "ROC_AUC")  # registry order
    assert sel.cutoffs.dtype == np.int64 and sel.cutoffs.tolist() == [5, 10, 20]
    # order as asked, duplicates ("NDCG@5" twice) dropped
    assert [column_name(*c) for c in sel.columns] == ["NDCG@5", "P@10", "ROC_AUC", "NDCG@20", "R@20"]


@pytest.mark.parametrize("k", [10, np.int64(10), [10], (10,), np.array([10])])
def test_k_as_int_or_list(k):
    sel = parse_metrics("Hit", k=k)
    assert sel.columns == (("Hit@K", 10),) and sel.cutoffs.tolist() == [10]


def test_explicit_cutoff_wins_over_k():
    assert parse_metrics(["P@3"], k=[5, 7]).columns == (("P@K", 3),)


def test_every_registered_name_round_trips():
    for metric in ALL_METRICS:
        written = column_name(metric.column, 7 if metric.column.endswith("@K") else None)
        sel = parse_metrics(written)
        assert sel.names == (metric.column,)
        assert [column_name(*c) for c in sel.columns] == [written]


def test_select_columns_picks_each_cutoff():
    sel = parse_metrics(["P@2", "P@4", "PR_AUC"])
    values = {"P@K": np.array([[0.5, 0.25], [1.0, 0.75]]), "PR_AUC": np.array([0.3, 0.4])}
    out = select_columns(values, sel)
    assert list(out) == ["P@2", "P@4", "PR_AUC"]
    np.testing.assert_array_equal(out["P@4"], [0.25, 0.75])
    np.testing.assert_array_equal(out["PR_AUC"], [0.3, 0.4])


ALL_NAMES = ", ".join(m.column for m in ALL_METRICS)
CASES = [
    (dict(metrics="MAP@10"), ValueError, re.escape("Unknown metric 'MAP@10' in 'metrics'. Valid names: " + ALL_NAMES)),
    (dict(metrics=["P@10", "Precision"]), ValueError, r"Unknown metric 'Precision'"),
    (dict(metrics="NDCG"), ValueError, r"Metric 'NDCG' in 'metrics' needs a cut-off: write it as 'NDCG@10' or pass k=\.\.\.; got k=None"),
    (dict(metrics="P@0"), ValueError, r"The cut-off of 'P@0' in 'metrics' must be a positive int"),
    (dict(metrics="P@x"), ValueError, r"the cut-off after '@' must be a positive int; got 'x'"),
    (dict(metrics="P@-1"), ValueError, r"the cut-off after '@' must be a positive int; got '-1'"),
    (dict(metrics="ROC_AUC@5"), ValueError, r"ROC_AUC takes no cut-off; write 'ROC_AUC'"),
    (dict(metrics="P", k=0), ValueError, r"'k' must be a positive int \(a cut-off K >= 1\); got 0"),
    (dict(metrics="P", k=[5, -2]), ValueError, r"'k' must be a positive int \(a cut-off K >= 1\); got -2"),
    (dict(metrics="P", k=2.5), TypeError, r"'k' must be a positive int \(a cut-off K >= 1\); got 2.5 of type float"),
    (dict(metrics="P", k=True), TypeError, r"'k' must be a positive int"),
    (dict(metrics="P", k=[]), ValueError, r"'k' must be a positive int or a non-empty list"),
    (dict(metrics=[]), ValueError, r"'metrics' must name at least one metric"),
    (dict(metrics=[5]), TypeError, r"'metrics' must hold metric names \(str\); got 5 of type int"),
    (dict(metrics=5), TypeError, r"'metrics' must be a metric name or a list of names; got 5"),
    (dict(metrics="ROC_AUC", allowed=("P@K",)), ValueError, r"Metric 'ROC_AUC' in 'metrics' is not available here. Valid names: P@K\."),
]


@pytest.mark.parametrize("kw,error,message", CASES, ids=[c[2][:40] for c in CASES])
def test_parse_metrics_rejects(kw, error, message):
    with pytest.raises(error, match=message):
        parse_metrics(**kw)


def test_accuracy_registry_unchanged():
    assert [m.column for m in METRICS] == ["P@K", "TP@K", "R@K", "AP@K", "TAP@K", "NDCG@K", "Hit@K", "RR@K",
                                           "ROC_AUC", "PR_AUC"]
