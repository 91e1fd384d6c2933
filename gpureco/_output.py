"""The results' forms, one set for every front door: `output=` "pandas", "numpy", "cupy" or
"torch" (docs/conventions.md)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from . import _optional
from ._validation import check_choice, plain_array
from .engine import _backend

OUTPUTS = ("pandas", "numpy", "cupy", "torch")


def backend_for(device, output, choices=OUTPUTS):
    """The backend of `device` (_backend.resolve_device), with `output` checked for it."""
    backend = _backend.resolve_device(device)
    check_output(output, backend, choices)
    return backend


def check_output(output, backend, choices=OUTPUTS):
    """`output` checked against `choices` and against the backend: "cupy" leaves the results in
    GPU memory, so it needs the GPU backend; "torch" needs PyTorch."""
    check_choice(output, "output", choices)
    if output == "cupy" and backend[0] != "gpu":
        raise ValueError("output='cupy' needs the GPU backend (it leaves the results in GPU memory); this call "
                         "evaluates on the CPU (device='cpu', or device='auto' without a usable GPU). Use "
                         "output='numpy', 'pandas' or 'torch'.")
    if output == "torch":
        _optional.package("torch", "torch")
    return output


def arrays(values, output, backend):
    """{name: array} (or a tuple of arrays), host arrays or CuPy arrays on the backend's GPU, in
    the form `output` names: NumPy arrays as they are; CuPy arrays on the backend's GPU; torch
    tensors on the device the evaluation ran on (the backend's GPU, or the CPU), without a copy
    where the array is already there."""
    if isinstance(values, tuple):
        return tuple(arrays({0: a}, output, backend)[0] for a in values)
    if output in ("numpy", "pandas"):
        return values
    if output == "cupy":
        with _backend.device_context(backend):
            cp = _backend.cupy()
            return {name: cp.asarray(a) for name, a in values.items()}
    torch = _optional.package("torch", "torch")
    if backend[0] == "gpu":
        on_device = arrays(values, "cupy", backend)
        return {name: torch.from_dlpack(a) for name, a in on_device.items()}
    # torch shares the memory of a writable contiguous array; anything else is copied once
    return {name: torch.from_numpy(a if a.flags.writeable and a.flags.c_contiguous else np.array(a))
            for name, a in values.items()}


def frame(columns, counts, index=None):
    """The per-user DataFrame: one float64 column per metric, indexed by the caller's user ids
    (`index`; default the row numbers), attrs["nan_reasons"] the NaN counts by rule."""
    df = pd.DataFrame(columns, index=index)
    df.attrs["nan_reasons"] = {f"rule {code}": n for code, n in sorted(counts.items())}
    return df


def results(columns, counts, output, backend, index=None):
    """Per-user metric columns (host arrays) as `output` says: a DataFrame, or a dict of arrays
    or tensors keyed by the same column names."""
    if output == "pandas":
        return frame(columns, counts, index)
    return arrays(columns, output, backend)


def user_index(user_ids, n_users, name="user_ids", of="'X_test'"):
    """The caller's ids of the users (rows of X_test, or of `of`), as the results' index named
    "user"; None (the row numbers) when not given."""
    if user_ids is None:
        return None
    ndim = getattr(user_ids, "ndim", None)  # (device arrays: no host conversion to learn it)
    ndim = np.ndim(user_ids) if ndim is None and not isinstance(user_ids, (str, bytes)) else ndim
    if ndim != 1:  # pandas' own error: "Index(...) must be called with a collection of some kind"
        shape = "a str" if isinstance(user_ids, (str, bytes)) else \
            f"shape {tuple(user_ids.shape) if hasattr(user_ids, 'shape') else np.shape(user_ids)}"
        raise TypeError(f"'{name}' must be a 1-d sequence of ids, one per row of {of} ({n_users}); got {shape}.")
    ids = user_ids if isinstance(user_ids, pd.Index) else pd.Index(_backend.to_host(plain_array(user_ids), name))
    if ids.ndim != 1 or len(ids) != n_users:
        raise ValueError(f"'{name}' must hold one id per row of {of} ({n_users}); got {len(ids)} ids.")
    if not ids.is_unique:
        raise ValueError(f"'{name}' must hold distinct ids; {ids[ids.duplicated()][0]!r} appears more than once.")
    return ids.rename("user")
