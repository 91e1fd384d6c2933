"""Every input error: raised before any work, naming the parameter, the expectation and the value."""
import numpy as np
import pytest
import scipy.sparse as sp

import gpureco
from gpu_model import model_device

rng = np.random.default_rng(0)
X_TRAIN = sp.csr_array(np.array([[1, 0, 0, 0, 0], [0, 1, 0, 0, 0], [0, 0, 0, 0, 0]], dtype=float))
X_TEST = sp.csr_array(np.array([[0, 1, 0, 0, 1], [0, 0, 1, 0, 0], [1, 0, 0, 0, 0]], dtype=float))
A = rng.standard_normal((3, 2))
B = rng.standard_normal((5, 2))


def bad_csr():
    X = sp.csr_array(X_TEST.copy())
    X.indices[0] = 7  # out of range, as a hand-built CSR can be
    return X


def negative_csr():
    X = sp.csr_array(X_TEST.copy())
    X.indices[1] = -1
    return X


CASES = [
    (dict(A=np.ma.masked_array(A, mask=A >= A.max())), TypeError,
     r"'A' is a NumPy masked array; gpureco does not read masks: fill the masked values"),
    (dict(X_test=np.ma.masked_array(X_TEST.toarray(), mask=X_TEST.toarray() > 0)), TypeError,
     r"'X_test' is a NumPy masked array"),
    (dict(k=0), ValueError, r"'k' must be an int in the range \[1, 5\]; got 0"),
    (dict(k=6), ValueError, r"'k' must be an int in the range \[1, 5\]; got 6"),
    (dict(k=2.5), TypeError, r"'k' must be an int; got 2.5"),
    (dict(A=rng.standard_normal((4, 2))), ValueError, r"'A' must have one row per user of 'X_test' \(3\); got shape \(4, 2\)"),
    (dict(B=rng.standard_normal((6, 2))), ValueError, r"'B' must have one row per item of 'X_test' \(5\); got shape \(6, 2\)"),
    (dict(B=rng.standard_normal((5, 3))), ValueError, r"'A' and 'B' must have the same number of factors"),
    (dict(B=None), ValueError, r"'A' and 'B' must both be given, or both be None"),
    (dict(A=None, B=None), ValueError, r"No model given"),
    (dict(item_biases=np.zeros(4)), ValueError, r"'item_biases' must have one entry per item of 'X_test' \(5\); got shape \(4,\)"),
    (dict(A=A.astype(complex)), TypeError, r"'A' must hold real numbers; got complex dtype complex128"),
    (dict(A=np.array([["a", "b"]] * 3)), TypeError, r"'A' must hold numbers; got dtype <U1"),
    (dict(X_train=X_TRAIN[:2]), ValueError, r"'X_train' must have shape \(3, 5\); got \(2, 5\)"),
    (dict(X_train=sp.csr_array(np.ones((3, 4)))), ValueError, r"'X_train' must have shape \(3, 5\); got \(3, 4\)"),
    (dict(X_test=X_TEST.astype(complex)), TypeError, r"'X_test' must hold real numbers; got complex dtype"),
    (dict(X_test=bad_csr()), ValueError, r"'X_test' has 1 column indices outside \[0, 4\] \(for example 7"),
    (dict(X_test=negative_csr()), ValueError, r"'X_test' has 1 column indices outside \[0, 4\] \(for example -1"),
    (dict(X_test=np.ones(5)), ValueError, r"'X_test' must be a 2-dimensional matrix; got an array of shape \(5,\)"),
    (dict(X_test=None), ValueError, r"'X_test' is required; got None"),
    (dict(X_test=sp.csr_array(np.array([[np.nan, 0, 0, 0, 0]] * 3))), ValueError, r"'X_test' values must be finite"),
    (dict(X_train=sp.csr_array(np.array([[1, 1, 0, 0, 1], [0, 0, 0, 0, 0], [0, 0, 0, 0, 0]], dtype=float))),
     ValueError, r"'X_test' and 'X_train' share 2 \(user, item\) pairs, for example user 0, item 1"),
    (dict(precision=False, average_precision=False, ndcg=False), ValueError, r"No metric selected: set at least one of precision=True"),
    (dict(nthreads=0), ValueError, r"'nthreads' must be >= 1, or negative as in joblib"),
    (dict(seed=-1), ValueError, r"'seed' must be an int in the range \[0, "),
    (dict(min_pos_test=-1), ValueError, r"'min_pos_test' must be an int in the range \[0, inf\]; got -1"),
    (dict(min_items_pool="2"), TypeError, r"'min_items_pool' must be an int; got '2'"),
    (dict(device="tpu"), ValueError, r"'device' must be one of 'auto', 'cpu', 'gpu', 'cuda:N'; got 'tpu'"),
    (dict(gain="log"), ValueError, r"'gain' must be one of 'linear', 'exponential', 'binary' \(or None: the convention's\); got 'log'"),
    (dict(batch_size=0), ValueError, r"'batch_size' must be an int in the range \[1, inf\]; got 0"),
    (dict(A=sp.csr_array(A)), TypeError, r"'A' must be a dense array; got a SciPy sparse csr matrix"),
    (dict(B=[[1.0, 2.0]] * 4 + [[1.0]]), TypeError, r"'B' must be a rectangular array of numbers"),
    (dict(A=np.zeros((3, 0)), B=np.zeros((5, 0))), ValueError, r"'A' and 'B' must have at least one factor column"),
    (dict(X_test=X_TEST * 2000.0, gain="exponential"), ValueError,
     r"gain='exponential' needs 'X_test' values below 1024 \(2\*\*v - 1 must be finite\); got a maximum of 2000.0"),
]


@pytest.mark.parametrize("change,error,message", CASES, ids=[c[2][:40] for c in CASES])
def test_calc_reco_metrics_rejects(change, error, message):
    kw = dict(X_train=X_TRAIN, X_test=X_TEST, A=A, B=B, k=2)
    kw.update(change)
    with pytest.raises(error, match=message):
        gpureco.calc_reco_metrics(**kw)


@pytest.mark.parametrize("change,error,message", [c for c in CASES if "device" not in c[0]],
                         ids=[c[2][:40] for c in CASES if "device" not in c[0]])
def test_calc_reco_metrics_rejects_the_same_on_the_gpu_backend(change, error, message, monkeypatch):
    """The same messages when the inputs go to a GPU (the NumPy model of one, whose asarray
    refuses strings with CuPy's own words): inputs are checked before they move."""
    kw = dict(X_train=X_TRAIN, X_test=X_TEST, A=A, B=B, k=2, device="gpu")
    kw.update(change)
    with model_device(monkeypatch), pytest.raises(error, match=message):
        gpureco.calc_reco_metrics(**kw)


X = sp.random(50, 20, density=0.3, format="csr", random_state=1)
SPLIT_CASES = [
    (dict(split_type="random"), ValueError, r"'split_type' must be one of 'all', 'separated', 'joined'; got 'random'"),
    (dict(items_test_fraction=0.0), ValueError, r"'items_test_fraction' must be a float in the open interval \(0, 1\); got 0.0"),
    (dict(items_test_fraction=1.5), ValueError, r"'items_test_fraction' must be a float in the open interval \(0, 1\); got 1.5"),
    (dict(users_test_fraction=1), ValueError, r"'users_test_fraction' must be a float in the open interval \(0, 1\); got 1"),
    (dict(users_test_fraction="a"), TypeError, r"'users_test_fraction' must be a float in \(0, 1\); got 'a'"),
    (dict(min_pos_test=20), ValueError, r"'min_pos_test' must be smaller than the number of items \(20\); got 20"),
    (dict(min_items_pool=25), ValueError, r"'min_items_pool' must be smaller than the number of items \(20\); got 25"),
    (dict(max_test_users=-3), ValueError, r"'max_test_users' must be an int in the range \[0, inf\]; got -3"),
    (dict(X=sp.csr_array((5, 5))), ValueError, r"'X' must have stored non-zero entries; got shape \(5, 5\) with 0 entries"),
    (dict(X=X[:1]), ValueError, r"'X' must have at least 2 rows for split_type='separated'; got 1"),
    (dict(X=X.astype(complex)), TypeError, r"'X' must hold real numbers"),
    (dict(min_pos_test=10, items_test_fraction=0.1), ValueError, r"No user meets the criteria for test inclusion"),
]


@pytest.mark.parametrize("change,error,message", SPLIT_CASES, ids=[c[2][:40] for c in SPLIT_CASES])
def test_split_rejects(change, error, message):
    kw = dict(X=X)
    kw.update(change)
    with pytest.raises(error, match=message):
        gpureco.split_reco_train_test(**kw)

