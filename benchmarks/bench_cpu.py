#!/usr/bin/env python
"""CPU throughput of gpureco against recometrics and a plain NumPy pipeline.

All three evaluate the same generated problem (default: 20,000 users x 50,000 items x 64
factors, k=10, float32, scores a_u . b_i, training items excluded from the ranking):

* gpureco.calc_reco_metrics (CPU engine), nthreads=N
* recometrics.calc_reco_metrics, nthreads=N
* a NumPy baseline: per batch of users, S = A[b] @ B.T, training items set to -inf, top-K by
  np.argpartition + sort of the K, the @K metrics vectorised from the top-K hits, and, for
  ROC-AUC / PR-AUC, a full np.argsort of every row to find the ranks of the test items.

each with all ten metrics and with the eight top-K metrics only (no AUCs). Prints seconds,
users/second and the ratio against recometrics, checks that gpureco and recometrics agree
per user, and writes the figures and the command to <out>/cpu_<date>.json and .md.

    python benchmarks/bench_cpu.py            # full size, a few minutes on 2 cores
    python benchmarks/bench_cpu.py --users 2000 --skip-numpy
"""
import argparse
import datetime as dt
import json
import os
import platform
import shlex
import subprocess
import sys
import time

import numpy as np
import scipy.sparse as sp

TOPK_FLAGS = dict(precision=True, trunc_precision=True, recall=True, average_precision=True,
                  trunc_average_precision=True, ndcg=True, hit=True, rr=True, roc_auc=False, pr_auc=False)
ALL_FLAGS = {**TOPK_FLAGS, "roc_auc": True, "pr_auc": True}
TOPK_NAMES = ["P", "TP", "R", "AP", "TAP", "NDCG", "Hit", "RR"]
AUC_NAMES = ["ROC_AUC", "PR_AUC"]
TARGET_RATIO = 3.0


# --------------------------------------------------------------------------------------------
# problem
# --------------------------------------------------------------------------------------------
def make_problem(n_users, n_items, n_factors, mean_train=30, mean_test=10, alpha=0.8, seed=123, test_sigma=0.0):
    """Factors ~ N(0, 1) float32; per user 1+Poisson(mean_train-1) training and
    1+Poisson(mean_test-1) test items, distinct and disjoint, drawn with Zipf-like popularity
    p_i ~ (i+1)^-alpha (item ids shuffled so popularity is not tied to the index). test_sigma > 0:
    test items 1 + a lognormal count of mean mean_test - 1 and log-deviation test_sigma instead
    (heavy users, as in real data: sigma 1.5 puts about 4% of the users above 5x the mean)."""
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((n_users, n_factors), dtype=np.float32)
    B = rng.standard_normal((n_items, n_factors), dtype=np.float32)

    n_tr = np.minimum(1 + rng.poisson(mean_train - 1, n_users), n_items // 2)
    if test_sigma > 0:
        mu = np.log(max(mean_test - 1, 1e-9)) - test_sigma ** 2 / 2
        n_te = np.minimum(1 + np.rint(rng.lognormal(mu, test_sigma, n_users)).astype(np.int64), n_items // 2)
    else:
        n_te = np.minimum(1 + rng.poisson(mean_test - 1, n_users), n_items // 2)
    # Oversample, deduplicate per user, then take a random permutation of each user's distinct items:
    # the first n_tr go to training, the next n_te to test.
    n_draw = np.ceil(1.5 * (n_tr + n_te)).astype(np.int64) + 10
    cdf = np.cumsum((np.arange(1, n_items + 1, dtype=np.float64)) ** -alpha)
    cdf /= cdf[-1]
    relabel = rng.permutation(n_items)
    items = relabel[np.minimum(np.searchsorted(cdf, rng.random(int(n_draw.sum()))), n_items - 1)]
    users = np.repeat(np.arange(n_users, dtype=np.int64), n_draw)
    keys = np.unique(users * n_items + items)
    users, items = keys // n_items, keys % n_items
    order = np.lexsort((rng.random(keys.size), users))
    users, items = users[order], items[order]
    starts = np.searchsorted(users, np.arange(n_users))
    pos = np.arange(users.size) - starts[users]
    tr = pos < n_tr[users]
    te = ~tr & (pos < (n_tr + n_te)[users])

    def csr(mask):
        return sp.csr_array((np.ones(int(mask.sum()), dtype=np.float32), (users[mask], items[mask])),
                            shape=(n_users, n_items))
    X_train, X_test = csr(tr), csr(te)
    X_train.sort_indices()
    X_test.sort_indices()
    return X_train, X_test, A, B


def make_informative(X_train, X_test, A, B, n_users, top=100, seed=7):
    """The first `n_users` users with new test items, drawn at random among each user's `top`
    best-scored non-training items (same count per user as in X_test). With random factors the
    generated problem has P@10 ~ 0.0003, so it hardly exercises the top-K metrics; this one
    does, for the agreement check (not timed)."""
    rng = np.random.default_rng(seed)
    Xr = X_train[:n_users]
    n_items = Xr.shape[1]
    S = A[:n_users] @ B.T
    S[np.repeat(np.arange(n_users), np.diff(Xr.indptr)), Xr.indices] = -np.inf
    cand = np.argpartition(S, n_items - top, axis=1)[:, n_items - top:]
    cand = np.take_along_axis(cand, np.argsort(rng.random(cand.shape), axis=1), axis=1)
    n_te = np.minimum(np.diff(X_test.indptr)[:n_users], top)
    keep = np.arange(top)[None, :] < n_te[:, None]
    rows = np.repeat(np.arange(n_users), n_te)
    Xt = sp.csr_array((np.ones(rows.size, dtype=np.float32), (rows, cand[keep])), shape=(n_users, n_items))
    Xt.sort_indices()
    return Xr, Xt, A[:n_users]


# --------------------------------------------------------------------------------------------
# NumPy baseline
# --------------------------------------------------------------------------------------------
def numpy_metrics(X_train, X_test, A, B, k, with_auc, batch_size=1000):
    """Per-user metrics (dict of float64 arrays) by a straightforward NumPy pipeline.
    Ties are not treated specially (random float scores have none in practice)."""
    n_users, n_items = X_test.shape
    n_test_all = np.diff(X_test.indptr)
    n_pool_all = n_items - np.diff(X_train.indptr)
    out = {name: np.full(n_users, np.nan) for name in TOPK_NAMES + (AUC_NAMES if with_auc else [])}
    pos = np.arange(1, k + 1, dtype=np.float64)
    disc = 1.0 / np.log2(pos + 1.0)
    for lo in range(0, n_users, batch_size):
        hi = min(lo + batch_size, n_users)
        nb = hi - lo
        S = A[lo:hi] @ B.T                                     # (nb, n_items) float32
        tr = X_train[lo:hi]
        S[np.repeat(np.arange(nb), np.diff(tr.indptr)), tr.indices] = -np.inf
        te = X_test[lo:hi]
        n_test = n_test_all[lo:hi].astype(np.float64)
        te_rows = np.repeat(np.arange(nb), np.diff(te.indptr))
        te_keys = te_rows.astype(np.int64) * n_items + te.indices   # sorted (sorted indices per row)

        # top-K
        top = np.argpartition(S, n_items - k, axis=1)[:, n_items - k:]
        top = np.take_along_axis(top, np.argsort(-np.take_along_axis(S, top, axis=1), axis=1), axis=1)
        top_keys = np.arange(nb, dtype=np.int64)[:, None] * n_items + top
        loc = np.minimum(np.searchsorted(te_keys, top_keys), max(te_keys.size - 1, 0))
        h = te_keys[loc] == top_keys if te_keys.size else np.zeros(top.shape, bool)
        g = np.where(h, te.data[loc], 0.0)
        hf = h.astype(np.float64)
        nh = hf.sum(axis=1)
        denom_t = np.minimum(k, n_test)
        prec_at = np.cumsum(hf, axis=1) / pos
        ap_sum = (hf * prec_at).sum(axis=1)
        # IDCG: the user's test gains in descending order over the first K positions
        gs = np.zeros((nb, k))
        order = np.lexsort((-te.data, te_rows))
        r_sorted, g_sorted = te_rows[order], te.data[order]
        j = np.arange(r_sorted.size) - te.indptr[r_sorted]
        keep = j < k
        gs[r_sorted[keep], j[keep]] = g_sorted[keep]
        idcg = gs @ disc
        first = np.where(h.any(axis=1), h.argmax(axis=1) + 1, np.inf)
        with np.errstate(divide="ignore", invalid="ignore"):
            vals = {"P": nh / k, "TP": nh / denom_t, "R": nh / n_test, "AP": ap_sum / n_test,
                    "TAP": ap_sum / denom_t, "NDCG": (g @ disc) / idcg, "Hit": (nh > 0).astype(np.float64),
                    "RR": 1.0 / first}

        if with_auc:
            order = np.argsort(-S, axis=1)                     # full sort; -inf (training) last
            inv = np.empty_like(order)
            np.put_along_axis(inv, order, np.broadcast_to(np.arange(n_items), order.shape), axis=1)
            ranks = inv[te_rows, te.indices].astype(np.float64) + 1.0      # 1-based, among the pool
            n_pool = n_pool_all[lo:hi].astype(np.float64)
            n_neg = n_pool - n_test
            rank_sum = np.bincount(te_rows, weights=ranks, minlength=nb)
            # PR-AUC: mean over test items of (#test items ranked at or above it) / rank
            o = np.lexsort((ranks, te_rows))
            jj = (np.arange(o.size) - te.indptr[te_rows[o]] + 1).astype(np.float64)
            pr_sum = np.bincount(te_rows[o], weights=jj / ranks[o], minlength=nb)
            with np.errstate(divide="ignore", invalid="ignore"):
                vals["ROC_AUC"] = 1.0 - (rank_sum - n_test * (n_test + 1) / 2) / (n_test * n_neg)
                vals["PR_AUC"] = pr_sum / n_test

        valid = n_test > 0
        for name, v in vals.items():
            out[name][lo:hi] = np.where(valid, v, np.nan)
    return out


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------
def canonical(df):
    """DataFrame columns 'P@10', 'ROC_AUC', ... -> {'P': array, 'ROC_AUC': array}."""
    return {c.split("@")[0]: df[c].to_numpy(dtype=np.float64) for c in df.columns}


def timed(fn):
    t0 = time.perf_counter()
    res = fn()
    return time.perf_counter() - t0, res


def machine_info():
    model = platform.processor() or ""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
                break
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        load = tuple(round(x, 2) for x in os.getloadavg())
    except OSError:
        load = None
    return {"cpu_count": os.cpu_count(), "cpu_model": model, "platform": platform.platform(),
            "python": sys.version.split()[0], "loadavg_at_start": load}


def write_results(out_dir, name, info, markdown_text):
    """<out_dir>/<name>.json (info) and .md (the text); returns the path without suffix."""
    os.makedirs(out_dir, exist_ok=True)
    stem = os.path.join(out_dir, name)
    with open(stem + ".json", "w") as f:
        json.dump(info, f, indent=2)
    with open(stem + ".md", "w") as f:
        f.write(markdown_text if markdown_text.endswith("\n") else markdown_text + "\n")
    return stem


def git_commit():
    """The checkout's commit; GPURECO_COMMIT where set (the device tool's copy of a working tree
    carries a .git whose HEAD is the session's first commit, not the one the tree holds)."""
    if os.environ.get("GPURECO_COMMIT"):
        return os.environ["GPURECO_COMMIT"]
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        r = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True,
                           timeout=10)
        commit = r.stdout.strip() or None
        d = subprocess.run(["git", "status", "--porcelain", "--", "gpureco"], cwd=os.path.dirname(here),
                           capture_output=True, text=True, timeout=10)  # from the root: the path is the package
        if commit and d.stdout.strip():
            commit += " (gpureco/ has uncommitted changes)"
        return commit
    except (OSError, subprocess.SubprocessError):
        return None


def versions():
    import pandas as pd
    import scipy
    v = {"numpy": np.__version__, "scipy": scipy.__version__, "pandas": pd.__version__}
    for mod in ("gpureco", "recometrics"):
        try:
            v[mod] = __import__(mod).__version__
        except (ImportError, AttributeError):
            try:
                from importlib.metadata import version
                v[mod] = version(mod)
            except Exception:  # noqa: BLE001
                v[mod] = None
    return v


def compare(a, b):
    """Per metric: the two means and the largest |difference| of per-user values (NaN-aware)."""
    rows = {}
    for name in a:
        if name not in b:
            continue
        x, y = a[name], b[name]
        nan_mismatch = int(np.sum(np.isnan(x) != np.isnan(y)))
        both = ~np.isnan(x) & ~np.isnan(y)
        rows[name] = {"mean_a": float(np.nanmean(x)), "mean_b": float(np.nanmean(y)),
                      "max_abs_diff": float(np.max(np.abs(x[both] - y[both]))) if both.any() else None,
                      "n_users_diff_gt_1e-6": int(np.sum(np.abs(x[both] - y[both]) > 1e-6)),
                      "nan_mismatch": nan_mismatch}
    return rows


# --------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------
def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--users", type=int, default=20000)
    p.add_argument("--items", type=int, default=50000)
    p.add_argument("--factors", type=int, default=64)
    p.add_argument("-k", type=int, default=10)
    p.add_argument("--nthreads", type=int, default=2)
    p.add_argument("--numpy-batch", type=int, default=1000, help="users per batch of the NumPy baseline")
    p.add_argument("--seed", type=int, default=123)
    p.add_argument("--repeat", type=int, default=1, help="timed runs per method; the fastest is reported")
    p.add_argument("--skip-numpy", action="store_true", help="leave out the NumPy baseline")
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = p.parse_args(argv)

    import gpureco
    import recometrics

    command = "python " + " ".join(shlex.quote(a) for a in
                                   [os.path.relpath(os.path.abspath(__file__))] + sys.argv[1:])
    info = {"command": command, "date": dt.datetime.now().isoformat(timespec="seconds"),
            "git_commit": git_commit(), "machine": machine_info(), "versions": versions(),
            "problem": {"users": args.users, "items": args.items, "factors": args.factors, "k": args.k,
                        "dtype": "float32", "nthreads": args.nthreads, "seed": args.seed,
                        "repeat": args.repeat}}
    print(f"command: {command}")
    print(f"machine: {info['machine']['cpu_count']} CPUs, {info['machine']['cpu_model']}; "
          f"load {info['machine']['loadavg_at_start']}; git {info['git_commit']}")

    t_gen, (X_train, X_test, A, B) = timed(lambda: make_problem(args.users, args.items, args.factors,
                                                                 seed=args.seed))
    info["problem"].update(train_nnz=int(X_train.nnz), test_nnz=int(X_test.nnz), generation_s=round(t_gen, 3))
    print(f"problem: {args.users} users x {args.items} items x {args.factors} factors, k={args.k}; "
          f"{X_train.nnz} train / {X_test.nnz} test interactions; generated in {t_gen:.2f} s")
    assert X_train.multiply(X_test).nnz == 0

    kw = dict(k=args.k, nthreads=args.nthreads, break_ties_with_noise=False)
    methods = [
        ("gpureco", "all", lambda Xr, Xt, a: canonical(gpureco.calc_reco_metrics(Xr, Xt, a, B, **kw, **ALL_FLAGS))),
        ("gpureco", "top-K", lambda Xr, Xt, a: canonical(gpureco.calc_reco_metrics(Xr, Xt, a, B, **kw, **TOPK_FLAGS))),
        ("recometrics", "all",
         lambda Xr, Xt, a: canonical(recometrics.calc_reco_metrics(Xr, Xt, a, B, **kw, **ALL_FLAGS))),
        ("recometrics", "top-K",
         lambda Xr, Xt, a: canonical(recometrics.calc_reco_metrics(Xr, Xt, a, B, **kw, **TOPK_FLAGS))),
    ]
    if not args.skip_numpy:
        methods += [
            ("numpy", "all", lambda Xr, Xt, a: numpy_metrics(Xr, Xt, a, B, args.k, True, args.numpy_batch)),
            ("numpy", "top-K", lambda Xr, Xt, a: numpy_metrics(Xr, Xt, a, B, args.k, False, args.numpy_batch)),
        ]

    # warm-up on a small subset (imports, thread pools, BLAS)
    n_warm = min(200, args.users)
    for _, _, fn in methods:
        fn(X_train[:n_warm], X_test[:n_warm], A[:n_warm])

    results, outputs = [], {}
    for method, metrics, fn in methods:
        runs = []
        for _ in range(args.repeat):
            c0 = os.times()
            secs, vals = timed(lambda: fn(X_train, X_test, A))
            c1 = os.times()
            runs.append((secs, c1.user + c1.system - c0.user - c0.system))
        outputs[(method, metrics)] = vals
        secs, cpu = min(runs)
        load = round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None
        results.append({"method": method, "metrics": metrics, "seconds": secs, "users_per_s": args.users / secs,
                        "process_cpu_s": cpu, "all_seconds": [r[0] for r in runs], "loadavg_1min_after": load})
        print(f"  {method:12s} {metrics:6s} {secs:9.2f} s  {args.users / secs:10.0f} users/s  "
              f"(process CPU {cpu:.2f} s, load {load})", flush=True)

    ref = {r["metrics"]: r["seconds"] for r in results if r["method"] == "recometrics"}
    for r in results:
        r["ratio_vs_recometrics"] = ref[r["metrics"]] / r["seconds"]
    targets = {m: next(r["ratio_vs_recometrics"] for r in results if r["method"] == "gpureco" and r["metrics"] == m)
               >= TARGET_RATIO for m in ("all", "top-K")}

    print("\n" + "method        metrics   seconds    users/s   vs recometrics   process CPU s")
    for r in results:
        print(f"{r['method']:12s}  {r['metrics']:6s} {r['seconds']:9.2f} {r['users_per_s']:10.0f}   "
              f"{r['ratio_vs_recometrics']:6.2f}x {r['process_cpu_s']:17.2f}")
    for m, ok in targets.items():
        print(f"target gpureco >= {TARGET_RATIO:g}x recometrics ({m} metrics): {'MET' if ok else 'NOT MET'}")

    agree = {"random": {"recometrics": compare(outputs[("gpureco", "all")], outputs[("recometrics", "all")])}}
    if not args.skip_numpy:
        agree["random"]["numpy"] = compare(outputs[("gpureco", "all")], outputs[("numpy", "all")])
    n_inf = min(2000, args.users)
    Xr_i, Xt_i, A_i = make_informative(X_train, X_test, A, B, n_inf)
    run_all = {m: f for m, mt, f in methods if mt == "all"}
    inf_out = {m: f(Xr_i, Xt_i, A_i) for m, f in run_all.items()}
    agree["informative"] = {m: compare(inf_out["gpureco"], inf_out[m]) for m in inf_out if m != "gpureco"}
    labels = {"random": f"the timed problem ({args.users} users)",
              "informative": f"an informative problem ({n_inf} users, test items among each user's 100 best-scored)"}
    for problem, by_method in agree.items():
        for method, rows in by_method.items():
            print(f"\nper-user agreement, gpureco vs {method}, all metrics, on {labels[problem]}:")
            print(f"  {'metric':8s} {'gpureco':>10s} {method:>12s} {'max|diff|':>10s} {'#>1e-6':>7s} {'NaN mism.':>9s}")
            for name, c in rows.items():
                print(f"  {name:8s} {c['mean_a']:10.6f} {c['mean_b']:12.6f} {c['max_abs_diff']:10.2e} "
                      f"{c['n_users_diff_gt_1e-6']:7d} {c['nan_mismatch']:9d}")

    info.update(results=results, targets={f"gpureco_{m}_ge_{TARGET_RATIO:g}x_recometrics": ok
                                          for m, ok in targets.items()},
                agreement=agree, agreement_problems=labels)
    stem = write_results(args.out, f"cpu_{dt.date.today().isoformat()}", info, markdown(info))
    print(f"\nwrote {stem}.json and {stem}.md")


def markdown(info):
    p, m = info["problem"], info["machine"]
    lines = [f"# gpureco CPU benchmark, {info['date']}", "",
             f"Command: `{info['command']}`", "",
             f"- git commit: {info['git_commit']}",
             f"- machine: {m['cpu_count']} CPUs, {m['cpu_model']}, {m['platform']}, Python {m['python']}, "
             f"load average at start {m['loadavg_at_start']}",
             "- versions: " + ", ".join(f"{k} {v}" for k, v in info["versions"].items()),
             f"- problem: {p['users']} users x {p['items']} items x {p['factors']} factors, k={p['k']}, "
             f"{p['dtype']}, nthreads={p['nthreads']}, {p['train_nnz']} train / {p['test_nnz']} test interactions",
             "", "| method | metrics | seconds | users/s | vs recometrics | process CPU s | load avg after |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in info["results"]:
        lines.append(f"| {r['method']} | {r['metrics']} | {r['seconds']:.2f} | {r['users_per_s']:.0f} | "
                     f"{r['ratio_vs_recometrics']:.2f}x | {r['process_cpu_s']:.2f} | {r['loadavg_1min_after']} |")
    lines += ["", "Targets (gpureco >= 3x recometrics): " +
              ", ".join(f"{k}: {'met' if v else 'NOT met'}" for k, v in info["targets"].items()), "",
              ]
    for problem, by_method in info["agreement"].items():
        for method, rows in by_method.items():
            lines += [f"Per-user agreement, gpureco vs {method}, all metrics, on {info['agreement_problems'][problem]}:",
                      "", f"| metric | gpureco mean | {method} mean | max abs diff | users with diff > 1e-6 | "
                      "NaN mismatches |", "|---|---:|---:|---:|---:|---:|"]
            for name, c in rows.items():
                lines.append(f"| {name} | {c['mean_a']:.6f} | {c['mean_b']:.6f} | {c['max_abs_diff']:.2e} | "
                             f"{c['n_users_diff_gt_1e-6']} | {c['nan_mismatch']} |")
            lines.append("")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
