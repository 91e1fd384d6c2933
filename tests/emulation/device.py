"""gpureco's GPU backend (gpureco/engine/_gpu.py) on the host: NumPy in place of CuPy (the
fake module of tests/gpu_model.py) and the real kernels, run by the emulator, in place of
cupy.RawModule."""
import contextlib

from gpu_model import model_device

from emulation.emulator import RawModule


@contextlib.contextmanager
def emulated_device(monkeypatch, fail_above=None, schedule="forward", block_order="forward", seed=0):
    """For the duration of the block, device="gpu" runs the kernels of kernels/*.cu under the
    emulator; yields the fake cupy module, whose `launches` lists (kernel, grid, block) of every
    launch. fail_above=n: a rank_tile launch over more than n users raises the device's
    OutOfMemoryError (the batch halving); schedule, block_order, seed: see RawModule."""
    with model_device(monkeypatch) as cupy:
        out_of_memory = cupy.cuda.memory.OutOfMemoryError
        launches = []  # (kernel name, grid, block) of every launch, for the tests

        class Module(RawModule):
            def __init__(self, code=None, options=()):
                super().__init__(code=code, options=options, schedule=schedule, block_order=block_order, seed=seed)

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
