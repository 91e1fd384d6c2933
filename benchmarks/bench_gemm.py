#!/usr/bin/env python
"""cuBLAS's float32 score tile in other shapes and layouts: which one the FP32 tiles should ask for.

rank_users scores a batch of users against a tile of items as cupy.matmul(U, B[tile].T) (U: users x F,
B: items x F, both row-major; the tile row-major users x items, as rank_tile reads it). On an H100
that GEMM runs at about 36 of FP32's 67 TFLOP/s (cuBLAS picks a 64x64 FFMA kernel) and takes 71 of
the 116 ms of bench_gpu's problem. Each variant here computes the same products (checked against the
first's, bit for bit where the layout allows the same kernel, else within float32 rounding) and is
timed over --repeats launches:

- "U B^T": the tile as rank_users makes it (TN in cuBLAS's column-major terms);
- "U (B^T)": the items' factors transposed first (F x items, row-major; NN), the copy not timed;
- "(B U^T)^T": the tile transposed, items x users (what a kernel reading columns would take);
- "U B^T, TF32 3 passes": TF32 mode's two GEMMs (inner sizes 2F and F, beta = 1), for scale;
- each at users per batch of --users (the default workspace holds about 4,000) and items per tile
  of --items.

Reports milliseconds a tile, TFLOP/s and the GEMMs' time for bench_gpu's whole problem (10,000 x
1,000,000) at that rate, and the kernel cuBLAS chose (torch.profiler, where torch is installed).
Writes <out>/gpu_gemm_<date>.json and .md.

    python benchmarks/bench_gemm.py [--users 2000,4000,8000] [--items 65536] [--factors 128]
"""
import argparse
import datetime as dt
import os
import shlex
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_cpu import git_commit, write_results  # noqa: E402
from bench_gpu import kernel_times  # noqa: E402
from bench_gpu_sweep import best_of  # noqa: E402

import gpureco  # noqa: E402
from gpureco.engine import _backend, _gpu  # noqa: E402

PROBLEM = 10_000 * 1_000_000  # scores of bench_gpu's problem


def variants(cp, U, B):
    """{name: (fn() -> the tile as users x items, a view), ...} over the same U and B."""
    users, items = U.shape[0], B.shape[0]
    S = cp.empty((users, items), dtype=cp.float32)
    ST = cp.empty((items, users), dtype=cp.float32)
    BT = cp.ascontiguousarray(B.T)
    f = U.shape[1]
    parts_u = _gpu.tf32_parts(U, cp.empty((users, 2 * f), dtype=cp.float32))
    parts_b = _gpu.tf32_parts(B, cp.empty((items, 2 * f), dtype=cp.float32), lo_first=True)

    def plain():
        with _backend.float32_compute():
            return cp.matmul(U, B.T, out=S)

    def transposed_items():
        with _backend.float32_compute():
            return cp.matmul(U, BT, out=S)

    def transposed_tile():
        with _backend.float32_compute():
            return cp.matmul(B, U.T, out=ST).T

    def tf32():
        _backend.gemm_tf32(parts_u, parts_b, S, accumulate=False)
        return _backend.gemm_tf32(parts_u[:, :f], parts_b[:, f:], S, accumulate=True)

    return {"U B^T": plain, "U (B^T)": transposed_items, "(B U^T)^T": transposed_tile,
            "U B^T, TF32 3 passes": tf32}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", default="2000,4000,8000", help="users per batch, comma-separated")
    parser.add_argument("--items", type=int, default=_gpu.TILE_ITEMS, help="items per tile")
    parser.add_argument("--factors", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = parser.parse_args(argv)
    status = gpureco.gpu_available()
    if not status:
        sys.exit(f"bench_gemm: no GPU: {status.reason}")
    import cupy as cp
    try:
        import torch
        profiled = torch.cuda.is_available()
    except ImportError:
        torch, profiled = None, False
    rng = np.random.default_rng(0)
    B = cp.asarray(rng.standard_normal((args.items, args.factors)).astype(np.float32))
    rows = []
    for users in (int(u) for u in args.users.split(",")):
        U = cp.asarray(rng.standard_normal((users, args.factors)).astype(np.float32))
        table = variants(cp, U, B)
        reference = None
        for name, fn in table.items():
            seconds, tile = best_of(cp, fn, args.repeats)
            if reference is None:
                reference = tile.copy()
            same = bool(cp.array_equal(tile, reference))  # (on the device: a tile is up to 2 GB)
            err = float(cp.max(cp.abs(tile - reference))) / max(1e-30, float(cp.max(cp.abs(reference))))
            kernel = next(iter(kernel_times(torch, fn, top=1)), None) if profiled else None
            row = dict(users=users, items=args.items, factors=args.factors, variant=name, ms=seconds * 1e3,
                       tflops=2.0 * users * args.items * args.factors / seconds / 1e12,
                       problem_ms=seconds * 1e3 * PROBLEM / (users * args.items), identical=same,
                       max_rel_diff=err, kernel=kernel)
            rows.append(row)
            print(f"bench_gemm: {users} x {args.items} x {args.factors} {name}: {row['ms']:.3f} ms, "
                  f"{row['tflops']:.1f} TFLOP/s, {kernel}", flush=True)
    name = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"]
    device = name.decode() if isinstance(name, bytes) else str(name)
    info = {"date": dt.date.today().isoformat(), "device": device, "commit": git_commit(),
            "command": "python " + " ".join(shlex.quote(a) for a in [sys.argv[0], *(argv or sys.argv[1:])]),
            "rows": rows}
    lines = [f"# cuBLAS score tiles {info['date']}", "", f"Device: {device}; commit {info['commit']}",
             f"Command: `{info['command']}`", "",
             "Best of the repeats; 'problem ms': the GEMMs of bench_gpu's 10,000 x 1,000,000 at this rate; "
             "'same': bit for bit the first variant's tile (else the largest difference, relative to the "
             "largest score).", "",
             "| users x items x F | variant | ms a tile | TFLOP/s | problem ms | same | kernel |",
             "|---|---|---:|---:|---:|---|---|"]
    for r in rows:
        same = "yes" if r["identical"] else f"{r['max_rel_diff']:.1e}"
        lines.append(f"| {r['users']} x {r['items']} x {r['factors']} | {r['variant']} | {r['ms']:.3f} | "
                     f"{r['tflops']:.1f} | {r['problem_ms']:.1f} | {same} | {r['kernel'] or ''} |")
    print("\n".join(lines))
    write_results(args.out, f"gpu_gemm_{info['date']}", info, "\n".join(lines))


if __name__ == "__main__":
    main()
