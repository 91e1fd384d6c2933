"""Output layouts, input types and conversions of the public API."""
import sys
import subprocess
import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

import gpureco
from conftest import BACKENDS, random_problem
from gpureco.engine._conventions import TIES
from gpureco.engine._registry import CONVENTIONS, METRICS, column_name


@pytest.fixture
def problem(rng):
    X_train, X_test, A, B = random_problem(rng, n_users=30, n_items=40)
    for u in np.flatnonzero((X_test > 0).sum(axis=1) == 0):  # every user gets a test item
        X_test[u, np.flatnonzero(X_train[u] == 0)[0]] = 1
    return sp.csr_array(X_train), sp.csr_array(X_test), A, B


def test_dataframe_columns_as_recometrics(problem):
    df = gpureco.calc_reco_metrics(*problem, k=5)
    assert isinstance(df, pd.DataFrame) and df.shape == (30, 3)
    assert list(df.columns) == ["P@5", "AP@5", "NDCG@5"]
    df = gpureco.calc_reco_metrics(*problem, k=5, all_metrics=True, rename_k=False)
    assert list(df.columns) == ["P@K", "TP@K", "R@K", "AP@K", "TAP@K", "NDCG@K", "Hit@K", "RR@K", "ROC_AUC", "PR_AUC"]
    df = gpureco.calc_reco_metrics(*problem, k=3, cumulative=True, precision=True, ndcg=False,
                                   average_precision=False, roc_auc=True)
    assert list(df.columns) == ["P@1", "P@2", "P@3", "ROC_AUC"]
    assert all(dtype == np.float64 for dtype in df.dtypes)


def test_dict_output(problem):
    out = gpureco.calc_reco_metrics(*problem, k=4, as_df=False, cumulative=True)
    assert set(out) == {"P@K", "AP@K", "NDCG@K", "K"} and out["K"] == 4
    assert out["P@K"].shape == (30, 4)
    out = gpureco.calc_reco_metrics(*problem, k=4, as_df=False)
    assert out["P@K"].shape == (30,)


def test_input_formats_give_the_same_numbers(problem):
    X_train, X_test, A, B = problem
    base = gpureco.calc_reco_metrics(X_train, X_test, A, B, k=5, all_metrics=True)
    variants = [
        (X_train.tocoo(), X_test.tocsc(), A, B),
        (sp.csr_matrix(X_train), sp.lil_matrix(X_test), A, B),
        (X_train.toarray(), X_test.toarray().tolist(), A.tolist(), B),
        (X_train.astype(np.int8), X_test.astype(np.float32), np.asfortranarray(A), B[:, :]),
    ]
    for variant in variants:
        pd.testing.assert_frame_equal(gpureco.calc_reco_metrics(*variant, k=5, all_metrics=True), base)


def test_index_dtypes_and_unsorted_duplicate_entries_are_handled_on_a_copy(problem):
    X_train, X_test, A, B = problem
    base = gpureco.calc_reco_metrics(X_train, X_test, A, B, k=5, all_metrics=True)
    # X_test with int64 indices, reversed order within rows, one entry split into two halves
    coo = X_test.tocoo()
    rows = np.concatenate([coo.row[::-1], coo.row[:1]])
    cols = np.concatenate([coo.col[::-1], coo.col[:1]])
    vals = np.concatenate([coo.data[::-1], [0.0]])
    vals[-1] = vals[np.flatnonzero((rows == coo.row[0]) & (cols == coo.col[0]))[0]] / 2
    vals[np.flatnonzero((rows == coo.row[0]) & (cols == coo.col[0]))[0]] /= 2
    messy = sp.csr_matrix((vals, (rows.astype(np.int64), cols.astype(np.int64))), shape=X_test.shape)
    messy.has_canonical_format = False
    messy.indices = messy.indices.astype(np.int64)
    before = (messy.indices.copy(), messy.data.copy())
    got = gpureco.calc_reco_metrics(X_train, messy, A, B, k=5, all_metrics=True)
    pd.testing.assert_frame_equal(got, base)
    np.testing.assert_array_equal(messy.indices, before[0])  # the caller's object is untouched
    np.testing.assert_array_equal(messy.data, before[1])


def test_explicit_zeros_are_not_interactions(problem):
    X_train, X_test, A, B = problem
    base = gpureco.calc_reco_metrics(X_train, X_test, A, B, k=5, all_metrics=True)
    zeros = X_train.tolil()
    zeros[0, int(np.flatnonzero(X_test.toarray()[0] == 0)[-1])] = 0  # lil drops zeros: add via coo
    coo = X_train.tocoo()
    stored_zero = sp.csr_array((np.r_[coo.data, 0.0], (np.r_[coo.row, 0], np.r_[coo.col, X_test.indices[0]])),
                               shape=X_train.shape)
    pd.testing.assert_frame_equal(gpureco.calc_reco_metrics(stored_zero, X_test, A, B, k=5, all_metrics=True), base)


def test_no_training_data(problem):
    _, X_test, A, B = problem
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        out = gpureco.calc_reco_metrics(None, X_test, A, B, k=5)
        assert np.isnan(gpureco.calc_reco_metrics(None, X_test, A, B, k=5, consider_cold_start=False)["P@5"]).all()
    assert out["P@5"].notna().sum() == (np.diff(X_test.indptr) > 0).sum()


def test_one_warning_counts_nan_users_by_reason(problem):
    X_train, X_test, A, B = problem
    A = A.copy()
    A[3, 0] = np.nan
    X_test = X_test.tolil()
    X_test[5, :] = 0
    X_test = sp.csr_array(X_test)
    with pytest.warns(RuntimeWarning) as record:
        df = gpureco.calc_reco_metrics(X_train, X_test, A, B, k=5)
    assert len(record) == 1
    message = str(record[0].message)
    assert "2 of 30 users have every metric NaN" in message
    assert "rule 1 (fewer test items than max(1, min_pos_test)): 1 user;" in message
    assert "rule 4 (a NaN or infinite score in the pool): 1 user." in message
    assert df.attrs["nan_reasons"] == {"rule 1": 1, "rule 4": 1}
    assert df.iloc[[3, 5]].isna().all().all() and df.drop(index=[3, 5]).notna().all().all()


def test_no_warning_when_every_user_is_evaluated(problem):
    X_train, X_test, A, B = problem
    assert (np.diff(X_test.indptr) > 0).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        df = gpureco.calc_reco_metrics(X_train, X_test, A, B, k=5)
    assert df.attrs["nan_reasons"] == {}


def test_seed_objects_and_noise_change_only_tied_rankings(rng):
    X_train, X_test, A, B = random_problem(rng, n_users=50, n_items=30, integer_factors=True)
    args = (sp.csr_array(X_train), sp.csr_array(X_test), A, B)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        a = gpureco.calc_reco_metrics(*args, k=5, break_ties_with_noise=True, seed=3)
        b = gpureco.calc_reco_metrics(*args, k=5, break_ties_with_noise=True, seed=np.random.default_rng(0))
        c = gpureco.calc_reco_metrics(*args, k=5, break_ties_with_noise=True, seed=3)
        d = gpureco.calc_reco_metrics(*args, k=5)
    pd.testing.assert_frame_equal(a, c)
    assert not a.equals(b) and not a.equals(d)


def test_import_does_not_need_cupy():
    code = ("import sys; sys.modules['cupy'] = None; import gpureco; "
            "assert 'cupy' not in {m for m in sys.modules if sys.modules[m] is not None}; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_docstring_example():
    import doctest
    import gpureco._recometrics
    import gpureco._top_k
    for module in (gpureco._recometrics, gpureco._top_k):
        failures, tried = doctest.testmod(module, verbose=False)
        assert tried > 0 and failures == 0, module.__name__


def test_demo_runs(capsys):
    from gpureco.cli import main
    assert main(["demo", "--users", "400", "--items", "150", "-k", "5", "--no-report"]) == 0
    out = capsys.readouterr().out
    assert "PureSVD" in out and "NDCG@5" in out


def test_rule_6_is_not_reported_when_only_ndcg_is_asked_for():
    X_train = sp.csr_array(np.array([[1.0, 0, 0]]))
    X_test = sp.csr_array(np.array([[0, 2.0, 1.0]]))
    args = (X_train, X_test, np.ones((1, 1)), np.array([[0.0], [2.0], [1.0]]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        df = gpureco.calc_reco_metrics(*args, k=2, ndcg=True, precision=False, average_precision=False)
    assert df["NDCG@2"].tolist() == [1.0] and df.attrs["nan_reasons"] == {}
    with pytest.warns(RuntimeWarning, match=r"rule 6 \(no negative items"):
        df = gpureco.calc_reco_metrics(*args, k=2)
    assert df.attrs["nan_reasons"] == {"rule 6": 1}


def test_zero_users_and_a_single_user(rng):
    empty = gpureco.calc_reco_metrics(sp.csr_array((0, 5)), sp.csr_array((0, 5)), np.zeros((0, 2)),
                                      rng.random((5, 2)), k=2, all_metrics=True)
    assert empty.shape == (0, 10)
    # one user: the one-row score block (padded to two rows for BLAS) ranks items 4, 1, 3, 2
    X_train = sp.csr_array(np.array([[1, 0, 0, 0, 0.0]]))
    X_test = sp.csr_array(np.array([[0, 1, 0, 0, 1.0]]))
    B = np.array([[9.0], [2.0], [-4.0], [-1.0], [3.0]])
    out = gpureco.calc_reco_metrics(X_train, X_test, np.ones((1, 1)), B, k=1, all_metrics=True)
    assert out.iloc[0].tolist() == [1.0, 1.0, 0.5, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]


def test_ndcg_does_not_overflow_with_huge_gains():
    X_test = sp.csr_array(np.array([[1e308, 0, 1e308, 0, 1e308, 0.0]]))
    B = np.array([[6.0], [5.0], [4.0], [3.0], [2.0], [1.0]])
    ndcg = gpureco.calc_reco_metrics(None, X_test, np.ones((1, 1)), B, k=3, as_df=False)["NDCG@K"][0]
    ideal = 1 + 1 / np.log2(3) + 1 / np.log2(4)
    assert ndcg == pytest.approx((1 + 1 / np.log2(4)) / ideal)
    exp = gpureco.calc_reco_metrics(None, X_test / 1e308 * 1000, np.ones((1, 1)), B, k=3, gain="exponential",
                                    as_df=False)["NDCG@K"][0]
    assert exp == pytest.approx(ndcg)


def test_float64_biases_are_not_rounded_to_float32():
    A, B = np.ones((1, 1), np.float32), np.ones((3, 1), np.float32)
    out = gpureco.calc_reco_metrics(None, sp.csr_array([[0, 0, 1.0]]), A, B, k=1,
                                    item_biases=np.array([0, 1, 1 + 1e-9]), all_metrics=True, as_df=False)
    assert out["P@K"][0] == 1.0 and out["ROC_AUC"][0] == 1.0


def test_users_without_any_test_entry():
    with pytest.warns(RuntimeWarning, match=r"rule 1 .*: 3 users"):
        df = gpureco.calc_reco_metrics(None, sp.csr_array((3, 5)), np.ones((3, 1)), np.arange(5.0)[:, None],
                                       k=2, all_metrics=True)
    assert df.shape == (3, 10) and df.isna().all().all()


# --- convention=, ties=, relevance_threshold=: evaluate's options, through evaluate's steps --------------------

TEN = ["P", "TP", "R", "AP", "TAP", "NDCG", "Hit", "RR", "ROC_AUC", "PR_AUC"]


@pytest.fixture
def tied_problem():
    """Integer factors and biases (many tied scores, every score exact), graded test values with
    halves (ranx's int(value) and a threshold both drop some), a user without training items."""
    rng = np.random.default_rng(7)
    X_train, X_test, A, B = random_problem(rng, n_users=60, n_items=40, integer_factors=True, test_density=0.2)
    X_test = X_test * (rng.integers(0, 4, X_test.shape) + 0.5)
    X_train[0] = 0
    return sp.csr_array(X_train), sp.csr_array(X_test), A, B, rng.integers(-1, 2, 40).astype(np.float64)


def _both(X_train, X_test, A, B, biases, k=5, device="cpu", metrics=TEN, **options):
    """calc_reco_metrics and evaluate (on the factor scores, exact here) with the same options, as dicts."""
    flags = {m.flag: m.column.removesuffix("@K") in metrics for m in METRICS}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        calc = gpureco.calc_reco_metrics(X_train, X_test, A, B, k=k, item_biases=biases, device=device,
                                         output="numpy", cumulative=True, **flags, **options)
        scores = (np.zeros((X_test.shape[0], 1)) if A is None else A @ B.T) + biases
        ev = gpureco.evaluate(scores, X_test, X_train, metrics=metrics, k=list(range(1, k + 1)), device=device,
                              output="numpy", **options)
    return calc, ev


def _assert_same(calc, ev, k=5):
    assert calc.pop("K") == k
    for name, values in calc.items():
        columns = ([column_name(name, i) for i in range(1, k + 1)]
                   if name.endswith("@K") else [name])
        np.testing.assert_array_equal(values.reshape(len(values), -1), np.stack([ev[c] for c in columns], axis=1),
                                      err_msg=name)


@pytest.mark.parametrize("device", BACKENDS)
@pytest.mark.parametrize("convention", list(CONVENTIONS))
def test_every_convention_gives_evaluates_numbers(convention, device, tied_problem):
    X_train, X_test, A, B, biases = tied_problem
    try:
        gpureco.evaluate(A @ B.T, X_test, X_train, metrics=TEN, device=device, convention=convention)
        metrics = TEN
    except ValueError as refused:  # a convention whose tie rule does not define AP: both refuse it alike
        with pytest.raises(ValueError) as also:
            gpureco.calc_reco_metrics(X_train, X_test, A, B, device=device, all_metrics=True, convention=convention)
        assert str(also.value) == str(refused)
        metrics = [m for m in TEN if m not in ("AP", "TAP")]
    calc, ev = _both(*tied_problem, device=device, metrics=metrics, convention=convention)
    _assert_same(calc, ev)


@pytest.mark.parametrize("device", BACKENDS)
@pytest.mark.parametrize("ties", TIES)
def test_every_tie_rule_gives_evaluates_numbers(ties, device, tied_problem):
    # AP and TAP left out: a tie rule may not define them (evaluate and calc_reco_metrics then both refuse them)
    metrics = [m for m in TEN if m not in ("AP", "TAP")]
    for convention in ("gpureco", "lenskit"):
        calc, ev = _both(*tied_problem, device=device, metrics=metrics, convention=convention, ties=ties)
        _assert_same(calc, ev)


@pytest.mark.parametrize("device", BACKENDS)
def test_ties_last_and_a_threshold_with_biases_alone(device, tied_problem):
    X_train, X_test, _, _, biases = tied_problem
    calc, ev = _both(X_train, X_test, None, None, biases, device=device, ties="last", relevance_threshold=1.5)
    _assert_same(calc, ev)
    first = gpureco.calc_reco_metrics(X_train, X_test, None, None, k=5, item_biases=biases, device=device)
    last = gpureco.calc_reco_metrics(X_train, X_test, None, None, k=5, item_biases=biases, device=device,
                                     ties="last")
    assert not first.equals(last)  # the tied biases rank the other way round


def test_a_threshold_keeps_the_values_at_or_above_it(tied_problem):
    X_train, X_test, A, B, biases = tied_problem
    kept = X_test.copy()
    kept.data[kept.data < 2.5] = 0
    kept.eliminate_zeros()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        a = gpureco.calc_reco_metrics(X_train, X_test, A, B, k=5, item_biases=biases, all_metrics=True,
                                      relevance_threshold=2.5)
        b = gpureco.calc_reco_metrics(X_train, kept, A, B, k=5, item_biases=biases, all_metrics=True)
    pd.testing.assert_frame_equal(a, b)


@pytest.mark.parametrize("options, error", [
    ({"convention": "trec"}, ValueError),
    ({"convention": None}, ValueError),
    ({"ties": "sideways"}, ValueError),
    ({"ties": 1}, ValueError),
    ({"relevance_threshold": "high"}, TypeError),
    ({"relevance_threshold": float("nan")}, TypeError),
    ({"convention": "recbole", "gain": "exponential"}, ValueError),
    ({"ties": "last", "break_ties_with_noise": True}, ValueError),
])
def test_bad_options_give_evaluates_error(options, error, tied_problem):
    X_train, X_test, A, B, _ = tied_problem
    with pytest.raises(error) as from_evaluate:
        gpureco.evaluate(A @ B.T, X_test, X_train, **options)
    name = next(n for n in ("convention", "ties", "relevance_threshold") if n in options)
    assert f"'{name}'" in str(from_evaluate.value) or f"{name}=" in str(from_evaluate.value)
    with pytest.raises(error) as from_calc:
        gpureco.calc_reco_metrics(X_train, X_test, A, B, **options)
    assert str(from_calc.value) == str(from_evaluate.value)
