#!/usr/bin/env python
"""Where a GPU call's wall time goes beyond its kernels: the host's share.

For each size (default: the sweep's 10,000 x 100,000 x 64, where gpureco takes about 5 times
the GEMM, and bench_gpu's 10,000 x 1,000,000 x 128), one calc_reco_metrics(device="gpu",
all_metrics=True, output="cupy") call is timed (best of --repeats after a warm-up), its
kernels' time summed (torch.profiler, where torch is installed), and the host profiled
(cProfile over --calls calls, bench_gpu_sweep.host_profile): wall minus kernel time is what
host work, launches and synchronisation cost. Writes <out>/gpu_host_<date>.json and .md.

    python benchmarks/bench_gpu_host.py [--sizes 10000x100000x64] [--k 10]
"""
import argparse
import datetime as dt
import os
import shlex
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_cpu import git_commit, make_problem, write_results  # noqa: E402
from bench_gpu import kernel_times  # noqa: E402
from bench_gpu_sweep import best_of, host_profile, shapes  # noqa: E402

import gpureco  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000x100000x64,10000x1000000x128")
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--calls", type=int, default=10, help="calls profiled by cProfile")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = parser.parse_args(argv)
    status = gpureco.gpu_available()
    if not status:
        sys.exit(f"bench_gpu_host: no GPU: {status.reason}")
    import cupy as cp
    try:
        import torch
    except ImportError:
        torch = None
    rows = []
    for users, items, factors in shapes(args.sizes):
        X_train, X_test, A_h, B_h = make_problem(users, items, factors)
        A, B = cp.asarray(A_h), cp.asarray(B_h)

        def call():
            return gpureco.calc_reco_metrics(X_train, X_test, A, B, k=args.k, all_metrics=True, output="cupy",
                                             device="gpu")
        seconds, _ = best_of(cp, call, args.repeats)
        kernels = kernel_times(torch, call, top=1000) if torch is not None and torch.cuda.is_available() else None
        kernel_ms = None if kernels is None else sum(ms for ms, _ in kernels.values())
        profile = host_profile(cp, call, calls=args.calls, top=15)
        rows.append(dict(users=users, items=items, factors=factors, k=args.k, wall_ms=seconds * 1e3,
                         kernel_ms=kernel_ms, kernels=kernels, profile=profile))
        print(f"bench_gpu_host: {users} x {items} x {factors}: wall {seconds * 1e3:.2f} ms, kernels "
              f"{kernel_ms if kernel_ms is None else round(kernel_ms, 2)} ms", flush=True)
    name = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"]
    info = {"date": dt.date.today().isoformat(), "device": name.decode() if isinstance(name, bytes) else str(name),
            "commit": git_commit(),
            "command": "python " + " ".join(shlex.quote(a) for a in [sys.argv[0], *(argv or sys.argv[1:])]),
            "rows": rows}
    lines = [f"# GPU calls' host share {info['date']}", "", f"Device: {info['device']}; commit {info['commit']}",
             f"Command: `{info['command']}`", "", "| users x items x F | wall ms | kernels ms | host and gaps ms |",
             "|---|---:|---:|---:|"]
    for r in rows:
        gap = "" if r["kernel_ms"] is None else f"{r['wall_ms'] - r['kernel_ms']:.2f}"
        kernel = "" if r["kernel_ms"] is None else f"{r['kernel_ms']:.2f}"
        lines.append(f"| {r['users']:,} x {r['items']:,} x {r['factors']} | {r['wall_ms']:.2f} | {kernel} | {gap} |")
    for r in rows:
        lines += ["", f"{r['users']:,} x {r['items']:,} x {r['factors']}: kernels (ms, launches)", "",
                  "| kernel | ms | launches |", "|---|---:|---:|"]
        lines += [f"| {name} | {ms:.3f} | {count} |" for name, (ms, count) in (r["kernels"] or {}).items()]
        lines += ["", "Host profile (ms per call: own time; gpureco's functions: cumulative)", "",
                  "| function (own time) | ms | calls | gpureco function (cumulative) | ms | calls |",
                  "|---|---:|---:|---|---:|---:|"]
        own, ours = r["profile"]["own"], r["profile"]["gpureco"]
        for i in range(max(len(own), len(ours))):
            a = own[i] if i < len(own) else ["", "", ""]
            b = ours[i] if i < len(ours) else ["", "", ""]
            lines.append(f"| `{a[0]}` | {a[1]} | {a[2]} | `{b[0]}` | {b[1]} | {b[2]} |")
    print("\n".join(lines))
    write_results(args.out, f"gpu_host_{info['date']}", info, "\n".join(lines))


if __name__ == "__main__":
    main()
