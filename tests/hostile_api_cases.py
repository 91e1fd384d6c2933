"""Hostile and extreme inputs to the public Python API, as data: each case names the public
function, describes the input, builds and runs the call, and states the expected outcome.

Outcomes:
  "answer"   accepted: the result must equal `expect()` (the same call on a clean equivalent
             input, or a hand-worked value), bit for bit unless `rtol` is given;
  "error"    a TypeError or ValueError (`exception`) whose message matches the regex `expect`,
             which names the parameter;
  "warning"  a documented warning whose message matches the regex `expect`.

`known_failure` marks a case that fails because of a bug in a file this suite does not own:
the test runs it as pytest.mark.xfail(strict=True), so fixing the bug makes the test fail
until the mark is removed.

`python tests/hostile_api_cases.py > docs/robustness-api.md` writes the summary page;
tests/test_hostile_api.py checks that the committed page equals it.
"""
from __future__ import annotations

import collections
import re
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pandas as pd
import scipy.sparse as sp

import gpureco
from gpureco import datasets


@dataclass(frozen=True)
class Case:
    function: str  # the public name, as in gpureco.__all__
    description: str
    call: Callable[[], Any]  # runs the public function on the hostile input
    outcome: str  # "answer", "error" or "warning"
    expect: Any = None  # answer: () -> expected result; error / warning: regex of the message
    exception: type = ValueError  # error: TypeError or ValueError
    rtol: float = 0.0  # answer: 0 means bit-identical
    known_failure: str = ""  # the bug (in a file this suite does not own) that makes it fail

    @property
    def id(self):
        return f"{self.function}: {self.description}"


# ---------------------------------------------------------------------------------------------
# clean inputs: small integer values, so every conversion below is exact
RNG = np.random.default_rng(7)
N_USERS, N_ITEMS = 5, 7
A0 = RNG.integers(-3, 4, (N_USERS, 2)).astype(np.float64)
B0 = RNG.integers(-3, 4, (N_ITEMS, 2)).astype(np.float64)
A1 = np.array([[1.0], [2.0], [3.0], [1.0], [2.0]])  # one factor: a positive scaling keeps every order
B1 = np.array([[3.0], [-1.0], [2.0], [0.0], [1.0], [-2.0], [2.0]])
BIAS0 = RNG.integers(0, 3, N_ITEMS).astype(np.float64)
XTR0 = np.array([[1, 0, 0, 0, 0, 1, 0], [0, 1, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0],
                 [0, 0, 1, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0, 0]], dtype=np.float64)
XTE0 = np.array([[0, 1, 0, 1, 0, 0, 0], [1, 0, 2, 0, 0, 0, 1], [0, 0, 0, 0, 1, 0, 0],
                 [0, 1, 0, 0, 0, 1, 0], [0, 0, 0, 3, 0, 0, 0]], dtype=np.float64)
SCORES0 = A0 @ B0.T
EVERY_METRIC = ["P", "TP", "R", "AP", "TAP", "NDCG", "Hit", "RR", "ROC_AUC", "PR_AUC"]


def calc(X_train=XTR0, X_test=XTE0, A=A0, B=B0, **kw):
    return gpureco.calc_reco_metrics(sp.csr_array(X_train) if isinstance(X_train, np.ndarray) else X_train,
                                     sp.csr_array(X_test) if isinstance(X_test, np.ndarray) else X_test,
                                     A, B, **{"k": 3, "all_metrics": True, "device": "cpu", "nthreads": 1, **kw})


def calc_raw(X_train=XTR0, X_test=XTE0, A=A0, B=B0, **kw):
    """calc_reco_metrics with X_train and X_test passed as given."""
    return gpureco.calc_reco_metrics(X_train, X_test, A, B, **{"k": 3, "all_metrics": True, "device": "cpu",
                                                               "nthreads": 1, **kw})


def evaluate(scores=SCORES0, X_test=XTE0, X_train=XTR0, **kw):
    return gpureco.evaluate(scores, X_test, X_train, **{"metrics": EVERY_METRIC, "k": 3, "device": "cpu",
                                                        "nthreads": 1, **kw})


def evaluate_fn(transform, **kw):
    """evaluate with a score function returning transform(rows of SCORES0)."""
    return evaluate(lambda users: transform(SCORES0[np.asarray(users)]), **kw)


def top_k(A=A0, B=B0, k=3, X_train=XTR0, **kw):
    return gpureco.top_k(A, B, k, X_train, **{"device": "cpu", **kw})


def frame(values, columns):
    return pd.DataFrame(dict(zip(columns, values)))


RECS0 = pd.DataFrame({"user": [1, 1, 1, 2, 2, 3], "item": [10, 11, 12, 10, 13, 11], "rank": [1, 2, 3, 1, 2, 1]})
TRUTH0 = pd.DataFrame({"user": [1, 1, 2, 3, 4], "item": [11, 14, 10, 12, 10], "rating": [1.0, 2.0, 1.0, 1.0, 1.0]})


def lists(recs=RECS0, truth=TRUTH0, **kw):
    return gpureco.evaluate_lists(recs, truth, **{"metrics": ["P", "R", "AP", "NDCG", "Hit", "RR"], "k": 2, **kw})


LISTS0 = np.array([[0, 1, 2], [1, 3, -1], [4, 0, 1]])
POP0 = np.array([5.0, 3.0, 0.0, 1.0, 2.0, 0.0])
VEC0 = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, 1.0], [1.0, 3.0], [1.0, 1.0]])
BASE0 = np.array([[0, 5, 4], [1, 2, 3], [2, 3, 4]])
BEYOND = ["Coverage", "Gini", "Entropy", "Surprisal", "ARP", "Tail", "ILD", "Unexpectedness"]


def beyond(lists=LISTS0, popularity=POP0, item_vectors=VEC0, baseline=BASE0, **kw):
    return gpureco.beyond_accuracy(lists, BEYOND, **{"k": 3, "n_items": 6, "popularity": popularity,
                                                     "n_train_users": 10, "item_vectors": item_vectors,
                                                     "baseline": baseline, **kw})


PER_USER_A = pd.DataFrame({"P@2": [0.0, 0.5, 0.5, 0.0, 1.0], "R@2": [0.0, 1.0, 0.5, 0.0, 0.5]},
                          index=pd.Index([1, 2, 3, 4, 5], name="user"))
PER_USER_B = pd.DataFrame({"P@2": [0.5, 0.5, 1.0, 0.5, 1.0], "R@2": [0.5, 1.0, 1.0, 0.5, 0.5]},
                          index=pd.Index([1, 2, 3, 4, 5], name="user"))


def summarize(per_user=PER_USER_A, **kw):
    return gpureco.summarize(per_user, **{"n_resamples": 200, **kw})


def compare(a=PER_USER_A, b=PER_USER_B, **kw):
    return gpureco.compare(a, b, **{"n_permutations": 200, **kw})


INTER0 = pd.DataFrame({"user": [1, 1, 1, 2, 2, 2, 3, 3, 3, 3], "item": [1, 2, 3, 1, 4, 5, 2, 3, 4, 5],
                       "value": [1.0, 2.0, 1.0, 1.0, 1.0, 3.0, 1.0, 1.0, 2.0, 1.0],
                       "timestamp": [5, 1, 3, 2, 8, 4, 9, 7, 6, 10]})
XSPLIT0 = np.array([[1, 1, 0, 1, 0, 1, 0], [1, 0, 1, 1, 1, 0, 0], [0, 1, 1, 0, 1, 1, 1],
                    [1, 1, 1, 1, 0, 0, 1], [0, 0, 1, 1, 1, 1, 1], [1, 1, 0, 0, 1, 1, 1]], dtype=np.float64)


def split_reco(X=XSPLIT0, **kw):
    return gpureco.split_reco_train_test(X, **{"split_type": "all", "items_test_fraction": 0.4, **kw})


SPLITTERS = {
    "split_leave_k_out": lambda data, **kw: gpureco.split_leave_k_out(data, **{"k": 1, **kw}),
    "split_last_per_user": lambda data, **kw: gpureco.split_last_per_user(data, **{"n": 1, **kw}),
    "split_k_fold_users": lambda data, **kw: list(gpureco.split_k_fold_users(data, **{"n_folds": 2, **kw})),
}


def split_time(data=INTER0, **kw):
    return gpureco.split_time_cutoff(data, **{"cutoff": 6, **kw})


# ---------------------------------------------------------------------------------------------
# hostile forms of a clean dense array: (label, transform, outcome, expected transform or regex, exception)
def _noncontiguous(x):
    wide = np.repeat(x, 2, axis=-1)
    return wide[..., ::2]


def _readonly(x):
    x = x.copy()
    x.flags.writeable = False
    return x


def _big_endian(x):
    return x.astype(">f8")


LAYOUTS = [  # same values, another memory form: the answer must be bit-identical
    ("read-only array", _readonly),
    ("non-contiguous view", _noncontiguous),
    ("Fortran-ordered array", np.asfortranarray),
    ("big-endian '>f8' array", _big_endian),
    ("nested Python list", lambda x: x.tolist()),
]
NUMERIC_DTYPES = [  # other number types holding the same (small integer) values
    ("float16", np.float16), ("float32", np.float32), ("int8", np.int8), ("int16", np.int16),
    ("int32", np.int32), ("int64", np.int64), ("longdouble", np.longdouble),
]
NONNEGATIVE_DTYPES = [("uint8", np.uint8), ("uint64", np.uint64)]


def refused_forms(param):
    """Forms of a dense numeric parameter that are refused: (label, transform, exception, regex)."""
    name = f"'{param}'"
    numbers = rf"{name} must (hold|be an array of) (real )?numbers; got"
    return [
        ("object dtype", lambda x: x.astype(object), TypeError, rf"{numbers} (dtype )?object"),
        ("strings", lambda x: x.astype(str), TypeError, rf"{numbers} (dtype )?<U"),
        ("complex", lambda x: x.astype(complex), TypeError, rf"{numbers} (complex dtype|dtype complex)"),
        ("masked array", lambda x: np.ma.masked_array(x, mask=np.ones_like(x, bool)), TypeError,
         rf"{name} is a NumPy masked array"),
        ("ragged nested list", lambda x: [list(r) for r in x[:-1]] + [list(x[-1][:-1])], TypeError,
         rf"{name} must be a rectangular array"),
    ]


def dense_cases(function, param, run, clean, nonnegative=False, bool_ok=True, refused=True):
    """Cases for one dense numeric parameter: run(value) calls the function, `clean` is the value."""
    out = []
    for label, transform in LAYOUTS:
        out.append(Case(function, f"'{param}' as a {label}", lambda t=transform: run(t(clean)), "answer",
                        lambda: run(clean)))
    for label, dtype in NUMERIC_DTYPES + (NONNEGATIVE_DTYPES if nonnegative else []):
        out.append(Case(function, f"'{param}' as {label}", lambda d=dtype: run(clean.astype(d)), "answer",
                        lambda: run(clean)))
    if bool_ok:
        out.append(Case(function, f"'{param}' as bool (True = 1.0)", lambda: run(clean != 0), "answer",
                        lambda: run((clean != 0).astype(np.float64))))
    if refused:
        for label, transform, exception, regex in refused_forms(param)[:None if clean.ndim == 2 else -1]:
            out.append(Case(function, f"'{param}' as {label}", lambda t=transform: run(t(clean)), "error", regex,
                            exception))
    return out


# hostile forms of a clean sparse matrix: same entries, another structure
def _unsorted(X):
    X = sp.csr_array(X, copy=True)
    for row in range(X.shape[0]):
        start, stop = X.indptr[row], X.indptr[row + 1]
        X.indices[start:stop] = X.indices[start:stop][::-1].copy()
        X.data[start:stop] = X.data[start:stop][::-1].copy()
    X.has_sorted_indices = False
    return X


def _duplicated(X):
    """Each entry v stored twice as v/2 (exact for these values)."""
    C = sp.coo_array(X)
    return sp.coo_array((np.r_[C.data / 2, C.data / 2], (np.r_[C.row, C.row], np.r_[C.col, C.col])), shape=X.shape)


def _explicit_zeros(X):
    C = sp.coo_array(X)
    zeros = np.argwhere(np.asarray(X) == 0)[:3]
    return sp.csr_array((np.r_[C.data, np.zeros(len(zeros))], (np.r_[C.row, zeros[:, 0]], np.r_[C.col, zeros[:, 1]])),
                        shape=X.shape)


def _int64_indices(X):
    X = sp.csr_array(X)
    X.indices, X.indptr = X.indices.astype(np.int64), X.indptr.astype(np.int64)
    return X


def _int32_indptr(X):
    X = sp.csr_array(X)
    X.indices, X.indptr = X.indices.astype(np.int32), X.indptr.astype(np.int32)
    return X


SPARSE_FORMS = [
    ("csr_matrix", sp.csr_matrix), ("csr_array", sp.csr_array), ("csc_array", sp.csc_array),
    ("csc_matrix", sp.csc_matrix), ("coo_array", sp.coo_array), ("coo_matrix", sp.coo_matrix),
    ("lil_array", sp.lil_array), ("dok_array", sp.dok_array), ("bsr_array", sp.bsr_array),
    ("dia_array", sp.dia_array), ("dense ndarray", np.asarray),
    ("CSR with unsorted indices", _unsorted), ("COO with duplicate entries (summed)", _duplicated),
    ("CSR with explicit zeros", _explicit_zeros), ("CSR with int64 indices and indptr", _int64_indices),
    ("CSR with int32 indptr", _int32_indptr), ("read-only dense array", _readonly),
    ("float32 CSR", lambda X: sp.csr_array(X, dtype=np.float32)),
    ("int8 CSR", lambda X: sp.csr_array(X, dtype=np.int8)),
    ("bool CSR (binary)", None),
]


def sparse_cases(function, param, run, clean):
    out = []
    for label, transform in SPARSE_FORMS:
        if transform is None:  # bool: the values become 1.0
            out.append(Case(function, f"'{param}' as a {label}", lambda: run(sp.csr_array(clean != 0)), "answer",
                            lambda: run(sp.csr_array((clean != 0).astype(np.float64)))))
        else:
            out.append(Case(function, f"'{param}' as a {label}", lambda t=transform: run(t(clean)), "answer",
                            lambda: run(sp.csr_array(clean))))

    def broken(kind):
        X = sp.csr_array(clean, copy=True)
        if kind == "index":
            X.indices[0] = clean.shape[1] + 3
        elif kind == "negative":
            X.indices[0] = -1
        elif kind == "float indptr":
            X.indptr = X.indptr.astype(np.float64)
        elif kind == "short data":
            X.data = X.data[:-1]
        elif kind == "block index":  # SciPy range-checks no hand-built BSR: its CSR had columns past the matrix
            X = sp.bsr_array(X.toarray(), blocksize=(1, 1))
            X.indices = X.indices + clean.shape[1]
        else:
            X.indptr[1] = X.indptr[2] + 1
        return X

    for kind, regex in (("index", rf"'{param}' has 1 column indices outside"),
                        ("negative", rf"'{param}' has 1 column indices outside"),
                        ("indptr", rf"'{param}' is not a valid CSR matrix: its indptr"),
                        ("float indptr", rf"'{param}' is not a valid CSR matrix: its indptr must be a 1-dimensional "
                                         "array of integers"),
                        ("short data", rf"'{param}' is not a valid CSR matrix: its data must be 1-dimensional with a "
                                       "value for each stored index"),
                        ("block index", rf"'{param}' has \d+ column indices outside")):
        exception = TypeError if kind == "float indptr" else ValueError
        name = "BSR" if kind == "block index" else "CSR"
        out.append(Case(function, f"'{param}' as a hand-built {name} with a bad {kind}",
                        lambda k=kind: run(broken(k)), "error", regex, exception))
    for label, value, exception, regex in (
            ("a 1-d array", clean[0], ValueError, rf"'{param}' must be a 2-dimensional matrix; got an array of shape"),
            ("a 3-d array", clean[None], ValueError, rf"'{param}' must be a 2-dimensional matrix; got an array of shape"),
            ("a complex CSR", sp.csr_array(clean.astype(complex)), TypeError, rf"'{param}' must hold real numbers"),
            ("a CSR of strings", clean.astype(str), TypeError, rf"'{param}' must hold numbers; got dtype <U"),
            ("a masked array", np.ma.masked_array(clean, mask=clean >= clean.max()), TypeError,  # masks something
             rf"'{param}' is a NumPy masked array"),
            ("a string", "X.npz", TypeError, rf"'{param}' must (hold numbers|be a pandas DataFrame)")):
        out.append(Case(function, f"'{param}' as {label}", lambda x=value: run(x), "error", regex, exception))
    return out


# ---------------------------------------------------------------------------------------------
def _nan_at(x, where=(0, 0), value=np.nan):
    x = np.array(x, dtype=np.float64)
    x[where] = value
    return x


def _calc_cases():
    f = "calc_reco_metrics"
    out = []
    out += dense_cases(f, "A", lambda A: calc(A=A), A0)
    out += dense_cases(f, "B", lambda B: calc(B=B), B0)
    out += dense_cases(f, "item_biases", lambda b: calc(A=None, B=None, item_biases=b), BIAS0, nonnegative=True)
    out += sparse_cases(f, "X_test", lambda X: calc_raw(X_test=X, X_train=sp.csr_array(XTR0)), XTE0)
    out += sparse_cases(f, "X_train", lambda X: calc_raw(X_train=X, X_test=sp.csr_array(XTE0)), XTR0)
    # values
    for label, value in (("NaN", np.nan), ("+inf", np.inf), ("-inf", -np.inf)):
        out.append(Case(f, f"'A' holding {label} (rule 4: that user's metrics are NaN, with a warning)",
                        lambda x=value: calc(A=_nan_at(A0, (1, 0), x)), "warning", r"rule 4 \(a NaN or infinite score"))
        out.append(Case(f, f"'X_test' holding {label}", lambda x=value: calc(X_test=_nan_at(XTE0, (0, 1), x)), "error",
                        r"'X_test' values must be finite"))
    out.append(Case(f, "no items at all", lambda: calc(X_train=XTR0[:, :0], X_test=XTE0[:, :0], B=B0[:0]), "error",
                    r"'X_test' must have at least one item \(column\) to rank; got shape \(5, 0\)"))
    out.append(Case(f, "'A' scaled by 1e38 (one factor: same order)", lambda: calc(A=A1 * 1e38, B=B1), "answer",
                    lambda: calc(A=A1, B=B1)))
    out.append(Case(f, "float32 'A' and 'B' of 1e38 (the float32 product overflows)",
                    lambda: calc(A=(A1 * 1e38).astype(np.float32), B=B1.astype(np.float32) * 1.5), "answer",
                    lambda: calc(A=A1, B=B1)))
    out.append(Case(f, "'A' scaled to denormals (one factor: same order)", lambda: calc(A=A1 * 5e-324, B=B1), "answer",
                    lambda: calc(A=A1, B=B1)))
    out.append(Case(f, "'A' with -0.0 for 0.0", lambda: calc(A=np.where(A0 == 0, -0.0, A0)), "answer",
                    lambda: calc(A=A0)))
    out.append(Case(f, "'X_test' gains of 1e38 (NDCG is scale-free)", lambda: calc(X_test=(XTE0 != 0) * 1e38),
                    "answer", lambda: calc(X_test=(XTE0 != 0) * 1.0), rtol=1e-15))
    out.append(Case(f, "'X_test' gains of 1e300", lambda: calc(X_test=(XTE0 != 0) * 1e300),
                    "answer", lambda: calc(X_test=(XTE0 != 0) * 1.0), rtol=1e-14))
    out.append(Case(f, "'X_test' gains of 1e308 (NDCG is scale-free)", lambda: calc(X_test=(XTE0 != 0) * 1e308),
                    "answer", lambda: calc(X_test=(XTE0 != 0) * 1.0)))
    out.append(Case(f, "'X_test' denormal gains (NDCG is scale-free)", lambda: calc(X_test=(XTE0 != 0) * 5e-324),
                    "answer", lambda: calc(X_test=(XTE0 != 0) * 1.0)))
    out.append(Case(f, "'X_test' denormal gains with gain='binary'", lambda: calc(X_test=(XTE0 != 0) * 5e-324,
                                                                                gain="binary"),
                    "answer", lambda: calc(X_test=(XTE0 != 0) * 1.0, gain="binary")))
    out.append(Case(f, "'X_test' as None", lambda: calc_raw(X_test=None), "error", r"'X_test' is required"))
    out.append(Case(f, "'X_train' as None (no training items)", lambda: calc_raw(X_train=None, X_test=XTE0), "answer",
                    lambda: calc(X_train=np.zeros_like(XTR0))))
    out.append(Case(f, "'X_test' with -0.0 entries (stored zeros)", lambda: calc(X_test=sp.csr_array(
        (np.r_[sp.csr_array(XTE0).data, -0.0], (np.r_[sp.coo_array(XTE0).row, 2], np.r_[sp.coo_array(XTE0).col, 0])),
        shape=XTE0.shape)), "answer", lambda: calc()))
    # shapes
    out.append(Case(f, "one user", lambda: calc(XTR0[:1], XTE0[:1], A0[:1]), "answer",
                    lambda: calc().iloc[:1]))
    out.append(Case(f, "X_test with no users (0 rows)", lambda: calc(XTR0[:0], XTE0[:0], A0[:0]), "answer",
                    lambda: calc().iloc[:0]))
    out.append(Case(f, "one item", lambda: calc(np.zeros((5, 1)), np.ones((5, 1)), A0, B0[:1], k=1), "warning",
                    r"rule 2 \(a pool"))
    out.append(Case(f, "'A' with too many rows", lambda: calc(A=np.vstack([A0, A0])), "error",
                    r"'A' must have one row per user of 'X_test' \(5\)"))
    out.append(Case(f, "'B' with too few rows", lambda: calc(B=B0[:-1]), "error",
                    r"'B' must have one row per item of 'X_test' \(7\)"))
    out.append(Case(f, "'A' with no factor column", lambda: calc(A=A0[:, :0], B=B0[:, :0]), "error",
                    r"'A' and 'B' must have at least one factor column"))
    out.append(Case(f, "'X_train' of another shape", lambda: calc(X_train=XTR0[:, :-1]), "error",
                    r"'X_train' must have shape \(5, 7\)"))
    out.append(Case(f, "'X_train' overlapping 'X_test'", lambda: calc(X_train=XTE0), "error",
                    r"'X_test' and 'X_train' share \d+ \(user, item\) pairs"))
    out.append(Case(f, "'item_biases' of the wrong length", lambda: calc(item_biases=BIAS0[:-1]), "error",
                    r"'item_biases' must have one entry per item of 'X_test' \(7\)"))
    out.append(Case(f, "'item_biases' as a column vector", lambda: calc(item_biases=BIAS0[:, None]), "answer",
                    lambda: calc(item_biases=BIAS0)))
    out.append(Case(f, "'A' as a sparse matrix", lambda: calc(A=sp.csr_array(A0)), "error",
                    r"'A' must be a dense array; got a SciPy sparse", TypeError))
    out.append(Case(f, "'k' as numpy.int64", lambda: calc(k=np.int64(3)), "answer", lambda: calc(k=3)))
    out.append(Case(f, "'k' as a bool", lambda: calc(k=True), "error", r"'k' must be", TypeError))
    out.append(Case(f, "'k' as a float", lambda: calc(k=3.0), "error", r"'k' must be", TypeError))
    out.append(Case(f, "'k' as 0", lambda: calc(k=0), "error", r"'k' must be"))
    out.append(Case(f, "'nthreads' as 0", lambda: calc(nthreads=0), "error", r"'nthreads' must be >= 1"))
    out.append(Case(f, "'seed' negative", lambda: calc(seed=-1), "error", r"'seed' must be an int in the range"))
    out.append(Case(f, "'batch_size' as 0", lambda: calc(batch_size=0), "error", r"'batch_size' must be an int"))
    out.append(Case(f, "'device' unknown", lambda: calc(device="tpu"), "error", r"'device' must be"))
    return out


def _evaluate_cases():
    f = "evaluate"
    out = dense_cases(f, "scores", lambda s: evaluate(s), SCORES0)
    out += sparse_cases(f, "X_test", lambda X: evaluate(X_test=X), XTE0)
    out += sparse_cases(f, "X_train", lambda X: evaluate(X_train=X), XTR0)
    g = "evaluate (score function)"
    for label, transform in LAYOUTS + [(name, lambda x, d=d: x.astype(d)) for name, d in NUMERIC_DTYPES]:
        out.append(Case(g, f"result as {label}", lambda t=transform: evaluate_fn(t), "answer", lambda: evaluate()))
    for label, transform, exception, regex in refused_forms("x")[:4]:
        regex = regex.replace("'x'", r"score_fn's result for \d+ users")
        out.append(Case(g, f"result as {label}", lambda t=transform: evaluate_fn(t), "error", regex, exception))
    for label, transform, regex in (
            ("too few columns", lambda x: x[:, :-1], r"score_fn's result for \d+ users must have shape"),
            ("transposed", lambda x: x.T, r"score_fn's result for \d+ users must have shape"),
            ("a 1-d row", lambda x: x[0], r"score_fn's result for \d+ users must have shape"),
            ("None", lambda x: None, r"score_fn's result for \d+ users must")):
        out.append(Case(g, f"result {label}", lambda t=transform: evaluate_fn(t), "error", regex,
                        (TypeError, ValueError)))
    out.append(Case(g, "result holding NaN (rule 4, with a warning)", lambda: evaluate_fn(lambda x: _nan_at(x, (0, 2))),
                    "warning", r"rule 4"))
    out.append(Case(f, "'scores' holding +inf for a pool item (rule 4, with a warning)",
                    lambda: evaluate(_nan_at(SCORES0, (0, 2), np.inf)), "warning", r"rule 4"))
    out.append(Case(f, "'scores' holding NaN only on training items (ignored)",
                    lambda: evaluate(_nan_at(SCORES0, (0, 0))), "answer", lambda: evaluate()))
    out.append(Case(f, "'scores' scaled by 1e300", lambda: evaluate(SCORES0 * 1e300), "answer", lambda: evaluate()))
    out.append(Case(f, "'scores' scaled to denormals", lambda: evaluate(SCORES0 * 5e-324), "answer",
                    lambda: evaluate()))
    out.append(Case(f, "'scores' with -0.0 for 0.0", lambda: evaluate(np.where(SCORES0 == 0, -0.0, SCORES0)), "answer",
                    lambda: evaluate()))
    out.append(Case(f, "'X_train' as None (no training items)", lambda: evaluate(X_train=None), "answer",
                    lambda: evaluate(X_train=np.zeros_like(XTR0))))
    out.append(Case(f, "'X_test' as None", lambda: evaluate(X_test=None), "error", r"'X_test' is required"))
    out.append(Case(f, "'scores' of the wrong shape", lambda: evaluate(SCORES0[:, :-1]), "error",
                    r"'scores' must have shape \(5, 7\)"))
    out.append(Case(f, "'scores' as a sparse matrix", lambda: evaluate(sp.csr_array(SCORES0)), "error",
                    r"'scores' must be a dense array \(a score for every item\); got a SciPy sparse csr matrix", TypeError))
    out.append(Case(f, "'metrics' unknown", lambda: evaluate(metrics=["MAP"]), "error", r"'metrics'"))
    out.append(Case(f, "'k' as a list with 0", lambda: evaluate(k=[0, 2]), "error", r"'k'"))
    out.append(Case(f, "'relevance_threshold' 10**400 (an int no float holds)", lambda: evaluate(
        relevance_threshold=10**400), "error", r"'relevance_threshold' must be a finite number or None", TypeError))
    out.append(Case(f, "'k' a 0-d array", lambda: evaluate(k=np.array(3)), "answer", lambda: evaluate(k=3)))
    for label, ids, shape in (("a str", "abcde", "a str"), ("2-d", np.arange(5)[None], r"shape \(1, 5\)"),
                              ("0-d", np.array(3), r"shape \(\)")):
        out.append(Case(f, f"'user_ids' {label}", lambda u=ids: evaluate(user_ids=u), "error",
                        rf"'user_ids' must be a 1-d sequence of ids, one per row of 'X_test' \(5\); got {shape}",
                        TypeError))
    out.append(Case(f, "'metrics' a cut-off in superscript ('NDCG@²')", lambda: evaluate(metrics=["NDCG@²"]), "error",
                    r"Metric 'NDCG@²' in 'metrics': the cut-off after '@' must be a positive int; got '²'"))
    out.append(Case(f, "'metrics' a beyond-accuracy metric ('Coverage@3')", lambda: evaluate(metrics=["Coverage@3"]),
                    "error", r"Metric 'Coverage@3' in 'metrics' is not available here\. It is a metric of top-K "
                    r"lists: gpureco\.beyond_accuracy computes it"))
    out.append(Case(f, "'X_test' a frame of interactions", lambda: evaluate(X_test=INTER0), "error",
                    r"'X_test' must be a matrix \(users x items\); got a frame of interactions", TypeError))
    return out


def evaluator(X_test=XTE0, X_train=XTR0, **kw):
    return gpureco.Evaluator(X_test, X_train, **{"metrics": EVERY_METRIC, "k": 3, "device": "cpu", "nthreads": 1,
                                                 **kw})


def evaluator_update(user_ids=(3, 0, 4), scores=None, then=None):
    """A fresh Evaluator updated once with `user_ids` and their rows of SCORES0 (or `scores`),
    then `then(ev)` (default: the results)."""
    ev = evaluator()
    ids = np.asarray(user_ids)
    ev.update(user_ids, SCORES0[ids.astype(np.int64)] if scores is None else scores)
    return ev.compute() if then is None else then(ev)


def _evaluator_cases():
    f = "Evaluator"
    out = dense_cases(f, "scores", lambda s: evaluator_update(range(5), s), SCORES0)
    out += [Case(f, "called with 'scores': the numbers of evaluate", lambda: evaluator()(SCORES0), "answer",
                 lambda: evaluate()),
            Case(f, "called with factors: the numbers of calc_reco_metrics", lambda: evaluator()(A0, B0),
                 "answer", lambda: calc())]
    for label, ids in (("a list", [3, 0, 4]), ("int32", np.array([3, 0, 4], np.int32)),
                       ("uint8", np.array([3, 0, 4], np.uint8)), ("a read-only array", _readonly(np.array([3, 0, 4]))),
                       ("a range", range(3, 5))):
        want = sorted(np.asarray(ids).tolist())
        out.append(Case(f, f"update's 'user_ids' as {label}", lambda i=ids: evaluator_update(i), "answer",
                        lambda w=want: evaluator()(SCORES0).iloc[w]))
    for label, ids, regex in (
            ("floats", [3.0, 0.0], r"'user_ids' must be a 1-d array of ints"),
            ("bools", [True, False], r"'user_ids' must be a 1-d array of ints"),
            ("strings", ["3", "0"], r"'user_ids' must be a 1-d array of ints"),
            ("2-d", [[3, 0]], r"'user_ids' must be a 1-d array of ints"),
            ("negative", [-1, 0], r"'user_ids' must be rows of X_test, in \[0, 4\]; got -1"),
            ("out of range", [0, 5], r"'user_ids' must be rows of X_test, in \[0, 4\]; got 5"),
            ("repeated", [3, 3], r"'user_ids' must be distinct")):
        out.append(Case(f, f"update's 'user_ids' {label}", lambda i=ids: evaluator_update(
            i, SCORES0[: len(np.ravel(i))]), "error", regex))
    out += [
        Case(f, "update's 'scores' with a row too few", lambda: evaluator_update([3, 0], SCORES0[:1]), "error",
             r"'scores' must have shape \(2, 7\); got \(1, 7\)"),
        Case(f, "update's 'scores' as a score function", lambda: evaluator_update([3], lambda u: SCORES0[u]), "error",
             r"got a callable", TypeError),
        Case(f, "update of a user already evaluated", lambda: evaluator_update(
            [3], then=lambda ev: ev.update([3], SCORES0[[3]])), "error", r"already evaluated since the last reset"),
        Case(f, "update of no user (empty 'user_ids')", lambda: evaluator_update(
            np.zeros(0, np.int64), np.zeros((0, N_ITEMS)), then=lambda ev: ev.summary()["users"]), "answer",
             lambda: 0.0),
        Case(f, "called with None", lambda: evaluator()(None), "error", r"Nothing to evaluate"),
        Case(f, "load_state of a list", lambda: evaluator().load_state([1, 2]), "error",
             r"'state' must be a dict with the keys"),
        Case(f, "load_state with 'values' of another shape", lambda: evaluator().load_state(
            {**evaluator().state(), "values": np.zeros((5, 1))}), "error", r"state\['values'\] must be a float array"),
        Case(f, "load_state with strings", lambda: evaluator().load_state(
            {**evaluator().state(), "evaluated": np.array(["1"] * 5)}), "error", r"state\['evaluated'\] must be an int"),
        Case(f, "merge of two states sharing a user", lambda: evaluator_update(
            [3], then=lambda ev: ev.merge(evaluator_update([3, 1], then=lambda other: other.state()))), "error",
             r"evaluated more than once"),
        Case(f, "'user_ids' of the wrong length", lambda: evaluator(user_ids=["a"]), "error",
             r"'user_ids' must hold one id per row of 'X_test' \(5\); got 1"),
        Case(f, "'output' unknown", lambda: evaluator(output="list"), "error", r"'output' must be one of"),
        Case(f, "'metrics' unknown", lambda: evaluator(metrics=["MAP"]), "error", r"'metrics'"),
        Case(f, "'gain' unknown", lambda: evaluator(gain="log"), "error", r"'gain' must be one of"),
    ]
    return out


def _top_k_cases():
    f = "top_k"
    out = dense_cases(f, "A", lambda A: top_k(A=A), A0)
    out += dense_cases(f, "B", lambda B: top_k(B=B), B0)
    out += sparse_cases(f, "X_train", lambda X: top_k(X_train=X), XTR0)[:-2]  # a 1-d/3-d X_train: below
    for label, users in (("int32", np.array([0, 3], np.int32)), ("uint8", np.array([0, 3], np.uint8)),
                         ("a list", [0, 3]), ("read-only", _readonly(np.array([0, 3])))):
        out.append(Case(f, f"'users' as {label}", lambda u=users: top_k(users=u), "answer",
                        lambda: top_k(users=np.array([0, 3]))))
    for label, users in (("out of range", [0, 5]), ("negative", [-1]), ("floats", [0.0, 1.0]), ("2-d", [[0, 1]]),
                         ("strings", ["a"])):
        out.append(Case(f, f"'users' {label}", lambda u=users: top_k(users=u), "error", r"'users' must be"))
    out.append(Case(f, "'users' empty", lambda: top_k(users=np.array([], np.int64)), "answer",
                    lambda: (np.zeros((0, 3), np.int64), np.zeros((0, 3)))))
    out.append(Case(f, "one item, k=1", lambda: top_k(B=B0[:1], X_train=None, k=1), "answer",
                    lambda: (np.zeros((5, 1), np.int64), SCORES0[:, :1].copy())))
    out.append(Case(f, "'k' larger than the catalogue", lambda: top_k(k=8), "error", r"'k' must be an int in the range"))
    out.append(Case(f, "'A' holding NaN", lambda: top_k(A=_nan_at(A0, (0, 0))), "answer",
                    lambda: top_k(A=_nan_at(A0, (0, 0)))))
    out.append(Case(f, "'X_train' of another shape", lambda: top_k(X_train=XTR0[:, :-1]), "error",
                    r"'X_train' must have shape \(5, 7\)"))
    out.append(Case(f, "no items at all", lambda: top_k(B=B0[:0], X_train=None, k=1), "error",
                    r"'B' must hold at least one item to list; got shape \(0, \d+\)"))
    out.append(Case(f, "'user_ids' of another length", lambda: top_k(user_ids=["a"], output="pandas"), "error",
                    r"'user_ids' must hold one id per row of 'A' \(5\); got 1 ids"))
    out.append(Case(f, "'A' 1-d", lambda: top_k(A=A0[:, 0]), "error", r"'A' must be 2-dimensional"))
    out.append(Case(f, "'B' 1-d", lambda: top_k(B=B0[:, 0]), "error", r"'B' must be 2-dimensional"))
    out.append(Case(f, "'A' as a scalar", lambda: top_k(A=1.0), "error", r"'A' must be 2-dimensional"))
    out.append(Case(f, "'A' as a string", lambda: top_k(A="A.npy"), "error", r"'A'", (TypeError, ValueError)))
    out.append(Case(f, "'item_biases' alone, no X_train", lambda: gpureco.top_k(None, None, 2, item_biases=BIAS0,
                                                                                device="cpu"),
                    "answer", lambda: top_k(A=np.zeros((1, 1)), B=np.zeros((7, 1)), k=2, X_train=None,
                                            item_biases=BIAS0)))
    return out


def _lists_cases():
    f = "evaluate_lists"
    out = []
    recs_s, truth_s = RECS0.assign(user=RECS0.user.astype(str)), TRUTH0.assign(user=TRUTH0.user.astype(str))

    def same_as(frame):
        return lambda: frame

    clean = lists()
    for label, recs, truth, expected in (
            ("str user ids in both", recs_s, truth_s, clean.set_axis(clean.index.astype(str))),
            ("int32 user ids", RECS0.astype({"user": np.int32}), TRUTH0.astype({"user": np.int32}), None),
            ("uint64 user ids", RECS0.astype({"user": np.uint64}), TRUTH0.astype({"user": np.uint64}), None),
            ("str item ids", RECS0.assign(item=RECS0.item.astype(str)), TRUTH0.assign(item=TRUTH0.item.astype(str)),
             clean),
            ("categorical user ids", RECS0.astype({"user": "category"}), TRUTH0.astype({"user": "category"}), None),
            ("nullable Int64 ids", RECS0.astype({"user": "Int64", "item": "Int64"}),
             TRUTH0.astype({"user": "Int64", "item": "Int64"}), None),
            ("float ranks 1.0, 2.0", RECS0.astype({"rank": float}), TRUTH0, clean),
            ("int8 ranks", RECS0.astype({"rank": np.int8}), TRUTH0, clean),
            ("float32 ratings", RECS0, TRUTH0.astype({"rating": np.float32}), clean),
            ("int ratings", RECS0, TRUTH0.astype({"rating": int}), clean),
            ("rows shuffled", RECS0.sample(frac=1, random_state=1), TRUTH0.sample(frac=1, random_state=2), clean),
            ("extra columns", RECS0.assign(other="x"), TRUTH0.assign(other=object()), clean),
            ("rank and score both, as top_k's frame (the ranks order; the scores agree)",
             RECS0.assign(score=[3.0, 2.0, 2.0, 5.0, 1.0, 0.0]), TRUTH0, clean),
            ("a non-default index", RECS0.set_axis(range(10, 16)), TRUTH0.set_axis(list("abcde")), clean),
    ):
        out.append(Case(f, label, lambda r=recs, t=truth: lists(r, t), "answer",
                        (lambda r=recs, t=truth: clean.set_axis(clean.index.astype(lists(r, t).index.dtype)))
                        if expected is None else same_as(expected)))
    for label, scale in (("ratings scaled by 2**1000", 2.0**1000), ("denormal ratings (scaled by 2**-1070)", 2.0**-1070)):
        out.append(Case(f, f"{label} (NDCG is scale-free)", lambda s=scale: lists(truth=TRUTH0.assign(
            rating=TRUTH0.rating * s)), "answer", lambda: clean))
    score_recs = RECS0.drop(columns="rank").assign(score=[3.0, 2.0, 1.0, 5.0, -1.0, 0.0])
    for label, scores in (("float16 scores", np.float16), ("int scores", np.int64), ("big-endian scores", ">f8")):
        out.append(Case(f, label, lambda d=scores: lists(score_recs.astype({"score": d})), "answer",
                        lambda: clean))
    out.append(Case(f, "scores of 1e308 and denormals (order kept)", lambda: lists(score_recs.assign(
        score=[1e308, 5e-324, -0.0, 1e308, -5e-324, 1.0])), "answer", lambda: clean))
    for label, recs, truth, regex, exception in (
            ("int user ids in recs, str in truth", RECS0, truth_s, r"'recs' and 'truth' must use the same type of "
                                                                  r"'user' ids", TypeError),
            ("str item ids in recs, int in truth", RECS0.assign(item=RECS0.item.astype(str)), TRUTH0,
             r"'recs' and 'truth' must use the same type of 'item' ids", TypeError),
            ("NaN user id in recs", RECS0.assign(user=[1, 1, 1, 2, 2, np.nan]), TRUTH0,
             r"'recs' column 'user' has 1 missing values", ValueError),
            ("None item id in truth", RECS0, TRUTH0.assign(item=[11, 14, None, 12, 10]),
             r"'truth' column 'item' has 1 missing values", ValueError),
            ("NaN rank", RECS0.assign(rank=[1, 2, np.nan, 1, 2, 1]), TRUTH0, r"'recs' column 'rank' must hold finite",
             ValueError),
            ("inf score", score_recs.assign(score=[np.inf, 1, 0, 1, 0, 1]), TRUTH0,
             r"'recs' column 'score' must hold finite", ValueError),
            ("ranks 1, 3 (gap)", RECS0.assign(rank=[1, 3, 4, 1, 2, 1]), TRUTH0, r"'recs' ranks must be 1, 2, \.\.\., n",
             ValueError),
            ("ranks 1.5", RECS0.assign(rank=[1.5, 2, 3, 1, 2, 1]), TRUTH0, r"'recs' ranks must be 1, 2, \.\.\., n",
             ValueError),
            ("string ranks", RECS0.assign(rank=RECS0["rank"].astype(str)), TRUTH0, r"'recs' column 'rank' must hold "
                                                                                    r"numbers", TypeError),
            ("bool ranks", RECS0.assign(rank=True), TRUTH0, r"'recs' column 'rank' must hold numbers", TypeError),
            ("complex ratings", RECS0, TRUTH0.assign(rating=TRUTH0.rating + 0j), r"'truth' column 'rating' must hold "
             r"real numbers; got dtype complex128", TypeError),
            ("rank and score that disagree (a stale column)", RECS0.assign(score=[1.0, 2.0, 3.0, 1.0, 2.0, 3.0]), TRUTH0,
             r"'recs' has both a 'rank' and a 'score' column, and they disagree: rank 2", ValueError),
            ("no user column", RECS0.drop(columns="user"), TRUTH0, r"'recs' must have the columns", ValueError),
            ("duplicate (user, item) in recs", pd.concat([RECS0, RECS0.iloc[:1].assign(rank=4)]), TRUTH0,
             r"'recs' has 1 duplicate \(user, item\) rows", ValueError),
            ("duplicate (user, item) in truth", RECS0, pd.concat([TRUTH0, TRUTH0.iloc[:1]]),
             r"'truth' has 1 duplicate \(user, item\) rows", ValueError),
            ("NaN rating", RECS0, TRUTH0.assign(rating=[1, np.nan, 1, 1, 1]), r"'truth' column 'rating' must hold finite",
             ValueError),
            ("ids of mixed types in one column", RECS0.assign(user=[1, 1, 1, "2", "2", 3]), TRUTH0,
             r"'recs' column 'user' must hold ids of one type", TypeError),
            ("a duplicated column name", pd.concat([RECS0, RECS0[["user"]]], axis=1), TRUTH0,
             r"'recs' has the column 'user' twice", ValueError),
            ("recs as a dict of strings", {1: "a"}, TRUTH0, r"'recs' as a dict must map each user to a list", TypeError),
            ("truth as a NumPy array", RECS0, TRUTH0.to_numpy(), r"'truth' must be a DataFrame", TypeError),
    ):
        out.append(Case(f, label, lambda r=recs, t=truth: lists(r, t), "error", regex, exception))
    # empty and tiny frames
    out.append(Case(f, "empty recs", lambda: lists(RECS0.iloc[:0], TRUTH0), "answer", lambda: clean.iloc[:0]))
    out.append(Case(f, "empty truth", lambda: lists(RECS0, TRUTH0.iloc[:0]), "answer", lambda: clean.iloc[:0]))
    out.append(Case(f, "one list of one item", lambda: lists(RECS0.iloc[5:], TRUTH0), "answer",
                    lambda: clean.loc[[3]]))
    # group_by
    runs = pd.concat([RECS0.assign(model="a"), RECS0.assign(model="b")], ignore_index=True)
    expected_runs = pd.concat({"a": clean, "b": clean}, names=["model"])
    out.append(Case(f, "group_by a str column", lambda: lists(runs, group_by="model"), "answer",
                    lambda: expected_runs))
    def flat(result):  # the run column as objects: pandas may give it the str dtype or not
        return result.reset_index().astype({"model": object})

    expected_nan = flat(pd.concat({"a": clean, np.nan: clean}, names=["model"]))
    out.append(Case(f, "group_by a column holding NaN (its own run, as groupby(dropna=False))",
                    lambda: flat(lists(runs.assign(model=runs.model.where(runs.model == "a", np.nan)),
                                       group_by="model")), "answer", lambda: expected_nan))
    out.append(Case(f, "group_by column also in truth, holding NaN",
                    lambda: flat(lists(runs.assign(model=runs.model.where(runs.model == "a", None)), group_by="model",
                                       truth=pd.concat([TRUTH0.assign(model="a"), TRUTH0.assign(model=None)]))),
                    "answer", lambda: expected_nan))
    out.append(Case(f, "group_by the same column twice", lambda: lists(runs, group_by=["model", "model"]), "error",
                    r"'group_by' must name each column once; got \['model', 'model'\]"))
    out.append(Case(f, "group_by 'user'", lambda: lists(runs, group_by="user"), "error",
                    r"'group_by' must name run columns other than"))
    out.append(Case(f, "group_by a missing column", lambda: lists(runs, group_by="fold"), "error",
                    r"'recs' must have the columns"))
    out.append(Case(f, "group_by not a str", lambda: lists(runs, group_by=3), "error", r"'group_by' must be",
                    TypeError))
    out.append(Case(f, "group_by column int in recs, str in truth",
                    lambda: lists(runs.assign(fold=1), TRUTH0.assign(fold="1"), group_by="fold"), "error",
                    r"'recs' and 'truth' must use the same type of 'fold' ids", TypeError))
    out.append(Case(f, "'k' as 0", lambda: lists(k=0), "error", r"'k'"))
    out.append(Case(f, "'metrics' ROC_AUC", lambda: lists(metrics="ROC_AUC"), "error", r"'metrics'"))
    return out


def _beyond_cases():
    f = "beyond_accuracy"
    out = []
    for label, transform in LAYOUTS[:3] + LAYOUTS[4:]:
        out.append(Case(f, f"'lists' as a {label}", lambda t=transform: beyond(t(LISTS0)), "answer", lambda: beyond()))
    for name in ("int8", "int16", "int32", "uint64"):
        data = LISTS0 if name != "uint64" else np.where(LISTS0 < 0, 5, LISTS0)
        out.append(Case(f, f"'lists' as {name}", lambda d=data, n=name: beyond(d.astype(n)), "answer",
                        lambda d=data: beyond(d.astype(np.int64))))
    out.append(Case(f, "'lists' as a big-endian '>i8' array", lambda: beyond(LISTS0.astype(">i8")), "answer",
                    lambda: beyond()))
    for label, value, exception, regex in (
            ("float", LISTS0.astype(float), TypeError, r"'lists' must be a 2-dimensional int array"),
            ("bool", LISTS0 > 0, TypeError, r"'lists' must be a 2-dimensional int array"),
            ("object", LISTS0.astype(object), TypeError, r"'lists' must be a 2-dimensional int array"),
            ("strings", LISTS0.astype(str), TypeError, r"'lists' must be a 2-dimensional int array"),
            ("1-d", LISTS0[0], TypeError, r"'lists' must be a 2-dimensional int array"),
            ("masked", np.ma.masked_array(LISTS0, mask=LISTS0 < 0), TypeError, r"'lists' is a NumPy masked array"),
            ("ragged list", [[0, 1], [2]], TypeError, r"'lists' must be a rectangular array"),
            ("items out of range", LISTS0 + 3, ValueError, r"'lists' must hold item indices in \[0, 5\]"),
            ("-2", LISTS0 - 1, ValueError, r"'lists' must hold item indices in \[0, 5\]"),
            ("a repeated item", np.array([[0, 0, 1]]), ValueError, r"'lists' must not hold an item twice"),
            ("a sparse matrix", sp.csr_array(LISTS0 + 1), TypeError, r"'lists' must be")):
        out.append(Case(f, f"'lists' as {label}", lambda x=value: beyond(x), "error", regex, exception))
    out.append(Case(f, "'lists' empty (0 users)", lambda: beyond(LISTS0[:0], baseline=BASE0[:0]), "answer",
                    lambda: {"Coverage@3": 0.0, "Gini@3": np.nan, "Entropy@3": 0.0,
                             **{f"{m}@3": np.zeros(0) for m in ("Surprisal", "ARP", "Tail", "ILD",
                                                                  "Unexpectedness")}}))
    out.append(Case(f, "'lists' all -1 (empty lists: NaN per docs)", lambda: beyond(np.full((1, 3), -1),
                                                                                  baseline=BASE0[:1]),
                    "answer", lambda: {"Coverage@3": 0.0, "Gini@3": np.nan, "Entropy@3": 0.0,
                                       **{f"{m}@3": np.array([np.nan]) for m in ("Surprisal", "ARP", "Tail", "ILD",
                                                                                   "Unexpectedness")}}))
    for label, transform in (("int", lambda p: p.astype(int)), ("float32", lambda p: p.astype(np.float32)),
                             ("a list", lambda p: p.tolist()), ("big-endian", lambda p: p.astype(">f8")),
                             ("read-only", _readonly), ("non-contiguous", lambda p: np.repeat(p, 2)[::2])):
        out.append(Case(f, f"'popularity' as {label}", lambda t=transform: beyond(popularity=t(POP0)), "answer",
                        lambda: beyond()))
    for label, value, exception, regex in (
            ("NaN", _nan_at(POP0, 0), ValueError, r"'popularity' must hold n_items=6 finite, non-negative"),
            ("-inf", _nan_at(POP0, 0, -np.inf), ValueError, r"'popularity' must hold n_items=6 finite"),
            ("negative", POP0 - 1, ValueError, r"'popularity' must hold n_items=6 finite, non-negative"),
            ("the wrong length", POP0[:-1], ValueError, r"'popularity' must hold n_items=6"),
            ("strings", POP0.astype(str), TypeError, r"'popularity' must hold numbers"),
            ("object", POP0.astype(object), TypeError, r"'popularity' must hold numbers"),
            ("complex", POP0.astype(complex), TypeError, r"'popularity' must hold real numbers"),
            ("masked", np.ma.masked_array(POP0, mask=POP0 > 2), TypeError, r"'popularity' is a NumPy masked array"),
            ("2-d", POP0[None], ValueError, r"'popularity' must hold n_items=6")):
        out.append(Case(f, f"'popularity' {label}", lambda x=value: beyond(popularity=x), "error", regex, exception))
    out.append(Case(f, "'popularity' of 1e300 and 'n_train_users' of 1e301 (ARP, Surprisal)",
                    lambda: beyond(popularity=POP0 * 1e300, n_train_users=10**301), "answer",
                    lambda: {**beyond(), "ARP@3": beyond()["ARP@3"] * 1e300,
                             "Surprisal@3": beyond(popularity=POP0 * 1e300, n_train_users=10**301)["Surprisal@3"]},
                    rtol=1e-15))
    out.append(Case(f, "'popularity' above 'n_train_users' (Surprisal's log2(N / c) would be negative)",
                    lambda: beyond(popularity=POP0 * 3), "error",
                    r"'popularity' counts training users, at most n_train_users=10 .*; got 15.0 for item 0"))
    for label, transform in (("float32", lambda x: x.astype(np.float32)), ("int", lambda x: x.astype(int)),
                             ("Fortran-ordered", np.asfortranarray), ("big-endian", lambda x: x.astype(">f8"))):
        out.append(Case(f, f"'item_vectors' as {label}", lambda t=transform: beyond(item_vectors=t(VEC0)), "answer",
                        lambda: beyond()))
    for label, value, exception, regex in (
            ("NaN for a listed item", _nan_at(VEC0, (0, 0)), ValueError, r"'item_vectors' of listed items must be "
                                                                         r"finite and non-zero"),
            ("zero for a listed item", _nan_at(VEC0, 0, 0.0), ValueError, r"'item_vectors' of listed items"),
            ("the wrong shape", VEC0[:-1], ValueError, r"'item_vectors' must have shape \(n_items=6, d\)"),
            ("strings", VEC0.astype(str), TypeError, r"'item_vectors' must hold numbers"),
            ("masked", np.ma.masked_array(VEC0, mask=VEC0 > 2), TypeError, r"'item_vectors' is a NumPy masked")):
        out.append(Case(f, f"'item_vectors' {label}", lambda x=value: beyond(item_vectors=x), "error", regex,
                        exception))
    for label, scale, rtol in (("2**600", 2.0**600, 0.0), ("2**-1000", 2.0**-1000, 0.0), ("1e200", 1e200, 1e-13)):
        out.append(Case(f, f"'item_vectors' scaled by {label} (cosines are scale-free; squares would overflow or "
                        "vanish)", lambda s=scale: beyond(item_vectors=VEC0 * s), "answer", lambda: beyond(), rtol=rtol))
    out.append(Case(f, "'item_vectors' NaN for an unlisted item (unused)", lambda: beyond(
        item_vectors=_nan_at(VEC0, (5, 0))), "answer", lambda: beyond()))
    out.append(Case(f, "'baseline' with fewer rows", lambda: beyond(baseline=BASE0[:2]), "error",
                    r"'baseline' must have one row per row of 'lists'"))
    out.append(Case(f, "'n_items' as a float", lambda: beyond(n_items=6.0), "error", r"'n_items' must be an int",
                    TypeError))
    out.append(Case(f, "'n_items' of 2**62", lambda: beyond(n_items=2**62), "error",
                    r"'n_items' must be an int in the range \[1, 2147483647\]; got 4611686018427387904"))
    out.append(Case(f, "'n_train_users' as 1", lambda: beyond(n_train_users=1), "error", r"'n_train_users' must be"))
    out.append(Case(f, "'head_fraction' as 1", lambda: beyond(head_fraction=1.0), "error", r"'head_fraction' must be"))
    return out


def _stats_cases():
    out = []
    clean_s, clean_c = summarize(), compare()
    for label, transform in (("float32 columns", lambda d: d.astype(np.float32)),
                             ("int columns", lambda d: (d * 2).astype(int) / 2),
                             ("big-endian columns", lambda d: d.astype(">f8")),
                             ("str index", lambda d: d.set_axis(d.index.astype(str))),
                             ("extra non-metric column dropped", lambda d: d)):
        out.append(Case("summarize", f"'per_user' with {label}", lambda t=transform: summarize(t(PER_USER_A)),
                        "answer", lambda: clean_s))
    out.append(Case("summarize", "'per_user' holding NaN (left out, as documented)",
                    lambda: summarize(pd.concat([PER_USER_A, pd.DataFrame({"P@2": [np.nan], "R@2": [np.nan]},
                                                                         index=pd.Index([9], name="user"))])),
                    "answer", lambda: clean_s.assign(n_nan=1)))
    out.append(Case("summarize", "'per_user' with 0 rows", lambda: summarize(PER_USER_A.iloc[:0]), "answer",
                    lambda: summarize(PER_USER_A.iloc[:0])))
    for label, value, exception, regex in (
            ("strings", PER_USER_A.astype(str), TypeError, r"'per_user' column 'P@2' must hold numbers"),
            ("bools", PER_USER_A > 0, TypeError, r"'per_user' column 'P@2' must hold numbers"),
            ("+inf", PER_USER_A.assign(**{"P@2": [np.inf, 0, 0, 0, 0]}), ValueError,
             r"'per_user' column 'P@2' must hold finite numbers or NaN; got 1 infinite"),
            ("a NumPy array", PER_USER_A.to_numpy(), TypeError, r"'per_user' must be a DataFrame"),
            ("a duplicated column name", pd.concat([PER_USER_A, PER_USER_A[["P@2"]]], axis=1), ValueError,
             r"'per_user' has the column 'P@2' twice")):
        out.append(Case("summarize", f"'per_user' as {label}", lambda x=value: summarize(x), "error", regex,
                        exception))
    out.append(Case("summarize", "'confidence' 1", lambda: summarize(confidence=1.0), "error", r"'confidence' must be"))
    out.append(Case("summarize", "'by' a missing column", lambda: summarize(by="fold"), "error", r"'by'"))
    for label, a, b in (("float32 columns", PER_USER_A.astype(np.float32), PER_USER_B),
                        ("rows in another order", PER_USER_A, PER_USER_B.iloc[::-1]),
                        ("big-endian columns", PER_USER_A.astype(">f8"), PER_USER_B.astype(">f8"))):
        out.append(Case("compare", f"'per_user' with {label}", lambda x=a, y=b: compare(x, y), "answer",
                        lambda: clean_c))
    for label, a, b, exception, regex in (
            ("int user ids in one, str in the other", PER_USER_A, PER_USER_B.set_axis(PER_USER_B.index.astype(str)),
             ValueError, r"'per_user' \(argument 1 of compare\) and 'per_user' \(argument 2 of compare\) must index "
                         r"the same users"),
            ("a repeated user", PER_USER_A, pd.concat([PER_USER_B, PER_USER_B.iloc[:1]]), ValueError,
             r"'per_user' \(argument 2 of compare\) must have one row per user"),
            ("strings", PER_USER_A, PER_USER_B.astype(str), TypeError,
             r"'per_user' \(argument 2 of compare\) column 'P@2' must hold numbers"),
            ("a NumPy array", PER_USER_A.to_numpy(), PER_USER_B, TypeError,
             r"'per_user' \(argument 1 of compare\) must be a DataFrame"),
            ("no shared column", PER_USER_A[["P@2"]], PER_USER_B[["R@2"]], ValueError, r"share no metric column"),
            ("a duplicated column name", pd.concat([PER_USER_A, PER_USER_A[["P@2"]]], axis=1), PER_USER_B, ValueError,
             r"'per_user' \(argument 1 of compare\) has the column 'P@2' twice"),
            ("+inf", PER_USER_A.assign(**{"P@2": [np.inf, 0, 0, 0, 0]}), PER_USER_B, ValueError,
             r"'per_user' \(argument 1 of compare\) column 'P@2' must")):
        out.append(Case("compare", f"'per_user' with {label}", lambda x=a, y=b: compare(x, y), "error", regex,
                        exception))
    out.append(Case("compare", "'names' repeated", lambda: compare(names=["a", "a"]), "error", r"'names' must hold 2"))
    out.append(Case("compare", "'names' as a str", lambda: compare(names="ab"), "error", r"'names' must be",
                    TypeError))
    out.append(Case("compare", "one frame", lambda: gpureco.compare(PER_USER_A), "error", r"at least 2"))
    md = gpureco.to_markdown
    out.append(Case("to_markdown", "NaN, inf, -0.0, 1e38 and a denormal",
                    lambda: md(pd.DataFrame({"x": [np.nan, np.inf, -0.0, 1e38, 5e-324]}), digits=3), "answer",
                    lambda: "| x |\n|---:|\n| NaN |\n| inf |\n| -0 |\n| 1e+38 |\n| 4.94e-324 |"))
    out.append(Case("to_markdown", "a '|' in a cell, bools and None",
                    lambda: md(pd.DataFrame({"a|b": ["x|y", None], "ok": [True, False]})), "answer",
                    lambda: "| a\\|b | ok |\n|:---|:---|\n| x\\|y | True |\n| NaN | False |"))
    out.append(Case("to_markdown", "an empty frame", lambda: md(pd.DataFrame({"x": []})), "answer",
                    lambda: "| x |\n|---:|"))
    out.append(Case("to_markdown", "a float32 column", lambda: md(pd.DataFrame({"x": np.float32([0.1])})), "answer",
                    lambda: "| x |\n|---:|\n| 0.1 |"))
    out.append(Case("to_markdown", "'df' as a dict", lambda: md({"x": [1]}), "error", r"'df' must be a pandas",
                    TypeError))
    out.append(Case("to_markdown", "'digits' 0", lambda: md(PER_USER_A, digits=0), "error", r"'digits' must be"))
    return out


def _data_cases():
    out = []
    f = "split_reco_train_test"
    out += [c for c in sparse_cases(f, "X", lambda X: split_reco(X), XSPLIT0)
            if "float32" not in c.description and "None" not in c.description]
    out.append(Case(f, "'X' as a float32 CSR (kept float32)", lambda: split_reco(sp.csr_array(XSPLIT0, dtype="f4")),
                    "answer", lambda: tuple(sp.csr_array(X, dtype=np.float32) for X in split_reco())))
    out.append(Case(f, "'X' holding NaN", lambda: split_reco(_nan_at(XSPLIT0)), "error", r"'X' values must be finite"))
    out.append(Case(f, "'X' with no entries", lambda: split_reco(np.zeros((3, 4))), "error",
                    r"'X' must have stored non-zero entries"))
    out.append(Case(f, "'X' with one user ('separated')", lambda: split_reco(XSPLIT0[:1], split_type="separated"),
                    "error", r"'X' must have at least 2 rows"))
    out.append(Case(f, "'X' as None", lambda: split_reco(None), "error", r"'X'", TypeError))
    out.append(Case(f, "'X' a frame of interactions", lambda: split_reco(INTER0), "error",
                    r"'X' must be a matrix \(users x items\); got a frame of interactions .*gpureco.to_csr", TypeError))
    out.append(Case(f, "'split_type' unknown", lambda: split_reco(split_type="random"), "error", r"'split_type'"))
    out.append(Case(f, "'items_test_fraction' 1", lambda: split_reco(items_test_fraction=1.0), "error",
                    r"'items_test_fraction'"))
    for name, split in SPLITTERS.items():
        if name != "split_last_per_user":  # by time: frames only
            out += [c for c in sparse_cases(name, "data", lambda X, s=split: s(X), XSPLIT0)
                    if "float32" not in c.description and "int8" not in c.description]
            out.append(Case(name, "'data' holding NaN", lambda s=split: s(_nan_at(XSPLIT0)), "error",
                            r"'data' values must be finite"))
        out += _frame_split_cases(name, lambda d, s=split: s(d))
    out += _frame_split_cases("split_time_cutoff", split_time)
    for label, cutoff in (("NaN", float("nan")), ("NaT", pd.NaT)):
        out.append(Case("split_time_cutoff", f"'cutoff' {label}", lambda c=cutoff: split_time(cutoff=c), "error",
                        r"'cutoff' must be a time or number; got (nan|NaT)"))
    out.append(Case("split_time_cutoff", "'cutoff' a str for int timestamps", lambda: split_time(cutoff="6"), "error",
                    r"'cutoff' must be comparable", TypeError))
    out.append(Case("split_time_cutoff", "'data' a sparse matrix", lambda: split_time(sp.csr_array(XSPLIT0)), "error",
                    r"'data' must be a pandas DataFrame with a 'timestamp' column", TypeError))
    out.append(Case("split_time_cutoff", "datetime timestamps", lambda: split_time(
        INTER0.assign(timestamp=pd.to_datetime(INTER0.timestamp, unit="s")), cutoff=pd.Timestamp(6, unit="s")),
        "answer", lambda: tuple(d.assign(timestamp=pd.to_datetime(d.timestamp, unit="s")) for d in split_time())))
    out += _csr_cases()
    out += _dataset_cases()
    return out


def _frame_split_cases(name, run):
    def as_frames(result):
        return result

    out = []
    for label, data in (("str user ids", INTER0.assign(user=INTER0.user.astype(str))),
                        ("int8 user ids", INTER0.astype({"user": np.int8})),
                        ("a non-default index", INTER0.set_axis(range(100, 110))),
                        ("rows shuffled", INTER0.sample(frac=1, random_state=3))):
        out.append(Case(name, f"'data' with {label}", lambda d=data: run(d), "answer", lambda d=data: run(d),
                        ))
    for label, data, exception, regex in (
            ("a NaN user id", INTER0.assign(user=INTER0.user.where(INTER0.index != 2)), ValueError,
             r"'data' column 'user' has 1 missing values"),
            ("a repeated (user, item) pair", pd.concat([INTER0, INTER0.iloc[:1]]), ValueError,
             r"'data' must hold each \(user, item\) pair once"),
            ("no item column", INTER0.drop(columns="item"), ValueError, r"'data' must have the column\(s\) 'item'"),
            ("a duplicated column name", pd.concat([INTER0, INTER0[["user"]]], axis=1), ValueError,
             r"'data' has the column 'user' twice"),
            ("a dict", INTER0.to_dict("list"), TypeError, r"'data' must be a pandas DataFrame"),
            ("None", None, TypeError, r"'data' must be a pandas DataFrame")):
        out.append(Case(name, f"'data' with {label}", lambda d=data: run(d), "error", regex, exception))
    out.append(Case(name, "'data' a polars DataFrame", lambda: run(__import__("polars").from_pandas(INTER0)), "error",
                    r"'data' must be a pandas DataFrame .*; got a polars DataFrame \(its \.to_pandas\(\) is one\)",
                    TypeError))
    if name == "split_k_fold_users":
        out.append(Case(name, "'data' with 0 rows", lambda: run(INTER0.iloc[:0]), "error",
                        r"'n_folds' must be at most the number of users"))
    else:
        out.append(Case(name, "'data' with 0 rows", lambda: run(INTER0.iloc[:0]), "answer",
                        lambda: tuple(INTER0.iloc[:0] for _ in range(2))))
    return out


def _csr_cases():
    out = []
    f = "to_csr"
    train, test = INTER0.iloc[:6], INTER0.iloc[6:]
    X_train, X_test, ids = gpureco.to_csr(train, test)
    for label, a, b in (("str ids in both", train.astype({"user": str}), test.astype({"user": str})),
                        ("int8 and int64 user ids", train.astype({"user": np.int8}), test),
                        ("float32 values", train.astype({"value": np.float32}), test),
                        ("int values", train.astype({"value": int}), test)):
        out.append(Case(f, label, lambda x=a, y=b: gpureco.to_csr(x, y)[:2], "answer", lambda: (X_train, X_test)))
    for label, args, kwargs, exception, regex in (
            ("int user ids in one frame, str in the other", (train, test.astype({"user": str})), {}, TypeError,
             r"the frames passed to to_csr must use the same type of 'user' ids; got numbers in the first frame "
             r"passed to to_csr, strings in the second"),
            ("a NaN user id in the second frame", (train, test.assign(user=[3, np.nan, 3, 3])), {}, ValueError,
             r"the second frame passed to to_csr has 1 missing user ids"),
            ("NaN value", (train.assign(value=np.nan),), {}, ValueError,
             r"the first frame passed to to_csr: column 'value' must hold finite"),
            ("string values", (train.assign(value="x"),), {}, ValueError,
             r"the first frame passed to to_csr: column 'value' must hold finite"),
            ("no frame", (), {}, TypeError, r"to_csr needs at least one frame"),
            ("a NumPy array", (train.to_numpy(),), {}, TypeError,
             r"the first frame passed to to_csr must be a pandas DataFrame"),
            ("a duplicated column name", (pd.concat([train, train[["user"]]], axis=1),), {}, ValueError,
             r"the first frame passed to to_csr has the column 'user' twice"),
            ("an id outside 'ids'", (INTER0.assign(user=9),), {"ids": ids}, ValueError,
             r"the first frame passed to to_csr has 10 user ids not in 'ids'"),
            ("'ids' a tuple", (train,), {"ids": (ids.users, ids.items)}, TypeError, r"'ids' must be a gpureco.IdMap"),
            ("'ids' with a user twice", (train,), {"ids": gpureco.IdMap(ids.users.append(ids.users[:1]), ids.items)},
             ValueError, r"'ids' must hold distinct users; .* appears more than once"),
            ("'user' naming a missing column", (train,), {"user": "u"}, ValueError,
             r"the first frame passed to to_csr must have the column\(s\) 'u'"),
            ("'value' naming a missing column", (train,), {"value": "Value"}, ValueError,
             r"the first frame passed to to_csr has no column 'Value' \('value'\)"),
            ("complex values", (train.assign(value=train["value"] + 1j),), {}, TypeError,
             r"the first frame passed to to_csr: column 'value' must hold real numbers; got dtype complex128"),
            ("datetime values", (train.assign(value=pd.Timestamp("2024-01-01")),), {}, TypeError,
             r"the first frame passed to to_csr: column 'value' must hold real numbers; got dtype datetime64")):
        out.append(Case(f, label, lambda a=args, k=kwargs: gpureco.to_csr(*a, **k), "error", regex, exception))
    out.append(Case(f, "a frame with 0 rows", lambda: gpureco.to_csr(INTER0.iloc[:0])[0].shape, "answer",
                    lambda: (0, 0)))
    g = "from_csr"
    clean = gpureco.from_csr(X_train, ids)
    for label, transform in (("csr_matrix", sp.csr_matrix), ("COO", sp.coo_array), ("CSC", sp.csc_array),
                             ("unsorted CSR", _unsorted), ("int64 indices", _int64_indices)):
        out.append(Case(g, f"'X' as {label}", lambda t=transform: gpureco.from_csr(t(X_train), ids), "answer",
                        lambda: clean))
    out.append(Case(g, "'X' as a dense array", lambda: gpureco.from_csr(X_train.toarray(), ids), "answer",
                    lambda: clean))
    out.append(Case(g, "'X' with explicit zeros (kept, as stored)",
                    lambda: len(gpureco.from_csr(_explicit_zeros(X_train.toarray()))), "answer",
                    lambda: X_train.nnz + 3))
    for label, args, exception, regex in (
            ("'X' as a string", ("X",), TypeError, r"'X' must hold numbers"),
            ("'X' 1-d", (np.ones(3),), ValueError, r"'X' must be a 2-dimensional"),
            ("'X' of strings", (np.array([["a"]]),), TypeError, r"'X' must hold numbers"),
            ("'ids' smaller than 'X'", (sp.csr_array(np.ones((9, 9))), ids), ValueError,
             r"'ids' must label the 9 rows and 9 columns of 'X'"),
            ("'ids' a tuple", (X_train, (ids.users, ids.items)), TypeError, r"'ids' must be a gpureco.IdMap")):
        out.append(Case(g, label, lambda a=args: gpureco.from_csr(*a), "error", regex, exception))
    return out


def _dataset_cases():
    f = "datasets.make_interactions"
    out = []

    def make(**kw):
        return datasets.make_interactions(**{"n_users": 20, "n_items": 15, "mean_per_user": 6, "n_factors": 2,
                                             "min_per_user": 2, **kw})

    out.append(Case(f, "'n_users' as numpy.int64", lambda: make(n_users=np.int64(20)), "answer", lambda: make()))
    out.append(Case(f, "'mean_per_user' as numpy.float32", lambda: make(mean_per_user=np.float32(6)), "answer",
                    lambda: make()))
    for label, kwargs, exception, regex in (
            ("'n_users' 0", {"n_users": 0}, ValueError, r"'n_users' must be"),
            ("'n_users' a float", {"n_users": 20.0}, TypeError, r"'n_users' must be an int"),
            ("'n_items' a bool", {"n_items": True}, TypeError, r"'n_items' must be an int"),
            ("'mean_per_user' NaN", {"mean_per_user": np.nan}, ValueError, r"'mean_per_user' must be"),
            ("'mean_per_user' inf", {"mean_per_user": np.inf}, ValueError, r"'mean_per_user' must be"),
            ("'mean_per_user' a str", {"mean_per_user": "6"}, TypeError, r"'mean_per_user' must be a number"),
            ("'taste_strength' NaN", {"taste_strength": np.nan}, ValueError, r"'taste_strength' must be"),
            ("'popularity_exponent' -inf", {"popularity_exponent": -np.inf}, ValueError,
             r"'popularity_exponent' must be"),
            ("'popularity_exponent' 1e308", {"popularity_exponent": 1e308}, ValueError,
             r"'popularity_exponent' must be"),
            ("'seed' negative", {"seed": -1}, ValueError, r"'seed' must be"),
            ("'min_per_user' above n_items", {"min_per_user": 16}, ValueError, r"'min_per_user' must be")):
        out.append(Case(f, label, lambda k=kwargs: make(**k), "error", regex, exception))
    return out


FLAG = r"'{}' must be True or False; got {}"


def _option_cases():
    """The yes/no options (a string such as "no" is truthy: it must be refused, not obeyed), the
    NumPy bool and the integers 0 and 1 (accepted as themselves), and the newer choices: ties,
    convention, relevance_threshold."""
    out = []
    for f, run, flags in (
            ("calc_reco_metrics", calc, ("break_ties_with_noise", "consider_cold_start", "cumulative", "as_df",
                                         "rename_k", "all_metrics", "precision", "ndcg", "tf32")),
            ("evaluate", evaluate, ("break_ties_with_noise", "consider_cold_start")),
            ("Evaluator", lambda **kw: evaluator(**kw)(SCORES0), ("break_ties_with_noise", "tf32")),
            ("top_k", top_k, ("break_ties_with_noise", "tf32")),
            ("evaluate_lists", lists, ("include_missing",))):
        for flag in flags:
            for bad, shown in (("no", "'no'"), (None, "None"), (2, "2")):
                out.append(Case(f, f"'{flag}' = {bad!r}", lambda run=run, flag=flag, bad=bad: run(**{flag: bad}),
                                "error", FLAG.format(flag, re.escape(shown)), exception=TypeError))
        flag = flags[0]
        out.append(Case(f, f"'{flag}' = np.True_ (a NumPy bool)", lambda run=run, flag=flag: run(**{flag: np.True_}),
                        "answer", lambda run=run, flag=flag: run(**{flag: True})))
        out.append(Case(f, f"'{flag}' = 0 (an integer)", lambda run=run, flag=flag: run(**{flag: 0}), "answer",
                        lambda run=run, flag=flag: run(**{flag: False})))
    out.append(Case("Evaluator", "summary(counts='yes')", lambda: evaluator_update(then=lambda ev: ev.summary(counts="yes")), "error",
                    FLAG.format("counts", "'yes'"), exception=TypeError))
    for f, run in (("calc_reco_metrics", calc), ("evaluate", evaluate), ("Evaluator", evaluator),
                   ("evaluate_lists", lists)):
        out += [Case(f, "'ties' unknown", lambda run=run: run(ties="random"), "error", r"'ties' must be one of"),
                Case(f, "'convention' unknown", lambda run=run: run(convention="trec"), "error",
                     r"'convention' must be one of"),
                Case(f, "'convention' None", lambda run=run: run(convention=None), "error",
                     r"'convention' must be one of .*; got None"),
                Case(f, "'relevance_threshold' NaN", lambda run=run: run(relevance_threshold=float("nan")), "error",
                     r"'relevance_threshold' must be a finite number or None; got nan", exception=TypeError),
                Case(f, "'relevance_threshold' a string", lambda run=run: run(relevance_threshold="2"), "error",
                     r"'relevance_threshold' must be a finite number or None; got '2'", exception=TypeError)]
    out += [Case("calc_reco_metrics", "ties='optimistic' with break_ties_with_noise=True",
                 lambda: calc(ties="optimistic", break_ties_with_noise=True), "error",
                 r"ties='optimistic' orders equal scores by its own rule; break_ties_with_noise=True"),
            Case("calc_reco_metrics", "ties='average' with AP (not defined for it)",
                 lambda: calc(ties="average"), "error", r"ties='average' .* is defined for"),
            Case("top_k", "'ties' (not an option of top_k)", lambda: top_k(ties="optimistic"), "error",
                 r"unexpected keyword argument 'ties'", exception=TypeError)]
    return out


def all_cases():
    cases = (_calc_cases() + _evaluate_cases() + _evaluator_cases() + _top_k_cases() + _lists_cases() + _beyond_cases()
             + _stats_cases() + _data_cases() + _option_cases())
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids)), [i for i, n in collections.Counter(ids).items() if n > 1]
    return cases


CASES = all_cases()


# ---------------------------------------------------------------------------------------------
def assert_same(result, expected, rtol=0.0, path="result"):
    """Equality of results of any of the API's types; bit-identical floats (NaN == NaN) unless rtol."""
    if isinstance(expected, pd.DataFrame):
        assert isinstance(result, pd.DataFrame), f"{path}: a {type(result).__name__}, not a DataFrame"
        pd.testing.assert_frame_equal(result, expected, check_exact=rtol == 0, rtol=rtol or 1e-5)
    elif isinstance(expected, pd.Series):
        pd.testing.assert_series_equal(result, expected, check_exact=rtol == 0, rtol=rtol or 1e-5)
    elif isinstance(expected, dict):
        assert isinstance(result, dict) and list(result) == list(expected), f"{path}: keys {list(result)}"
        for key in expected:
            assert_same(result[key], expected[key], rtol, f"{path}[{key!r}]")
    elif isinstance(expected, (tuple, list)):
        assert isinstance(result, (tuple, list)) and len(result) == len(expected), f"{path}: {result!r}"
        for i, (r, e) in enumerate(zip(result, expected)):
            assert_same(r, e, rtol, f"{path}[{i}]")
    elif sp.issparse(expected):
        assert sp.issparse(result) and result.shape == expected.shape, f"{path}: {result!r}"
        assert result.dtype == expected.dtype, f"{path}: dtype {result.dtype} != {expected.dtype}"
        assert_same(sp.csr_array(result).toarray(), sp.csr_array(expected).toarray(), rtol, path)
    elif isinstance(expected, np.ndarray) or isinstance(result, np.ndarray):
        result, expected = np.asarray(result), np.asarray(expected)
        assert result.shape == expected.shape, f"{path}: shape {result.shape} != {expected.shape}"
        if expected.dtype.kind == "f" and result.dtype.kind == "f" and rtol:
            np.testing.assert_allclose(result, expected, rtol=rtol, err_msg=path)
        else:
            np.testing.assert_array_equal(result, expected, err_msg=path, strict=True)
    elif isinstance(expected, float) and np.isnan(expected):
        assert isinstance(result, float) and np.isnan(result), f"{path}: {result!r} is not NaN"
    else:
        assert result == expected, f"{path}: {result!r} != {expected!r}"


def _run(call):
    """call()'s result and the messages of the warnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = call()
    return result, [str(w.message) for w in caught]


def check(case):
    """Raises AssertionError unless the call has the case's outcome; any exception other than a
    TypeError or ValueError escapes (a crash)."""
    try:
        result, caught = _run(case.call)
    except (TypeError, ValueError) as error:
        assert case.outcome == "error", f"expected {case.outcome}; raised {type(error).__name__}: {error}"
        assert isinstance(error, case.exception), f"raised {type(error).__name__}, not {case.exception}: {error}"
        assert re.search(case.expect, str(error)), f"message {str(error)!r} does not match {case.expect!r}"
        return
    assert case.outcome != "error", f"no error raised; returned {result!r:.300}"
    if case.outcome == "warning":
        assert any(re.search(case.expect, m) for m in caught), f"no warning matching {case.expect!r}: {caught}"
        return
    expected, expected_caught = _run(case.expect)
    assert caught == expected_caught, f"warnings {caught} differ from the clean call's {expected_caught}"
    assert_same(result, expected, case.rtol)


def outcome_of(case):
    """What the call does now: ("answer", result), ("error", exception), ("warning", warning) or
    ("crash", exception)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = case.call()
        except (TypeError, ValueError) as error:
            return "error", error
        except Exception as error:  # noqa: BLE001 - a crash is what the suite looks for
            return "crash", error
    ours = [w for w in caught if not issubclass(w.category, (DeprecationWarning, PendingDeprecationWarning))]
    if ours:
        return "warning", ours[0].message
    return "answer", result


# ---------------------------------------------------------------------------------------------
OUTCOMES = ("answer", "error", "warning")


def page(cases=CASES):
    """docs/robustness-api.md: the table of cases, by function and outcome."""
    functions = list(dict.fromkeys(c.function for c in cases))
    known = [c for c in cases if c.known_failure]
    count = collections.Counter((c.function, c.outcome) for c in cases)
    lines = [
        "# Robustness of the Python API",
        "",
        "<!-- generated by `python tests/hostile_api_cases.py > docs/robustness-api.md`; "
        "tests/test_hostile_api.py checks it is current -->",
        "",
        "Every public function of `gpureco`, given hostile or extreme input (other dtypes and memory layouts,",
        "empty and one-element shapes, NaN, infinities, huge and denormal values, hand-built sparse",
        "structure, mixed or missing ids), must either return the documented answer or raise a",
        "`TypeError`/`ValueError` (or issue a documented warning) whose message names the parameter, what",
        "was expected and what was received. It must never return a silent wrong number, hang, or let",
        "another exception (IndexError, KeyError, a NumPy, pandas or SciPy error) escape.",
        "",
        "The cases are data, in `tests/hostile_api_cases.py`; `tests/test_hostile_api.py` runs each one:",
        "an **answer** is compared with the same call on a clean equivalent input (bit for bit) or with a",
        "hand-worked value; an **error** must be a `TypeError`/`ValueError` whose message matches a pattern",
        "naming the parameter; a **warning** must match its documented text. The same file adds",
        "property-based tests (hypothesis): random layout and dtype changes of a valid input give",
        "bit-identical results, random garbage values give the clean answer or a named error.",
        "",
        f"**{len(cases)} cases**: {sum(c.outcome == 'answer' for c in cases)} answer, "
        f"{sum(c.outcome == 'error' for c in cases)} error, {sum(c.outcome == 'warning' for c in cases)} warning; "
        f"{len(known)} known failures; 0 silent wrong numbers and 0 crashes among the others.",
        "",
        "| function | cases | answer | error | warning | known failures |",
        "|:---|---:|---:|---:|---:|---:|",
    ]
    for f in functions:
        lines.append(f"| `{f}` | {sum(count[f, o] for o in OUTCOMES)} | " + " | ".join(str(count[f, o]) for o in OUTCOMES)
                     + f" | {sum(1 for c in known if c.function == f)} |")
    lines += ["", "## Known failures", ""]
    if known:
        lines += ["Bugs outside the Python front doors, kept as strict expected failures until they are fixed:", ""]
        lines += [f"- `{c.function}`, {c.description}: {c.known_failure}" for c in known]
    else:
        lines.append("None.")
    for f in functions:
        lines += ["", f"## `{f}`", "", "| input | outcome |", "|:---|:---|"]
        for c in cases:
            if c.function == f:
                note = " (known failure)" if c.known_failure else ""
                lines.append(f"| {_escape(c.description)} | {c.outcome}{note} |")
    return "\n".join(lines) + "\n"


def _escape(text):
    return text.replace("|", "\\|").replace("*", "\\*").replace("_", "\\_")


if __name__ == "__main__":
    print(page(), end="")
