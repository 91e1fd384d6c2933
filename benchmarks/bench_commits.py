#!/usr/bin/env python
"""gpureco's own calls timed at several commits, one after the other on the same device.

A device session is rare and short, and the changes made between two of them are many: a
single `bench_gpu.py` run measures them all at once. This times each commit's gpureco on
one generated problem, in one process per commit and round (rounds interleave the commits:
A B C, A B C, so that a drift of the machine's clocks falls on all of them), and checks
that every commit gives the first commit's numbers bit for bit (a digest of each result
array). Each commit's gpureco/, kernels/ and setup.py come out of git (`git archive`) into
a folder of their own; its compiled extension is copied from the checkout where its
Cython sources are the checkout's, and built in place otherwise (once per distinct
source). `worktree` names the checkout as it is, uncommitted changes included.

Calls (--calls): `fp32`, `tf32`, `fused`, `fused-tf32`: calc_reco_metrics at --k with all
ten metrics, the tiles (FP32), tf32=True, _gpu.FUSED, both; `topk<K>`, `topk<K>-tf32`:
top_k at K. Results on the device (output="cupy") with --device gpu, NumPy with --device
cpu (the script's own test, on a small problem).

    python benchmarks/bench_commits.py --commits 08b7a88,b89207e,HEAD,worktree
    python benchmarks/bench_commits.py --commits 08b7a88,HEAD --calls fp32,topk1000 --rounds 2 --repeats 3

The device tool's copy of the working tree carries a .git whose HEAD is the session's
first commit: a commit made after the session's first call is not there. Extract the
trees here (`--extract DIR`, DIR ignored by git) and carry DIR; there, `--trees DIR`.
Writes <out>/commits_<date>.json and .md.
"""
import argparse
import datetime as dt
import glob
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from bench_cpu import git_commit, machine_info, make_problem, write_results  # noqa: E402

CALL = re.compile(r"^(?:(fp32|tf32|fused|fused-tf32)|topk(\d+)(-tf32)?)$")
TREE_FILES = ("gpureco", "kernels", "setup.py")  # what a commit's gpureco needs to run


def parse_calls(text):
    calls = [c.strip() for c in text.split(",") if c.strip()]
    bad = [c for c in calls if not CALL.match(c)]
    if bad or not calls:
        raise ValueError(f"--calls: expected fp32, tf32, fused, fused-tf32, topk<K> or topk<K>-tf32, comma-separated; "
                         f"got {text!r}")
    return calls


def git(*args, cwd=ROOT):
    r = subprocess.run(["git", *args], cwd=cwd, capture_output=True)
    if r.returncode:
        raise RuntimeError(f"git {' '.join(args)}: {r.stderr.decode(errors='replace').strip()}")
    return r.stdout


def extract(commit, folder):
    """commit's TREE_FILES into folder (made afresh); returns the full commit id."""
    sha = git("rev-parse", "--verify", f"{commit}^{{commit}}").decode().strip()
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    with tarfile.open(fileobj=io.BytesIO(git("archive", sha, *TREE_FILES))) as tar:
        tar.extractall(folder)
    with open(os.path.join(folder, "COMMIT"), "w") as f:
        f.write(sha + "\n")
    return sha


def extension_sources(tree):
    """A digest of what the compiled extension is built from: setup.py and the .pyx files."""
    h = hashlib.sha256()
    for path in [os.path.join(tree, "setup.py")] + sorted(glob.glob(os.path.join(tree, "gpureco", "engine", "*.pyx"))):
        h.update(os.path.relpath(path, tree).encode() + b"\0")
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def built(tree):
    """The compiled modules of tree (one per .pyx), or None if some is missing."""
    out = []
    for pyx in sorted(glob.glob(os.path.join(tree, "gpureco", "engine", "*.pyx"))):
        found = glob.glob(pyx[:-4] + ".*.so") + glob.glob(pyx[:-4] + ".*.pyd")
        if not found:
            return None
        out += found
    return out


def provide_extension(tree, done):
    """tree's compiled extension: copied from a tree of the same sources (the checkout first), or built in place."""
    key = extension_sources(tree)
    source = done.get(key)
    if source is None and key == extension_sources(ROOT) and built(ROOT):
        source = ROOT
    if source is not None:
        for path in built(source):
            shutil.copy2(path, os.path.join(tree, os.path.relpath(path, source)))
        return "copied"
    r = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=tree, capture_output=True, text=True)
    if r.returncode or not built(tree):
        raise RuntimeError(f"building the extension in {tree} failed:\n{(r.stdout + r.stderr)[-3000:]}")
    done[key] = tree
    return "built"


def save_problem(path, users, items, factors):
    X_train, X_test, A, B = make_problem(users, items, factors)
    parts = {}
    for name, X in (("train", X_train), ("test", X_test)):
        parts.update({f"{name}_indptr": X.indptr, f"{name}_indices": X.indices, f"{name}_data": X.data})
    np.savez(path, A=A, B=B, shape=np.array(X_train.shape), **parts)


def load_problem(path):
    import scipy.sparse as sp
    z = np.load(path)
    shape = tuple(int(v) for v in z["shape"])
    X = {name: sp.csr_array((z[f"{name}_data"], z[f"{name}_indices"], z[f"{name}_indptr"]), shape=shape)
         for name in ("train", "test")}
    return X["train"], X["test"], z["A"], z["B"]


def digests(out):
    """{name: sha256} of a call's result: each array (dtype, shape and bytes, on the host) or other value (repr)."""
    items = out.items() if isinstance(out, dict) else enumerate(out if isinstance(out, (tuple, list)) else [out])
    result = {}
    for name, value in items:
        if hasattr(value, "get") and not isinstance(value, dict):  # a CuPy array
            value = value.get()
        if isinstance(value, np.ndarray):
            value = np.ascontiguousarray(value)
            data = f"{value.dtype.str}{value.shape}".encode() + value.tobytes()
        else:
            data = repr(value).encode()
        result[str(name)] = hashlib.sha256(data).hexdigest()[:16]
    return result


def child(args):
    """One tree's calls, in this process: {call: {"seconds": [...], "digests": {...}}} to --json."""
    sys.path.insert(0, args.child)
    import gpureco
    from gpureco.engine import _gpu
    where = os.path.realpath(gpureco.__file__)
    if not where.startswith(os.path.realpath(args.child) + os.sep):
        raise RuntimeError(f"imported gpureco from {where}, not from the tree {args.child}")
    X_train, X_test, A, B = load_problem(args.problem)
    if args.model:  # the script's test: the GPU backend on tests/gpu_model.py's NumPy model of the device
        import contextlib
        import pytest
        sys.path.insert(0, args.model)
        import gpu_model
        stack = contextlib.ExitStack()
        patch = stack.enter_context(pytest.MonkeyPatch.context())
        sys.modules["cupy"] = stack.enter_context(gpu_model.model_device(patch))
    if args.device == "gpu":
        import cupy as cp
        A, B = cp.asarray(A), cp.asarray(B)
        sync, output = cp.cuda.Device().synchronize, "cupy"
    else:
        sync, output = (lambda: None), "numpy"

    def make(call):
        m = CALL.match(call)
        if m.group(1):
            mode = m.group(1)
            tf32, fused = mode.endswith("tf32"), mode.startswith("fused")

            def fn():
                _gpu.FUSED = fused
                try:
                    return gpureco.calc_reco_metrics(X_train, X_test, A, B, k=args.k, all_metrics=True, output=output,
                                                     device=args.device, tf32=tf32)
                finally:
                    _gpu.FUSED = False
            return fn
        k, tf32 = int(m.group(2)), bool(m.group(3))
        return lambda: gpureco.top_k(A, B, k, X_train=X_train, device=args.device, output=output, tf32=tf32)

    results = {}
    for call in parse_calls(args.calls):
        fn = make(call)
        out = fn()  # the warm-up: kernels compiled, memory pooled
        seconds = []
        for _ in range(args.repeats):
            sync()
            start = time.perf_counter()
            fn()
            sync()
            seconds.append(time.perf_counter() - start)
        results[call] = {"seconds": seconds, "digests": digests(out)}
    with open(args.json, "w") as f:
        json.dump(results, f)


def prepare_trees(args, work):
    """[(label, folder, commit)] of the --commits, extracted into work/<n>, in their order (or those --extract wrote
    into --trees); `worktree` runs the checkout in place, or is copied there by --extract."""
    if args.trees:
        try:
            with open(os.path.join(args.trees, "TREES.json")) as f:
                return [(label, os.path.join(args.trees, folder), sha) for label, folder, sha in json.load(f)]
        except OSError:
            raise ValueError(f"--trees: expected a folder written by --extract; {args.trees!r} has no TREES.json") from None
    names = [c.strip() for c in args.commits.split(",") if c.strip()]
    if not names:
        raise ValueError(f"--commits: expected commits (or worktree), comma-separated; got {args.commits!r}")
    trees = []
    for n, name in enumerate(names):
        folder = os.path.join(work, str(n))
        if name == "worktree" and not args.extract:
            trees.append(("worktree", ROOT, git_commit() or "?"))
            continue
        if name == "worktree":  # a copy of the checkout's files as they are
            shutil.rmtree(folder, ignore_errors=True)
            for part in TREE_FILES:
                source = os.path.join(ROOT, part)
                if os.path.isdir(source):
                    shutil.copytree(source, os.path.join(folder, part),
                                    ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.c"))
                else:
                    shutil.copy2(source, os.path.join(folder, part))
            sha = f"{git_commit()} + the working tree"
        else:
            sha = extract(name, folder)
        label = name if name == "worktree" or sha.startswith(name) else f"{name} ({sha[:7]})"
        label = label[:7] if re.fullmatch(r"[0-9a-f]{8,40}", label) else label
        if label in [t[0] for t in trees]:  # the same name twice: each its own column
            label = f"{label} #{n + 1}"
        trees.append((label, folder, sha))
    if args.extract:
        with open(os.path.join(work, "TREES.json"), "w") as f:
            json.dump([(label, os.path.relpath(folder, work), sha) for label, folder, sha in trees], f, indent=1)
    return trees


def same_as(first, other):
    """Names of the result entries whose digests differ between two runs of a call (empty: the same numbers)."""
    return sorted(name for name in set(first) | set(other) if first.get(name) != other.get(name))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", default="HEAD", help="commits (git names) or `worktree`, comma-separated; the "
                        "first is the one the others' numbers are compared with")
    parser.add_argument("--trees", help="folder of trees written by --extract (in place of --commits)")
    parser.add_argument("--extract", help="only write the --commits' trees into this folder, for --trees elsewhere")
    parser.add_argument("--calls", default="fp32,tf32,topk10,topk100,topk1000,topk100-tf32")
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--factors", type=int, default=128)
    parser.add_argument("--k", type=int, default=100, help="calc_reco_metrics' K")
    parser.add_argument("--rounds", type=int, default=2, help="processes per tree, the trees interleaved")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per call and process, after a warm-up")
    parser.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    parser.add_argument("--budget", type=float, default=540.0, help="seconds: no process starts after them")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds one process may take")
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--problem", help=argparse.SUPPRESS)
    parser.add_argument("--json", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)  # tests/: the device is gpu_model's (the script's test)
    args = parser.parse_args(argv)
    if args.child:
        return child(args)
    try:
        calls = parse_calls(args.calls)
    except ValueError as error:
        parser.error(str(error))
    for name in ("users", "items", "factors", "k", "rounds", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}: expected a positive integer; got {getattr(args, name)}")
    started = time.monotonic()
    if args.extract:
        for label, folder, sha in prepare_trees(args, args.extract):
            print(f"{label}: {sha} in {folder}")
        return
    work = tempfile.mkdtemp(prefix="gpureco_commits_")
    info = dict(date=dt.date.today().isoformat(), commit=git_commit(), argv=argv if argv is not None else sys.argv[1:],
                device=device_name(args.device), machine=machine_info(), extensions={}, errors=[],
                processes_skipped=0, seconds=0.0, trees=[], runs={})

    def report():  # rewritten after every process: a command cut short keeps what ran
        info["seconds"] = round(time.monotonic() - started, 1)
        text = markdown(info, [t["label"] for t in info["trees"]], calls)
        return text, write_results(args.out, f"commits_{info['date']}", info, text)
    try:
        trees = prepare_trees(args, work)
        info["trees"] = [dict(label=label, commit=sha) for label, _, sha in trees]
        info["runs"] = {label: {} for label, _, _ in trees}
        done = {}
        for label, folder, _ in trees:
            if folder != ROOT:
                info["extensions"][label] = provide_extension(folder, done)
        problem = os.path.join(work, "problem.npz")
        save_problem(problem, args.users, args.items, args.factors)
        for r in range(args.rounds):
            for label, folder, _ in trees:
                if time.monotonic() - started > args.budget:
                    info["processes_skipped"] += 1
                    continue
                info["errors"] += run_tree(args, label, folder, r, problem, work, info["runs"][label])
                print(f"{label} round {r + 1} done ({time.monotonic() - started:.0f} s)", flush=True)
                report()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text, stem = report()
    print(text)
    print(f"\nwrote {stem}.json and .md")
    return 1 if info["errors"] else 0


def run_tree(args, label, folder, r, problem, work, runs):
    """One process of the tree's calls (round r), its timings added to runs; returns its errors."""
    out = os.path.join(work, f"run_{r}.json")
    cmd = [sys.executable, os.path.abspath(__file__), "--child", folder, "--problem", problem, "--json", out,
           "--calls", args.calls, "--k", str(args.k), "--repeats", str(args.repeats), "--device", args.device]
    cmd += ["--model", args.model] if args.model else []
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the tree's gpureco, not the checkout's
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
    except subprocess.TimeoutExpired:
        return [f"{label}, round {r + 1}: over {args.timeout:.0f} s"]
    if p.returncode:
        return [f"{label}, round {r + 1}: exit {p.returncode}: {(p.stdout + p.stderr)[-1500:]}"]
    errors = []
    with open(out) as f:
        for call, res in json.load(f).items():
            entry = runs.setdefault(call, {"seconds": [], "digests": res["digests"]})
            entry["seconds"] += res["seconds"]
            if same_as(entry["digests"], res["digests"]):
                errors.append(f"{label}, round {r + 1}: {call}'s numbers differ from its first round's")
    return errors


def device_name(device):
    if device != "gpu":
        return "CPU"
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True,
                           timeout=20)
        return r.stdout.strip() or "a GPU (nvidia-smi printed nothing)"
    except (OSError, subprocess.SubprocessError):
        return "a GPU (no nvidia-smi)"


def markdown(info, labels, calls):
    runs = info["runs"]
    lines = [f"# gpureco's calls at {len(labels)} commits, {info['date']}", "",
             f"Device: {info['device']}; run from commit {info['commit']}; `python benchmarks/bench_commits.py "
             f"{' '.join(info['argv'])}`. Seconds: the best of each tree's timed calls (all rounds; the median "
             f"in brackets). `*`: numbers not those of the first tree ({labels[0]}), bit for bit; the entries that "
             f"differ are listed below the table.", "",
             "| call | " + " | ".join(labels) + " |", "|---|" + "---:|" * len(labels)]
    differ = []
    for call in calls:
        cells = []
        first = runs[labels[0]].get(call)
        for label in labels:
            res = runs[label].get(call)
            if not res:
                cells.append("—")
                continue
            s = res["seconds"]
            mark = ""
            if first and label != labels[0]:
                d = same_as(first["digests"], res["digests"])
                if d:
                    mark = " *"
                    differ.append(f"- {call} at {label}: {', '.join(d)}")
            cells.append(f"{min(s):.4f} ({float(np.median(s)):.4f}){mark}")
        lines.append(f"| {call} | " + " | ".join(cells) + " |")
    lines += [""] + (["Numbers that differ from the first tree's:"] + differ if differ else
                     ["Every tree gave the first tree's numbers bit for bit, in every call that ran in both."])
    lines += ["", "Trees: " + "; ".join(f"{t['label']} = {t['commit'] if ' ' in t['commit'] else t['commit'][:12]}" for t in info["trees"]) + ". Compiled "
              "extensions: " + (", ".join(f"{k} {v}" for k, v in info["extensions"].items()) or "the checkout's") + "."]
    if info["errors"] or info["processes_skipped"]:
        lines += ["", f"Processes skipped for the budget: {info['processes_skipped']}. Errors:"]
        lines += [f"- {e}" for e in info["errors"]]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
