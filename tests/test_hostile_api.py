"""Hostile and extreme input to the public Python API (the cases: tests/hostile_api_cases.py),
and properties: layout and dtype changes give bit-identical results, garbage gives the clean
answer or a TypeError/ValueError naming the parameter."""
import pathlib

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

import gpureco
import hostile_api_cases as cases

PAGE = pathlib.Path(__file__).parents[1] / "docs" / "robustness-api.md"


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=[pytest.mark.xfail(strict=True, reason=c.known_failure)]
                                               if c.known_failure else []) for c in cases.CASES])
def test_case(case):
    cases.check(case)


def test_every_public_function_with_arrays_or_frames_has_cases():
    covered = {c.function.split(" ")[0].split(".")[-1] for c in cases.CASES}
    expected = {"calc_reco_metrics", "evaluate", "top_k", "evaluate_lists", "beyond_accuracy", "summarize", "compare",
                "to_markdown", "split_reco_train_test", "split_leave_k_out", "split_last_per_user",
                "split_time_cutoff", "split_k_fold_users", "to_csr", "from_csr", "make_interactions"}
    assert expected <= covered, expected - covered
    assert {c.outcome for c in cases.CASES} == {"answer", "error", "warning"}


def test_the_check_can_fail():
    wrong = cases.Case("calc_reco_metrics", "A scaled", lambda: cases.calc(A=-cases.A0), "answer",
                       lambda: cases.calc())
    with pytest.raises(AssertionError):
        cases.check(wrong)
    misnamed = cases.Case("calc_reco_metrics", "k=0", lambda: cases.calc(k=0), "error", r"'A' must")
    with pytest.raises(AssertionError):
        cases.check(misnamed)


def test_the_page_is_current():
    assert PAGE.read_text() == cases.page(), "run: python tests/hostile_api_cases.py > docs/robustness-api.md"


# --- properties ----------------------------------------------------------------------------------
def _layout(x, kind):
    if kind == "readonly":
        return cases._readonly(x)
    if kind == "noncontiguous":
        return cases._noncontiguous(x)
    if kind == "fortran":
        return np.asfortranarray(x)
    if kind == "bigendian":
        return x.astype(">f8")
    if kind == "list":
        return x.tolist()
    return x.astype(kind)


LAYOUT_KINDS = st.sampled_from(["readonly", "noncontiguous", "fortran", "bigendian", "list", "float16", "float32",
                                "int8", "int16", "int32", "int64"])
SPARSE_KINDS = st.sampled_from([sp.csr_matrix, sp.csc_array, sp.coo_array, sp.lil_array, sp.dok_array, sp.bsr_array,
                                cases._unsorted, cases._duplicated, cases._explicit_zeros, cases._int64_indices,
                                cases._int32_indptr, np.asarray])
CLEAN_CALC = cases.calc()
CLEAN_EVALUATE = cases.evaluate()


@settings(max_examples=25, deadline=None)
@given(a=LAYOUT_KINDS, b=LAYOUT_KINDS, test=SPARSE_KINDS, train=SPARSE_KINDS)
def test_layouts_and_dtypes_give_bit_identical_metrics(a, b, test, train):
    result = cases.calc_raw(train(cases.XTR0), test(cases.XTE0), _layout(cases.A0, a), _layout(cases.B0, b))
    cases.assert_same(result, CLEAN_CALC)


@settings(max_examples=15, deadline=None)
@given(kind=LAYOUT_KINDS, test=SPARSE_KINDS)
def test_layouts_of_scores_give_bit_identical_metrics(kind, test):
    cases.assert_same(cases.evaluate(_layout(cases.SCORES0, kind), X_test=test(cases.XTE0)), CLEAN_EVALUATE)


GARBAGE = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=64), st.integers(-2**70, 2**70),
                    st.text(max_size=3), st.none(), st.booleans(), st.complex_numbers(max_magnitude=1e3))


@settings(max_examples=60, deadline=None)
@given(where=st.sampled_from(["A", "B", "X_test", "X_train"]), row=st.integers(0, 4), col=st.integers(0, 1),
       value=GARBAGE)
def test_one_garbage_value_gives_the_answer_or_a_named_error(where, row, col, value):
    """A value put into a valid input: the documented result (a NaN score is rule 4) or a
    TypeError/ValueError naming the parameter; never another exception."""
    arrays = {"A": cases.A0, "B": cases.B0, "X_test": cases.XTE0, "X_train": cases.XTR0}
    hostile = np.array(arrays[where], dtype=object)
    hostile[row, col] = value
    try:
        hostile = hostile.astype(np.float64)
    except (TypeError, ValueError, OverflowError):
        pass  # stays an object array: must be refused
    kwargs = {name: hostile if name == where else arrays[name] for name in arrays}
    try:
        with np.errstate(all="raise"):  # no NumPy warning may come from gpureco's own arithmetic either
            cases._run(lambda: cases.calc_raw(**kwargs))
    except (TypeError, ValueError) as error:
        assert f"'{where}'" in str(error) or ("'X_train'" in str(error) and "'X_test'" in str(error)), str(error)


@settings(max_examples=40, deadline=None)
@given(column=st.sampled_from(["user", "item", "rank"]), row=st.integers(0, 5), value=GARBAGE)
def test_one_garbage_value_in_recs_gives_an_answer_or_a_named_error(column, row, value):
    recs = cases.RECS0.astype({column: object})
    recs.loc[row, column] = value
    try:
        cases.lists(recs)
    except (TypeError, ValueError) as error:
        assert "'recs'" in str(error), str(error)


def test_group_by_nan_is_documented():
    assert "dropna=False" in gpureco.evaluate_lists.__doc__
