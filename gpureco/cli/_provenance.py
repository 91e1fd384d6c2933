"""Provenance: what produced a file of the command line (the data's content hashes, the split, the model's files,
the options, the versions), and what differs between the provenances of two results files."""
from __future__ import annotations

import datetime
import json
import platform
import subprocess
from pathlib import Path

import numpy as np

from .. import __version__
from ..data import _io

SPLIT_RECORD = "split.json"  # written by `gpureco split` beside its files
# what makes two results files' test data the same: the test file's bytes, how its rows were read and combined,
# and the rows left out; the other keys that differ are said, not refused
TEST_DATA = ("data.test.sha256", "data.columns", "data.duplicates", "data.test.left_out")
NOTED = ("data.train.sha256", "split.method", "split.seed", "options.gain", "options.device", "options.convention",
         "options.ties", "options.relevance_threshold")


def file_record(path, **extra):
    """{path, sha256, ...} of a file."""
    return {"path": str(Path(path).resolve()), "sha256": _io.sha256(path), **extra}


def environment(command):
    """The versions, the gpureco commit (from a git checkout of gpureco), the command and the time."""
    return {"gpureco": __version__, "commit": _commit(), "command": command,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "python": platform.python_version(), "numpy": np.__version__, "platform": platform.platform()}


def _commit():
    package = Path(__file__).resolve().parents[1]
    try:
        done = subprocess.run(["git", "-C", str(package), "rev-parse", "--show-toplevel", "HEAD"], capture_output=True,
                              text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = done.stdout.split()
    # only gpureco's own repository: an installed copy inside another repository must not take that one's commit
    return lines[1] if done.returncode == 0 and len(lines) == 2 and Path(lines[0]) == package.parent else None


def split_of(test_path):
    """The record of the `gpureco split` that wrote `test_path` (its split.json lists the file's SHA-256), or
    None."""
    digest = _io.sha256(test_path)
    for folder in (Path(test_path).resolve().parent, Path(test_path).resolve().parent.parent):
        record = folder / SPLIT_RECORD
        if record.is_file():
            try:
                split = json.loads(record.read_text(encoding="utf-8"))
            except ValueError:
                continue
            if isinstance(split, dict) and digest in split.get("outputs", {}).values():
                return {key: split.get(key) for key in ("method", "options", "seed", "input")} | {
                    "record": str(record)}
    return None


def flat(provenance, prefix=""):
    """{"data.test.sha256": ..., ...}: the provenance's leaves by dotted key."""
    out = {}
    for key, value in (provenance or {}).items():
        if isinstance(value, dict) and value:
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def differences(provenances, names, keys):
    """['data.test.sha256: a 1f2e3d4c5b6a, b 0a1b2c3d4e5f', ...] for the `keys` (or their sub-keys) whose values
    differ between the provenances."""
    flats = [flat(p) for p in provenances]
    found = sorted({k for f in flats for k in f if any(k == key or k.startswith(key + ".") for key in keys)})
    out = []
    for key in found:
        values = [f.get(key) for f in flats]
        if any(value != values[0] for value in values):
            shown = ", ".join(f"{name} {_short(value)}" for name, value in zip(names, values))
            out.append(f"{key}: {shown}")
    return out


def _short(value):
    text = "none" if value is None else str(value)
    return text[:12] if len(text) == 64 and all(c in "0123456789abcdef" for c in text) else text
