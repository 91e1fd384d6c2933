"""One set of conventions across the front doors (docs/conventions.md): the same output choices,
the same gain option, k=10 by default (recometrics' 5 only in calc_reco_metrics), and results
indexed by the caller's user ids."""
import inspect
import warnings

import numpy as np
import pandas as pd
import pytest

import gpureco
from conftest import random_problem, to_csr
from gpureco.engine._registry import GAINS
from reference import defined_scores

FRONT_DOORS = [gpureco.calc_reco_metrics, gpureco.evaluate, gpureco.Evaluator, gpureco.top_k, gpureco.evaluate_lists]


def quiet(fn, *args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return fn(*args, **kw)


def test_defaults_and_options_are_shared():
    params = {fn.__name__: inspect.signature(fn).parameters for fn in FRONT_DOORS}
    assert params["calc_reco_metrics"]["k"].default == 5  # recometrics' default, kept there only
    for name in ("evaluate", "Evaluator", "evaluate_lists"):
        assert params[name]["k"].default == 10, name
        assert params[name]["metrics"].default == ("P", "AP", "NDCG"), name
        assert params[name]["output"].default == "pandas", name
    for name in ("calc_reco_metrics", "evaluate", "Evaluator", "evaluate_lists"):
        assert params[name]["gain"].default is None, name  # the convention's: "linear" for gpureco's
    for name in ("calc_reco_metrics", "evaluate", "Evaluator", "top_k"):
        assert params[name]["user_ids"].default is None, name
        assert params[name]["device"].default == "auto", name
    assert GAINS == ("linear", "exponential", "binary")


@pytest.fixture
def data():
    rng = np.random.default_rng(4)
    X_train, X_test, A, B = random_problem(rng, n_users=25, n_items=40, graded=True)
    return to_csr(X_train), to_csr(X_test), A, B


def outputs(fn, *args, **kw):
    return {output: quiet(fn, *args, output=output, **kw) for output in ("pandas", "numpy", "torch")}


def test_every_output_choice_gives_the_same_numbers(data):
    pytest.importorskip("torch")
    X_train, X_test, A, B = data
    scores = defined_scores(A, B)
    ids = [f"user{i}" for i in range(25)]
    results = {
        "calc_reco_metrics": outputs(gpureco.calc_reco_metrics, X_train, X_test, A, B, device="cpu", user_ids=ids),
        "evaluate": outputs(gpureco.evaluate, scores, X_test, X_train, device="cpu", user_ids=ids),
        "Evaluator": {output: gpureco.Evaluator(X_test, X_train, device="cpu", output=output, user_ids=ids)(A, B)
                      for output in ("pandas", "numpy", "torch")},
    }
    for name, got in results.items():
        frame = got["pandas"]
        assert list(frame.index) == ids and frame.index.name == "user", name
        for column in frame.columns:
            key = column.replace("@5", "@K") if name == "calc_reco_metrics" else column  # recometrics' dict keys
            np.testing.assert_array_equal(got["numpy"][key], frame[column].to_numpy(), err_msg=name)
            np.testing.assert_array_equal(got["torch"][key].numpy(), frame[column].to_numpy(), err_msg=name)
    items = outputs(gpureco.top_k, A, B, 3, X_train=X_train, device="cpu", user_ids=ids)
    np.testing.assert_array_equal(items["torch"][0].numpy(), items["numpy"][0])
    long = items["pandas"]
    assert list(long.columns) == ["user", "item", "rank", "score"]
    np.testing.assert_array_equal(long["item"].to_numpy().reshape(25, 3), items["numpy"][0])
    assert long["user"].iloc[0] == "user0" and long["rank"].tolist()[:3] == [1, 2, 3]
    # top_k's long frame is evaluate_lists' input: the lists' metrics are the factor model's
    truth = gpureco.from_csr(X_test).assign(user=lambda f: np.asarray(ids)[f["user"]])
    lists = quiet(gpureco.evaluate_lists, long.drop(columns="score"), truth.rename(columns={"value": "rating"}),
                  metrics=["P@3", "NDCG@3"])
    want = quiet(gpureco.evaluate, scores, X_test, X_train, metrics=["P@3", "NDCG@3"], device="cpu", user_ids=ids)
    np.testing.assert_allclose(lists.to_numpy(), want.loc[lists.index].to_numpy(), rtol=0, atol=1e-15)
    as_numpy = quiet(gpureco.evaluate_lists, long.drop(columns="rank"), truth.rename(columns={"value": "rating"}),
                     metrics=["P@3", "NDCG@3"], output="numpy")
    np.testing.assert_array_equal(as_numpy["P@3"], lists["P@3"].to_numpy())  # ranked by score: the same lists
    assert list(as_numpy["user"]) == list(lists.index)


@pytest.mark.parametrize("gain", GAINS)
def test_the_gain_option_means_the_same_everywhere(gain, data):
    X_train, X_test, A, B = data
    want = quiet(gpureco.calc_reco_metrics, X_train, X_test, A, B, k=5, gain=gain, device="cpu",
                 precision=False, average_precision=False)["NDCG@5"]
    for got in (quiet(gpureco.evaluate, defined_scores(A, B), X_test, X_train, metrics="NDCG@5", gain=gain,
                      device="cpu")["NDCG@5"],
                gpureco.Evaluator(X_test, X_train, metrics="NDCG@5", gain=gain, device="cpu")(A, B)["NDCG@5"]):
        np.testing.assert_array_equal(got.to_numpy(), want.to_numpy())
    linear = quiet(gpureco.calc_reco_metrics, X_train, X_test, A, B, device="cpu")["NDCG@5"]
    if gain != "linear":  # graded test values: another gain rule gives other numbers
        assert not np.allclose(linear.fillna(0), want.fillna(0))


def test_output_choices_are_checked_alike(data):
    X_train, X_test, A, B = data
    calls = [lambda output: gpureco.calc_reco_metrics(X_train, X_test, A, B, device="cpu", output=output),
             lambda output: gpureco.evaluate(defined_scores(A, B), X_test, X_train, device="cpu", output=output),
             lambda output: gpureco.Evaluator(X_test, X_train, device="cpu", output=output),
             lambda output: gpureco.top_k(A, B, 2, device="cpu", output=output),
             lambda output: gpureco.evaluate_lists(pd.DataFrame({"user": [0], "item": [1], "rank": [1]}),
                                                   pd.DataFrame({"user": [0], "item": [1]}), output=output)]
    for call in calls:
        with pytest.raises(ValueError, match="'output' must be one of 'pandas', 'numpy', 'cupy', 'torch'; got 'arrow'"):
            quiet(call, "arrow")
        with pytest.raises(Exception, match="output='cupy' needs the GPU backend|no GPU"):
            quiet(call, "cupy")


def test_ranx_rbp_is_weighted_by_the_relevance_value_and_refused_with_another_gain():
    """ranx's RBP weights a hit by its relevance (int(value)): gpureco's with the convention's own gain; with
    another gain (NDCG's 2**v - 1, or 1) no ranx function gives that RBP, so it is refused, in every front door
    that computes RBP; NDCG alone takes the gain."""
    scores = np.array([[0.9, 0.8, 0.7, 0.6, 0.5]])
    X_test = to_csr(np.array([[2.0, 0, 3.0, 0, 0]]))
    got = gpureco.evaluate(scores, X_test, metrics=["RBP@3"], convention="ranx", device="cpu")["RBP@3"].iloc[0]
    assert got == pytest.approx(0.2 * (2 * 1 + 3 * 0.8 ** 2))  # (1 - p) sum of rel p^(i-1), p = 0.8
    recs = pd.DataFrame({"user": [0] * 3, "item": [0, 1, 2], "rank": [1, 2, 3]})
    truth = pd.DataFrame({"user": [0, 0], "item": [0, 2], "rating": [2.0, 3.0]})
    for gain in ("exponential", "binary"):
        for call in (lambda: gpureco.evaluate(scores, X_test, metrics=["RBP@3", "NDCG@3"], convention="ranx",
                                              gain=gain, device="cpu"),
                     lambda: gpureco.Evaluator(X_test, metrics=["RBP"], k=3, convention="ranx", gain=gain, device="cpu"),
                     lambda: gpureco.evaluate_lists(recs, truth, ["RBP@3"], convention="ranx", gain=gain)):
            with pytest.raises(ValueError, match=rf"convention='ranx' weights each hit of RBP by its relevance value.*"
                                                 rf"got gain='{gain}'"):
                call()
        gpureco.evaluate(scores, X_test, metrics=["NDCG@3"], convention="ranx", gain=gain, device="cpu")  # NDCG: yes
