"""ties="average": each metric's expected value when every group of equal scores is put in a
uniformly random order (McSherry and Najork, "Computing Information Retrieval Performance
Measures Efficiently in the Presence of Tied Scores", ECIR 2008), which is how scikit-learn's
`ndcg_score`/`dcg_score` and torchmetrics' `retrieval_normalized_dcg` treat ties, and
`roc_auc_score`'s half credit for a tie. The exception is PR_AUC, which is scikit-learn's
`average_precision_score`: each distinct score is one threshold.

The inputs come from two rankings of the same pool: every test item before the other items of
its score (optimistic) and after them (pessimistic), plus the test items' defined scores.
For a tie group G (the test items of one score, r of them) they give `above` (the pool items
scored higher, test items included) and n (the pool items of that score, test items included):
in a random order each of G's items sits at each rank above + 1 .. above + n with probability
1 / n. Users without a tie (every group has n = r = 1) are the ranking itself: their values
are _metrics.metrics_from_ranks', from the same ranks. The others are computed here, in plain
Python floats, one IEEE-754 operation after another in the order written (groups by descending
score, ranks ascending), so the numbers are the same on every backend and run.
"""
from __future__ import annotations

import numpy as np

from ._metrics import discount_table, metrics_from_ranks, persistence_powers, transformed_gains


def metrics_with_average_ties(optimistic, pessimistic, scores, gains, n_test, n_pool, cutoffs, names, valid,
                              gain="linear", *, convention=None, persistence=0.8):
    """metrics_from_ranks for ties="average": `optimistic` and `pessimistic` are the test
    entries' ranks in the two rankings, `scores` their defined scores (CSR order, like `gains`)."""
    values = metrics_from_ranks(optimistic, gains, n_test, n_pool, cutoffs, names, valid, gain,
                                convention=convention, persistence=persistence)
    from ._registry import CONVENTIONS
    convention = convention or CONVENTIONS["gpureco"]
    gains = transformed_gains(np.asarray(gains, dtype=np.float64), gain)
    start = np.concatenate([[0], np.cumsum(n_test)]).astype(np.int64)
    user = np.repeat(np.arange(n_test.shape[0]), n_test)
    # a user has a tie when a test item shares its score with another pool item
    tied = np.zeros(n_test.shape[0], bool)
    tied[user[optimistic != pessimistic]] = True
    order = np.lexsort([-scores, user])
    same = (user[order][1:] == user[order][:-1]) & (scores[order][1:] == scores[order][:-1])
    tied[user[order][1:][same]] = True
    max_k = int(cutoffs.max(initial=0))
    most = int(max(min(max_k, n_pool.max(initial=0)), n_test.max(initial=0), 1))  # (no rank is past the pool)
    discount = discount_table(most + 1, convention.discount)
    powers = persistence_powers(most + 1, float(persistence))
    for u in np.flatnonzero(tied & valid):
        entries = slice(start[u], start[u + 1])
        row = _user_values(optimistic[entries], pessimistic[entries], scores[entries], gains[entries],
                           int(n_pool[u]), cutoffs, names, convention, float(persistence), discount, powers)
        for name, value in row.items():
            values[name][u] = value
    return values


def _groups(optimistic, pessimistic, scores, gains):
    """[(above, n, r, gain sum)] of a user's tie groups by descending score."""
    by_rank = np.argsort(optimistic, kind="stable")
    groups, i, m = [], 0, by_rank.shape[0]
    while i < m:
        j = i
        gain_sum = 0.0
        while j < m and scores[by_rank[j]] == scores[by_rank[i]]:
            gain_sum = gain_sum + float(gains[by_rank[j]])
            j += 1
        above = int(optimistic[by_rank[i]]) - 1
        groups.append((above, int(pessimistic[by_rank[j - 1]]) - above, j - i, gain_sum))
        i = j
    return groups


def _in_top(above, n, k):
    """The ranks above + 1 .. above + n that are at most k."""
    return min(max(k - above, 0), n)


def _user_values(optimistic, pessimistic, scores, gains, n_pool, cutoffs, names, convention, persistence,
                 discount, powers):
    """{name: value} (a row over the cut-offs for @K metrics) of one user with ties."""
    groups = _groups(optimistic, pessimistic, scores, gains)
    m = len(optimistic)
    m_d, n_neg = float(m), n_pool - m
    ideal = sorted((float(g) for g in gains if g > 0), reverse=True)
    has_positive = bool(ideal)
    scale = ideal[0] if ideal else 1.0
    inverse_discount = [0.0] + [1.0 / float(discount[i]) for i in range(1, discount.shape[0])]
    weighted = convention.rbp == "graded"
    out = {}

    def expected_hits(k):
        total = 0.0
        for above, n, r, _ in groups:
            total = total + float(r) * float(_in_top(above, n, k)) / float(n)
        return total

    if n_neg > 0 and "ROC_AUC" in names:  # twice the expected rank sum is an integer
        twice = sum(r * (2 * above + n + 1) for above, n, r, _ in groups)
        out["ROC_AUC"] = 1.0 - (float(twice - m * (m + 1)) / 2.0) / (m_d * float(n_neg))
    if n_neg > 0 and "PR_AUC" in names:  # each distinct score a threshold
        pr_sum, through = 0.0, 0
        for above, n, r, _ in groups:
            through += r
            pr_sum = pr_sum + float(r) * (float(through) / float(above + n))
        out["PR_AUC"] = pr_sum / m_d
    if n_neg > 0 and "RPrec" in names:
        out["RPrec"] = expected_hits(m) / m_d
    rows = {name: np.full(cutoffs.shape[0], np.nan) for name in names if name.endswith("@K")}
    for c, k in enumerate(int(k) for k in cutoffs):
        dcg = raw_dcg = rbp_sum = 0.0
        for above, n, r, gain_sum in groups:
            shown = _in_top(above, n, k)
            if shown == 0:
                break  # groups come by descending score: the later ones are lower still
            spread = power_sum = 0.0
            for rank in range(above + 1, above + shown + 1):
                spread = spread + inverse_discount[rank]
                power_sum = power_sum + float(powers[rank])
            dcg = dcg + gain_sum / scale / float(n) * spread
            raw_dcg = raw_dcg + gain_sum / float(n) * spread
            rbp_sum = rbp_sum + (gain_sum if weighted else float(r)) / float(n) * power_sum
        idcg = 0.0
        for j in range(min(len(ideal), k)):
            idcg = idcg + ideal[j] / scale * inverse_discount[j + 1]
        if "NDCG@K" in rows:
            rows["NDCG@K"][c] = dcg / idcg if has_positive else np.nan
        if "DCG@K" in rows:
            rows["DCG@K"][c] = raw_dcg
        if n_neg == 0:  # rule 6
            continue
        hits = expected_hits(k)
        k_bound = n_pool <= k  # rule 7
        shown_k = min(k, n_pool)
        if "P@K" in rows and not k_bound:
            rows["P@K"][c] = hits / (float(shown_k) if convention.precision == "list" else float(k))
        if "TP@K" in rows and not k_bound:
            rows["TP@K"][c] = hits / float(min(k, m))
        if "R@K" in rows and not k_bound:
            rows["R@K"][c] = hits / {"T": m_d, "list": float(min(shown_k, m)), "K": float(min(k, m))}[convention.recall]
        if "F1@K" in rows and not k_bound:
            rows["F1@K"][c] = 2.0 * hits / (float(k) + m_d)
        if "Hit@K" in rows and not k_bound:
            rows["Hit@K"][c] = _expected_hit(groups, k)
        if "RR@K" in rows:
            rows["RR@K"][c] = _expected_rr(groups, k)
        if "RBP@K" in rows:
            rows["RBP@K"][c] = (1.0 - persistence) * rbp_sum
    out.update(rows)
    return out


def _expected_hit(groups, k):
    """P(some test item in the top k): the first group decides (the others lie below it)."""
    above, n, r, _ = groups[0]
    shown = _in_top(above, n, k)
    if shown == n:
        return 1.0
    none = 1.0  # P(the `shown` ranks in the top k all go to the n - r other items)
    for j in range(shown):
        none = none * float(n - r - j) / float(n - j)
    return 1.0 - none


def _expected_rr(groups, k):
    """E[1 / rank of the first test item, 0 past k]: the first of the r test items of the first
    group sits at above + j with probability C(n - j, r - 1) / C(n, r)."""
    above, n, r, _ = groups[0]
    probability, total = float(r) / float(n), 0.0  # j = 1
    for j in range(1, min(n - r + 1, k - above) + 1):
        if j > 1:
            probability = probability * float(n - j - r + 2) / float(n - j + 1)
        total = total + probability / float(above + j)
    return total
