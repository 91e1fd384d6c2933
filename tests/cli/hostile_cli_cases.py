"""Hostile and extreme inputs of the command line, as data: the files, the cases and what each must give.

Every case is (command line, expected exit code, a regex for the one line on stderr). The suite that runs them
is tests/cli/test_hostile_cli.py; the page docs/robustness-cli.md is generated from this table:

    python tests/cli/hostile_cli_cases.py > docs/robustness-cli.md

In a command line, {d} is the folder of the files below and {out} an empty folder of the case's own.
"""
from __future__ import annotations

from collections import Counter, namedtuple

import numpy as np

# --- the files -------------------------------------------------------------------------------------
# 8 users x 6 items; the model is factors A (8 x 3) and B (6 x 3), or their scores, or top-3 lists.
TRAIN = "user,item\n0,0\n0,1\n1,1\n1,2\n2,3\n3,4\n4,5\n5,0\n6,1\n7,2\n"
TEST = "user,item\n0,2\n1,3\n2,4\n3,5\n4,0\n5,1\n6,2\n7,3\n"
GARBAGE = bytes(range(256)) * 4

TEXT_FILES = {  # name: content (str is written as UTF-8 text, newlines as given; bytes as they are)
    "train.csv": TRAIN, "test.csv": TEST,
    "test_crlf.csv": TEST.replace("\n", "\r\n"),
    "test_bom.csv": "\ufeff" + TEST,
    "test_extra_column.csv": "user,item,comment\n" + "".join(f"{line},hello\n" for line in TEST.split("\n")[1:-1]),
    "test_value_ones.csv": "user,item,value\n" + "".join(f"{line},1\n" for line in TEST.split("\n")[1:-1]),
    "test_blank_lines.csv": TEST + "\n\n",
    "test_spaces.csv": TEST.replace(",", ", "),
    "test_reordered.csv": "item,user\n" + "".join(",".join(line.split(",")[::-1]) + "\n"
                                                  for line in TEST.split("\n")[1:-1]),
    "test_duplicate.csv": TEST + "0,2\n",  # summed: the gain of (0, 2) is 2
    "test_duplicate_clean.csv": TEST.replace("user,item\n", "user,item,value\n").replace("\n", ",1\n").replace(
        "user,item,value,1\n", "user,item,value\n").replace("0,2,1\n", "0,2,2\n"),
    "train_duplicate.csv": TRAIN + "0,0\n",
    "empty.csv": "", "header_only.csv": "user,item\n", "garbage.csv": GARBAGE, "garbage.npy": GARBAGE,
    "garbage.npz": GARBAGE, "garbage.mtx": GARBAGE, "garbage.parquet": GARBAGE, "text.npy": "not an array\n",
    "latin1.csv": "user,item\n0,2\n".encode() + b"\xe9\xff,1\n",
    "truncated.csv": "user,item\n0,2\n1",
    "first_row_long.csv": "user,item\n0,2,5,6\n1,3\n",
    "later_row_long.csv": "user,item\n0,2\n1,3,4\n",
    "no_item.csv": "user\n0\n1\n", "no_user_no_item.csv": "a,b\n0,2\n",
    "text_item.csv": "user,item\n0,a\n1,3\n", "missing_item.csv": "user,item\n0,2\n1,\n",
    "nan_id.csv": "user,item\nnan,2\n", "inf_id.csv": "user,item\ninf,2\n", "huge_float_id.csv": "user,item\n1e400,2\n",
    "huge_int_id.csv": "user,item\n99999999999999999999999,2\n", "negative_id.csv": "user,item\n-1,2\n",
    "fraction_id.csv": "user,item\n0.5,2\n", "out_of_range_item.csv": "user,item\n0,6\n",
    "text_ids.csv": "user,item\nu0,i2\nu1,i3\n",
    "train_text_users.csv": TRAIN.replace("\n", "\nu").removesuffix("u").replace("uuser", "user"),
    "test_text_users.csv": TEST.replace("\n", "\nu").removesuffix("u").replace("uuser", "user"),
    "one_text_user.csv": "user,item\n0,2\n1,3\nabc,4\n",  # the column read as text by one cell
    "two_ways_user.csv": "user,item\n0,2\n1.0,3\n",  # numbers written two ways: text, as written
    "nan_value.csv": "user,item,value\n0,2,nan\n", "inf_value.csv": "user,item,value\n0,2,inf\n",
    "huge_value.csv": "user,item,value\n0,2,1e400\n", "text_value.csv": "user,item,value\n0,2,high\n",
    "train_overlap.csv": TRAIN + "0,2\n",
    "test.txt": TEST, "test.json": '{"user": [0], "item": [2]}',
    # the layouts of other tools, the same data as test.csv (and train.csv)
    "u.data": TEST.replace("user,item\n", "").replace(",", "\t").replace("\n", "\t4\t881250949\n"),
    "u_train.data": TRAIN.replace("user,item\n", "").replace(",", "\t").replace("\n", "\t3\t881250949\n"),
    "ml_test.csv": "userId,movieId,rating,timestamp\n" + TEST.replace("user,item\n", "").replace("\n", ",4.5,1\n"),
    "test.inter": "user_id:token\titem_id:token\trating:float\n" + TEST.replace("user,item\n", "").replace(
        ",", "\t").replace("\n", "\t1\n"),
    "lenskit_test.csv": "user,item,rating\n" + TEST.replace("user,item\n", "").replace("\n", ",5\n"),
    "test_semicolon.csv": "who;what\n" + TEST.replace("user,item\n", "").replace(",", ";"),
    "train_semicolon.csv": "who;what\n" + TRAIN.replace("user,item\n", "").replace(",", ";"),
    "test_unknown.csv": TEST + "8,2\n0,6\n",  # user 8 and item 6: the model has rows 0-7 and 0-5
    "test_two_items.csv": "user,item_id,movieId\n0,2,2\n",
    # top-K lists
    "time_mixed.csv": "user,item,timestamp\n0,1,10\n0,2,9\n1,1,100\n1,2,2a\n",  # numbers and one text
    "recs_rank_missing.csv": "user,item\n0,2\n", "recs_rank_nan.csv": "user,item,rank\n0,2,\n0,1,1\n",
    "recs_rank_text.csv": "user,item,rank\n0,2,first\n", "recs_rank_negative.csv": "user,item,rank\n0,2,-1\n",
    "recs_rank_fraction.csv": "user,item,rank\n0,2,1.5\n", "recs_rank_huge.csv": "user,item,rank\n0,2,1e400\n",
    "recs_rank_and_score.csv": "user,item,rank,score\n0,2,1,3.0\n", "recs_score_nan.csv": "user,item,score\n0,2,nan\n",
    "recs_duplicate.csv": "user,item,rank\n0,2,1\n0,2,2\n", "recs_text_ids.csv": "user,item,rank\nu0,2,1\n",
    "recs_header_only.csv": "user,item,rank\n", "recs_no_item.csv": "user,rank\n0,1\n",
    # per-user results for compare
    "ra.csv": "user,NDCG@3,P@3\n0,0.1,0.0\n1,0.5,0.3333\n2,1.0,0.6667\n3,0.0,0.0\n",
    "rb.csv": "user,NDCG@3,P@3\n3,0.2,0.3333\n2,0.6,0.3333\n1,0.4,0.0\n0,0.3,0.3333\n",
    "rb_more_users.csv": "user,NDCG@3,P@3\n0,0.3,0.3333\n1,0.4,0.0\n2,0.6,0.3333\n3,0.2,0.3333\n9,1.0,1.0\n",
    "rb_more_columns.csv": "user,NDCG@3,P@3,R@3\n0,0.3,0.3333,1\n1,0.4,0.0,0\n2,0.6,0.3333,1\n3,0.2,0.3333,1\n",
    "rb_nan_metric.csv": "user,NDCG@3,P@3\n0,,0.3333\n1,0.4,0.0\n2,0.6,0.3333\n3,0.2,0.3333\n",
    "rb_disjoint_users.csv": "user,NDCG@3,P@3\n10,0.3,0.3\n11,0.4,0.0\n",
    "rb_text_users.csv": "user,NDCG@3,P@3\nu0,0.3,0.3\nu1,0.4,0.0\n",
    "rb_other_metrics.csv": "user,R@3\n0,1\n1,0\n2,1\n3,1\n",
    "rb_no_user.csv": "NDCG@3,P@3\n0.3,0.3\n0.4,0.0\n0.6,0.3\n0.2,0.3\n",
    "rb_text_metric.csv": "user,NDCG@3,P@3\n0,good,0.3\n1,0.4,0.0\n",
    "rb_inf_metric.csv": "user,NDCG@3,P@3\n0,inf,0.3\n1,0.4,0.0\n",
    "rb_duplicate_user.csv": "user,NDCG@3,P@3\n0,0.3,0.3\n0,0.4,0.0\n",
    "rb_header_only.csv": "user,NDCG@3,P@3\n",
    # interactions with time, for split
    "all.csv": "user,item,timestamp\n" + "".join(f"{u},{(u + i) % 6},{10 * u + i}\n" for u in range(8)
                                                 for i in range(3)),
    "all_text_time.csv": "user,item,timestamp\n" + "".join(f"{u},{i},2024-01-0{i + 1}\n" for u in range(8)
                                                           for i in range(3)),
    "all_nan_time.csv": "user,item,timestamp\n0,0,1\n0,1,\n1,0,3\n1,1,4\n",
    "all_duplicate.csv": "user,item,timestamp\n0,0,1\n0,0,2\n1,0,3\n1,1,4\n",
    "u_all.data": "".join(f"{u}\t{(u + i) % 6}\t3\t{10 * u + i}\n" for u in range(8) for i in range(3)),
    "all_when.csv": "user,item,when\n" + "".join(f"{u},{(u + i) % 6},{10 * u + i}\n" for u in range(8)
                                                 for i in range(3)),
}


def write_files(d):
    """Write every input file of the cases into the folder d (a pathlib.Path)."""
    import pandas as pd
    import scipy.io
    import scipy.sparse as sp

    for name, content in TEXT_FILES.items():
        if isinstance(content, bytes):
            (d / name).write_bytes(content)
        else:
            (d / name).write_text(content, encoding="utf-8", newline="")
    rng = np.random.default_rng(0)
    A, B = rng.normal(size=(8, 3)), rng.normal(size=(6, 3))
    arrays = {"A": A, "B": B, "scores": A @ B.T, "scores32": (A @ B.T).astype(np.float32), "A_1d": A[:, 0],
              "A_3d": A[:, :, None], "A_scalar": np.float64(1), "A_text": A.astype(str), "A_complex": A + 0j,
              "A_few_rows": A[:5], "A_no_columns": A[:, :0], "A_empty": A[:0], "B_two_factors": B[:, :2],
              "B_nan": np.where(np.eye(6, 3) > 0, np.nan, B), "scores_wide": (A @ B.T)[:, :4],
              "scores_1d": (A @ B.T).ravel(), "biases": np.zeros(6), "biases_2d": np.zeros((6, 1)),
              "user_ids": np.arange(8), "user_ids_text": np.array([f"u{i}" for i in range(8)]),
              "user_ids_digits": np.array([str(i) for i in range(8)]),
              "ids_bytes": np.array([b"u%d" % i for i in range(8)]), "item_ids_short": np.arange(5),
              "ids_2d": np.zeros((8, 2))}
    for name, array in arrays.items():
        np.save(d / f"{name}.npy", array)
    (d / "folder.csv").mkdir(exist_ok=True)
    np.save(d / "A_object.npy", A.astype(object), allow_pickle=True)
    (d / "A_truncated.npy").write_bytes((d / "A.npy").read_bytes()[:-40])
    pd.DataFrame({"id": ["u0", "u0"]}).to_csv(d / "ids_duplicate.csv", index=False)
    train, test = (pd.read_csv(d / f"{n}.csv") for n in ("train", "test"))
    X_train, X_test = (sp.csr_matrix((np.ones(len(f)), (f["user"], f["item"])), shape=(8, 6)) for f in (train, test))
    for name, X in (("train", X_train), ("test", X_test)):
        sp.save_npz(d / f"{name}.npz", X)
        scipy.io.mmwrite(d / f"{name}.mtx", X)
        try:
            pd.read_csv(d / f"{name}.csv").to_parquet(d / f"{name}.parquet", index=False)
        except ImportError:
            pass
    sp.save_npz(d / "test_wrong_shape.npz", sp.csr_matrix(X_test[:, :5]))
    sp.save_npz(d / "test_nan.npz", sp.csr_matrix(X_test.multiply(np.nan)))
    sp.save_npz(d / "test_empty.npz", sp.csr_matrix((8, 6)))
    np.savez(d / "not_sparse.npz", a=np.arange(3))
    (d / "test_truncated.npz").write_bytes((d / "test.npz").read_bytes()[:60])
    (d / "test_truncated.mtx").write_text("%%MatrixMarket matrix coordinate real general\n8 6 5\n1 3 1\n")
    (d / "test_dense.mtx").write_text("%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n4\n")
    scores = A @ B.T - 1e9 * X_train.toarray()
    top = np.argsort(-scores, axis=1, kind="stable")[:, :3]
    pd.DataFrame({"user": np.repeat(np.arange(8), 3), "item": top.ravel(), "rank": np.tile([1, 2, 3], 8)}).to_csv(
        d / "recs.csv", index=False)
    pd.DataFrame({"user": np.repeat(np.arange(8), 3), "item": top.ravel(),
                  "score": np.tile([3.0, 2.0, 1.0], 8)}).to_csv(d / "recs_score.csv", index=False)


# --- the cases -------------------------------------------------------------------------------------
# check: how an accepted case's numbers are verified against the Python API (test_hostile_cli.CHECKS);
# setup: what the test arranges first ("no-pyarrow", "no-gpu", "unwritable", "no-matplotlib").
Case = namedtuple("Case", "command name argv code error check setup xfail", defaults=(None, None, None, None))

FACTORS = "--factors {d}/A.npy {d}/B.npy"
EVAL = "evaluate --train {d}/train.csv --test {d}/test.csv " + FACTORS + " --metrics NDCG@3,P@3"


def _evaluate_cases():
    cases = []
    # accepted: the same data in another form gives the same numbers as the API on the clean files
    for name in ("test_crlf", "test_bom", "test_extra_column", "test_value_ones", "test_blank_lines", "test_spaces",
                 "test_reordered"):
        cases.append(Case("evaluate", f"--test {name}.csv (same data)", EVAL.replace("test.csv", f"{name}.csv")
                          + " --out {out}/r.csv", 0, check="factors"))
    for suffix in (".npz", ".mtx", ".parquet"):
        cases.append(Case("evaluate", f"--train/--test as {suffix}", EVAL.replace(".csv", suffix)
                          + " --out {out}/r.csv", 0, check="factors", setup="pyarrow" if suffix == ".parquet" else None))
    cases += [
        Case("evaluate", "duplicate test rows, --duplicates sum", EVAL.replace("test.csv", "test_duplicate.csv")
             + " --duplicates sum --out {out}/r.csv", 0, check="factors_duplicate_test"),
        Case("evaluate", "duplicate training rows, --duplicates last", EVAL.replace("train.csv", "train_duplicate.csv")
             + " --duplicates last --out {out}/r.csv", 0, check="factors"),
        Case("evaluate", "duplicate test rows, --duplicates max", EVAL.replace("test.csv", "test_duplicate.csv")
             + " --duplicates max --out {out}/r.csv", 0, check="factors"),
        Case("evaluate", "ML-100k u.data layout (tab, no header)", EVAL.replace("test.csv", "u.data").replace(
            "train.csv", "u_train.data") + " --out {out}/r.csv", 0, check="factors"),
        Case("evaluate", "MovieLens userId,movieId,rating,timestamp", EVAL.replace("test.csv", "ml_test.csv")
             + " --gain binary --out {out}/r.csv", 0, check="factors"),
        Case("evaluate", "RecBole .inter (user_id:token)", EVAL.replace("test.csv", "test.inter") + " --out {out}/r.csv",
             0, check="factors"),
        Case("evaluate", "LensKit user,item,rating", EVAL.replace("test.csv", "lenskit_test.csv")
             + " --gain binary --out {out}/r.csv", 0, check="factors"),
        Case("evaluate", "--user-col/--item-col and --sep ';'", EVAL.replace("test.csv", "test_semicolon.csv").replace(
            "train.csv", "train_semicolon.csv") + " --user-col who --item-col what --sep ';' --out {out}/r.csv", 0, check="factors"),
        Case("evaluate", "--unknown drop: a test user and item the model lacks", EVAL.replace(
            "test.csv", "test_unknown.csv") + " --unknown drop --out {out}/r.csv", 0, check="factors"),
        Case("evaluate", "empty training file (header only)", EVAL.replace("train.csv", "header_only.csv")
             + " --out {out}/r.csv", 0, check="factors_empty_train"),
        Case("evaluate", "--user-ids .npy of the row numbers", EVAL + " --user-ids {d}/user_ids.npy --out {out}/r.csv",
             0, check="factors"),
        Case("evaluate", "--user-ids .npy of text ids", EVAL.replace("train.csv", "train_text_users.csv").replace(
            "test.csv", "test_text_users.csv") + " --user-ids {d}/user_ids_text.npy --out {out}/r.csv", 0,
             check="factors_text_ids"),
        Case("evaluate", "--user-ids .npy of digits as text (numbers, as in a CSV file)", EVAL
             + " --user-ids {d}/user_ids_digits.npy --out {out}/r.csv", 0, check="factors"),
        Case("evaluate", "--scores", "evaluate --train {d}/train.csv --test {d}/test.csv --scores {d}/scores.npy "
             "--metrics NDCG@3,P@3,ROC_AUC --out {out}/r.csv", 0, check="scores"),
        Case("evaluate", "--scores float32", "evaluate --train {d}/train.csv --test {d}/test.csv --scores "
             "{d}/scores32.npy --metrics NDCG@3,P@3,ROC_AUC --out {out}/r.csv", 0, check="scores32"),
        Case("evaluate", "--recs with ranks", "evaluate --train {d}/train.csv --test {d}/test.csv --recs {d}/recs.csv "
             "--metrics NDCG@3,P@3 --out {out}/r.csv", 0, check="factors"),
        Case("evaluate", "--recs with scores", "evaluate --train {d}/train.csv --test {d}/test.csv --recs "
             "{d}/recs_score.csv --metrics NDCG@3,P@3 --out {out}/r.csv", 0, check="factors"),
        Case("evaluate", "NaN in a factor (NaN rule 4, counted on stderr)", EVAL.replace("B.npy", "B_nan.npy")
             + " --out {out}/r.csv", 0, check="factors_nan"),
        Case("evaluate", "-k 6: every item", EVAL.replace("NDCG@3,P@3", "NDCG") + " -k 6 --out {out}/r.csv", 0),
        Case("evaluate", "--report .md", EVAL + " --report {out}/r.md", 0, check="report"),
        Case("evaluate", "--report without matplotlib says so", EVAL + " --report {out}/r.html", 0,
             check="report_no_plots", setup="no-matplotlib"),
    ]
    # the interaction files, as --test and as --train
    bad_frames = [
        ("missing.csv", r"missing\.csv: no such file"), ("empty.csv", r"empty\.csv: the file is empty"),
        ("folder.csv", r"folder\.csv: a folder, where a file is expected"),
        ("garbage.csv", r"garbage\.csv(, line \d+)?: "), ("latin1.csv", r"latin1\.csv: not a text file"),
        ("truncated.csv", r"truncated\.csv, row 1 \(line 3\)"),
        ("first_row_long.csv", r"first_row_long\.csv, line 2: more fields than the header"),
        ("later_row_long.csv", r"later_row_long\.csv, line 3: 3 fields where the header line has 2"),
        ("no_item.csv", r"no_item\.csv: no item column; .*--item-col"),
        ("no_user_no_item.csv", r"no_user_no_item\.csv: no user and no item column; .*--user-col and --item-col"),
        ("text_item.csv", r"text_item\.csv, row 0 \(line 2\)"), ("missing_item.csv", r"missing_item\.csv, row 1"),
        ("nan_id.csv", r"nan_id\.csv, row 0"), ("inf_id.csv", r"inf_id\.csv, row 0"),
        ("huge_float_id.csv", r"huge_float_id\.csv, row 0"), ("huge_int_id.csv", r"huge_int_id\.csv, row 0"),
        ("negative_id.csv", r"negative_id\.csv, row 0"), ("fraction_id.csv", r"fraction_id\.csv, row 0"),
        ("out_of_range_item.csv", r"out_of_range_item\.csv, row 0"), ("text_ids.csv", r"text_ids\.csv, row 0"),
        ("one_text_user.csv", r"one_text_user\.csv, row 2 \(line 4\): user 'abc' is not a number, where 2 other rows' "
                              r"are: the column's ids are read as text"),
        ("two_ways_user.csv", r"two_ways_user\.csv, row 1 \(line 3\): user '1\.0' is not written as an integer, where "
                              r"row 0's '0' is"),
        ("nan_value.csv", r"nan_value\.csv, row 0 .*finite"), ("inf_value.csv", r"inf_value\.csv, row 0 .*finite"),
        ("huge_value.csv", r"huge_value\.csv, row 0 .*finite"), ("text_value.csv", r"text_value\.csv, row 0"),
        ("test.txt", r"test\.txt: expected interactions in a \.csv, \.tsv, \.inter"),
        ("test.json", r"test\.json: expected"),
        ("garbage.npz", r"garbage\.npz: cannot be read as a SciPy sparse matrix"),
        ("garbage.mtx", r"garbage\.mtx: cannot be read as a Matrix Market file"),
        ("garbage.npy", r"garbage\.npy: expected interactions in a \.csv"),
    ]
    for role in ("test", "train"):
        other = "train" if role == "test" else "test"
        for name, error in bad_frames:
            if role == "train" and name in ("nan_value.csv", "inf_value.csv", "huge_value.csv", "text_value.csv"):
                continue  # the gains of training rows are not used
            argv = f"evaluate --{role} {{d}}/{name} --{other} {{d}}/{other}.csv {FACTORS} --metrics NDCG@3 " \
                   "--out {out}/r.csv"
            cases.append(Case("evaluate", f"--{role} {name}", argv, 2, error))
    cases += [
        Case("evaluate", "duplicate test rows (--duplicates error, the default)", EVAL.replace(
            "test.csv", "test_duplicate.csv"), 2, r"test_duplicate\.csv, row 8 \(line 10\): user 0, item 2 is in row 0 "
             r"and again in row 8; .*--duplicates sum, last or max"),
        Case("evaluate", "--unknown error (the default)", EVAL.replace("test.csv", "test_unknown.csv"), 2,
             r"test_unknown\.csv, row 8 \(line 10\): user 8 is not in the model .*--unknown drop"),
        Case("evaluate", "--unknown bogus", EVAL + " --unknown keep", 2, r"argument --unknown: invalid choice"),
        Case("evaluate", "--duplicates bogus", EVAL + " --duplicates mean", 2, r"argument --duplicates: invalid choice"),
        Case("evaluate", "--user-col not a column", EVAL + " --user-col who", 2,
             r"train\.csv: --user-col 'who' is not a column; got columns 'user', 'item'"),
        Case("evaluate", "two candidate item columns", EVAL.replace("test.csv", "test_two_items.csv"), 2,
             r"test_two_items\.csv: the columns 'item_id', 'movieId' could each be the item column; .*--item-col"),
        Case("evaluate", "--user-col with .npz files", EVAL.replace(".csv", ".npz") + " --user-col u", 2,
             r"train\.npz: a matrix has no columns; --user-col apply to text and Parquet files"),
        Case("evaluate", "--latex .txt", EVAL + " --latex {out}/t.txt", 2, r"t\.txt: the LaTeX table \(--latex\) must be a \.tex file; got \.txt"),
        Case("evaluate", "--test header only: nothing to evaluate", EVAL.replace("test.csv", "header_only.csv"), 2,
             r"header_only\.csv: no test interactions"),
        Case("evaluate", "a test pair that is also a training pair", EVAL.replace("train.csv", "train_overlap.csv"), 2,
             r"test\.csv: 1 \(user, item\) pairs are also in .*train_overlap\.csv"),
        Case("evaluate", "--train .csv with --test .npz", EVAL.replace("test.csv", "test.npz"), 2,
             r"must both be frames"),
        Case("evaluate", "--test .npz of the wrong shape", EVAL.replace(".csv", ".npz").replace(
            "test.npz", "test_wrong_shape.npz"), 2, r"test_wrong_shape\.npz: expected a matrix of shape \(8, 6\)"),
        Case("evaluate", "--test .npz with NaN values", EVAL.replace(".csv", ".npz").replace(
            "test.npz", "test_nan.npz"), 2, r"test_nan\.npz, row 0: column 2 holds nan; the values must be finite"),
        Case("evaluate", "--test .npz with no entries", EVAL.replace(".csv", ".npz").replace(
            "test.npz", "test_empty.npz"), 2, r"test_empty\.npz: no test interactions"),
        Case("evaluate", "--test .npz of dense arrays", EVAL.replace(".csv", ".npz").replace(
            "test.npz", "not_sparse.npz"), 2, r"not_sparse\.npz: cannot be read"),
        Case("evaluate", "--test .npz truncated", EVAL.replace(".csv", ".npz").replace(
            "test.npz", "test_truncated.npz"), 2, r"test_truncated\.npz: cannot be read"),
        Case("evaluate", "--test .mtx truncated", EVAL.replace(".csv", ".mtx").replace(
            "test.mtx", "test_truncated.mtx"), 2, r"test_truncated\.mtx: cannot be read"),
        Case("evaluate", "--test .mtx dense", EVAL.replace(".csv", ".mtx").replace("test.mtx", "test_dense.mtx"), 2,
             r"test_dense\.mtx: expected a sparse matrix"),
        Case("evaluate", "--test .parquet that is not Parquet", EVAL.replace("test.csv", "garbage.parquet"), 2,
             r"garbage\.parquet: cannot be read as Parquet", setup="pyarrow"),
        Case("evaluate", "Parquet without pyarrow", EVAL.replace(".csv", ".parquet"), 3,
             r"not available: pyarrow is not installed.*pip install 'gpureco\[parquet\]'", setup="no-pyarrow"),
        Case("evaluate", "--out .parquet without pyarrow", EVAL + " --out {out}/r.parquet", 3,
             r"pip install 'gpureco\[parquet\]'", setup="no-pyarrow"),
    ]
    # the model's files
    for name, error in [("A_1d", r"A_1d\.npy: expected user factors with 2 dimension"),
                        ("A_3d", r"A_3d\.npy: expected user factors with 2 dimension"),
                        ("A_scalar", r"A_scalar\.npy: expected user factors with 2 dimension"),
                        ("A_text", r"A_text\.npy: expected user factors of real numbers; got dtype <U"),
                        ("A_complex", r"A_complex\.npy: expected user factors of real numbers"),
                        ("A_object", r"A_object\.npy: .*object"), ("A_truncated", r"A_truncated\.npy: .*truncated"),
                        ("garbage", r"garbage\.npy: not a NumPy \.npy file"),
                        ("text", r"text\.npy: not a NumPy \.npy file"),
                        ("missing", r"missing\.npy: no such file"),
                        ("A_few_rows", r"train\.csv, row \d+ \(line \d+\).*--user-ids"),
                        ("A_empty", r"train\.csv, row 0"),
                        ("A_no_columns", r"at least one factor column")]:
        cases.append(Case("evaluate", f"--factors {name}.npy", EVAL.replace("A.npy", f"{name}.npy"), 2, error))
    cases += [
        Case("evaluate", "--factors of different widths", EVAL.replace("B.npy", "B_two_factors.npy"), 2,
             r"B_two_factors\.npy: 2 factors an item, where .*A\.npy has 3 a user \(--factors USERS ITEMS"),
        Case("evaluate", "--item-biases of another length", EVAL + " --item-biases {d}/item_ids_short.npy", 2,
             r"item_ids_short\.npy: 5 item biases for a model of 6 items \(--item-biases: one for each row of "
             r".*B\.npy\)"),
        Case("evaluate", "--factors as .csv", EVAL.replace("A.npy", "train.csv"), 2,
             r"train\.csv: expected user factors in a \.npy file"),
        Case("evaluate", "--scores 1-D", "evaluate --train {d}/train.csv --test {d}/test.csv --scores "
             "{d}/scores_1d.npy", 2, r"scores_1d\.npy: expected a score matrix"),
        Case("evaluate", "--scores too few items", "evaluate --train {d}/train.csv --test {d}/test.csv --scores "
             "{d}/scores_wide.npy --metrics NDCG@3", 2, r"(train|test)\.csv, row \d+"),
        Case("evaluate", "--item-biases 2-D", EVAL + " --item-biases {d}/biases_2d.npy", 2,
             r"biases_2d\.npy: expected item biases with 1 dimension"),
        Case("evaluate", "--item-ids too short", EVAL + " --item-ids {d}/item_ids_short.npy", 2,
             r"item_ids_short\.npy: 5 item ids for a model of 6 items"),
        Case("evaluate", "--user-ids 2-D", EVAL + " --user-ids {d}/ids_2d.npy", 2, r"ids_2d\.npy: expected ids"),
        Case("evaluate", "--user-ids .npy of bytes", EVAL + " --user-ids {d}/ids_bytes.npy", 2,
             r"ids_bytes\.npy: expected ids of numbers or text; got dtype \|S2"),
        Case("evaluate", "--user-ids with a duplicate", EVAL + " --user-ids {d}/ids_duplicate.csv", 2,
             r"ids_duplicate\.csv, row 1 \(line 3\): id 'u0' appears twice"),
        Case("evaluate", "two models", EVAL + " --scores {d}/scores.npy", 2, r"give exactly one model"),
        Case("evaluate", "no model", "evaluate --train {d}/train.csv --test {d}/test.csv", 2,
             r"give exactly one model"),
    ]
    # top-K lists
    for name, error in [("recs_rank_missing", r"must have a column 'rank' .* or 'score'"),
                        ("recs_rank_nan", r"column 'rank' must hold finite numbers"),
                        ("recs_rank_text", r"column 'rank' must hold numbers"),
                        ("recs_rank_negative", r"ranks must be 1, 2, \.\.\., n"),
                        ("recs_rank_fraction", r"ranks must be 1, 2, \.\.\., n"),
                        ("recs_rank_huge", r"column 'rank' must hold finite numbers"),
                        ("recs_score_nan", r"column 'score' must hold finite"),
                        ("recs_duplicate", r"duplicate \(user, item\) rows"),
                        ("recs_text_ids", r"recs_text_ids\.csv: the user ids are text but those of .*test\.csv are "
                                          r"numbers"),
                        ("recs_header_only", r"recs_header_only\.csv: no recommendations"),
                        ("recs_no_item", r"recs_no_item\.csv: the columns item are missing"),
                        ("garbage", r"garbage\.csv"), ("empty", r"empty\.csv: the file is empty")]:
        cases.append(Case("evaluate", f"--recs {name}.csv", "evaluate --train {d}/train.csv --test {d}/test.csv "
                          f"--recs {{d}}/{name}.csv --metrics NDCG@3", 2, rf"{name}\.csv.*: .*{error}"
                          if "csv" not in error else error))
    cases += [
        Case("evaluate", "--recs with rank and score (as top_k's frame: the ranks order)", "evaluate --train "
             "{d}/train.csv --test {d}/test.csv --recs {d}/recs_rank_and_score.csv --metrics NDCG@3 --out {out}/r.csv",
             0),
        Case("evaluate", "--recs with ROC_AUC", "evaluate --train {d}/train.csv --test {d}/test.csv --recs "
             "{d}/recs.csv --metrics ROC_AUC", 2, r"--metrics 'ROC_AUC'.*not available"),
        Case("evaluate", "a metric of the Python API's (DCG)", EVAL.replace("NDCG@3,P@3", "NDCG@3,DCG@3"), 3,
             r"not available: --metrics 'NDCG@3,DCG@3': Metric 'DCG@3' .* The Python API computes it"),
        Case("evaluate", "a beyond-accuracy metric (Coverage)", EVAL.replace("NDCG@3,P@3", "Coverage@3"), 3,
             r"not available: .*Metric 'Coverage@3' .* gpureco\.beyond_accuracy computes it"),
        Case("evaluate", "--recs with a broken --train", "evaluate --train {d}/garbage.npz --test {d}/test.csv "
             "--recs {d}/recs.csv --metrics NDCG@3", 2, r"garbage\.npz: cannot be read"),
    ]
    # options
    for option, error in [("--metrics FOO", r"--metrics 'FOO'.*Unknown metric 'FOO'"),
                          ("--metrics ,", r"--metrics ','.*at least one metric"),
                          ("--metrics ''", r"--metrics ''.*at least one metric"),
                          ("--sep ''", r"'--sep' must be a separator .*; got an empty one"),
                          ("--metrics NDCG@0", r"--metrics 'NDCG@0'.*positive"),
                          ("--metrics NDCG@-1", r"--metrics 'NDCG@-1'.*positive"),
                          ("--metrics NDCG@99999999999999999999", r"--metrics .* a cut-off is too large"),
                          ("--metrics NDCG -k 0", r"-k '0'.*positive"), ("--metrics NDCG -k -3", r"-k '-3'.*positive"),
                          ("--metrics NDCG -k five", r"'-k' must be a cut-off"),
                          ("--metrics NDCG -k ''", r"'-k' must be a cut-off or a comma-separated list of them, such as "
                                                   r"10 or 5,10; got ''"),
                          ("--metrics NDCG -k 7", r"-k '7': the cut-off 7 is more than the 6 items of .*B\.npy"),
                          ("--metrics NDCG -k 1000000", r"-k '1000000': the cut-off 1000000 is more than"),
                          ("--metrics NDCG -k 99999999999999999999", r"a cut-off is too large"),
                          ("--metrics NDCG@7", r"the cut-off 7 is more than the 6 items"),
                          ("--device tpu", r"--device must be auto, cpu, gpu or cuda:N .*; got 'tpu'"),
                          ("--out {out}/r.txt", r"r\.txt: the per-user results \(--out\) must be a \.csv"),
                          ("--out {out}", r"the per-user results \(--out\) must be a \.csv"),
                          ("--out {out}/no/such/folder/r.csv", r"folder: no such folder"),
                          ("--out {d}/train.csv/r.csv", r"train\.csv: no such folder \(a file has that name\)"),
                          ("--report {out}/r.pdf", r"r\.pdf: the report \(--report\) must be a \.html"),
                          ("--report {out}/none/r.html", r"none: no such folder"),
                          ("-k", r"argument -k: expected one argument"),
                          ("--bogus", r"unrecognized arguments: --bogus")]:
        metrics = "" if "--metrics" in option else " --metrics NDCG@3"
        cases.append(Case("evaluate", option, "evaluate --train {d}/train.csv --test {d}/test.csv " + FACTORS
                          + metrics + " " + option, 2, error))
    cases += [
        Case("evaluate", "--out in a read-only folder", EVAL + " --out {out}/r.csv", 2, r"the folder is not writable",
             setup="unwritable"),
        Case("evaluate", "--device gpu without a GPU", EVAL + " --device gpu", 3,
             r"not available: device='gpu' needs a usable GPU", setup="no-gpu"),
        Case("evaluate", "--out names the --train file", "evaluate --train {out}/../in/train.csv --test "
             "{out}/../in/test.csv " + FACTORS + " --metrics NDCG@3 --out {out}/../in/train.csv", 2,
             r"train\.csv: the per-user results \(--out\) would overwrite an input of this command \(--train\)",
             setup="copies"),
    ]
    return cases


def _split_cases():
    split = "split {d}/all.csv --out-dir {out}/s "
    cases = [Case("split", f"--method {m} {extra}".strip(), split + f"--method {m} {extra}", 0, check="split")
             for m, extra in [("leave-k-out", "-n 2"), ("last-n", ""), ("last-fraction", "--fraction 0.5"),
                              ("time-cutoff", "--cutoff 40"), ("time-cutoff", "--fraction 0.3"),
                              ("k-fold", "--folds 2"), ("recometrics-all", "--fraction 0.5"),
                              ("recometrics-joined", "--users-fraction 0.5")]]
    cases += [
        Case("split", "text timestamps, --cutoff as text", "split {d}/all_text_time.csv --out-dir {out}/s --method "
             "time-cutoff --cutoff 2024-01-02", 0, check="split"),
        Case("split", ".npz input, .mtx output", "split {d}/train.npz --out-dir {out}/s --method leave-k-out "
             "--format .mtx", 0, check="split"),
        Case("split", "CRLF and a BOM", "split {d}/test_bom.csv --out-dir {out}/s --method leave-k-out --min-train 0",
             0, check="split"),
        Case("split", "duplicate rows, --duplicates sum", "split {d}/all_duplicate.csv --out-dir {out}/s --method "
             "last-n --duplicates sum", 0, check="split_deduplicated"),
        Case("split", "ML-100k u.data with --time-col", "split {d}/u_all.data --out-dir {out}/s --method time-cutoff "
             "--fraction 0.3", 0, check="split"),
        Case("split", "--time-col names the time", "split {d}/all_when.csv --out-dir {out}/s --method last-n "
             "--time-col when", 0, check="split"),
        Case("split", "--out-dir created when its parent exists", split.replace("{out}/s", "{out}/new") +
             "--method last-n", 0),
    ]
    for option, error in [("-n 0", r"'-n' must be 1 or more; got 0"), ("-n -1", r"'-n' must be 1 or more"),
                          ("--fraction 0", r"'--fraction' must be strictly between 0 and 1"),
                          ("--fraction 1.5", r"'--fraction' must be strictly"),
                          ("--fraction nan", r"'--fraction' must be strictly"),
                          ("--fraction inf", r"'--fraction' must be strictly"),
                          ("--min-train -1", r"'--min-train' must be 0 or more"),
                          ("--seed -1", r"'--seed' must be 0 or more"),
                          ("--folds 1", r"'--folds' must be 2 or more")]:
        method = "k-fold" if "folds" in option else "last-fraction" if "fraction" in option else "leave-k-out"
        cases.append(Case("split", option, split + f"--method {method} {option}", 2, error))
    cases += [
        Case("split", "an option the method does not read", split + "--method last-n --cutoff 5", 2,
             r"'--cutoff' does not apply to --method last-n \(which takes -n, --min-train\); got --cutoff '5'"),
        Case("split", "--cutoff and --fraction", split + "--method time-cutoff --cutoff 5 --fraction 0.3", 2,
             r"--method time-cutoff takes '--cutoff' or '--fraction', not both; got --cutoff '5' and --fraction 0\.3"),
        Case("split", "a cutoff after every timestamp (no test rows)", split + "--method time-cutoff --cutoff 1e12", 2,
             r"all\.csv: the split gives no test interactions \(--method time-cutoff with these options\)"),
        Case("split", "timestamps partly numbers, partly text", "split {d}/time_mixed.csv --out-dir {out}/s --method "
             "time-cutoff --cutoff 50", 2, r"time_mixed\.csv, row 3 \(line 5\): the timestamp '2a' is not a number, "
             r"where 3 other rows' are"),
        Case("split", "--folds more than the users", split + "--method k-fold --folds 100", 2,
             r"all\.csv: .*at most the number of users"),
        Case("split", "--cutoff not a number", split + "--method time-cutoff --cutoff soon", 2,
             r"'--cutoff' must be a finite number"),
        Case("split", "--cutoff inf", split + "--method time-cutoff --cutoff inf", 2,
             r"'--cutoff' must be a finite number"),
        Case("split", "--cutoff nan", split + "--method time-cutoff --cutoff nan", 2,
             r"'--cutoff' must be a finite number"),
        Case("split", "--method bogus", split + "--method bogus", 2, r"argument --method: invalid choice"),
        Case("split", "--format .npz of a frame", split + "--method last-n --format .npz", 2,
             r"'--format' \.npz holds a matrix"),
        Case("split", "--format .parquet without pyarrow", split + "--method last-n --format .parquet", 3,
             r"pip install 'gpureco\[parquet\]'", setup="no-pyarrow"),
        Case("split", "time split of a matrix", "split {d}/train.npz --out-dir {out}/s --method last-n", 2,
             r"train\.npz: --method last-n splits by time, which a matrix \(\.npz, \.mtx\) does not hold"),
        Case("split", "time split without timestamps", "split {d}/test.csv --out-dir {out}/s --method last-n", 2,
             r"test\.csv: .*'timestamp'"),
        Case("split", "a missing timestamp", "split {d}/all_nan_time.csv --out-dir {out}/s --method last-n", 2,
             r"all_nan_time\.csv(, row 1 \(line 3\))?: "),
        Case("split", "duplicate (user, item) rows", "split {d}/all_duplicate.csv --out-dir {out}/s --method "
             "leave-k-out", 2, r"all_duplicate\.csv, row 1 \(line 3\): user 0, item 0 is in row 0 and again in row 1; "
             r".*--duplicates sum, last or max"),
        Case("split", "--out-dir under a missing folder", "split {d}/all.csv --out-dir {out}/no/such --method last-n",
             2, r"no: no such folder"),
        Case("split", "--out-dir is a file", "split {d}/all.csv --out-dir {d}/train.csv --method last-n", 2,
             r"train\.csv: no such folder \(a file has that name\)"),
        Case("split", "--out-dir read-only", split + "--method last-n", 2, r"the folder is not writable",
             setup="unwritable"),
    ]
    for name, error in [("missing.csv", r"missing\.csv: no such file"), ("empty.csv", r"empty\.csv: the file is empty"),
                        ("header_only.csv", r"header_only\.csv: no interactions to split"),
                        ("garbage.csv", r"garbage\.csv"), ("garbage.npz", r"garbage\.npz: cannot be read"),
                        ("garbage.mtx", r"garbage\.mtx: cannot be read"), ("test.txt", r"test\.txt: expected"),
                        ("missing_item.csv", r"missing_item\.csv, row 1 \(line 3\)"),
                        ("no_item.csv", r"no_item\.csv: no item column"),
                        ("test_empty.npz", r"test_empty\.npz: no interactions to split")]:
        cases.append(Case("split", f"input {name}", f"split {{d}}/{name} --out-dir {{out}}/s --method leave-k-out", 2,
                          error))
    cases.append(Case("split", "a split's file would be the input", "split {out}/../in/train.csv --out-dir {out}/../in "
                      "--method leave-k-out --min-train 0", 2, r"train\.csv: the split's train\.csv would overwrite an "
                      r"input of this command \(input\)", setup="copies"))
    return cases


def _compare_cases():
    cases = [
        Case("compare", "--out names one of the results", "compare {out}/../in/ra.csv {d}/rb.csv --out "
             "{out}/../in/ra.csv", 2, r"ra\.csv: the comparison table \(--out\) would overwrite an input of this "
             r"command \(results\)", setup="copies"),
        Case("compare", "same users in another order", "compare {d}/ra.csv {d}/rb.csv --out {out}/c.csv", 0,
             check="compare"),
        Case("compare", "a user only in one file", "compare {d}/ra.csv {d}/rb_more_users.csv --out {out}/c.csv", 0,
             check="compare"),
        Case("compare", "a column only in one file", "compare {d}/ra.csv {d}/rb_more_columns.csv --out {out}/c.csv",
             0, check="compare"),
        Case("compare", "an empty (NaN) metric", "compare {d}/ra.csv {d}/rb_nan_metric.csv --out {out}/c.csv", 0,
             check="compare"),
        Case("compare", "--report .md", "compare {d}/ra.csv {d}/rb.csv --report {out}/c.md", 0, check="report"),
    ]
    for name, error in [("rb_disjoint_users", r"ra\.csv and .*rb_disjoint_users\.csv: no user is in every file\.$"),
                        ("rb_text_users", r"no user is in every file \(the user ids are numbers in some files and "
                                          r"text in others\)"),
                        ("rb_other_metrics", r"no metric column is in every file"),
                        ("rb_no_user", r"rb_no_user\.csv: no 'user' column; compare pairs the users by id, never "
                                       r"by position"),
                        ("rb_text_metric", r"rb_text_metric\.csv, row 0 \(line 2\): column 'NDCG@3' holds 'good'"),
                        ("rb_inf_metric", r"rb_inf_metric\.csv, row 0 \(line 2\): column 'NDCG@3' holds inf;"),
                        ("rb_duplicate_user", r"rb_duplicate_user\.csv, row 1 \(line 3\): user 0 appears twice"),
                        ("rb_header_only", r"rb_header_only\.csv: no per-user results"),
                        ("empty", r"empty\.csv: the file is empty"), ("garbage", r"garbage\.csv"),
                        ("missing", r"missing\.csv: no such file"), ("first_row_long", r"first_row_long\.csv, line 2")]:
        cases.append(Case("compare", f"with {name}.csv", f"compare {{d}}/ra.csv {{d}}/{name}.csv", 2, error))
    cases += [
        Case("compare", "one file", "compare {d}/ra.csv", 2, r"at least two results files"),
        Case("compare", "the same file twice", "compare {d}/ra.csv {d}/ra.csv", 2,
             r"each results file needs its own non-empty name; got 'ra,ra'"),
        Case("compare", "--names of the wrong length", "compare {d}/ra.csv {d}/rb.csv --names a", 2,
             r"'--names' must give one name per results file"),
        Case("compare", "--names empty", "compare {d}/ra.csv {d}/rb.csv --names ,", 2, r"own non-empty name"),
        Case("compare", "--names repeated", "compare {d}/ra.csv {d}/rb.csv --names x,x", 2, r"own non-empty name"),
        Case("compare", "a .npy results file", "compare {d}/ra.csv {d}/A.npy", 2, r"A\.npy: expected a \.csv"),
        Case("compare", "--out .txt", "compare {d}/ra.csv {d}/rb.csv --out {out}/c.txt", 2,
             r"c\.txt: the comparison table \(--out\) must be"),
        Case("compare", "--out in a missing folder", "compare {d}/ra.csv {d}/rb.csv --out {out}/none/c.csv", 2,
             r"none: no such folder"),
        Case("compare", "--report read-only", "compare {d}/ra.csv {d}/rb.csv --report {out}/c.html", 2,
             r"not writable", setup="unwritable"),
        Case("compare", "Parquet without pyarrow", "compare {d}/ra.csv {d}/train.parquet", 3,
             r"pip install 'gpureco\[parquet\]'", setup="no-pyarrow"),
    ]
    return cases


def _demo_cases():
    demo = "demo --users 40 --items 30 "
    cases = [Case("demo", "smallest data", "demo --users 17 --items 17 -k 3 --no-report", 0),
             Case("demo", "--report .md", demo + "-k 3 --report {out}/d.md", 0, check="report")]
    for option, error in [("--users 0", r"--users and --items must be at least 17"),
                          ("--users -5", r"--users and --items must be at least 17"),
                          ("--items 16", r"--users and --items must be at least 17"),
                          ("--users 99999999999999999999", r"and at most 10,000,000"),
                          ("--items 100000000", r"and at most 10,000,000"),
                          ("--users many", r"argument --users: invalid int value: 'many'"),
                          ("-k 0", r"'-k' must be a cut-off from 1 to --items \(30\); got 0"),
                          ("-k -1", r"'-k' must be a cut-off from 1"), ("-k 31", r"'-k' must be a cut-off from 1"),
                          ("--seed -1", r"'--seed' must be 0 or more"),
                          ("--device tpu", r"--device must be auto, cpu, gpu or cuda:N .*; got 'tpu'"),
                          ("--report {out}/d.txt", r"d\.txt: the report must be a \.html"),
                          ("--report {out}/none/d.html", r"none: no such folder"),
                          ("--report ''", r"the report must be a \.html, \.htm or \.md file; got no suffix"),
                          ("--report {out}/d.html --no-report", r"--report .*d\.html and --no-report: give one of them")]:
        no_report = "" if "--report" in option else "--no-report "
        cases.append(Case("demo", option, demo + no_report + option, 2, error))
    cases += [Case("demo", "--device gpu without a GPU", demo + "--no-report --device gpu", 3,
                   r"not available: device='gpu' needs a usable GPU", setup="no-gpu"),
              Case("demo", "--report read-only", demo + "--report {out}/d.html", 2, r"not writable",
                   setup="unwritable")]
    return cases


CASES = _evaluate_cases() + _split_cases() + _compare_cases() + _demo_cases()


# --- the page --------------------------------------------------------------------------------------

def markdown(cases=CASES):
    """docs/robustness-cli.md: the cases by command and outcome, with their counts."""
    outcome = {0: "accepted (exit 0)", 2: "refused: usage or input error (exit 2)",
               3: "refused: not available here (exit 3)"}
    codes = Counter(c.code for c in cases)
    known = [c for c in cases if c.xfail]
    lines = ["# The command line under hostile input", "",
             "Generated from `tests/cli/hostile_cli_cases.py` by "
             "`python tests/cli/hostile_cli_cases.py > docs/robustness-cli.md`; "
             "`tests/cli/test_hostile_cli.py` runs every case and checks that this page is up to date.", "",
             "Each case runs one command in-process on tiny files. A refused case must print exactly one line on "
             "stderr, matching the expected pattern (which names the file, row or option at fault), with no "
             "traceback, and leave no output file behind; an accepted case must exit 0, and where it produces "
             "numbers they must equal the same evaluation done through the Python API on the clean data. "
             "Exit codes are those of [the command line](cli.md#exit-codes).", "",
             f"**{len(cases)} cases**: {codes[0]} accepted (exit 0), {codes[2]} refused with exit 2, {codes[3]} "
             f"refused with exit 3 (a missing optional package or GPU, or a metric of the Python API's); 0 tracebacks, "
             "0 exit 1. "
             f"Known failures (expected to fail until fixed): {len(known)}.", "",
             "| command | exit 0 | exit 2 | exit 3 | cases |", "|---|---:|---:|---:|---:|"]
    commands = list(dict.fromkeys(c.command for c in cases))
    for command in commands:
        mine = Counter(c.code for c in cases if c.command == command)
        lines.append(f"| `{command}` | {mine[0]} | {mine[2]} | {mine[3]} | {sum(mine.values())} |")
    for command in commands:
        lines += ["", f"## `gpureco {command}`"]
        for code in (0, 2, 3):
            mine = [c for c in cases if c.command == command and c.code == code]
            if not mine:
                continue
            lines += ["", f"### {outcome[code]}: {len(mine)} cases", ""]
            lines += [f"- `{c.name}`" + (f" (known failure: {c.xfail})" if c.xfail else "") for c in mine]
    if known:
        lines += ["", "## Known failures", ""] + [f"- `{c.command}` `{c.name}`: {c.xfail}" for c in known]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
