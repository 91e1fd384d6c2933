"""gpureco's GPU backend end to end, under the host emulator, as each GPU runs it: the kernels
compiled with that GPU's settings (GR_EMULATED_ARCH: rank_tile's cells, fused_rank's shared
counts), and the backend's choices from its compute capability (tensor cores) and shared
memory (whether a block of fused_rank fits). calc_reco_metrics and top_k, in FP32 and TF32
mode, over the tiles and with FUSED, give the CPU's numbers bit for bit, through the kernels
each GPU takes. A T4 takes the tiles, whose settings are an L4's under the emulation (its
blocks an SM are launch bounds), and its own REDUX-less gr_warp_extremes runs only in
fused_rank, which it cannot hold: test_emulator.py test_warp_extremes runs that. An H100's
settings: every other test here. The kernels alone with other GPUs' settings, against their
models: test_emulator.py."""
import numpy as np
import pytest

from conftest import assert_identical, cpu_and_gpu, problem_with_special_users
from emulation.device import emulated_device
from emulation.emulator import have_compiler
from emulation.test_emulated_backend import _both_top_k
from gpureco.engine import _gpu

pytestmark = pytest.mark.skipif(not have_compiler(), reason="no C++ compiler (g++) on PATH")

# what each GPU takes, stated here (not worked out as the backend does): whether a block of fused_rank fits it
# (FUSED: else the tiles), and whether it has TF32 tensor cores (fused_rank_tf32 and fused_topk_tf32)
TAKES = {"T4": dict(fused_rank=False, tensor_cores=False), "A100": dict(fused_rank=True, tensor_cores=True),
         "L4": dict(fused_rank=True, tensor_cores=True)}
# fused_rank's shared counts on a GPU of 99 KB a block (an L4's): FUSED_WORDS, kernels/fused_rank.cu
SHARED_TESTS_99_KB = _gpu.FUSED_SHARED_TESTS * 2 // 5


def launched(cupy):
    names = {name for name, _, _ in cupy.launches}
    cupy.launches.clear()
    return names


@pytest.mark.parametrize("gpu", TAKES)
def test_each_gpu_gives_the_cpus_numbers(monkeypatch, gpu):
    """Two problems: 14 users of 9,000 items in score tiles of 5,000 and rank_tile blocks of
    4,096 (a user's table has the GPU's full cells in the blocks of 4,096 and 4,000 items, half
    as many in the one of 904), TF32 mode in split tiles; 150 users of 1,000 items for the fused
    kernels (two row blocks, the first of about 2,400 test items: in shared memory with an A100's
    or H100's settings, in global memory with an L4's)."""
    monkeypatch.setattr(_gpu, "TILE_ITEMS", 5000)
    monkeypatch.setattr(_gpu, "RANK_SPAN", 4096)
    monkeypatch.setattr(_gpu, "TF32_TILES_MIN_FACTORS", 0)  # TF32 mode's split tiles for these small models
    tiles = problem_with_special_users(1, 14, 9000, 4, 0.01, np.float32, False)
    fused = problem_with_special_users(2, 150, 1000, 13, 0.02, np.float32, True)
    blocks = []  # the test items of fused_rank's row blocks
    inner = _gpu.fused_rows

    def fused_rows(n_test):
        order = inner(n_test)
        starts = np.arange(0, len(order), _gpu.FUSED_USERS)
        blocks.extend(np.add.reduceat(np.asarray(n_test)[order], starts))
        return order
    monkeypatch.setattr(_gpu, "fused_rows", fused_rows)
    fits, tensor_cores = TAKES[gpu]["fused_rank"], TAKES[gpu]["tensor_cores"]
    topk_tf32 = "fused_topk_tf32" if tensor_cores else "fused_topk_f32"
    with emulated_device(monkeypatch, gpu=gpu, schedule="shuffle", block_order="shuffle", seed=7) as cupy:
        for X_train, X_test, A, B, bias in (tiles, fused):
            for tf32 in (False, True):
                assert_identical(*cpu_and_gpu(X_train, X_test, A, B, k=10, item_biases=bias, tf32=tf32))
        X_train, _, A, B, bias = tiles
        _both_top_k(A, B, 50, X_train=X_train, item_biases=bias)  # (top_k's users: a few, for the emulator's time)
        X_train, _, A, B, bias = fused
        _both_top_k(A[:20], B, 50, X_train=X_train[:20], item_biases=bias, tf32=True)
        assert {"rank_tile_f32", "split_tf32_f32", "topk_tile_f32", topk_tf32} <= launched(cupy)
        monkeypatch.setattr(_gpu, "FUSED", True)
        monkeypatch.setattr(_gpu, "FUSED_BLOCKS", 4)  # several spans a row block
        X_train, X_test, A, B, bias = fused
        for tf32 in (False, True):
            cpu, on_gpu = cpu_and_gpu(X_train, X_test, A, B, k=10, item_biases=bias, tf32=tf32)
            assert_identical(cpu, on_gpu)
        _both_top_k(A[:20], B, 50, X_train=X_train[:20], item_biases=bias)
        names = launched(cupy)
    assert np.isfinite(cpu["NDCG@K"]).sum() >= 140
    assert "fused_topk_f32" in names
    if fits:
        assert {"fused_rank_f32", "fused_rank_tf32"} <= names  # (every GPU here that holds it has tensor cores)
        assert "rank_tile_f32" not in names
        # a row block of more test items than a 99 KB GPU counts in shared memory, fewer than an A100 or H100 does
        assert blocks and SHARED_TESTS_99_KB < max(blocks) <= _gpu.FUSED_SHARED_TESTS
    else:  # (a T4's 64 KB hold no block of fused_rank: rank_users takes the tiles)
        assert "rank_tile_f32" in names and not any(name.startswith("fused_rank") for name in names)


def test_emulated_device_refuses_an_unknown_gpu(monkeypatch):
    with pytest.raises(ValueError, match="gpu must be one of .*'A100'.*got 'V100'"):
        with emulated_device(monkeypatch, gpu="V100"):
            pass
