#!/usr/bin/env python
"""Device operations and host synchronisations of one GPU-backend call, counted without a GPU.

At training-loop sizes a GPU call's time is host work: CuPy spends some microseconds of
Python and driver time on every array operation and launch, and a synchronisation (a
copy to the host, a size known only on the device) waits for all the device work queued
before it. This counts both for one call of `calc_reco_metrics`, of an Evaluator (all
ten metrics at K = 10, factors on the "device") and of `top_k` (K = 100), in the tiles and fused modes, by running
the GPU backend on tests/gpu_model.py's NumPy model of the device, whose arrays here count
every ufunc, array function, fancy index, assignment and dtype conversion made on them,
every kernel launch, and every synchronisation (a device array turned into a Python
number, nonzero-like calls whose result size is on the device, device-to-host copies).
The counts are the device's, not NumPy's: they do not depend on the machine. It also
times each call's host share on this machine (median of --repeat calls, NumPy and pandas
output): the call's time less the time inside the model's device operations, launches
and synchronisations, i.e. validation, the engine's Python, the metrics and the output;
CuPy's own microseconds per operation are not in it. Writes <out>/gpu_ops_<date>.json and .md
(gpu_ops_<date>_stub.* with --stub-kernels).

    python benchmarks/bench_gpu_ops.py
    python benchmarks/bench_gpu_ops.py --stub-kernels --modes fused --sizes 10000x1000000x128   # bench_gpu's problem
"""
import argparse
import collections
import contextlib
import datetime as dt
import os
import platform
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(os.path.dirname(HERE), "tests")]
from bench_cpu import git_commit, make_problem, write_results  # noqa: E402

import gpu_model  # noqa: E402

METRICS = ("P", "TP", "R", "AP", "TAP", "NDCG", "Hit", "RR", "ROC_AUC", "PR_AUC")
SIZE_DEPENDENT = {"nonzero", "flatnonzero", "argwhere", "unique"}  # result size known on the device only
COUNTS = {"ops": collections.Counter(), "launches": collections.Counter(), "syncs": collections.Counter()}
COUNTING = [False]
DEVICE_TIME = [0.0, 0]  # seconds inside device operations, launches and syncs; nesting depth


def _count(kind, name):
    if COUNTING[0]:
        COUNTS[kind][name] += 1


@contextlib.contextmanager
def _on_device():
    """Time spent here is the model's stand-in for device work, not the host's."""
    DEVICE_TIME[1] += 1
    start = time.perf_counter()
    try:
        yield
    finally:
        DEVICE_TIME[1] -= 1
        if DEVICE_TIME[1] == 0:
            DEVICE_TIME[0] += time.perf_counter() - start


def _host(x):
    if isinstance(x, Device):
        return x.view(np.ndarray)
    if isinstance(x, (tuple, list)):
        return type(x)(_host(y) for y in x)
    if isinstance(x, dict):
        return {k: _host(v) for k, v in x.items()}
    return x


def _device(x):
    if isinstance(x, np.ndarray) and not isinstance(x, Device):
        return x.view(Device)
    if isinstance(x, tuple):
        return tuple(_device(y) for y in x)
    return x


class Device(gpu_model.DeviceArray):
    """A model device array that counts what is done with it."""

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        _count("ops", ufunc.__name__ + ("" if method == "__call__" else "." + method))
        if "out" in kwargs:
            kwargs["out"] = _host(kwargs["out"])
        with _on_device():
            return _device(getattr(ufunc, method)(*_host(inputs), **kwargs))

    def __array_function__(self, func, types, args, kwargs):
        _count("ops", func.__name__)
        if func.__name__ in SIZE_DEPENDENT:
            _count("syncs", func.__name__)
        with _on_device():
            return _device(func(*_host(args), **_host(kwargs)))

    def __getitem__(self, index):
        if isinstance(index, np.ndarray) or (isinstance(index, tuple) and any(isinstance(i, np.ndarray) for i in index)):
            _count("ops", "gather")
        if isinstance(index, Device) and index.dtype == bool:
            _count("syncs", "boolean mask")
        with _on_device():
            result = super().__getitem__(_host(index))
        return np.asarray(result).view(Device) if isinstance(result, np.generic) else _device(result)  # CuPy: 0-d

    def __setitem__(self, index, value):
        _count("ops", "scatter" if isinstance(index, np.ndarray) else "assign")
        with _on_device():
            super().__setitem__(_host(index), _host(value))

    def astype(self, *args, **kwargs):
        _count("ops", "astype")
        with _on_device():
            return _device(self.view(np.ndarray).astype(*args, **kwargs))

    def fill(self, value):
        _count("ops", "fill")
        with _on_device():
            self.view(np.ndarray).fill(value)

    def _number(self, kind):
        _count("syncs", f"{kind.__name__}()")
        with _on_device():
            return kind(self.view(np.ndarray))

    def __int__(self):
        return self._number(int)

    def __index__(self):
        return self._number(int)

    def __float__(self):
        return self._number(float)

    def __bool__(self):
        return self._number(bool)

    def get(self):
        _count("syncs", "copy to host")
        with _on_device():
            return self.view(np.ndarray).copy()


Device.__module__ = "cupy"  # so that gpureco takes it for a device array


def counting_cupy(stub_kernels=False):
    """The model's cupy, counting; with stub_kernels, a launch, and a matmul into a buffer (cuBLAS's
    tile), is counted but does nothing (host time at sizes the NumPy kernels would take minutes over; the
    numbers are then meaningless: a stubbed kernel leaves its outputs as they were)."""
    cupy = gpu_model.fake_cupy()
    cupy.ndarray = Device
    for name in dir(np):
        value = getattr(cupy, name, None)
        if name.startswith("_") or not callable(value) or isinstance(value, type) or name in ("errstate",):
            continue

        def call(*args, _f=value, _name=name, **kwargs):
            _count("ops", _name)
            if _name in SIZE_DEPENDENT:
                _count("syncs", _name)
            if _name in ("asarray", "array", "ascontiguousarray") and args and not isinstance(args[0], Device):
                _count("ops", "copy to device")
            with _on_device():
                return _device(_f(*_host(args), **_host(kwargs)))
        setattr(cupy, name, call)

    class Module(gpu_model._Module):
        def get_function(self, name):
            function = super().get_function(name)

            def launch(grid, block, args, **launch):
                _count("launches", name)
                if stub_kernels:
                    return None
                with _on_device():
                    return function(grid, block, _host(tuple(args)), **launch)
            return launch
    cupy.RawModule = Module
    if stub_kernels:  # a tile (a product into a buffer): the NumPy product of stale buffers took about 54 s a
        matmul = cupy.matmul  # call at 10,000 x 100,000 x 64

        def stub_matmul(*args, **kwargs):
            if "out" not in kwargs:
                return matmul(*args, **kwargs)
            _count("ops", "matmul")
            return kwargs["out"]
        cupy.matmul = stub_matmul
    host_copy = cupy.asnumpy

    def asnumpy(a, stream=None):  # (with a stream: a batch's part of the results, copied on a stream of its own)
        _count("syncs", "copy to host" if stream is None else "copy to host (another stream)")
        with _on_device():
            return host_copy(_host(a), stream=stream)
    cupy.asnumpy = asnumpy
    return cupy


# top_k with FUSED takes the full-row path (every pool score of the user, then a sort) for a user whose
# sample leaves fewer than K candidates: with stubbed kernels, every user (their counts stay 0)
SKIPPED_STUB_TOP_K = ("top_k is not run in fused mode with --stub-kernels: the stubbed kernels count no candidate, "
                      "so every user would take the full-row path.")


# host time by phase: gpureco's functions whose host time (less the model's device time inside) is summed
PHASES = {"validation": (("gpureco._validation", "interactions"), ("gpureco._validation", "check_disjoint"),
                         ("gpureco._validation", "factors_on")),
          "metrics": (("gpureco.engine._engine", "_part_metrics"), ("gpureco.engine._engine", "nan_counts"))}
PHASE_TIME = collections.Counter()


@contextlib.contextmanager
def timed_phases():
    """PHASES' functions timed into PHASE_TIME while inside (their modules' attributes replaced:
    gpureco calls them through their modules)."""
    saved = []
    for phase, functions in PHASES.items():
        for module_name, name in functions:
            module = sys.modules[module_name]
            function = getattr(module, name)

            def timed(*args, _f=function, _phase=phase, **kwargs):
                device, start = DEVICE_TIME[0], time.perf_counter()
                try:
                    return _f(*args, **kwargs)
                finally:
                    PHASE_TIME[_phase] += time.perf_counter() - start - (DEVICE_TIME[0] - device)
            saved.append((module, name, function))
            setattr(module, name, timed)
    try:
        yield
    finally:
        for module, name, function in saved:
            setattr(module, name, function)


def host_ms(call, repeat):
    """The median host time of `call` in milliseconds: wall time less the model's device time;
    and {phase: median ms} of PHASES' share of it."""
    times, phases = [], collections.defaultdict(list)
    with timed_phases():
        for _ in range(repeat):
            DEVICE_TIME[0] = 0.0
            PHASE_TIME.clear()
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start - DEVICE_TIME[0])
            for phase in PHASES:
                phases[phase].append(PHASE_TIME[phase])
    return statistics.median(times) * 1e3, {phase: statistics.median(v) * 1e3 for phase, v in phases.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="943x1682x32,5000x20000x64")
    parser.add_argument("--repeat", type=int, default=7, help="timed calls per row (host ms: their median)")
    parser.add_argument("--stub-kernels", action="store_true",
                        help="launches and cuBLAS's tiles counted but not run: host ms at bench_gpu's sizes "
                        "(10000x1000000x128)")
    parser.add_argument("--modes", default="tiles,fused", help="tiles (cuBLAS tiles; the model multiplies them, "
                        "but for --stub-kernels), fused")
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    args = parser.parse_args(argv)
    from gpureco.engine import _backend, _gpu
    cupy = counting_cupy(args.stub_kernels)
    sys.modules["cupy"] = cupy
    _backend._state = (cupy, _backend.GpuStatus(True, "NumPy model of a GPU, counting"), True)
    _backend.float32_compute = contextlib.nullcontext
    import gpureco
    rows = []
    for size in filter(None, args.sizes.split(",")):
        users, items, factors = (int(v) for v in size.split("x"))
        X_train, X_test, A, B = make_problem(users, items, factors)
        A, B = _device(np.asarray(A)), _device(np.asarray(B))
        evaluators = {out: gpureco.Evaluator(X_test, X_train, METRICS, 10, device="gpu", output=out)
                      for out in ("numpy", "pandas")}

        def calls(out):
            return {"calc_reco_metrics": lambda: gpureco.calc_reco_metrics(X_train, X_test, A, B, k=10, all_metrics=True,
                                                                           output=out, device="gpu"),
                    "Evaluator(A, B)": lambda: evaluators[out](A, B),
                    "top_k(K=100)": lambda: gpureco.top_k(A, B, 100, X_train=X_train, device="gpu", output=out)}
        for mode in args.modes.split(","):
            for what, call in calls("numpy").items():
                if args.stub_kernels and mode == "fused" and what.startswith("top_k"):
                    continue  # (SKIPPED_STUB_TOP_K)
                _gpu.FUSED = mode == "fused"
                try:
                    call()  # the first call copies the Evaluator's interactions
                    for c in COUNTS.values():
                        c.clear()
                    COUNTING[0] = True
                    try:
                        call()
                    finally:
                        COUNTING[0] = False
                    host = {out: host_ms(calls(out)[what], args.repeat) for out in ("numpy", "pandas")}
                    (host_numpy, phases), host_pandas = host["numpy"], host["pandas"][0]
                finally:
                    _gpu.FUSED = False
                rows.append(dict(users=users, items=items, factors=factors, mode=mode, call=what,
                                 ops=sum(COUNTS["ops"].values()), launches=sum(COUNTS["launches"].values()),
                                 syncs=sum(COUNTS["syncs"].values()), host_ms_numpy=host_numpy,
                                 host_ms_pandas=host_pandas, host_ms_by_phase=phases,
                                 ops_by_name=dict(COUNTS["ops"].most_common()),
                                 launches_by_name=dict(COUNTS["launches"]), syncs_by_name=dict(COUNTS["syncs"])))
    lines = ["# Device operations and host synchronisations per call (NumPy model of the device)", "",
             f"Date {dt.date.today().isoformat()}, commit {git_commit()}; `python benchmarks/bench_gpu_ops.py "
             f"{' '.join(argv if argv is not None else sys.argv[1:])}`. "
             + ("Kernels stubbed (--stub-kernels): launches and matmuls counted, not run. " if args.stub_kernels else "") +
             "All ten metrics at K = 10, factors on the device. Host ms: the median over "
             f"{args.repeat} calls of the call's time less the time inside the model's device operations, "
             f"launches and synchronisations, on this machine ({platform.processor() or platform.machine()}, "
             f"{os.cpu_count()} CPUs): validation, the engine's Python, the metrics and the output "
             "(numpy arrays, or a pandas DataFrame). It leaves out CuPy's own time per operation "
             "(some microseconds each on a GPU) and the device's. Of the numpy output's host ms: "
             "validation (the interactions' copies and checks, their disjointness, the factors' checks: all "
             "before the first launch on a GPU) and metrics (the metrics of each batch's part, from its ranks, "
             "and the NaN counts: a part's while the device ranks the next batch, the last part's after the last "
             "kernel); the rest is the engine's Python around the launches and the output."
             + (f" {SKIPPED_STUB_TOP_K}" if args.stub_kernels and "fused" in args.modes.split(",") else ""), "",
             "| users x items x F | mode | call | array ops | launches | syncs | syncs by kind | host ms (numpy) "
             "| of it: validation | of it: metrics | host ms (pandas) |",
             "|---|---|---|---:|---:|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        phases = r["host_ms_by_phase"]
        lines.append(f"| {r['users']:,} x {r['items']:,} x {r['factors']} | {r['mode']} | {r['call']} | {r['ops']} | "
                     f"{r['launches']} | {r['syncs']} | {', '.join(f'{k} {v}' for k, v in r['syncs_by_name'].items())} | "
                     f"{r['host_ms_numpy']:.2f} | {phases['validation']:.2f} | {phases['metrics']:.2f} | "
                     f"{r['host_ms_pandas']:.2f} |")
    text = "\n".join(lines)
    print(text)
    stem = write_results(args.out, f"gpu_ops_{dt.date.today().isoformat()}" + ("_stub" if args.stub_kernels else ""),
                         dict(date=dt.date.today().isoformat(), commit=git_commit(), stub_kernels=args.stub_kernels,
                              rows=rows), text)
    print(f"\nwrote {stem}.json and .md")


if __name__ == "__main__":
    main()
