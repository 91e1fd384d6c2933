"""Shared by the tests of gpureco.dask: a small CPU LocalCluster (2 worker processes, as in CI) and
small problems with score ties, graded gains and NaN users."""
import contextlib
import warnings

import numpy as np
import scipy.sparse as sp

distributed = __import__("pytest").importorskip("distributed")


@contextlib.contextmanager
def local_client(n_workers=2, processes=True):
    """A Client on a fresh LocalCluster of `n_workers` CPU workers with one thread each."""
    with distributed.LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=processes,
                                  dashboard_address=":0") as cluster, distributed.Client(cluster) as client:
        yield client


def problem(seed=0, n_users=120, n_items=40, n_factors=3):
    """(X_train, X_test, A, B, item_biases): integer factors (many score ties), graded test values,
    and users without test items (NaN rule 1)."""
    rng = np.random.default_rng(seed)
    u = rng.random((n_users, n_items))
    X_train = sp.csr_array((u < 0.2).astype(np.float64))
    X_test = sp.csr_array(((u >= 0.2) & (u < 0.3)) * rng.integers(1, 4, size=u.shape).astype(np.float64))
    A = rng.integers(-2, 3, size=(n_users, n_factors)).astype(np.float64)
    B = rng.integers(-2, 3, size=(n_items, n_factors)).astype(np.float64)
    return X_train, X_test, A, B, rng.standard_normal(n_items)


def quietly(function, *args, **kwargs):
    """function(...) with gpureco's NaN warning silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return function(*args, **kwargs)
