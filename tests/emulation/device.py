"""gpureco's GPU backend (gpureco/engine/_gpu.py) on the host: NumPy in place of CuPy (the
fake module of tests/gpu_model.py) and the real kernels, run by the emulator, in place of
cupy.RawModule."""
import contextlib

from gpu_model import model_device

from emulation.emulator import RawModule

# A GPU as gpureco sees it: the kernels' settings (GR_EMULATED_ARCH: kernels/common.cuh), its compute
# capability (_gpu.tensor_cores) and the shared memory a block may opt in to (_gpu.fused_rank_fits), in bytes
# (as tests/engine/test_kernels.py MAX_BLOCK_SHARED). Of the settings' five sets (tests/emulation/test_emulator.py
# test_the_emulation_takes_each_gpus_settings), an RTX 30, 40 or 50, A10 or L40 takes an L4's; an H100's (H200,
# B200, B300) are the emulation's default; Orin's (rank_tile's as an L4, fused_rank's as an A100) is not here.
GPUS = {
    "T4": dict(arch=750, compute_capability="75", shared_optin=64 * 1024),
    "A100": dict(arch=800, compute_capability="80", shared_optin=166_912),
    "L4": dict(arch=890, compute_capability="89", shared_optin=101_376),
}


@contextlib.contextmanager
def emulated_device(monkeypatch, fail_above=None, schedule="forward", block_order="forward", seed=0, gpu=None):
    """For the duration of the block, device="gpu" runs the kernels of kernels/*.cu under the
    emulator; yields the fake cupy module, whose `launches` lists (kernel, grid, block) of every
    launch. fail_above=n: a rank_tile launch over more than n users raises the device's
    OutOfMemoryError (the batch halving); schedule, block_order, seed: see RawModule; gpu: a
    name of GPUS, whose kernel settings, compute capability and shared memory the device takes
    (else an H100's settings and capability, and a device that does not say its shared memory)."""
    if gpu is not None and gpu not in GPUS:
        raise ValueError(f"gpu must be one of {sorted(GPUS)}; got {gpu!r}")
    with model_device(monkeypatch) as cupy:
        arch = ()
        if gpu is not None:
            arch = (f"-DGR_EMULATED_ARCH={GPUS[gpu]['arch']}",)
            monkeypatch.setattr(cupy.cuda.Device, "compute_capability", GPUS[gpu]["compute_capability"])
            monkeypatch.setattr(cupy.cuda.Device, "attributes",
                                {"MaxSharedMemoryPerBlockOptin": GPUS[gpu]["shared_optin"]}, raising=False)
        out_of_memory = cupy.cuda.memory.OutOfMemoryError
        launches = []  # (kernel name, grid, block) of every launch, for the tests

        class Module(RawModule):
            def __init__(self, code=None, options=()):
                super().__init__(code=code, options=tuple(options) + arch, schedule=schedule, block_order=block_order,
                                 seed=seed)

            def get_function(self, name):
                kernel = super().get_function(name)

                def launch(grid, block, args, shared_mem=0):
                    if fail_above is not None and name.startswith("rank_tile") and grid[0] > fail_above:
                        raise out_of_memory(f"emulator: {grid[0]} users do not fit")
                    launches.append((name, tuple(grid), tuple(block)))
                    return kernel(grid, block, args, shared_mem=shared_mem)
                return launch
        monkeypatch.setattr(cupy, "RawModule", Module)
        cupy.launches = launches
        yield cupy
