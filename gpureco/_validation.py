"""Input checks and conversions shared by every front door, the data and analysis modules:
every error names the parameter, the expectation and the value."""
from __future__ import annotations

import numbers
import os

import numpy as np
import pandas as pd
import scipy.sparse as sp

from .engine import _backend
from .engine._cpu_ranks import shared_entries
from .engine._engine import Request
from .engine._registry import GAINS


def check_int(value, name, low=None, high=None):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"'{name}' must be an int; got {value!r} of type {type(value).__name__}.")
    value = int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        rng = f"[{low if low is not None else '-inf'}, {high if high is not None else 'inf'}]"
        raise ValueError(f"'{name}' must be an int in the range {rng}; got {value}.")
    return value


def check_fraction(value, name):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"'{name}' must be a float in (0, 1); got {value!r} of type {type(value).__name__}.")
    if not 0.0 < float(value) < 1.0:
        raise ValueError(f"'{name}' must be a float in the open interval (0, 1); got {value!r}.")
    return float(value)


def check_choice(value, name, choices):
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"'{name}' must be one of {', '.join(map(repr, choices))}; got {value!r}.")
    return value


def label(name):
    """How a message names a parameter: 'X_test' in quotes; a description ("the first frame
    passed to to_csr", "'per_user' (argument 2 of compare)") as it is."""
    return name if name.startswith("'") or " " in name else f"'{name}'"


def numeric_column(frame, column, name, finite, what="", hint=""):
    """A DataFrame column as float64; with `finite`, NaN and infinities are refused, else
    infinities only (NaN: a missing value). `what` and `hint` complete the message when the
    column does not hold numbers."""
    values = frame[column]
    if not pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values):
        raise TypeError(f"{label(name)} column {column!r} must hold numbers{what}; got dtype {values.dtype}.{hint}")
    if pd.api.types.is_complex_dtype(values):  # (the conversion would drop the imaginary parts, with a warning)
        raise TypeError(f"{label(name)} column {column!r} must hold real numbers{what}; got dtype {values.dtype}.")
    values = values.to_numpy(np.float64, na_value=np.nan)
    bad = ~np.isfinite(values) if finite else np.isinf(values)
    if np.any(bad):
        raise ValueError(f"{label(name)} column {column!r} must hold finite numbers{'' if finite else ' or NaN'}; "
                         f"got {int(bad.sum())} {'NaN or infinite' if finite else 'infinite'} values, the first "
                         f"{float(values[bad][0])!r} at row {int(np.flatnonzero(bad)[0])}.")
    return values


def check_ranks_follow_scores(frame, keys, rank, score, name):
    """A frame with both a rank and a score column (top_k's): the ranks order each list (rows sharing `keys`), and its
    scores must not rise down it, so that a stale column (another model's scores) is not silently passed over."""
    ordered = frame.sort_values([*keys, rank], kind="stable")
    same = np.ones(max(len(ordered) - 1, 0), dtype=bool)
    for key in keys:
        values = ordered[key].to_numpy()
        same &= values[1:] == values[:-1]
    scores = pd.to_numeric(ordered[score], errors="coerce").to_numpy(np.float64)
    rises = np.flatnonzero(same & (scores[1:] > scores[:-1]))
    if rises.size:
        at = int(rises[0]) + 1
        row = {c: ordered[c].iloc[[at]].tolist()[0] for c in (rank, *keys)}  # (Python scalars, each as its column)
        raise ValueError(f"{label(name)} has both a {rank!r} and a {score!r} column, and they disagree: rank "
                         f"{row[rank]!r} has a higher score than the rank before it in the list of "
                         f"{', '.join(f'{k} {row[k]!r}' for k in keys)}; drop the column that does not belong (where "
                         "both agree, as in top_k's frame, the ranks order each list).")


def check_unique_columns(frame, name):
    """frame[column] must be one column: a repeated name would make it a DataFrame."""
    repeated = frame.columns[frame.columns.duplicated()]
    if len(repeated):
        raise ValueError(f"{label(name)} has the column {repeated[0]!r} twice; column names must be unique "
                         f"(got columns {list(frame.columns)}).")


_ID_KINDS = {"integer": "numbers", "floating": "numbers", "mixed-integer-float": "numbers", "decimal": "numbers",
             "integer-na": "numbers", "string": "strings", "boolean": "booleans", "datetime64": "datetimes",
             "datetime": "datetimes"}


def id_kind(column, name, column_name):
    """'numbers', 'strings', ... for the ids in a column (None when it holds none); a mix of
    kinds is refused, as pandas could not sort or match them."""
    values = column.cat.categories if isinstance(column.dtype, pd.CategoricalDtype) else column
    inferred = pd.api.types.infer_dtype(values, skipna=True)
    if inferred in ("mixed", "mixed-integer"):
        kinds = sorted({type(x).__name__ for x in values.dropna()})
        raise TypeError(f"{label(name)} column {column_name!r} must hold ids of one type (numbers or strings); "
                        f"got a mix of {', '.join(kinds)}.")
    return None if inferred == "empty" else _ID_KINDS.get(inferred, inferred)


def check_same_ids(columns, column_name, who):
    """columns: (name, Series) pairs of one id column in several frames, which must hold ids of one
    kind: 1 and "1" are different ids, so a mix would silently match nothing."""
    kinds = [(name, id_kind(values, name, column_name)) for name, values in columns]
    kinds = [(name, kind) for name, kind in kinds if kind is not None]
    if len({kind for _, kind in kinds}) > 1:
        raise TypeError(f"{who} must use the same type of {column_name!r} ids; got "
                        + ", ".join(f"{kind} in {label(name)}" for name, kind in kinds) + ".")


def concat_ids(columns):
    """The ids of several columns in one Series, each id as it was: pandas makes int64 and uint64
    (or int and float, nullable or not) columns float, merging ids beyond 2**53, and pyarrow's
    refuses some mixes; such ids go as objects (Python ints and floats, equal where equal)."""
    integer = [c for c in columns if len(c) and pd.api.types.is_integer_dtype(c.dtype)]
    try:
        combined = pd.concat(columns, ignore_index=True)
    except Exception:  # noqa: BLE001 - pyarrow: "int64 and uint64 ... not in range"
        combined = None
    if combined is not None and (not integer or pd.api.types.is_integer_dtype(combined.dtype)
                                 or max(max(-int(c.min()), int(c.max())) for c in integer) < 2**53):
        return combined
    return pd.concat([column.astype(object) for column in columns], ignore_index=True)


def check_sizes(batch_size, max_memory):
    """batch_size and max_memory: None, or integers >= 1."""
    return tuple(None if value is None else check_int(value, name, low=1)
                 for value, name in ((batch_size, "batch_size"), (max_memory, "max_memory")))


def check_flag(value, name):
    """A yes/no option as a bool: True or False (NumPy's too, and the integers 0 and 1 that
    C-style code passes). A string, None or any other value is an error rather than its
    truthiness ("no" is truthy)."""
    if isinstance(value, (bool, np.bool_)) or (isinstance(value, (int, np.integer)) and value in (0, 1)):
        return bool(value)
    raise TypeError(f"'{name}' must be True or False; got {value!r}.")


def check_seed(seed):
    if isinstance(seed, np.random.Generator):
        return int(seed.integers(np.iinfo(np.int32).max))
    if isinstance(seed, np.random.RandomState):
        return int(seed.randint(np.iinfo(np.int32).max))
    return check_int(seed, "seed", low=0, high=2**64 - 1)


def resolve_nthreads(nthreads):
    """joblib's convention, as recometrics: a negative value n means cpu_count + 1 + n."""
    nthreads = check_int(nthreads, "nthreads")
    n_cpu = os.cpu_count() or 1
    resolved = nthreads if nthreads > 0 else n_cpu + 1 + nthreads
    if nthreads == 0 or resolved < 1:
        raise ValueError(f"'nthreads' must be >= 1, or negative as in joblib (-1 = all {n_cpu} cores); got {nthreads}.")
    return resolved


def _check_real_dtype(dtype, name):
    if dtype.kind == "c":
        raise TypeError(f"{label(name)} must hold real numbers; got complex dtype {dtype}.")
    if dtype.kind not in "biuf":
        raise TypeError(f"{label(name)} must hold numbers; got dtype {dtype}.")


def _refuse_masked(value, what):
    # np.asarray would drop the mask and keep the masked values; an array with nothing masked is fine
    if isinstance(value, np.ma.MaskedArray) and np.ma.count_masked(value):
        raise TypeError(f"{what} is a NumPy masked array; gpureco does not read masks: fill the masked values "
                        f"(.filled(...)) or remove them first; got {int(np.ma.count_masked(value))} masked values.")


def _is_bfloat16(dtype):
    return str(dtype).rsplit(".", 1)[-1] == "bfloat16"  # torch.bfloat16, JAX's and ml_dtypes' bfloat16


def plain_array(value):
    """A framework's array as NumPy can take it, or as a GPU array, without a copy where the
    dtype allows: a torch tensor that requires grad is detached; bfloat16 is widened to float32
    (exactly: every bfloat16 is a float32); a CPU tensor becomes a NumPy view; CPU arrays of any
    DLPack library (JAX, ...) are read through DLPack. Anything else is returned as it is."""
    if _torch_layout(value).startswith("torch.sparse"):
        return value  # (refuse_sparse names it where a dense array is wanted; as_csr reads it)
    if type(value).__module__.split(".")[0] == "torch":  # never imported: a tensor brings its module
        value = value.detach()
        if _is_bfloat16(value.dtype) or str(value.dtype).startswith("torch.float8"):
            value = value.float()  # (exactly: every bfloat16 and float8 is a float32)
        return value.resolve_conj().resolve_neg().numpy() if value.device.type == "cpu" else value
    if _is_bfloat16(getattr(value, "dtype", None)) and hasattr(value, "astype"):
        return value.astype(np.float32)
    if (not isinstance(value, np.ndarray) and hasattr(value, "__dlpack__")
            and not _backend.is_device_array(value)):
        try:
            return np.from_dlpack(value)
        except (TypeError, ValueError, BufferError, RuntimeError):
            return value  # a dtype NumPy's DLPack does not take: np.asarray below says what it is
    return value


def user_rows(value, n_users, name, of="X_test"):
    """`value` (any array of ints: NumPy, torch, CuPy, a list) as an int64 NumPy array of rows
    (of the matrix `of` names), each in [0, n_users)."""
    rows = np.asarray(_backend.to_host(plain_array(value), name))
    if rows.ndim != 1 or rows.dtype.kind not in "iu":
        raise ValueError(f"{label(name)} must be a 1-d array of ints (rows of {of}, in [0, {n_users - 1}]); got "
                         f"{rows.dtype} values of shape {rows.shape}.")
    rows = rows.astype(np.int64)
    bad = rows[(rows < 0) | (rows >= n_users)]
    if bad.size:
        raise ValueError(f"{label(name)} must be rows of {of}, in [0, {n_users - 1}]; got {int(bad[0])}.")
    return rows


def host_array_or_device(value, what):
    """`value` unchanged if it lives in GPU memory, else as a NumPy array: a host input is then
    checked on the host before it moves, so no message comes from NumPy or CuPy (CuPy would
    say 'Unsupported dtype <U1'). Torch, JAX and DLPack arrays are taken as plain_array says."""
    value = plain_array(value)
    if _backend.is_device_array(value):
        return value
    _refuse_masked(value, what)
    try:
        return np.asarray(value)
    except (TypeError, ValueError):  # ragged nested lists, objects NumPy cannot read
        raise TypeError(f"{what} must be a rectangular array of numbers (rows of equal length); got a "
                        f"{type(value).__name__} that is not.") from None


def real_array(value, what, asarray=None):
    """`value` as an array of real numbers: a NumPy array, or where `asarray(value, what)` puts
    it (_backend.to_device: the GPU)."""
    value = host_array_or_device(value, what)
    if isinstance(value, np.ndarray):
        _check_real_dtype(value.dtype, what)
    array = np.asarray(value) if asarray is None else asarray(value, what)
    _check_real_dtype(array.dtype, what)
    return array


def _check_compressed_structure(X, name):
    """CSR/CSC arrays built by hand are not range-checked by SciPy: check before converting."""
    n_major, n_minor = (X.shape[0], X.shape[1]) if X.format == "csr" else (X.shape[1], X.shape[0])
    indptr, indices, data = np.asarray(X.indptr), np.asarray(X.indices), np.asarray(X.data)
    what = "column" if X.format == "csr" else "row"
    for part, array in (("indptr", indptr), ("indices", indices)):
        if array.ndim != 1 or array.dtype.kind not in "iu":
            raise TypeError(f"'{name}' is not a valid {X.format.upper()} matrix: its {part} must be a 1-dimensional "
                            f"array of integers; got {array.dtype} of shape {array.shape}.")
    if data.ndim != 1 or data.shape[0] < min(indices.size, int(indptr[-1]) if indptr.size else 0):
        raise ValueError(f"'{name}' is not a valid {X.format.upper()} matrix: its data must be 1-dimensional with a "
                         f"value for each stored index; got shape {data.shape} for {indices.size} indices.")
    if indptr.shape != (n_major + 1,) or indptr[0] != 0 or np.any(indptr[1:] < indptr[:-1]) or indptr[-1] > indices.size:
        raise ValueError(f"'{name}' is not a valid {X.format.upper()} matrix: its indptr must start at 0, "
                         f"be non-decreasing and end at most at nnz={indices.size}.")
    indices = indices[: indptr[-1]]
    if indices.size and (indices.min() < 0 or indices.max() >= n_minor):  # two reductions, no temporary
        bad = (indices < 0) | (indices >= n_minor)
        first = int(np.flatnonzero(bad)[0])
        raise ValueError(f"'{name}' has {int(bad.sum())} {what} indices outside [0, {n_minor - 1}] "
                         f"(for example {int(indices[first])} at stored position {first}).")


def _csr_copy(X, dtype):
    """A copy of a CSR X (structure checked) with `dtype` values and no storage past nnz, each
    array copied once (sp.csr_array(X, copy=True) then astype copies the values twice and checks
    the format several times)."""
    nnz = int(X.indptr[-1])
    return sp.csr_array((np.asarray(X.data)[:nnz].astype(dtype), np.array(np.asarray(X.indices)[:nnz]),
                         np.array(X.indptr)), shape=X.shape, copy=False)


def _sorted_distinct(indptr, indices):
    """Whether each row's column indices are strictly increasing."""
    if indices.size < 2:
        return True
    up = indices[1:] > indices[:-1]
    starts = indptr[1:-1]
    up[starts[(starts > 0) & (starts < indices.size)] - 1] = True  # a row's first entry follows another row's
    return bool(up.all())


def _torch_layout(value):
    """A torch tensor's layout ("torch.strided", "torch.sparse_coo", ...); "" for anything else."""
    return str(value.layout) if type(value).__module__.split(".")[0] == "torch" else ""


def refuse_sparse(value, what, why=""):
    """A dense array is wanted: a sparse matrix (SciPy, CuPy) or sparse torch tensor is an error naming its kind."""
    layout = _torch_layout(value)
    if layout.startswith("torch.sparse"):
        kind = f"torch {layout.removeprefix('torch.')} tensor"
    elif sp.issparse(value) or type(value).__module__.startswith("cupyx.scipy.sparse"):
        kind = f"{'SciPy' if sp.issparse(value) else 'CuPy'} sparse {value.format} matrix"
    else:
        return
    raise TypeError(f"{what} must be a dense array{why}; got a {kind}.")


def _from_torch_sparse(X, name):
    """A torch sparse tensor (COO or CSR layout, on any device) as a SciPy sparse array; anything else as it is."""
    layout = _torch_layout(X)
    if layout in ("", "torch.strided"):
        return X
    if X.ndim != 2:
        raise ValueError(f"'{name}' must be 2-dimensional; got a torch sparse tensor of shape {tuple(X.shape)}.")
    X = X.detach().cpu()
    if not X.is_complex():  # float64 before coalesce sums duplicates (int8: 100 + 100 wraps; float16: overflows)
        X = X.double()
    if layout == "torch.sparse_coo":
        X = X.coalesce()
        rows, cols = X.indices().numpy()
        return sp.coo_array((X.values().numpy(), (rows, cols)), shape=tuple(X.shape))
    if layout == "torch.sparse_csr":
        return sp.csr_array((X.values().numpy(), X.col_indices().numpy(), X.crow_indices().numpy()),
                            shape=tuple(X.shape))
    raise TypeError(f"'{name}' is a torch tensor of layout {layout}; pass a dense tensor, a sparse_coo or sparse_csr "
                    "one, or a SciPy sparse matrix.")


def as_csr(X, name, shape=None, values="float64"):
    """A canonical copy of X: CSR, sorted indices, duplicates summed, stored zeros dropped,
    int32 indices and int64 indptr. The caller's object is never modified.

    values: "float64" converts the values; "float" keeps float32/float64 (else float64).
    """
    X = _from_torch_sparse(X, name)
    if sp.issparse(X):
        _check_real_dtype(X.dtype, name)
        if X.ndim != 2:
            raise ValueError(f"'{name}' must be 2-dimensional; got shape {X.shape}.")
        if X.format in ("csr", "csc"):
            _check_compressed_structure(X, name)
    else:
        _refuse_masked(X, f"'{name}'")
        # pandas, polars: a dense matrix (a pivot's item columns), or interactions (a user and an item column)?
        columns = [str(c) for c in getattr(X, "columns", ())]
        names = {c.lower().split(":")[0] for c in columns}
        if names & {"user", "user_id", "userid", "uid"} and names & {"item", "item_id", "itemid", "movieid", "movie_id",
                                                                     "iid"}:
            raise TypeError(f"'{name}' must be a matrix (users x items); got a frame of interactions (columns "
                            f"{columns}): gpureco.to_csr(frame) makes the matrix.")
        arr = np.asarray(plain_array(X))  # (a tensor that requires grad, bfloat16: as every array input)
        _check_real_dtype(arr.dtype, name)
        if arr.ndim != 2:
            raise ValueError(f"'{name}' must be a 2-dimensional matrix; got an array of shape {arr.shape}.")
        X = arr
    if shape is not None and X.shape != tuple(shape):
        raise ValueError(f"'{name}' must have shape {tuple(shape)}; got {X.shape}.")
    if X.shape[1] > np.iinfo(np.int32).max:
        raise ValueError(f"'{name}' has {X.shape[1]} columns; at most {np.iinfo(np.int32).max} items are supported.")
    dtype = X.dtype if values == "float" and X.dtype in (np.float32, np.float64) else np.float64
    if sp.issparse(X) and X.format == "csr":
        X = _csr_copy(X, dtype)
    elif sp.issparse(X):  # the values converted before the conversion to CSR sums duplicates: in `dtype`, as a
        layout = X.format.upper()  # CSR input's are (summed in int8, 100 + 100 wraps to -56)
        try:
            X = sp.csr_array(X.astype(dtype))
        except (ValueError, IndexError) as error:  # a hand-built COO's indices out of range, ...
            raise ValueError(f"'{name}' is not a valid {layout} matrix: {error}.") from None
        if layout != "CSC":  # (a CSC was checked above) SciPy checks no hand-built BSR's block indices: nor its CSR
            _check_compressed_structure(X, name)
    else:  # a dense array, in `dtype` first (SciPy has no float16)
        X = sp.csr_array(np.array(X, dtype=dtype))
    if _sorted_distinct(X.indptr, X.indices):  # one vectorised pass (SciPy's own check takes 3 times as long)
        X.has_canonical_format = True
    else:
        X.sum_duplicates()  # also sorts the indices
    if not X.data.all():
        X.eliminate_zeros()
    X.indices = X.indices.astype(np.int32, copy=False)
    X.indptr = X.indptr.astype(np.int64, copy=False)
    return X


def check_finite(X, name, why=""):
    """X (sparse) unchanged if its stored values are finite."""
    bad = ~np.isfinite(X.data)
    if np.any(bad):
        raise ValueError(f"'{name}' values must be finite{why}; got {int(bad.sum())} NaN or infinite values, "
                         f"for example {float(X.data[bad][0])!r}.")
    return X


def as_factors(A, B, item_biases, n_users, n_items, xp=np, asarray=None, of="X_test"):
    """Validated (A, B, item_biases) in one floating dtype: float32 when A and B both are.
    With xp=cupy (and asarray=_backend.to_device) they stay in, or go to, GPU memory.
    of: the argument whose shape gave n_users and n_items (for the errors)."""
    if (A is None) != (B is None):
        raise ValueError("'A' and 'B' must both be given, or both be None (non-personalised model from "
                         f"'item_biases'); got A={'None' if A is None else 'an array'}, "
                         f"B={'None' if B is None else 'an array'}.")
    arrays = {}
    for name, value, ndim in (("A", A, 2), ("B", B, 2), ("item_biases", item_biases, 1)):
        if value is None:
            continue
        refuse_sparse(value, f"'{name}'")
        arr = real_array(value, f"'{name}'", asarray)
        if name == "item_biases" and arr.ndim == 2 and 1 in arr.shape:
            arr = arr.reshape(-1)
        if arr.ndim != ndim:
            raise ValueError(f"'{name}' must be {ndim}-dimensional; got shape {arr.shape}.")
        arrays[name] = arr
    if not arrays:
        raise ValueError("No model given: pass factors 'A' and 'B', or 'item_biases' for a non-personalised model.")
    if "A" in arrays:
        if arrays["A"].shape[1] == 0:
            raise ValueError(f"'A' and 'B' must have at least one factor column; got shape {arrays['A'].shape}.")
        if arrays["A"].shape[0] != n_users:
            raise ValueError(f"'A' must have one row per user of '{of}' ({n_users}); got shape {arrays['A'].shape}.")
        if arrays["B"].shape[0] != n_items:
            raise ValueError(f"'B' must have one row per item of '{of}' ({n_items}); got shape {arrays['B'].shape}.")
        if arrays["A"].shape[1] != arrays["B"].shape[1]:
            raise ValueError(f"'A' and 'B' must have the same number of factors (columns); "
                             f"got A {arrays['A'].shape} and B {arrays['B'].shape}.")
    if "item_biases" in arrays and arrays["item_biases"].shape[0] != n_items:
        raise ValueError(f"'item_biases' must have one entry per item of '{of}' ({n_items}); "
                         f"got shape {arrays['item_biases'].shape}.")
    single = "A" in arrays and arrays["A"].dtype == np.float32 and arrays["B"].dtype == np.float32
    if "A" not in arrays:
        single = arrays["item_biases"].dtype == np.float32
    dtype = np.float32 if single else np.float64
    dtypes = {"A": dtype, "B": dtype, "item_biases": np.float64}  # biases are added exactly
    return tuple(None if name not in arrays else xp.ascontiguousarray(arrays[name], dtype=dtypes[name])
                 for name in ("A", "B", "item_biases"))


def check_disjoint(X_train, X_test):
    """A test item that is also a training item of the same user can never be ranked (both
    canonical CSR, as_csr's: one pass over each user's entries, _cpu_ranks.shared_entries)."""
    n, user, item = shared_entries(X_train.indptr, X_train.indices, X_test.indptr, X_test.indices, X_test.shape[1])
    if n:
        raise ValueError(f"'X_test' and 'X_train' share {n} (user, item) pairs, for example "
                         f"user {user}, item {item}; a test item must not be a "
                         "training item of the same user (it could never be ranked).")


def as_pandas(frame, name, what):
    """A pandas DataFrame from a pandas frame or anything with `.to_pandas()` (polars; never imported)."""
    if not isinstance(frame, pd.DataFrame) and hasattr(frame, "to_pandas"):
        frame = frame.to_pandas()
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"{label(name)} must be a DataFrame of {what} (pandas, or polars); got {type(frame).__name__}.")
    check_unique_columns(frame, name)
    return frame


def interactions(X_train, X_test):
    """Validated host CSR copies of the training and test interactions (X_train None: empty)."""
    if X_test is None:
        raise ValueError("'X_test' is required; got None.")
    X_test = check_finite(as_csr(_backend.to_host(X_test, "X_test"), "X_test"), "X_test", " (they are NDCG gains)")
    if X_train is None:
        X_train = sp.csr_array(X_test.shape)
    return as_csr(_backend.to_host(X_train, "X_train"), "X_train", shape=X_test.shape), X_test


def check_gain(gain, X_test):
    check_choice(gain, "gain", GAINS)
    if gain == "exponential" and X_test.nnz and X_test.data.max() >= 1024:
        raise ValueError("gain='exponential' needs 'X_test' values below 1024 (2**v - 1 must be finite); "
                         f"got a maximum of {float(X_test.data.max())!r}.")
    return gain


def request(names, cutoffs, X_test, *, min_pos_test, min_items_pool, consider_cold_start, gain, nthreads,
            batch_size, max_memory):
    """The engine's Request from the options calc_reco_metrics and evaluate share, checked."""
    batch_size, max_memory = check_sizes(batch_size, max_memory)
    return Request(tuple(names), np.asarray(cutoffs, dtype=np.int64),
                   min_pos_test=check_int(min_pos_test, "min_pos_test", low=0),
                   min_items_pool=check_int(min_items_pool, "min_items_pool", low=0),
                   consider_cold_start=check_flag(consider_cold_start, "consider_cold_start"),
                   gain=check_gain(gain, X_test),
                   nthreads=resolve_nthreads(nthreads), batch_size=batch_size, max_memory=max_memory)


def factors_on(backend, A, B, item_biases, n_users, n_items, reverse=False, of="X_test"):
    """as_factors for the backend: CuPy arrays on the GPU (device inputs used in place), else
    host arrays (device inputs copied back). With `reverse` (ties by descending item, as
    engine._conventions.reversed_items does to the interactions), B and item_biases hold the
    items in reverse order, as contiguous copies."""
    with _backend.device_context(backend):
        if backend[0] == "gpu":
            A, B, item_biases = as_factors(A, B, item_biases, n_users, n_items, _backend.cupy(), _backend.to_device, of)
        else:
            A, B, item_biases = as_factors(*(None if x is None else _backend.to_host(plain_array(x), name)
                                             for x, name in ((A, "A"), (B, "B"), (item_biases, "item_biases"))),
                                           n_users, n_items, of=of)
        if reverse:  # .copy() of a reversed view is C-contiguous in NumPy and CuPy alike
            B, item_biases = (None if x is None else x[::-1].copy() for x in (B, item_biases))
    return A, B, item_biases
