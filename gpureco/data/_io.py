"""Files of the command line: interactions (CSV, Parquet, SciPy .npz, Matrix Market), factors and scores
(.npy), top-K lists and per-user results (CSV, Parquet). Errors name the file (and the row)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import scipy.io
import scipy.sparse as sp

from .. import _optional

FRAME_SUFFIXES = (".csv", ".parquet", ".pq")
MATRIX_SUFFIXES = (".npz", ".mtx", ".mtx.gz")


class InputError(ValueError):
    """A file that cannot be used, with the file's name (and the row) in the message."""


def suffix_of(path):
    name = str(path).lower()
    return next((s for s in FRAME_SUFFIXES + MATRIX_SUFFIXES + (".npy",) if name.endswith(s)), Path(path).suffix)


def where(path, row=None):
    """'file' or 'file, row N (line M)': M is the line of a CSV file, with its header on line 1."""
    if row is None:
        return str(path)
    line = f" (line {row + 2})" if suffix_of(path) == ".csv" else ""
    return f"{path}, row {row}{line}"


def _existing(path):
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file.")
    return path


def read_frame(path):
    """A DataFrame from a CSV or Parquet file (Parquet needs pyarrow)."""
    path = _existing(path)
    suffix = suffix_of(path)
    try:
        if suffix == ".csv":
            return pd.read_csv(path)
        if suffix in (".parquet", ".pq"):
            _optional.package("pyarrow", "parquet")
            return pd.read_parquet(path)
    except (ValueError, OSError, pd.errors.ParserError) as error:
        raise InputError(f"{path}: cannot be read as {suffix[1:].upper()}: {error}") from None
    raise InputError(f"{path}: expected a .csv or .parquet file; got {suffix or 'no suffix'}.")


def read_interactions(path):
    """A DataFrame (user, item[, value][, timestamp]) from CSV/Parquet, or a CSR matrix from .npz/.mtx."""
    path = _existing(path)
    suffix = suffix_of(path)
    if suffix not in MATRIX_SUFFIXES:
        if suffix not in FRAME_SUFFIXES:
            raise InputError(f"{path}: expected interactions in a .csv, .parquet, .npz or .mtx file; "
                             f"got {suffix or 'no suffix'}.")
        frame = read_frame(path)
        missing = [c for c in ("user", "item") if c not in frame.columns]
        if missing:
            raise InputError(f"{path}: the columns {', '.join(missing)} are missing; expected user,item[,value]"
                             f"[,timestamp]; got columns {', '.join(map(str, frame.columns))}.")
        return frame
    try:
        X = sp.load_npz(path) if suffix == ".npz" else scipy.io.mmread(path)
    except (ValueError, OSError) as error:
        raise InputError(f"{path}: cannot be read as a sparse matrix ({suffix}): {error}") from None
    if not sp.issparse(X):
        raise InputError(f"{path}: expected a sparse matrix; got a dense array of shape {np.shape(X)}.")
    return sp.csr_array(X)


def read_array(path, ndim=None, what="array"):
    """A NumPy array from a .npy file, checked for its number of dimensions."""
    path = _existing(path)
    if suffix_of(path) != ".npy":
        raise InputError(f"{path}: expected {what} in a .npy file; got {suffix_of(path) or 'no suffix'}.")
    try:
        array = np.load(path, allow_pickle=False)
    except (ValueError, OSError) as error:
        raise InputError(f"{path}: cannot be read as a .npy array: {error}") from None
    if ndim is not None and array.ndim not in np.atleast_1d(ndim):
        raise InputError(f"{path}: expected {what} with {ndim} dimension(s); got shape {array.shape}.")
    if array.dtype.kind not in "biuf":
        raise InputError(f"{path}: expected {what} of real numbers; got dtype {array.dtype}.")
    return array


def read_ids(path):
    """Ids, one per row of a factor or score matrix: a .npy vector, or the first column of a CSV/Parquet file."""
    array = read_array(path, 1, "ids") if suffix_of(path) == ".npy" else read_frame(path).iloc[:, 0].to_numpy()
    ids = pd.Index(array)
    if ids.has_duplicates:
        raise InputError(f"{where(path, int(np.flatnonzero(ids.duplicated())[0]))}: id {ids[ids.duplicated()][0]!r} "
                         "appears twice; each id must name one row.")
    return ids


def write_frame(frame, path):
    """Write a DataFrame as CSV or Parquet, by the path's suffix."""
    path = Path(path)
    suffix = suffix_of(path)
    if suffix == ".csv":
        frame.to_csv(path, index=False)
    elif suffix in (".parquet", ".pq"):
        _optional.package("pyarrow", "parquet")
        frame.to_parquet(path, index=False)
    else:
        raise InputError(f"{path}: the output must be a .csv or .parquet file; got {suffix or 'no suffix'}.")
    return path


def write_interactions(data, path):
    """A frame to CSV/Parquet, or a sparse matrix to .npz/.mtx, by the path's suffix."""
    if isinstance(data, pd.DataFrame):
        return write_frame(data, path)
    suffix = suffix_of(path)
    if suffix == ".npz":
        sp.save_npz(path, sp.csr_matrix(data))
    elif suffix in (".mtx", ".mtx.gz"):
        scipy.io.mmwrite(path, sp.coo_matrix(data))
    else:
        raise InputError(f"{path}: a sparse matrix is written to a .npz or .mtx file; got {suffix or 'no suffix'}.")
    return Path(path)


def located(error, path):
    """An InputError naming `path` (and the row of a RowError) for an error raised while reading it."""
    return InputError(f"{where(path, getattr(error, 'row', None))}: {error}")

