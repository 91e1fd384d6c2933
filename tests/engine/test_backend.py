"""Device choice: CuPy missing, CuPy without a usable GPU, and the errors for device="gpu"."""
import sys
import types
import warnings

import numpy as np
import pytest

import gpureco
from gpureco.engine import _backend
from conftest import random_problem, to_csr


@pytest.fixture
def fresh_probe(monkeypatch):
    """Forget what this process learnt about CuPy, and restore it afterwards."""
    monkeypatch.setattr(_backend, "_state", None)
    monkeypatch.setattr(_backend, "_warned", False)


def fake_cupy_without_device():
    def no_device():
        raise RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")
    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=no_device))
    return cupy


def evaluate(device, rng):
    X_train, X_test, A, B = random_problem(rng)
    X_train[:, 0], X_test[:, 0] = 0, 1  # every user evaluated: no NaN warning
    return gpureco.calc_reco_metrics(to_csr(X_train), to_csr(X_test), A, B, k=3, all_metrics=True, device=device)


def test_without_cupy_auto_is_the_cpu_silently_and_gpu_is_an_error(fresh_probe, monkeypatch, rng):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError
    status = gpureco.gpu_available()
    assert not status and not status.available
    assert "CuPy is not installed" in status.reason and "gpureco[cuda12]" in status.reason
    assert _backend.resolve_device("auto") == ("cpu", None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        auto = evaluate("auto", np.random.default_rng(1))
    pd_cpu = evaluate("cpu", np.random.default_rng(1))
    assert auto.equals(pd_cpu)
    for device in ("gpu", "cuda:0"):
        with pytest.raises(RuntimeError, match=rf"device='{device}' needs a usable GPU: CuPy is not installed"):
            evaluate(device, rng)


def test_cupy_without_a_device_falls_back_with_one_warning(fresh_probe, monkeypatch, rng):
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy_without_device())
    status = gpureco.gpu_available()
    assert not status
    assert "CuPy is installed but no CUDA device is usable" in status.reason and "cudaErrorNoDevice" in status.reason
    with pytest.warns(RuntimeWarning, match="gpureco: evaluating on the CPU: CuPy is installed but no CUDA device") \
            as record:
        first = evaluate("auto", np.random.default_rng(2))
    assert record[0].filename == __file__  # it points at the call of calc_reco_metrics, not inside gpureco
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per process
        second = evaluate("auto", np.random.default_rng(2))
    assert first.equals(second) and first.equals(evaluate("cpu", np.random.default_rng(2)))
    with pytest.raises(RuntimeError, match="device='gpu' needs a usable GPU: CuPy is installed but no CUDA device"):
        evaluate("gpu", rng)


def test_broken_cupy_is_reported(fresh_probe, monkeypatch):
    class Broken(types.ModuleType):
        def __getattr__(self, name):
            raise OSError("libcudart.so.13: cannot open shared object file")
    monkeypatch.setitem(sys.modules, "cupy", Broken("cupy"))
    status = gpureco.gpu_available()
    assert not status and "libcudart.so.13" in status.reason


@pytest.mark.skipif(bool(gpureco.gpu_available()), reason="a GPU is usable here")
def test_gpu_only_options_need_the_gpu(rng):
    X_train, X_test, A, B = random_problem(rng)
    with pytest.raises(ValueError, match="output='cupy' needs the GPU backend"):
        gpureco.calc_reco_metrics(to_csr(X_train), to_csr(X_test), A, B, device="cpu", output="cupy")
    with pytest.raises(ValueError, match="output='cupy' needs the GPU backend"):
        gpureco.top_k(A, B, 3, device="cpu", output="cupy")


def test_gpu_arrays_without_cupy_are_a_clear_error(fresh_probe, monkeypatch, rng):
    monkeypatch.setitem(sys.modules, "cupy", None)

    class CudaArray:  # what a torch CUDA tensor looks like from here
        __cuda_array_interface__ = {"shape": (3, 2), "typestr": "<f4", "data": (0, False), "version": 3}
    X_train, X_test, A, B = random_problem(rng, n_users=3, n_items=5, n_factors=2)
    with pytest.raises(TypeError, match="'A' is in GPU memory but gpureco cannot use CuPy here"):
        gpureco.calc_reco_metrics(to_csr(X_train), to_csr(X_test), CudaArray(), B, device="cpu")


def test_array_module_does_not_import_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    assert _backend.array_module(np.zeros(2), [1.0]) is np


def fake_cupy_with_a_device(monkeypatch, kernel=None, version=None):
    """CuPy with a device and NVRTC, whose first compile fails as CuPy 14.1's does without the
    CUDA headers; or, with `kernel`, compiles every kernel into kernel(grid, block, args)."""
    def compiler(code, name):
        if kernel is None:
            raise RuntimeError("Failed to find CUDA headers. Please install the CUDA Toolkit headers")
        return kernel

    class DeviceArray(np.ndarray):
        def get(self):
            return np.array(self)
    cupy = types.ModuleType("cupy")
    if version:
        cupy.__version__ = version
    cupy.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(
        getDeviceCount=lambda: 1, getDeviceProperties=lambda i: {"name": b"NVIDIA H100 80GB HBM3"}))
    cupy.RawKernel = compiler
    cupy.int32 = np.int32
    cupy.zeros = lambda n, dtype: np.zeros(n, dtype=dtype).view(DeviceArray)
    nvrtc = types.ModuleType("cupy_backends.cuda.libs.nvrtc")
    nvrtc.getVersion = lambda: (13, 0)
    for name in ("cupy_backends", "cupy_backends.cuda", "cupy_backends.cuda.libs"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "cupy_backends.cuda.libs.nvrtc", nvrtc)
    sys.modules["cupy_backends.cuda.libs"].nvrtc = nvrtc
    monkeypatch.setitem(sys.modules, "cupy", cupy)


def test_cupy_that_cannot_compile_a_kernel_falls_back(fresh_probe, monkeypatch, rng):
    """The probe compiles and runs a kernel: a CuPy without the CUDA headers is no GPU for "auto"
    (the CPU, one warning that says why), and a clear error for "gpu"."""
    fake_cupy_with_a_device(monkeypatch)
    status = gpureco.gpu_available()
    assert not status and "cannot compile kernels" in status.reason and "Failed to find CUDA headers" in status.reason
    with pytest.warns(RuntimeWarning, match="evaluating on the CPU: CuPy cannot compile kernels"):
        auto = evaluate("auto", np.random.default_rng(3))
    assert auto.equals(evaluate("cpu", np.random.default_rng(3)))
    with pytest.raises(RuntimeError, match="device='gpu' needs a usable GPU: CuPy cannot compile kernels"):
        evaluate("gpu", rng)


def test_the_probe_runs_a_kernel(fresh_probe, monkeypatch):
    """A CuPy whose probe kernel writes its output is a GPU; one whose kernel runs without
    writing is not (a broken driver or device, found before the first evaluation)."""
    def writes(grid, block, args):
        args[0][0] = 7
    fake_cupy_with_a_device(monkeypatch, kernel=writes)
    status = gpureco.gpu_available()
    assert status and "device 0 is NVIDIA H100" in status.reason
    monkeypatch.setattr(_backend, "_state", None)
    fake_cupy_with_a_device(monkeypatch, kernel=lambda grid, block, args: None)
    status = gpureco.gpu_available()
    assert not status and "did not write its output" in status.reason


def test_a_cupy_older_than_the_pin_is_no_gpu(fresh_probe, monkeypatch, rng):
    """CuPy before 14.1 (which pyproject.toml's extras exclude, but an environment may hold) sorts
    wrongly instead of raising when a sort's workspace runs out (cupy/cupy#9894), on which the
    batches' halving relies: no GPU for "auto", with the reason; 14.1 and later are used."""
    def writes(grid, block, args):
        args[0][0] = 7
    fake_cupy_with_a_device(monkeypatch, kernel=writes, version="14.0.1")
    status = gpureco.gpu_available()
    assert not status and "CuPy 14.0.1 is older than 14.1" in status.reason and "cupy/cupy#9894" in status.reason
    with pytest.warns(RuntimeWarning, match="evaluating on the CPU: CuPy 14.0.1 is older than 14.1"):
        evaluate("auto", rng)
    for version in ("14.0.0b2", "14.1.0rc1", "14.1.0.dev0", "13.6.0"):
        monkeypatch.setattr(_backend, "_state", None)
        fake_cupy_with_a_device(monkeypatch, kernel=writes, version=version)
        assert not gpureco.gpu_available(), version
    for version in ("14.1", "14.1.0", "14.1.1", "14.1.0.post1", "14.2.0rc1", "15.0.0"):
        monkeypatch.setattr(_backend, "_state", None)
        fake_cupy_with_a_device(monkeypatch, kernel=writes, version=version)
        assert gpureco.gpu_available(), version


class PinnedHost:
    """An array in pinned host memory as DLPack describes it (kDLCUDAHost, 3): host memory."""
    def __init__(self, array):
        self.array = array

    def __dlpack_device__(self):
        return (3, 0)

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)


def test_pinned_host_memory_is_host_memory(rng):
    X_train, X_test, A, B = random_problem(rng)
    X_train[:, 0], X_test[:, 0] = 0, 1  # every user evaluated: no NaN warning
    assert not _backend.is_device_array(PinnedHost(A))
    got = gpureco.calc_reco_metrics(to_csr(X_train), to_csr(X_test), PinnedHost(A), PinnedHost(B), k=3, device="cpu")
    assert got.equals(gpureco.calc_reco_metrics(to_csr(X_train), to_csr(X_test), A, B, k=3, device="cpu"))


def test_an_array_on_another_gpu_is_a_clear_error(monkeypatch):
    class DeviceArray:
        def __init__(self, device):
            self.device = types.SimpleNamespace(id=device)
    cp = types.SimpleNamespace(ndarray=DeviceArray, cuda=types.SimpleNamespace(Device=lambda: types.SimpleNamespace(id=0)))
    monkeypatch.setattr(_backend, "cupy", lambda: cp)
    here = DeviceArray(0)
    assert _backend.to_device(here, "'A'") is here
    with pytest.raises(ValueError, match=r"'A' is on GPU 1 but gpureco is evaluating on GPU 0; .* device='cuda:1'"):
        _backend.to_device(DeviceArray(1), "'A'")
