"""The options every front door shares to reproduce a peer library's numbers (docs/peers.md):
`convention`, `ties`, `relevance_threshold`, `persistence`; checked once here, and the
changes they make to the inputs (which test entries are relevant, the item order of ties)."""
from __future__ import annotations

import math
import numbers

import numpy as np

import scipy.sparse as sp

from ._registry import CONVENTIONS, GAINS

TIES = ("first", "last", "optimistic", "pessimistic", "average")
TIE_MODES = {"optimistic": 1, "pessimistic": 2, "average": 3}  # the engine's tie_mode (0: by item)
# the metrics whose expectation over the orders of tied scores ties="average" computes (_ties.py)
AVERAGE_TIES = ("P@K", "TP@K", "R@K", "NDCG@K", "Hit@K", "RR@K", "ROC_AUC", "PR_AUC", "DCG@K", "F1@K", "RBP@K",
                "RPrec")



def _finite(x):
    """Whether a real number is finite as a float64 (10**400, an int, is not: NumPy's isfinite refuses it)."""
    try:
        return math.isfinite(x)
    except OverflowError:
        return False

class Options:
    """The checked options: .convention (a Convention), .gain, .threshold (None or a float),
    .persistence (a float in (0, 1)), .ties (the tie rule), .reverse (ties by descending item),
    .tie_mode (TIE_MODES: 0 by item, 1 optimistic, 2 pessimistic, 3 average)."""

    def __init__(self, convention="gpureco", ties=None, gain=None, relevance_threshold=None, persistence=0.8):
        if not isinstance(convention, str) or convention not in CONVENTIONS:
            raise ValueError(f"'convention' must be one of {', '.join(map(repr, CONVENTIONS))}; got {convention!r}.")
        self.convention, self._name = CONVENTIONS[convention], convention
        if ties is not None and (not isinstance(ties, str) or ties not in TIES):
            raise ValueError(f"'ties' must be one of {', '.join(map(repr, TIES))} (or None: the convention's, "
                             f"{self.convention.ties!r} for {convention!r}); got {ties!r}.")
        self.ties = ties or self.convention.ties
        self._ties_from = f"convention={convention!r} averages tied scores as that library does, and " \
            if ties is None and self.ties == "average" else ""
        self.reverse = self.ties == "last"
        self.tie_mode = TIE_MODES.get(self.ties, 0)
        if gain is not None and (not isinstance(gain, str) or gain not in GAINS):
            raise ValueError(f"'gain' must be one of {', '.join(map(repr, GAINS))} (or None: the convention's); "
                             f"got {gain!r}.")
        own, allowed = self.convention.gain or "linear", self.convention.gains or GAINS
        if gain is not None and gain not in allowed:
            raise ValueError(f"convention={convention!r} uses gain={own!r} (the peer's NDCG has "
                             f"{' or '.join(map(repr, allowed))}); got gain={gain!r}. Leave 'gain' out, or use "
                             "convention='gpureco'.")
        self.gain = gain or own
        if relevance_threshold is not None and (isinstance(relevance_threshold, bool) or
                                                not isinstance(relevance_threshold, numbers.Real) or
                                                not _finite(relevance_threshold)):
            raise TypeError(f"'relevance_threshold' must be a finite number or None; got {relevance_threshold!r}.")
        self.threshold = None if relevance_threshold is None else float(relevance_threshold)
        if (isinstance(persistence, bool) or not isinstance(persistence, numbers.Real)
                or not 0 < persistence < 1):
            raise ValueError(f"'persistence' (RBP's p) must be a number in (0, 1); got {persistence!r}.")
        self.persistence = float(persistence)

    def check_ties(self, names, break_ties_with_noise):
        """Refuse what the tie rule cannot do: noise with a rule of its own, and metrics that
        ties="average" does not average (`names`: the registry columns asked for); and RBP weighted by a
        gain other than the relevance value that the convention's library weights it by."""
        if self.convention.rbp == "graded" and self.gain != "linear" and "RBP@K" in names:
            raise ValueError(f"convention={self._name!r} weights each hit of RBP by its relevance value, as that "
                             f"library does (gain='linear'); got gain={self.gain!r}, which that library's RBP never "
                             "uses. Compute RBP in a call of its own, with 'gain' left out.")
        if self.ties != "first" and break_ties_with_noise:
            raise ValueError(f"ties={self.ties!r} orders equal scores by its own rule; break_ties_with_noise=True "
                             "orders them by noise: pass one of them.")
        if self.tie_mode == 3:
            refused = [name for name in names if name not in AVERAGE_TIES]
            if refused:
                raise ValueError(f"{self._ties_from}ties='average' (the expected value over the orders of tied "
                                 f"scores) is defined for {', '.join(AVERAGE_TIES)}; got metrics "
                                 f"{', '.join(refused)}. Compute those with ties='first', 'optimistic' or "
                                 "'pessimistic'.")

    def relevant(self, values):
        """(keep, gains): which test entries of these values are relevant, and their gains:
        ranx's rule keeps int(value) >= 1 with gain int(value); a threshold keeps value >= it."""
        values = np.asarray(values, dtype=np.float64)
        keep = np.ones(values.shape, bool)
        if self.convention.relevant == "integer>=1":
            values = np.trunc(values)
            keep &= values >= 1
        if self.threshold is not None:
            keep &= values >= self.threshold
        return keep, values

    def relevant_matrix(self, X_test):
        """X_test with only the relevant entries (and their gains), or X_test itself."""
        if self.convention.relevant == "stored" and self.threshold is None:
            return X_test
        keep, values = self.relevant(X_test.data)
        X = X_test.copy()
        X.data = np.where(keep, values, 0.0)
        return _canonical(X)


def reversed_items(X):
    """The CSR matrix X with its columns in reverse order (item j becomes n_items - 1 - j), in
    canonical form: ranking it with ties by ascending item gives the original's ties by
    descending item."""
    return _canonical(X[:, ::-1])


def _canonical(X):
    """X in the engine's CSR form: sorted indices, no stored zeros, int32 indices, int64 indptr."""
    X = sp.csr_array(X, copy=True)
    X.eliminate_zeros()
    X.sort_indices()
    X.indices, X.indptr = X.indices.astype(np.int32), X.indptr.astype(np.int64)
    return X
