"""Files of the command line: interactions (CSV, Parquet, SciPy .npz, Matrix Market), factors and scores
(.npy), top-K lists and per-user results (CSV, Parquet). Errors name the file (and the row)."""
from __future__ import annotations

import os
import re
import shutil
import tempfile
import warnings
from contextlib import contextmanager
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
    """A DataFrame from a CSV or Parquet file (Parquet needs pyarrow). A file that cannot be parsed is an
    InputError in our words (which line of a CSV file is wrong, and how), never the parser's."""
    path = _existing(path)
    suffix = suffix_of(path)
    if suffix == ".csv":
        return _read_csv(path)
    if suffix in (".parquet", ".pq"):
        _optional.package("pyarrow", "parquet")
        try:
            return pd.read_parquet(path)
        except Exception:  # noqa: BLE001 - whatever the parser says, the file is not usable Parquet
            raise InputError(f"{path}: cannot be read as Parquet (not a Parquet file, or a damaged one).") from None
    raise InputError(f"{path}: expected a .csv or .parquet file; got {suffix or 'no suffix'}.")


_FIELDS = re.compile(r"Expected (\d+) fields in line (\d+), saw (\d+)")


def _read_csv(path):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", pd.errors.ParserWarning)  # a first row longer than the header
            return pd.read_csv(path, index_col=False, skipinitialspace=True)  # "0, 2" is 0,2
    except pd.errors.EmptyDataError:
        raise InputError(f"{path}: the file is empty; expected a header line such as user,item.") from None
    except UnicodeDecodeError as error:
        raise InputError(f"{path}: not a text file (byte {error.start} is not UTF-8); expected CSV text.") from None
    except pd.errors.ParserWarning:
        raise InputError(f"{path}, line 2: more fields than the header line has columns.") from None
    except Exception as error:  # noqa: BLE001 - the parser's message is not ours to show
        fields = _FIELDS.search(str(error))
        if fields:
            expected, line, saw = fields.groups()
            raise InputError(f"{path}, line {line}: {saw} fields where the header line has {expected} columns."
                             ) from None
        raise InputError(f"{path}: cannot be read as CSV (a damaged file, or not CSV text).") from None


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
                             f"[,timestamp]; got columns {', '.join(map(repr, frame.columns))}.")
        return frame
    kind = "a SciPy sparse matrix (scipy.sparse.save_npz)" if suffix == ".npz" else "a Matrix Market file"
    try:
        X = sp.load_npz(path) if suffix == ".npz" else scipy.io.mmread(path)
    except Exception:  # noqa: BLE001 - whatever the reader says, the file is not a usable matrix
        raise InputError(f"{path}: cannot be read as {kind} (a damaged or truncated file, or another "
                         "format).") from None
    if not sp.issparse(X):
        raise InputError(f"{path}: expected a sparse matrix; got a dense array of shape {np.shape(X)}.")
    if X.dtype.kind not in "biuf":
        raise InputError(f"{path}: expected a matrix of real numbers; got {X.dtype.kind!r} values (dtype "
                         f"{X.dtype}).")
    X = sp.csr_array(X)
    bad = np.flatnonzero(~np.isfinite(X.data))
    if bad.size:
        row = int(np.searchsorted(X.indptr, bad[0], side="right") - 1)
        raise InputError(f"{path}, row {row}: column {int(X.indices[bad[0]])} holds {float(X.data[bad[0]])}; the "
                         f"values must be finite numbers ({bad.size} are not).")
    return X


def read_array(path, ndim=None, what="array"):
    """A NumPy array from a .npy file, checked (from its header, before the data are read) for its number of
    dimensions and a real dtype."""
    path = _existing(path)
    if suffix_of(path) != ".npy":
        raise InputError(f"{path}: expected {what} in a .npy file; got {suffix_of(path) or 'no suffix'}.")
    try:
        with open(path, "rb") as file:
            version = np.lib.format.read_magic(file)
            header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, _, dtype = header(file)
    except Exception:  # noqa: BLE001 - whatever NumPy says, the file is not a .npy array
        raise InputError(f"{path}: not a NumPy .npy file (np.save writes one), or a damaged one.") from None
    if ndim is not None and len(shape) not in np.atleast_1d(ndim):
        raise InputError(f"{path}: expected {what} with {ndim} dimension(s); got shape {shape}.")
    if dtype.kind not in "biuf":
        raise InputError(f"{path}: expected {what} of real numbers; got dtype {dtype}"
                         + (" (Python objects)." if dtype.hasobject else "."))
    try:
        return np.load(path, allow_pickle=False)
    except Exception:  # noqa: BLE001 - a header that promises more data than the file holds
        raise InputError(f"{path}: the file is shorter than its header says (truncated or damaged).") from None


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


def check_output(path, suffixes, what="output"):
    """Before any work: `path` can be written (its folder exists and is writable, it is not a folder) and ends in
    one of `suffixes` (Parquet also needs pyarrow). Raises InputError naming the path."""
    path = Path(path)
    suffix = suffix_of(path)
    if suffix not in suffixes:
        raise InputError(f"{path}: the {what} must be a {', '.join(suffixes[:-1])} or {suffixes[-1]} file; got "
                         f"{suffix or 'no suffix'}.")
    if path.is_dir():
        raise InputError(f"{path}: is a folder; the {what} must be a file name.")
    check_folder(path.parent)
    if suffix in (".parquet", ".pq"):
        _optional.package("pyarrow", "parquet")
    return path


def check_folder(folder, create=False):
    """Before any work: `folder` exists (or, with create=True, its parent does) and files can be written in it."""
    folder = Path(folder)
    target = folder.parent if create and not folder.exists() else folder
    if not target.is_dir():
        raise InputError(f"{target}: no such folder" + (" (a file has that name)." if target.exists() else "."))
    if not os.access(target, os.W_OK | os.X_OK):
        raise InputError(f"{target}: the folder is not writable.")
    return folder


@contextmanager
def staged(folder):
    """Write outputs whole or not at all: yields a new hidden folder inside `folder`; write the files there (with
    their final names and sub-folders). When the block ends without an error, each file is moved into place with
    os.replace (a file is never seen half-written); in any case, the hidden folder and what is left in it are
    removed, so an error or an interrupt leaves no partial or temporary file."""
    folder = Path(folder)
    folder.mkdir(exist_ok=True)
    temporary = Path(tempfile.mkdtemp(prefix=".gpureco-partial-", dir=folder))
    try:
        yield temporary
        _move_into(temporary, folder)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


def write_whole(path, write):
    """Call write(temporary path) inside staged(path's folder): the file at `path` appears whole or not at all.
    Returns `path`."""
    path = Path(path)
    with staged(path.parent) as folder:
        write(folder / path.name)
    return path


def _move_into(source, target):
    for entry in sorted(source.iterdir()):
        if entry.is_dir():
            (target / entry.name).mkdir(exist_ok=True)
            _move_into(entry, target / entry.name)
        else:
            os.replace(entry, target / entry.name)


def located(error, path):
    """An InputError naming `path` (and the row of a RowError) for an error raised while reading it."""
    return InputError(f"{where(path, getattr(error, 'row', None))}: {error}")

