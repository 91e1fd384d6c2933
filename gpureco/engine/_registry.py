"""The registry of metrics: every metric's name, the flag that selects it, the NaN rules,
and the reading of metric names ("NDCG@10"). The single source of truth for names: column
names, CLI options and "unknown metric" errors all come from here. The arithmetic that
computes the metrics is in _metrics.py.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Metric(NamedTuple):
    column: str  # name in recometrics' dict output; "@K" is replaced by the cut-off
    flag: str  # the calc_reco_metrics argument that selects it


# The registry: the order is recometrics' column order.
METRICS = (
    Metric("P@K", "precision"),
    Metric("TP@K", "trunc_precision"),
    Metric("R@K", "recall"),
    Metric("AP@K", "average_precision"),
    Metric("TAP@K", "trunc_average_precision"),
    Metric("NDCG@K", "ndcg"),
    Metric("Hit@K", "hit"),
    Metric("RR@K", "rr"),
    Metric("ROC_AUC", "roc_auc"),
    Metric("PR_AUC", "pr_auc"),
)

# Whole-user reasons (1-5) are exclusive: a user is counted under the first that applies.
NAN_REASONS = {
    1: "fewer test items than max(1, min_pos_test)",
    2: "a pool (items not in X_train) smaller than min_items_pool",
    3: "no training items while consider_cold_start=False",
    4: "a NaN or infinite score in the pool",
    5: "the same score for every item in the pool",
    6: "no negative items (every pool item is a test item): all metrics but NDCG and DCG are NaN",
    7: "a pool of at most K items: P, TP, R, Hit and F1 are NaN",
    8: "no test item with a positive value: NDCG is NaN",
}
# Rank-based metrics beyond recometrics' ten: by name in evaluate, Evaluator and evaluate_lists
# (calc_reco_metrics keeps recometrics' ten flags). No flag: the second field is unused.
EXTRA_METRICS = (
    Metric("DCG@K", ""),
    Metric("F1@K", ""),
    Metric("RBP@K", ""),
    Metric("RPrec", ""),
    Metric("bpref", ""),
    Metric("ListAUC@K", ""),  # RePlay's RocAuc@K: the AUC inside the list cut at K
)
RANK_METRICS = METRICS + EXTRA_METRICS  # the order of _metrics_loop.rank_metrics' outputs
WHOLE_POOL = ("ROC_AUC", "PR_AUC", "bpref")  # need every pool item's rank: not from top-K lists
K_BOUND_IN_POOL = ("P@K", "TP@K", "R@K", "Hit@K", "F1@K")  # NaN rule 7
GAIN_METRICS = ("NDCG@K", "DCG@K")  # computed under NaN rule 6

GAINS = ("linear", "exponential", "binary")


class Convention(NamedTuple):
    """How a peer library defines the metrics gpureco also names (docs/peers.md): the NDCG
    discount, the denominators of P, R and AP, its NDCG gain, which test entries are relevant,
    and the order of tied scores."""
    discount: str = "log2(i+1)"  # or LensKit's "log2(max(i,2))"
    precision: str = "K"  # P@K divides by K, or by the "list" length cut at K
    recall: str = "T"  # R@K divides by |T|, min(|T|, the "list" length cut at K), or min(|T|, "K")
    ap: str = "T"  # AP@K divides by |T|, min(|T|, the "list" length cut at K), the "hits" in the top K, or min(|T|, "K")
    gain: str | None = None  # the NDCG gain when the caller gives none (None: "linear")
    gains: tuple | None = None  # the NDCG gains the peer has (None: all of GAINS); any other is an error
    relevant: str = "stored"  # "stored": every stored entry; "integer>=1": ranx's int(value) >= 1, gain int(value)
    ties: str = "first"  # _conventions.TIES: "first" (ascending item), "last", "optimistic", "pessimistic", "average"
    rbp: str = "binary"  # RBP counts each hit once, or weights it by its gain ("graded", ranx)


CONVENTIONS = {
    "gpureco": Convention(),
    "recometrics": Convention(),
    # LensKit's NDCG(gain="rating") is gain="linear"
    "lenskit": Convention(discount="log2(max(i,2))", precision="list", recall="K", ap="list", gain="binary",
                          gains=("binary", "linear")),
    "ranx": Convention(relevant="integer>=1", rbp="graded"),
    "replay": Convention(ap="K", gain="binary", gains=("binary",), ties="last"),
    "torchmetrics": Convention(ap="hits"),
    "recbole": Convention(ap="K", gain="binary", gains=("binary",)),  # RecBole 1.2 (ties: torch.topk's, unspecified)
    "sklearn": Convention(ties="average"),  # ndcg_score, dcg_score, roc_auc_score, average_precision_score
}


# Beyond-accuracy metrics, computed from top-K lists by _beyond (not from ranks). The flag is
# the name of the metric's definition in _beyond. Coverage, Gini and Entropy give one number
# per call, the others one number per list.
BEYOND_METRICS = (
    Metric("Coverage@K", "item_coverage"),
    Metric("Surprisal@K", "surprisal"),
    Metric("Gini@K", "gini_index"),
    Metric("Entropy@K", "exposure_entropy"),
    Metric("ARP@K", "average_popularity"),
    Metric("Tail@K", "tail_percentage"),
    Metric("ILD@K", "intra_list_diversity"),
    Metric("Unexpectedness@K", "unexpectedness"),
    Metric("Novelty@K", "novelty"),
    Metric("CategoricalDiversity@K", "categorical_diversity"),
)
ALL_METRICS = RANK_METRICS + BEYOND_METRICS


class MetricSelection(NamedTuple):
    """What `parse_metrics` read: the registry columns, the cut-offs and the output columns."""
    names: tuple  # registry columns ("P@K", "ROC_AUC", ...), in registry order
    cutoffs: np.ndarray  # int64, sorted, unique: every K of any @K column wanted
    columns: tuple  # (name, K or None) pairs in the order asked, K None for metrics without cut-off


def column_name(name, k=None):
    """The output column of registry column `name` at cut-off `k`: ("P@K", 10) -> "P@10"."""
    return name if k is None else name[: -len("@K")] + f"@{int(k)}"


def _check_cutoff(value, what):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{what} must be a positive int (a cut-off K >= 1); got {value!r} of type "
                        f"{type(value).__name__}.")
    if value < 1:
        raise ValueError(f"{what} must be a positive int (a cut-off K >= 1); got {value!r}.")
    return int(value)


class NotAvailableHere(ValueError):
    """A metric that gpureco defines but the function (or the command line) asked does not compute;
    `name`: its name in the registry ("DCG@K")."""

    def __init__(self, message, name):
        super().__init__(message)
        self.name = name


def parse_metrics(metrics, k=None, allowed=None):
    """Read metric names such as "P@10", "NDCG@5", "ROC_AUC", or bare "NDCG" with `k`.

    metrics : str or sequence of str. A name is a registry column with "@K" replaced by a
        cut-off ("P@10"), a registry column without its "@K" ("NDCG"), which means every cut-off
        in `k`, or a metric without cut-off ("ROC_AUC"). Names are matched ignoring case
        ("ndcg@10" is "NDCG@10"); nothing else (no aliases such as "MAP").
    k : int, sequence of int, or None. The cut-offs of bare names.
    allowed : registry columns the caller can compute (default: every one of ALL_METRICS).

    Returns a MetricSelection; `column_name(name, k)` of each pair of `.columns` is the output
    column. Duplicates are dropped. Raises ValueError naming every valid name for an unknown
    name, and for a cut-off that is not a positive int.
    """
    registry = [m.column for m in ALL_METRICS]
    allowed = tuple(registry if allowed is None else allowed)
    if isinstance(metrics, str):
        metrics = [metrics]
    try:
        metrics = list(metrics)
    except TypeError:
        raise TypeError(f"'metrics' must be a metric name or a list of names; got {metrics!r}.") from None
    if not metrics:
        raise ValueError("'metrics' must name at least one metric; got an empty list.")
    if k is not None:
        if isinstance(k, np.ndarray) and k.ndim == 0:  # a 0-d array: its one value
            k = k.item()
        many = isinstance(k, (list, tuple, np.ndarray))
        ks = [_check_cutoff(value, "'k'") for value in (k if many else [k])]
        if not ks:
            raise ValueError("'k' must be a positive int or a non-empty list of them; got an empty list.")
    by_base = {name.upper().removesuffix("@K"): name for name in registry}
    valid = ", ".join(allowed)

    columns = []
    for metric in metrics:
        if not isinstance(metric, str):
            raise TypeError(f"'metrics' must hold metric names (str); got {metric!r} of type {type(metric).__name__}.")
        base, at, cut = metric.strip().partition("@")
        name = by_base.get(base.upper())
        if name is not None and at and not name.endswith("@K"):
            raise ValueError(f"Metric {metric!r} in 'metrics': {name} takes no cut-off; write {name!r}.")
        if name is None:
            raise ValueError(f"Unknown metric {metric!r} in 'metrics'. Valid names: {valid} (write K as a "
                             "positive int, as in 'NDCG@10', or give the name without '@K' and pass k=...).")
        if name not in allowed:
            beyond = " It is a metric of top-K lists: gpureco.beyond_accuracy computes it." if any(
                name == m.column for m in BEYOND_METRICS) else ""
            raise NotAvailableHere(f"Metric {metric!r} in 'metrics' is not available here.{beyond} Valid names: "
                                   f"{valid}.", name)
        if not name.endswith("@K"):
            columns.append((name, None))
        elif at:
            if not (cut.isascii() and cut.isdigit()):  # ('²'.isdigit() is true)
                raise ValueError(f"Metric {metric!r} in 'metrics': the cut-off after '@' must be a positive "
                                 f"int; got {cut!r}.")
            columns.append((name, _check_cutoff(int(cut), f"The cut-off of {metric!r} in 'metrics'")))
        elif k is None:
            raise ValueError(f"Metric {metric!r} in 'metrics' needs a cut-off: write it as "
                             f"{column_name(name, 10)!r} or pass k=...; got k=None.")
        else:
            columns.extend((name, value) for value in ks)
    columns = tuple(dict.fromkeys(columns))
    names = tuple(name for name in registry if any(name == c[0] for c in columns))
    cutoffs = np.unique(np.array([c[1] for c in columns if c[1] is not None], dtype=np.int64))
    return MetricSelection(names, cutoffs, columns)


def select_columns(values, selection):
    """{output column: per-user values} from `metrics_from_ranks(..., selection.cutoffs, ...)`."""
    index = {int(k): i for i, k in enumerate(selection.cutoffs)}
    return {column_name(name, k): values[name] if k is None else values[name][:, index[k]]
            for name, k in selection.columns}
