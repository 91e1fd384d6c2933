"""Run gpureco's CUDA kernels (kernels/*.cu, unmodified) on the host: a stand-in for
cupy.RawModule that builds the source with g++ against cuda_host.h and launches kernels
through ctypes, every CUDA thread a fiber, blocks one after another.

    module = RawModule(code=source, options=("-I/path/to/kernels",))
    module.get_function("rank_tile_f32")((n_users, n_spans), (256,), args)

The launcher checks what CuPy does not: argument count and types (NumPy arrays of the
pointee's dtype, np.uint64(0) for null, NumPy scalars of the parameter's exact type), launch
limits, writes outside an array argument (each is copied between poisoned guard zones), and
inside the kernel the barrier and warp rules (cuda_host.h); a violation raises TypeError or
EmulationError. See README.md.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import numpy as np

HEADER = Path(__file__).resolve().parent / "cuda_host.h"
# -ffp-contract=off: no fused multiply-adds (the defined scores are never fused); hidden symbols:
# each module keeps its own emulator state; stack clash protection: a frame larger than a
# fiber's stack hits the guard page below it instead of another fiber's stack.
FLAGS = ("-std=c++17", "-O2", "-fPIC", "-shared", "-ffp-contract=off", "-fvisibility=hidden", "-fno-gnu-unique",
         "-fstack-clash-protection", "-Wall", "-Wno-unused-function")
SANITIZE = {"address": ("-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-fno-omit-frame-pointer",
                        "-g"),
            "thread": ("-fsanitize=thread", "-fno-omit-frame-pointer", "-g")}
SCHEDULES = {"forward": 0, "reverse": 1, "shuffle": 2}  # threads' resumption order after each barrier
BLOCK_ORDERS = {"forward": 0, "reverse": 1, "shuffle": 2}
GUARD = 4096  # bytes of poison on each side of every array argument
POISON = 0xCD
MAX_DYNAMIC_SHARED = 232_448  # bytes of shared memory a block may opt in to (an H100's, in all)
DTYPES = {"f32": np.float32, "f64": np.float64, "i8": np.int8, "u8": np.uint8, "b1": np.bool_, "i16": np.int16,
          "u16": np.uint16, "i32": np.int32, "u32": np.uint32, "i64": np.int64, "u64": np.uint64}
CTYPES = {"f32": ctypes.c_float, "f64": ctypes.c_double, "i8": ctypes.c_int8, "u8": ctypes.c_uint8,
          "b1": ctypes.c_bool, "i16": ctypes.c_int16, "u16": ctypes.c_uint16, "i32": ctypes.c_int32,
          "u32": ctypes.c_uint32, "i64": ctypes.c_int64, "u64": ctypes.c_uint64}
C_NAMES = {"f32": "float", "f64": "double", "i8": "int8_t", "u8": "uint8_t", "b1": "bool", "i16": "int16_t",
           "u16": "uint16_t", "i32": "int32_t", "u32": "uint32_t", "i64": "int64_t", "u64": "uint64_t",
           "void": "void"}


class EmulationError(RuntimeError):
    """A kernel broke a rule of CUDA that the emulator checks (barrier, warp mask, bounds)."""


class BuildError(RuntimeError):
    pass


class _Config(ctypes.Structure):  # cuda_host.h: gr_emu::Config
    _fields_ = [("grid", ctypes.c_uint32 * 3), ("block", ctypes.c_uint32 * 3), ("schedule", ctypes.c_int32),
                ("block_order", ctypes.c_int32), ("seed", ctypes.c_uint64), ("poison", ctypes.c_int32),
                ("stack_kib", ctypes.c_uint32), ("shared_mem", ctypes.c_uint32), ("error", ctypes.c_char_p),
                ("error_size", ctypes.c_uint64)]


def compiler():
    return os.environ.get("CXX", "g++")


def cache_dir():
    path = Path(os.environ.get("GPURECO_EMULATOR_CACHE") or Path(tempfile.gettempdir()) / f"gpureco-emulator-{os.getuid()}")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _run(command, what):
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise BuildError(f"{what} failed ({' '.join(map(str, command))}):\n{result.stderr}")
    return result.stdout


def _source_name(code, include_dirs):
    """The file the code was read from (for barrier sites in messages), found on the -I path."""
    for folder in include_dirs:
        for path in sorted(Path(folder).glob("*.cu")):
            try:
                if path.read_text() == code:
                    return str(path)
            except OSError:
                pass
    return "RawModule-code.cu"


def _write_atomically(path, data):
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


_built = {}
_built_lock = threading.Lock()
_launch_lock = threading.Lock()  # one launch at a time per process: a launch owns the fault signal handlers


@functools.lru_cache(maxsize=None)
def _compiler_version():
    return _run([compiler(), "--version"], f"{compiler()} --version")


def build(code, options=(), sanitize=False):
    """(path of the shared library, {kernel name: launch bound or None}), built once per
    source, headers, flags and cuda_host.h; safe when several threads or processes build at once."""
    options = tuple(o for o in options if o.startswith(("-I", "-D", "-U")))  # the rest are NVRTC's own
    sanitize = _sanitizer(sanitize)
    memo = (code, options, sanitize)
    with _built_lock:
        if memo in _built:
            return _built[memo]
    folder = cache_dir()
    mine = f"{os.getpid()}.{threading.get_ident()}"  # names of this thread's temporary files
    name = _source_name(code, [o[2:] for o in options if o.startswith("-I")])
    source = folder / f"src-{hashlib.sha256((name + chr(0) + code).encode()).hexdigest()[:24]}.cu"
    if not source.exists():
        _write_atomically(source, f'#line 1 "{name}"\n{code}\n'.encode())
    flags = [*FLAGS, *SANITIZE.get(sanitize, ()), *options]
    deps = folder / f"deps.{mine}.d"
    pre = _run([compiler(), "-E", "-x", "c++", *flags, "-DGR_EMU_DISCOVER", "-include", str(HEADER), "-MMD",
                "-MF", str(deps), str(source)], "preprocessing")
    headers = sorted(set(deps.read_text().replace("\\\n", " ").split(":", 1)[1].split()))
    deps.unlink()
    kernels = {m.group(2): int(m.group(1)) if m.group(1) else None for m in re.finditer(
        r'extern\s+"C"\s+gr_emu_kernel\s+void\s+(?:gr_emu_launch_bounds\s*\(\s*(\d+)[^)]*\)\s*)?(\w+)\s*\(', pre)}
    if not kernels:
        raise BuildError('no extern "C" __global__ function in the source')
    key = hashlib.sha256("\0".join([code, *flags, _compiler_version()]).encode())
    for header in headers:  # cuda_host.h and every header the source includes
        key.update(header.encode() + b"\0" + Path(header).read_bytes())
    library = folder / f"kernels-{key.hexdigest()[:24]}.so"
    if not library.exists():
        wrappers = 'extern "C" __attribute__((visibility("default"))) void gr_emu_asan_poison(void* p, ' \
            'unsigned long n, int on) { gr_emu::asan_poison(p, n, on); }\n' + "".join(
            f'extern "C" __attribute__((visibility("default"))) int gr_emu_launch__{k}(void** args, '
            f"const gr_emu::Config* c) {{ return gr_emu::launch(&{k}, args, c); }}\n"
            f'extern "C" __attribute__((visibility("default"))) const char* gr_emu_signature__{k}() '
            f"{{ static const std::string s = gr_emu::signature(&{k}); return s.c_str(); }}\n" for k in kernels)
        unit = folder / f"unit.{mine}.cpp"
        unit.write_text(f'#include "{source}"\n#line 1 "emulator-wrappers.cpp"\n{wrappers}')
        tmp = folder / f"{library.name}.{mine}.tmp"
        try:
            _run([compiler(), *flags, "-include", str(HEADER), str(unit), "-o", str(tmp)], "compiling")
            os.replace(tmp, library)  # atomic: another process sees no library or a whole one
        finally:
            unit.unlink(missing_ok=True)
            tmp.unlink(missing_ok=True)
    with _built_lock:
        return _built.setdefault(memo, (library, kernels))


def _dims(value, what):
    dims = (value,) if isinstance(value, (int, np.integer)) else value
    if not isinstance(dims, (tuple, list)) or not 1 <= len(dims) <= 3 or \
            not all(isinstance(d, (int, np.integer)) and not isinstance(d, (bool, np.bool_)) for d in dims):
        raise TypeError(f"{what} must be an int or a tuple of 1 to 3 ints; got {value!r}")
    dims = tuple(int(d) for d in dims) + (1,) * (3 - len(dims))
    if min(dims) < 1:
        raise EmulationError(f"invalid launch configuration: {what} {dims} has a dimension below 1")
    return dims


def _describe(code):
    if code.startswith("*"):
        const = code.startswith("*const ")
        pointee = code.split()[-1].lstrip("*")
        return f"{'const ' if const else ''}{C_NAMES.get(pointee, pointee)}*"
    return C_NAMES.get(code, code)


def _received(x):
    if isinstance(x, np.ndarray):
        return f"an array of {x.dtype}, shape {x.shape}" + ("" if x.flags.writeable else ", read-only") + \
            ("" if x.flags.c_contiguous else f", strides {x.strides}")
    if isinstance(x, np.generic):
        return f"np.{type(x).__name__}({x!r})"
    return f"{type(x).__name__} {x!r}"


def _extent(a):
    """(address, end) of the memory a kernel may read through a's data pointer: a C-contiguous
    array, or rows of one (a[:, i:j], addressed by the kernels through a leading dimension)."""
    rows_of_c = a.ndim >= 1 and a.strides[-1] == a.itemsize and all(
        s >= t > 0 for s, t in zip(a.strides[:-1], a.strides[1:]))
    if not (a.flags.c_contiguous or rows_of_c):
        return None
    if a.size == 0:
        return a.ctypes.data, a.ctypes.data
    low, high = np.byte_bounds(a) if hasattr(np, "byte_bounds") else np.lib.array_utils.byte_bounds(a)
    return low, high


class RawKernel:
    """A kernel of a RawModule, called like CuPy's: f(grid, block, args)."""

    def __init__(self, module, name, bound):
        self.module, self.name, self.bound = module, name, bound
        lib = module.library
        self._launch = lib[f"gr_emu_launch__{name}"]
        self._launch.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Config)]
        self._launch.restype = ctypes.c_int
        signature = lib[f"gr_emu_signature__{name}"]
        signature.restype = ctypes.c_char_p
        self.params = signature().decode().rstrip(",").split(",") if signature().decode() else []
        for i, code in enumerate(self.params):
            if code.split()[-1].lstrip("*") not in (*DTYPES, "void"):
                raise BuildError(f"{name}: parameter {i} has a type the emulator does not support")

    def _argument(self, i, code, x):
        expected = _describe(code)

        def wrong(what):
            return TypeError(f"{self.name}: argument {i} ({expected}) must be {what}; got {_received(x)}")
        if code.startswith("*"):
            pointee = code.split()[-1].lstrip("*")
            if isinstance(x, np.uint64) and int(x) == 0:
                return None
            dtype = None if pointee == "void" else np.dtype(DTYPES[pointee])
            of = "" if dtype is None else f" of {dtype.name}"
            if not isinstance(x, np.ndarray) or (dtype is not None and x.dtype != dtype):
                raise wrong(f"an array{of} or np.uint64(0) (null)")
            if not code.startswith("*const ") and not x.flags.writeable:
                raise wrong(f"a writable array{of}")
            if not x.dtype.isnative:
                raise wrong(f"an array{of} in native byte order")
            if _extent(x) is None:
                raise wrong(f"a C-contiguous array{of} (or rows of one)")
            return x
        dtype = np.dtype(DTYPES[code])
        if not isinstance(x, np.generic) or x.dtype != dtype:
            raise wrong(f"np.{dtype.name}(...)")
        return CTYPES[code](x.item())

    def __call__(self, grid, block, args, *, shared_mem=0, schedule=None, block_order=None, seed=None):
        grid, block = _dims(grid, "grid"), _dims(block, "block")
        threads = block[0] * block[1] * block[2]
        limit = min(1024, self.bound or 1024)
        if threads > limit or block[2] > 64 or grid[0] >= 2**31 or max(grid[1:]) > 65535:
            raise EmulationError(f"{self.name}: invalid launch configuration: grid {grid}, block {block} "
                                 f"(at most {limit} threads per block{' by __launch_bounds__' if self.bound else ''})")
        if not 0 <= shared_mem <= MAX_DYNAMIC_SHARED:  # (cuda_host.h: GR_DYNAMIC_SHARED)
            raise EmulationError(f"{self.name}: invalid launch configuration: {shared_mem} bytes of dynamic shared "
                                 f"memory (a block has at most {MAX_DYNAMIC_SHARED})")
        if not isinstance(args, (tuple, list)):
            raise TypeError(f"{self.name}: args must be a tuple; got {type(args).__name__}")
        if len(args) != len(self.params):
            raise TypeError(f"{self.name} takes {len(self.params)} arguments "
                            f"({', '.join(map(_describe, self.params))}); got {len(args)}")
        values = [self._argument(i, code, x) for i, (code, x) in enumerate(zip(self.params, args))]
        opts = self.module.launch_options(schedule, block_order, seed)
        with _Copies(self.name, self.params, values, self.module.asan_poison) as copies:
            held = [copies.pointer(i) if isinstance(v, np.ndarray) or v is None else v for i, v in enumerate(values)]
            pointers = (ctypes.c_void_p * max(1, len(held)))(*[ctypes.addressof(h) for h in held])
            message = ctypes.create_string_buffer(1 << 16)
            config = _Config((ctypes.c_uint32 * 3)(*grid), (ctypes.c_uint32 * 3)(*block), SCHEDULES[opts[0]],
                             BLOCK_ORDERS[opts[1]], opts[2], POISON, self.module.stack_kib, shared_mem,
                             ctypes.cast(message, ctypes.c_char_p), len(message))
            with _launch_lock:
                failed = self._launch(pointers, ctypes.byref(config))
            if failed:
                raise EmulationError(f"{self.name}: {message.value.decode(errors='replace')}")


class _Copies:
    """Each array argument copied between guard zones of poison (arguments that share memory
    share one copy), so that the kernel can neither read nor write outside what it was given
    without the launcher seeing it; the writable ones are copied back after the launch."""

    def __init__(self, name, params, values, asan_poison):
        self.name, self.params, self.asan_poison = name, params, asan_poison
        regions = sorted((*_extent(v), i) for i, v in enumerate(values) if isinstance(v, np.ndarray))
        self.clusters, self.where = [], {}
        for low, high, i in regions:
            if self.clusters and low < self.clusters[-1][1]:
                cluster = self.clusters[-1]
                cluster[1] = max(cluster[1], high)
                cluster[2].append(i)
            else:
                self.clusters.append([low, high, [i]])
        self.buffers, self.values = [], values

    def __enter__(self):
        for n, (low, high, members) in enumerate(self.clusters):
            raw = np.empty(high - low + 2 * GUARD + 256, dtype=np.uint8)
            start = GUARD + (-(raw.ctypes.data + GUARD) % 256)  # cudaMalloc aligns to 256 bytes
            raw[:] = POISON
            ctypes.memmove(raw.ctypes.data + start, low, high - low)
            self.buffers.append((raw, start))
            self._guards(raw, start, high - low, True)
            for i in members:
                self.where[i] = (n, self.values[i].ctypes.data - low)
        return self

    def pointer(self, i):
        if self.values[i] is None:
            return ctypes.c_void_p(0)
        n, offset = self.where[i]
        raw, start = self.buffers[n]
        return ctypes.c_void_p(raw.ctypes.data + start + offset)

    def _guards(self, raw, start, size, on):
        if self.asan_poison:
            self.asan_poison(raw.ctypes.data, start, on)
            self.asan_poison(raw.ctypes.data + start + size, raw.shape[0] - start - size, on)

    def __exit__(self, kind, error, tb):
        pairs = list(zip(self.clusters, self.buffers))
        for (low, high, _), (raw, start) in pairs:
            self._guards(raw, start, high - low, False)
        if kind is not None:
            return False
        for (low, high, members), (raw, start) in pairs:
            for zone, at in ((raw[:start], "before"), (raw[start + high - low:], "after")):
                touched = np.flatnonzero(zone != POISON)
                if touched.size:
                    names = ", ".join(f"{i} ({_describe(self.params[i])})" for i in members)
                    distance = (start - touched[0]) if at == "before" else (touched[-1] + 1)
                    raise EmulationError(f"{self.name} wrote outside array argument {names}: within {distance} "
                                         f"byte(s) {at} it")
        for (low, high, members), (raw, start) in pairs:
            if any(not self.params[i].startswith("*const ") for i in members):
                ctypes.memmove(low, raw.ctypes.data + start, high - low)
        return False


class RawModule:
    """cupy.RawModule(code=..., options=...) on the host. Launch options (defaults for every
    kernel, overridable per call): schedule, the order in which threads resume after a barrier
    or warp intrinsic ("forward", "reverse", "shuffle"); block_order, the order of the blocks
    ("forward", "reverse", "shuffle"); seed, for the shuffles. sanitize=True (or "address")
    builds with AddressSanitizer and UBSan, sanitize="thread" with ThreadSanitizer, which
    reports a data race between the threads of a block (cuda_host.h); the process must preload
    the runtime (runtime(sanitize), see test_sanitized.py)."""

    def __init__(self, code=None, options=(), *, schedule="forward", block_order="forward", seed=0,
                 sanitize=False, stack_kib=None, **cupy_only):
        if code is None:
            raise TypeError("RawModule: only code=... is emulated (not path=...)")
        unknown = set(cupy_only) - {"backend", "translate_cucomplex", "enable_cooperative_groups", "jitify",
                                    "name_expressions"}
        if unknown:
            raise TypeError(f"RawModule: unexpected argument(s) {sorted(unknown)}")
        self.defaults = self.launch_options(schedule, block_order, seed, check_only=True)
        sanitize = _sanitizer(sanitize)
        self.stack_kib = stack_kib or (256 if sanitize else 64)
        path, self.kernels = build(code, tuple(options), sanitize)
        self.library = ctypes.CDLL(str(path))
        self.asan_poison = None
        if sanitize == "address":
            self.asan_poison = self.library.gr_emu_asan_poison
            self.asan_poison.argtypes = [ctypes.c_void_p, ctypes.c_ulong, ctypes.c_int]
        self._functions = {}

    def launch_options(self, schedule=None, block_order=None, seed=None, check_only=False):
        defaults = ("forward", "forward", 0) if check_only else self.defaults
        schedule = defaults[0] if schedule is None else schedule
        block_order = defaults[1] if block_order is None else block_order
        seed = defaults[2] if seed is None else seed
        if schedule not in SCHEDULES or block_order not in BLOCK_ORDERS:
            raise ValueError(f"schedule and block_order must be one of {sorted(SCHEDULES)}; "
                             f"got {schedule!r}, {block_order!r}")
        return schedule, block_order, int(seed) & (2**64 - 1)

    def get_function(self, name):
        if name not in self.kernels:
            raise AttributeError(f"no kernel {name!r} in this module (it has {', '.join(sorted(self.kernels))})")
        if name not in self._functions:
            self._functions[name] = RawKernel(self, name, self.kernels[name])
        return self._functions[name]


def _sanitizer(sanitize):
    """None, "address" or "thread" from RawModule's sanitize argument."""
    if sanitize in (False, None):
        return None
    if sanitize is True or sanitize in SANITIZE:
        return "address" if sanitize is True else sanitize
    raise ValueError(f"sanitize must be False, True, 'address' or 'thread'; got {sanitize!r}")


def runtime(sanitize="address"):
    """The sanitizer's runtime (libasan or libtsan) to preload into a Python that loads modules
    built with it; None where g++ has none."""
    library = {"address": "libasan.so", "thread": "libtsan.so"}[_sanitizer(sanitize)]
    path = _run([compiler(), f"-print-file-name={library}"], "g++ -print-file-name").strip()
    return path if os.path.isabs(path) and os.path.exists(path) else None


def have_compiler():
    return shutil.which(compiler()) is not None
