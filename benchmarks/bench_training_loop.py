#!/usr/bin/env python
"""The cost of evaluating every epoch, in a real (small) PyTorch training loop.

A BPR matrix factorisation (64 factors, Adam, batches of 4,096 training pairs, one negative
item each) trains for --epochs epochs on generated data of two sizes: MovieLens-100k's
(943 users x 1,682 items, ~100k interactions) and 20,000 users x 10,000 items (~1M). After
every epoch the model is evaluated (P, AP and NDCG at K=10, the defaults) in four ways:

- `Evaluator(A, B)`: an Evaluator built once, before the loop, called with the embedding
  tables (parameters that require grad);
- `Evaluator(score_fn)`: the same Evaluator called with a score function (a batch of user
  ids -> their score rows, computed by the model);
- `calc_reco_metrics`: the function called afresh every epoch, with the tables detached
  and copied to NumPy (what users did before the Evaluator);
- `evaluate(score_fn)`: the function called afresh with the score function.

The four take turns at going first after the epoch's training (torch's threads may still be
spinning then). It reports the median seconds of an epoch's training and of each evaluation, and the
evaluation as a share of the epoch (training + evaluation): the issue's target is at most
1% for the Evaluator. The Evaluator's numbers are checked to be the functions' bit for bit.
Runs on the GPU when torch and gpureco both see one (--device), else on the CPU.
Writes <out>/training_loop_<date>.json and .md.

    python benchmarks/bench_training_loop.py
"""
import argparse
import datetime as dt
import os
import platform
import shlex
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_cpu import git_commit, write_results  # noqa: E402

SIZES = {"ml-100k": (943, 1_682, 106), "20k x 10k": (20_000, 10_000, 50)}
METHODS = ("Evaluator(A, B)", "Evaluator(score_fn)", "calc_reco_metrics", "evaluate(score_fn)")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--sizes", default=",".join(SIZES), help="comma-separated: " + ", ".join(SIZES))
    parser.add_argument("--device", default="auto", help="auto, cpu or gpu (torch and gpureco alike)")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = parser.parse_args()
    import torch

    import gpureco
    on_gpu = args.device == "gpu" or (args.device == "auto" and torch.cuda.is_available()
                                      and bool(gpureco.gpu_available()))
    device = "cuda" if on_gpu else "cpu"
    rows = []
    for size in args.sizes.split(","):
        rows.append(run_size(size, *SIZES[size], args.epochs, device, torch, gpureco))
    info = {"date": dt.date.today().isoformat(), "commit": git_commit(), "device": device,
            "machine": platform.platform(), "cpus": os.cpu_count(), "load": os.getloadavg(),
            "torch": torch.__version__, "threads": torch.get_num_threads(), "epochs": args.epochs,
            "command": "python " + " ".join(map(shlex.quote, sys.argv)), "results": rows}
    text = markdown(info)
    print(text)
    stem = write_results(args.out, f"training_loop_{info['date']}_{device}", info, text)
    print(f"written: {stem}.json, {stem}.md")


def run_size(size, n_users, n_items, per_user, epochs, device, torch, gpureco):
    data = gpureco.datasets.make_interactions(n_users, n_items, per_user, seed=0)
    X, _ = gpureco.to_csr(data)
    X_train, X_test = gpureco.split_leave_k_out(X, k=5, seed=1)
    pairs = X_train.tocoo()
    users = torch.as_tensor(pairs.row, dtype=torch.long, device=device)
    items = torch.as_tensor(pairs.col, dtype=torch.long, device=device)
    torch.manual_seed(0)
    user_table = torch.nn.Embedding(n_users, 64).to(device)
    item_table = torch.nn.Embedding(n_items, 64).to(device)
    for table in (user_table, item_table):
        torch.nn.init.normal_(table.weight, std=0.1)
    optimizer = torch.optim.Adam([user_table.weight, item_table.weight], lr=0.005)
    gpu = "gpu" if device == "cuda" else "cpu"

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    def score_fn(user_ids):
        u = torch.as_tensor(user_ids, device=device)
        return user_table(u) @ item_table.weight.T

    built = time.perf_counter()
    ev = gpureco.Evaluator(X_test, X_train, device=gpu)
    build_s = time.perf_counter() - built
    times = {"train": [], **{m: [] for m in METHODS}}
    for epoch in range(epochs):
        sync()
        start = time.perf_counter()
        for batch in torch.randperm(users.numel(), device=device).split(4096):
            u, positive = users[batch], items[batch]
            negative = torch.randint(0, n_items, u.shape, device=device)
            a = user_table(u)
            loss = -torch.nn.functional.logsigmoid((a * item_table(positive)).sum(-1)
                                                   - (a * item_table(negative)).sum(-1)).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        sync()
        times["train"].append(time.perf_counter() - start)
        results = {}
        for method in METHODS[epoch % 4:] + METHODS[: epoch % 4]:  # each goes first in turn, after training
            sync()
            start = time.perf_counter()
            with np.errstate(all="ignore"), warnings_off():
                if method == "Evaluator(A, B)":
                    out = ev(user_table.weight, item_table.weight)
                elif method == "Evaluator(score_fn)":
                    out = ev(score_fn)
                elif method == "calc_reco_metrics":
                    out = gpureco.calc_reco_metrics(X_train, X_test, user_table.weight.detach().cpu().numpy(),
                                                    item_table.weight.detach().cpu().numpy(), k=10, device=gpu)
                else:
                    out = gpureco.evaluate(score_fn, X_test, X_train, device=gpu)
            sync()
            times[method].append(time.perf_counter() - start)
            results[method] = out
        check_identical(results)
    train = statistics.median(times["train"])
    row = {"size": size, "users": n_users, "items": n_items, "train_interactions": int(X_train.nnz),
           "evaluator_build_s": build_s, "train_epoch_s": train,
           "ndcg10": float(np.nanmean(results["Evaluator(A, B)"]["NDCG@10"]))}
    for method in METHODS:
        seconds = statistics.median(times[method])
        row[method] = {"seconds": seconds, "share_of_epoch": seconds / (train + seconds)}
    return row


def check_identical(results):
    """The Evaluator gives the functions' numbers, bit for bit: with the factors (the defined
    float64 scores) and with the score function (the model's float32 scores)."""
    for mine, theirs in ((METHODS[0], METHODS[2]), (METHODS[1], METHODS[3])):
        for column in results[mine].columns:
            if not np.array_equal(results[mine][column].to_numpy(), results[theirs][column].to_numpy(),
                                  equal_nan=True):
                raise AssertionError(f"{mine} differs from {theirs} in {column}")


class warnings_off:
    def __enter__(self):
        import warnings
        self._catch = warnings.catch_warnings()
        self._catch.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc):
        return self._catch.__exit__(*exc)


def markdown(info):
    lines = [f"# Evaluation in a training loop ({info['date']}, {info['device']}, commit {info['commit']})", "",
             f"`{info['command']}`; {info['machine']}, {info['cpus']} CPUs, load average {info['load'][0]:.2f}, "
             f"torch {info['torch']} ({info['threads']} threads); medians of {info['epochs']} epochs.", "",
             "| size | train epoch s | method | eval s | share of epoch |", "|---|---:|---|---:|---:|"]
    for row in info["results"]:
        for method in METHODS:
            r = row[method]
            lines.append(f"| {row['size']} ({row['train_interactions']:,} training pairs) | {row['train_epoch_s']:.3f} | "
                         f"{method} | {r['seconds'] * 1e3:.1f} ms | {100 * r['share_of_epoch']:.2f}% |")
    lines += ["", "Evaluator built once per size: " + ", ".join(
        f"{row['size']} {row['evaluator_build_s'] * 1e3:.0f} ms" for row in info["results"]) + "; NDCG@10 after the "
        "last epoch: " + ", ".join(f"{row['size']} {row['ndcg10']:.4f}" for row in info["results"]) + "."]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
