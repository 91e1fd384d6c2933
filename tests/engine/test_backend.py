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
