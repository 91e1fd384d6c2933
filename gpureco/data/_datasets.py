"""Generated implicit-feedback data sets, for demos, tests and benchmarks (no download)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .. import _validation as v

def make_interactions(n_users=10_000, n_items=3_000, mean_per_user=30, *, n_factors=16, popularity_exponent=1.0,
                      taste_strength=1.5, min_per_user=5, start=1_700_000_000, seed=0):
    r"""A deterministic implicit-feedback data set: who consumed what, how much they liked it, and when.

    Every user consumes a set of distinct items, drawn without replacement (Gumbel top-k) from
    a softmax over the item logits

    .. math::
        \ell_{ui} = \text{taste\_strength} \cdot \frac{a_u \cdot b_i}{\sqrt{F}} - \text{popularity\_exponent}
        \cdot \log(1 + r_i),

    where :math:`a_u, b_i \sim \mathcal{N}(0, I_F)` are low-rank tastes and :math:`r_i` is item
    i's popularity rank (a random permutation of 0..n_items-1): item popularity follows a power
    law, and users with similar tastes consume similar items, so a low-rank model beats
    most-popular.

    Parameters
    ----------
    n_users, n_items : int, default=10_000, 3_000
    mean_per_user : float, default=30
        Mean number of interactions per user. Counts are log-normal (a heavy tail of very
        active users), clipped to [min_per_user, n_items // 2].
    n_factors : int, default=16
        Rank F of the tastes.
    popularity_exponent : float, default=1.0
        Power of the popularity law (0: no popularity effect).
    taste_strength : float, default=1.5
        Weight of the tastes against popularity (0: everybody draws from the popularity law).
    min_per_user : int, default=5
    start : int, default=1_700_000_000
        The earliest possible timestamp (Unix seconds).
    seed : int, default=0

    Returns
    -------
    DataFrame with columns ``user`` (int64, 0..n_users-1), ``item`` (int64, 0..n_items-1),
    ``value`` (float64 grades 1-5) and ``timestamp`` (int64 Unix seconds), sorted by user
    then timestamp. :func:`gpureco.to_csr` turns it into a sparse matrix.

    Notes
    -----
    Guarantees (tested in tests/data/test_datasets.py):

    - the same arguments give the same frame, row for row, on every machine;
    - every user appears, with between ``min_per_user`` and ``n_items // 2`` interactions;
      the total is about ``n_users * mean_per_user`` (within 5% at the default size:
      300,000 rows);
    - each (user, item) pair appears at most once;
    - a user's timestamps are strictly increasing in the frame's order, within 366 days of
      ``start``; the order of consumption is random (independent of the tastes);
    - values are integers 1..5, higher for items closer to the user's tastes; every grade
      occurs;
    - popularity is skewed: at the default settings the 10% most popular items take more than
      40% of the interactions, and the least popular half less than 20%.
    """
    n_users = v.check_int(n_users, "n_users", low=1)
    n_items = v.check_int(n_items, "n_items", low=2)
    n_factors = v.check_int(n_factors, "n_factors", low=1)
    min_per_user = v.check_int(min_per_user, "min_per_user", low=1, high=n_items // 2)
    for name, value in (("mean_per_user", mean_per_user), ("popularity_exponent", popularity_exponent),
                        ("taste_strength", taste_strength)):
        if not isinstance(value, (int, float, np.integer, np.floating)) or isinstance(value, (bool, np.bool_)):
            raise TypeError(f"'{name}' must be a number in [0, 1e300]; got {value!r} of type {type(value).__name__}.")
        if not 0 <= float(value) <= 1e300:  # NaN fails too; above 1e300 the logits overflow
            raise ValueError(f"'{name}' must be a number in [0, 1e300]; got {value!r}.")
    if mean_per_user < min_per_user:
        raise ValueError(f"'mean_per_user' must be at least min_per_user ({min_per_user}); got {mean_per_user!r}.")
    start = v.check_int(start, "start", low=0)
    seed = v.check_seed(seed)

    rng = np.random.default_rng(seed)
    tastes = rng.standard_normal((n_users, n_factors))
    traits = rng.standard_normal((n_items, n_factors))
    popularity = -popularity_exponent * np.log1p(rng.permutation(n_items))
    sigma = 0.8  # log-normal counts: mean exp(mu + sigma^2 / 2) = mean_per_user
    counts = rng.lognormal(np.log(mean_per_user) - sigma**2 / 2, sigma, n_users)
    counts = np.clip(np.round(counts), min_per_user, n_items // 2).astype(np.int64)

    users, items, affinity = [], [], []
    block = max(1, 2**22 // n_items)  # users per block of logits (32 MiB)
    for begin in range(0, n_users, block):
        end = min(n_users, begin + block)
        fit = tastes[begin:end] @ traits.T / np.sqrt(n_factors)
        logits = taste_strength * fit + popularity + rng.gumbel(size=fit.shape)
        top = int(counts[begin:end].max())
        chosen = np.argpartition(-logits, top - 1, axis=1)[:, :top]
        for row, c in enumerate(counts[begin:end]):
            picked = chosen[row][np.argsort(-logits[row, chosen[row]], kind="stable")[:c]]
            users.append(np.full(c, begin + row, dtype=np.int64))
            items.append(picked)
            affinity.append(fit[row, picked])
    users = np.concatenate(users)
    items = np.concatenate(items).astype(np.int64)
    affinity = np.concatenate(affinity)

    # grades: the taste fit plus noise, cut at fixed quantiles so that every grade occurs
    noisy = affinity + 0.5 * rng.standard_normal(affinity.size)
    values = 1.0 + np.searchsorted(np.quantile(noisy, [0.1, 0.3, 0.6, 0.85]), noisy)

    # time: a random order of consumption per user, strictly increasing timestamps over at most
    # 185 days from a first interaction in the first 180 days after `start`
    order = np.lexsort((rng.random(users.size), users))
    items, values = items[order], values[order]
    row_start = np.concatenate([[0], np.cumsum(counts)[:-1]])
    gaps = rng.exponential(86_400.0, users.size)
    offsets = np.cumsum(gaps)
    offsets -= np.repeat(offsets[row_start] - gaps[row_start], counts)  # a cumulative sum per user
    squeeze = np.minimum(1.0, 185 * 86_400 / offsets[row_start + counts - 1])
    position = np.arange(users.size) - np.repeat(row_start, counts)
    first = start + rng.integers(0, 180 * 86_400, n_users)
    # + position: a non-decreasing integer sequence plus 0, 1, 2, ... is strictly increasing
    timestamps = np.repeat(first, counts) + np.floor(offsets * np.repeat(squeeze, counts)).astype(np.int64) + position
    return pd.DataFrame({"user": users, "item": items, "value": values, "timestamp": timestamps})
