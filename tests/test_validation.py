"""_validation.as_csr against a dense reference: whatever CSR (or other) layout comes in, the
copy is canonical and holds the same matrix, and the caller's object is left as it was."""
import numpy as np
import pytest
import scipy.sparse as sp

from gpureco._validation import as_csr


def messy_csr(rng, n_rows, n_cols, index_dtype, data_dtype, cls):
    """A hand-built CSR with unsorted columns, duplicates (some summing to zero), stored zeros,
    empty rows and storage past nnz; and its dense sum."""
    dense = np.zeros((n_rows, n_cols))
    indptr, indices, data = [0], [], []
    for r in range(n_rows):
        n = int(rng.integers(0, 6)) if rng.random() > 0.2 else 0
        cols = rng.integers(0, n_cols, n) if data_dtype != bool else rng.permutation(n_cols)[:n]
        if n and rng.random() < 0.5 and data_dtype != bool:  # a duplicate (SciPy's conversions OR booleans)
            cols = np.r_[cols, cols[0]]
        vals = rng.integers(-2, 3, cols.size).astype(data_dtype) if data_dtype != bool else rng.random(cols.size) < 0.7
        for c, v in zip(cols, vals):
            dense[r, c] += v
        indices += list(cols)
        data += list(vals)
        indptr.append(len(indices))
    extra = int(rng.integers(0, 3))  # storage past nnz, never read
    indices = np.array(indices + [n_cols + 5] * extra, dtype=index_dtype)  # out of range: must not be read
    data = np.array(data + [7] * extra, dtype=data_dtype)
    X = cls((data, indices, np.array(indptr, dtype=index_dtype)), shape=(n_rows, n_cols))
    X.has_canonical_format = False  # as SciPy may believe of a hand-built matrix
    return X, dense


@pytest.mark.parametrize("seed", range(12))
def test_as_csr_is_canonical_and_equal_to_the_dense_sum(seed):
    rng = np.random.default_rng(seed)
    n_rows, n_cols = int(rng.integers(1, 30)), int(rng.integers(1, 50))
    index_dtype = [np.int32, np.int64][seed % 2]
    data_dtype = [np.float64, np.float32, np.int8, bool][seed % 4]
    cls = [sp.csr_array, sp.csr_matrix][seed // 2 % 2]
    X, dense = messy_csr(rng, n_rows, n_cols, index_dtype, data_dtype, cls)
    before = [a.copy() for a in (X.data, X.indices, X.indptr)]
    nnz = X.indptr[-1]
    trimmed = type(X)((X.data[:nnz], X.indices[:nnz], X.indptr), shape=X.shape)  # SciPy's conversions need it
    for values in ("float64", "float"):
        for source in (X, trimmed.tocsc(), trimmed.tocoo(), dense):
            Y = as_csr(source, "X", values=values)
            np.testing.assert_array_equal(Y.toarray(), dense)
            assert Y.indices.dtype == np.int32 and Y.indptr.dtype == np.int64
            assert Y.indptr[-1] == Y.indices.size == Y.data.size  # nothing past nnz
            assert np.all(Y.data != 0)  # stored zeros and duplicates summing to zero dropped
            for r in range(n_rows):  # each row's columns strictly increasing
                assert np.all(np.diff(Y.indices[Y.indptr[r]:Y.indptr[r + 1]]) > 0)
            kept = values == "float" and np.dtype(data_dtype) in (np.float32, np.float64) and sp.issparse(source)
            assert Y.dtype == (data_dtype if kept else np.float64)
            assert Y.has_canonical_format
    for a, b in zip(before, (X.data, X.indices, X.indptr)):  # the caller's arrays untouched
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("layout", ["coo_array", "coo_matrix", "csc_array", "csc_matrix", "csr_array", "dense"])
def test_duplicates_are_summed_in_float64_in_every_layout(layout):
    """Duplicates are summed after the values become float64 (or stay float with values="float"), whatever the
    layout: converting a COO or CSC input to CSR first summed them in its own dtype (int8: 100 + 100 = -56, and
    -128 + -128 = 0, a test item dropped; float32: 3e38 + 3e38 = inf), where a CSR input's were summed in float64."""
    rows, cols = np.array([0, 0, 0, 1]), np.array([0, 0, 2, 1])
    for data, summed in ((np.array([100, 100, 1, -128], np.int8), [200.0, 1.0, -128.0]),
                         (np.array([-128, -128, 1, 5], np.int8), [-256.0, 1.0, 5.0]),
                         (np.array([3e38, 3e38, 1, 2], np.float32), [2 * float(np.float32(3e38)), 1.0, 2.0])):
        coo = sp.coo_array((data, (rows, cols)), shape=(2, 3))
        if layout == "dense":  # (no duplicates: the dense sum in float64)
            source = np.zeros((2, 3))
            np.add.at(source, (rows, cols), data.astype(np.float64))
        elif layout == "csr_array":
            source = sp.csr_array((data, np.array([0, 0, 2, 1]), np.array([0, 3, 4])), shape=(2, 3))
        elif layout.startswith("csc"):
            source = getattr(sp, layout)((data[[0, 1, 3, 2]], np.array([0, 0, 1, 0]), np.array([0, 2, 3, 4])),
                                         shape=(2, 3))
        else:
            source = coo if layout == "coo_array" else sp.coo_matrix(coo)
        Y = as_csr(source, "X")
        np.testing.assert_array_equal(Y.data, summed)
        np.testing.assert_array_equal(Y.indices, [0, 2, 1])
        assert np.asarray(source.data if sp.issparse(source) else source).dtype in (data.dtype, np.float64)
        if layout != "dense":  # the caller's values untouched
            np.testing.assert_array_equal(np.sort(source.data), np.sort(data))


def test_as_csr_copies_a_canonical_input():
    """A canonical float64 CSR with int32 indices, the one case where no conversion is needed:
    still a copy (the engine may change its arrays), not a view of the caller's."""
    X = sp.csr_array(np.array([[0, 1.5, 0], [2.0, 0, 3.0]]))
    X.indices, X.indptr = X.indices.astype(np.int32), X.indptr.astype(np.int64)
    Y = as_csr(X, "X")
    for a, b in ((Y.data, X.data), (Y.indices, X.indices), (Y.indptr, X.indptr)):
        assert not np.shares_memory(a, b)
    np.testing.assert_array_equal(Y.toarray(), X.toarray())


def test_a_frame_of_interactions_is_refused_where_a_matrix_is_wanted_and_a_pivot_is_not():
    """A frame with a user and an item column is a list of interactions: as a matrix it would be read as its
    numbers (rows x 4 columns). A dense matrix as a DataFrame (a pivot: item labels as columns) is a matrix."""
    import pandas as pd
    interactions = pd.DataFrame({"userId": [0, 1], "movieId": [1, 0], "rating": [4.0, 5.0]})
    with pytest.raises(TypeError, match=r"'X' must be a matrix \(users x items\); got a frame of interactions"):
        as_csr(interactions, "X")
    pivot = pd.DataFrame(np.eye(2), columns=["item_1", "user_score"])
    np.testing.assert_array_equal(as_csr(pivot, "X").toarray(), np.eye(2))
