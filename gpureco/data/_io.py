"""Files of the command line: interactions (CSV and other delimited text, Parquet, SciPy .npz, Matrix Market),
factors and scores (.npy), top-K lists and per-user results (CSV, Parquet), and their provenance. Errors name the
file (and the row, and the line of a text file)."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
import scipy.io
import scipy.sparse as sp

from .. import _optional

# delimited text: suffix -> separator. .inter is RecBole's atomic file (tab-separated, typed header such as
# user_id:token); .data is ML-100k's u.data (tab-separated, no header); .dat is ML-1M's and ML-10M's ratings.dat
# ("::", no header). A file whose first line holds only numbers has no header: its columns are user, item,
# value, timestamp in that order (the MovieLens, Elliot and LibRec layout).
TEXT_SEPARATORS = {".csv": ",", ".tsv": "\t", ".inter": "\t", ".data": "\t", ".dat": "::"}
FRAME_SUFFIXES = (*TEXT_SEPARATORS, ".parquet", ".pq")
MATRIX_SUFFIXES = (".npz", ".mtx", ".mtx.gz")
HEADERLESS_COLUMNS = ("user", "item", "value", "timestamp")
# each column of an interaction frame: the names other tools give it (RecBole and RePlay user_id, MovieLens userId
# and movieId, LensKit user/item/rating), the chosen one renamed to the first; an option (--user-col) overrides
SYNONYMS = {"user": ("user", "user_id", "userId", "userID", "UserId", "uid"),
            "item": ("item", "item_id", "itemId", "itemID", "ItemId", "movieId", "movie_id", "iid"),
            "value": ("value", "rating", "ratings", "weight"),
            "timestamp": ("timestamp", "time", "ts", "datetime")}
OPTIONS = {"user": "--user-col", "item": "--item-col", "value": "--value-col", "timestamp": "--time-col"}
_RECBOLE_TYPE = re.compile(r"^(?P<name>.+):(token|token_seq|float|float_seq)$")


class Columns(NamedTuple):
    """The column names a user gave (--user-col, ...); None: found by name (SYNONYMS)."""
    user: str | None = None
    item: str | None = None
    value: str | None = None
    timestamp: str | None = None


class InputError(ValueError):
    """A file that cannot be used, with the file's name (and the row) in the message."""


def suffix_of(path):
    name = str(path).lower()
    return next((s for s in FRAME_SUFFIXES + MATRIX_SUFFIXES + (".npy",) if name.endswith(s)), Path(path).suffix)


def where(path, row=None):
    """'file' or 'file, row N (line M)': M is the line of a text file (row 0 is on line 2 below a header)."""
    if row is None:
        return str(path)
    line = f" (line {row + 1 + (not _headerless(path))})" if suffix_of(path) in TEXT_SEPARATORS else ""
    return f"{path}, row {row}{line}"


_NUMBER = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


def _headerless(path, sep=None):
    """A text file has no header line when its first line holds only numbers (u.data: 196<TAB>242<TAB>3<TAB>...)."""
    try:
        with open(path, "rb") as file:
            first = file.readline(1 << 16).decode("utf-8-sig").strip()
    except (OSError, UnicodeDecodeError):
        return False
    fields = first.split(sep) if sep else re.split(r"::|[,\t;|]|\s+", first)
    return bool(first) and all(_NUMBER.match(field.strip()) for field in fields if field.strip())


def _existing(path):
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{path}: a folder, where a file is expected.")
    if not path.is_file():
        raise InputError(f"{path}: no such file.")
    return path


def read_frame(path, sep=None, id_columns=()):
    """A DataFrame from a delimited text file (`sep`, or the suffix's: TEXT_SEPARATORS) or a Parquet file (Parquet
    needs pyarrow). A file that cannot be parsed is an InputError in our words (which line of a text file is wrong,
    and how), never the parser's."""
    path = _existing(path)
    suffix = suffix_of(path)
    if suffix in TEXT_SEPARATORS:
        return _read_text(path, sep or TEXT_SEPARATORS[suffix], id_columns)
    if suffix in (".parquet", ".pq"):
        _optional.package("pyarrow", "parquet")
        try:
            return pd.read_parquet(path)
        except Exception:  # noqa: BLE001 - whatever the parser says, the file is not usable Parquet
            raise InputError(f"{path}: cannot be read as Parquet (not a Parquet file, or a damaged one).") from None
    raise InputError(f"{path}: expected a {', '.join(FRAME_SUFFIXES[:-1])} or {FRAME_SUFFIXES[-1]} file; got "
                     f"{suffix or 'no suffix'}.")


_FIELDS = re.compile(r"Expected (\d+) fields in line (\d+), saw (\d+)")


CANONICAL_INT = r"0|-?[1-9][0-9]*"  # an integer as it prints: not '007', '+7', '-0', '7.0'


def _ids_from_text(texts):
    """An id column read as text: numbers where each is written as it prints (7, -3), so that they match the rows of
    a model and ids of other files; else the texts themselves ('007' and '7' are two ids, which as numbers were one)."""
    present = texts[texts.notna()]
    if present.empty:
        return texts
    if present.str.fullmatch(CANONICAL_INT).all():
        numbers = pd.to_numeric(texts)
        return numbers if numbers.dtype.kind in "iu" or texts.isna().any() else texts  # (past 64 bits: text)
    numbers = pd.to_numeric(texts, errors="coerce")  # floats as they print (1.0, 2.5: pandas' own float ids)
    shown = numbers[texts.notna()]
    return numbers if shown.notna().all() and (shown.astype(str) == present).all() else texts


def _read_text(path, sep, id_columns=()):
    headerless = _headerless(path, sep)
    options = dict(header=None) if headerless else {}
    engine = "python" if len(sep) > 1 else "c"
    try:  # the id columns (the first two of a file without a header) read as text: _ids_from_text
        header = [] if headerless else list(pd.read_csv(path, sep=sep, nrows=0, index_col=False,
                                                        skipinitialspace=True, engine=engine).columns)
    except Exception:  # noqa: BLE001 - the read below says what is wrong with the file
        header = []
    ids = [0, 1] if headerless else [c for c in header if isinstance(c, str) and (
        c in id_columns or _RECBOLE_TYPE.sub(r"\g<name>", c) in SYNONYMS["user"] + SYNONYMS["item"])]
    options["dtype"] = {c: str for c in ids}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", pd.errors.ParserWarning)  # a first row longer than the header
            frame = pd.read_csv(path, sep=sep, index_col=False, skipinitialspace=True,  # "0, 2" is 0,2
                                engine=engine, **options)
    except pd.errors.EmptyDataError:
        raise InputError(f"{path}: the file is empty; expected a header line such as user,item.") from None
    except UnicodeDecodeError as error:
        raise InputError(f"{path}: not a text file (byte {error.start} is not UTF-8); expected delimited text."
                         ) from None
    except pd.errors.ParserWarning:
        raise InputError(f"{path}, line 2: more fields than the header line has columns.") from None
    except Exception as error:  # noqa: BLE001 - the parser's message is not ours to show
        fields = _FIELDS.search(str(error))
        if fields:
            expected, line, saw = fields.groups()
            raise InputError(f"{path}, line {line}: {saw} fields where the header line has {expected} columns."
                             ) from None
        raise InputError(f"{path}: cannot be read as text separated by {sep!r} (a damaged file, or not text of "
                         "that layout; --sep names the separator).") from None
    for column in ids:
        if column in frame.columns:
            frame[column] = _ids_from_text(frame[column])
    if headerless:
        frame.columns = [*HEADERLESS_COLUMNS, *(f"column{i + 1}" for i in range(4, frame.shape[1]))][:frame.shape[1]]
    return frame


def read_interactions(path, columns=Columns(), sep=None):
    """A DataFrame (user, item[, value][, timestamp]) from a delimited text or Parquet file, its columns found by
    name (`columns`, else SYNONYMS) and renamed; or a CSR matrix from .npz/.mtx."""
    path = _existing(path)
    suffix = suffix_of(path)
    if suffix not in MATRIX_SUFFIXES:
        if suffix not in FRAME_SUFFIXES:
            raise InputError(f"{path}: expected interactions in a {', '.join(FRAME_SUFFIXES)}, .npz or .mtx file; "
                             f"got {suffix or 'no suffix'}.")
        return _canonical(read_frame(path, sep, (columns.user, columns.item)), path, columns)
    given = [OPTIONS[name] for name, value in columns._asdict().items() if value is not None]
    if given or sep:
        raise InputError(f"{path}: a matrix has no columns; {', '.join(given + ['--sep'] * bool(sep))} apply to "
                         "text and Parquet files.")
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


def _canonical(frame, path, columns):
    """`frame` with its user, item[, value][, timestamp] columns renamed so; the other columns kept."""
    frame = frame.rename(columns=lambda c: _RECBOLE_TYPE.sub(r"\g<name>", c) if isinstance(c, str) else c)
    chosen = {}
    for name, synonyms in SYNONYMS.items():
        given = getattr(columns, name)
        if given is not None:
            if given not in frame.columns:
                raise InputError(f"{path}: {OPTIONS[name]} {given!r} is not a column; got columns "
                                 f"{', '.join(map(repr, frame.columns))}.")
            chosen[name] = given
            continue
        found = [c for c in synonyms if c in frame.columns and c not in chosen.values()]
        if len(found) > 1 and found[0] != name:
            raise InputError(f"{path}: the columns {', '.join(map(repr, found))} could each be the {name} column; "
                             f"choose one with {OPTIONS[name]}.")
        if found:
            chosen[name] = found[0]
    missing = [name for name in ("user", "item") if name not in chosen]
    if missing:
        raise InputError(f"{path}: no {' and no '.join(missing)} column; expected user,item[,value][,timestamp] "
                         f"(or MovieLens' userId,movieId,rating, RecBole's user_id:token, ...), or name them with "
                         f"{' and '.join(OPTIONS[m] for m in missing)}; got columns "
                         f"{', '.join(map(repr, frame.columns))}.")
    others = [c for c in frame.columns if c not in chosen.values() and c not in chosen]
    return frame[[*chosen.values(), *others]].set_axis([*chosen, *others], axis=1)


def read_array(path, ndim=None, what="array", kinds="biuf"):
    """A NumPy array from a .npy file, checked (from its header, before the data are read) for its number of
    dimensions and a real dtype (or another of `kinds`)."""
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
    if dtype.kind not in kinds:
        raise InputError(f"{path}: expected {what} of {'real numbers' if kinds == 'biuf' else 'numbers or text'}; "
                         f"got dtype {dtype}"
                         + (" (Python objects)." if dtype.hasobject else "."))
    try:
        return np.load(path, allow_pickle=False)
    except Exception:  # noqa: BLE001 - a header that promises more data than the file holds
        raise InputError(f"{path}: the file is shorter than its header says (truncated or damaged).") from None


def read_ids(path):
    """Ids, one per row of a factor or score matrix: a .npy vector, or the first column of a CSV/Parquet file."""
    if suffix_of(path) == ".npy":  # text read as a text file's ids are (100 a number, u7 a text)
        array = read_array(path, 1, "ids", kinds="biufU")
        array = _ids_from_text(pd.Series(array, dtype=object)).to_numpy() if array.dtype.kind == "U" else array
    else:
        array = read_frame(path).iloc[:, 0].to_numpy()
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
        kinds = suffixes[0] if len(suffixes) == 1 else f"{', '.join(suffixes[:-1])} or {suffixes[-1]}"
        raise InputError(f"{path}: the {what} must be a {kinds} file; got "
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



# --- provenance: what produced a results file ------------------------------------------------------------------

PROVENANCE_KEY = b"gpureco.provenance"  # the key of a Parquet file's metadata


def sha256(path):
    """The SHA-256 of a file's bytes (what `sha256sum FILE` prints), read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sidecar(path):
    """The provenance file beside a CSV results file: NAME.csv.provenance.json."""
    return Path(f"{path}.provenance.json")


def write_results(frame, path, provenance):
    """A results frame as CSV (with its provenance in the sidecar file) or Parquet (in the file's metadata)."""
    text = json.dumps(provenance, indent=1, default=str)
    if suffix_of(path) == ".csv":
        write_frame(frame, path)
        sidecar(path).write_text(text + "\n", encoding="utf-8")
        return Path(path)
    _optional.package("pyarrow", "parquet")
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(frame, preserve_index=False)
    pq.write_table(table.replace_schema_metadata({**(table.schema.metadata or {}), PROVENANCE_KEY: text}), path)
    return Path(path)


def read_provenance(path):
    """The provenance dict of a results file (its sidecar, or its Parquet metadata), or None when it has none."""
    if suffix_of(path) in (".parquet", ".pq"):
        import pyarrow.parquet as pq

        text = (pq.read_schema(path).metadata or {}).get(PROVENANCE_KEY)
        where_ = path
    else:
        where_ = sidecar(path)
        text = where_.read_text(encoding="utf-8") if where_.is_file() else None
    if text is None:
        return None
    try:
        provenance = json.loads(text)
    except ValueError:
        raise InputError(f"{where_}: the provenance is not JSON (a damaged file); remove it to compare without "
                         "it.") from None
    if not isinstance(provenance, dict):
        raise InputError(f"{where_}: the provenance must be a JSON object; got {type(provenance).__name__}.")
    return provenance
