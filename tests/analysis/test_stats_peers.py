"""What users of ranx, LensKit and RePlay expect from summarize and compare: the standard deviation
over n (ddof=0), RePlay's normal-quantile interval, ranx's win/tie/loss counts and Tukey's HSD;
against hand-worked numbers, SciPy, RePlay's documented values and ranx itself (live)."""
import math

import numpy as np
import pandas as pd
import pytest
import scipy.stats

import gpureco
from gpureco.analysis._stats import tukey_p_values

OLD_COLUMNS = ["model_a", "model_b", "metric", "n_users", "mean_a", "mean_b", "mean_diff", "ci_low", "ci_high",
               "p_ttest", "p_wilcoxon", "p_permutation", "p_ttest_holm", "p_wilcoxon_holm", "p_permutation_holm"]


# ---- summarize(ddof=) ------------------------------------------------------------------------

def test_ddof_hand_worked():
    # x = 1, 2, 3, 6: squared deviations 4 + 1 + 0 + 9 = 14; over n: 14/4, over n - 1: 14/3
    df = pd.DataFrame({"P@5": [1.0, 2.0, 3.0, 6.0, np.nan]})
    over_n = gpureco.summarize(df, ddof=0)
    assert over_n.loc["P@5", "std"] == pytest.approx(math.sqrt(14 / 4)) and over_n.attrs["ddof"] == 0
    default = gpureco.summarize(df)
    assert default.loc["P@5", "std"] == pytest.approx(math.sqrt(14 / 3)) and default.attrs["ddof"] == 1
    # only the std column changes: the interval always uses s (n - 1)
    pd.testing.assert_frame_equal(over_n.drop(columns="std"), default.drop(columns="std"))


def test_ddof_matches_numpy_and_edge_cases(rng):
    df = pd.DataFrame({"a": rng.random(50), "one": [np.nan] * 49 + [0.5], "none": [np.nan] * 50})
    for ddof in (0, 1):
        out = gpureco.summarize(df, ddof=ddof)
        assert out.loc["a", "std"] == pytest.approx(np.std(df["a"].to_numpy(), ddof=ddof), rel=1e-14)
        assert np.isnan(out.loc["none", "std"])
    assert gpureco.summarize(df, ddof=0).loc["one", "std"] == 0.0  # one value: 0 over n, NaN over n - 1
    assert np.isnan(gpureco.summarize(df, ddof=1).loc["one", "std"])
    by = gpureco.summarize(df.assign(g=[0, 1] * 25), by="g", ddof=0)
    assert by.loc[(0, "a"), "std"] == pytest.approx(np.std(df["a"].to_numpy()[::2]))


# ---- summarize(ci="normal") ------------------------------------------------------------------

def test_normal_interval_hand_worked():
    # x = 1, 2, 3, 6: mean 3, s = sqrt(14/3), z_0.975 = norm.ppf(0.975) = 1.959963984540054
    df = pd.DataFrame({"P@5": [1.0, 2.0, 3.0, 6.0]})
    out = gpureco.summarize(df, ci="normal")
    half = 1.959963984540054 * math.sqrt(14 / 3) / 2
    assert out.loc["P@5", "ci_low"] == pytest.approx(3 - half) and out.loc["P@5", "ci_high"] == pytest.approx(3 + half)
    assert out.attrs["ci"] == "normal"
    one = gpureco.summarize(pd.DataFrame({"m": [0.5, np.nan]}), ci="normal")
    assert np.isnan(one.loc["m", "ci_low"]) and np.isnan(one.loc["m", "ci_high"])


def test_normal_interval_matches_scipy(rng):
    x = rng.exponential(size=300)
    out = gpureco.summarize(pd.DataFrame({"RR@10": x}), ci="normal", confidence=0.9, ddof=0)
    low, high = scipy.stats.norm.interval(0.9, loc=x.mean(), scale=scipy.stats.sem(x))
    assert out.loc["RR@10", "ci_low"] == pytest.approx(low, rel=1e-13)
    assert out.loc["RR@10", "ci_high"] == pytest.approx(high, rel=1e-13)
    # narrower than the t interval, by the ratio of the quantiles
    t = gpureco.summarize(pd.DataFrame({"RR@10": x}), confidence=0.9)
    ratio = scipy.stats.norm.ppf(0.95) / scipy.stats.t.ppf(0.95, 299)
    assert (out.loc["RR@10", "ci_high"] - x.mean()) == pytest.approx(ratio * (t.loc["RR@10", "ci_high"] - x.mean()))


# RePlay v0.21.7, docstring examples of replay/metrics/{hitrate,map,mrr,ndcg,precision,recall,surprisal}.py:
# mode=PerUser() gives the per-user values, mode=ConfidenceInterval(alpha=0.95) the half-width
# norm.ppf((1 + alpha) / 2) * scipy.stats.sem(values) (replay/metrics/descriptors.py).
REPLAY_DOCSTRINGS = {
    "HitRate@2": ([1.0, 0.0, 1.0], 0.6533213281800181),
    "MAP@2": ([0.25, 0.0, 0.5], 0.282896433519043),
    "MRR@2": ([0.5, 0.0, 1.0], 0.565792867038086),
    "NDCG@2": ([0.38685280723454163, 0.0, 0.6131471927654584], 0.3508565839953337),
    "Precision@2": ([0.5, 0.0, 0.5], 0.32666066409000905),
    "Recall@2": ([0.16666666666666666, 0.0, 0.2], 0.12125130695058273),
    "Surprisal@2": ([1.0, 0.3690702464285426, 0.6845351232142713], 0.3569755541728279),
}


def test_normal_interval_matches_replay_documented_values():
    df = pd.DataFrame({name: values for name, (values, _) in REPLAY_DOCSTRINGS.items()}, index=[1, 2, 3])
    out = gpureco.summarize(df, ci="normal", confidence=0.95)
    for name, (_, half_width) in REPLAY_DOCSTRINGS.items():
        assert out.loc[name, "ci_high"] - out.loc[name, "mean"] == pytest.approx(half_width, rel=1e-12)
        assert out.loc[name, "mean"] - out.loc[name, "ci_low"] == pytest.approx(half_width, rel=1e-12)


# ---- compare: win / tie / loss ---------------------------------------------------------------

def test_win_tie_loss_hand_worked():
    a = pd.DataFrame({"P@2": [0.0, 0.5, 0.5, 0.0, np.nan], "R@2": [1.0, 0.5, 0.0, 0.0, 0.0]})
    b = pd.DataFrame({"P@2": [0.5, 0.5, 1.0, 0.0, 1.0], "R@2": [0.0, 0.5, 0.5, 0.0, 0.25]})
    out = gpureco.compare(a, b, names=["a", "b"]).set_index("metric")
    # P@2: user 4 is NaN in a, left out; b higher for users 0 and 2, equal for 1 and 3
    assert out.loc["P@2", ["wins_a", "ties", "wins_b", "n_users"]].tolist() == [0, 2, 2, 4]
    assert out.loc["R@2", ["wins_a", "ties", "wins_b", "n_users"]].tolist() == [1, 2, 2, 5]
    swapped = gpureco.compare(b, a, names=["b", "a"]).set_index("metric")
    assert swapped.loc["R@2", ["wins_a", "ties", "wins_b"]].tolist() == [2, 2, 1]


def test_compare_keeps_its_columns_and_adds_new_ones_last(rng):
    frames = [pd.DataFrame({"P@5": rng.random(30)}) for _ in range(3)]
    out = gpureco.compare(*frames, n_permutations=10)
    assert list(out.columns) == OLD_COLUMNS + ["wins_a", "ties", "wins_b"]
    assert (out["wins_a"] + out["ties"] + out["wins_b"] == out["n_users"]).all()
    assert out["wins_a"].dtype.kind == "i"
    with_tukey = gpureco.compare(*frames, n_permutations=10, tukey=True, correction=None)
    assert list(with_tukey.columns) == OLD_COLUMNS[:12] + ["wins_a", "ties", "wins_b", "p_tukey"]


# ---- compare(tukey=True) ---------------------------------------------------------------------

def test_tukey_matches_scipy(rng):
    frames = [pd.DataFrame({"P@5": rng.random(60) + shift, "NDCG@5": rng.random(60) * (1 + shift)})
              for shift in (0.0, 0.05, 0.3, 0.1)]
    frames[2].iloc[7, 0] = np.nan  # user 7 leaves every model's P@5 group
    out = gpureco.compare(*frames, names=list("abcd"), n_permutations=10, tukey=True)
    for metric in ("P@5", "NDCG@5"):
        groups = [f[metric].to_numpy() for f in frames]
        keep = ~np.isnan(np.column_stack(groups)).any(axis=1)
        want = scipy.stats.tukey_hsd(*(g[keep] for g in groups)).pvalue
        for row in out[out["metric"] == metric].itertuples():
            assert row.p_tukey == pytest.approx(want["abcd".index(row.model_a), "abcd".index(row.model_b)], rel=1e-12)
    assert "p_tukey_holm" not in out


def test_tukey_of_two_models_is_the_unpaired_t_test(rng):
    # with k = 2 the studentized range statistic is sqrt(2) |t| of the pooled two-sample t-test:
    # Tukey compares independent groups, unlike compare's paired tests
    x_a, x_b = rng.random(40), rng.random(40) + 0.1
    out = gpureco.compare(pd.DataFrame({"m": x_a}), pd.DataFrame({"m": x_b}), n_permutations=10, tukey=True)
    assert out.loc[0, "p_tukey"] == pytest.approx(scipy.stats.ttest_ind(x_a, x_b).pvalue, rel=1e-6)
    assert out.loc[0, "p_tukey"] != pytest.approx(out.loc[0, "p_ttest"], rel=1e-3)


def test_tukey_edge_cases():
    # every model constant: 1 for equal means, 0 for different ones (SciPy would divide by zero)
    np.testing.assert_array_equal(tukey_p_values(np.array([[1.0, 1.0, 2.0]] * 3)),
                                  [[1, 1, 0], [1, 1, 0], [0, 0, 1]])
    assert np.isnan(tukey_p_values(np.array([[1.0, 2.0]]))).all()  # one shared user
    a = pd.DataFrame({"m": [0.5, np.nan, 0.2]})
    out = gpureco.compare(a, pd.DataFrame({"m": [np.nan, 0.5, 0.1]}), tukey=True)
    assert np.isnan(out.loc[0, "p_tukey"]) and out.loc[0, "n_users"] == 1
    same = gpureco.compare(a, a.copy(), tukey=True)
    assert same.loc[0, "p_tukey"] == pytest.approx(1.0)


# ---- ranx, live ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ranx_runs():
    ranx = pytest.importorskip("ranx")
    rng = np.random.default_rng(7)
    n_queries, n_docs = 40, 12
    qrels = ranx.Qrels({f"q{q}": {f"d{i}": int(rng.integers(1, 3)) for i in rng.choice(n_docs, 3, replace=False)}
                        for q in range(n_queries)})
    runs = [ranx.Run({f"q{q}": {f"d{i}": float(s) for i, s in enumerate(rng.integers(0, 4 + r, n_docs))}
                      for q in range(n_queries)}, name=f"m{r}") for r in range(3)]
    metrics = ["ndcg@5", "precision@3", "hit_rate@2"]  # integer scores: many ties
    per_query = []
    for run in runs:
        scores = ranx.evaluate(qrels, run, metrics, return_mean=False)
        per_query.append(pd.DataFrame(scores, index=run.get_query_ids()))
    return ranx, qrels, runs, metrics, per_query


def test_win_tie_loss_and_tukey_match_ranx(ranx_runs):
    ranx, qrels, runs, metrics, per_query = ranx_runs
    names = [run.name for run in runs]
    ours = gpureco.compare(*per_query, names=names, n_permutations=10, tukey=True)
    report = ranx.compare(qrels, runs, metrics, stat_test="tukey")
    assert ours["ties"].sum() > 0
    for row in ours.itertuples():
        counts = report.win_tie_loss[(row.model_a, row.model_b)][row.metric]
        assert (row.wins_a, row.ties, row.wins_b) == (counts["W"], counts["T"], counts["L"])
        theirs = report.comparisons[frozenset([row.model_a, row.model_b])][row.metric]["p_value"]
        assert row.p_tukey == pytest.approx(theirs, rel=1e-12)


def test_std_over_n_matches_ranx(ranx_runs):
    ranx, qrels, runs, metrics, per_query = ranx_runs
    theirs = ranx.evaluate(qrels, runs[0], metrics, return_std=True)
    ours = gpureco.summarize(per_query[0], ddof=0)
    for metric in metrics:
        assert ours.loc[metric, "mean"] == pytest.approx(theirs[metric]["mean"], rel=1e-14)
        assert ours.loc[metric, "std"] == pytest.approx(theirs[metric]["std"], rel=1e-14)


# ---- errors ----------------------------------------------------------------------------------

A = pd.DataFrame({"P@5": [0.1, 0.2, 0.3]})
ERRORS = [
    (lambda: gpureco.summarize(A, ddof=2), ValueError, r"'ddof' must be an int in the range \[0, 1\]; got 2"),
    (lambda: gpureco.summarize(A, ddof=-1), ValueError, r"'ddof' must be an int in the range \[0, 1\]; got -1"),
    (lambda: gpureco.summarize(A, ddof="1"), TypeError, r"'ddof' must be an int; got '1' of type str"),
    (lambda: gpureco.summarize(A, ddof=True), TypeError, r"'ddof' must be an int; got True of type bool"),
    (lambda: gpureco.summarize(A, ci="z"), ValueError, r"'ci' must be one of 't', 'normal', 'bootstrap'; got 'z'"),
    (lambda: gpureco.compare(A, A, tukey="yes"), TypeError, r"'tukey' must be True or False; got 'yes' of type str"),
    (lambda: gpureco.compare(A, A, tukey=1), TypeError, r"'tukey' must be True or False; got 1 of type int"),
]


@pytest.mark.parametrize("call,error,message", ERRORS, ids=[c[2][:40] for c in ERRORS])
def test_peer_options_reject(call, error, message):
    with pytest.raises(error, match=message):
        call()
