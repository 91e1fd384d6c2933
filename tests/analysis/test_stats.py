"""summarize, compare, holm, to_markdown: against SciPy, slow references and hand-worked numbers."""
import doctest
import itertools
import math

import numpy as np
import pandas as pd
import pytest
import scipy.stats

import gpureco
import gpureco.analysis._stats
from gpureco.analysis._stats import holm, sign_flip_p_value


def test_docstring_examples():
    failures, tried = doctest.testmod(gpureco.analysis._stats, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert tried > 0 and failures == 0


# ---- summarize -------------------------------------------------------------------------------

def test_summarize_hand_worked():
    # x = 1, 2, 3, 6: mean 3, s^2 = (4 + 1 + 0 + 9) / 3 = 14/3, t_{0.975, 3} = 3.182446305284263
    df = pd.DataFrame({"P@5": [1.0, 2.0, 3.0, 6.0, np.nan]}, index=[10, 11, 12, 13, 14])
    df.attrs["nan_reasons"] = {"rule 1": 1}
    out = gpureco.summarize(df)
    row = out.loc["P@5"]
    half = 3.182446305284263 * math.sqrt(14 / 3) / 2
    assert row["mean"] == 3.0 and row["median"] == 2.5 and row["n_users"] == 4 and row["n_nan"] == 1
    assert row["std"] == pytest.approx(math.sqrt(14 / 3))
    assert row["ci_low"] == pytest.approx(3 - half) and row["ci_high"] == pytest.approx(3 + half)
    assert out.attrs["nan_reasons"] == {"rule 1": 1} and out.attrs["ci"] == "t"
    assert list(out.columns) == ["mean", "std", "median", "ci_low", "ci_high", "n_users", "n_nan"]


def test_summarize_t_matches_scipy(rng):
    x = rng.random(200)
    df = pd.DataFrame({"NDCG@10": x, "AP@10": x ** 2})
    out = gpureco.summarize(df, confidence=0.9)
    for column in df:
        ci = scipy.stats.ttest_1samp(df[column], 0.0).confidence_interval(0.9)
        assert out.loc[column, "ci_low"] == pytest.approx(ci.low)
        assert out.loc[column, "ci_high"] == pytest.approx(ci.high)
        assert out.loc[column, "std"] == pytest.approx(np.std(df[column], ddof=1))


def reference_bootstrap(x, confidence, n_resamples, seed):
    """One resample at a time, from the same generator stream."""
    rng = np.random.default_rng(seed)
    means = [x[rng.integers(0, x.size, size=x.size)].mean() for _ in range(n_resamples)]
    return np.quantile(means, [(1 - confidence) / 2, (1 + confidence) / 2])


def test_summarize_bootstrap(rng):
    x = rng.exponential(size=60)
    df = pd.DataFrame({"RR@10": x})
    out = gpureco.summarize(df, ci="bootstrap", n_resamples=500, seed=3)
    np.testing.assert_allclose(out.loc["RR@10", ["ci_low", "ci_high"]].to_numpy(float),
                               reference_bootstrap(x, 0.95, 500, 3))
    again = gpureco.summarize(df, ci="bootstrap", n_resamples=500, seed=3)
    other = gpureco.summarize(df, ci="bootstrap", n_resamples=500, seed=4)
    assert again.equals(out) and not other.equals(out)
    # close to the t interval for a mean of 60 values
    t = gpureco.summarize(df)
    assert abs(out.loc["RR@10", "ci_low"] - t.loc["RR@10", "ci_low"]) < 0.1


def test_summarize_bootstrap_covers_large_n(rng):
    x = rng.random(3000)  # resampled in several chunks
    out = gpureco.summarize(pd.DataFrame({"m": x}), ci="bootstrap", n_resamples=2000, seed=0)
    assert out.loc["m", "ci_low"] < x.mean() < out.loc["m", "ci_high"]


def test_summarize_edge_cases():
    df = pd.DataFrame({"one": [np.nan, 0.5, np.nan], "none": [np.nan] * 3})
    out = gpureco.summarize(df)
    assert out.loc["one", "mean"] == 0.5 and np.isnan(out.loc["one", "std"]) and np.isnan(out.loc["one", "ci_low"])
    assert out.loc["none"].drop(["n_users", "n_nan"]).isna().all() and out.loc["none", "n_nan"] == 3
    boot = gpureco.summarize(df, ci="bootstrap", n_resamples=10)
    assert boot.loc["one", "ci_low"] == boot.loc["one", "ci_high"] == 0.5


def test_summarize_values_whose_sum_overflows():
    """Finite values near the largest float: their sum and squares overflow, their statistics do
    not (computed on the values times a power of two); small values are not scaled at all."""
    big = 1e308
    out = gpureco.summarize(pd.DataFrame({"a": [big, big, -big], "b": [big / 8, 0.0, big / 8]}), ci="bootstrap")
    assert out.loc["a", "mean"] == pytest.approx(big / 3, rel=1e-15)
    assert out.loc["a", "std"] == pytest.approx(big * np.sqrt(4 / 3), rel=1e-15)  # deviations 2/3, 2/3, -4/3
    assert (out.loc["a", "median"], out.loc["a", "ci_low"], out.loc["a", "ci_high"]) == (big, -big, big)
    assert out.loc["b", "mean"] == pytest.approx(big / 12, rel=1e-15)
    t = gpureco.summarize(pd.DataFrame({"a": [big, big, -big]}))  # the t interval reaches past the largest float
    assert t.loc["a", "ci_low"] == -np.inf and t.loc["a", "ci_high"] == np.inf
    assert t.loc["a", "mean"] == out.loc["a", "mean"]
    small = gpureco.summarize(pd.DataFrame({"a": [1e-200] * 3 + [1e200]}))  # the median is not scaled
    assert small.loc["a", "median"] == 1e-200


def test_summarize_by_group():
    df = pd.DataFrame({"algorithm": ["a", "a", "b", "b"], "P@1": [0.0, 1.0, 1.0, 1.0]})
    out = gpureco.summarize(df, by="algorithm")
    assert out.index.names == ["algorithm", "metric"]
    assert out.loc[("a", "P@1"), "mean"] == 0.5 and out.loc[("b", "P@1"), "mean"] == 1.0


# ---- compare ---------------------------------------------------------------------------------

def three_models(rng, n=80):
    a = rng.random(n)
    frames = [pd.DataFrame({"P@5": a + shift + 0.1 * rng.standard_normal(n), "NDCG@5": a * (1 + shift)})
              for shift in (0.0, 0.02, 0.3)]
    frames[1].iloc[3, 0] = np.nan
    return frames


def test_compare_matches_scipy(rng):
    frames = three_models(rng)
    out = gpureco.compare(*frames, names=["a", "b", "c"], n_permutations=2000)
    assert list(out[["model_a", "model_b"]].drop_duplicates().itertuples(index=False, name=None)) == [
        ("a", "b"), ("a", "c"), ("b", "c")]
    assert len(out) == 6
    for row in out.itertuples():
        x_a = frames["abc".index(row.model_a)][row.metric].to_numpy()
        x_b = frames["abc".index(row.model_b)][row.metric].to_numpy()
        both = ~np.isnan(x_a) & ~np.isnan(x_b)
        x_a, x_b = x_a[both], x_b[both]
        assert row.n_users == both.sum()
        t = scipy.stats.ttest_rel(x_b, x_a)
        ci = t.confidence_interval(0.95)
        assert row.mean_diff == pytest.approx((x_b - x_a).mean())
        assert row.mean_a == pytest.approx(x_a.mean()) and row.mean_b == pytest.approx(x_b.mean())
        assert row.ci_low == pytest.approx(ci.low) and row.ci_high == pytest.approx(ci.high)
        assert row.p_ttest == pytest.approx(t.pvalue)
        assert row.p_wilcoxon == pytest.approx(scipy.stats.wilcoxon(x_b - x_a).pvalue)
    # users with NaN in either model are left out of that pair only
    assert out.set_index(["model_a", "model_b", "metric"]).loc[("a", "b", "P@5"), "n_users"] == 79
    assert out.set_index(["model_a", "model_b", "metric"]).loc[("a", "c", "P@5"), "n_users"] == 80


def test_compare_holm_per_pair(rng):
    out = gpureco.compare(*three_models(rng), n_permutations=500)
    for _, group in out.groupby(["model_a", "model_b"]):
        for p in ("p_ttest", "p_wilcoxon", "p_permutation"):
            np.testing.assert_allclose(group[p + "_holm"], reference_holm(group[p].to_numpy()))
    assert "p_ttest_holm" not in gpureco.compare(*three_models(rng), n_permutations=10, correction=None)


def reference_holm(p):
    """Holm from its definition: reject in order while p_(i) <= alpha / (m - i + 1); the adjusted
    p-value is the smallest alpha at which the hypothesis is rejected."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    out = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def test_holm_hand_worked():
    # sorted 0.01, 0.02, 0.04 with m = 3: 0.03, max(0.03, 0.04) = 0.04, max(0.04, 0.04) = 0.04
    np.testing.assert_allclose(holm([0.04, 0.01, 0.02]), [0.04, 0.03, 0.04])
    np.testing.assert_allclose(holm([0.5, np.nan, 0.01]), [0.5, np.nan, 0.02])  # NaN is not counted
    np.testing.assert_allclose(holm([0.6, 0.3]), [0.6, 0.6])


def reference_sign_flip(d):
    """Every sign vector, one at a time."""
    observed = abs(sum(d))
    hits = sum(abs(sum(s * x for s, x in zip(signs, d))) >= observed - 1e-12
               for signs in itertools.product((1, -1), repeat=len(d)))
    return hits / 2 ** len(d)


def test_permutation_exact_hand_worked():
    # d = 1, 2, 3: sums over the 8 sign vectors are +-6, +-4, +-2, +-0 -> |sum| >= 6 in 2 of 8
    assert sign_flip_p_value(np.array([1.0, 2.0, 3.0]), 10_000, 0) == 0.25
    # d = 1, 1, -1, 1: |sum| >= 2 when at most one sign differs from d's or from -d's: 10 of 16
    assert sign_flip_p_value(np.array([1.0, 1.0, -1.0, 1.0]), 10_000, 0) == 10 / 16


def test_permutation_exact_and_random(rng):
    d = rng.standard_normal(10) + 0.3
    assert sign_flip_p_value(d, 2**10, 0) == pytest.approx(reference_sign_flip(d))
    # random sign vectors estimate the exact p-value
    random_p = sign_flip_p_value(d, 1000, 0)
    assert random_p != sign_flip_p_value(d, 1000, 1)
    assert random_p == sign_flip_p_value(d, 1000, 0)
    assert abs(random_p - reference_sign_flip(d)) < 0.05


def test_compare_known_cases(rng):
    a = pd.DataFrame({"P@5": rng.random(300)})
    shifted = gpureco.compare(a, a + 0.05 + 0.01 * rng.standard_normal((300, 1)), n_permutations=1000)
    assert shifted.loc[0, "p_permutation"] == pytest.approx(1 / 1001)  # no random sign vector is as extreme
    assert shifted.loc[0, "p_ttest"] < 1e-10 and shifted.loc[0, "p_wilcoxon"] < 1e-10
    noise = gpureco.compare(a, pd.DataFrame({"P@5": rng.permutation(a["P@5"].to_numpy())}), n_permutations=1000)
    assert noise.loc[0, ["p_ttest", "p_wilcoxon", "p_permutation"]].astype(float).min() > 0.01
    same = gpureco.compare(a, a.copy())
    assert same.loc[0, ["p_ttest", "p_wilcoxon", "p_permutation"]].tolist() == [1.0, 1.0, 1.0]
    assert same.loc[0, "ci_low"] == same.loc[0, "ci_high"] == 0.0
    tiny = gpureco.compare(a.iloc[:1], a.iloc[:1] + 1.0)
    assert tiny.loc[0, "mean_diff"] == 1.0 and tiny.loc[0, ["ci_low", "p_ttest", "p_permutation"]].isna().all()


def test_compare_aligns_user_order(rng):
    a = pd.DataFrame({"P@5": rng.random(20)}, index=np.arange(20) * 3)
    b = pd.DataFrame({"P@5": rng.random(20)}, index=np.arange(20) * 3)
    shuffled = b.sample(frac=1.0, random_state=0)
    cols = ["mean_diff", "p_ttest", "p_wilcoxon", "p_permutation"]
    pd.testing.assert_frame_equal(gpureco.compare(a, b)[cols], gpureco.compare(a, shuffled)[cols])


# ---- to_markdown -----------------------------------------------------------------------------

def test_to_markdown_summary():
    out = gpureco.summarize(pd.DataFrame({"P@5": [1.0, 2.0, 3.0, 6.0], "R|x": [0.0, 0.0, np.nan, 0.0]}))
    text = gpureco.to_markdown(out, digits=3)
    lines = text.splitlines()
    assert lines[0] == "| metric | mean | std | median | ci_low | ci_high | n_users | n_nan |"
    assert lines[1] == "|:---|---:|---:|---:|---:|---:|---:|---:|"
    assert lines[2] == "| P@5 | 3 | 2.16 | 2.5 | -0.437 | 6.44 | 4 | 0 |"
    assert lines[3] == "| R\\|x | 0 | 0 | 0 | 0 | 0 | 3 | 1 |"


def test_to_markdown_compare_has_nan():
    a = pd.DataFrame({"P@5": [0.5]})
    text = gpureco.to_markdown(gpureco.compare(a, a + 0.25, names=["x", "y"]))
    assert text.splitlines()[2].startswith("| x | y | P@5 | 1 | 0.5 | 0.75 | 0.25 | NaN | NaN |")


# ---- errors ----------------------------------------------------------------------------------

A = pd.DataFrame({"P@5": [0.1, 0.2, 0.3]}, index=[1, 2, 3])
ERRORS = [
    (lambda: gpureco.compare(A, A.iloc[:2]), ValueError,
     r"'per_user' \(argument 1 of compare\) and 'per_user' \(argument 2 of compare\) must index the same users .*1 "
     r"users are only in argument 1 and 0 only in argument 2, for example 3"),
    (lambda: gpureco.compare(A, A.set_axis([1, 2, 4])), ValueError, r"for example 3"),
    (lambda: gpureco.compare(A, pd.concat([A, A.iloc[:1]])), ValueError, r"'per_user' \(argument 2 of compare\) must have one row per user; its index repeats 1"),
    (lambda: gpureco.compare(A), ValueError, r"compare needs the per-user frames of at least 2 models; got 1"),
    (lambda: gpureco.compare(A, A, names=["a"]), ValueError, r"'names' must hold 2 distinct names"),
    (lambda: gpureco.compare(A, A, names=["a", "a"]), ValueError, r"'names' must hold 2 distinct names"),
    (lambda: gpureco.compare(A, A.rename(columns={"P@5": "R@5"})), ValueError, r"The per-user frames share no metric column"),
    (lambda: gpureco.compare(A, A, confidence=1.0), ValueError, r"'confidence' must be a float in the open interval \(0, 1\); got 1.0"),
    (lambda: gpureco.compare(A, A, correction="bonferroni"), ValueError, r"'correction' must be one of 'holm'; got 'bonferroni'"),
    (lambda: gpureco.compare(A, A, n_permutations=0), ValueError, r"'n_permutations' must be an int in the range \[1, inf\]"),
    (lambda: gpureco.compare(A, [1, 2]), TypeError, r"'per_user' \(argument 2 of compare\) must be a DataFrame of per-user metrics \(pandas, or polars\); got list"),
    (lambda: gpureco.summarize(A, confidence=0), ValueError, r"'confidence' must be a float in the open interval \(0, 1\); got 0"),
    (lambda: gpureco.summarize(A, confidence="95%"), TypeError, r"'confidence' must be a float in \(0, 1\); got '95%'"),
    (lambda: gpureco.summarize(A, ci="bca"), ValueError, r"'ci' must be one of 't', 'normal', 'bootstrap'; got 'bca'"),
    (lambda: gpureco.summarize(A, n_resamples=0), ValueError, r"'n_resamples' must be an int in the range \[1, inf\]"),
    (lambda: gpureco.summarize(A.assign(algo="x")), TypeError,
     r"'per_user' column 'algo' must hold numbers \(a metric\); got dtype (object|str)"),
    (lambda: gpureco.to_markdown(A, digits=0), ValueError, r"'digits' must be an int in the range \[1, inf\]; got 0"),
    (lambda: gpureco.to_markdown("table"), TypeError, r"'df' must be a pandas DataFrame; got str"),
]


@pytest.mark.parametrize("call,error,message", ERRORS, ids=[c[2][:40] for c in ERRORS])
def test_stats_reject(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_summarize_by_keeps_a_run_whose_key_is_nan():
    """A NaN key is a run of its own (as evaluate_lists(group_by=...) keeps it), not dropped by pandas' groupby."""
    df = pd.DataFrame({"algo": ["a", "a", np.nan, np.nan, "b"], "NDCG@10": [0.1, 0.2, 0.3, 0.5, 0.4]})
    out = gpureco.summarize(df, by="algo")
    assert out["n_users"].sum() == 5
    nan_run = out[out.index.get_level_values("algo").isna()]
    assert nan_run["mean"].tolist() == [pytest.approx(0.4)] and nan_run["n_users"].tolist() == [2]
    for by in (["algo"], ["algo", "fold"]):  # (a list of keys: pd.concat's keys could not hold NaN)
        out = gpureco.summarize(df.assign(fold=[1, 2, 1, 1, 1]) if "fold" in by else df, by=by)
        assert out["n_users"].sum() == 5 and out.index.get_level_values("algo").isna().sum() == 1  # one NaN run
