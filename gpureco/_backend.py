"""Which backend evaluates. The one module allowed to import cupy (none yet: the GPU engine
plugs in here, so that `import gpureco` never needs CuPy)."""
from __future__ import annotations

import re

import numpy as np

DEVICES = ("auto", "cpu", "gpu", "cuda:N")


def array_module(*arrays):
    """numpy, or cupy when any of `arrays` is a CuPy array (never imports cupy otherwise)."""
    for a in arrays:
        if type(a).__module__.split(".")[0] in ("cupy", "cupyx"):
            import cupy
            return cupy
    return np


def resolve_device(device):
    """The backend name for a `device` argument: "cpu" (the only engine in this version)."""
    if not isinstance(device, str) or not (device in ("auto", "cpu", "gpu") or re.fullmatch(r"cuda:\d+", device)):
        raise ValueError(f"'device' must be one of {', '.join(map(repr, DEVICES))}; got {device!r}.")
    if device in ("auto", "cpu"):
        return "cpu"
    raise ValueError(f"device={device!r}: this version of gpureco has no GPU engine yet; "
                     "use device='cpu' or device='auto'.")
