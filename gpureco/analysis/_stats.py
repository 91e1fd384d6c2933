"""Statistics of per-user metrics: summaries with confidence intervals, paired model comparisons,
and a Markdown rendering of either table."""
from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import scipy.stats

from .. import _validation as v

_CHUNK = 2**22  # random draws held at once by the bootstrap and the permutation test
_P_VALUES = ("p_ttest", "p_wilcoxon", "p_permutation")


# a per-user frame holds metrics in its columns and identifiers in its index
METRIC = dict(what=" (a metric)", hint=" Put identifiers in the index (or pass them as 'by' to summarize).")


def summarize(per_user, *, confidence=0.95, ci="t", n_resamples=10_000, seed=0, by=None, ddof=1):
    r"""Mean, spread and confidence interval of every metric over the users.

    For each column of ``per_user`` with the :math:`n` non-NaN values :math:`x_1, \dots, x_n`:

    .. math::
        \bar x = \tfrac1n \sum_u x_u,\qquad s = \sqrt{\tfrac{1}{n-1}\sum_u (x_u - \bar x)^2},\qquad
        \text{CI}_t = \bar x \pm t_{(1+c)/2,\ n-1}\, s / \sqrt n

    with :math:`c` = ``confidence`` and :math:`t_{q,\nu}` the Student-t quantile. With
    ``ci="normal"`` the quantile is the normal one, as RePlay's ``ConfidenceInterval`` metric
    mode computes it (``norm.ppf((1 + alpha) / 2) * scipy.stats.sem(x)``, the same sample
    :math:`s`; RePlay reports the half-width, here it is ``ci_high - mean``):

    .. math::
        \text{CI}_\text{normal} = \bar x \pm z_{(1+c)/2}\, s / \sqrt n.

    With ``ci="bootstrap"`` the interval is the percentile bootstrap: the :math:`(1-c)/2` and
    :math:`(1+c)/2` quantiles (NumPy's linear interpolation) of the means of ``n_resamples``
    resamples of the :math:`n` values drawn with replacement, from
    ``numpy.random.default_rng(seed)``; every column starts from the same seed, so a column's
    interval does not depend on the other columns.

    Parameters
    ----------
    per_user : DataFrame of shape (n_users, n_metrics)
        One row per user, one numeric column per metric, as ``calc_reco_metrics`` or
        ``evaluate_lists`` return it. Columns named in ``by`` are not summarised.
    confidence : float, default=0.95
        In (0, 1).
    ci : {"t", "normal", "bootstrap"}, default="t"
    n_resamples : int, default=10_000
        Bootstrap resamples (``ci="bootstrap"``); the cost is ``n_resamples * n`` draws.
    seed : int, default=0
        Seed of the bootstrap.
    by : str or list of str, default=None
        Columns or index levels to group by (for example ``"algorithm"`` on the output of
        ``evaluate_lists`` with ``group_by``): one summary per group.
    ddof : {0, 1}, default=1
        Of the ``std`` column only: 1 gives :math:`s` above (divisor :math:`n - 1`, as
        pandas, ``scipy.stats.sem`` and LensKit's ``RunAnalysisResult.list_summary``); 0
        divides by :math:`n` (``numpy.std``'s default, as ranx's ``evaluate(...,
        return_std=True)`` and LensKit's ``MeasurementCollector.summary_metrics``). The
        intervals always use :math:`s`.

    Returns
    -------
    DataFrame
        Indexed by metric column (preceded by the ``by`` keys), with columns ``mean``,
        ``std``, ``median``, ``ci_low``, ``ci_high``, ``n_users`` (non-NaN values) and
        ``n_nan``. ``attrs["nan_reasons"]`` copies ``per_user.attrs["nan_reasons"]`` (NaN
        counts by rule of docs/metrics.md), ``attrs["confidence"]``, ``attrs["ci"]`` and
        ``attrs["ddof"]`` record the options.

    Notes
    -----
    NaN values (users a metric is not defined for) are left out. A column without a
    non-NaN value gives NaN everywhere; one with a single value gives NaN for ``std`` (0 with
    ``ddof=0``) and for the t and normal intervals (the bootstrap interval of one value is
    that value; RePlay's Spark and Polars paths give a half-width of 0 there, its NumPy path
    NaN).

    Examples
    --------
    >>> import pandas as pd, gpureco
    >>> per_user = pd.DataFrame({"P@2": [0.5, 1.0, 0.0, float("nan")]})
    >>> gpureco.summarize(per_user)[["mean", "median", "n_users", "n_nan"]]
            mean  median  n_users  n_nan
    metric
    P@2      0.5     0.5        3      1
    """
    per_user = v.as_pandas(per_user, "per_user", "per-user metrics")
    confidence = v.check_fraction(confidence, "confidence")
    v.check_choice(ci, "ci", ("t", "normal", "bootstrap"))
    n_resamples = v.check_int(n_resamples, "n_resamples", low=1)
    seed = v.check_seed(seed)
    ddof = v.check_int(ddof, "ddof", low=0, high=1)
    if by is not None:
        keys = [by] if isinstance(by, str) else list(by)
        missing = [key for key in keys if key not in per_user.columns and key not in per_user.index.names]
        if missing:
            raise ValueError(f"'by' must name columns or index levels of 'per_user'; {missing} are not (got columns "
                             f"{list(per_user.columns)} and index levels {list(per_user.index.names)}).")
        groups = per_user.groupby(by, sort=True, dropna=False)  # (a run whose key is NaN is a run, as in evaluate_lists)
        parts = []
        for key, frame in groups:  # (each part's index built here: pd.concat's keys cannot hold NaN)
            part = _summary(frame.drop(columns=[c for c in keys if c in frame.columns]), confidence, ci, n_resamples,
                            seed, ddof)
            key = key if isinstance(key, tuple) else (key,)
            part.index = pd.MultiIndex.from_tuples([(*key, metric) for metric in part.index],
                                                   names=[*keys, part.index.name])
            parts.append(part)
        out = pd.concat(parts)
    else:
        out = _summary(per_user, confidence, ci, n_resamples, seed, ddof)
    out.attrs.update(nan_reasons=dict(per_user.attrs.get("nan_reasons", {})), confidence=confidence, ci=ci,
                     ddof=ddof)
    return out


def _summary(per_user, confidence, ci, n_resamples, seed, ddof):
    rows = {}
    for column in per_user.columns:
        values = v.numeric_column(per_user, column, "per_user", finite=False, **METRIC)
        x = values[~np.isnan(values)]
        n = x.size
        median = np.median(x) if n else np.nan
        # finite values whose sum or squares would overflow: the sums below are of x times a power of
        # two (mean, std and the intervals scale with x), then scaled back
        peak = np.abs(x).max(initial=0.0)  # (finite: numeric_column refuses infinities)
        shift = int(np.frexp(peak)[1]) if peak > 2.0 ** 500 else 0
        x = np.ldexp(x, -shift)
        mean = x.mean() if n else np.nan
        std = x.std(ddof=1) if n > 1 else np.nan
        if ci == "bootstrap":
            low, high = _bootstrap_interval(x, confidence, n_resamples, seed)
        else:
            low, high = _mean_interval(mean, std, n, confidence, normal=ci == "normal")
        scaled = dict(mean=mean, std=x.std(ddof=ddof) if n > ddof else np.nan, ci_low=low, ci_high=high)
        with np.errstate(over="ignore"):  # (an interval's end beyond the largest float is inf)
            scaled = {name: np.ldexp(value, shift) for name, value in scaled.items()}
        rows[column] = {**scaled, "median": median, "n_users": n, "n_nan": values.size - n}
    out = pd.DataFrame.from_dict(rows, orient="index",
                                 columns=["mean", "std", "median", "ci_low", "ci_high", "n_users", "n_nan"])
    out.index.name = "metric"
    return out


def _mean_interval(mean, std, n, confidence, normal=False):
    """mean -+ q s / sqrt(n), q the Student-t quantile with n - 1 degrees of freedom (the normal one if normal)."""
    if n < 2:
        return np.nan, np.nan
    q = scipy.stats.norm.ppf((1 + confidence) / 2) if normal else scipy.stats.t.ppf((1 + confidence) / 2, n - 1)
    half = q * std / np.sqrt(n)
    return mean - half, mean + half


def _bootstrap_interval(x, confidence, n_resamples, seed):
    if x.size == 0:
        return np.nan, np.nan
    rng = np.random.default_rng(seed)
    chunk = max(1, _CHUNK // x.size)
    means = np.concatenate([x[rng.integers(0, x.size, size=(min(chunk, n_resamples - start), x.size))].mean(axis=1)
                            for start in range(0, n_resamples, chunk)])
    low, high = np.quantile(means, [(1 - confidence) / 2, (1 + confidence) / 2])
    return low, high


def compare(*per_user, names=None, confidence=0.95, n_permutations=10_000, seed=0, correction="holm", tukey=False):
    r"""Paired comparison of models, metric by metric, on the users every model was scored on.

    For every pair of models (a, b), a before b in the order given, and every metric column
    the frames share, let :math:`d_u = x_{b,u} - x_{a,u}` over the :math:`n` users where
    both values are non-NaN. The table reports the means of a and b on those users, the mean
    difference :math:`\bar d` (positive: b scores higher), its paired Student-t confidence
    interval :math:`\bar d \pm t_{(1+c)/2,\,n-1}\, s_d/\sqrt n`, and three two-sided p-values:

    - ``p_ttest``: ``scipy.stats.ttest_rel(x_b, x_a)``;
    - ``p_wilcoxon``: ``scipy.stats.wilcoxon(d)`` with its defaults: zero differences are
      dropped (``zero_method="wilcox"``), SciPy chooses the exact or normal method;
    - ``p_permutation``: the paired sign-flip permutation test of :math:`|\sum_u d_u|`.
      When :math:`2^n \le` ``n_permutations`` every sign vector is enumerated and
      :math:`p = \#\{s : |\sum_u s_u d_u| \ge |\sum_u d_u|\} / 2^n` exactly; otherwise
      ``n_permutations`` random sign vectors from ``numpy.random.default_rng(seed)`` give
      :math:`p = (1 + \#\{\dots\}) / (1 + \text{n\_permutations})`, never 0. Each
      (pair, metric) test starts from the same seed.

    With ``correction="holm"``, ``p_ttest_holm``, ``p_wilcoxon_holm`` and
    ``p_permutation_holm`` hold Holm's step-down adjustment across the metrics of each
    model pair: with the pair's :math:`m` non-NaN p-values sorted,
    :math:`p_{(i)}^{adj} = \max_{j \le i} \min(1, (m - j + 1)\, p_{(j)})`.

    ``wins_a``, ``ties`` and ``wins_b`` count the same :math:`n` users by
    :math:`x_{a,u} > x_{b,u}`, :math:`x_{a,u} = x_{b,u}` (exact float equality) and
    :math:`x_{a,u} < x_{b,u}`: ranx's win/tie/loss ``W``, ``T``, ``L`` of a against b
    (``compare(...).win_tie_loss[(a, b)][metric]`` in ranx 0.3.21).

    With ``tukey=True``, ``p_tukey`` is Tukey's HSD p-value of the pair, from
    ``scipy.stats.tukey_hsd`` of all the models' values on that metric, as ranx's
    ``compare(..., stat_test="tukey")`` computes it. Tukey's test treats the models' values
    as **independent** groups (a one-way layout with pooled variance), not as paired by user;
    it adjusts for the :math:`k(k-1)/2` pairs of each metric (so it gets no Holm column). The
    groups are the users for which every model has a non-NaN value of the metric (all users
    when there is no NaN, as in ranx). With :math:`\bar x_i` the group means, :math:`N` the
    users and :math:`\text{MSE} = \sum_i \sum_u (x_{i,u} - \bar x_i)^2 / (k(N - 1))`, the
    p-value is the upper tail of the studentized range distribution with :math:`k` and
    :math:`k(N-1)` degrees of freedom at :math:`|\bar x_a - \bar x_b| / \sqrt{\text{MSE}/N}`.

    Parameters
    ----------
    *per_user : DataFrames of shape (n_users, n_metrics), at least two
        One per model, indexed by user, as ``calc_reco_metrics`` or ``evaluate_lists``
        return them. Every frame must index the same users (in any order); the columns
        all frames share are compared.
    names : list of str, default=None
        Model names; ``"model_1"``, ``"model_2"``, ... by default.
    confidence : float, default=0.95
        Of the interval of the mean difference, in (0, 1).
    n_permutations : int, default=10_000
    seed : int, default=0
    correction : {"holm", None}, default="holm"
    tukey : bool, default=False
        Add the ``p_tukey`` column (one ``scipy.stats.tukey_hsd`` per metric).

    Returns
    -------
    DataFrame
        One row per (model_a, model_b, metric) with columns ``model_a``, ``model_b``,
        ``metric``, ``n_users``, ``mean_a``, ``mean_b``, ``mean_diff``, ``ci_low``,
        ``ci_high``, ``p_ttest``, ``p_wilcoxon``, ``p_permutation`` (and the ``_holm``
        columns), ``wins_a``, ``ties``, ``wins_b`` (and ``p_tukey``).

    Notes
    -----
    Fewer than 2 paired users: the interval and every p-value are NaN (and the means too
    without any). Every difference 0 (identical models on that metric): the interval is
    [0, 0] and every p-value is 1, as no test can see a difference (SciPy's t-test would
    give NaN). Differences that are all equal but not 0 give a zero-width interval and
    SciPy's p-values (0 for the t-test). Tukey with fewer than 2 shared users: NaN; with
    every model constant on those users: 1 for equal means and 0 otherwise (SciPy divides by
    a zero MSE).

    Examples
    --------
    >>> import pandas as pd, gpureco
    >>> a = pd.DataFrame({"P@2": [0.0, 0.5, 0.5, 0.0]})
    >>> b = pd.DataFrame({"P@2": [0.5, 0.5, 1.0, 0.5]})
    >>> gpureco.compare(a, b, names=["pop", "als"])[["model_a", "model_b", "mean_diff", "p_permutation"]]
      model_a model_b  mean_diff  p_permutation
    0     pop     als      0.375           0.25
    >>> gpureco.compare(a, b, names=["pop", "als"])[["wins_a", "ties", "wins_b"]]
       wins_a  ties  wins_b
    0       0     1       3
    """
    if len(per_user) < 2:
        raise ValueError(f"compare needs the per-user frames of at least 2 models; got {len(per_user)}.")
    labels = [_argument(i) for i in range(len(per_user))]
    frames = [v.as_pandas(frame, name, "per-user metrics") for frame, name in zip(per_user, labels)]
    if isinstance(names, (str, bytes)):
        raise TypeError(f"'names' must be a list of {len(frames)} model names; got the string {names!r}.")
    names = [f"model_{i + 1}" for i in range(len(frames))] if names is None else list(names)
    if len(names) != len(frames) or len(set(names)) != len(names):
        raise ValueError(f"'names' must hold {len(frames)} distinct names, one per model; got {names!r}.")
    confidence = v.check_fraction(confidence, "confidence")
    n_permutations = v.check_int(n_permutations, "n_permutations", low=1)
    seed = v.check_seed(seed)
    if correction is not None:
        v.check_choice(correction, "correction", ("holm",))
    if not isinstance(tukey, (bool, np.bool_)):
        raise TypeError(f"'tukey' must be True or False; got {tukey!r} of type {type(tukey).__name__}.")
    frames = _aligned(frames)
    metrics = [c for c in frames[0].columns if all(c in frame.columns for frame in frames[1:])]
    if not metrics:
        raise ValueError("The per-user frames share no metric column; got columns "
                         + "; ".join(repr(list(frame.columns)) for frame in frames) + ".")

    values = {metric: np.column_stack([v.numeric_column(frame, metric, label, finite=False, **METRIC)
                                       for frame, label in zip(frames, labels)]) for metric in metrics}
    p_tukey = {metric: tukey_p_values(x[~np.isnan(x).any(axis=1)]) for metric, x in values.items()} if tukey else {}
    rows, counts = [], []
    for a, b in itertools.combinations(range(len(frames)), 2):
        for metric in metrics:
            x_a, x_b = values[metric][:, a], values[metric][:, b]
            both = ~np.isnan(x_a) & ~np.isnan(x_b)
            x_a, x_b = x_a[both], x_b[both]
            rows.append(dict(model_a=names[a], model_b=names[b], metric=metric, n_users=int(both.sum()),
                             **_paired(x_a, x_b, confidence, n_permutations, seed)))
            counts.append(dict(wins_a=int(np.sum(x_a > x_b)), ties=int(np.sum(x_a == x_b)),
                               wins_b=int(np.sum(x_a < x_b)), **({"p_tukey": p_tukey[metric][a, b]} if tukey else {})))
    out = pd.DataFrame(rows)
    if correction == "holm":
        for p in _P_VALUES:
            out[p + "_holm"] = out.groupby(["model_a", "model_b"], sort=False)[p].transform(holm)
    return pd.concat([out, pd.DataFrame(counts)], axis=1)  # new columns last: older readers see the same positions


def _paired(x_a, x_b, confidence, n_permutations, seed):
    n = x_a.size
    d = x_b - x_a
    means = dict(mean_a=x_a.mean() if n else np.nan, mean_b=x_b.mean() if n else np.nan,
                 mean_diff=d.mean() if n else np.nan)
    if n < 2:
        return {**means, "ci_low": np.nan, "ci_high": np.nan, **dict.fromkeys(_P_VALUES, np.nan)}
    if not np.any(d):
        return {**means, "ci_low": 0.0, "ci_high": 0.0, **dict.fromkeys(_P_VALUES, 1.0)}
    low, high = _mean_interval(means["mean_diff"], d.std(ddof=1), n, confidence)
    return {**means, "ci_low": low, "ci_high": high,
            "p_ttest": float(scipy.stats.ttest_rel(x_b, x_a).pvalue),
            "p_wilcoxon": float(scipy.stats.wilcoxon(d).pvalue),
            "p_permutation": sign_flip_p_value(d, n_permutations, seed)}


def tukey_p_values(x):
    """Tukey's HSD p-values (k x k) of the k columns of x (users x models) taken as independent groups (see compare)."""
    k = x.shape[1]
    if x.shape[0] < 2:
        return np.full((k, k), np.nan)
    if not np.any(x - x[0]):  # every group constant: SciPy would divide by a zero MSE
        return np.where(x[0][:, None] == x[0][None, :], 1.0, 0.0)
    return scipy.stats.tukey_hsd(*x.T).pvalue


def sign_flip_p_value(d, n_permutations, seed):
    """Two-sided p-value of the paired sign-flip permutation test of |sum(d)| (see compare)."""
    n = d.size
    observed = abs(d.sum())
    tolerance = 1e-12 * np.abs(d).sum()  # sums equal in exact arithmetic count as "as extreme"
    exact = n < 63 and 2**n <= n_permutations
    total = 2**n if exact else n_permutations
    rng = np.random.default_rng(seed)
    chunk = max(1, _CHUNK // n)
    count = 0
    for start in range(0, total, chunk):
        size = min(chunk, total - start)
        if exact:  # bit u of the pattern number flips the sign of d_u
            patterns = np.arange(start, start + size, dtype=np.uint64)[:, None]
            flipped = ((patterns >> np.arange(n, dtype=np.uint64)) & np.uint64(1)).astype(np.float64)
        else:
            flipped = np.unpackbits(rng.integers(0, 256, size=(size, (n + 7) // 8), dtype=np.uint8),
                                    axis=1, count=n).astype(np.float64)
        sums = d.sum() - 2.0 * (flipped @ d)
        count += int(np.sum(np.abs(sums) >= observed - tolerance))
    return count / total if exact else (1 + count) / (1 + n_permutations)


def holm(p_values):
    """Holm's step-down adjustment of a family of p-values; NaN entries stay NaN and do not count."""
    p = np.asarray(p_values, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    ok = ~np.isnan(p)
    m = int(ok.sum())
    order = np.argsort(p[ok], kind="stable")
    adjusted = np.empty(m)
    adjusted[order] = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[ok][order]))
    out[ok] = adjusted
    return out


def to_markdown(df, digits=4):
    """A Markdown table of `df` (a summarize or compare result, or any DataFrame), to paste.

    Floats are written with `digits` significant digits (format ``g``), NaN as ``NaN``; a
    non-default index becomes the first columns. Numbers are right-aligned, text left-aligned.

    Examples
    --------
    >>> import pandas as pd, gpureco
    >>> print(gpureco.to_markdown(pd.DataFrame({"metric": ["P@5"], "mean": [0.123456], "n": [10]})))
    | metric | mean | n |
    |:---|---:|---:|
    | P@5 | 0.1235 | 10 |
    """
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"'df' must be a pandas DataFrame; got {type(df).__name__}.")
    digits = v.check_int(digits, "digits", low=1)
    frame = df if isinstance(df.index, pd.RangeIndex) else df.reset_index()

    def cell(value):
        if isinstance(value, (float, np.floating)):
            return "NaN" if np.isnan(value) else f"{value:.{digits}g}"
        return str(value).replace("|", "\\|")

    numeric = [pd.api.types.is_numeric_dtype(frame[c]) and not pd.api.types.is_bool_dtype(frame[c])
               for c in frame.columns]
    lines = ["| " + " | ".join(cell(c) for c in frame.columns) + " |",
             "|" + "|".join("---:" if num else ":---" for num in numeric) + "|"]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def _argument(i):
    """How messages name the i-th (0-based) frame given to compare."""
    return f"'per_user' (argument {i + 1} of compare)"


def _aligned(frames):
    """The frames in the first one's user order; their indexes must hold the same users."""
    first = frames[0].index
    for i, frame in enumerate(frames):
        if frame.index.has_duplicates:
            raise ValueError(f"{_argument(i)} must have one row per user; its index repeats "
                             f"{frame.index[frame.index.duplicated()].tolist()[0]!r}.")
    out = [frames[0]]
    for i, frame in enumerate(frames[1:], start=1):
        if not frame.index.equals(first):
            only_first = first[~first.isin(frame.index)]  # isin, not difference: no sorting of mixed types
            only_this = frame.index[~frame.index.isin(first)]
            if len(only_first) or len(only_this):
                example = (only_first if len(only_first) else only_this).tolist()[0]
                raise ValueError(f"{_argument(0)} and {_argument(i)} must index the same users (compare pairs "
                                 f"users by index); {len(only_first)} users are only in argument 1 and "
                                 f"{len(only_this)} only in argument {i + 1}, for example {example!r}.")
            frame = frame.reindex(first)
        out.append(frame)
    return out
