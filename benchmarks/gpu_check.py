#!/usr/bin/env python3
"""Everything a GPU machine must prove, in one command, without pip or a network.

Steps (--steps, in this order by default: the most telling first, since a device session
is rare, has 15 minutes in all, and one command may run at most 10 minutes: the numbers'
correctness, then the speed the issue is about):

- build: the compiled parts of the engine, in place (python3 setup.py build_ext --inplace);
- gpu_tests: every test marked `gpu` (pytest -m gpu), the determinism step's cases among them;
- bench: benchmarks/bench_gpu.py (default: 10,000 users x 1,000,000 items x 128 factors;
  FP32 tiles, TF32, fused, the cuBLAS floor, torch and CuPy pipelines, tile shapes);
- commits (only when named in --steps): benchmarks/bench_commits.py with --commits-args, the
  same calls timed at several commits, each commit's numbers compared with the first's: a
  session's first measurement of changes made without a GPU, one change at a time;
- gpu_tests_fused: the GPU tests with the fused kernels on (_gpu.FUSED = True);
- ncu: Nsight Compute on one launch each of rank_tile_f32 and fused_rank_f32 (speed of
  light, warp states, occupancy) over a 2,000 x 1,000,000 x 128 problem: the readings the
  speed log's changes were predicted from;
- sweep: benchmarks/bench_gpu_sweep.py (100k, 1M and 10M items, K = 10, 100, 1,000 in the
  three modes, training-loop sizes, top_k against torch);
- training_loop: benchmarks/bench_training_loop.py on the GPU where torch is installed;
- suite: the whole test suite (its CPU part is CI's too);
- determinism: tests/engine/test_determinism.py's GPU cases alone (the same call 5 times;
  batch sizes 1, 7, 33 and all; shuffled users; given scores; results left on the device:
  bit-identical to each other and to the CPU), a quick check by itself (--steps
  build,determinism); by default last, as gpu_tests has run them.

Each step's time limit is what is left of --budget (seconds, default 560: under the device
tool's 10 minutes a command), and at most MAX_SECONDS of its own; a step that cannot start
with its minimum left is recorded as skipped, for the next call (--steps). The results
file, <out>/gpu_check_<date>_<device>.md (and .json: device, driver, CUDA, library versions,
commit, each step's summary), is rewritten after every step, so a command cut short still
leaves what it did: point --out at the device tool's $OUT.

    python3 benchmarks/gpu_check.py                                   # from the repository root
    python3 benchmarks/gpu_check.py --out "$OUT" --budget 560         # on the device tool
    python3 benchmarks/gpu_check.py --out "$OUT" --workers 8          # GPU tests on 8 pytest-xdist workers
    python3 benchmarks/gpu_check.py --out "$OUT" --steps build,sweep,suite   # a second call
    python3 benchmarks/gpu_check.py --bench-args="--users 2000 --items 200000"

Exit code 0 only when every step that ran passed. The commit comes from the GPURECO_COMMIT
environment variable where set (on the device tool: its copy's .git is the session's first
commit), else from git.
"""
import argparse
import datetime as dt
import importlib.util
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(command, env=None, timeout=None):
    """(exit code, output) of a command run from the repository root, echoed as it goes."""
    print("$", " ".join(shlex.quote(c) for c in command), flush=True)
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    except OSError as error:  # the program is missing (ncu, say)
        print(error, flush=True)
        return 127, str(error)
    except subprocess.TimeoutExpired as error:
        output = (error.stdout or b"").decode() if isinstance(error.stdout, bytes) else (error.stdout or "")
        print(output[-4000:], f"\n(timed out after {timeout} s)", flush=True)
        return 124, output + f"\n(timed out after {timeout} s)"
    output = done.stdout + done.stderr
    print(output[-4000:], flush=True)
    return done.returncode, output


def summary_line(output):
    """pytest's closing line ('12 passed, 1 failed in 3.2s'), or the last line."""
    lines = [line.strip("= ") for line in output.strip().splitlines() if line.strip()]
    found = [line for line in lines if re.search(r"\d+ (passed|failed|error)", line)]
    return found[-1] if found else (lines[-1] if lines else "")


def commit():
    """GPURECO_COMMIT where set (the device tool's copy of a working tree carries a .git whose
    HEAD is the session's first commit, not the one the tree holds), else git's."""
    if os.environ.get("GPURECO_COMMIT"):
        return os.environ["GPURECO_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    return out or "unknown"


def environment(env):
    """Device, driver, CUDA and library versions, as the Python that runs the tests sees them."""
    probe = ("import json, platform, numpy, scipy, pandas\n"
             "info = dict(python=platform.python_version(), numpy=numpy.__version__, scipy=scipy.__version__,"
             " pandas=pandas.__version__)\n"
             "try:\n"
             "    import cupy\n"
             "    info['cupy'] = cupy.__version__\n"
             "    rt = cupy.cuda.runtime\n"
             "    name = rt.getDeviceProperties(0)['name']\n"
             "    info['device'] = name.decode() if isinstance(name, bytes) else str(name)\n"
             "    info['driver'] = rt.driverGetVersion(); info['cuda_runtime'] = rt.runtimeGetVersion()\n"
             "except Exception as error:\n"
             "    info['device'] = f'none ({type(error).__name__}: {error})'\n"
             "print(json.dumps(info))\n")
    code, output = run([sys.executable, "-c", probe], env=env)
    info = json.loads(output.strip().splitlines()[-1]) if code == 0 else {"device": f"unknown ({output[-300:]})"}
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
        info["nvidia_smi"] = smi
    except (OSError, subprocess.TimeoutExpired):
        pass
    return info


STEPS = ("build", "gpu_tests", "bench", "commits", "gpu_tests_fused", "ncu", "sweep", "training_loop", "suite",
         "determinism")
DEFAULT_STEPS = tuple(step for step in STEPS if step != "commits")  # commits: only when named, with --commits-args
MIN_SECONDS = {"build": 30, "determinism": 30, "gpu_tests": 60, "gpu_tests_fused": 60, "bench": 120, "commits": 90,
               "ncu": 60, "sweep": 150, "training_loop": 45, "suite": 180}  # a step starts only with this much left
# and runs at most this long, so that one slow step (the GPU tests compiling every kernel, say) cannot
# take the whole budget from the bench behind it: a device session has 15 minutes in all
MAX_SECONDS = {"build": 150, "determinism": 120, "gpu_tests": 180, "gpu_tests_fused": 180, "bench": 240, "ncu": 150,
               "sweep": 300, "training_loop": 120}
NCU_KERNELS = ("rank_tile_f32", "fused_rank_f32", "fused_rank_tf32")  # bench_gpu runs the fused kernel in its fused timing
# what the speed log's predictions rest on: speed of light, stall reasons, occupancy, the issued
# instruction mix, and the shared-memory table (wavefronts and bank conflicts of loads, stores and
# atomics: the rank kernels' counts are ATOMS.POPC.INC, bench_bands.py); only those this ncu lists are asked for, so that a missing one cannot fail the step
NCU_SECTIONS = ("SpeedOfLight", "WarpStateStats", "Occupancy", "LaunchStats", "InstructionStats",
                "MemoryWorkloadAnalysis_Tables")


def ncu_sections():
    """NCU_SECTIONS less those that `ncu --list-sections` does not list (all of them where it lists none)."""
    code, output = run(["ncu", "--list-sections"], timeout=20)
    listed = set(re.findall(r"\b[A-Za-z_]+\b", output)) if code == 0 else set()
    return [s for s in NCU_SECTIONS if s in listed] or list(NCU_SECTIONS[:4])


def pytest_step(env, timeout, *args, fused=False, workers=0):
    """(ok, summary, failures, tests passed, output) of pytest over args in a fresh process (fused:
    _gpu.FUSED on, by tests/conftest.py's GPURECO_TEST_FUSED; workers: pytest-xdist's -n, where
    it is installed: the kernels' run-time compilation spread over the cores)."""
    parallel = ["-n", str(workers)] if workers > 1 and importlib.util.find_spec("xdist") else []
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", *parallel, *args]
    rc, output = run(command, env={**env, "GPURECO_TEST_FUSED": "1" if fused else "0"}, timeout=timeout)
    failures = [line for line in output.splitlines() if line.startswith(("FAILED", "ERROR"))]
    passed = len(re.findall(r"^PASSED ", output, flags=re.M))
    return rc == 0, summary_line(output), failures, passed, output


def table_of(output, starts=("|",)):
    return "\n".join(line for line in output.splitlines() if line.startswith(starts) or "GEMM" in line
                     or "workspace" in line)


def run_step(name, env, timeout, args, bench_out):
    """{'ok', 'summary'[, 'failures']} of one step."""
    if name == "build":
        code, output = run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], env=env, timeout=timeout)
        return {"ok": code == 0, "summary": "built in place" if code == 0 else output[-2000:]}
    if name in ("determinism", "gpu_tests", "gpu_tests_fused", "suite"):
        selection = {"determinism": ["-m", "gpu", "tests/engine/test_determinism.py"],
                     "gpu_tests": ["-m", "gpu", "tests"], "gpu_tests_fused": ["-m", "gpu", "tests"],
                     "suite": ["tests"]}[name]
        ok, summary, failures, passed, output = pytest_step(env, timeout, *selection, "--tb=short",
                                                            fused=name == "gpu_tests_fused",
                                                            workers=0 if name == "suite" else args.workers)
        if name != "suite":  # GPU cases alone: none passed (no GPU seen) proves nothing
            ok, summary = ok and passed > 0, f"{summary}; GPU cases passed: {passed}"
        if not ok:  # the whole output, for the tracebacks (the device tool brings back at most 8 files)
            bench_out.mkdir(parents=True, exist_ok=True)
            (bench_out / f"gpu_check_{name}.log").write_text(output)
            summary += f"; output in gpu_check_{name}.log"
        return {"ok": ok, "summary": summary, "failures": failures}
    if name == "bench":
        code, output = run([sys.executable, "benchmarks/bench_gpu.py", "--out", str(bench_out),
                            *shlex.split(args.bench_args)], env=env, timeout=timeout)
        return {"ok": code == 0, "summary": table_of(output) if code == 0 else output[-2000:]}
    if name == "commits":  # its own budget ends it in time to write its table (no process starts after it)
        code, output = run([sys.executable, "benchmarks/bench_commits.py", "--out", str(bench_out),
                            "--budget", str(max(1, timeout - 60)), *shlex.split(args.commits_args)],
                           env=env, timeout=timeout)
        return {"ok": code == 0, "summary": table_of(output) if "| call |" in output else output[-2000:]}
    if name == "ncu":
        outputs, codes = [], []
        sections = [a for s in ncu_sections() for a in ("--section", s)]
        for kernel in NCU_KERNELS:  # one launch of each, in its own run (ncu counts launches over all names)
            with tempfile.TemporaryDirectory() as scratch:  # the profiled run's own results are not kept
                code, output = run(["ncu", "--kernel-name", kernel, "--launch-count", "1", *sections, sys.executable,
                                    "benchmarks/bench_gpu.py", "--users", "2000", "--repeats", "1", "--tile-shapes", "",
                                    "--out", scratch],
                                   env=env, timeout=max(1, (timeout - 25) // len(NCU_KERNELS)))
            codes.append(code)
            outputs.append(f"# ncu --kernel-name {kernel} (exit {code})\n\n{output}")
        bench_out.mkdir(parents=True, exist_ok=True)
        report = bench_out / f"ncu_{dt.date.today().isoformat()}.txt"
        report.write_text("\n\n".join(outputs))
        ok = not any(codes)
        return {"ok": ok, "summary": f"report in {report.name}" if ok else outputs[-1][-2000:]}
    if name == "sweep":
        code, output = run([sys.executable, "benchmarks/bench_gpu_sweep.py", "--out", str(bench_out),
                            *shlex.split(args.sweep_args)], env=env, timeout=timeout)
        return {"ok": code == 0, "summary": table_of(output, ("|", "Targets")) if code == 0 else output[-2000:]}
    if name == "training_loop":  # the Evaluator's share of a training epoch on the GPU (needs torch)
        if importlib.util.find_spec("torch") is None:
            return {"ok": True, "summary": "skipped: torch is not installed"}
        with tempfile.TemporaryDirectory() as scratch:  # its table goes into this check's file: the device
            code, output = run([sys.executable, "benchmarks/bench_training_loop.py", "--device", "gpu", "--out",
                                scratch], env=env, timeout=timeout)  # tool brings back at most 8 files
        return {"ok": code == 0, "summary": table_of(output) if code == 0 else output[-2000:]}
    raise ValueError(f"unknown step {name!r}; the steps are {', '.join(STEPS)}")


def write_record(bench_out, info, steps, argv, started):
    """The results file, <out>/gpu_check_<date>_<device>.md and .json, as the steps stand."""
    date = dt.date.today().isoformat()
    device = str(info.get("device", "none"))
    slug = "no-gpu" if device.startswith(("none", "unknown")) else re.sub(r"[^A-Za-z0-9]+", "-", device).strip("-")[:40]
    ran = [step for step in steps.values() if not step.get("skipped")]
    record = {"date": date, "commit": commit(), "host": f"{platform.node()} ({os.cpu_count()} cores)",
              "command": "python3 " + " ".join(shlex.quote(a) for a in [sys.argv[0], *(argv or sys.argv[1:])]),
              "seconds": round(time.monotonic() - started, 1), "environment": info, "steps": steps,
              "ok": all(step["ok"] for step in ran)}
    lines = [f"# GPU check {date}: {'passed' if record['ok'] else 'FAILED'} ({len(ran)} of {len(steps)} steps ran, "
             f"{record['seconds']} s)", "",
             f"Device: {info.get('device')}; nvidia-smi: {info.get('nvidia_smi', 'n/a')}",
             f"Driver {info.get('driver')}, CUDA runtime {info.get('cuda_runtime')}, CuPy {info.get('cupy')}, "
             f"NumPy {info.get('numpy')}, SciPy {info.get('scipy')}, pandas {info.get('pandas')}, "
             f"Python {info.get('python')}", f"Commit {record['commit']}; command `{record['command']}`", ""]
    for name, step in steps.items():
        state = "skipped" if step.get("skipped") else "ok" if step["ok"] else "FAILED"
        lines += [f"## {name}: {state}" + (f" ({step['seconds']} s)" if "seconds" in step else ""), "",
                  step["summary"], ""]
        lines += [f"- {failure}" for failure in step.get("failures", [])]
    bench_out.mkdir(parents=True, exist_ok=True)
    stem = bench_out / f"gpu_check_{date}_{slug}"
    stem.with_suffix(".json").write_text(json.dumps(record, indent=2))
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    return record, lines, stem


def main(argv=None):
    started = time.monotonic()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--steps", default=",".join(DEFAULT_STEPS), help=f"comma-separated, of: {', '.join(STEPS)}")
    parser.add_argument("--budget", type=float, default=560.0, help="seconds for the whole command")
    parser.add_argument("--workers", type=int, default=0,
                        help="pytest-xdist workers for the GPU test steps, where xdist is installed (0: none)")
    parser.add_argument("--bench-args", default="", help="arguments for bench_gpu.py")
    parser.add_argument("--sweep-args", default="", help="arguments for bench_gpu_sweep.py")
    parser.add_argument("--commits-args", default="--commits HEAD", help="arguments for bench_commits.py "
                        "(the commits step), e.g. --commits 08b7a88,HEAD --calls fp32,topk1000")
    args = parser.parse_args(argv)
    chosen = [step.strip() for step in args.steps.split(",") if step.strip()]
    unknown = sorted(set(chosen) - set(STEPS))
    if unknown:
        parser.error(f"unknown step(s) {', '.join(unknown)}; the steps are {', '.join(STEPS)}")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "PYTHONUNBUFFERED": "1"}
    bench_out = Path(args.out)
    info = environment(env)
    steps = {}
    for name in [step for step in STEPS if step in chosen]:
        left = args.budget - (time.monotonic() - started)
        if left < MIN_SECONDS[name]:
            steps[name] = {"ok": False, "skipped": True,
                           "summary": f"skipped: {left:.0f} s of the {args.budget:.0f} s budget left, "
                                      f"{MIN_SECONDS[name]} s needed (run it with --steps {name})"}
        else:
            begun = time.monotonic()
            steps[name] = run_step(name, env, max(1, int(min(left - 5, MAX_SECONDS.get(name, left)))), args, bench_out)
            steps[name]["seconds"] = round(time.monotonic() - begun, 1)
        record, lines, stem = write_record(bench_out, info, steps, argv, started)
    print("\n".join(lines))
    print(f"written: {stem}.md and .json")
    return 0 if record["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
