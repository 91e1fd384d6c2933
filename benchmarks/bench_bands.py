#!/usr/bin/env python
"""How many pool items the filter cannot settle: the share of (user, pool item) pairs whose
score lies within the filter's error bound of one of the user's test items' scores. Those
pairs need the defined score (F float64 products, and a read of the item's factors); the
rest are settled by one compare. It depends on the bound and the data, not on the device,
so it is measured here on the CPU, for each bound gpureco has used:

- FP32: gamma_(F+2) float32 units times sum_f |a_f| max_j |b_jf|, and the same scale with
  Cauchy-Schwarz (||a|| max_j ||b_j||) where smaller;
- TF32 before the split (commit 240cd19): about 2**-9 of the scale, TF32 inputs;
- TF32 as a split filter (score_tolerance(tf32=True)), without and with the norms;
- TF32 on tensor cores inside fused_rank_tf32 (score_tolerance(tf32="fused")), with the norms;
- FP32 and TF32 fused with each item's own norm in place of the largest (a bound per user
  and item): what the fused kernels' second check of a deferred item leaves to the defined
  score (speed log change 23; rank_tile and the CPU engine use the bound per user alone).

Second, for the FP32 bound with norms (gpureco's), where the rank kernels' counting places
each pool item (kernels/bands.cuh): below the worst band (one compare), by its cell's entry
in the user's table (read by gr_cell_round: 128 cells from the worst band's low edge to the best
band's high edge), by the search (a cell holding a band's edge), or inside a band (the
defined score). The filter score is modelled as the exact score rounded to float32.

Third, the lanes of a warp whose counts (shared-memory atomics) fall on the same word, in
rank_tile's layout (a block a user), fused_rank's (a half-warp a row) and one with the rows
rotated among a half-warp's lanes (not built).

The problem is bench_gpu's (bench_cpu.make_problem: N(0, 1) factors, about 10 test items a
user), on --sample users. Writes <out>/bands_<date>.json and .md. With --model trained, a
trained model instead: gpureco.datasets.make_interactions() (10,000 users x 3,000 items), 20%
of each user's items held out at random, and PureSVD factors of the rest (the --factors
largest singular triplets of the training matrix, A = U S and B = V, as float32), whose test
items rank high, as a recommender's do; written to bands_<date>_trained.*.

    python benchmarks/bench_bands.py
    python benchmarks/bench_bands.py --model trained --factors 64 --sample 500
"""
import argparse
import datetime as dt
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_cpu import git_commit, make_problem, write_results  # noqa: E402

from gpureco.engine import _scores  # noqa: E402


def pool_of(X_train, u, n_items):
    """User u's pool: every item but its training items."""
    pool = np.ones(n_items, dtype=bool)
    pool[X_train.indices[X_train.indptr[u]: X_train.indptr[u + 1]]] = False
    return pool


def share_in_bands(A, B, X_train, X_test, users, tol):
    """Mean over `users` of the share of pool items whose exact score is within tol of a test
    score (tol: per user, or a function of the user giving one per item)."""
    shares = []
    for u in users:
        s = A[u].astype(np.float64) @ B.T.astype(np.float64)
        t = np.sort(s[X_test[[u]].indices])
        pool = pool_of(X_train, u, B.shape[0])
        s, width = s[pool], tol(u)[pool] if callable(tol) else tol[u]
        shares.append(np.mean(np.searchsorted(t, s + width, side="right") > np.searchsorted(t, s - width)))
    return float(np.mean(shares))


def float_bands(t, tol):
    """gr_band for float32 filters: t - tol rounded down and t + tol rounded up to float32."""
    lo, hi = (t - tol).astype(np.float32), (t + tol).astype(np.float32)
    lo = np.where(lo > t - tol, np.nextafter(lo, np.float32(-np.inf)), lo)
    hi = np.where(hi < t + tol, np.nextafter(hi, np.float32(np.inf)), hi)
    return lo, hi


def placements(A, B, X_train, X_test, users, tol, cells=128, steps=None):
    """Mean shares of pool items below the worst band, placed by a cell, by the search, and
    inside a band, as bands.cuh's gr_cell_round places float32 filter scores; and the
    searched flags of each user's pool items, in item order (for warp_searches). With a list
    `steps`, each user's flags of the searched items that rank_tile's table places by one step
    (gr_cell_entry with steps: a cell of at most one low edge, not the worst band's nor the
    last) are appended to it."""
    shares, flags, places = [], [], []
    for u in users:
        s = (A[u].astype(np.float64) @ B.T.astype(np.float64)).astype(np.float32)[pool_of(X_train, u, B.shape[0])]
        t = -np.sort(-(A[u].astype(np.float64) @ B[X_test[[u]].indices].T.astype(np.float64)))
        lo, hi = float_bands(t, tol[u])
        base, scale = lo[-1], np.float32(cells - 3) / (hi[0] - lo[-1])
        # gr_cell: fma(x - base, scale, 1) (a float32 product is exact in float64), clamped, truncated
        cell = lambda x: np.clip(((x - base).astype(np.float64) * scale + 1).astype(np.float32),  # noqa: E731
                                 0, cells - 1).astype(np.int64)
        above = s >= base
        searched = np.isin(cell(s), np.r_[cell(lo), cell(hi)]) & above
        in_band = (np.searchsorted(-hi, -s, side="right") > np.searchsorted(-lo, -s)) & above
        shares.append([np.mean(~above), np.mean(above & ~searched & ~in_band), np.mean(searched),
                       np.mean(in_band & ~searched)])
        flags.append(searched)
        if steps is not None:
            k, cl = cell(s[searched]), cell(lo)
            p = (cl[None, :] > k[:, None]).sum(axis=1)
            one_low = (cl[None, :] == k[:, None]).sum(axis=1) <= 1
            stepped = np.zeros_like(searched)
            stepped[searched] = one_low & (p < lo.size - 1) & (k < cells - 1)
            steps.append(stepped)
        # the place a cell answers (c = #{i : low(i) > s}), -1 where the item is not counted there
        # (below the worst band, searched, or inside a band)
        places.append(np.where(above & ~searched & ~in_band, np.searchsorted(-lo, -s), -1))
    return dict(zip(["below the worst band", "a cell", "the search", "a cell, inside a band"],
                    np.mean(shares, axis=0).tolist())), flags, places


def atomic_conflicts(places, layout):
    """Lanes of one warp's shared-memory atomic on the same word, as the rank kernels count (an
    atomic a lane and item, at the places that the users' cells answer; `places`: a user's pool
    items each, in order, -1 where not counted so): the mean, over the atomics where some lane
    counts, of the largest number of lanes on one word, which the shared-memory unit serves in
    turn. Layouts:
    - "rank_tile, a word a place": 32 lanes of one user (a block a user), 32 consecutive items;
    - "fused_rank, a half-warp a row": two users, 16 lanes each (FmaTile), on their own words;
    - "fused_rank, rows rotated": lane tx of a half-warp on its row (round + tx) % 8 of 8, rows
      2p and 2p + 1 sharing words (their counts' 16-bit halves)."""
    n = min(p.size for p in places) // 32 * 32
    users = np.stack([p[:n] for p in places])  # user, item
    lane = np.arange(32)
    half, tx = lane // 16, lane % 16
    depth = []
    for group in range(users.shape[0] // 16):
        g = users[16 * group: 16 * group + 16]
        for k, slot in enumerate(range(0, n, 32)):
            items = slot + lane
            if layout.startswith("rank_tile"):
                c = word = g[k % 16, items]
            elif layout.endswith("a row"):
                c = g[half, items]
                word = half * 10**6 + c
            else:
                rho = (k + tx) % 8
                c = g[8 * half + rho, items]
                word = (8 * half + rho // 2) * 10**6 + c
            live = c >= 0
            if live.any():
                depth.append(np.unique(word[live], return_counts=True)[1].max())
    return float(np.mean(depth))


CONFLICT_LAYOUTS = ("rank_tile, a word a place", "fused_rank, a half-warp a row", "fused_rank, rows rotated")


def warp_searches(flags, round_items):
    """How often a warp runs the search, per item slot (one item of each of its 32 lanes), from
    the searched flags of a user's pool items dealt to the lanes in rounds of round_items
    items a lane (as rank_tile does: consecutive items, lane + 32 q): searched in turn
    (kernels before change 25), a warp runs the search at a slot where any lane's item
    searches (the other lanes wait); searched after the round (gr_search_round), as many times
    as its busiest lane has items to search; queued (fused_rank, change 47), 32 items a run (one
    a lane), the queue emptied after every 2,048 items (a warp's 16 rows of a 128-item tile)."""
    inline = after = queued = slots = 0
    for searched in flags:
        n = searched.size // (32 * round_items) * 32 * round_items
        rounds = searched[:n].reshape(-1, round_items, 32)  # round, slot, lane
        inline += int(rounds.any(axis=2).sum())
        after += int(rounds.sum(axis=1).max(axis=1).sum())
        slots += rounds.shape[0] * round_items
        tiles = np.add.reduceat(searched[:n].astype(np.int64), np.arange(0, n, 2048))
        queued += int((-(-tiles // 32)).sum())
    return dict(inline=inline / slots, after_the_round=after / slots, queued=queued / slots)


def warp_steps(flags, steps, round_items=4):
    """rank_tile's searches after the round with steps (change 44), per item slot of a warp: a
    lane places its searched items one an iteration, in round order, and the warp's iteration
    i runs gr_place's search where some lane's i-th item searches in full, and gr_step where
    some lane's i-th item takes a step (both, one after the other, where both)."""
    full = step = slots = 0
    for searched, stepped in zip(flags, steps):
        n = searched.size // (32 * round_items) * 32 * round_items
        kind = np.where(stepped, 1, np.where(searched, 2, 0))[:n].reshape(-1, round_items, 32)  # round, q, lane
        nth = np.zeros_like(kind)  # round, i, lane: the kind of the lane's i-th searched item
        count = np.zeros((kind.shape[0], 32), dtype=np.int64)
        for q in range(round_items):
            r, lane = np.nonzero(kind[:, q] > 0)
            nth[r, count[r, lane], lane] = kind[r, q, lane]
            count[r, lane] += 1
        full += int((nth == 2).any(axis=2).sum())
        step += int((nth == 1).any(axis=2).sum())
        slots += kind.shape[0] * round_items
    return dict(full=full / slots, steps=step / slots)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--factors", type=int, default=128)
    parser.add_argument("--sample", type=int, default=20, help="users measured")
    parser.add_argument("--model", choices=("random", "trained"), default="random",
                        help="random: bench_gpu's problem (--users, --items); trained: PureSVD on make_interactions()")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = parser.parse_args(argv)
    if args.model == "trained":
        X_train, X_test, A, B = trained_problem(args.factors)
        args.users, args.items = X_test.shape
    else:
        X_train, X_test, A, B = make_problem(args.users, args.items, args.factors)
    users = np.linspace(0, args.users - 1, args.sample).astype(int)
    users = users[np.diff(X_test.indptr)[users] > 0]  # (a trained problem's users without test items)
    item_abs_max, bias_abs_max = _scores.magnitudes(B, np.zeros(0))
    norm = _scores.max_row_norm(B)
    f = args.factors
    old_gamma = ((1 + 2.0**-10) ** 2 * (1 + _scores._gamma(f + 2, 2.0**-24)) - 1 + _scores._gamma(f + 2, 2.0**-53))
    old_tf32 = 2 * (old_gamma * (np.abs(A.astype(np.float64)) @ item_abs_max) + (f + 2) * float(np.finfo(np.float32).tiny))
    bounds = {
        "FP32": _scores.score_tolerance(A, item_abs_max, bias_abs_max, np.float32),
        "FP32, norms": _scores.score_tolerance(A, item_abs_max, bias_abs_max, np.float32, item_norm_max=norm),
        "TF32 before the split": old_tf32,
        "TF32 split": _scores.score_tolerance(A, item_abs_max, bias_abs_max, np.float32, True),
        "TF32 split, norms": _scores.score_tolerance(A, item_abs_max, bias_abs_max, np.float32, True, norm),
        "TF32 fused (fused_rank_tf32), norms": _scores.score_tolerance(A, item_abs_max, bias_abs_max, np.float32,
                                                                        "fused", norm),
    }
    # the same bounds with each item's own norm in place of the largest (Cauchy-Schwarz item by
    # item; no biases here): the fused kernels check an item that the user's bound leaves inside
    # a band against its own before they compute its defined score
    item_norms = np.sqrt(np.einsum("ij,ij->i", B.astype(np.float64), B.astype(np.float64)))

    def per_item(mode):
        return lambda u: _scores.score_tolerance(A[[u]], item_abs_max, bias_abs_max, np.float32, mode, item_norms)
    per_item_bounds = {"FP32, each item's norm": per_item(False),
                       "TF32 fused, each item's norm": per_item("fused")}
    rows = {name: dict(median_tol=float(np.median(tol)), share=share_in_bands(A, B, X_train, X_test, users, tol))
            for name, tol in bounds.items()}
    rows.update({name: dict(median_tol=float(np.median(tol(users[0]))),
                            share=share_in_bands(A, B, X_train, X_test, users, tol))
                 for name, tol in per_item_bounds.items()})
    placed, flags, places = placements(A, B, X_train, X_test, users, bounds["FP32, norms"])
    conflicts = {layout: atomic_conflicts(places, layout) for layout in CONFLICT_LAYOUTS}
    tables = {128: (placed, flags)}  # cells: (shares, searched flags)
    # rank_tile with steps (change 44) at each architecture's RANK_CELLS: 2,048 on an H100 (change 45), 512 on an A100
    # (change 46) and the RTX series, 128 on an A100 before change 46; 1,024 in a block of a short span
    stepping = {}
    for cells in (128, 512, 1024, 2048):
        steps = []
        shares, searched, _ = placements(A, B, X_train, X_test, users, bounds["FP32, norms"], cells, steps)
        tables.setdefault(cells, (shares, searched))
        stepping[f"{cells} cells"] = dict(searched=shares["the search"],
                                          stepped=float(np.mean([t.mean() for t in steps])),
                                          searches=warp_searches(searched, 4)["after_the_round"],
                                          **warp_steps(searched, steps))
    warp = {}  # rank_tile: rounds of 4 items a lane, 128 or 1,024 cells; fused_rank: rounds of 8, 128 cells
    for cells, rounds in ((128, (4, 8)), (1024, (4,))):
        table = tables[cells]
        for r in rounds:
            warp[f"{cells} cells, rounds of {r}"] = dict(searched=table[0]["the search"], **warp_searches(table[1], r))
    info = {"date": dt.date.today().isoformat(), "commit": git_commit(),
            "problem": dict(model=args.model, users=args.users, items=args.items, factors=f, sample=args.sample,
                            test_items_per_user=X_test.nnz / args.users), "bounds": rows, "placed_by": placed,
            "warp_searches": warp, "warp_steps": stepping, "atomic_conflicts": conflicts}
    lines = [f"# Pool items inside a test item's band ({info['date']}, commit {info['commit']})", "",
             f"`python benchmarks/bench_bands.py {' '.join(argv if argv is not None else sys.argv[1:])}`: "
             + (f"PureSVD on make_interactions() ({args.users:,} users x {args.items:,} items), {f} factors, "
                if args.model == "trained" else f"{args.items:,} items x {f} N(0, 1) factors, ")
             + f"{X_test.nnz / args.users:.1f} test items a user, {len(users)} users measured. Each pool item "
             "in a band costs a defined score (F float64 products and a read of its factors); the others one "
             "compare.", "",
             "| bound | median tol | pool items in a band |", "|---|---:|---:|"]
    lines += [f"| {name} | {r['median_tol']:.3g} | {100 * r['share']:.3f}% |" for name, r in rows.items()]
    lines += ["", "Where the counting places a pool item (FP32, norms; kernels/bands.cuh, 128 cells a user):", "",
              "| placed by | pool items |", "|---|---:|"]
    lines += [f"| {name} | {100 * share:.2f}% |" for name, share in placed.items()]
    lines += ["", "How often a warp runs the search (FP32, norms), per item slot of its 32 lanes: searched in turn, "
              "at every slot where any lane's item searches; searched after the lane's round (gr_search_round, "
              "change 25), as often as the busiest lane has items to search; queued, 32 a run, one a lane (fused_rank "
              "since change 47: its rounds of 4 items a lane, a queue a warp, emptied after every 2,048 items). "
              "rank_tile: rounds of 4; fused_rank before change 47: rounds of 8.", "",
              "| cells, round | items searched | searches a slot, in turn | after the round | queued |",
              "|---|---:|---:|---:|---:|"]
    lines += [f"| {name} | {100 * w['searched']:.2f}% | {w['inline']:.3f} | {w['after_the_round']:.3f} | "
              f"{w['queued']:.3f} |" for name, w in warp.items()]
    lines += ["", "rank_tile's searches with steps (change 44; FP32, norms; rounds of 4): a cell that holds an edge but "
              "at most one low edge places its items by gr_step (two compares; about 50 instructions an iteration on "
              "sm_90, the cell's entry read again) where gr_place searched (about 50 + 8 a bisection step: 82 at 10 "
              "test items); per item slot of a warp, the iterations of the search loop before (searches, as above) "
              "and with steps: those where some lane searches in full, and those where some lane steps. rank_tile's "
              "table (RANK_CELLS): 2,048 cells on an H100 (change 45; 1,024 with change 44), 512 on an A100 (change "
              "46; 128 before) and on the RTX series.", "",
              "| cells | items searched | by a step | searches a slot | with steps: full searches | steps |",
              "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {name} | {100 * w['searched']:.2f}% | {100 * w['stepped']:.2f}% | {w['searches']:.3f} | "
              f"{w['full']:.3f} | {w['steps']:.3f} |" for name, w in stepping.items()]
    lines += ["", "Lanes of a warp's shared-memory count on one word (FP32, norms; the places a cell answers, 128 "
              "cells): the mean over the counting atomics of the most lanes on one word (1: none share), random users "
              "standing for a block's rows. A plain ATOMS.ADD serves such lanes one after another: fused_rank's "
              "counts before change 47 (an add of 1 or 2^16, the row's half of the word). rank_tile's, and fused_rank's "
              "since (a warp a row, as rank_tile's first layout: an add of 1, its result unused) compile to "
              "ATOMS.POPC.INC, an increment by the number of lanes on the word.", "",
              "| layout | lanes on one word |", "|---|---:|"]
    lines += [f"| {name} | {depth:.2f} |" for name, depth in conflicts.items()]
    print("\n".join(lines))
    write_results(args.out, f"bands_{info['date']}" + ("_trained" if args.model == "trained" else ""), info,
                  "\n".join(lines))


def trained_problem(n_factors, seed=0):
    """(X_train, X_test, A, B): make_interactions(), 20% of each user's items held out at
    random, PureSVD factors of the training matrix (float32)."""
    import scipy.sparse as sp
    import scipy.sparse.linalg as sla
    from gpureco.datasets import make_interactions
    frame = make_interactions()
    users, items = frame["user"].to_numpy(), frame["item"].to_numpy()
    shape = (int(users.max()) + 1, int(items.max()) + 1)
    test = np.random.default_rng(seed).random(users.size) < 0.2
    X_train, X_test = (sp.csr_array((np.ones(int(m.sum())), (users[m], items[m])), shape=shape) for m in (~test, test))
    for X in (X_train, X_test):
        X.sum_duplicates()
    U, s, Vt = sla.svds(X_train, k=n_factors, random_state=seed)
    return X_train, X_test, (U * s).astype(np.float32), np.ascontiguousarray(Vt.T, dtype=np.float32)


if __name__ == "__main__":
    main()
