#!/usr/bin/env python
"""GPU time of gpureco against the cuBLAS product alone and the pipelines people write today.

One generated problem (default: 10,000 users x 1,000,000 items x 128 factors, float32,
K=100, all ten metrics; training and test items as in bench_cpu.make_problem), factors in
GPU memory, each timed after a warm-up run, with the device synchronised:

1. gpureco.calc_reco_metrics(device="gpu", all_metrics=True, output="cupy"), the same with
   tf32=True, and the same with the fused kernel (_gpu.FUSED: kernels/fused_rank.cu scores
   and counts in one pass, no cuBLAS tiles), whose numbers must equal FP32's bit for bit;
2. the floor: cupy.matmul(A[batch], B.T) for every user, in the batches gpureco would use;
3. PyTorch: per batch S = A_b @ B.T, training items set to -inf, torch.topk for the @K
   metrics, a full torch.sort of every row for the AUC ranks (skipped if torch is missing);
4. the same pipeline with CuPy (cupy.argsort gives both the top K and the ranks).

It also reports gpureco's peak device memory beyond the inputs (a CuPy memory hook over
the pool's allocations) and checks that the pipelines' P@K and ROC-AUC agree with
gpureco's; with torch, the kernel times of one gpureco call (torch.profiler); and gpureco in
FP32 and TF32 at other tile shapes (--tile-shapes: items per tile x users per batch, down
to 32 MB score tiles that can stay in L2 between the GEMM and the counting), whose numbers
must be the default's. Figures,
device, commit and command go to <out>/gpu_<date>.json and .md.

    python benchmarks/bench_gpu.py                 # the full problem, about a minute
    python benchmarks/bench_gpu.py --users 2000 --items 200000
"""
import argparse
import datetime as dt
import os
import shlex
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_cpu import git_commit, make_problem, write_results  # noqa: E402

import gpureco  # noqa: E402


def same_results(cp, a, b):
    """Whether two calc_reco_metrics(output="cupy") results hold the same numbers bit for bit
    (NaN where NaN): their arrays compared by cupy.array_equal, their other entries ("K", a
    Python int, which CuPy's array_equal refuses) by ==."""
    return a.keys() == b.keys() and all(
        bool(cp.array_equal(a[name], b[name], equal_nan=True)) if isinstance(a[name], cp.ndarray) else a[name] == b[name]
        for name in a)


def synced(cp, fn):
    """(seconds, result) of fn() with the device synchronised before and after."""
    cp.cuda.Device().synchronize()
    start = time.perf_counter()
    out = fn()
    cp.cuda.Device().synchronize()
    return time.perf_counter() - start, out


def peak_memory(cp, fn):
    """Peak bytes allocated from CuPy's memory pool while fn() runs, beyond what was held before."""
    class Peak(cp.cuda.MemoryHook):
        name = "peak"

        def __init__(self):
            self.current = self.peak = 0

        def malloc_postprocess(self, device_id, size, mem_size, mem_ptr, pmem_id):
            self.current += mem_size
            self.peak = max(self.peak, self.current)

        def free_postprocess(self, device_id, mem_size, mem_ptr, pmem_id):
            self.current -= mem_size
    hook = Peak()
    with hook:
        fn()
        cp.cuda.Device().synchronize()
    return hook.peak


def kernel_times(torch, fn, top=12):
    """{kernel name: (milliseconds, launches)} of one call of fn, by CUDA time, largest first
    (torch.profiler sees CuPy's and cuBLAS's kernels as well as torch's)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    totals = {}
    for event in prof.events():
        if getattr(event, "device_type", None) is not None and "CUDA" in str(event.device_type):
            ms, count = totals.get(event.name, (0.0, 0))
            totals[event.name] = (ms + event.device_time_total / 1000.0, count + 1)
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][0])[:top]
    return {name[:80]: (round(ms, 3), count) for name, (ms, count) in ranked}


def gemm_floor(cp, A, B, batch):
    out = cp.empty((batch, B.shape[0]), dtype=A.dtype)
    for begin in range(0, A.shape[0], batch):
        rows = A[begin: begin + batch]
        cp.matmul(rows, B.T, out=out[: rows.shape[0]])


def pipeline_metrics(xp, ranks_of_tests, test_rows, n_test, n_pool, hits, k):
    """P@K and ROC-AUC per user of a batch from the pipelines' intermediate results (xp: torch or cupy)."""
    rank_sum = xp.bincount(test_rows, weights=ranks_of_tests * 1.0, minlength=n_test.shape[0])
    n_t = n_test * 1.0
    roc_auc = 1.0 - (rank_sum - n_t * (n_t + 1) / 2) / (n_t * (n_pool - n_t))
    return hits.sum(1) / k, roc_auc


def torch_pipeline(torch, A, B, X_train, X_test, k, batch):
    A_t, B_t = torch.as_tensor(A, device="cuda"), torch.as_tensor(B, device="cuda")
    out_p, out_auc = [], []
    for begin in range(0, A.shape[0], batch):
        end = min(begin + batch, A.shape[0])
        tr, te = X_train[begin:end], X_test[begin:end]
        S = A_t[begin:end] @ B_t.T
        tr_rows = torch.as_tensor(np.repeat(np.arange(end - begin), np.diff(tr.indptr)), device="cuda")
        S[tr_rows, torch.as_tensor(tr.indices.astype(np.int64), device="cuda")] = -float("inf")
        te_rows = torch.as_tensor(np.repeat(np.arange(end - begin), np.diff(te.indptr)), device="cuda")
        te_cols = torch.as_tensor(te.indices.astype(np.int64), device="cuda")
        relevant = torch.zeros_like(S, dtype=torch.bool)
        relevant[te_rows, te_cols] = True
        top = torch.topk(S, k, dim=1).indices
        order = torch.sort(S, dim=1, descending=True).indices  # the full sort the AUCs need
        rank = torch.empty_like(order)
        rank.scatter_(1, order, torch.arange(S.shape[1], device="cuda").expand_as(order))
        n_test = torch.as_tensor(np.diff(te.indptr), device="cuda")
        n_pool = torch.as_tensor(B.shape[0] - np.diff(tr.indptr), device="cuda").double()
        p, auc = pipeline_metrics(torch, rank[te_rows, te_cols] + 1, te_rows, n_test, n_pool,
                                  relevant.gather(1, top).double(), k)
        out_p.append(p)
        out_auc.append(auc)
    return torch.cat(out_p).cpu().numpy(), torch.cat(out_auc).cpu().numpy()


def cupy_pipeline(cp, A, B, X_train, X_test, k, batch):
    out_p, out_auc = [], []
    for begin in range(0, A.shape[0], batch):
        end = min(begin + batch, A.shape[0])
        tr, te = X_train[begin:end], X_test[begin:end]
        S = A[begin:end] @ B.T
        S[cp.asarray(np.repeat(np.arange(end - begin), np.diff(tr.indptr))), cp.asarray(tr.indices)] = -cp.inf
        te_rows = cp.asarray(np.repeat(np.arange(end - begin), np.diff(te.indptr)))
        te_cols = cp.asarray(te.indices)
        order = cp.argsort(-S, axis=1)  # the top K are its first K columns
        rank = cp.empty_like(order)
        cp.put_along_axis(rank, order, cp.broadcast_to(cp.arange(S.shape[1]), order.shape), axis=1)
        relevant = cp.zeros(S.shape, dtype=bool)
        relevant[te_rows, te_cols] = True
        p, auc = pipeline_metrics(cp, rank[te_rows, te_cols] + 1, te_rows, cp.asarray(np.diff(te.indptr)),
                                  cp.asarray(B.shape[0] - np.diff(tr.indptr), dtype=cp.float64),
                                  cp.take_along_axis(relevant, order[:, :k], axis=1).astype(cp.float64), k)
        out_p.append(p)
        out_auc.append(auc)
    return cp.concatenate(out_p).get(), cp.concatenate(out_auc).get()


def tile_shapes(cp, _gpu, best, reference, args, X_train, X_test, A, B):
    """{"items x users": {tile_mb, fp32, tf32, identical}} for each of --tile-shapes."""
    out = {}
    default_tile = _gpu.TILE_ITEMS
    for shape in filter(None, args.tile_shapes.split(",")):
        items, users = shape.split(":")
        batch = None if users == "auto" else int(users)
        _gpu.TILE_ITEMS = int(items)
        try:
            times, identical = {}, True
            for tf32 in (False, True):
                times[tf32], got = best(lambda: gpureco.calc_reco_metrics(
                    X_train, X_test, A, B, k=args.k, all_metrics=True, output="cupy", device="gpu", tf32=tf32,
                    batch_size=batch))
                identical &= same_results(cp, reference, got)
        finally:
            _gpu.TILE_ITEMS = default_tile
        rows = batch or _gpu.DEFAULT_MAX_MEMORY // (min(args.items, int(items)) * 4)
        out[f"{items} x {users}"] = dict(tile_mb=min(args.items, int(items)) * min(rows, args.users) * 4 / 2**20,
                                         fp32=times[False], tf32=times[True], identical=identical)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--factors", type=int, default=128)
    parser.add_argument("-k", type=int, default=100)
    parser.add_argument("--mean-test", type=int, default=10,
                        help="test items a user on average (bench_cpu.make_problem); 25: more than the fused "
                             "kernel counted in shared memory before speed log change 16")
    parser.add_argument("--test-sigma", type=float, default=0.0,
                        help="test items a user lognormal with this log-deviation (bench_cpu.make_problem; 0: "
                             "Poisson): heavy users, as in real data, for speed log changes 16 and 18 (with "
                             "--mean-test 25 and 1.5, some fused blocks overflow their shared counts in user order)")
    parser.add_argument("--pipeline-batch", type=int, default=500, help="users per batch of the pipelines")
    parser.add_argument("--pipelines", default="torch,cupy",
                        help="the pipelines to time, of torch and cupy ('' for none): the CuPy one takes about 6 s "
                             "a run on the default problem")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each (the best is reported)")
    parser.add_argument("--tile-shapes", default="65536:auto,16384:512,8192:1024,4096:2048",
                        help="items per score tile : users per batch (auto: as max_memory allows), each timed in "
                             "FP32 and TF32 and checked against the default's numbers; 32 MB tiles stay in an "
                             "H100's 50 MB L2 between the GEMM and the counting ('' to skip)")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = parser.parse_args(argv)
    status = gpureco.gpu_available()
    if not status:
        sys.exit(f"bench_gpu: no GPU: {status.reason}")
    import cupy as cp

    X_train, X_test, A_h, B_h = make_problem(args.users, args.items, args.factors, mean_test=args.mean_test,
                                          test_sigma=args.test_sigma)
    A, B = cp.asarray(A_h), cp.asarray(B_h)
    cp.cuda.Device().synchronize()
    name = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"]
    device = name.decode() if isinstance(name, bytes) else str(name)
    rows = {}

    def run_gpureco():
        return gpureco.calc_reco_metrics(X_train, X_test, A, B, k=args.k, all_metrics=True, output="cupy",
                                         device="gpu")

    def best(fn):
        fn()  # warm-up: compiles kernels, fills the memory pool
        times = []
        for _ in range(args.repeats):
            seconds, out = synced(cp, fn)
            times.append(seconds)
        # each time as it comes, so that a run cut short (or a variant that fails) still shows the ones before
        print(f"bench_gpu: {min(times):.4f} s (best of {args.repeats}; {len(A_h):,} users)", flush=True)
        return min(times), out

    rows["gpureco"], ours = best(run_gpureco)
    workspace = peak_memory(cp, run_gpureco)
    rows["gpureco, tf32=True"], ours_tf32 = best(lambda: gpureco.calc_reco_metrics(
        X_train, X_test, A, B, k=args.k, all_metrics=True, output="cupy", device="gpu", tf32=True))
    tf32_identical = same_results(cp, ours, ours_tf32)
    from gpureco.engine import _gpu
    _gpu.FUSED = True
    try:
        rows["gpureco, fused kernel"], ours_fused = best(run_gpureco)
        fused_workspace = peak_memory(cp, run_gpureco)
        rows["gpureco, fused kernel, tf32=True (fused_rank_tf32)"], ours_fused_tf32 = best(
            lambda: gpureco.calc_reco_metrics(X_train, X_test, A, B, k=args.k, all_metrics=True, output="cupy",
                                              device="gpu", tf32=True))
    finally:
        _gpu.FUSED = False
    fused_identical = same_results(cp, ours, ours_fused) and same_results(cp, ours, ours_fused_tf32)
    shapes = tile_shapes(cp, _gpu, best, ours, args, X_train, X_test, A, B)
    batch = max(1, _gpu.DEFAULT_MAX_MEMORY // (min(args.items, _gpu.TILE_ITEMS) * 4))
    rows["cuBLAS A.B^T alone"], _ = best(lambda: gemm_floor(cp, A, B, min(batch, args.users)))
    checks = {}
    try:
        import torch
    except ImportError:
        torch = None
    pipelines = {name.strip() for name in args.pipelines.split(",") if name.strip()}
    if pipelines - {"torch", "cupy"}:
        parser.error(f"--pipelines: expected names of torch and cupy, got {args.pipelines!r}")
    if "torch" in pipelines and torch is not None and torch.cuda.is_available():
        rows["PyTorch pipeline"], (p, auc) = best(lambda: torch_pipeline(torch, A_h, B_h, X_train, X_test, args.k,
                                                                         args.pipeline_batch))
        checks["PyTorch"] = (p, auc)
    if "cupy" in pipelines:
        rows["CuPy pipeline"], (p, auc) = best(lambda: cupy_pipeline(cp, A, B, X_train, X_test, args.k,
                                                                     args.pipeline_batch))
        checks["CuPy"] = (p, auc)
    ours_p, ours_auc = ours["P@K"].get(), ours["ROC_AUC"].get()
    agreement = {lib: {"P@K max abs diff": float(np.nanmax(np.abs(p - ours_p))),
                       "ROC_AUC max abs diff": float(np.nanmax(np.abs(auc - ours_auc)))}
                 for lib, (p, auc) in checks.items()}

    kernels = fused_kernels = tf32_kernels = None
    if torch is not None and torch.cuda.is_available():
        try:
            kernels = kernel_times(torch, run_gpureco)
            tf32_kernels = kernel_times(torch, lambda: gpureco.calc_reco_metrics(
                X_train, X_test, A, B, k=args.k, all_metrics=True, output="cupy", device="gpu", tf32=True))
            _gpu.FUSED = True
            fused_kernels = kernel_times(torch, run_gpureco)
        except Exception as error:  # a profiler that differs from torch 2.x's: the timings above still stand
            print(f"bench_gpu: no kernel times ({type(error).__name__}: {error})", file=sys.stderr)
        finally:
            _gpu.FUSED = False
    floor = rows["cuBLAS A.B^T alone"]
    info = {
        "date": dt.date.today().isoformat(), "device": device, "commit": git_commit(),
        "command": "python " + " ".join(shlex.quote(a) for a in [sys.argv[0], *(argv or sys.argv[1:])]),
        "problem": dict(users=args.users, items=args.items, factors=args.factors, k=args.k, dtype="float32",
                        train_nnz=int(X_train.nnz), test_nnz=int(X_test.nnz), mean_test=args.mean_test,
                        test_sigma=args.test_sigma,
                        metrics="all ten"),
        "seconds": rows, "gpureco_vs_gemm": rows["gpureco"] / floor,
        "speedup_vs": {name: seconds / rows["gpureco"] for name, seconds in rows.items() if "pipeline" in name},
        "gpureco_workspace_bytes": int(workspace), "agreement_with_gpureco": agreement,
        "tf32_identical_to_fp32": tf32_identical, "kernel_ms_one_call": kernels, "tile_shapes": shapes,
        "fused_identical_to_fp32": fused_identical, "fused_workspace_bytes": int(fused_workspace),
        "fused_kernel_ms_one_call": fused_kernels, "tf32_kernel_ms_one_call": tf32_kernels,
        "targets": {"within 1.5x of the GEMM": rows["gpureco"] <= 1.5 * floor,
                    "150,000 users/s (FP32)": args.users / rows["gpureco"] >= 150_000,
                    "150,000 users/s (FP32, fused kernel), identical numbers": (
                        args.users / rows["gpureco, fused kernel"] >= 150_000 and fused_identical),
                    "400,000 users/s (TF32), identical numbers": (args.users / rows["gpureco, tf32=True"] >= 400_000
                                                                  and tf32_identical),
                    "TF32 not slower than FP32": rows["gpureco, tf32=True"] <= rows["gpureco"],
                    "400,000 users/s (TF32, fused kernel), identical numbers": (
                        args.users / rows["gpureco, fused kernel, tf32=True (fused_rank_tf32)"] >= 400_000
                        and fused_identical),
                    "fused TF32 not slower than fused FP32": (rows["gpureco, fused kernel, tf32=True (fused_rank_tf32)"]
                                                              <= rows["gpureco, fused kernel"]),
                    "5x faster than PyTorch": ("PyTorch pipeline" in rows
                                               and rows["PyTorch pipeline"] >= 5 * rows["gpureco"]),
                    "workspace <= 2 GB": workspace <= 2e9},
    }
    lines = [f"# GPU benchmark {info['date']}", "", f"Device: {device}; commit {info['commit']}",
             f"Command: `{info['command']}`", "",
             f"{args.users:,} users x {args.items:,} items x {args.factors} factors, float32, K={args.k}, "
             f"{X_test.nnz / args.users:.1f} test items a user, all ten metrics; best of {args.repeats} runs after a "
             "warm-up.", "",
             "| what | seconds | users/s | vs gpureco |", "|---|---:|---:|---:|"]
    for name, seconds in rows.items():
        lines.append(f"| {name} | {seconds:.4f} | {args.users / seconds:,.0f} | {seconds / rows['gpureco']:.2f}x |")
    lines += ["", f"gpureco / GEMM alone: {info['gpureco_vs_gemm']:.2f} (target <= 1.5)",
              f"gpureco peak workspace beyond the inputs: {workspace / 2**30:.2f} GiB (target <= 2 GB)",
              f"tf32=True gives the FP32 numbers bit for bit: {tf32_identical}",
              f"The fused kernels (FP32 and TF32) give the FP32 numbers bit for bit: {fused_identical}; its peak workspace "
              f"{fused_workspace / 2**30:.2f} GiB",
              f"Targets met: {info['targets']}", f"Agreement of the pipelines with gpureco: {agreement}"]
    if shapes:
        lines += ["", "Tile shapes (items per tile x users per batch; the score tile's size):", "",
                  "| tile | MB | FP32 s | TF32 s | numbers as the default's |", "|---|---:|---:|---:|---|"]
        lines += [f"| {shape} | {r['tile_mb']:.0f} | {r['fp32']:.4f} | {r['tf32']:.4f} | {r['identical']} |"
                  for shape, r in shapes.items()]
    for what, table in (("", kernels), (", tf32=True", tf32_kernels), (" with the fused kernel", fused_kernels)):
        if table:
            lines += ["", f"Kernel time of one gpureco call{what} (torch.profiler, CUDA activity):", "",
                      "| kernel | ms | launches |", "|---|---:|---:|"]
            lines += [f"| {name} | {ms:.2f} | {count} |" for name, (ms, count) in table.items()]
    print("\n".join(lines))
    write_results(args.out, f"gpu_{info['date']}", info, "\n".join(lines))


if __name__ == "__main__":
    main()
