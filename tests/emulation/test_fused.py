"""kernels/fused_rank.cu (rank counting fused with the scoring, _gpu.FUSED) under the host
emulator, end to end: gpureco's GPU backend with the fused kernel gives the CPU backend's
numbers bit for bit, over row blocks (128 users; the last one partial), spans, score tiles
(128 items; the last one partial), factor steps (8; F not a multiple of it), the test items
in shared or in global memory, batches, ties, noise and the tie modes, NaN and constant
scores, biases. The kernel's filter scores are its own (an in-order fused multiply-add
chain), so no cuBLAS tile is made. The kernel against its model, and its seeded bugs:
test_emulator.py (test_fused_rank_*)."""
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import gpureco
from conftest import assert_identical, cpu_and_gpu, problem_with_special_users
from emulation.device import emulated_device
from emulation.test_emulated_backend import _both_top_k
from emulation.emulator import have_compiler
from gpureco.engine import _gpu, _scores

pytestmark = pytest.mark.skipif(not have_compiler(), reason="no C++ compiler (g++) on PATH")

N_ITEMS = 1000  # 7 tiles of 128 items and one of 104
SCHEDULES = [dict(schedule="forward", block_order="forward"), dict(schedule="reverse", block_order="reverse"),
             dict(schedule="shuffle", block_order="shuffle", seed=5)]


@pytest.fixture(autouse=True)
def fused(monkeypatch):
    monkeypatch.setattr(_gpu, "FUSED", True)
    monkeypatch.setattr(_gpu, "FUSED_BLOCKS", 4)  # several spans per row block


def problem(seed, n_users=20, n_factors=13, integer=False, test_density=0.02):
    return problem_with_special_users(seed, n_users, N_ITEMS, n_factors, test_density, np.float32, integer)


def no_cublas(cupy, monkeypatch):
    def matmul(*args, **kw):
        raise AssertionError("a score tile was made: the fused path multiplies in its kernel")
    monkeypatch.setattr(cupy, "matmul", matmul)


def fused_grids(cupy):
    assert not any(name.startswith("rank_tile") for name, _, _ in cupy.launches)
    return [grid for name, grid, _ in cupy.launches if name == "fused_rank_f32"]


CASES = {
    "normal-biases": dict(problem=dict(seed=1), kw=dict(biases=True)),
    "f4-no-bias": dict(problem=dict(seed=2, n_factors=4), kw=dict()),
    "ties-noise": dict(problem=dict(seed=3, integer=True), kw=dict(biases=True, break_ties_with_noise=True, seed=9)),
    "f17-ties": dict(problem=dict(seed=4, n_factors=17, integer=True), kw=dict()),
}


@pytest.mark.parametrize("case", CASES)
def test_fused_equals_the_cpu(monkeypatch, case):
    X_train, X_test, A, B, bias = problem(**CASES[case]["problem"])
    kw = dict(CASES[case]["kw"])
    if kw.pop("biases", False):
        kw["item_biases"] = bias
    with emulated_device(monkeypatch, **SCHEDULES[list(CASES).index(case) % 3]) as cupy:
        no_cublas(cupy, monkeypatch)
        cpu, gpu = cpu_and_gpu(X_train, X_test, A, B, k=10, **kw)
    assert_identical(cpu, gpu)
    assert np.isfinite(cpu["NDCG@K"]).sum() >= 12
    assert fused_grids(cupy) == [(1, 4)]  # 20 users: one row block; 8 tiles in 4 spans of 2


@pytest.mark.parametrize("batch_size", [1, 7, None])
def test_row_blocks_and_batches(monkeypatch, batch_size):
    """150 users: a full row block of 128 and a partial one of 21 (one user has no test items)."""
    X_train, X_test, A, B, bias = problem(5, n_users=150, integer=batch_size == 7)
    with emulated_device(monkeypatch, schedule="shuffle", block_order="shuffle", seed=batch_size or 0) as cupy:
        no_cublas(cupy, monkeypatch)
        assert_identical(*cpu_and_gpu(X_train, X_test, A, B, k=10, item_biases=bias, batch_size=batch_size))
    grids = fused_grids(cupy)
    assert grids == {1: [(1, 4)] * 149, 7: [(1, 4)] * 22, None: [(2, 2)]}[batch_size]  # FUSED_BLOCKS = 4


def test_test_items_in_global_memory(monkeypatch):
    """More test items in a block than it holds in shared memory (FUSED_SHARED_TESTS, a compile
    option): their bands are computed from global memory and counted there."""
    monkeypatch.setattr(_gpu, "FUSED_SHARED_TESTS", 16)
    X_train, X_test, A, B, bias = problem(6, n_users=12, integer=True, test_density=0.05)
    assert X_test.nnz > 16 and np.diff(X_test.indptr).max() > 16
    with emulated_device(monkeypatch, schedule="reverse", block_order="shuffle", seed=1) as cupy:
        no_cublas(cupy, monkeypatch)
        assert_identical(*cpu_and_gpu(X_train, X_test, A, B, k=10, item_biases=bias, break_ties_with_noise=True))
    assert fused_grids(cupy)


def block_tests(n_test, order):
    """Per row block of fused_rank, its test items when its rows are n_test[order]."""
    m = np.zeros(-(-len(order) // _gpu.FUSED_USERS) * _gpu.FUSED_USERS, dtype=np.int64)
    m[: len(order)] = np.asarray(n_test)[order]
    return m.reshape(-1, _gpu.FUSED_USERS).sum(axis=1)


@pytest.mark.parametrize("n", [1, 2, 3, 127, 128, 129, 200, 256, 257, 300, 700, 1024])
def test_fused_rows_balance_the_blocks(n):
    """fused_rows is a permutation; on skewed test counts (a few heavy users first, as in real
    data) every block's test items fit the shared counts where the given order's heaviest block
    does not (700 rows), and the full blocks' within one row of each other."""
    rng = np.random.default_rng(n)
    n_test = rng.integers(5, 40, size=n)
    n_test[: max(1, n // 23)] = 100
    order = _gpu.fused_rows(n_test)
    assert sorted(order.tolist()) == list(range(n))
    tests = block_tests(n_test, order)
    full = n // _gpu.FUSED_USERS
    if full >= 2:
        assert tests[:full].max() - tests[:full].min() <= 100  # a snake: within one row of each other
    if n == 700:
        assert block_tests(n_test, np.arange(n)).max() > _gpu.FUSED_SHARED_TESTS >= tests.max()


def test_fused_rows_reach_the_kernel(monkeypatch):
    """A batch of 300 users whose heavy users come first: the kernel gets the rows fused_rows
    orders (every block's counts in shared memory, which the sorted order would overflow) and
    the CPU's numbers come back per user."""
    X_train, X_test, A, B, bias = problem(21, n_users=300, integer=True, test_density=0.006)
    heavy = np.zeros(X_test.shape, dtype=bool)
    heavy[:12, :40] = True  # users 0-11: 40 test items more
    X_test = (X_test + sp.csr_matrix(heavy.astype(np.float64))).tocsr()
    X_test.data[:] = 1.0
    X_train = (X_train - X_train.multiply(X_test != 0)).tocsr()
    X_train.eliminate_zeros()
    n_test = np.diff(X_test.indptr)
    users = np.flatnonzero(n_test)
    tests = block_tests(n_test[users], _gpu.fused_rows(n_test[users])).max()
    assert block_tests(n_test[users], np.arange(len(users))).max() > tests
    monkeypatch.setattr(_gpu, "FUSED_SHARED_TESTS", int(tests))  # the balanced blocks fit, the sorted do not
    launched = []
    inner = _gpu.kernel

    def kernel(file, name):
        fn = inner(file, name)
        if name != "fused_rank_f32":
            return fn
        return lambda grid, block, args, **launch: (launched.append((args[7].copy(), args[10].copy()))
                                                    or fn(grid, block, args, **launch))
    monkeypatch.setattr(_gpu, "kernel", kernel)
    with emulated_device(monkeypatch, schedule="shuffle", block_order="shuffle", seed=2) as cupy:
        no_cublas(cupy, monkeypatch)
        assert_identical(*cpu_and_gpu(X_train, X_test, A, B, k=10, item_biases=bias))
    (batch, tests_begin), = launched
    assert sorted(batch.tolist()) == users.tolist() and list(batch) != sorted(batch)
    np.testing.assert_array_equal(np.diff(tests_begin), n_test[batch])
    assert block_tests(np.diff(tests_begin), np.arange(len(batch))).max() == tests


@pytest.mark.parametrize("ties", ["optimistic", "average"])
def test_tie_modes(monkeypatch, ties):
    X_train, X_test, A, B, bias = problem(7, integer=True)
    names = ["P", "R", "NDCG", "Hit", "RR", "ROC_AUC"]
    with emulated_device(monkeypatch, schedule="shuffle", seed=2) as cupy, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        out = {device: gpureco.Evaluator(X_test, X_train, names, [1, 10], ties=ties, device=device,
                                         output="numpy")(A, B, item_biases=bias) for device in ("cpu", "gpu")}
    assert_identical(out["cpu"], out["gpu"])
    assert len(fused_grids(cupy)) == (2 if ties == "average" else 1)


def test_only_float32_factor_models_are_fused(monkeypatch):
    """float64 factors and given scores keep the cuBLAS tiles and rank_tile; FUSED off (the
    default) too, in FP32 and TF32 mode."""
    X_train, X_test, A, B, bias = problem(8, n_factors=4)
    with emulated_device(monkeypatch) as cupy:
        cpu_and_gpu(X_train, X_test, A.astype(np.float64), B.astype(np.float64), k=5)
        cpu_and_gpu(X_train, X_test, None, None, k=5, item_biases=bias)
        monkeypatch.setattr(_gpu, "FUSED", False)
        cpu_and_gpu(X_train, X_test, A, B, k=5)
        cpu_and_gpu(X_train, X_test, A, B, k=5, tf32=True)
    assert not any(name.startswith("fused_rank") for name, _, _ in cupy.launches)
    assert sum(name.startswith("rank_tile") for name, _, _ in cupy.launches) == 4
    assert sum(name == "rank_tile_f32" for name, _, _ in cupy.launches) == 2  # FP32 and TF32


def test_models_of_more_factors_than_the_fused_tiles_index_take_the_tiles(monkeypatch):
    """The fused tiles index a row's factors in 32 bits: a float32 model of FUSED_MAX_FACTORS
    factors or more (here lowered to 4) keeps the cuBLAS tiles and rank_tile, with the CPU's numbers."""
    X_train, X_test, A, B, _ = problem(8, n_factors=4)
    monkeypatch.setattr(_gpu, "FUSED_MAX_FACTORS", 4)
    with emulated_device(monkeypatch) as cupy:
        assert_identical(*cpu_and_gpu(X_train, X_test, A, B, k=5))
        assert_identical(*cpu_and_gpu(X_train, X_test, A[:, :3], B[:, :3], k=5))
    names = [name for name, _, _ in cupy.launches]
    assert names.count("rank_tile_f32") == 1 and names.count("fused_rank_f32") == 1


def test_tf32_mode_takes_the_fused_kernels(monkeypatch):
    """With FUSED, TF32 mode scores float32 factors in fused kernels, no split cuBLAS tile: rank_users
    in fused_rank_tf32, top_k in fused_topk_tf32 (tensor cores); the CPU's numbers."""
    X_train, X_test, A, B, bias = problem(9, n_factors=5)
    with emulated_device(monkeypatch) as cupy:
        split = []
        monkeypatch.setattr(cupy, "gemm_tf32", lambda *args, **kw: split.append(1))
        assert_identical(*cpu_and_gpu(X_train, X_test, A, B, k=5, item_biases=bias, tf32=True))
        _both_top_k(A, B, k=7, X_train=X_train, item_biases=bias, tf32=True)
    names = {name for name, _, _ in cupy.launches}
    assert not split and names >= {"fused_rank_tf32", "fused_topk_tf32"}
    assert not names & {"fused_rank_f32", "fused_topk_f32"}
    assert not any(name.startswith("rank_tile") for name, _, _ in cupy.launches)


def test_tf32_mode_before_tensor_cores_takes_the_fp32_kernel(monkeypatch):
    """A device before sm_80 has no TF32 mma.sync: TF32 mode with FUSED counts in fused_rank_f32
    (where a block of it fits: the model's device does not say how much shared memory it has; a T4's
    or V100's would not hold one, the test below) and selects in fused_topk_f32."""
    X_train, X_test, A, B, bias = problem(9, n_factors=5)
    with emulated_device(monkeypatch) as cupy:
        monkeypatch.setattr(cupy.cuda.Device, "compute_capability", "75")
        assert_identical(*cpu_and_gpu(X_train, X_test, A, B, k=5, item_biases=bias, tf32=True))
        _both_top_k(A, B, k=7, X_train=X_train, item_biases=bias, tf32=True)
    names = {name for name, _, _ in cupy.launches}
    assert names >= {"fused_rank_f32", "fused_topk_f32"} and not names & {"fused_rank_tf32", "fused_topk_tf32"}


@pytest.mark.parametrize("limit", [_gpu.FUSED_STAGE_BYTES - 1, _gpu.FUSED_STAGE_BYTES])
def test_fused_rank_only_where_its_block_fits(monkeypatch, limit):
    """A block of fused_rank needs its static shared memory (none under the emulator) and the stage,
    FUSED_STAGE_BYTES, which it opts in to: on a device whose blocks may have less
    (MaxSharedMemoryPerBlockOptin: a T4's 64 KB, a V100's 96 KB), rank_users takes the tiles, and
    top_k still selects in fused_topk (19 KB); the CPU's numbers either way."""
    X_train, X_test, A, B, bias = problem(9, n_factors=5)
    with emulated_device(monkeypatch) as cupy:
        monkeypatch.setattr(cupy.cuda.Device, "attributes", {"MaxSharedMemoryPerBlockOptin": limit}, raising=False)
        assert_identical(*cpu_and_gpu(X_train, X_test, A, B, k=5, item_biases=bias))
        _both_top_k(A, B, k=7, X_train=X_train, item_biases=bias)
    names = {name for name, _, _ in cupy.launches}
    fits = limit >= _gpu.FUSED_STAGE_BYTES
    assert ("fused_rank_f32" in names) == fits and ("rank_tile_f32" in names) == (not fits)
    assert "fused_topk_f32" in names


@pytest.mark.parametrize("case", ["normal-biases", "ties-noise", "f17-ties"])
def test_tf32_fused_equals_the_cpu(monkeypatch, case):
    """fused_rank_tf32 (TF32 mode with FUSED: the tile on the emulated tensor cores, an
    adversarial model of their rounding, within score_tolerance's "fused" bound) gives the CPU's
    numbers bit for bit; 150 users for two row blocks in one case."""
    setup = dict(CASES[case]["problem"], **({"n_users": 150} if case == "ties-noise" else {}))
    X_train, X_test, A, B, bias = problem(**setup)
    kw = dict(CASES[case]["kw"])
    if kw.pop("biases", False):
        kw["item_biases"] = bias
    with emulated_device(monkeypatch, **SCHEDULES[list(CASES).index(case) % 3]) as cupy:
        no_cublas(cupy, monkeypatch)
        cpu, gpu = cpu_and_gpu(X_train, X_test, A, B, k=10, tf32=True, **kw)
    assert_identical(cpu, gpu)
    assert [grid for name, grid, _ in cupy.launches if name == "fused_rank_tf32"] == \
        [(2, 2) if case == "ties-noise" else (1, 4)]


def test_spans():
    """fused_span: whole tiles, about FUSED_BLOCKS blocks (between half and all of the spans that
    asks for, fewer only where the items run out), never more than FUSED_MAX_SPAN (plus the last
    tile's rounding): a test item's count in a block, at most its items, fits 16 bits."""
    for blocks in (4, 1024, 4096):
        _gpu.FUSED_BLOCKS = blocks  # (the fixture restores it)
        for n_users, n_items in [(1, 1), (10_000, 1_000_000), (943, 1_682), (100_000, 10_000_000), (1, 10_000_000),
                                 (300, 127), (128 * 1024, 50_000), (1, (1 << 24) + 1), (20, 1_000), (150, 1_000)]:
            span = _gpu.fused_span(n_users, n_items)
            spans, tiles = -(-n_items // span), -(-n_items // _gpu.FUSED_ITEMS)
            wanted = min(tiles, max(-(-blocks // -(-n_users // _gpu.FUSED_USERS)),
                                    -(-n_items // _gpu.FUSED_MAX_SPAN)))
            assert span % _gpu.FUSED_ITEMS == 0 and span <= _gpu.FUSED_MAX_SPAN + _gpu.FUSED_ITEMS < 1 << 16
            assert wanted / 2 <= spans <= wanted, (n_users, n_items, span)
    _gpu.FUSED_BLOCKS = 4096
    assert _gpu.fused_span(10_000, 1_000_000) == 151 * 128  # bench_gpu's problem: 79 row blocks x 52 spans


def test_a_batch_needs_no_score_tile(monkeypatch):
    """max_memory: with the fused kernel a batch holds no score tile, so its users are bounded
    by their factors, the bound's temporaries and their test items alone (besides the items'
    norms, 8 bytes an item once); the same budget gives the tile path batches of at most a
    third of them (a 1,000-item tile row is 4,000 bytes; the tile's items transposed, 4 F
    bytes an item, once: here 7 users)."""
    X_train, X_test, A, B, _ = problem(10, n_users=60)
    scorer_bytes = 8 * A.shape[1] * 4  # FactorScores.bytes_per_user
    per_user = scorer_bytes + 32 * int(np.diff(X_test.indptr).max()) + 64
    budget = 16 * (4 * N_ITEMS + per_user) + 8 * N_ITEMS
    assert (budget - 8 * N_ITEMS) // per_user >= 59  # FactorScores.fixed_bytes: the items' norms
    tile_rows = (budget - 4 * A.shape[1] * min(N_ITEMS, _gpu.TILE_ITEMS)) // (4 * N_ITEMS + per_user)
    assert tile_rows == 7
    with emulated_device(monkeypatch) as cupy:
        assert_identical(*cpu_and_gpu(X_train, X_test, A, B, k=10, max_memory=budget))
        assert fused_grids(cupy) == [(1, 4)]  # the 59 users with test items in one batch
        cupy.launches.clear()
        monkeypatch.setattr(_gpu, "FUSED", False)
        assert_identical(*cpu_and_gpu(X_train, X_test, A, B, k=10, max_memory=budget))
    assert [grid[0] for name, grid, _ in cupy.launches if name.startswith("rank_tile")] == (
        [tile_rows] * (59 // tile_rows) + [59 % tile_rows])


def fused_topk_launches(cupy, name="fused_topk_f32"):
    return [grid for launched, grid, _ in cupy.launches if launched == name]


TOP_K_CASES = {  # problem, k, top_k's options, schedule
    "biases-k10": (dict(seed=11), 10, dict(biases=True)),
    "ties-noise-k3": (dict(seed=12, n_factors=5, integer=True), 3, dict(break_ties_with_noise=True, seed=4)),
    "ties-k60-f17": (dict(seed=13, n_factors=17, integer=True), 60, dict(biases=True)),
    "150-users-k1": (dict(seed=14, n_users=150), 1, dict()),
}


@pytest.mark.parametrize("tf32", [False, True])
@pytest.mark.parametrize("case", TOP_K_CASES)
def test_fused_top_k_equals_the_cpu(monkeypatch, case, tf32):
    """top_k with FUSED: a sample of the items (cuBLAS tiles, topk_tile, topk_finish) bounds each
    user's k-th largest, fused_topk_f32 scores every item and keeps those that reach the bound,
    topk_finish cuts them to the near-ties of the k-th: the CPU's lists, bit for bit. In TF32
    mode the sample still goes through FP32 tiles, and fused_topk_tf32 (the tile on the emulated
    tensor cores, an adversarial model of their rounding) keeps what reaches tau less twice the
    larger of the two bounds (the emulated tensor core rounds well inside either bound, so the
    bound itself is test_tf32_fused_top_k_filters_within_the_tensor_bound's)."""
    setup, k, kw = TOP_K_CASES[case]
    X_train, _, A, B, bias = problem(**setup)
    kw = dict(kw)  # (the cases are shared)
    if kw.pop("biases", False):
        kw["item_biases"] = bias
    sample = _gpu.topk_sample(N_ITEMS, k)
    scored = []
    tile = _gpu.FactorScores.tile
    monkeypatch.setattr(_gpu.FactorScores, "tile", lambda self, rows, begin, n, buf: scored.append((begin, n)) or
                        tile(self, rows, begin, n, buf))
    with emulated_device(monkeypatch, **SCHEDULES[(list(TOP_K_CASES).index(case) + tf32) % 3]) as cupy:
        items, _ = _both_top_k(A, B, k, X_train=X_train, tf32=tf32, **kw)
    assert (items[2:] >= 0).all()
    assert scored == sample + [(0, N_ITEMS)]  # cuBLAS: the sample's pieces, then user 0's full row (a NaN factor)
    name, other = ("fused_topk_tf32", "fused_topk_f32")[::1 if tf32 else -1]
    assert fused_topk_launches(cupy, name) == ([(1, 4)] if A.shape[0] <= 128 else [(2, 2)])  # FUSED_BLOCKS = 4
    assert not fused_topk_launches(cupy, other)


@pytest.mark.parametrize("tf32", [False, True])
def test_fused_top_k_above_the_sample_rank_settles_only_what_its_threshold_proves(monkeypatch, tf32):
    """k = 65 > TOPK_SAMPLE_RANK: the sample's 64 best items (two of its pieces, score 1.5) set
    tau = 1.5, far above the 65th best of the catalogue. Item X's filter score is one unit
    under the threshold tau - 2 tol, its defined score 2.6 units over it (8 factors of 0.45
    units that the float32 sum drops); Y's are both one unit over it. 65 items reach the
    threshold (the 64 and Y), so a count alone would settle the user with Y, where X is the
    65th best: the 65th largest candidate below tau sends the user down the full-row path."""
    n_items, k, unit = 1024, 65, np.float32(2.0 ** -23)
    A = np.ones((1, 9), dtype=np.float32)
    B = np.zeros((n_items, 9), dtype=np.float32)
    sample = _gpu.topk_sample(n_items, k)
    assert _gpu.topk_sample_rank(k) == 64 and sample[:2] == [(0, 32), (64, 32)]
    B[list(range(32)) + list(range(64, 96)), 0] = 1.5
    X, Y = 40, 41  # outside the sample
    B[X, 1:] = np.float32(0.45) * unit
    B[X, 0] = B[Y, 0] = 1.0  # (their scores' magnitude for the bound)
    item_abs_max, bias_abs_max = _scores.magnitudes(B, np.zeros(1))
    bounds = [_scores.score_tolerance(A, item_abs_max, bias_abs_max, np.float32, mode, _scores.max_row_norm(B))[0]
              for mode in ((False, "fused") if tf32 else (False,))]
    threshold = _gpu._float_at_most(np, np.array([1.5 - 2.0 * max(bounds)]))[0]
    B[X, 0], B[Y, 0] = threshold - unit, threshold + unit
    X_train = sp.csr_array((1, n_items), dtype=np.float32)
    full_rows = []
    inner = _gpu._full_row_candidates
    monkeypatch.setattr(_gpu, "_full_row_candidates", lambda *a: full_rows.append(np.asarray(a[2]).tolist()) or inner(*a))
    with emulated_device(monkeypatch) as cupy:
        items, _ = _both_top_k(A, B, k, X_train=X_train, tf32=tf32)
    assert X in items[0] and Y not in items[0]
    assert full_rows == [[0]]
    assert fused_topk_launches(cupy, "fused_topk_tf32" if tf32 else "fused_topk_f32") == [(1, 4)]


def test_tf32_fused_top_k_filters_within_the_tensor_bound(monkeypatch):
    """What the lists above cannot show (the emulated tensor cores round well inside even FP32's
    bound): the fused pass of TF32 mode keeps what reaches tau less twice a bound that holds for
    its tensor-core filter (score_tolerance's "fused" one, wider than FP32's) and for the
    sample's FP32 scores that set tau, and topk_finish cuts its candidates within that bound."""
    X_train, _, A, B, bias = problem(11)
    seen = {}
    kernel = _gpu.kernel

    def recording(module, name):
        launch = kernel(module, name)

        def run(grid, block, args):  # each launch's arguments as it leaves them
            done = launch(grid, block, args)
            seen.setdefault(name, []).append([np.array(a) if isinstance(a, np.ndarray) else a for a in args])
            return done
        return run
    monkeypatch.setattr(_gpu, "kernel", recording)
    with emulated_device(monkeypatch):
        _both_top_k(A, B, 10, X_train=X_train, item_biases=bias, tf32=True)
    (threshold,) = [args[10] for args in seen["fused_topk_tf32"]]
    sample_finish, fused_finish = seen["topk_finish"]
    tol, fused_tol, tau = sample_finish[1], fused_finish[1], sample_finish[5]  # tau: the sample's r-th largest
    users = np.arange(A.shape[0])
    item_abs_max, bias_abs_max = _scores.magnitudes(B, bias)
    tensor = _scores.score_tolerance(A[users], item_abs_max, bias_abs_max, np.float32, "fused", _scores.max_row_norm(B))
    np.testing.assert_allclose(fused_tol, np.maximum(tol, tensor), rtol=1e-12)  # (NaN for user 0's NaN factor)
    finite = np.isfinite(tau) & np.isfinite(tol)
    assert finite.sum() >= 15 and (tensor[finite] > 5 * tol[finite]).all()  # the tensor bound is the wider here
    assert (threshold[finite] <= tau[finite] - 2 * fused_tol[finite]).all()


def test_fused_top_k_flags_what_it_cannot_bound(monkeypatch):
    """Users the fused pass cannot settle take the full-row path, with the CPU's lists: a NaN or
    infinite factor (filter scores not finite), every score equal (more candidates than a buffer
    holds: 9,000 items), and a user with fewer than k pool items in the sample."""
    rng = np.random.default_rng(15)
    n_users, n_items, k = 6, 9000, 10
    A = rng.standard_normal((n_users, 4)).astype(np.float32)
    B = rng.standard_normal((n_items, 4)).astype(np.float32)
    A[1, 2], A[2, 0] = np.nan, np.inf
    train = np.zeros((n_users, n_items), dtype=bool)
    for begin, n in _gpu.topk_sample(n_items, k):
        train[3, begin: begin + n] = True  # user 3's sampled items are all training items
    X_train = sp.csr_array(train.astype(np.float64))
    full_rows = []
    inner = _gpu._full_row_candidates
    monkeypatch.setattr(_gpu, "_full_row_candidates", lambda *a: full_rows.append(np.asarray(a[2]).tolist()) or inner(*a))
    with emulated_device(monkeypatch, schedule="shuffle", block_order="reverse", seed=3) as cupy:
        _both_top_k(A, B, k, X_train=X_train)
        B[:, :] = 1.0
        A[4:] = 1.0
        _both_top_k(A[4:], B, k)  # every score equal
    assert full_rows == [[1, 2, 3], [0, 1]]
    assert len(fused_topk_launches(cupy)) == 2


def test_fused_top_k_above_the_sample_rank(monkeypatch):
    """k above TOPK_SAMPLE_RANK (64): the sample's 64th largest sets each user's threshold, from
    a sample 64 / k the size k would take (512 of 9,000 items here, against 800 for k = 100),
    and a user whose threshold lets fewer than k items through takes the full-row path (user
    4: only its sampled items score high): the CPU's lists either way."""
    rng = np.random.default_rng(16)
    n_users, n_items, k = 5, 9000, 100
    assert _gpu.topk_sample_rank(k) == 64 and _gpu.topk_sample_rank(10) == 10
    sample = _gpu.topk_sample(n_items, k)
    assert sum(n for _, n in sample) == 512 and len(sample) == _gpu.TOPK_SAMPLE_PIECES
    A = rng.standard_normal((n_users, 5)).astype(np.float32)
    B = rng.standard_normal((n_items, 5)).astype(np.float32)
    A[:, 4], A[4, 4], B[:, 4] = 0.0, 1.0, 0.0
    for begin, n in sample:
        B[begin: begin + n, 4] = 100.0 + rng.random(n)  # user 4: its sampled items, and only they, score high
    X_train = sp.csr_array((rng.random((n_users, n_items)) < 0.05).astype(np.float64))
    scored, full_rows = [], []
    tile, inner = _gpu.FactorScores.tile, _gpu._full_row_candidates
    monkeypatch.setattr(_gpu.FactorScores, "tile", lambda self, rows, begin, n, buf: scored.append((begin, n)) or
                        tile(self, rows, begin, n, buf))
    monkeypatch.setattr(_gpu, "_full_row_candidates", lambda *a: full_rows.append(np.asarray(a[2]).tolist()) or inner(*a))
    with emulated_device(monkeypatch, schedule="shuffle", block_order="shuffle", seed=7) as cupy:
        items, _ = _both_top_k(A, B, k, X_train=X_train)
    assert (items >= 0).all()
    assert scored == sample + [(0, n_items)]  # the sample, then user 4's full row
    assert full_rows == [[4]]
    assert len(fused_topk_launches(cupy)) == 1
