#!/usr/bin/env python
"""gpureco's CPU engine against its floor (the score product alone) and recometrics, in one run.

On one generated problem (bench_cpu.make_problem: default 20,000 users x 50,000 items x 64
factors, float32, k=10), each method runs --repeat times, round-robin (so a busy spell of the
machine hits every method alike), and the medians are compared:

* sgemm: the score product alone, `np.matmul(A[batch], B.T, out=block)` for every user, in
  blocks of 32 to 1,024 users and of gpureco's default plan: the fastest is the floor (no
  engine can do less);
* gpureco, all ten metrics and the eight top-K metrics (calc_reco_metrics, nthreads=N);
* recometrics, the same two (nthreads=N), on --recometrics-users users (its throughput is
  scaled to the whole problem);
* on --dense-users users: the factor path again, `evaluate` on the dense score matrix of the
  same float32 scores, `evaluate` on a score function (A[u] @ B.T), all ten metrics;
  users whose factors are all zero (every score equal), and rows of constant given scores.

Then, once, the peak memory beyond the inputs (tracemalloc, which sees NumPy's buffers) of
calc_reco_metrics with the default max_memory. Writes results/cpu_floor_<items>_<date>.json
and .md with the command, commit, machine and load averages.

    python benchmarks/bench_cpu_floor.py                                  # 50k items
    python benchmarks/bench_cpu_floor.py --users 2000 --items 1000000 --recometrics-users 100 --dense-users 200
"""
import argparse
import datetime as dt
import os
import shlex
import sys
import time
import tracemalloc
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_cpu import ALL_FLAGS, TOPK_FLAGS, git_commit, machine_info, make_problem, versions, write_results  # noqa: E402

TARGETS = {"all / sgemm": 3.0, "top-K / sgemm": 2.0, "dense / factors": 1.2, "score function / factors": 1.2,
           "zero users / factors": 1.0, "constant rows / dense": 1.0}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--users", type=int, default=20000)
    p.add_argument("--items", type=int, default=50000)
    p.add_argument("--factors", type=int, default=64)
    p.add_argument("-k", type=int, default=10)
    p.add_argument("--nthreads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--recometrics-users", type=int, default=4000)
    p.add_argument("--dense-users", type=int, default=4000)
    p.add_argument("--seed", type=int, default=123)
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = p.parse_args(argv)

    import gpureco
    import recometrics
    from gpureco.engine._cpu_ranks import vector_bytes
    from gpureco.engine._engine import DEFAULT_MAX_MEMORY, cpu_plan

    command = "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(os.path.abspath(__file__))] + sys.argv[1:])
    info = {"command": command, "date": dt.datetime.now().isoformat(timespec="seconds"), "git_commit": git_commit(),
            "machine": machine_info(), "versions": versions(), "vector_bytes": vector_bytes(), "args": vars(args)}
    X_train, X_test, A, B = make_problem(args.users, args.items, args.factors, seed=args.seed)
    n_rec, n_dense = min(args.recometrics_users, args.users), min(args.dense_users, args.users)
    kw = dict(k=args.k, nthreads=args.nthreads, break_ties_with_noise=False)
    ev = dict(metrics=["P", "TP", "R", "AP", "TAP", "NDCG", "Hit", "RR", "ROC_AUC", "PR_AUC"], k=args.k,
              nthreads=args.nthreads, device="cpu")
    rows = cpu_plan(args.items, 4)[0]
    sizes = sorted({rows, *(n for n in (32, 128, 512, 1024) if n * args.items * 4 <= DEFAULT_MAX_MEMORY)})
    block = np.empty((max(sizes), args.items), dtype=np.float32)

    def sgemm(size):
        for begin in range(0, args.users, size):
            part = A[begin: begin + size]
            np.matmul(part, B.T, out=block[: part.shape[0]])

    Xr_d, Xt_d, A_d = X_train[:n_dense], X_test[:n_dense], A[:n_dense]
    dense = A_d @ B.T  # float32 scores: the filter scores of the factor path, given as they are
    constant = np.full_like(dense, 0.5)
    zero = np.zeros_like(A_d)
    methods = {
        **{f"sgemm {size} users a block": (lambda size=size: sgemm(size)) for size in sizes},
        "gpureco all": lambda: gpureco.calc_reco_metrics(X_train, X_test, A, B, **kw, **ALL_FLAGS),
        "gpureco top-K": lambda: gpureco.calc_reco_metrics(X_train, X_test, A, B, **kw, **TOPK_FLAGS),
        "recometrics all": lambda: recometrics.calc_reco_metrics(X_train[:n_rec], X_test[:n_rec], A[:n_rec], B, **kw,
                                                                 **ALL_FLAGS),
        "recometrics top-K": lambda: recometrics.calc_reco_metrics(X_train[:n_rec], X_test[:n_rec], A[:n_rec], B, **kw,
                                                                   **TOPK_FLAGS),
        "factors (dense users)": lambda: gpureco.calc_reco_metrics(Xr_d, Xt_d, A_d, B, **kw, **ALL_FLAGS),
        "dense": lambda: gpureco.evaluate(dense, Xt_d, Xr_d, **ev),
        "score function": lambda: gpureco.evaluate(lambda users: A_d[users] @ B.T, Xt_d, Xr_d, **ev),
        "zero users": lambda: gpureco.calc_reco_metrics(Xr_d, Xt_d, zero, B, **kw, **ALL_FLAGS),
        "constant rows": lambda: gpureco.evaluate(constant, Xt_d, Xr_d, **ev),
    }
    scale = {"recometrics all": args.users / n_rec, "recometrics top-K": args.users / n_rec}
    info["plan_block_users"] = rows
    print(f"{command}\n{info['machine']}\nvector bytes {info['vector_bytes']}, block {rows} users", flush=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # zero users and constant rows: NaN rule 5
        for fn in methods.values():  # warm-up: imports, thread pools, pages
            fn()
        times = {name: [] for name in methods}
        loads = [os.getloadavg()]
        for _ in range(args.repeat):
            for name, fn in methods.items():
                start = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - start) * scale.get(name, 1.0))
            loads.append(os.getloadavg())
    info["fastest_s"] = {name: float(np.min(t)) for name, t in times.items()}  # the least disturbed run
    info["fastest_s"]["sgemm"] = min(info["fastest_s"][f"sgemm {size} users a block"] for size in sizes)
    med = {name: float(np.median(t)) for name, t in times.items()}
    med["sgemm"] = min(med[f"sgemm {size} users a block"] for size in sizes)  # the floor
    ratios = {"all / sgemm": med["gpureco all"] / med["sgemm"], "top-K / sgemm": med["gpureco top-K"] / med["sgemm"],
              "recometrics / gpureco, all": med["recometrics all"] / med["gpureco all"],
              "recometrics / gpureco, top-K": med["recometrics top-K"] / med["gpureco top-K"],
              "dense / factors": med["dense"] / med["factors (dense users)"],
              "score function / factors": med["score function"] / med["factors (dense users)"],
              "zero users / factors": med["zero users"] / med["factors (dense users)"],
              "constant rows / dense": med["constant rows"] / med["dense"]}
    met = {name: ratios[name] <= bound for name, bound in TARGETS.items()}
    met["recometrics / gpureco, all >= 12"] = ratios["recometrics / gpureco, all"] >= 12

    # peak memory beyond the inputs, default max_memory (tracemalloc sees NumPy's allocations)
    n_mem = min(args.users, 3 * rows)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    gpureco.calc_reco_metrics(X_train[:n_mem], X_test[:n_mem], A[:n_mem], B, **kw, **ALL_FLAGS)
    peak = tracemalloc.get_traced_memory()[1] - before
    tracemalloc.stop()
    memory = {"users": n_mem, "peak_beyond_inputs_mib": peak / 2**20, "max_memory_mib": DEFAULT_MAX_MEMORY / 2**20,
              "within_max_memory_plus_10pct": peak <= 1.1 * DEFAULT_MAX_MEMORY}

    fast = info["fastest_s"]
    info["ratios_of_fastest"] = {"all / sgemm": fast["gpureco all"] / fast["sgemm"],
                                 "top-K / sgemm": fast["gpureco top-K"] / fast["sgemm"],
                                 "recometrics / gpureco, all": fast["recometrics all"] / fast["gpureco all"]}
    info.update(medians_s=med, all_s=times, ratios=ratios, targets_met=met, loadavg=loads, memory=memory,
                users_per_s={name: args.users / med[name] for name in ("sgemm", "gpureco all", "gpureco top-K",
                                                                        "recometrics all", "recometrics top-K")})
    text = markdown(info)
    print(text)
    stem = write_results(args.out, f"cpu_floor_{args.items}_{dt.date.today().isoformat()}", info, text)
    print(f"wrote {stem}.json and .md")


def markdown(info):
    a, m = info["args"], info["machine"]
    lines = [f"# gpureco CPU engine against the score product, {a['items']:,} items", "",
             f"Command: `{info['command']}`", "",
             f"- git commit: {info['git_commit']}; vector width {info['vector_bytes']} bytes; gpureco's block "
             f"{info['plan_block_users']} users",
             f"- machine: {m['cpu_count']} CPUs, {m['cpu_model']}, Python {m['python']}",
             "- load averages (1, 5, 15 min) before and after each round: " +
             "; ".join(", ".join(f"{x:.2f}" for x in load) for load in info["loadavg"]),
             "- versions: " + ", ".join(f"{k} {v}" for k, v in info["versions"].items()),
             f"- problem: {a['users']:,} users x {a['items']:,} items x {a['factors']} factors, float32, k={a['k']}, "
             f"nthreads={a['nthreads']}; medians of {a['repeat']} round-robin runs; recometrics on "
             f"{min(a['recometrics_users'], a['users']):,} users (time scaled to all); dense, score function, zero "
             f"users and constant rows on {min(a['dense_users'], a['users']):,} users",
             "", "| method | median s | fastest s | users/s (median) |", "|---|---:|---:|---:|"]
    for name, s in info["medians_s"].items():
        per_s = info["users_per_s"].get(name)
        lines.append(f"| {'**sgemm (the floor: the fastest block)**' if name == 'sgemm' else name} | {s:.3f} | "
                     f"{info['fastest_s'][name]:.3f} | {f'{per_s:,.0f}' if per_s else ''} |")
    lines += ["", "| ratio | value | target | met |", "|---|---:|---:|---|"]
    for name, value in info["ratios"].items():
        target = TARGETS.get(name)
        if name == "recometrics / gpureco, all":
            lines.append(f"| {name} | {value:.2f}x | >= 12x | {'yes' if value >= 12 else 'NO'} |")
        elif target:
            lines.append(f"| {name} | {value:.2f}x | <= {target:g}x | {'yes' if value <= target else 'NO'} |")
        else:
            lines.append(f"| {name} | {value:.2f}x | | |")
    lines += ["", "The same ratios from each method's fastest run (on a shared machine, the least disturbed): " +
              ", ".join(f"{name} {value:.2f}x" for name, value in info["ratios_of_fastest"].items()) + "."]
    mem = info["memory"]
    lines += ["", f"Peak memory beyond the inputs ({mem['users']:,} users, default max_memory "
              f"{mem['max_memory_mib']:.0f} MiB, tracemalloc): {mem['peak_beyond_inputs_mib']:.1f} MiB "
              f"({'within' if mem['within_max_memory_plus_10pct'] else 'NOT within'} max_memory + 10%)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
