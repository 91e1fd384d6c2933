"""Which backend evaluates, and the one module that imports cupy.

`import gpureco` never needs CuPy: it is imported on first use, and whether a GPU is usable
is decided once per process (`gpu_available`), with the reason when it is not.
"""
from __future__ import annotations

import contextlib
import re
import warnings
from typing import NamedTuple

import numpy as np

DEVICES = ("auto", "cpu", "gpu", "cuda:N")
_state = None  # (cupy module or None, GpuStatus, installed: bool), set by _probe
_warned = False  # the CPU fallback of device="auto" is announced once per process
MIN_CUPY = (14, 1)  # pyproject.toml's extras pin the same


class GpuUnavailable(RuntimeError):
    """A GPU was asked for (device="gpu" or "cuda:N") and none is usable here; says why."""


class GpuStatus(NamedTuple):
    """Whether gpureco can use a GPU here; `reason` says why not, or names the device."""
    available: bool
    reason: str

    def __bool__(self):
        return self.available


def _probe():
    global _state
    if _state is None:
        try:
            import cupy
        except ModuleNotFoundError as error:
            if error.name != "cupy":
                raise
            _state = (None, GpuStatus(False, f"CuPy is not installed ({error}); install gpureco[cuda12] or "
                                             "gpureco[cuda13] to match your CUDA version"), False)
            return _state
        except Exception as error:  # a broken installation
            _state = (None, GpuStatus(False, f"CuPy failed to import: {type(error).__name__}: {error}"), True)
            return _state
        try:
            version = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?(\S*)", str(cupy.__version__))
        except Exception:  # (a broken installation says so below)
            version = None
        if version and _older_than_the_pin(version):
            _state = (None, GpuStatus(False, f"CuPy {cupy.__version__} is older than {MIN_CUPY[0]}.{MIN_CUPY[1]}, "
                                             "whose sorts raise MemoryError where older ones return wrong values "
                                             "(cupy/cupy#9894); install gpureco[cuda12] or gpureco[cuda13]"), True)
            return _state
        try:
            count = cupy.cuda.runtime.getDeviceCount()
            why = "no CUDA device found"
        except Exception as error:  # no driver, no device, or a CUDA version mismatch
            count, why = 0, f"{type(error).__name__}: {error}"
        if count > 0:
            try:  # the kernels are compiled at run time: NVRTC and the CUDA headers must be there
                from cupy_backends.cuda.libs import nvrtc
                nvrtc.getVersion()
                name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
                _compile_and_run(cupy)
            except Exception as error:
                _state = (None, GpuStatus(False, f"CuPy cannot compile kernels or query the device "
                                                 f"({type(error).__name__}: {error})"), True)
                return _state
            name = name.decode() if isinstance(name, bytes) else str(name)
            _state = (cupy, GpuStatus(True, f"{count} CUDA device(s); device 0 is {name}"), True)
        else:
            _state = (None, GpuStatus(False, f"CuPy is installed but no CUDA device is usable ({why})"), True)
    return _state


def _older_than_the_pin(version):
    """Whether a CuPy version (re.match of major, minor, micro, the rest) comes before MIN_CUPY;
    a pre-release of MIN_CUPY itself (14.1.0rc1, 14.1.0.dev0) does, as in pip's order."""
    release = (int(version[1]), int(version[2]))
    pre = int(version[3] or 0) == 0 and re.match(r"(a|b|rc|\.?dev)\d*", version[4]) is not None
    return release < MIN_CUPY or (release == MIN_CUPY and pre)


def _compile_and_run(cupy):
    """A one-line kernel compiled as gpureco's are (NVRTC, with CuPy's CUDA headers) and run:
    CuPy finds its compiler and headers only when a kernel is first compiled (from 14.1 a
    missing header path is a RuntimeError there), so that "auto" falls back to the CPU here
    instead of failing at the first evaluation."""
    kernel = cupy.RawKernel(r'extern "C" __global__ void gpureco_probe(int* x) { x[0] = 7; }', "gpureco_probe")
    x = cupy.zeros(1, dtype=cupy.int32)
    kernel((1,), (1,), (x,))
    if int(x.get()[0]) != 7:
        raise RuntimeError("a probe kernel ran but did not write its output")


def gpu_available():
    """Whether gpureco can evaluate on a GPU, and if not, why.

    Returns
    -------
    GpuStatus
        A named tuple ``(available, reason)`` that is truthy when a GPU is usable.

    Examples
    --------
    >>> import gpureco
    >>> status = gpureco.gpu_available()
    >>> isinstance(status.reason, str)
    True
    """
    return _probe()[1]


def cupy():
    """The cupy module (only after resolve_device chose the GPU)."""
    module = _probe()[0]
    if module is None:
        raise GpuUnavailable(f"gpureco: no GPU: {gpu_available().reason}.")
    return module


def is_device_name(device):
    """Whether `device` is one of DEVICES' forms: "auto", "cpu", "gpu" or "cuda:N"."""
    return isinstance(device, str) and re.fullmatch(r"auto|cpu|gpu|cuda:\d+", device) is not None


def resolve_device(device):
    """("cpu", None) or ("gpu", device id) for a `device` argument.

    "auto" takes the current CUDA device when one is usable, else the CPU (with one warning
    per process when CuPy is installed but cannot use a GPU); "gpu" and "cuda:N" raise
    without one.
    """
    global _warned
    if not is_device_name(device):
        raise ValueError(f"'device' must be one of {', '.join(map(repr, DEVICES))}; got {device!r}.")
    if device == "cpu":
        return "cpu", None
    module, status, installed = _probe()
    if not status:
        if device == "auto":
            if installed and not _warned:
                _warned = True
                # stacklevel 4: the user's call of a front door (-> _validation.backend_for -> here)
                warnings.warn(f"gpureco: evaluating on the CPU: {status.reason}.", RuntimeWarning, stacklevel=4)
            return "cpu", None
        raise GpuUnavailable(f"device={device!r} needs a usable GPU: {status.reason}.")
    if device.startswith("cuda:"):
        index, count = int(device[5:]), module.cuda.runtime.getDeviceCount()
        if index >= count:
            raise ValueError(f"device={device!r}: this machine has {count} CUDA device(s), numbered 0 to {count - 1}.")
        return "gpu", index
    return "gpu", module.cuda.Device().id


def device_context(backend):
    """The context of a resolve_device answer: its CUDA device, or nothing for the CPU."""
    kind, index = backend
    return cupy().cuda.Device(index) if kind == "gpu" else contextlib.nullcontext()


def is_device_array(x):
    """Whether x lives in GPU memory (CuPy, CUDA array interface, or a CUDA DLPack device).

    Pinned host memory (DLPack's kDLCUDAHost, 3) is host memory: NumPy reads it, CuPy's
    from_dlpack refuses it."""
    module = type(x).__module__.split(".")[0]
    if module in ("cupy", "cupyx"):
        return True
    if module == "torch":  # (a sparse CPU tensor raises RuntimeError, not AttributeError, for the interface)
        return x.device.type == "cuda"
    if hasattr(x, "__cuda_array_interface__"):
        return True
    try:
        return x.__dlpack_device__()[0] in (2, 13)  # kDLCUDA, kDLCUDAManaged
    except Exception:
        return False


def to_device(x, what=None):
    """x as a CuPy array, without a copy when it is already in GPU memory. GPU memory of another
    device than the current one is an error naming `what` (the kernels cannot read it)."""
    cp = cupy()
    if not isinstance(x, cp.ndarray):
        if not is_device_array(x):
            return cp.asarray(x)  # host memory: copied to the current device
        dlpack = not hasattr(x, "__cuda_array_interface__") and hasattr(x, "__dlpack__")
        x = cp.from_dlpack(x) if dlpack else cp.asarray(x)
    here = cp.cuda.Device().id
    there = getattr(x.device, "id", here)  # (the tests' NumPy model of the device: one device)
    if what is not None and there != here:
        raise ValueError(f"{what} is on GPU {there} but gpureco is evaluating on GPU {here}; move it there, "
                         f"or pass device='cuda:{there}'.")
    return x


def to_host(x, name):
    """x as a NumPy array (a copy from the GPU when it lives there); scipy/cupyx sparse to scipy."""
    if type(x).__module__.startswith("cupyx.scipy.sparse"):
        return x.get()
    if type(x).__module__.split(".")[0] == "torch" and str(x.layout) != "torch.strided":
        return x  # a sparse tensor: _validation.as_csr reads it, from any device
    if not is_device_array(x):
        return x
    if _probe()[0] is None and type(x).__module__.split(".")[0] not in ("cupy", "cupyx"):
        raise TypeError(f"'{name}' is in GPU memory but gpureco cannot use CuPy here ({gpu_available().reason}); "
                        "pass a host (NumPy) array.")
    return to_device(x).get()


def array_module(*arrays):
    """numpy, or cupy when any of `arrays` is a CuPy array (never imports cupy otherwise)."""
    for a in arrays:
        if type(a).__module__.split(".")[0] in ("cupy", "cupyx"):
            return cupy()
    return np


def gemm_tf32(a, b, out, accumulate):
    """out = a @ b.T (+ out when `accumulate`) on TF32 tensor cores: float32 arrays on the
    device, a (m, k), b (n, k) and out (m, n) row-major with any row stride.
    cuBLAS's GEMM with beta = 1 (the only way to add to a product without another pass over
    out); CuPy's matmul has no beta. The inputs must already be TF32 numbers (_scores.split_tf32)."""
    from cupy.cuda import device
    from cupy_backends.cuda.libs import cublas
    m, k = a.shape
    n = b.shape[0]
    alpha, beta = np.ones((), dtype=np.float32), np.asarray(1.0 if accumulate else 0.0, dtype=np.float32)
    # row-major out (m, n) is column-major (n, m): out^T = op(b^T) a^T with b read transposed
    cublas.gemmEx(device.get_cublas_handle(), getattr(cublas, "CUBLAS_OP_T", 1), getattr(cublas, "CUBLAS_OP_N", 0),
                  n, m, k, alpha.ctypes.data, b.data.ptr, _CUDA_R_32F, b.strides[0] // 4, a.data.ptr, _CUDA_R_32F,
                  a.strides[0] // 4, beta.ctypes.data, out.data.ptr, _CUDA_R_32F, out.strides[0] // 4,
                  getattr(cublas, "CUBLAS_COMPUTE_32F_FAST_TF32", 77), getattr(cublas, "CUBLAS_GEMM_DEFAULT_TENSOR_OP", 99))
    return out


_CUDA_R_32F = 0  # cudaDataType CUDA_R_32F


@contextlib.contextmanager
def float32_compute():
    """cuBLAS float32 products in float32, never TF32, whatever CUPY_TF32 says (CuPy's global
    setting is restored afterwards)."""
    from cupy._core import _routines_linalg as linalg
    old = linalg.get_compute_type(np.float32)
    linalg.set_compute_type(np.float32, linalg.COMPUTE_TYPE_FP32)
    try:
        yield
    finally:
        linalg.set_compute_type(np.float32, old)
