#!/usr/bin/env python
"""Device operations and host synchronisations of one GPU-backend call, counted without a GPU.

At training-loop sizes a GPU call's time is host work: CuPy spends some microseconds of
Python and driver time on every array operation and launch, and a synchronisation (a
copy to the host, a size known only on the device) waits for all the device work queued
before it. This counts both for one call of `calc_reco_metrics` and of an Evaluator (all
ten metrics at K = 10, factors on the "device"), in the tiles and fused modes, by running
the GPU backend on tests/gpu_model.py's NumPy model of the device, whose arrays here count
every ufunc, array function, fancy index, assignment and dtype conversion made on them,
every kernel launch, and every synchronisation (a device array turned into a Python
number, nonzero-like calls whose result size is on the device, device-to-host copies).
The counts are the device's, not NumPy's: they do not depend on the machine. Writes
<out>/gpu_ops_<date>.json and .md.

    python benchmarks/bench_gpu_ops.py
"""
import argparse
import collections
import contextlib
import datetime as dt
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(os.path.dirname(HERE), "tests")]
from bench_cpu import git_commit, make_problem, write_results  # noqa: E402

import gpu_model  # noqa: E402

METRICS = ("P", "TP", "R", "AP", "TAP", "NDCG", "Hit", "RR", "ROC_AUC", "PR_AUC")
SIZE_DEPENDENT = {"nonzero", "flatnonzero", "argwhere", "unique"}  # result size known on the device only
COUNTS = {"ops": collections.Counter(), "launches": collections.Counter(), "syncs": collections.Counter()}
COUNTING = [False]


def _count(kind, name):
    if COUNTING[0]:
        COUNTS[kind][name] += 1


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
        return _device(getattr(ufunc, method)(*_host(inputs), **kwargs))

    def __array_function__(self, func, types, args, kwargs):
        _count("ops", func.__name__)
        if func.__name__ in SIZE_DEPENDENT:
            _count("syncs", func.__name__)
        return _device(func(*_host(args), **_host(kwargs)))

    def __getitem__(self, index):
        if isinstance(index, np.ndarray) or (isinstance(index, tuple) and any(isinstance(i, np.ndarray) for i in index)):
            _count("ops", "gather")
        if isinstance(index, Device) and index.dtype == bool:
            _count("syncs", "boolean mask")
        result = super().__getitem__(_host(index))
        return np.asarray(result).view(Device) if isinstance(result, np.generic) else _device(result)  # CuPy: 0-d

    def __setitem__(self, index, value):
        _count("ops", "scatter" if isinstance(index, np.ndarray) else "assign")
        super().__setitem__(_host(index), _host(value))

    def astype(self, *args, **kwargs):
        _count("ops", "astype")
        return _device(self.view(np.ndarray).astype(*args, **kwargs))

    def fill(self, value):
        _count("ops", "fill")
        self.view(np.ndarray).fill(value)

    def _number(self, kind):
        _count("syncs", f"{kind.__name__}()")
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
        return self.view(np.ndarray).copy()


Device.__module__ = "cupy"  # so that gpureco takes it for a device array


def counting_cupy():
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
            return _device(_f(*_host(args), **_host(kwargs)))
        setattr(cupy, name, call)

    class Module(gpu_model._Module):
        def get_function(self, name):
            function = super().get_function(name)

            def launch(grid, block, args):
                _count("launches", name)
                return function(grid, block, _host(tuple(args)))
            return launch
    cupy.RawModule = Module
    return cupy


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="943x1682x32,5000x20000x64")
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    args = parser.parse_args(argv)
    from gpureco.engine import _backend, _gpu
    cupy = counting_cupy()
    sys.modules["cupy"] = cupy
    _backend._state = (cupy, _backend.GpuStatus(True, "NumPy model of a GPU, counting"), True)
    _backend.float32_compute = contextlib.nullcontext
    import gpureco
    rows = []
    for size in filter(None, args.sizes.split(",")):
        users, items, factors = (int(v) for v in size.split("x"))
        X_train, X_test, A, B = make_problem(users, items, factors)
        A, B = _device(np.asarray(A)), _device(np.asarray(B))
        evaluator = gpureco.Evaluator(X_test, X_train, METRICS, 10, device="gpu", output="numpy")
        calls = {"calc_reco_metrics": lambda: gpureco.calc_reco_metrics(X_train, X_test, A, B, k=10, all_metrics=True,
                                                                        output="numpy", device="gpu"),
                 "Evaluator(A, B)": lambda: evaluator(A, B)}
        for mode in ("tiles", "fused"):
            for what, call in calls.items():
                _gpu.FUSED = mode == "fused"
                call()  # the first call copies the Evaluator's interactions
                for c in COUNTS.values():
                    c.clear()
                COUNTING[0] = True
                try:
                    call()
                finally:
                    COUNTING[0], _gpu.FUSED = False, False
                rows.append(dict(users=users, items=items, factors=factors, mode=mode, call=what,
                                 ops=sum(COUNTS["ops"].values()), launches=sum(COUNTS["launches"].values()),
                                 syncs=sum(COUNTS["syncs"].values()), ops_by_name=dict(COUNTS["ops"].most_common()),
                                 launches_by_name=dict(COUNTS["launches"]), syncs_by_name=dict(COUNTS["syncs"])))
    lines = ["# Device operations and host synchronisations per call (NumPy model of the device)", "",
             f"Date {dt.date.today().isoformat()}, commit {git_commit()}; `python benchmarks/bench_gpu_ops.py`. "
             "All ten metrics at K = 10, factors on the device.", "",
             "| users x items x F | mode | call | array ops | launches | syncs | syncs by kind |",
             "|---|---|---|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['users']:,} x {r['items']:,} x {r['factors']} | {r['mode']} | {r['call']} | {r['ops']} | "
                     f"{r['launches']} | {r['syncs']} | {', '.join(f'{k} {v}' for k, v in r['syncs_by_name'].items())} |")
    text = "\n".join(lines)
    print(text)
    stem = write_results(args.out, f"gpu_ops_{dt.date.today().isoformat()}",
                         dict(date=dt.date.today().isoformat(), commit=git_commit(), rows=rows), text)
    print(f"\nwrote {stem}.json and .md")


if __name__ == "__main__":
    main()
