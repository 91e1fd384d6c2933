"""Interaction files as other tools write them (MovieLens, RecBole, LensKit), the column options, and the
duplicate policies of combine_duplicates."""
import pandas as pd
import pytest

from gpureco.data import _io
from gpureco.data._interactions import RowError, combine_duplicates

LAYOUTS = {  # file name: (content, expected canonical columns)
    "u.data": ("196\t242\t3\t881250949\n186\t302\t3\t891717742\n", ["user", "item", "value", "timestamp"]),
    "ratings.dat": ("1::1193::5::978300760\n1::661::3::978302109\n", ["user", "item", "value", "timestamp"]),
    "ratings.csv": ("userId,movieId,rating,timestamp\n196,242,3.0,881250949\n186,302,3.0,891717742\n",
                    ["user", "item", "value", "timestamp"]),
    "ml-100k.inter": ("user_id:token\titem_id:token\trating:float\ttimestamp:float\n196\t242\t3\t881250949\n"
                      "186\t302\t3\t891717742\n", ["user", "item", "value", "timestamp"]),
    "lenskit.csv": ("user,item,rating,timestamp\n196,242,3,881250949\n186,302,3,891717742\n",
                    ["user", "item", "value", "timestamp"]),
    "replay.tsv": ("user_id\titem_id\trating\n196\t242\t3\n186\t302\t3\n", ["user", "item", "value"]),
}


@pytest.mark.parametrize("name", LAYOUTS)
def test_layouts_are_read_as_they_come(name, tmp_path):
    content, columns = LAYOUTS[name]
    (tmp_path / name).write_text(content)
    frame = _io.read_interactions(tmp_path / name)
    assert list(frame.columns) == columns
    assert frame["user"].tolist()[0] in (196, 1) and len(frame) == 2


def test_column_options_and_separator(tmp_path):
    (tmp_path / "x.csv").write_text("who;what;stars;when;note\na;b;4;10;hi\n")
    frame = _io.read_interactions(tmp_path / "x.csv", _io.Columns("who", "what", "stars", "when"), sep=";")
    assert list(frame.columns) == ["user", "item", "value", "timestamp", "note"]
    with pytest.raises(_io.InputError, match=r"x\.csv: --value-col 'rating' is not a column; got columns 'who'"):
        _io.read_interactions(tmp_path / "x.csv", _io.Columns("who", "what", "rating"), sep=";")


def test_headerless_rows_are_numbered_from_line_1(tmp_path):
    (tmp_path / "u.data").write_text("1\t2\t3\t4\n")
    (tmp_path / "a.csv").write_text("user,item\n1,2\n")
    assert _io.where(tmp_path / "u.data", 0).endswith("row 0 (line 1)")
    assert _io.where(tmp_path / "a.csv", 0).endswith("row 0 (line 2)")


FRAME = pd.DataFrame({"user": [1, 1, 2, 1], "item": [5, 5, 6, 5], "value": [1.0, 3.0, 2.0, 2.0],
                      "timestamp": [3, 1, 2, 2]})


@pytest.mark.parametrize("policy, value, timestamp", [("sum", 6.0, 3), ("last", 1.0, 3), ("max", 3.0, 1)])
def test_duplicate_policies(policy, value, timestamp):
    out = combine_duplicates(FRAME, policy)
    assert out["user"].tolist() == [1, 2] and out["item"].tolist() == [5, 6]  # the frame's order
    row = out.iloc[0]
    assert (row["value"], row["timestamp"]) == (value, timestamp)  # last: the latest timestamp, not the last row


def test_sum_without_values_counts_the_rows():
    out = combine_duplicates(FRAME[["user", "item"]], "sum")
    assert out.set_index(["user", "item"])["value"].to_dict() == {(2, 6): 1.0, (1, 5): 3.0}


def test_duplicates_error_names_both_rows():
    with pytest.raises(RowError, match=r"user 1, item 5 is in row 0 and again in row 1; each \(user, item\) pair") as e:
        combine_duplicates(FRAME, "error")
    assert e.value.row == 1
    assert combine_duplicates(FRAME.iloc[[0, 2]], "error") is not None  # no duplicate: the frame as it is


@pytest.mark.parametrize("header", [True, False])
def test_ids_stay_as_written_unless_they_are_numbers_as_they_print(tmp_path, header):
    """'007' and '7' are two ids (read as numbers they were one: a user's rows merged with another's); ids written
    as numbers print (7, -3, 1.0) stay numbers, so that they match a model's rows."""
    rows = "007,1,1\n7,2,1\n0042,3,1\n42,4,1\n-0,5,1\n0,6,1\n"
    (tmp_path / "ids.csv").write_text(("user,item,value\n" if header else "") + rows)
    frame = _io.read_interactions(tmp_path / "ids.csv")
    assert frame["user"].tolist() == ["007", "7", "0042", "42", "-0", "0"]
    assert frame["item"].tolist() == [1, 2, 3, 4, 5, 6]
    (tmp_path / "numbers.csv").write_text("userId,movieId,rating\n7,-3,1\n1,2,5\n")
    frame = _io.read_interactions(tmp_path / "numbers.csv")
    assert frame["user"].dtype.kind == frame["item"].dtype.kind == "i" and frame["item"].tolist() == [-3, 2]
    (tmp_path / "floats.csv").write_text("user,item\n0.0,1\n2.5,2\n")
    assert _io.read_interactions(tmp_path / "floats.csv")["user"].tolist() == [0.0, 2.5]
    (tmp_path / "named.csv").write_text("who,what\n01,1\n1,2\n")  # the columns named by the options: text too
    frame = _io.read_interactions(tmp_path / "named.csv", _io.Columns(user="who", item="what"))
    assert frame["user"].tolist() == ["01", "1"]
