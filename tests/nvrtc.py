"""NVRTC, the compiler CuPy runs when it loads a kernel, called through ctypes: no CuPy and no
GPU needed (compiling to PTX needs neither a driver nor a device). The library comes from the
nvidia-cuda-nvrtc wheel (the test extra installs it), from a CuPy installation's toolkit, or
from a CUDA toolkit (CUDA_PATH, /usr/local/cuda)."""
import ctypes
import importlib.util
import os
from pathlib import Path


def _candidates():
    spec = importlib.util.find_spec("nvidia")
    for base in (spec.submodule_search_locations if spec else []):
        yield from sorted(Path(base).glob("cu*/lib/libnvrtc.so*"))
        yield from sorted(Path(base).glob("cuda_nvrtc/lib/libnvrtc.so*"))
    for root in (os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            yield from sorted(Path(root).glob("lib64/libnvrtc.so*"))


def library():
    """The loaded libnvrtc, or None with the reason."""
    tried = []
    for path in _candidates():
        if "builtins" in path.name:
            continue
        try:
            return ctypes.CDLL(str(path)), None
        except OSError as error:
            tried.append(f"{path}: {error}")
    return None, "no libnvrtc found (pip install nvidia-cuda-nvrtc)" + (f"; tried {tried}" if tried else "")


def version(lib):
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return major.value, minor.value


def as_cupy(options, arch):
    """`options` as CuPy 14's RawModule hands them to NVRTC for `arch`: compute_XX (PTX) or sm_XX
    (a cubin, machine code), with the options CuPy adds (-ftz=true; --device-as-default-execution-space
    for a cubin)."""
    cubin = ["--device-as-default-execution-space"] if arch.startswith("sm_") else []
    return [*options, f"-arch={arch}", "-ftz=true", *cubin]


def compile_to_ptx(lib, source, name, options):
    """(PTX text or None, compile log) of `source` with `options`, as CuPy compiles it."""
    code, log = _compile(lib, source, name, options, "PTX")
    return (None if code is None else code.decode()), log


def compile_to_cubin(lib, source, name, options):
    """(cubin bytes or None, compile log) of `source` with `options` (an -arch=sm_XX among them):
    what CuPy builds on a device NVRTC knows, machine code, so that ptxas's limits (registers,
    48 KB of static shared memory) are checked too."""
    return _compile(lib, source, name, options, "CUBIN")


def _compile(lib, source, name, options, kind):
    program = ctypes.c_void_p()
    status = lib.nvrtcCreateProgram(ctypes.byref(program), source.encode(), name.encode(), 0, None, None)
    if status:
        raise RuntimeError(f"nvrtcCreateProgram failed with status {status}")
    try:
        encoded = [option.encode() for option in options]
        status = lib.nvrtcCompileProgram(program, len(encoded), (ctypes.c_char_p * len(encoded))(*encoded))
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(program, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(program, log)
        if status:
            return None, log.value.decode(errors="replace")
        getattr(lib, f"nvrtcGet{kind}Size")(program, ctypes.byref(size))
        code = ctypes.create_string_buffer(size.value)
        getattr(lib, f"nvrtcGet{kind}")(program, code)
        return (code.value if kind == "PTX" else code.raw), log.value.decode(errors="replace")
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(program))
